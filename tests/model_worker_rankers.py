"""Fake rankers for tests/test_server_model_worker.py, loaded in the model
worker's child by ``module:function`` (``ModelWorker(factory=...)``), each
called with the name of the ranker the worker was asked for
(``ModelWorker.ranker``, the ``model.tier`` setting's)."""

from __future__ import annotations

import os
import time


class Reversed:
    """The heuristic's scores negated: the heuristic's order, reversed."""

    name = "reversed"

    def score(self, ctx, steps, target):
        from leir.tools.ranking import HEURISTIC

        return [(-s, ("reversed",)) for s, _ in HEURISTIC.score(ctx, steps, target)]

    def explain(self, ctx, step, target):
        return f"written for {step.key}"


class Hangs:
    name = "hangs"

    def score(self, ctx, steps, target):
        time.sleep(3600)


class Crashes:
    name = "crashes"

    def score(self, ctx, steps, target):
        os._exit(3)


def reversed_ranker(name: str):
    return Reversed()


def named_ranker(name: str):
    """``Reversed`` under the name the worker asked for: ``ModelWorker.active`` tells which it was."""
    ranker = Reversed()
    ranker.name = f"asked for {name}"
    return ranker


def hanging_ranker(name: str):
    return Hangs()


def crashing_ranker(name: str):
    return Crashes()


def missing_model(name: str):
    """What ``load_model_ranker`` returns when no model is installed."""
    from leir.tools.ranking import load_ranker

    return load_ranker("no-such-ranker")


def model_in_directory(name: str):
    """The model saved in the directory ``name`` (``ModelRanker.load``): the
    child starts from a forkserver that keeps the environment it started
    with, so a test that needs a model of its own names its directory here
    rather than in ``LEIR_MODEL_DIR``."""
    from leir_models.lm.ranker import ModelRanker

    return ModelRanker.load(name)

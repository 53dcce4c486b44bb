"""Fake rankers for tests/test_server_model_worker.py, loaded in the model
worker's child by ``module:function`` (``ModelWorker(factory=...)``)."""

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


def reversed_ranker():
    return Reversed()


def hanging_ranker():
    return Hangs()


def crashing_ranker():
    return Crashes()


def missing_model():
    """What ``load_model_ranker`` returns when no model is installed."""
    from leir.tools.ranking import load_ranker

    return load_ranker("no-such-ranker")

"""The ranking seam (``leir.tools.ranking``): the heuristic is one ``Ranker``; any
other ranker given to ``rank``, ``suggest`` or ``optimize`` decides the order
in which steps are offered and tried, with its own facts."""

from __future__ import annotations

from leir.bridge.document import load_leir
from leir.tools.optimize import optimize
from leir.tools.ranking import HEURISTIC, Ranker, rank, score_step
from leir.tools.suggest import suggest
from leir.transforms.base import Context
from test_optimize import MATMUL, FakeMeasurer


class Prefers:
    """Scores the steps of one transformation first, every other step 1."""

    def __init__(self, step_id: str):
        self.name = f"prefers {step_id}"
        self.step_id = step_id
        self.asked: list[int] = []

    def score(self, ctx, steps, target):
        self.asked.append(len(steps))
        return [(100.0, (f"{self.name}",)) if s.id == self.step_id else (1.0, ()) for s in steps]


def test_the_heuristic_is_a_ranker_scoring_as_score_step():
    assert isinstance(HEURISTIC, Ranker)
    analysis = load_leir(MATMUL).analysis
    ctx = Context.of(analysis)
    ranked = rank(analysis)
    assert ranked and ranked == rank(analysis, ranker=HEURISTIC)
    assert [(r.score, r.facts) for r in ranked] == [score_step(ctx, r.step, "llvm") for r in ranked]


def test_another_ranker_decides_the_order_and_the_facts():
    analysis = load_leir(MATMUL).analysis
    heuristic_first = rank(analysis)[0].step.id
    other = "reorder" if heuristic_first != "reorder" else "split"
    ranker = Prefers(other)

    ranked = rank(analysis, ranker=ranker)

    assert ranker.asked == [len(ranked)]
    first = [r for r in ranked if r.step.id == other]
    assert first and ranked[:len(first)] == first
    assert all(r.facts == (f"prefers {other}",) for r in first)


def test_suggest_scores_with_the_ranker_it_is_given():
    ranker = Prefers("unroll")
    found = suggest(MATMUL, "leir", None, ranker=ranker)
    assert found[0].step.id == "unroll" and found[0].facts == ("prefers unroll",)
    assert suggest(MATMUL, "leir", None)[0].step.id != "unroll"


def test_optimize_tries_the_steps_in_the_rankers_order():
    measurer = FakeMeasurer()
    ranker = Prefers("unroll")
    optimize(load_leir(MATMUL).analysis, steps=1, budget=4, measurer=measurer, ranker=ranker)
    # The start, then the ranker's favourite (an unrolled loop: "U^" in its text).
    assert ranker.asked and len(measurer.calls) >= 2
    assert "U^" in measurer.calls[1] and "U^" not in measurer.calls[0]

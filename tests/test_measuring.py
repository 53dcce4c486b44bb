"""``leir.tools.measuring``: the plan that measures a program and then its top next
steps (watch mode and the server's auto-measure both follow it), and the
engine-backed measurer's lookup, recording and submission, with stand-ins
for the engine (nothing is built here)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

import pytest

from leir.errors import LeirError
from leir.footprint import MemoryBudgetExceeded
from leir.tools.measuring import REFUSED, EngineMeasurer, MeasuredLookup, Measurer, TopStepsPlan


@dataclass
class M:
    """A measurement as the engine returns it."""

    median_ms: float | None
    error: str | None = None
    cached: bool = False


class Recorder(TopStepsPlan):
    """A plan over named programs: a step "s" produces the program "s'";
    ``cached`` answers lookups, ``refuse`` and ``fail`` make a submission
    raise, ``not_applicable`` and ``wrong`` make apply and verify say no."""

    def __init__(self, budget=None, cached=(), refuse=(), fail=(), not_applicable=(), wrong=(), known=(),
                 stale_after=None):
        super().__init__(None, budget)
        self.cached, self.refuse, self.fail = dict(cached), set(refuse), set(fail)
        self.not_applicable, self.wrong, self.known_steps = set(not_applicable), set(wrong), set(known)
        self.stale_after = stale_after  # steps taken before the program "changes"
        self.taken = 0
        self.events: list[tuple] = []
        self.submissions: dict[str, Future] = {}

    def current(self):
        return self.stale_after is None or self.taken < self.stale_after

    def known(self, step):
        return step in self.known_steps

    def apply(self, step):
        self.taken += 1
        self.events.append(("apply", step))
        return None if step in self.not_applicable else step + "'"

    def verify(self, step, after):
        self.events.append(("verify", step))
        return step not in self.wrong

    def label(self, step):
        return "program" if step is None else step

    def lookup(self, program):
        ms = self.cached.get(program)
        return None if ms is None else M(ms, cached=True)

    def submit(self, program, label):
        if program in self.refuse:
            raise MemoryBudgetExceeded(f"{program} needs more memory than the budget")
        if program in self.fail:
            raise LeirError(f"{program} cannot be submitted")
        self.events.append(("submit", label))
        future = Future()
        self.submissions[program] = future
        return future

    def status(self, target, status, latency_ms=None):
        self.events.append(("status", target, status, latency_ms))


def statuses(plan):
    return [e[1:] for e in plan.events if e[0] == "status"]


def test_the_program_first_then_each_step_applied_verified_and_measured_in_order():
    plan = Recorder()
    plan.run("p", ["a", "b"])

    assert [e[:2] for e in plan.events if e[0] != "status"] == [
        ("submit", "program"), ("apply", "a"), ("verify", "a"), ("submit", "a"), ("apply", "b"), ("verify", "b"),
        ("submit", "b")]
    assert statuses(plan) == [(None, "measuring", None), ("a", "measuring", None), ("b", "measuring", None)]
    plan.submissions["a'"].set_result(M(2.5))
    plan.submissions["p"].set_result(M(4.0, cached=True))
    plan.submissions["b'"].set_result(M(None, error="crashed (signal 11) while timing"))
    assert statuses(plan)[3:] == [("a", "measured", 2.5), (None, "cached", 4.0),
                                  ("b", "failed: crashed (signal 11) while timing", None)]


def test_the_budget_counts_new_measurements_only():
    # The program and b' are cached (free); a' and c' are measured; the
    # budget of 2 then stops d' before it is even verified.
    plan = Recorder(budget=2, cached={"p": 4.0, "b'": 3.0})
    plan.run("p", ["a", "b", "c", "d"])

    assert plan.left == 0
    assert [e[1] for e in plan.events if e[0] == "submit"] == ["a", "c"]
    assert ("verify", "d") not in plan.events and ("apply", "d") in plan.events
    assert (None, "cached", 4.0) in statuses(plan) and ("b", "cached", 3.0) in statuses(plan)
    assert not any(s[0] == "d" for s in statuses(plan))  # stays "not measured"


def test_the_budget_is_shared_by_every_run_of_one_plan():
    plan = Recorder(budget=3)
    plan.run("p", ["a"])
    plan.run("q", ["x", "y"])

    assert [e[1] for e in plan.events if e[0] == "submit"] == ["program", "a", "program"]
    assert ("verify", "x") not in plan.events


def test_a_memory_refusal_costs_nothing_and_a_failed_submission_costs_one():
    plan = Recorder(budget=2, refuse={"a'"}, fail={"b'"})
    plan.run("p", ["a", "b", "c"])

    assert statuses(plan)[1] == ("a", f"{REFUSED}: a' needs more memory than the budget", None)
    assert statuses(plan)[2] == ("b", "failed: b' cannot be submitted", None)
    assert plan.left == 0 and ("verify", "c") not in plan.events


def test_known_steps_are_skipped_and_refusals_of_apply_and_verify_measure_nothing():
    plan = Recorder(known={"a"}, not_applicable={"b"}, wrong={"c"})
    plan.run("p", ["a", "b", "c", "d"])

    assert ("apply", "a") not in plan.events
    assert [e[1] for e in plan.events if e[0] == "submit"] == ["program", "d"]


def test_a_program_that_changed_stops_the_plan_and_an_unwanted_submission_is_cancelled():
    plan = Recorder(stale_after=1)
    plan.run("p", ["a", "b"])
    assert ("apply", "b") not in plan.events  # stopped before the second step

    class Unwanted(Recorder):
        def submitted(self, target, future):
            return target is None

    plan = Unwanted(budget=5)
    plan.run("p", ["a"])
    assert plan.submissions["a'"].cancelled() and not plan.submissions["p"].cancelled()
    assert plan.left == 4  # the cancelled one was not spent
    assert ("a", "measuring", None) not in statuses(plan)


# ------------------------------------------------------------ EngineMeasurer


class FakeEngine:
    target, device = "llvm", "a test CPU"

    def __init__(self):
        self.submitted = []

    def submit(self, analysis, label, priority=0):
        self.submitted.append((analysis, label, priority))
        return Future()


class FakeOutcomes:
    def __init__(self):
        self.recorded = []

    def record(self, before, step, after, namespace):
        if before == "broken":
            raise LeirError("the outcomes store is read-only")
        self.recorded.append((before, step, after, namespace))


class FakeLookup:
    """A ``MeasuredLookup`` over fake outcomes: ``measured`` is faked, and
    ``record`` is the real one (it logs a failed write)."""

    record = MeasuredLookup.record

    def __init__(self):
        self.outcomes = FakeOutcomes()

    def measured(self, analysis):
        return M(1.5, cached=True) if analysis == "known" else None


def test_the_engine_measurer_looks_up_records_and_submits_at_its_priority(monkeypatch):
    from leir.tools import measuring

    warned = []  # the server's logging set-up may keep records from pytest's capture: listen here
    monkeypatch.setattr(measuring.logger, "warning", lambda fmt, *args: warned.append(fmt % args))
    engine, lookup = FakeEngine(), FakeLookup()
    m = EngineMeasurer(engine, measured=lookup, priority=-10)

    assert isinstance(m, Measurer)
    assert (m.target, m.device) == ("llvm", "a test CPU")
    assert m.lookup("known").median_ms == 1.5 and m.lookup("other") is None
    m.record("before", "step", "after", "leir")
    m.record("broken", "step", "after", "leir")  # logged, not raised
    assert lookup.outcomes.recorded == [("before", "step", "after", "leir")]
    assert warned == ["the outcomes store is read-only"]
    m.submit("program", "a label")
    assert engine.submitted == [("program", "a label", -10)]


def test_an_engine_measurer_without_a_cache_looks_up_nothing(monkeypatch):
    from leir.tools import measuring

    monkeypatch.setattr(measuring.MeasuredLookup, "for_engine", classmethod(lambda cls, engine: None))
    m = EngineMeasurer(FakeEngine())
    assert m.measured is None and m.lookup("known") is None
    m.record("before", "step", "after", "leir")  # nothing to record into: no error


@pytest.mark.parametrize("plan_budget", [None, 0])
def test_a_plan_without_budget_hooks_goes_to_its_measurer(plan_budget):
    engine = FakeEngine()
    plan = TopStepsPlan(EngineMeasurer(engine, measured=FakeLookup()), budget=plan_budget)
    plan.run("unknown", [])
    assert [label for _, label, _ in engine.submitted] == ([] if plan_budget == 0 else ["program"])
    plan.run("known", [])  # cached: nothing submitted, whatever the budget
    assert len(engine.submitted) == (0 if plan_budget == 0 else 1)

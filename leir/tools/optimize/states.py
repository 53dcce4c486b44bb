"""The search's states and its budget, and the trajectory records of kept
steps (``leir.tools.optimize`` explains the search)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from leir import ast as A
from leir.errors import LeirError
from leir.semantics import Analysis, analyze
from leir.tools.measuring import CONFIRM_ROUNDS, Measurer, Paired, Timing, measure_pair
from leir.tools.ranking import Ranked

if TYPE_CHECKING:
    from leir.transforms import Step

#: What a confirmation costs in the budget: two programs built and timed again.
CONFIRM_COST = 2


# ------------------------------------------------------------ states


def program_key(program: A.Program) -> str:
    from leir.printer import print_program

    return print_program(program)


@dataclass
class State:
    analysis: Analysis
    key: str
    ms: float | None = None
    error: str | None = None
    #: The steps from the start, and the state each one left.
    trace: tuple = ()
    parent: "State | None" = None
    verified: bool | None = None
    verify_note: str = ""
    #: The paired re-timing against ``parent`` that confirmed this step.
    paired: Paired | None = None
    #: This step as the trajectory shows it (``_record``), made once.
    record: "TrajectoryStep | None" = None

    @property
    def program(self) -> A.Program:
        return self.analysis.program


class Budget:
    """Measurements: memoised by program text, counted, capped."""

    def __init__(self, measurer: Measurer, limit: int, progress: Callable[[str], None] | None = None):
        self.measurer = measurer
        self.limit = limit
        self.timings: dict[str, Timing] = {}
        self.cache_hits = 0
        self.progress = progress
        #: Paired confirmations run, and how many did not confirm the gain.
        self.confirmations = 0
        self.unconfirmed = 0

    @property
    def used(self) -> int:
        return len(self.timings) + CONFIRM_COST * self.confirmations

    @property
    def left(self) -> int:
        return self.limit - self.used

    def measure(self, states: Iterable[State]) -> None:
        """Fill ``ms``/``error`` of each state; states past the budget are
        left unmeasured (``ms`` None, ``error`` "budget spent")."""
        todo: dict[str, State] = {}
        states = list(states)
        for s in states:
            if s.key not in self.timings and s.key not in todo and len(todo) < self.left:
                todo[s.key] = s
        if todo:
            timings = self.measurer([s.analysis for s in todo.values()])
            for key, t in zip(todo, timings):
                self.timings[key] = t
                self.cache_hits += t.cached
            if self.progress:
                self.progress(f"measured {len(todo)} programs ({self.used}/{self.limit} of the budget)")
        for s in states:
            t = self.timings.get(s.key)
            if t is None:
                s.ms, s.error = None, "budget spent"
            else:
                s.ms, s.error = t.ms, t.error


    def confirm(self, before: State, after: State, rounds: int = CONFIRM_ROUNDS) -> Paired | None:
        """Time ``before`` and ``after`` turn about (``measure_pair``) and
        record it on ``after``; None, and nothing spent, when fewer than
        ``CONFIRM_COST`` measurements are left."""
        if self.left < CONFIRM_COST:
            return None
        self.confirmations += 1
        paired = measure_pair(self.measurer, before.analysis, after.analysis, rounds)
        after.paired = paired
        confirmed = paired.confirms()
        self.unconfirmed += not confirmed
        if self.progress:
            what = (f"{paired.before_ms:.4g} ms -> {paired.after_ms:.4g} ms" if paired.ok else paired.error)
            self.progress(f"paired re-timing, {rounds} rounds: {what}: "
                          f"{'confirmed' if confirmed else 'not confirmed'} ({self.used}/{self.limit} of the budget)")
        return paired


def verify_state(state: State) -> bool:
    """Verify ``state`` against its parent (once)."""
    if state.verified is None:
        from leir.transforms import verify

        try:
            v = verify(state.parent.analysis, state.analysis)
            state.verified, state.verify_note = v.ok, v.summary()
        except LeirError as e:
            state.verified, state.verify_note = False, str(e)
    return state.verified


@dataclass
class TrajectoryStep:
    """A kept step. A step inside a plan (``plan``: its goal, its place
    ``step`` of ``of`` and the plan's parameters) was not timed on its own:
    its latencies are None, except on the plan's last step, which carries
    the whole plan's paired figures."""

    id: str
    args: dict
    latency_before_ms: float | None
    latency_after_ms: float | None
    speedup: float | None
    reasoning: str
    plan: dict | None = None

    def to_json(self) -> dict:
        out = {"id": self.id, "args": self.args, "latency_before_ms": _rounded(self.latency_before_ms, 4),
               "latency_after_ms": _rounded(self.latency_after_ms, 4), "speedup": _rounded(self.speedup, 3),
               "reasoning": self.reasoning}
        if self.plan is not None:
            out["plan"] = self.plan
        return out


def _rounded(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


@dataclass
class Result:
    start_ms: float
    steps: list[TrajectoryStep]
    final: A.Program
    strategy: str
    target: str
    measurements: int
    budget: int
    cache_hits: int
    stop_reason: str
    measurer: str = ""
    #: Paired confirmations run (each counted ``CONFIRM_COST`` in ``measurements``)
    #: and how many of them did not confirm a gain.
    confirmations: int = 0
    unconfirmed: int = 0
    #: Beam's and MCTS's paired comparison of the start with the final program.
    final_check: Paired | None = None
    #: The ranker that ordered the single steps tried (``Ranker.name``).
    ranker: str = "heuristic"

    @property
    def final_ms(self) -> float:
        timed = [s.latency_after_ms for s in self.steps if s.latency_after_ms is not None]
        return timed[-1] if timed else self.start_ms

    @property
    def speedup(self) -> float:
        """Start over final, from ratios each measured at one moment: the
        final paired comparison (beam, MCTS), else the product of the steps'
        speedups (greedy: each a paired comparison). ``start_ms / final_ms``
        would divide figures taken minutes apart under a load that moves."""
        if self.final_check is not None:
            return self.final_check.before_ms / self.final_check.after_ms
        return math.prod(s.speedup for s in self.steps if s.speedup is not None)

    @property
    def trace(self) -> list:
        from leir.transforms import Step

        return [Step(s.id, s.args) for s in self.steps]

    def to_json(self) -> dict:
        from leir.printer import print_program

        return {"start_ms": round(self.start_ms, 4), "steps": [s.to_json() for s in self.steps],
                "final": print_program(self.final), "final_ms": round(self.final_ms, 4),
                "speedup": round(self.speedup, 3), "strategy": self.strategy,
                "target": self.target, "measurements": self.measurements, "budget": self.budget,
                "cache_hits": self.cache_hits, "confirmations": self.confirmations, "unconfirmed": self.unconfirmed,
                "stop_reason": self.stop_reason, "measurer": self.measurer, "ranker": self.ranker}


def child_states(state: State, picks: list[Ranked]) -> list[tuple[State, Ranked]]:
    """The programs the picked steps produce (steps TVM or our checks refuse
    are dropped: they were never measured)."""
    from leir import transforms

    out = []
    for r in picks:
        try:
            program = transforms.apply(state.analysis, r.step)
        except LeirError:
            continue
        analysis = analyze(program)
        out.append((State(analysis, program_key(program), trace=state.trace + ((r.step, r),), parent=state), r))
    return out


def _reasoning(r: Ranked, before: float, after: float, verify_note: str, state: State | None = None,
               target: str = "llvm") -> str:
    """Why the step helped (or not): ``leir.explain.step_reasoning`` on the
    programs before and after it, closing with the measured effect."""
    if state is not None and state.parent is not None:
        from leir.explain import step_reasoning

        text = step_reasoning(state.parent.analysis, state.analysis, r.step, measured=(before, after),
                              target=target).text
    else:
        text = f"{r.title}; measured {before:.3g} ms -> {after:.3g} ms ({before / after:.2f}x)"
    if verify_note:
        text += " Verified numerically against the program before the step."
    return text


def chain(final: State) -> list[State]:
    """The states from the start's first child to ``final``."""
    chain = []
    s = final
    while s.parent is not None:
        chain.append(s)
        s = s.parent
    return chain[::-1]


def trajectory(final: State, target: str = "llvm") -> list[TrajectoryStep]:
    return [record(s, target) for s in chain(final)]


def record(s: State, target: str = "llvm") -> TrajectoryStep:
    """The step that led to ``s``, with its latencies and reasoning."""
    if s.record is None:
        step, r = s.trace[-1]
        # A confirmed step's figures are its paired re-timing (both sides timed
        # turn about, at one moment); beam's and mcts's intermediate steps
        # only have their screening measurements.
        before, after = (s.paired.before_ms, s.paired.after_ms) if s.paired is not None else (s.parent.ms, s.ms)
        reasoning = _reasoning(r, before, after, s.verify_note, s, target)
        if s.paired is not None:
            reasoning += (f" Confirmed by {s.paired.rounds} paired rounds timed turn about (fastest run "
                          f"{min(s.paired.before_runs):.3g} ms -> {min(s.paired.after_runs):.3g} ms).")
        s.record = TrajectoryStep(step.id, step.args, before, after, before / after, reasoning)
    return s.record


#: Told of each step the search keeps: ``(before, step, after, record)``,
#: the analysed programs around the step and its trajectory record.
OnKept = Callable[[Analysis, "Step", Analysis, TrajectoryStep], None]


def tell(on_kept: OnKept | None, s: State, target: str) -> None:
    if on_kept is not None:
        on_kept(s.parent.analysis, s.trace[-1][0], s.analysis, record(s, target))



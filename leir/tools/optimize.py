"""Multi-step optimization: a sequence of verified steps that makes a program
faster on real hardware (``leir optimize``).

At each state the search lists every step that applies (``leir.transforms.
candidates``, loop and memory transformations), ranks them with a cheap
heuristic computed from the program alone (loop extents, reduction axes,
access strides: nothing is built), measures the best few plus one picked at
random for exploration, and keeps a step only if the rewritten program passes
``leir.transforms.verify`` against the program it came from. So the last
program equals the first by a chain of verified steps, and its trace replays
(``leir.transforms.replay``) to the same program.

Strategies:

- ``greedy``: each round keeps the fastest verified candidate if it is at
  least ``MIN_GAIN`` faster than the current program and the gain holds
  under paired re-timing (below), else tries the next candidates;
- ``beam``: keeps the ``beam_width`` fastest verified programs of each round,
  improving or not (a split that only pays off after a vectorize survives);
- ``mcts``: a small UCT search (Step-TP's reward: start time / new time) over
  the same ranked candidates, ``iterations`` rounds of select, expand (measure
  a few children of the selected node), back-propagate.

**Confirmation.** The fastest-looking of several noisy timings is also the
luckiest (the winner's curse), so a step is kept only after a paired
re-timing: the current program and the candidate are timed turn about,
``CONFIRM_ROUNDS`` rounds, in one worker, from fresh builds (no cache), and
the step stands only if the candidate's fastest run and its median are both
at least ``MIN_GAIN`` better and it was faster in every round (``confirms``).
The step's latencies before and after are the medians of that comparison.
``beam`` and ``mcts`` confirm their final program against the start the
same way (their intermediate steps may be slower on purpose).

**The budget** counts distinct programs whose latency the search asks for,
the starting program included; asking twice for one program (reached by two
paths) costs once. A paired confirmation costs ``CONFIRM_COST`` (2): it
builds and times both programs again. A measurement answered from the measurement engine's
on-disk cache is counted too, so the search takes the same path whether or
not the cache is warm; the summary says how many were cache hits (free in
time, not in budget). Programs that fail to apply are never measured and cost
nothing; a build or run failure costs one measurement.

**Measurement** goes through a ``leir.tools.measuring.Measurer``: a callable
taking analysed programs and returning a ``Timing`` each.
``default_measurer`` uses the measurement engine (``leir.measure``) when it
is importable, and otherwise ``FallbackMeasurer``, an in-process compile and
``time_evaluator`` loop.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from leir import ast as A
from leir.errors import LeirError
from leir.tools.measuring import (  # MIN_GAIN and CONFIRM_ROUNDS: the thresholds the search's docstring explains
    CONFIRM_ROUNDS, MIN_GAIN, Measurer, Paired, Timing, default_measurer, measure_pair,
)
from leir.tools.ranking import Ranked, Ranker, pick, rank
from leir.semantics import Analysis, analyze
from leir.bridge.targets import TARGETS

if TYPE_CHECKING:
    from leir.transforms import Step

STRATEGIES = ("greedy", "beam", "mcts")

#: Measured candidates per round when the budget allows more (greedy, beam).
MAX_PER_ROUND = 8
#: What a confirmation costs in the budget: two programs built and timed again.
CONFIRM_COST = 2
#: The smallest budget a search can use: the start, one candidate and its
#: paired confirmation.
MIN_BUDGET = 2 + CONFIRM_COST
#: Confirmations tried per greedy round before it moves down the ranking: a
#: second lucky-looking candidate of one round is most often lucky too.
MAX_CONFIRMATIONS_PER_ROUND = 2
#: Children measured per MCTS expansion at most.
MAX_PER_EXPANSION = 4
#: UCT's exploration constant (sqrt(2): the textbook value for rewards in [0, 1]-ish ranges).
UCT_C = math.sqrt(2)


class OptimizeError(LeirError):
    """Bad arguments to the search, or a starting program it cannot time."""


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


class BudgetSpent(Exception):
    pass


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


def _verify(state: State) -> bool:
    """Verify ``state`` against its parent (once)."""
    if state.verified is None:
        from leir.transforms import verify

        try:
            v = verify(state.parent.analysis, state.analysis)
            state.verified, state.verify_note = v.ok, v.summary()
        except LeirError as e:
            state.verified, state.verify_note = False, str(e)
    return state.verified


# ------------------------------------------------------------ the search


@dataclass
class TrajectoryStep:
    id: str
    args: dict
    latency_before_ms: float
    latency_after_ms: float
    speedup: float
    reasoning: str

    def to_json(self) -> dict:
        return {"id": self.id, "args": self.args, "latency_before_ms": round(self.latency_before_ms, 4),
                "latency_after_ms": round(self.latency_after_ms, 4), "speedup": round(self.speedup, 3),
                "reasoning": self.reasoning}


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

    @property
    def final_ms(self) -> float:
        return self.steps[-1].latency_after_ms if self.steps else self.start_ms

    @property
    def speedup(self) -> float:
        """Start over final, from ratios each measured at one moment: the
        final paired comparison (beam, MCTS), else the product of the steps'
        speedups (greedy: each a paired comparison). ``start_ms / final_ms``
        would divide figures taken minutes apart under a load that moves."""
        if self.final_check is not None:
            return self.final_check.before_ms / self.final_check.after_ms
        return math.prod(s.speedup for s in self.steps)

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
                "stop_reason": self.stop_reason, "measurer": self.measurer}


def _children(state: State, picks: list[Ranked]) -> list[tuple[State, Ranked]]:
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


def _chain(final: State) -> list[State]:
    """The states from the start's first child to ``final``."""
    chain = []
    s = final
    while s.parent is not None:
        chain.append(s)
        s = s.parent
    return chain[::-1]


def _trajectory(final: State, target: str = "llvm") -> list[TrajectoryStep]:
    return [_record(s, target) for s in _chain(final)]


def _record(s: State, target: str = "llvm") -> TrajectoryStep:
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


def _tell(on_kept: OnKept | None, s: State, target: str) -> None:
    if on_kept is not None:
        on_kept(s.parent.analysis, s.trace[-1][0], s.analysis, _record(s, target))


def optimize(analysis: Analysis, steps: int = 4, budget: int | None = None, strategy: str = "greedy",
             target: str = "llvm", measurer: Measurer | None = None, seed: int = 0, beam_width: int = 3,
             iterations: int = 10, progress: Callable[[str], None] | None = None,
             ranker: Ranker | None = None, on_kept: OnKept | None = None) -> Result:
    """Search for at most ``steps`` verified steps using at most ``budget``
    measurements (default 6 per step, the start included; a paired
    confirmation counts ``CONFIRM_COST``), trying the steps in the order of
    ``ranker`` (``leir.tools.ranking``; the heuristic by default). ``on_kept``
    hears of each step kept: greedy's as it keeps it, beam's and MCTS's
    once the final program's gain is confirmed (before that, none is
    kept)."""
    if strategy not in STRATEGIES:
        raise OptimizeError(f"unknown strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    if target not in TARGETS:
        raise OptimizeError(f"unknown target {target!r}: expected one of {', '.join(TARGETS)}")
    if steps < 1:
        raise OptimizeError(f"--steps must be at least 1, got {steps}")
    budget = 6 * steps + 1 if budget is None else budget
    if budget < MIN_BUDGET:
        raise OptimizeError(f"--budget must be at least {MIN_BUDGET} (the start, one candidate and its paired "
                            f"confirmation), got {budget}")
    if beam_width < 1 or iterations < 1:
        raise OptimizeError("beam width and iterations must be at least 1")
    if not analysis.ok:
        raise OptimizeError("the program has errors; fix them before optimizing it")
    from leir.footprint import require_within_budget

    require_within_budget(analysis, "verify")  # every candidate is verified: refused before any is built
    owned = measurer is None
    measurer = measurer or default_measurer(target)
    try:
        meter = Budget(measurer, budget, progress)
        start = State(analysis, program_key(analysis.program), verified=True)
        meter.measure([start])
        if start.ms is None:
            raise OptimizeError(f"cannot time the starting program: {start.error}")
        rng = random.Random(seed)
        final_check = None
        if strategy == "greedy":
            best, reason = _greedy(start, steps, meter, rng, target, ranker=ranker, on_kept=on_kept)
        else:
            search = {"beam": _beam, "mcts": _mcts}[strategy]
            meter.limit -= CONFIRM_COST  # kept for the final confirmation
            best, reason = search(start, steps, meter, rng, target, beam_width=beam_width, iterations=iterations,
                                  ranker=ranker)
            meter.limit += CONFIRM_COST
            best, reason, final_check = _confirm_final(start, best, meter, reason)
            for s in _chain(best):
                _tell(on_kept, s, target)
    finally:
        if owned and hasattr(measurer, "close"):
            measurer.close()
    return Result(start.ms, _trajectory(best, target), best.program, strategy, target, meter.used, budget,
                  meter.cache_hits, reason, getattr(measurer, "name", type(measurer).__name__), meter.confirmations,
                  meter.unconfirmed, final_check)


def _per_round(meter: Budget, rounds_left: int, reserve: int = 0) -> int:
    """Candidates to measure this round: the budget left, less ``reserve``,
    shared among the rounds left."""
    return max(1, min(MAX_PER_ROUND, (meter.left - reserve) // max(1, rounds_left)))


def _greedy(start: State, steps: int, meter: Budget, rng: random.Random, target: str, ranker: Ranker | None = None,
            on_kept: OnKept | None = None, **_) -> tuple[State, str]:
    """Each round measures the next best-ranked untried steps of the current
    program; the fastest verified one that looks ``MIN_GAIN`` faster is
    re-timed against the current program turn about (``Budget.confirm``) and
    kept only if the gain holds. A round that keeps nothing (the round is not
    a step) tries the next ones down the ranking, until the budget or the
    candidates run out."""
    current, taken = start, 0
    tried: set[str] = set()
    while taken < steps:
        nothing = ("no measured candidate improved" if not meter.unconfirmed
                   else "no measured candidate's gain held under paired re-timing")
        if meter.left < 1 + CONFIRM_COST:  # one candidate and its confirmation
            return current, "budget spent" if taken else f"budget spent; {nothing}"
        picks = pick(rank(current.analysis, target, ranker), _per_round(meter, steps - taken, CONFIRM_COST), rng, tried)
        if not picks:
            return current, nothing if tried else "no candidate applies"
        tried.update(r.step.key for r in picks)
        children = [c for c, _ in _children(current, picks)]
        meter.measure(children)
        improving = sorted((c for c in children if c.ms is not None and c.ms < current.ms * (1 - MIN_GAIN)),
                           key=lambda c: c.ms)
        kept, confirmations = None, 0
        for c in improving:
            if confirmations == MAX_CONFIRMATIONS_PER_ROUND:
                # Not re-timed this round: offered again next round, where its
                # screening figure is remembered (it costs nothing again).
                tried.discard(c.trace[-1][0].key)
                continue
            if not _verify(c):
                continue
            paired = meter.confirm(current, c)
            if paired is None:
                return current, "budget spent before a candidate's gain could be confirmed"
            confirmations += 1
            if paired.confirms():
                kept = c
                break
        if kept is not None:
            # From now on the current program's latency is the one the
            # comparison measured for it, not its screening figure.
            kept.ms = kept.paired.after_ms
            _tell(on_kept, kept, target)
            current, taken, tried = kept, taken + 1, set()
    return current, f"{steps} steps taken"


def _confirm_final(start: State, best: State, meter: Budget, reason: str) -> tuple[State, str, Paired | None]:
    """Beam and MCTS keep slower intermediate programs on purpose; what they
    return must still be faster than the start under paired re-timing."""
    if best is start:
        return start, reason, None
    paired = measure_pair(meter.measurer, start.analysis, best.analysis) if meter.left >= CONFIRM_COST else None
    if paired is None:
        return start, "budget spent before the best program's gain could be confirmed", None
    meter.confirmations += 1
    if not paired.confirms():
        meter.unconfirmed += 1
        return start, "the best program's gain did not hold under paired re-timing", None
    return best, reason, paired


def _beam(start: State, steps: int, meter: Budget, rng: random.Random, target: str, beam_width: int = 3,
          ranker: Ranker | None = None, **_) -> tuple[State, str]:
    beam = [start]
    best = start
    seen = {start.key}
    for n in range(steps):
        if meter.left <= 0:
            return best, "budget spent"
        per_state = max(1, _per_round(meter, steps - n) // len(beam))
        children = []
        for s in beam:
            for c, _ in _children(s, pick(rank(s.analysis, target, ranker), per_state, rng)):
                if c.key not in seen:
                    seen.add(c.key)
                    children.append(c)
        meter.measure(children)
        timed = sorted((c for c in children if c.ms is not None), key=lambda c: c.ms)
        next_beam = []
        for c in timed:
            if len(next_beam) == beam_width:
                break
            if _verify(c):
                next_beam.append(c)
        if not next_beam:
            return best, "no candidate applies" if not children else "no measured candidate verified"
        beam = next_beam
        if beam[0].ms < best.ms * (1 - MIN_GAIN):
            best = beam[0]
    return best, f"{steps} rounds searched"


@dataclass
class _Node:
    state: State
    depth: int
    untried: list[Ranked] | None = None
    children: list["_Node"] = field(default_factory=list)
    visits: int = 0
    reward: float = 0.0


def _mcts(start: State, steps: int, meter: Budget, rng: random.Random, target: str, iterations: int = 10,
          ranker: Ranker | None = None, **_) -> tuple[State, str]:
    root = _Node(start, 0)
    nodes = [root]
    per_expansion = max(1, min(MAX_PER_EXPANSION, meter.left // iterations))
    for _ in range(iterations):
        if meter.left <= 0:
            break
        # Select: descend by UCT through fully expanded nodes.
        node, path = root, [root]
        while True:
            if node.untried is None:
                node.untried = pick(rank(node.state.analysis, target, ranker), MAX_PER_ROUND, rng) if node.depth < steps else []
            if node.untried or not node.children:
                break
            node = max(node.children, key=lambda c: c.reward / c.visits
                       + UCT_C * math.sqrt(math.log(node.visits + 1) / c.visits))
            path.append(node)
        if not node.untried:
            reward = start.ms / node.state.ms
        else:
            # Expand: measure the next few untried steps; keep the verified ones.
            batch, node.untried = node.untried[:per_expansion], node.untried[per_expansion:]
            children = [c for c, _ in _children(node.state, batch)]
            meter.measure(children)
            reward = 0.0
            for c in children:
                if c.ms is None or not _verify(c):
                    continue
                child = _Node(c, node.depth + 1, visits=1, reward=start.ms / c.ms)
                node.children.append(child)
                nodes.append(child)
                reward = max(reward, child.reward)
        for n in path:
            n.visits += 1
            n.reward += reward
    best = min((n.state for n in nodes if n.state.ms is not None), key=lambda s: s.ms)
    if best.ms >= start.ms * (1 - MIN_GAIN):
        return start, "no measured candidate improved"
    return best, f"{iterations} iterations searched" if meter.left > 0 else "budget spent"


# ------------------------------------------------------------ printing


def format_result(result: Result) -> str:
    lines = [f"start: {result.start_ms:.4g} ms ({result.strategy}, target {result.target})"]
    for k, s in enumerate(result.steps, 1):
        lines.append(f"{k}. {s.id} {json.dumps(s.args, sort_keys=True)}: {s.latency_before_ms:.4g} ms -> "
                     f"{s.latency_after_ms:.4g} ms ({s.speedup:.2f}x)")
        lines.append(f"   {s.reasoning}")
    lines.append(f"final: {result.final_ms:.4g} ms, {result.speedup:.2f}x in {len(result.steps)} "
                 f"steps; {result.measurements}/{result.budget} measurements ({result.cache_hits} from cache; "
                 f"{result.confirmations} paired confirmations, {result.unconfirmed} not confirmed); "
                 f"stopped: {result.stop_reason}")
    return "\n".join(lines)

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

The package: ``states`` (the search's states, its budget and the
trajectory records of kept steps), ``strategies`` (greedy, beam, MCTS) and,
here, ``optimize`` itself and the printed summary.
"""

from __future__ import annotations

import json
import random
from typing import Callable

from leir.bridge.targets import TARGETS
from leir.errors import LeirError
from leir.semantics import Analysis
from leir.tools.measuring import Measurer, default_measurer
from leir.tools.optimize.states import (
    CONFIRM_COST, Budget, OnKept, Result, State, TrajectoryStep, chain, program_key, tell, trajectory,
)
from leir.tools.optimize.planned import OnPlan, planned
from leir.tools.optimize.strategies import SEARCHES as _SEARCHES, confirm_final
from leir.tools.ranking import HEURISTIC, Ranker

__all__ = [
    "CONFIRM_COST", "MIN_BUDGET", "STRATEGIES", "Budget", "OnKept", "OnPlan", "OptimizeError", "Result", "State",
    "TrajectoryStep", "format_result", "optimize", "program_key",
]

#: Each strategy's search; ``plans`` and ``greedy`` confirm each step they
#: keep (and tell ``on_kept`` as they keep it), ``beam`` and ``mcts``
#: confirm their final program (``confirm_final``).
SEARCHES = {"plans": planned, **_SEARCHES}
CONFIRMING = ("plans", "greedy")
STRATEGIES = tuple(SEARCHES)

#: The smallest budget a search can use: the start, one candidate and its
#: paired confirmation.
MIN_BUDGET = 2 + CONFIRM_COST


class OptimizeError(LeirError):
    """Bad arguments to the search, or a starting program it cannot time."""


def optimize(analysis: Analysis, steps: int = 4, budget: int | None = None, strategy: str = "plans",
             target: str = "llvm", measurer: Measurer | None = None, seed: int = 0, beam_width: int = 3,
             iterations: int = 10, progress: Callable[[str], None] | None = None,
             ranker: Ranker | None = None, on_kept: OnKept | None = None, cost_model="auto",
             on_plan: OnPlan | None = None) -> Result:
    """Search for at most ``steps`` verified steps using at most ``budget``
    measurements (default 6 per step, the start included; a paired
    confirmation counts ``CONFIRM_COST``), trying the steps in the order of
    ``ranker`` (``leir.tools.ranking``; the heuristic by default). ``on_kept``
    hears of each step kept: greedy's as it keeps it, beam's and MCTS's
    once the final program's gain is confirmed (before that, none is
    kept). ``cost_model`` screens the ``plans`` search's candidates
    (``leir.tools.costs.CostModel``): "auto" loads the installed one
    (``leir_models``), None screens nothing (the plans' own order).
    ``on_plan`` hears of a plan the ``plans`` search keeps, once it is
    confirmed (``leir.tools.optimize.planned.OnPlan``), so that the editor
    can offer its steps in order (``StepOutcomes.record_plan``)."""
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
        if strategy in CONFIRMING:
            if cost_model == "auto":  # only the plans search screens with one
                cost_model = None
                if strategy == "plans":
                    from leir.tools.costs import load_cost_model

                    cost_model = load_cost_model()
            best, reason = SEARCHES[strategy](start, steps, meter, rng, target, ranker=ranker, on_kept=on_kept,
                                              cost_model=cost_model, on_plan=on_plan)
        else:
            search = SEARCHES[strategy]
            meter.limit -= CONFIRM_COST  # kept for the final confirmation
            best, reason = search(start, steps, meter, rng, target, beam_width=beam_width, iterations=iterations,
                                  ranker=ranker)
            meter.limit += CONFIRM_COST
            best, reason, final_check = confirm_final(start, best, meter, reason)
            for s in chain(best):
                tell(on_kept, s, target)
    finally:
        if owned and hasattr(measurer, "close"):
            measurer.close()
    return Result(start.ms, trajectory(best, target), best.program, strategy, target, meter.used, budget,
                  meter.cache_hits, reason, getattr(measurer, "name", type(measurer).__name__), meter.confirmations,
                  meter.unconfirmed, final_check, (ranker or HEURISTIC).name)


# ------------------------------------------------------------ printing


def format_result(result: Result) -> str:
    lines = [f"start: {result.start_ms:.4g} ms ({result.strategy}, target {result.target}, steps ranked by "
             f"{result.ranker})"]
    for k, s in enumerate(result.steps, 1):
        where = f" [plan step {s.plan['step']}/{s.plan['of']}]" if s.plan is not None else ""
        timed = (f": {s.latency_before_ms:.4g} ms -> {s.latency_after_ms:.4g} ms ({s.speedup:.2f}x"
                 f"{', the whole plan' if s.plan is not None else ''})" if s.speedup is not None else "")
        lines.append(f"{k}. {s.id} {json.dumps(s.args, sort_keys=True)}{where}{timed}")
        lines.append(f"   {s.reasoning}")
    lines.append(f"final: {result.final_ms:.4g} ms, {result.speedup:.2f}x in {len(result.steps)} "
                 f"steps; {result.measurements}/{result.budget} measurements ({result.cache_hits} from cache; "
                 f"{result.confirmations} paired confirmations, {result.unconfirmed} not confirmed); "
                 f"stopped: {result.stop_reason}")
    return "\n".join(lines)

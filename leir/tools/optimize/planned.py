"""The ``plans`` search: many candidate end states, screened without
building, a few measured, the best confirmed, then polished step by step.

1. **Candidates.** ``leir.tools.plans.plans_for`` lists the plans that fit
   the program (tiled contractions with sampled tile sizes, parallel and
   vectorized rows...), each applied through the catalogue one atomic step
   at a time (``realize``). Plans longer than the search's ``steps`` are
   left out: every step of a plan counts as a step kept.
2. **Screening.** The first round follows the plans' own order
   (``plans_for``: the hand-written prior, register tiles that fill the
   vector registers first). A cost model (``leir.tools.costs.CostModel``,
   the learned one of ``leir_models`` when it is installed) predicts each
   end state's latency from the analysis alone (nothing is built) and
   orders the rounds after it, once it has learned from this search's own
   measurements: on kinds of kernel it was not trained on, the pretrained
   model ranks worse than the prior (Kendall tau 0.16 averaged over the
   suite's eight kinds left out in turn, ``bench/cost_model_lofo.py``; its
   search's kernels 0.95x the prior's at 16 measurements, docs/optimize.md).
3. **Measuring where it pays.** The most promising are measured in rounds
   of ``PLAN_ROUND``; after each round the cost model learns from what was
   measured (``update``) and the rest are ranked again, as MetaSchedule
   does with its XGBoost model. From the third round on, plans one
   parameter away from the two fastest measured so far join the candidates
   (``leir.tools.plans.neighbours``: MetaSchedule's evolutionary search
   mutates one decision at a time the same way). Every program timed
   counts in the budget.
4. **Keeping.** The fastest measured end state is verified numerically
   against the start once (``leir.transforms.verify``), then re-timed
   against the start turn about (``Budget.confirm``); it is kept only if
   the gain holds. Its steps go into the trajectory as the atomic steps
   they are, each marked as step k of n of the plan, the last carrying the
   plan's paired latencies.
5. **Polish.** What is left of the budget and of ``steps`` goes to the
   greedy search from the plan's end state (single steps: vectorize a
   copy loop, unroll, ...), each confirmed as greedy confirms.

When no plan fits the program, the search is greedy's.
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from leir.errors import LeirError
from leir.semantics import analyze
from leir.tools.measuring import MIN_GAIN
from leir.tools.optimize.states import CONFIRM_COST, Budget, OnKept, State, TrajectoryStep, program_key, tell
from leir.tools.optimize.strategies import _greedy as greedy
from leir.tools.ranking import Ranked, Ranker

__all__ = ["PLAN_ROUND", "OnPlan", "planned"]

#: Told of a plan the search keeps: ``(programs, steps, end, goal)``, the
#: analysed program before each step, the steps, the program after the last,
#: and what the plan reaches ("a tiled contraction").
OnPlan = Callable[[Sequence, Sequence, object, str], None]

#: End states measured per screening round.
PLAN_ROUND = 8
#: Plans applied (and screened) at most per search: applying one costs
#: about 20 ms per step at realistic sizes (a 512^3 matmul: 0.3 s a plan), so 64 plans take some 20 s.
MAX_PLANS = 64
#: The share of the budget the plans get when greedy polish may follow.
PLAN_SHARE = 0.75
#: After the first rounds, the search tries plans one parameter away from
#: the ``EXPAND_BEST`` fastest measured so far, ``NEIGHBOURS`` of each.
EXPAND_AFTER_ROUNDS = 2
EXPAND_BEST = 2
NEIGHBOURS = 12


def _plan_states(start: State, plan, end: State) -> list[State]:
    """One state per step of a kept ``plan``, chained from ``start``; the
    last is ``end``, the end state that was measured (the programs between
    are analysed only now: screening needs only the end)."""
    states, parent = [], start
    n = len(plan.steps)
    for k, (step, program) in enumerate(zip(plan.steps, plan.programs)):
        r = Ranked(step, f"{step.id} (plan step {k + 1} of {n}: {plan.goal})", 0.0, ())
        if k < n - 1:
            s = State(analyze(program), program_key(program), parent=parent)
        else:
            s = end
            s.parent = parent
        s.trace = parent.trace + ((step, r),)
        states.append(s)
        parent = s
    return states


def _realized(start: State, specs, steps: int, seen: set[str], limit: int) -> list:
    """(plan, its end state) of up to ``limit`` of ``specs`` that apply, fit
    in ``steps`` and reach a program not in ``seen`` (which they join)."""
    import itertools

    from leir.tools.plans import distinct

    found = distinct(specs, start.analysis, program_key, seen, max_steps=steps)
    return [(plan, State(analyze(plan.program), key, parent=start)) for plan, key in itertools.islice(found, limit)]


def _candidates(start: State, steps: int, target: str, seed: int, progress, seen: set[str]) -> list:
    from leir.tools.plans import plans_for

    out = _realized(start, plans_for(start.analysis, target, seed=seed), steps, seen, MAX_PLANS)
    if progress:
        progress(f"{len(out)} plans fit the program")
    return out


def _neighbours(start: State, plan, steps: int, target: str, seen: set[str], rng: random.Random) -> list:
    """Realized plans one parameter away from ``plan`` (at most
    ``NEIGHBOURS``, drawn at random)."""
    from leir.tools.plans import neighbours

    specs = neighbours(plan.spec, start.analysis, target)
    rng.shuffle(specs)
    return _realized(start, specs, steps, seen, NEIGHBOURS)


def _ranked(cost_model, items: list, target: str) -> list:
    if cost_model is None or not items:
        return items
    predicted = cost_model.predict([end.analysis for _, end in items], target)
    return [item for _, item in sorted(zip(predicted, items), key=lambda pair: pair[0])]


def _record_plan(plan, states: list[State], paired, target: str) -> None:
    """The trajectory records of a kept plan's steps: reasoning per step from
    the programs around it; the measured figures on the last step only."""
    from leir.explain import step_reasoning

    n = len(states)
    before_ms, after_ms = paired.before_ms, paired.after_ms
    for k, s in enumerate(states):
        step = s.trace[-1][0]
        try:
            text = step_reasoning(s.parent.analysis, s.analysis, step, target=target).text
        except LeirError:
            text = ""
        where = f"Step {k + 1} of {n} of a plan toward {plan.goal}"
        if k < n - 1:
            text = (f"{text} {where}; the plan's end state measured {after_ms:.3g} ms against {before_ms:.3g} ms "
                    f"before it (this step alone was not timed).").strip()
            s.record = TrajectoryStep(step.id, step.args, None, None, None, text, _plan_json(plan, k, n))
        else:
            text = (f"{text} {where}: the plan measured {before_ms:.3g} ms -> {after_ms:.3g} ms "
                    f"({before_ms / after_ms:.2f}x), confirmed by {paired.rounds} paired rounds timed turn about "
                    f"(fastest run {min(paired.before_runs):.3g} ms -> {min(paired.after_runs):.3g} ms). "
                    f"Verified numerically against the program before the plan.").strip()
            s.record = TrajectoryStep(step.id, step.args, before_ms, after_ms, before_ms / after_ms, text,
                                      _plan_json(plan, k, n))


def _plan_json(plan, k: int, n: int) -> dict:
    return {"goal": plan.goal, "step": k + 1, "of": n, "params": plan.spec.to_json()}


def planned(start: State, steps: int, meter: Budget, rng: random.Random, target: str, ranker: Ranker | None = None,
            on_kept: OnKept | None = None, cost_model=None, on_plan: OnPlan | None = None, **_) -> tuple[State, str]:
    from leir.transforms import verify

    progress = meter.progress
    seen = {start.key}
    items = _candidates(start, steps, target, rng.randrange(1 << 30), progress, seen)
    if not items:
        return greedy(start, steps, meter, rng, target, ranker=ranker, on_kept=on_kept)
    polish = steps > min(len(plan.steps) for plan, _ in items)
    reserve = CONFIRM_COST + (int(meter.left * (1 - PLAN_SHARE)) if polish else 0)
    # The prior orders the first round; the cost model the later ones, once
    # it has learned from this search's measurements (module docstring, 2).
    pending = items
    measured: list[tuple[object, State]] = []
    expanded: set[int] = set()
    rounds = 0
    while meter.left - reserve >= 1:
        if rounds >= EXPAND_AFTER_ROUNDS or not pending:
            # Around the fastest so far: plans one parameter away, measured
            # before the untried first draw (or interleaved by the model).
            grown = []
            for plan, _ in sorted(measured, key=lambda item: item[1].ms)[:EXPAND_BEST]:
                if id(plan) not in expanded:
                    expanded.add(id(plan))
                    grown += _neighbours(start, plan, steps, target, seen, rng)
            if grown:
                if progress:
                    progress(f"{len(grown)} plans one parameter away from the fastest")
                pending = _ranked(cost_model, grown + pending, target)
        if not pending:
            break
        take = min(PLAN_ROUND, meter.left - reserve)
        batch, pending = pending[:take], pending[take:]
        meter.measure([end for _, end in batch])
        rounds += 1
        done = [(p, end) for p, end in batch if end.ms is not None]
        measured.extend(done)
        if cost_model is not None and done:
            cost_model.update([end.analysis for _, end in done], [end.ms for _, end in done], target)
            pending = _ranked(cost_model, pending, target)
    improving = sorted((item for item in measured if item[1].ms < start.ms * (1 - MIN_GAIN)),
                       key=lambda item: item[1].ms)
    kept = None
    for plan, end in improving[:2]:
        try:
            v = verify(start.analysis, end.analysis)
        except LeirError:
            continue
        if not v.ok:
            continue
        paired = meter.confirm(start, end)
        if paired is None:
            break
        if paired.confirms():
            end.verified, end.verify_note = True, v.summary()
            states = _plan_states(start, plan, end)
            _record_plan(plan, states, paired, target)
            end.ms = paired.after_ms
            kept = (plan, states)
            break
    if kept is None:
        reason = ("no plan measured faster" if not improving else "no plan's gain held under paired re-timing")
        if meter.left >= 1 + CONFIRM_COST:
            best, greedy_reason = greedy(start, steps, meter, rng, target, ranker=ranker, on_kept=on_kept)
            return best, f"{reason}; greedy: {greedy_reason}"
        return start, reason
    plan, states = kept
    for s in states:
        tell(on_kept, s, target)
    if on_plan is not None:
        on_plan([s.parent.analysis for s in states], [s.trace[-1][0] for s in states], states[-1].analysis, plan.goal)
    end = states[-1]
    left = steps - len(states)
    if left < 1 or meter.left < 1 + CONFIRM_COST:
        return end, f"plan of {len(states)} steps kept ({plan.goal})"
    best, reason = greedy(end, left, meter, rng, target, ranker=ranker, on_kept=on_kept)
    return best, f"plan of {len(states)} steps kept ({plan.goal}); then greedy: {reason}"

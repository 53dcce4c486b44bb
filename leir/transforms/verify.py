"""Numerical verification of a step: run the program before and after on
the same inputs and compare every output.

Only what the step can change is built and run (``leir.transforms.scope``:
the nests it rewrote, the nests downstream that read what they write, from
the state the unchanged nests before them compute once per seed); the
module docstring there says why the other nests need no re-check. A step
whose change cannot be scoped (it touches the first and last nests, or an
input's declaration) is verified on the whole program.

Several seeds; one of them draws integer-valued inputs, on which sums and
products are exact, so a reassociating step (split, rfactor) that is right
matches exactly there and a wrong index shows up as a large error rather
than hiding in rounding. Tolerances are Step-TP's (``leir.bridge.comparison.compare``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


# SEEDS: the seeds of a verification; the last one draws integer-valued
# inputs. Defined in leir.inputs (the measurement worker draws the same).
from leir.inputs import SEEDS, seed_inputs
from leir.semantics import Analysis


@dataclass
class Verification:
    ok: bool
    #: seed -> output name -> Comparison
    comparisons: dict[int, dict[str, object]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: ``leir.transforms.scope.Scope`` of a scoped verification (None: the
    #: whole program was built and run).
    scope: object = None

    def summary(self) -> str:
        worst = {}
        for per_seed in self.comparisons.values():
            for name, c in per_seed.items():
                if name not in worst or c.max_abs_err > worst[name].max_abs_err or not c.ok:
                    worst[name] = c
        lines = [f"{name}: {c.describe()}" for name, c in worst.items()]
        return "; ".join(lines + self.notes)

    @property
    def max_abs_err(self) -> float:
        return max((c.max_abs_err for s in self.comparisons.values() for c in s.values()), default=0.0)


def verify(before: Analysis, after: Analysis, seeds: tuple[int, ...] = SEEDS, target: str = "llvm", *,
           scoped: bool = True) -> Verification:
    """Run both programs on the inputs of each seed and compare every
    output that can differ. With ``scoped`` (the default) only the nests
    the step can change are built (see the module docstring); otherwise,
    or when the change cannot be scoped, the whole programs. Raises
    ``leir.footprint.MemoryBudgetExceeded`` before building anything when
    the programs exceed the memory budget."""
    from leir.footprint import require_within_budget

    outs_before = {t.name: t for t in before.outputs()}
    outs_after = {t.name: t for t in after.outputs()}
    if set(outs_before) != set(outs_after):
        return Verification(False, notes=[f"outputs changed from {sorted(outs_before)} to {sorted(outs_after)}"])
    require_within_budget(before, "verify", after=after)
    if scoped:
        from leir.transforms.scope import scope_of, sub_programs

        scope = scope_of(before, after)
        if scope is not None and not scope.compared:
            result = Verification(True, notes=[f"the step changes no output: {scope.describe()}"])
            result.scope = scope
            return result
        subs = sub_programs(before, after, scope) if scope is not None else None
        if subs is not None:
            return _verify_scoped(before, scope, subs, seeds, target)
    return _verify_whole(before, after, outs_before, seeds, target)


#: The upstream slice is evaluated with NumPy (``leir.evaluate``) rather than
#: built when its equations run at most this many iterations in all: a
#: build and its first call cost about half a second, the evaluation of a
#: few small nests milliseconds (and even a scan the evaluator has to run
#: one iteration at a time stays within a few seconds at this size).
EVALUATE_UPSTREAM_POINTS = 1 << 18


def _iterations(analysis: Analysis) -> int:
    return sum(info.iterations for info in analysis.equations)


def _verify_scoped(before: Analysis, scope, subs, seeds: tuple[int, ...], target: str) -> Verification:
    from leir.inputs import zeros
    from leir.bridge.run import compare, compile_program
    from leir.transforms.scope import merged

    result = Verification(True)
    result.scope = scope
    upstream = None
    if subs.upstream is not None:
        built = []

        def upstream(inputs):
            if not built and _iterations(subs.upstream) <= EVALUATE_UPSTREAM_POINTS:
                from leir.evaluate import EvaluationError, evaluate

                try:
                    return evaluate(subs.upstream, inputs)
                except EvaluationError:  # what the evaluator cannot run, TVM builds
                    pass
            if not built:
                built.append(compile_program(subs.upstream, target))
            return built[0](inputs).outputs
    both = merged(subs)
    if both is not None:
        program, rename = both
        run_both = compile_program(program, target)
    else:
        run_before = compile_program(subs.before, target)
        run_after = compile_program(subs.after, target)
    for seed in seeds:
        drawn = seed_inputs(before, seed, seeds)
        carried = {}
        if upstream is not None:
            carried = upstream({t.name: drawn[t.name] for t in subs.upstream.inputs()})

        def feed(sub: Analysis, names=None) -> dict:
            values = {}
            for t in sub.inputs():
                kind, name = subs.feeds[t.name]
                value = drawn[name] if kind == "input" else carried[name] if kind == "carried" else zeros(t)
                values[t.name if names is None else names[t.name]] = value
            return values

        if both is not None:
            ran = run_both({**feed(subs.before), **feed(subs.after, rename)})
            before_outputs = ran.outputs
            after_outputs = {name: ran.outputs[rename[name]] for name in scope.compared}
            notes = ran.notes
        else:
            ran_before = run_before(feed(subs.before))
            before_outputs, notes = ran_before.outputs, ran_before.notes
            after_outputs = run_after(feed(subs.after)).outputs
        per_seed = {}
        for name in scope.compared:
            t = subs.before.tensors[name]
            c = compare(after_outputs[name], before_outputs[name], t.dtype)
            per_seed[name] = c
            result.ok &= c.ok
        result.comparisons[seed] = per_seed
        for note in notes:
            if note not in result.notes:
                result.notes.append(note)
    result.notes.append(scope.describe())
    return result


def _verify_whole(before: Analysis, after: Analysis, outs_before: dict, seeds: tuple[int, ...],
                  target: str) -> Verification:
    from leir.bridge.run import compare, compile_program

    result = Verification(True)
    run_before = compile_program(before, target)
    run_after = compile_program(after, target)
    for seed in seeds:
        inputs = seed_inputs(before, seed, seeds)
        ran_before = run_before(inputs)
        ran_after = run_after(inputs)
        per_seed = {}
        for name, t in outs_before.items():
            c = compare(ran_after.outputs[name], ran_before.outputs[name], t.dtype)
            per_seed[name] = c
            result.ok &= c.ok
        result.comparisons[seed] = per_seed
        for note in ran_before.notes:
            if note not in result.notes:
                result.notes.append(note)
    return result

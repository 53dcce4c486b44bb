"""Numerical verification of a step: run the program before and after on
the same inputs and compare every output.

Several seeds; one of them draws integer-valued inputs, on which sums and
products are exact, so a reassociating step (split, rfactor) that is right
matches exactly there and a wrong index shows up as a large error rather
than hiding in rounding. Tolerances are Step-TP's (``leir.run.compare``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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


def verify(before: Analysis, after: Analysis, seeds: tuple[int, ...] = SEEDS, target: str = "llvm") -> Verification:
    from leir.run import compare, compile_program

    outs_before = {t.name: t for t in before.outputs()}
    outs_after = {t.name: t for t in after.outputs()}
    if set(outs_before) != set(outs_after):
        return Verification(False, notes=[f"outputs changed from {sorted(outs_before)} to {sorted(outs_after)}"])
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

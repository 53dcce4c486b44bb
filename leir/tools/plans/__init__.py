"""Plans: lookahead made of atomic steps.

A plan is a short sequence of catalogue steps that takes a program to a
known-good shape (a tiled contraction with a local accumulator, parallel
and vectorized rows, a GPU kernel with its loops bound to blocks and
threads), generated with parameters read from the program (its extents and
their divisors) and the machine (vector width, cores). The steps that pay
only in combination (a split that is slower until the reorder, the cache
and the vectorize after it) are then found together, where one-step greedy
screening would stop at the first.

A plan is applied step by step through ``leir.transforms.apply`` (each step
legal by its own check; ``leir.tools.plans.builder``); the search verifies
the end program numerically against the start once and records the plan as
its atomic steps, so ``leir replay`` and the dataset see only catalogue
steps.

``plans_for(analysis, target)`` lists the parameter sets (``PlanSpec``)
that fit the program, cheap (nothing applied); ``realize(spec, analysis)``
applies one and returns a ``Plan`` (or raises ``PlanFailed`` when a step the
plan needs is refused).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from leir import ast as A
from leir.explain.machine import Machine
from leir.semantics import Analysis
from leir.tools.plans.builder import Builder, PlanFailed
from leir.transforms import Step

__all__ = ["Plan", "PlanFailed", "PlanSpec", "distinct", "neighbours", "plans_for", "realize"]


class PlanSpec(Protocol):
    """One plan's parameters; ``realize`` applies its steps to a builder."""

    kind: str

    def to_json(self) -> dict: ...

    def realize(self, b: Builder) -> None: ...


@dataclass
class Plan:
    spec: PlanSpec
    steps: list[Step]
    #: The program after each step.
    programs: list[A.Program]
    #: Optional steps of the plan that were refused here, with the reason.
    skipped: list[tuple[Step, str]] = field(default_factory=list)

    @property
    def program(self) -> A.Program:
        """The program the plan reaches."""
        return self.programs[-1]

    @property
    def goal(self) -> str:
        """What the plan reaches, for the editor: "a tiled contraction",
        "parallel rows" (a plural kind takes no article)."""
        kind = self.spec.kind
        return kind if kind.endswith("s") else f"a {kind}"


def plans_for(analysis: Analysis, target: str = "llvm", machine: Machine | None = None, seed: int = 0,
              limit: int = 64) -> list[PlanSpec]:
    """The plans that fit ``analysis`` for ``target``, most promising first
    within each kind (at most ``limit`` per contraction)."""
    rng = random.Random(seed)
    if target == "cuda":
        from leir.tools.plans.gpu import gpu_plans

        return list(gpu_plans(analysis, rng, limit))
    from leir.tools.plans.cpu import contraction_tilings, rows_plans

    machine = machine or Machine.detect()
    specs: list[PlanSpec] = list(contraction_tilings(analysis, machine, rng, limit))
    if not specs:
        specs.extend(rows_plans(analysis, machine))
    return specs


def neighbours(spec: PlanSpec, analysis: Analysis, target: str = "llvm", machine: Machine | None = None) -> list[PlanSpec]:
    """Plans of the same kind that differ from ``spec`` in one parameter,
    for the search to try around the best it has measured."""
    from leir.tools.plans.cpu import ContractionTiling, Rows, tiling_neighbours

    machine = machine or Machine.detect()
    if isinstance(spec, ContractionTiling):
        return list(tiling_neighbours(spec, analysis, machine))
    if isinstance(spec, Rows):
        from leir.tools.plans.cpu import rows_plans

        return [r for r in rows_plans(analysis, machine) if r != spec]
    return []


def realize(spec: PlanSpec, analysis: Analysis) -> Plan:
    """``spec`` applied to ``analysis``, step by step; ``PlanFailed`` when a
    step it needs is refused."""
    b = Builder.of(analysis)
    spec.realize(b)
    if not b.steps:
        raise PlanFailed(None, "the plan has no step that applies here")
    return Plan(spec, list(b.steps), list(b.programs), list(b.skipped))


def distinct(specs: Iterable[PlanSpec], analysis: Analysis, key: Callable[[A.Program], str], seen: set[str],
             max_steps: int | None = None,
             on_error: Callable[[PlanSpec, Exception], None] | None = None) -> Iterator[tuple[Plan, str]]:
    """(plan, ``key`` of its program) for each of ``specs`` that applies to
    ``analysis``, has at most ``max_steps`` steps and reaches a program whose
    key is not in ``seen`` (it joins ``seen``). A plan a step of which is
    refused is passed over; with ``on_error``, so is one that raises anything
    else (a bug in a plan), after ``on_error(spec, error)``."""
    from leir.errors import LeirError

    for spec in specs:
        try:
            plan = realize(spec, analysis)
        except (PlanFailed, LeirError):
            continue  # a step the plan needs was refused: it does not fit this program
        except Exception as e:
            if on_error is None:
                raise
            on_error(spec, e)
            continue
        if max_steps is not None and len(plan.steps) > max_steps:
            continue
        k = key(plan.program)
        if k in seen:
            continue
        seen.add(k)
        yield plan, k

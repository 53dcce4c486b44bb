"""Applying a plan one catalogue step at a time.

A ``Builder`` holds the program a plan has reached and applies each next
step through ``leir.transforms.apply`` (the step's own check, then TVM's
primitive), so a plan is never more than a sequence of atomic, legal steps.
Loop names change as steps apply (``i`` splits into ``i_0`` and ``i_1``,
TVM's ``ax0`` after a ``reverse_compute_at``), so the builder reads them
back from the program after each step instead of predicting them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leir import ast as A
from leir.semantics import Analysis, analyze
from leir.transforms import Step, TransformError, apply, context_of

__all__ = ["Builder", "PlanFailed"]


class PlanFailed(Exception):
    """A step the plan cannot do without was refused: the plan does not fit
    this program (``reason`` is the step's own refusal)."""

    def __init__(self, step: Step | None, reason: str):
        super().__init__(f"{step.id} {step.args}: {reason}" if step is not None else reason)
        self.step = step
        self.reason = reason


@dataclass
class Builder:
    """The program a plan has reached, and the steps that reached it."""

    program: A.Program
    steps: list[Step] = field(default_factory=list)
    #: Optional steps that were refused: (step, reason).
    skipped: list[tuple[Step, str]] = field(default_factory=list)
    #: The program after each of ``steps``.
    programs: list[A.Program] = field(default_factory=list)
    _analysis: Analysis | None = None

    @classmethod
    def of(cls, analysis: Analysis) -> "Builder":
        return cls(analysis.program, _analysis=analysis)

    @property
    def analysis(self) -> Analysis:
        if self._analysis is None:
            self._analysis = analyze(self.program)
        return self._analysis

    @property
    def ctx(self):
        return context_of(self.analysis)

    # ---------------------------------------------------------- reading

    def blocks(self) -> list[str]:
        return list(self.ctx.block_names)

    def info(self, block: str):
        return self.ctx.equation_of_block(block)

    def loops(self, block: str) -> list[str]:
        """The variables of the loops around ``block``, outermost first."""
        return [loop.var for loop in self.info(block).loops]

    def loop(self, block: str, var: str) -> A.Loop:
        return self.ctx.loop_site(block, var).loop

    def extent(self, block: str, var: str) -> int:
        return self.loop(block, var).extent

    # --------------------------------------------------------- applying

    def apply(self, step_id: str, args: dict[str, Any], optional: bool = False) -> bool:
        """Apply one step. A refused step raises ``PlanFailed``, unless it is
        ``optional``: then it is recorded in ``skipped`` and False returned."""
        step = Step(step_id, args)
        try:
            program = apply(self.analysis, step)
        except TransformError as e:
            if optional:
                self.skipped.append((step, e.short))
                return False
            raise PlanFailed(step, e.short) from None
        self.program, self._analysis = program, None
        self.steps.append(step)
        self.programs.append(program)
        return True

    def split(self, block: str, var: str, inner: int) -> tuple[str, str]:
        """Split loop ``var`` of ``block`` so that the inner loop has ``inner``
        iterations (an exact divisor: plans never add guards); the names of
        the outer and inner loops."""
        extent = self.extent(block, var)
        if extent % inner or not 1 < inner < extent:
            raise PlanFailed(Step("split", {"block": block, "loop": var, "factors": [extent // inner, inner]}),
                             f"{inner} is not a proper divisor of {extent}")
        before = self.loops(block)
        p = before.index(var)
        self.apply("split", {"block": block, "loop": var, "factors": [extent // inner, inner]})
        after = self.loops(block)
        return after[p], after[p + 1]

    def reorder_to(self, block: str, order: list[str]) -> None:
        """Bring the loops around ``block`` into ``order`` (a permutation of a
        run of them): one ``reorder`` step, a swap where one swap does it,
        else the run from the first loop that moves to the last, in its new
        order (``"order"``: legal when each swap that sorts it is)."""
        rank = {v: k for k, v in enumerate(order)}
        current = [v for v in self.loops(block) if v in rank]
        target = sorted(current, key=rank.__getitem__)
        moved = [k for k, (a, b) in enumerate(zip(current, target)) if a != b]
        if not moved:
            return
        first, last = moved[0], moved[-1]
        if last == first + 1 and current[first] == target[last] and current[last] == target[first]:
            self.apply("reorder", {"block": block, "loops": [current[first], current[last]]})
        else:
            self.apply("reorder", {"block": block, "order": target[first:last + 1]})

    def fuse(self, block: str, outer: str, inner: str) -> str:
        before = self.loops(block)
        p = before.index(outer)
        self.apply("fuse", {"block": block, "loops": [outer, inner]})
        return self.loops(block)[p]

    def decompose_reduction(self, block: str) -> None:
        """Write ``block``'s initial value before its first reduction loop
        (optional: skipped when refused). Last in a plan: the block's name
        then passes to the initialisation, the update taking the next."""
        info = self.info(block)
        first = next((v for v in self.loops(block) if v not in info.spatial), None)
        if first is not None:
            self.apply("decompose_reduction", {"block": block, "loop": first}, optional=True)

    def cache_read(self, block: str, tensor: str, scope: str = "g") -> str:
        """Read ``tensor`` in ``block`` through a copy in ``scope``; the block
        that makes the copy."""
        before = set(self.blocks())
        self.apply("cache_read", {"block": block, "tensor": tensor, "scope": scope})
        return next(b for b in self.blocks() if b not in before)

    def cache_write(self, block: str, scope: str = "l") -> str:
        """Cache the writes of ``block`` in ``scope``; the block that now
        computes into the cache (``block`` itself becomes the copy out)."""
        tensor = self.info(block).equation.lhs.tensor
        before = {self.info(b).equation.lhs.tensor for b in self.blocks()}
        self.apply("cache_write", {"block": block, "tensor": tensor, "scope": scope})
        return next(b for b in self.blocks() if self.info(b).equation.lhs.tensor not in before)

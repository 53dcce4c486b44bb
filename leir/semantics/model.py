"""The data model of an analysis: the tensor table (``TensorInfo``), the
meaning of each equation (``EquationInfo``), and the result of ``analyze``
(``Analysis``). Plain data: nothing here runs a check."""

from __future__ import annotations

from dataclasses import dataclass, field

from leir import ast as A
from leir.ast import Span
from leir.diagnostics import Diagnostic

#: Initial value implied for each reduction combiner.
COMBINER_INIT = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # a key of ast.DTYPES
    shape: tuple[int, ...]
    scope: str  # a key of ast.SCOPES
    role: str  # "in" | "out" | "tmp"
    declared: bool
    #: Where the tensor is declared, or first accessed when it is inferred.
    span: Span | None = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def as_decl(self) -> A.Decl:
        return A.Decl(self.role, self.name, self.dtype, self.shape, self.scope)


@dataclass(frozen=True)
class EquationInfo:
    site: A.EquationSite
    #: "assign": writes a value computed from other tensors;
    #: "reduce": first write of the tensor, accumulating with an implied init;
    #: "update": reads the element it writes, which an earlier equation wrote.
    kind: str
    #: "sum" | "prod" | "max" | "min" when the right-hand side has a
    #: reduction shape (``C = C + e``...), else None.
    combiner: str | None
    #: The ``e`` of a reduction shape: what is combined into the element.
    operand: A.Expr | None
    #: Enclosing loop variables that index the written element.
    spatial: tuple[str, ...]
    #: Enclosing loop variables that do not (reduction axes for reduce/update).
    reduce_axes: tuple[str, ...]
    #: Position in program order.
    index: int

    @property
    def equation(self) -> A.Equation:
        return self.site.equation

    @property
    def loops(self) -> tuple[A.Loop, ...]:
        return self.site.loops

    @property
    def init(self) -> float | None:
        return COMBINER_INIT[self.combiner] if self.kind == "reduce" else None

    @property
    def iterations(self) -> int:
        """How many times the equation runs: the product of its loops' extents."""
        n = 1
        for loop in self.loops:
            n *= loop.extent
        return n


@dataclass
class Analysis:
    program: A.Program
    tensors: dict[str, TensorInfo]
    equations: list[EquationInfo]
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    def inputs(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "in"]

    def outputs(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "out"]

    def temporaries(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "tmp"]

    def complete_program(self) -> A.Program:
        """The program with a declaration for every tensor (declared ones
        first, in their order; then inferred inputs, outputs, temporaries)."""
        declared = list(self.program.decls)
        names = {d.name for d in declared}
        inferred = [t for t in self.tensors.values() if t.name not in names]
        order = {"in": 0, "out": 1, "tmp": 2}
        inferred.sort(key=lambda t: order[t.role])  # stable: first appearance within a role
        return A.Program(
            tuple(declared) + tuple(t.as_decl() for t in inferred),
            self.program.units,
            self.program.span,
            self.program.end_comments,
        )

"""The LEIR syntax tree.

Every node is an immutable dataclass. Nodes parsed from text carry the exact
source span they came from (``Span`` in character offsets into the document);
nodes built by a transformation carry ``span=None``. Comments are kept on the
nodes that own a line in the canonical layout (declarations, loops,
equations, the closing ``];`` of a nest) so that the formatter never loses
them.

The grammar this tree represents is written out in docs/leir-syntax.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

#: Loop kinds and the TVM loop they lower to.
LOOP_KINDS = {
    "L": "serial",
    "P": "parallel",
    "V": "vectorized",
    "U": "unroll",
    "B": "thread_binding",
}

#: Loop kinds in words, for messages ("inside parallel loop i").
KIND_WORDS = {"L": "serial", "P": "parallel", "V": "vectorized", "U": "unrolled", "B": "thread-bound"}

#: Thread-axis names a ``B`` loop variable may take, and the TVM thread tag.
THREAD_AXES = {
    "bx": "blockIdx.x",
    "by": "blockIdx.y",
    "bz": "blockIdx.z",
    "tx": "threadIdx.x",
    "ty": "threadIdx.y",
    "tz": "threadIdx.z",
}

#: Element types, LEIR spelling -> TVM dtype string.
DTYPES = {
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "f8e4m3fn": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "i4": "int4",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u4": "uint4",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "bool": "bool",
}

#: Storage scopes, LEIR letter -> TVM storage scope.
SCOPES = {"g": "global", "s": "shared", "l": "local"}

#: Declaration roles.
ROLES = ("in", "out", "tmp")

#: Functions an expression may call, with their arity. ``max``/``min`` take
#: two arguments, ``if_then_else`` three. A dtype name used as a function
#: (``f32(x)``) is a cast and is not listed here.
FUNCTIONS = {
    "exp": 1,
    "log": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "abs": 1,
    "erf": 1,
    "tanh": 1,
    "sigmoid": 1,
    "floor": 1,
    "ceil": 1,
    "max": 2,
    "min": 2,
    "pow": 2,
    "if_then_else": 3,
}

#: Binary operators from loosest to tightest binding. ``**`` is right
#: associative, every other operator left associative.
BINARY_PRECEDENCE = {
    "|": 1,
    "&": 2,
    "==": 3,
    "!=": 3,
    "<": 4,
    "<=": 4,
    ">": 4,
    ">=": 4,
    "+": 5,
    "-": 5,
    "*": 6,
    "/": 6,
    "//": 6,
    "%": 6,
    "**": 8,
}
#: Unary minus and ``!`` bind tighter than ``*`` and looser than ``**``
#: (``-x**2`` is ``-(x**2)``), as in Python.
UNARY_PRECEDENCE = 7

COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
LOGICAL = frozenset({"&", "|"})


@dataclass(frozen=True, order=True)
class Span:
    """Half-open range ``[start, end)`` of character offsets into a document."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"bad span {self.start}..{self.end}")

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end

    def cover(self, other: "Span | None") -> "Span":
        if other is None:
            return self
        return Span(min(self.start, other.start), max(self.end, other.end))


# ----------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Num:
    """A numeric literal. ``text`` is the literal as written (kept so that
    ``1e-05`` prints back as ``1e-05``); ``value`` is int for integer
    literals, float otherwise (``inf`` is ``float('inf')``)."""

    value: int | float
    text: str
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Var:
    """A loop variable used as a value (in an index or an expression)."""

    name: str
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Access:
    """A tensor element ``Name^{dtype,scope}_{i,j}``.

    ``indices`` is ``None`` for a scalar (no subscript). ``dtype`` and
    ``scope`` are what the superscript says (``None`` when absent); the
    tensor's real dtype and scope come from the semantic analysis."""

    tensor: str
    indices: tuple["Expr", ...] | None
    dtype: str | None = None
    scope: str | None = None
    span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)

    @property
    def rank(self) -> int:
        return 0 if self.indices is None else len(self.indices)


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "!"
    operand: "Expr"
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Binary:
    op: str  # a key of BINARY_PRECEDENCE
    lhs: "Expr"
    rhs: "Expr"
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Call:
    """``func(args)``: a FUNCTIONS entry or a cast to a DTYPES name."""

    func: str
    args: tuple["Expr", ...]
    span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)


Expr = Union[Num, Var, Access, Unary, Binary, Call]


# ------------------------------------------------------------------ statements


@dataclass(frozen=True)
class Comments:
    """Comments that own whole lines before a node, and the one after it on
    its own line. Texts keep their leading ``#``."""

    before: tuple[str, ...] = ()
    after: str | None = None


NO_COMMENTS = Comments()


@dataclass(frozen=True)
class Equation:
    """``lhs = rhs`` with an optional guard ``where predicate``."""

    lhs: Access
    rhs: Expr
    predicate: Expr | None = None
    span: Span | None = field(default=None, compare=False)
    comments: Comments = field(default=NO_COMMENTS, compare=False)


@dataclass(frozen=True)
class Loop:
    """``K^{extent}_{var=start}``: iterates ``var`` over
    ``start .. start+extent-1``."""

    kind: str  # a key of LOOP_KINDS (the parser reports any other letter)
    extent: int
    var: str
    start: int = 0
    span: Span | None = field(default=None, compare=False)
    kind_span: Span | None = field(default=None, compare=False)
    extent_span: Span | None = field(default=None, compare=False)
    var_span: Span | None = field(default=None, compare=False)
    comments: Comments = field(default=NO_COMMENTS, compare=False)


@dataclass(frozen=True)
class Nest:
    """``LOOPS [ ITEM; ... ];``: loops nested left to right around a body
    of equations and nested nests, in program order. ``loops`` may be empty
    (a bracketed body run once)."""

    loops: tuple[Loop, ...]
    body: tuple["Item", ...]
    span: Span | None = field(default=None, compare=False)
    #: Comments between the last body item and ``]``, and after ``];``.
    end_comments: Comments = field(default=NO_COMMENTS, compare=False)
    #: Comments before and after the opening ``[`` line of a nest that has
    #: no loops (with loops, the loops own those lines).
    open_comments: Comments = field(default=NO_COMMENTS, compare=False)
    #: Whether the body was written with brackets. A bare top-level
    #: equation (``A=B;`` outside any ``[...]``, which the Step-TP form
    #: allows) is a Nest with no loops and ``bracketed=False``.
    bracketed: bool = True


Item = Union[Equation, Nest]


@dataclass(frozen=True)
class Decl:
    """``in X: f32[512,128] @s``: a tensor declaration."""

    role: str  # "in" | "out" | "tmp"
    name: str
    dtype: str  # a key of DTYPES
    shape: tuple[int, ...]  # () for a scalar
    scope: str = "g"  # a key of SCOPES
    span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)
    comments: Comments = field(default=NO_COMMENTS, compare=False)


@dataclass(frozen=True)
class Program:
    decls: tuple[Decl, ...]
    units: tuple[Nest, ...]
    span: Span | None = field(default=None, compare=False)
    #: Comments after the last statement of the file.
    end_comments: Comments = field(default=NO_COMMENTS, compare=False)

    def decl(self, name: str) -> Decl | None:
        for d in self.decls:
            if d.name == name:
                return d
        return None


Node = Union[Program, Decl, Nest, Loop, Equation, Num, Var, Access, Unary, Binary, Call]


# -------------------------------------------------------------------- walking


def children(node: Node) -> Iterator[Node]:
    """Direct children in source order."""
    return iter(_children(node))


def _children(node: Node) -> tuple[Node, ...]:
    kind = type(node)
    if kind is Binary:
        return (node.lhs, node.rhs)
    if kind is Access:
        return node.indices or ()
    if kind is Num or kind is Var:
        return ()
    if kind is Unary:
        return (node.operand,)
    if kind is Call:
        return tuple(node.args)
    if kind is Equation:
        return (node.lhs, node.rhs) if node.predicate is None else (node.lhs, node.rhs, node.predicate)
    if kind is Nest:
        return tuple(node.loops) + tuple(node.body)
    if kind is Program:
        return tuple(node.decls) + tuple(node.units)
    return ()


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal of ``node`` and everything under it (with a stack
    of its own: a recursive generator costs a frame per level for every node
    it yields, and the analyses walk every equation on each request)."""
    stack = [node]
    pop, push = stack.pop, stack.extend
    while stack:
        n = pop()
        yield n
        kids = _children(n)
        if kids:
            push(kids[::-1])


@dataclass(frozen=True)
class EquationSite:
    """An equation together with the loops around it, outermost first."""

    equation: Equation
    loops: tuple[Loop, ...]
    #: Path from the program to the equation: unit index, then body indices.
    path: tuple[int, ...]


def equation_sites(program: Program) -> Iterator[EquationSite]:
    """Every equation in program order, with its enclosing loops."""

    def visit(nest: Nest, outer: tuple[Loop, ...], path: tuple[int, ...]):
        loops = outer + nest.loops
        for i, item in enumerate(nest.body):
            if isinstance(item, Equation):
                yield EquationSite(item, loops, path + (i,))
            else:
                yield from visit(item, loops, path + (i,))

    for u, unit in enumerate(program.units):
        yield from visit(unit, (), (u,))

"""Parts of an equation's value and the temporaries that hold them: the
subexpressions a temporary can hold (``subexpressions``), where such a
temporary is computed (``placement``), its name and declaration
(``new_temporary``), replacing a node of a right-hand side
(``replace_at_path``), which side of a reduction is its operand
(``operand_side``) and an expression's text (``expr_text``).

Moved out of ``expression_splitting``, which imports these back; common
subexpression elimination and expression reorder import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.printer import print_expr
from leir.semantics import EquationInfo
from leir.transforms.base import Context, StaleStep
from leir.transforms.lib.nests import equations_under, places_of, replace_items
from leir.transforms.rewrite import fresh_name, item_at, names_in


def operand_side(eq: A.Equation) -> tuple[int, A.Expr] | None:
    """Which child of a reduction's right-hand side is the operand (the
    side that is not the written element), and the operand itself."""
    rhs = eq.rhs
    children = [rhs.lhs, rhs.rhs] if isinstance(rhs, A.Binary) else list(rhs.args) if isinstance(rhs, A.Call) else []
    if len(children) != 2:
        return None
    if children[0] == eq.lhs:
        return 1, children[1]
    if children[1] == eq.lhs:
        return 0, children[0]
    return None


# ----------------------------------------------------------- subexpressions


@dataclass(frozen=True)
class Occurrence:
    """A subexpression of an equation's right-hand side."""

    node: A.Expr
    #: Child positions from the right-hand side down to the node.
    path: tuple[int, ...]
    #: The dtype it is computed in.
    dtype: str
    text: str
    #: Tensors it reads and loop variables it uses.
    tensors: frozenset[str]
    names: frozenset[str]


def subexpressions(ctx: Context, info: EquationInfo) -> list[Occurrence]:
    """The parts of an equation's value that a temporary can hold, outer
    ones first: numbers computed from at least one tensor, not the whole
    right-hand side."""
    eq = info.equation
    dtype = ctx.analysis.tensors[eq.lhs.tensor].dtype
    if dtype == "bool":
        return []
    out: list[Occurrence] = []
    if info.combiner is not None and info.kind in ("reduce", "update"):
        side = operand_side(eq)
        if side is None:
            return []
        roots = [((side[0],), side[1], True)]
    else:
        roots = [((), eq.rhs, False)]
    from leir.cancel import checkpoint

    for path, node, include_root in roots:
        for sub_path, sub, sub_dtype in _walk(node, dtype, path):
            checkpoint()  # quadratic in the equation: a request's budget stops it (leir.cancel)
            if sub is node and not include_root:
                continue
            tensors = frozenset(n.tensor for n in A.walk(sub) if isinstance(n, A.Access))
            if not tensors or sub_dtype == "bool":
                continue
            out.append(Occurrence(sub, sub_path, sub_dtype, expr_text(sub), tensors, affine.index_vars(sub)))
    return out


def _walk(e: A.Expr, dtype: str, path: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], A.Expr, str]]:
    if isinstance(e, (A.Num, A.Var, A.Access)) or VT.is_index_expr(e) or VT.is_condition(e):
        return
    if isinstance(e, A.Call):
        if VT.is_cast(e):
            yield from _walk(e.args[0], e.func, path + (0,))
            return
        yield path, e, dtype
        if e.func == "if_then_else":
            return  # a branch may be out of bounds where its condition fails
        for k, arg in enumerate(e.args):
            yield from _walk(arg, dtype, path + (k,))
        return
    if isinstance(e, A.Unary):
        yield path, e, dtype
        yield from _walk(e.operand, dtype, path + (0,))
        return
    if isinstance(e, A.Binary):
        yield path, e, dtype
        yield from _walk(e.lhs, dtype, path + (0,))
        yield from _walk(e.rhs, dtype, path + (1,))


def find_subexpression(ctx: Context, info: EquationInfo, text: str) -> Occurrence:
    for occ in subexpressions(ctx, info):
        if occ.text == text:
            return occ
    raise StaleStep(f"{ctx.block_names[info.index]} has no subexpression {text}",
                    f"the right-hand side of {ctx.block_names[info.index]} is {expr_text(info.equation.rhs)}", info.equation.span)


def replace_at_path(eq: A.Equation, path: tuple[int, ...], new: A.Expr) -> A.Equation:
    """The equation with the node at ``path`` (from the right-hand side)
    replaced."""

    def go(e: A.Expr, rest: tuple[int, ...]) -> A.Expr:
        if not rest:
            return new
        k = rest[0]
        if isinstance(e, A.Unary):
            return replace(e, operand=go(e.operand, rest[1:]), span=None)
        if isinstance(e, A.Binary):
            return replace(e, lhs=go(e.lhs, rest[1:]), span=None) if k == 0 else replace(e, rhs=go(e.rhs, rest[1:]), span=None)
        assert isinstance(e, A.Call)
        args = list(e.args)
        args[k] = go(args[k], rest[1:])
        return replace(e, args=tuple(args), span=None)

    return replace(eq, rhs=go(eq.rhs, path), span=None)


def expr_text(e: A.Expr) -> str:
    names = frozenset(n.tensor for n in A.walk(e) if isinstance(n, A.Access))
    return print_expr(e, declared=names)


# ------------------------------------------------------------- temporaries


@dataclass(frozen=True)
class Placement:
    """Where a temporary for part of an equation is computed: inside the
    first ``depth`` loops around the equation, just before the item that
    holds the equation (``scope``: the equations of that item, which run
    between the temporary and its uses)."""

    info: EquationInfo
    depth: int
    scope: tuple[EquationInfo, ...]
    #: "unit": a new top-level equation before the unit; "body": before an
    #: item of a nest body; "split": the nest's loops are cut after the
    #: last loop the temporary needs.
    kind: str
    #: The unit (for "unit"), the item (for "body") or the nest ("split").
    path: tuple[int, ...]
    #: For "split": how many of the nest's loops stay outside.
    keep: int = 0

    @property
    def loops(self) -> tuple[A.Loop, ...]:
        return self.info.loops[: self.depth]

    def indices(self) -> tuple[A.Expr, ...] | None:
        return tuple(A.Var(l.var) for l in self.loops) if self.depth else None

    def read(self, temp: str) -> A.Access:
        return A.Access(temp, self.indices())

    def write(self, temp: str, value: A.Expr, guard: A.Expr | None) -> A.Equation:
        return A.Equation(A.Access(temp, self.indices()), _strip_spans(value), guard)

    def insert(self, program: A.Program, equation: A.Equation) -> A.Program:
        if self.kind == "unit":
            unit = program.units[self.path[0]]
            return replace_items(program, self.path, 1, (A.Nest((), (equation,), None, bracketed=False), unit))
        if self.kind == "body":
            return replace_items(program, self.path, 1, (equation, item_at(program, self.path)))
        nest = item_at(program, self.path)
        assert isinstance(nest, A.Nest)
        inner = A.Nest(nest.loops[self.keep:], nest.body, None, A.Comments(nest.end_comments.before))
        outer = A.Nest(nest.loops[: self.keep], (equation, inner), None, A.Comments((), nest.end_comments.after))
        return replace_items(program, self.path, 1, (outer,))


def placement(ctx: Context, info: EquationInfo, names: frozenset[str]) -> Placement:
    """Where a temporary of the values named by ``names`` (loop variables)
    is computed for ``info``: after the innermost loop it needs (and the
    innermost thread-bound loop: each thread computes its own)."""
    loops = info.loops
    needed = set(names)
    if info.equation.predicate is not None:
        needed |= affine.index_vars(info.equation.predicate)
    depth = 0
    for k, loop in enumerate(loops):
        if loop.var in needed or loop.kind == "B":
            depth = k + 1
    if depth == 0:
        unit = (info.site.path[0],)
        return Placement(info, 0, tuple(equations_under(ctx, unit)), "unit", unit)
    last = loops[depth - 1]
    site = next(s for s in ctx.loop_sites if s.loop is last)
    nest_path = places_of(ctx)[id(site.nest)].path
    if site.position == len(site.nest.loops) - 1:
        item = nest_path + (info.site.path[len(nest_path)],)
        return Placement(info, depth, tuple(equations_under(ctx, item)), "body", item)
    return Placement(info, depth, tuple(equations_under(ctx, nest_path)), "split", nest_path, site.position + 1)


def new_temporary(ctx: Context, occ: Occurrence, where: Placement) -> tuple[str, tuple[A.Decl, ...]]:
    """A fresh name for a temporary holding ``occ``, and the declaration it
    needs (only when it is not f32: the default)."""
    taken = names_in(ctx.program) | set(ctx.analysis.tensors)
    name = fresh_name(temporary_base(occ.node), taken)
    if occ.dtype == "f32":
        return name, ()
    shape = tuple(l.start + l.extent for l in where.loops)
    return name, (A.Decl("tmp", name, occ.dtype, shape),)


_OP_NAMES = {"+": "sum", "-": "diff", "*": "prod", "/": "ratio", "**": "pow", "//": "fdiv", "%": "mod"}


def temporary_base(e: A.Expr) -> str:
    """A name that says what a temporary holds: ``exp_X`` for
    ``exp(X_{i,j} - M_{i})``, ``X_diff`` for ``X_{i,j} - mean_{i}``."""
    first = next((n.tensor for n in A.walk(e) if isinstance(n, A.Access)), "t")
    if isinstance(e, A.Call):
        return f"{e.func}_{first}"
    if isinstance(e, A.Unary):
        return f"neg_{first}"
    if isinstance(e, A.Binary):
        return f"{first}_{_OP_NAMES.get(e.op, 'part')}"
    return f"{first}_part"


def _strip_spans(e: A.Expr) -> A.Expr:
    from leir.transforms.rewrite import map_expr

    return map_expr(e, lambda n: replace(n, span=None))

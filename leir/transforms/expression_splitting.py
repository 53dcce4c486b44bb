"""Split an equation in two: a subexpression into a temporary computed just before it, or a sum into two accumulations.

With ``"mode": "temporary"`` the chosen subexpression is computed into a new
temporary right before the equation, at the outermost place where
everything it depends on is known: a subexpression that does not change
along the inner loops is computed once per iteration of the outer ones
(``rsqrt(var_{i} + eps)`` once per row instead of once per element). The
temporary is indexed by the loops around that place. With ``"mode":
"accumulations"`` an equation ``Y = a + b`` becomes ``Y = a; Y += b`` (also
``-``, ``*``, ``/``, ``max``, ``min``), and a reduction ``C += a + b``
becomes ``C += a; C += b`` (also ``C *= a*b`` and ``max``/``min``): each part
can then be scheduled, fissioned or fused on its own.

It requires: for a temporary, a subexpression that computes a number from
at least one tensor (not a lone access or literal, not an index expression
or a condition, not inside an ``if_then_else``), is a proper part of the
right-hand side, does not read the tensor the equation writes, reads
nothing that an equation between the temporary and the use writes (the
loops the temporary is hoisted out of), and does not depend on a
vectorized loop (TVM 0.27 computes a temporary written and read inside one
vectorized loop wrong); for accumulations, a right-hand
side (or a reduction's operand) whose outermost operation is one of those
listed, on numbers (not booleans). Splitting a reduction's operand
reassociates it: the result is equal up to rounding.

Example: compute the row scale of a layer norm once per row

    step: {"block": "Y", "mode": "temporary", "expr": "rsqrt(var_{i} + 1e-05)"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (X_{i,j} - mean_{i})*rsqrt(var_{i} + 1e-05)$0;
      ];

    after:
    L^{8}_{i} [
      rsqrt_var_{i} = rsqrt(var_{i} + 1e-05);
      L^{16}_{j} [
        Y_{i,j} = (X_{i,j} - mean_{i})*rsqrt_var_{i};
      ];
    ];

Example: a sum of two products as two accumulations

    step: {"block": "C", "mode": "accumulations"}

    before:
    L^{16}_{i}
      L^{32}_{k} [
        C_{i} += X_{i,k}*A_{k} + Y_{i,k}*B_{k}$0;
      ];

    after:
    L^{16}_{i}
      L^{32}_{k} [
        C_{i} += X_{i,k}*A_{k};
        C_{i} += Y_{i,k}*B_{k};
      ];

Example: the subexpression reads what the nest it would leave writes

    step: {"block": "Y", "mode": "temporary", "expr": "S_{i}*2.0"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        S_{i} += X_{i,j};
        Y_{i,j} = X_{i,j} - S_{i}*2.0$0;
      ];

    refused: expression_splitting-operand-changes
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.lower import equation_text
from leir.printer import print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import BadStep, Candidate, Context, NotApplicable, StaleStep, Step, str_arg
from leir.transforms.operator_fusion import VECTOR_TEMPORARY_BUG, equations_under, places_of, replace_items
from leir.transforms.rewrite import fresh_name, item_at, names_in

ID = "expression_splitting"
TITLE = "Split expression"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "expression_splitting"

MODES = ("temporary", "accumulations")


class ReadsOwnOutput(NotApplicable):
    code = "expression_splitting-reads-own-output"


class OperandChanges(NotApplicable):
    code = "expression_splitting-operand-changes"


class NotSplittable(NotApplicable):
    code = "expression_splitting-not-splittable"


class VectorizedTemporary(NotApplicable):
    code = "expression_splitting-vectorized-temporary"


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    for info in ctx.equations_at(at):
        block = ctx.block_names[info.index]
        if _accumulation_parts(ctx, info) is not None:
            title = f"Split {block} into two {'accumulations' if info.combiner else 'equations'}"
            out.append(Candidate(Step(ID, {"block": block, "mode": "accumulations"}), title, info.equation.span))
        seen: set[str] = set()
        for occ in subexpressions(ctx, info):
            if occ.text in seen:
                continue
            seen.add(occ.text)
            if _temporary_refusal(ctx, info, occ) is not None:
                continue
            where = placement(ctx, info, occ.names)
            hoisted = [l.var for l in info.loops[where.depth:]]
            title = f"Compute {occ.text} into a temporary"
            if hoisted:
                title += f" outside loop{'s' if len(hoisted) > 1 else ''} {', '.join(hoisted)}"
            out.append(Candidate(Step(ID, {"block": block, "mode": "temporary", "expr": occ.text}), title,
                                 occ.node.span or info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    info = ctx.equation_of_block(str_arg(args, "block", ID))
    mode = args.get("mode")
    if mode not in MODES:
        raise BadStep(f"{ID}: \"mode\" is one of {', '.join(MODES)}, got {mode!r}")
    if mode == "accumulations":
        if _accumulation_parts(ctx, info) is None:
            raise NotSplittable(
                f"{ctx.block_names[info.index]} is not a sum of two parts",
                f"splitting into accumulations needs a right-hand side (or a reduction's operand) whose outermost "
                f"operation is + - * / max or min on numbers; {_text(info.equation.rhs)} is not",
                info.equation.span)
        return
    occ = find_subexpression(ctx, info, str_arg(args, "expr", ID))
    refusal = _temporary_refusal(ctx, info, occ)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    info = ctx.equation_of_block(args["block"])
    eq = info.equation
    if args["mode"] == "accumulations":
        first, second = _accumulation_parts(ctx, info)
        return replace_items(ctx.program, info.site.path, 1, (first, second))
    occ = find_subexpression(ctx, info, args["expr"])
    where = placement(ctx, info, occ.names)
    temp, decls = new_temporary(ctx, occ, where)
    program = replace_items(ctx.program, info.site.path, 1, (replace_at_path(eq, occ.path, where.read(temp)),))
    program = replace(program, decls=program.decls + decls)
    return where.insert(program, where.write(temp, occ.node, eq.predicate))


def expression_splitting(program, block: str, mode: str, expr: str | None = None):
    """Split ``block`` (see the module docstring) and return the new program."""
    args = {"block": block, "mode": mode}
    if expr is not None:
        args["expr"] = expr
    return apply_transform(__name__, program, Step(ID, args))


def _temporary_refusal(ctx: Context, info: EquationInfo, occ: "Occurrence") -> NotApplicable | None:
    eq = info.equation
    if eq.lhs.tensor in occ.tensors:
        return ReadsOwnOutput(f"{occ.text} reads {eq.lhs.tensor}, which {ctx.block_names[info.index]} writes",
                              f"a temporary computed before the equation would hold {eq.lhs.tensor} as it was before "
                              f"the equation's update, not as the equation reads it", occ.node.span)
    where = placement(ctx, info, occ.names)
    vector = next((l for l in where.loops if l.kind == "V"), None)
    if vector is not None:
        return VectorizedTemporary(f"the temporary would be computed inside vectorized loop {vector.var}",
                                   f"{VECTOR_TEMPORARY_BUG}; {occ.text} depends on vectorized loop {vector.var}, "
                                   f"so its temporary "
                                   f"would be written and read inside that loop", vector.span)
    writer = next((w for w in where.scope if w.equation.lhs.tensor in occ.tensors), None)
    if writer is not None:
        loops = ", ".join(l.var for l in info.loops[where.depth:]) or "its nest"
        return OperandChanges(
            f"{writer.equation.lhs.tensor} changes while {occ.text} is in use",
            f"the temporary would be computed before loop{'s' if ',' in loops else ''} {loops}, but "
            f"{equation_text(writer.equation)} inside {'them' if ',' in loops else 'it'} writes {writer.equation.lhs.tensor}, "
            f"so {occ.text} can change between its uses", occ.node.span)
    return None


# ------------------------------------------------------------ accumulations

_ACCUMULATING = {"+": "sum", "-": "sum", "*": "prod"}


def _accumulation_parts(ctx: Context, info: EquationInfo) -> tuple[A.Equation, A.Equation] | None:
    """The two equations an accumulation split gives, or None."""
    eq = info.equation
    lhs = eq.lhs
    rhs = eq.rhs
    if ctx.analysis.tensors[lhs.tensor].dtype == "bool":
        return None
    if info.kind == "assign":
        if isinstance(rhs, A.Binary) and rhs.op in ("+", "-", "*", "/") and not VT.is_index_expr(rhs):
            return (replace(eq, rhs=rhs.lhs, span=None),
                    A.Equation(lhs, A.Binary(rhs.op, lhs, rhs.rhs), eq.predicate))
        if isinstance(rhs, A.Call) and rhs.func in ("max", "min"):
            return (replace(eq, rhs=rhs.args[0], span=None),
                    A.Equation(lhs, A.Call(rhs.func, (lhs, rhs.args[1])), eq.predicate))
        return None
    if info.combiner is None:
        return None
    own = _operand_side(eq)
    if own is None:
        return None
    operand = own[1]
    outer_op = rhs.op if isinstance(rhs, A.Binary) else rhs.func
    if isinstance(rhs, A.Binary):
        if info.combiner == "sum" and isinstance(operand, A.Binary) and operand.op in ("+", "-"):
            first_op = outer_op
            second_op = outer_op if operand.op == "+" else ("-" if outer_op == "+" else "+")
        elif info.combiner == "prod" and isinstance(operand, A.Binary) and operand.op == "*":
            first_op = second_op = "*"
        else:
            return None
        return (A.Equation(lhs, A.Binary(first_op, lhs, operand.lhs), eq.predicate, None, eq.comments),
                A.Equation(lhs, A.Binary(second_op, lhs, operand.rhs), eq.predicate))
    if isinstance(operand, A.Call) and operand.func == outer_op:
        return (A.Equation(lhs, A.Call(outer_op, (lhs, operand.args[0])), eq.predicate, None, eq.comments),
                A.Equation(lhs, A.Call(outer_op, (lhs, operand.args[1])), eq.predicate))
    return None


def _operand_side(eq: A.Equation) -> tuple[int, A.Expr] | None:
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
        side = _operand_side(eq)
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
            out.append(Occurrence(sub, sub_path, sub_dtype, _text(sub), tensors, affine.index_vars(sub)))
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
                    f"the right-hand side of {ctx.block_names[info.index]} is {_text(info.equation.rhs)}", info.equation.span)


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


def _text(e: A.Expr) -> str:
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

"""Compute once, into a new temporary, a part of an equation that some of its loops do not change.

A subexpression that does not depend on every loop around its equation is
evaluated again on each iteration of the loops it does not use:
``rsqrt(var_{i} + 1e-05)`` in a layer norm's last nest is the same for the
whole row ``j`` runs over. Precomputing it stores it in a temporary indexed
by the loops it does depend on, and the equation reads the temporary
instead: one ``rsqrt`` per row instead of one per element. Every
occurrence of the expression in the equation is replaced. The temporary is
computed as early as it can be: in a nest of its own before the
equation's outermost nest, or else inside the nests around the equation
(after ``compute_at`` fused them), right before the part that holds it. It
is named ``r`` (or ``r_1``... when taken).

It requires:

- a subexpression of the equation's value (not inside a condition or an
  index, not in a bool computation);
- a subexpression that performs an operation or a call on at least one
  tensor (not a lone access or constant);
- a subexpression that does not use every loop around the equation;
- a subexpression that is the largest such part around it (precompute
  ``rsqrt(v + e)``, not ``v + e`` inside it);
- a place to compute it, where the loops around are all loops it depends on
  and nothing between it and the equation (the equation's nest, or the part
  of it holding the equation) writes what it reads;
- a guard, if any, that uses only loops the subexpression depends on (it is
  copied);
- in a program that binds loops to GPU threads, a place under thread-bound
  loops (at least one for a nest of its own, all the kernel's thread axes
  inside a kernel).

Example: one reciprocal square root per row of a layer norm

    step: {"block": "Y", "expr": "rsqrt(var_{i} + 1e-05)"}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];

    L^{64}_{i}
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*$0rsqrt(var_{i} + 1e-05)*g_{j};
      ];

    after:
    L^{64}_{i}
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];

    L^{64}_{i} [
      r_{i} = rsqrt(var_{i} + 1e-05);
    ];

    L^{64}_{i}
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*r_{i}*g_{j};
      ];

Example: a scale that depends on the column only

    step: {"block": "Y", "expr": "exp(b_{j})*2.0"}

    before:
    L^{16}_{i}
      L^{8}_{j} [
        $0Y_{i,j} = X_{i,j} + exp(b_{j})*2.0;
      ];

    after:
    L^{8}_{j} [
      r_{j} = exp(b_{j})*2.0;
    ];

    L^{16}_{i}
      L^{8}_{j} [
        Y_{i,j} = X_{i,j} + r_{j};
      ];

Example: inside a row loop that also computes the variance, right before its use

    step: {"block": "Y", "expr": "rsqrt(var_{i} + 1e-05)"}

    before:
    L^{64}_{i} [
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*$0rsqrt(var_{i} + 1e-05);
      ];
    ];

    after:
    L^{64}_{i} [
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];
      r_{i} = rsqrt(var_{i} + 1e-05);
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*r_{i};
      ];
    ];

Example: only the largest invariant part is precomputed

    step: {"block": "Y", "expr": "var_{i} + 1e-05"}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];

    L^{64}_{i}
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*rsqrt($0var_{i} + 1e-05);
      ];

    refused: precompute-not-maximal
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.printer import print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import BadStep, Candidate, Context, NotApplicable, StaleStep, Step
from leir.transforms.rewrite import fresh_name, item_at, names_in, replace_at

ID = "precompute"
GROUP = "memory"
TITLE = "Precompute an invariant expression"
STEPTP = "precompute_indices"

#: The temporary's name when the step does not give one.
BASE_NAME = "r"

_RESERVED = frozenset({"in", "out", "tmp", "where", "inf"}) | frozenset(A.DTYPES) | frozenset(A.FUNCTIONS)


class InCondition(NotApplicable):
    """The subexpression is inside a condition, an index or a bool computation."""

    code = "precompute-in-condition"


class Trivial(NotApplicable):
    """The subexpression performs no operation or call on a tensor (a lone value, or constants
    and loop variables)."""

    code = "precompute-trivial"


class NotInvariant(NotApplicable):
    """The subexpression uses every loop around the equation."""

    code = "precompute-not-invariant"


class ReadsWritten(NotApplicable):
    """The subexpression reads a tensor that an equation between its place and the equation
    writes."""

    code = "precompute-reads-written"


class NotMaximal(NotApplicable):
    """The subexpression is part of a larger one that does not use every loop either."""

    code = "precompute-not-maximal"


class Guarded(NotApplicable):
    """The equation's guard uses loops the subexpression does not depend on."""

    code = "precompute-guarded"


class OnHost(NotApplicable):
    """In a program that binds loops to GPU threads, the subexpression would be computed outside
    the thread-bound loops."""

    code = "precompute-on-host"


@dataclass(frozen=True)
class _Site:
    """A subexpression in value position, with the dtype it is computed in
    and its parent (None for the whole value)."""

    node: A.Expr
    dtype: str
    parent: A.Expr | None


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    from leir.cancel import checkpoint

    out = []
    for info in ctx.equations_at(at):
        seen = set()
        for site in _value_sites(ctx, info):
            checkpoint()  # quadratic in the equation: a request's budget stops it (leir.cancel)
            text = _text(ctx, site.node)
            if text in seen or _refusal(ctx, info, site) is not None:
                continue
            seen.add(text)
            if at is not None and not _under_cursor(site.node, at) and _any_under_cursor(ctx, info, at):
                continue
            name = ctx.block_names[info.index]
            loops = _loops(info, site.node)
            per = f"once per {', '.join(l.var for l in loops)}" if loops else "once"
            out.append(Candidate(Step(ID, {"block": name, "expr": text}), f"Precompute {text} {per}",
                                 site.node.span or info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    info, site = _args(ctx, args)
    refusal = _refusal(ctx, info, site)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    info, site = _args(ctx, args)
    program = ctx.program
    eq = info.equation
    name = fresh_name(BASE_NAME, names_in(program) | _RESERVED)
    loops = _loops(info, site.node)
    ref = A.Access(name, tuple(A.Var(l.var) for l in loops) or None)
    target, dtype = site.node, site.dtype

    def swap(e: A.Expr, context: str) -> A.Expr:
        if e == target and context == dtype:
            return ref
        return _map_values(e, context, swap)

    new_eq = replace(eq, rhs=swap(eq.rhs, ctx.analysis.tensors[eq.lhs.tensor].dtype))
    program = replace_at(program, info.site.path, (new_eq,))
    place = _placement(ctx, info, target)
    assert isinstance(place, _Place)
    new_loops = []
    for k, l in enumerate(place.loops):
        kind = "L" if l.kind == "V" and k != len(place.loops) - 1 else l.kind
        new_loops.append(A.Loop(kind, l.extent, l.var, l.start))
    computed = A.Equation(ref, _strip(target), None if eq.predicate is None else _strip(eq.predicate))
    if new_loops:
        item: A.Item = A.Nest(tuple(new_loops), (computed,))
    else:
        item = computed  # a bare equation where all its loops are around it already
    program = replace_at(program, place.path, (item, item_at(program, place.path)))
    if dtype != "f32":
        shape = tuple(l.start + l.extent for l in loops)
        program = replace(program, decls=program.decls + (A.Decl("tmp", name, dtype, shape),))
    return program


def precompute(program, block: str, expr: str):
    """Apply a precompute (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "expr": expr}))


# ------------------------------------------------------------- arguments


def _args(ctx: Context, args: dict) -> tuple[EquationInfo, _Site]:
    block, expr = args.get("block"), args.get("expr")
    if not isinstance(block, str) or not block:
        raise BadStep(f"{ID}: argument 'block' must be a name, got {block!r}")
    if not isinstance(expr, str) or not expr:
        raise BadStep(f"{ID}: argument 'expr' must be the text of a subexpression, got {expr!r}")
    info = ctx.equation_of_block(block)
    for site in _value_sites(ctx, info):
        if _text(ctx, site.node) == expr:
            return info, site
    eq = info.equation
    parts = [eq.rhs] + ([eq.predicate] if eq.predicate is not None else [])
    for node in (n for p in parts for n in A.walk(p)):
        if _text(ctx, node) == expr:
            raise InCondition(
                f"{expr} is inside a condition or an index",
                f"in {_eq_text(eq)}, {expr} is part of a condition, an index or a bool computation, which are "
                f"computed in other types; precompute the value around it", node.span)
    raise StaleStep(f"no subexpression {expr} in {block}", f"{block} is {_eq_text(eq)}")


# -------------------------------------------------------------- analysis


def _value_sites(ctx: Context, info: EquationInfo) -> list[_Site]:
    """The subexpressions of the value computed as numbers, outermost first."""
    out: list[_Site] = []

    def visit(e: A.Expr, dtype: str, parent: A.Expr | None) -> None:
        if dtype == "bool":
            return
        out.append(_Site(e, dtype, parent))
        _map_values(e, dtype, lambda child, context: visit(child, context, e) or child)

    eq = info.equation
    visit(eq.rhs, ctx.analysis.tensors[eq.lhs.tensor].dtype, None)
    return out


def _map_values(e: A.Expr, dtype: str, fn) -> A.Expr:
    """``e`` with ``fn(child, its dtype)`` applied to each child computed as
    a number: not inside comparisons, ``&``, ``|``, ``!``, the condition of
    ``if_then_else`` or the indices of an access."""
    if isinstance(e, A.Unary) and e.op == "-":
        return replace(e, operand=fn(e.operand, dtype))
    if isinstance(e, A.Binary) and not VT.is_condition(e):
        return replace(e, lhs=fn(e.lhs, dtype), rhs=fn(e.rhs, dtype))
    if isinstance(e, A.Call):
        if VT.is_cast(e):
            return replace(e, args=(fn(e.args[0], e.func),))
        if e.func == "if_then_else":
            return replace(e, args=(e.args[0], fn(e.args[1], dtype), fn(e.args[2], dtype)))
        return replace(e, args=tuple(fn(a, dtype) for a in e.args))
    return e


def _eligible(ctx: Context, info: EquationInfo, node: A.Expr) -> bool:
    return _refusal(ctx, info, _Site(node, "", None), maximal=False) is None


def _refusal(ctx: Context, info: EquationInfo, site: _Site, maximal: bool = True) -> NotApplicable | None:
    node = site.node
    eq = info.equation
    text = _text(ctx, node)
    accesses = [n for n in A.walk(node) if isinstance(n, A.Access)]
    if isinstance(node, (A.Access, A.Num, A.Var)) or not accesses:
        return Trivial(
            f"{text} has nothing to precompute",
            f"{text} is {'a lone value' if isinstance(node, (A.Access, A.Num, A.Var)) else 'made of constants and loop variables'}: "
            f"storing it would save no work; precompute an operation on tensors", node.span)
    used = affine.index_vars(node)
    if all(l.var in used for l in info.loops):
        return NotInvariant(
            f"{text} depends on every loop",
            f"{text} uses {', '.join(l.var for l in info.loops) or 'no loop'}, every loop around {_eq_text(eq)}: "
            f"it changes on every iteration, so there is nothing to compute once", node.span)
    place = _placement(ctx, info, node)
    if isinstance(place, _Clash):
        writer = place.writer
        return ReadsWritten(
            f"{text} reads {place.tensor}, written next to {ctx.block_names[info.index]}",
            f"{text} reads {place.tensor}, which {_eq_text(writer)} writes in the nest of {_eq_text(eq)}: computed "
            f"ahead of that nest, it would miss the write, and no nest closer to the equation runs over loops "
            f"{text} depends on only", writer.span)
    if maximal and site.parent is not None and _eligible(ctx, info, site.parent):
        return NotMaximal(
            f"{text} is part of a larger invariant expression",
            f"{_text(ctx, site.parent)}, around {text}, does not depend on every loop either: precompute it whole",
            node.span)
    if eq.predicate is not None and not affine.index_vars(eq.predicate) <= used:
        return Guarded(
            f"the guard of {ctx.block_names[info.index]} uses other loops",
            f"{_eq_text(eq)} has a guard over loops {text} does not depend on; computed apart, {text} would be "
            f"computed where the guard does not hold", eq.predicate.span or eq.span)
    if isinstance(place, _Unbound):
        return OnHost(
            f"{text} would be computed outside the thread-bound loops",
            f"the program runs on a GPU: computed apart over loops "
            f"{', '.join(l.var for l in place.loops) or '(none)'}, {text} would run {place.where}", node.span)
    return None


def _loops(info: EquationInfo, node: A.Expr) -> list[A.Loop]:
    used = affine.index_vars(node)
    return [l for l in info.loops if l.var in used]


@dataclass(frozen=True)
class _Place:
    """Where the new temporary is computed: before the item at ``path``,
    inside the loops around it, under ``loops`` of its own."""

    path: tuple[int, ...]
    loops: tuple[A.Loop, ...]


@dataclass(frozen=True)
class _Clash:
    tensor: str
    writer: A.Equation


@dataclass(frozen=True)
class _Unbound:
    loops: tuple[A.Loop, ...]
    where: str


def _placement(ctx: Context, info: EquationInfo, node: A.Expr) -> _Place | _Clash | _Unbound:
    """The outermost place, on the way from the top of the program down to
    the equation, where the expression can be computed once for each
    combination of the loops it depends on: right before the item that
    holds the equation, when every loop around that place is one the
    expression depends on and nothing in the item writes what it reads
    (the equation itself included)."""
    program = ctx.program
    path = info.site.path
    used = affine.index_vars(node)
    read = {n.tensor for n in A.walk(node) if isinstance(n, A.Access)}
    gpu = any(site.loop.kind == "B" for site in ctx.loop_sites)
    unit_axes = {n.var for n in A.walk(program.units[path[0]]) if isinstance(n, A.Loop) and n.kind == "B"}
    around: list[A.Loop] = []
    clash: _Clash | None = None
    unbound: _Unbound | None = None
    for depth in range(len(path)):
        if depth:
            around += list(item_at(program, path[:depth]).loops)
        if not all(l.var in used for l in around):
            break
        item = item_at(program, path[:depth + 1])
        writer = next((e for e in (A.walk(item) if isinstance(item, A.Nest) else (item,))
                       if isinstance(e, A.Equation) and e.lhs.tensor in read), None)
        if writer is not None:
            clash = clash or _Clash(writer.lhs.tensor, writer)
            continue
        loops = tuple(l for l in info.loops if l.var in used and not any(l is a for a in around))
        bound = {l.var for l in around + list(loops) if l.kind == "B"}
        if depth == 0 and gpu and not bound:
            unbound = unbound or _Unbound(loops, "on the host, which cannot write device memory")
            continue
        if depth and unit_axes and not unit_axes <= bound:
            missing = ", ".join(sorted(unit_axes - bound))
            unbound = unbound or _Unbound(loops, f"once per thread of {missing} (every thread of the kernel runs it)")
            continue
        return _Place(path[:depth + 1], loops)
    return clash or unbound or _Clash("", info.equation)


def _under_cursor(node: A.Expr, at: int) -> bool:
    return node.span is not None and node.span.contains(at)


def _any_under_cursor(ctx: Context, info: EquationInfo, at: int) -> bool:
    """Whether the cursor is on some candidate subexpression; then only
    the candidates containing it are offered."""
    return any(_under_cursor(s.node, at) and _refusal(ctx, info, s) is None for s in _value_sites(ctx, info))


def _text(ctx: Context, node: A.Expr) -> str:
    return print_expr(node, declared=frozenset(ctx.analysis.tensors))


def _strip(e: A.Expr) -> A.Expr:
    """The expression as a new node (no source spans)."""
    if isinstance(e, A.Access):
        return A.Access(e.tensor, None if e.indices is None else tuple(_strip(i) for i in e.indices), e.dtype, e.scope)
    if isinstance(e, A.Unary):
        return A.Unary(e.op, _strip(e.operand))
    if isinstance(e, A.Binary):
        return A.Binary(e.op, _strip(e.lhs), _strip(e.rhs))
    if isinstance(e, A.Call):
        return A.Call(e.func, tuple(_strip(a) for a in e.args))
    if isinstance(e, A.Var):
        return A.Var(e.name)
    return A.Num(e.value, e.text)


def _eq_text(eq: A.Equation) -> str:
    from leir.bridge.lower import equation_text

    return equation_text(eq)

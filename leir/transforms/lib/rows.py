"""Pattern matching shared by the algorithmic steps (``prefix_max``,
``prefix_sum_exp``, ``online_softmax``, ``attention_without_scores``).

They all start from *row reductions*: a max or a sum over one loop, the
only equation under that loop, whose other loops pick the row (``M_{i} =
max(M_{i}, X_{i,j})``). A softmax is a max unit and a sum-of-exp unit over
the same rows and the same loop; attention adds the weighted sum that
divides by the sum. The matching is structural: names, loop variables and
loop order may differ from unit to unit; loops correspond when the indices
of the tensors the units share line up.

A failed precondition is a ``Refusal`` with a reason key; each
transformation turns it into its own typed error (``<id>-<reason>``),
made from the reason by ``refusals``. ``candidates``, ``check`` and
``apply_step`` are what the step modules' entry points share around their
own ``match``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Callable, NoReturn, Protocol, TypeVar

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.ast import Span
from leir.printer import print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, Step, str_arg
from leir.transforms.rewrite import fresh_name, item_at, names_in, replace_at, substitute

# ----------------------------------------------------------------- refusals


class Refusal(Exception):
    """A failed precondition: ``reason`` keys the transformation's error."""

    def __init__(self, reason: str, short: str, detail: str, span: Span | None):
        super().__init__(short)
        self.reason, self.short, self.detail, self.span = reason, short, detail, span


def refuse(reason: str, short: str, detail: str, span: Span | None) -> NoReturn:
    raise Refusal(reason, short, detail, span)


def typed(errors: dict[str, type[NotApplicable]], refusal: Refusal) -> NotApplicable:
    """The transformation's typed error for a refusal."""
    return errors[refusal.reason](refusal.short, refusal.detail, refusal.span)


#: The reasons ``row_reduction`` refuses a reduction for.
ROW_REDUCTION_REASONS = ("init-explicit", "guarded", "not-one-axis", "loop-start-not-zero", "not-alone",
                         "rows-not-distinct")
#: The reasons ``match_softmax`` refuses a sum of exp for (its shape,
#: ``not-sum-of-exp``, aside: a caller may have checked it another way).
SOFTMAX_REASONS = ("no-max",) + ROW_REDUCTION_REASONS + ("not-siblings", "different-axis", "different-rows",
                                                         "different-operand", "interleaved")
#: The reasons ``one_pass_rows`` refuses a softmax for.
ONE_PASS_REASONS = ("integer-max", "vectorized-row-loop")


#: The precondition each reason reports: the docstring of its typed error.
REASON_DOCS = {
    "not-max": "The equation is not a max reduction ``M = max(M, x)``.",
    "not-sum-of-exp": "The equation is not a sum of exponentials ``Z += exp(x - M)``.",
    "not-weighted-sum": ("The equation is not a softmax-weighted sum ``O += exp(x - M)/Z*v`` whose weights "
                         "``v`` read none of M, Z and the scores."),
    "no-max": "The M that the exp subtracts is not written once, by a max reduction ``M = max(M, x)``.",
    "init-explicit": "The reduction is not the first write of its tensor: its initial value is written before it.",
    "guarded": "The reduction has a guard.",
    "not-one-axis": "The reduction is not over exactly one loop.",
    "loop-start-not-zero": "The reduction loop does not start at 0.",
    "not-alone": "The reduction is not the only equation under its loop.",
    "rows-not-distinct": ("The written index does not tell the rows apart: an element is not the reduction of "
                          "one row (the index is not affine, or two iterations may write one element)."),
    "not-siblings": "The units are not in the same loop body.",
    "different-axis": "The max is over another loop than the sum.",
    "different-rows": "The max and the sum are not over the same rows.",
    "different-operand": "The exp is not over the same ``x`` as the max.",
    "interleaved": "Something between the units writes what a later unit reads.",
    "integer-max": "The running maximum is not floating-point: it starts at -inf.",
    "vectorized-row-loop": "A row loop is vectorized: the reduction loop would move inside it.",
}


def refusals(transform_id: str, module: str, reasons: tuple[str, ...]) -> dict[str, type[NotApplicable]]:
    """A typed error per reason, in order, named after it (``no-max`` ->
    ``NoMax``) with the code ``<transform_id>-<reason>`` and the docstring
    ``REASON_DOCS[reason]``. The module exports each under that name
    (errors are pickled by name)."""
    return {reason: type("".join(w.capitalize() for w in reason.split("-")), (NotApplicable,),
                         {"code": f"{transform_id}-{reason}", "__module__": module, "__doc__": REASON_DOCS[reason]})
            for reason in reasons}


def text(node: A.Expr | A.Equation) -> str:
    """An expression or equation on one line, without superscripts."""
    if isinstance(node, A.Equation):
        names = frozenset(n.tensor for n in A.walk(node) if isinstance(n, A.Access))
        out = f"{print_expr(node.lhs, declared=names)} = {print_expr(node.rhs, declared=names)}"
        if node.predicate is not None:
            out += f" where {print_expr(node.predicate, declared=names)}"
        return out
    names = frozenset(n.tensor for n in A.walk(node) if isinstance(n, A.Access))
    return print_expr(node, declared=names)


# ----------------------------------------------------------- row reductions


@dataclass(frozen=True)
class RowReduction:
    """A reduction over one loop that stands alone in its nest."""

    info: EquationInfo
    #: The reduction loop.
    axis: A.Loop
    #: Path of the outermost item that holds this equation and nothing else
    #: (a unit, or an item of an enclosing nest's body).
    path: tuple[int, ...]
    #: The loops of that item down to the equation, outermost first (the
    #: axis among them).
    chain: tuple[A.Loop, ...]
    #: The loops around that item (shared with other equations).
    outer: tuple[A.Loop, ...]

    @property
    def equation(self) -> A.Equation:
        return self.info.equation

    @property
    def lhs(self) -> A.Access:
        return self.info.equation.lhs

    @property
    def tensor(self) -> str:
        return self.info.equation.lhs.tensor

    @property
    def rows(self) -> tuple[A.Loop, ...]:
        """The chain's loops other than the axis, in order."""
        return tuple(l for l in self.chain if l.var != self.axis.var)

    @property
    def parent(self) -> tuple[int, ...]:
        return self.path[:-1]

    @property
    def position(self) -> int:
        return self.path[-1]

    @property
    def members(self) -> frozenset[int]:
        """The equations a step on this reduction rewrites."""
        return frozenset({self.info.index})


def equation_count(item: A.Item) -> int:
    if isinstance(item, A.Equation):
        return 1
    return sum(equation_count(i) for i in item.body)


def equations_in(item: A.Item) -> list[A.Equation]:
    if isinstance(item, A.Equation):
        return [item]
    return [e for i in item.body for e in equations_in(i)]


def alone(ctx: Context, info: EquationInfo, inner: set[str]) -> tuple[tuple[int, ...], tuple[A.Loop, ...], tuple[A.Loop, ...]]:
    """``(path, chain, outer)`` of the outermost item that holds ``info``
    and the loops named ``inner`` and nothing else. Refuses ``not-alone``
    when the outermost nest with one of those loops runs other equations."""
    path = info.site.path
    nests = [ctx.program.units[path[0]]]
    for k in path[1:-1]:
        child = nests[-1].body[k]
        assert isinstance(child, A.Nest)
        nests.append(child)
    first = min((m for m, n in enumerate(nests) if any(l.var in inner for l in n.loops)), default=len(nests) - 1)
    if equation_count(nests[first]) != 1:
        loop = next(l for l in nests[first].loops if l.var in inner)
        others = [e for e in equations_in(nests[first]) if e is not info.equation]
        refuse("not-alone", f"loop {loop.var} also runs {text(others[0])}",
               f"loop {loop.var} runs {text(info.equation)} and {'; '.join(text(e) for e in others)}; the step "
               f"rewrites {text(info.equation)} alone, so it must be the only equation under loop {loop.var} "
               f"(fission the nest first)", loop.span)
    t = first
    while t > 0 and equation_count(nests[t - 1]) == 1:
        t -= 1
    chain = tuple(l for n in nests[t:] for l in n.loops)
    outer = tuple(l for n in nests[:t] for l in n.loops)
    return path[: t + 1], chain, outer


def row_reduction(ctx: Context, info: EquationInfo, combiner: str) -> RowReduction:
    """``info`` as a row reduction with ``combiner``, or a refusal. The
    caller has checked that ``info`` has the reduction shape."""
    eq = info.equation
    name = eq.lhs.tensor
    what = {"max": "maximum", "sum": "sum", "min": "minimum", "prod": "product"}[combiner]
    if info.kind == "update":
        first = next(i for i in ctx.analysis.equations if i.equation.lhs.tensor == name)
        refuse("init-explicit", f"{name} is initialised before this {what}",
               f"{text(first.equation)} writes {name} before {text(eq)}, so the {what} accumulates onto that value; "
               f"the step needs the implied initial value (the {what} must be the first write of {name})",
               eq.span)
    if eq.predicate is not None:
        refuse("guarded", f"the {what} into {name} is guarded",
               f"{text(eq)} runs only where its guard holds; the step rewrites unguarded reductions only",
               eq.predicate.span or eq.span)
    axes = [l for l in info.loops if l.var in info.reduce_axes]
    if len(axes) != 1:
        names = ", ".join(l.var for l in axes) or "no loop"
        refuse("not-one-axis", f"the {what} into {name} runs over {len(axes)} loops",
               f"{text(eq)} reduces over {names}; the step needs a {what} over exactly one loop "
               f"(fuse the reduction loops first)", eq.span)
    axis = axes[0]
    if axis.start != 0:
        refuse("loop-start-not-zero", f"loop {axis.var} starts at {axis.start}",
               f"the reduction loop {axis.var} starts at {axis.start}; the step needs a loop starting at 0", axis.span)
    path, chain, outer = alone(ctx, info, {axis.var})
    spatial = [l for l in info.loops if l.var != axis.var]
    if not distinct_rows(eq.lhs, spatial):
        refuse("rows-not-distinct", f"cannot tell the rows of {name} apart",
               f"the step needs every element {text(eq.lhs)} to be the {what} of one row (one iteration of "
               f"{', '.join(l.var for l in spatial)}); the index is not affine, or two iterations may write "
               f"the same element", eq.lhs.span)
    return RowReduction(info, axis, path, chain, outer)


def distinct_rows(access: A.Access, loops: list[A.Loop]) -> bool:
    """Whether different iterations of ``loops`` always index different
    elements through ``access`` (a proof; False when unknown)."""
    forms = [affine.linearize(i) for i in access.indices or ()]
    if any(f is None for f in forms):
        return False
    ranges = affine.loop_ranges(loops)
    return all(affine.separates(forms, l.var, ranges) for l in loops)  # type: ignore[arg-type]


def writers(ctx: Context, tensor: str) -> list[EquationInfo]:
    return list(_by_tensor(ctx)[0].get(tensor, ()))


def readers(ctx: Context, tensor: str) -> list[EquationInfo]:
    return list(_by_tensor(ctx)[1].get(tensor, ()))


def _by_tensor(ctx: Context) -> tuple[dict[str, list[EquationInfo]], dict[str, list[EquationInfo]]]:
    """tensor -> the equations that write it, and those that read it (in
    the right-hand side or the guard), in program order; computed once per
    context (the row matchers ask for each candidate, which made listing
    quadratic in the program's equations)."""
    found = ctx.__dict__.get("_rows_by_tensor")
    if found is None:
        written: dict[str, list[EquationInfo]] = {}
        read: dict[str, list[EquationInfo]] = {}
        for info in ctx.analysis.equations:
            written.setdefault(info.equation.lhs.tensor, []).append(info)
            for name in tensors_read(info.equation):
                read.setdefault(name, []).append(info)
        found = ctx.__dict__["_rows_by_tensor"] = (written, read)
    return found


def tensors_read(eq: A.Equation) -> set[str]:
    nodes = list(A.walk(eq.rhs)) + (list(A.walk(eq.predicate)) if eq.predicate is not None else [])
    return {n.tensor for n in nodes if isinstance(n, A.Access)}


# ------------------------------------------------------------------ unifying


def unify(a: A.Expr, b: A.Expr, sigma: dict[str, str], free: set[str], targets: set[str]) -> dict[str, str] | None:
    """The extension of ``sigma`` under which ``a`` is ``b`` with its loop
    variables renamed, or None. Only variables in ``free`` are renamed, and
    only to variables in ``targets`` (one-to-one); the others must match by
    name. Superscripts are ignored."""
    out = dict(sigma)

    def go(x: A.Expr, y: A.Expr) -> bool:
        if isinstance(x, A.Var) and isinstance(y, A.Var):
            if x.name in out:
                return out[x.name] == y.name
            if x.name not in free:
                return x.name == y.name and y.name not in targets
            if y.name not in targets or y.name in out.values():
                return False
            out[x.name] = y.name
            return True
        if type(x) is not type(y):
            return False
        if isinstance(x, A.Num):
            return x.value == y.value
        if isinstance(x, A.Access):
            if x.tensor != y.tensor or x.rank != y.rank:
                return False
            return all(go(p, q) for p, q in zip(x.indices or (), y.indices or ()))
        if isinstance(x, A.Unary):
            return x.op == y.op and go(x.operand, y.operand)
        if isinstance(x, A.Binary):
            return x.op == y.op and go(x.lhs, y.lhs) and go(x.rhs, y.rhs)
        if isinstance(x, A.Call):
            return x.func == y.func and len(x.args) == len(y.args) and all(go(p, q) for p, q in zip(x.args, y.args))
        return False

    return out if go(a, b) else None


def rename(e: A.Expr, sigma: dict[str, str]) -> A.Expr:
    return substitute(e, {k: A.Var(v) for k, v in sigma.items()})


def loops_by_var(loops) -> dict[str, A.Loop]:
    return {l.var: l for l in loops}


def check_extents(sigma: dict[str, str], source: tuple[A.Loop, ...], target: tuple[A.Loop, ...],
                  axis: str, reason_axis: str, reason_rows: str, what: str) -> None:
    """Corresponding loops run the same iterations."""
    src, dst = loops_by_var(source), loops_by_var(target)
    for a, b in sigma.items():
        la, lb = src.get(a), dst.get(b)
        if la is None or lb is None:
            continue
        if (la.extent, la.start) != (lb.extent, lb.start):
            reason = reason_axis if b == axis else reason_rows
            refuse(reason, f"loop {la.var} has {la.extent} iterations, {lb.var} {lb.extent}",
                   f"{what}: loop {la.var} ({la.extent} iterations from {la.start}) corresponds to loop {lb.var} "
                   f"({lb.extent} iterations from {lb.start}); they must run the same iterations", la.span)


# ------------------------------------------------------------------ softmax


def exp_minus(e: A.Expr) -> tuple[A.Expr, A.Access] | None:
    """``(a, B)`` when ``e`` is ``exp(a - B)`` with ``B`` an access."""
    if isinstance(e, A.Call) and e.func == "exp" and len(e.args) == 1:
        arg = e.args[0]
        if isinstance(arg, A.Binary) and arg.op == "-" and isinstance(arg.rhs, A.Access):
            return arg.lhs, arg.rhs
    return None


@dataclass(frozen=True)
class Softmax:
    """A max unit and a sum-of-exp unit over the same rows and loop:
    ``M = max(M, e)`` then ``Z += exp(e - M)``. Expressions are in the max
    unit's loop variables."""

    max: RowReduction
    sum: RowReduction
    #: What the max takes (``e``).
    score: A.Expr
    #: Z's index in the max unit's loop variables.
    sum_index: tuple[A.Expr, ...]

    @property
    def members(self) -> frozenset[int]:
        """The equations a step on this softmax rewrites."""
        return frozenset({self.max.info.index, self.sum.info.index})


def is_sum_of_exp(info: EquationInfo) -> bool:
    """Whether ``sum_of_exp_parts`` accepts ``info`` (without building the
    refusal's message: listings ask this of every equation)."""
    return (info.combiner == "sum" and info.kind != "assign" and info.operand is not None
            and exp_minus(info.operand) is not None)


def sum_of_exp_parts(info: EquationInfo) -> tuple[A.Expr, A.Access]:
    eq = info.equation
    parts = exp_minus(info.operand) if info.operand is not None else None
    if info.combiner != "sum" or info.kind == "assign" or parts is None:
        refuse("not-sum-of-exp", f"{text(eq)} is not a sum of exp(x - max)",
               f"the step rewrites a reduction Z += exp(x - M) where M is the maximum of x; "
               f"{text(eq)} is not of that shape", eq.span)
    return parts


def match_softmax(ctx: Context, sum_info: EquationInfo) -> Softmax:
    """The softmax whose sum-of-exp unit is ``sum_info``."""
    a, b = sum_of_exp_parts(sum_info)
    name = b.tensor
    eq = sum_info.equation
    ws = writers(ctx, name)
    maxes = [w for w in ws if w.combiner == "max" and w.index < sum_info.index]
    if not maxes:
        how = "an input" if not ws else "written by " + "; ".join(text(w.equation) for w in ws)
        refuse("no-max", f"{name} is not computed by a max reduction",
               f"the exp subtracts {text(b)}, and {name} is {how}; the step needs {name} to be the maximum "
               f"M = max(M, x) of what the exp takes", b.span)
    if len(ws) > 1:
        explicit = next((w for w in maxes if w.kind == "update"), None)
        if explicit is not None:
            row_reduction(ctx, explicit, "max")  # refuses: the initial value is explicit
        refuse("no-max", f"{name} is written {len(ws)} times",
               f"{name} is written by {'; '.join(text(w.equation) for w in ws)}; the step needs {name} to be "
               f"written once, by a max reduction", b.span)
    mx = row_reduction(ctx, maxes[0], "max")
    sm = row_reduction(ctx, sum_info, "sum")
    if sm.parent != mx.parent:
        refuse("not-siblings", "the max and the sum are in different nests",
               f"{text(mx.equation)} and {text(eq)} must be in the same loop body (or both top level) "
               f"to become one nest", eq.span)
    free = {l.var for l in sm.chain}
    targets = {l.var for l in mx.chain}
    sigma = unify(b, mx.lhs, {}, free - {sm.axis.var}, targets - {mx.axis.var})
    if sigma is None:
        if unify(b, mx.lhs, {}, free, targets) is not None:
            refuse("different-axis", "the max is over another loop than the sum",
                   f"{text(eq)} sums over {sm.axis.var} but subtracts {text(b)}, which {sm.axis.var} indexes: "
                   f"the max {text(mx.equation)} is not over the loop of the sum", b.span)
        refuse("different-rows", f"{text(b)} is not the max of the row summed",
               f"{text(eq)} subtracts {text(b)}, which is not the element the max {text(mx.equation)} writes "
               f"for the row being summed", b.span)
    sigma[sm.axis.var] = mx.axis.var
    unmapped = [l.var for l in sm.chain if l.var not in sigma]
    if unmapped:
        refuse("different-rows", f"{sm.tensor} has rows that {name} has not",
               f"{text(eq)} runs over {', '.join(unmapped)}, which does not index {text(b)}: the sum and the "
               f"max {text(mx.equation)} must be over the same rows", eq.span)
    check_extents(sigma, sm.chain, mx.chain, mx.axis.var, "different-axis", "different-rows",
                  f"{text(eq)} and {text(mx.equation)}")
    same_values(a, mx.info.operand, sigma, sm, mx, f"{text(eq)} sums exp({text(a)} - {name})")
    between(ctx, [mx, sm])
    z_index = tuple(rename(i, sigma) for i in sm.lhs.indices or ())
    return Softmax(mx, sm, mx.info.operand, z_index)


def same_values(a: A.Expr, x: A.Expr, sigma: dict[str, str], unit: RowReduction, mx: RowReduction, what: str) -> None:
    """``a`` (in ``unit``'s loops) is the max's operand ``x`` under
    ``sigma``; otherwise a refusal that says whether the loops are crossed
    (``a`` is ``x`` with the reduction loop playing another loop's part)."""
    if unify(a, x, sigma, set(), {l.var for l in mx.chain}) is not None:
        return
    loose = unify(a, x, {}, {l.var for l in unit.chain}, {l.var for l in mx.chain})
    if loose is not None and loose.get(unit.axis.var) != mx.axis.var:
        played = loose.get(unit.axis.var)
        refuse("different-axis", "the max is over another loop",
               f"{what} over loop {unit.axis.var}, but in the max {text(mx.equation)} (over {mx.axis.var}) that "
               f"loop plays the part of {played or 'no loop'}: the two reduce along different axes",
               a.span or unit.equation.span)
    refuse("different-operand", f"exp({text(a)} - ...) is not over what the max takes",
           f"{what}, but the max {text(mx.equation)} is over {text(x)} (with the loops matched): "
           f"the step needs the same values in both", a.span or unit.equation.span)


def one_pass_rows(ctx: Context, sm: Softmax) -> None:
    """What a fused pass that keeps the running values per row needs: a
    floating-point maximum (it starts at -inf) and row loops that can hold
    the reduction loop inside them (not vectorized)."""
    mx = sm.max
    dtype = ctx.analysis.tensors[mx.tensor].dtype
    if not VT.is_float_dtype(dtype):
        refuse("integer-max", f"{mx.tensor} is {dtype}",
               f"the running maximum {mx.tensor} starts at -inf, which {dtype} cannot hold; "
               f"the step needs a floating-point {mx.tensor}", mx.lhs.span)
    for l in mx.rows:
        if l.kind == "V":
            refuse("vectorized-row-loop", f"loop {l.var} is vectorized",
                   f"the fused pass runs loop {mx.axis.var} inside the row loops, but loop {l.var} is vectorized "
                   f"and a vectorized loop must stay innermost; make {l.var} serial first", l.span)


def between(ctx: Context, members: list[RowReduction]) -> None:
    """The members (siblings, each the first write of its tensor) can all
    run at the place of the first one: nothing between them writes a
    tensor that a later member reads. (Reading what they write is fine:
    a member before the reader has written its final value already, and
    one after it had not written anything yet.)"""
    members = sorted(members, key=lambda m: m.position)
    positions = {m.position for m in members}
    siblings = items_of(ctx.program, members[0].parent)
    for p in range(members[0].position + 1, members[-1].position):
        if p in positions:
            continue
        later = [m for m in members if m.position > p]
        read_later = set().union(*(tensors_read(m.equation) for m in later))
        written_by = {m.tensor for m in members}
        for eq in equations_in(siblings[p]):
            if eq.lhs.tensor in read_later | written_by:
                reader = next((m for m in later if eq.lhs.tensor in tensors_read(m.equation)), later[0])
                refuse("interleaved", f"{text(eq)} runs in between",
                       f"{text(eq)} writes {eq.lhs.tensor} between the units the step fuses, and "
                       f"{text(reader.equation)} reads it after that; the fused pass runs at the place of "
                       f"{text(members[0].equation)}, before the write", eq.span)


def items_of(program: A.Program, parent: tuple[int, ...]) -> tuple[A.Item, ...]:
    if not parent:
        return program.units
    node = item_at(program, parent)
    assert isinstance(node, A.Nest)
    return node.body


# ----------------------------------------------------------------- building


class Builder:
    """Accesses, names and declarations for a rewrite: existing tensors keep
    their spelling (superscripts when the text uses them), new temporaries
    take the type of a tensor they stand for."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.taken = names_in(ctx.program) | set(A.FUNCTIONS) | set(A.DTYPES) | {"in", "out", "tmp", "where", "inf"}
        self.decls: list[A.Decl] = []
        self.spelling: dict[str, tuple[str | None, str | None]] = {}
        for node in A.walk(ctx.program):
            if isinstance(node, A.Access) and node.dtype is not None:
                self.spelling.setdefault(node.tensor, (node.dtype, node.scope))

    def access(self, tensor: str, indices) -> A.Access:
        dtype, scope = self.spelling.get(tensor, (None, None))
        indices = tuple(indices or ())
        return A.Access(tensor, indices or None, dtype, scope)  # a scalar has no subscript

    def name(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name

    def temporary(self, base: str, like: str, shape: tuple[int, ...]) -> str:
        """A new temporary with the dtype and scope of tensor ``like``."""
        name = self.name(base)
        t = self.ctx.analysis.tensors[like]
        if like in self.spelling:
            self.spelling[name] = (t.dtype, t.scope)
        elif (t.dtype, t.scope) != ("f32", "g"):
            self.decls.append(A.Decl("tmp", name, t.dtype, shape, t.scope))
        return name

    def program(self, program: A.Program) -> A.Program:
        """The rewritten program with the new declarations, and with a
        declaration for each tensor whose inferred role the rewrite would
        change: an output now read after it is written (inference would take
        it for a temporary), or a temporary no longer read (an output)."""
        from leir.semantics import analyze

        program = replace(program, decls=program.decls + tuple(self.decls)) if self.decls else program
        after = analyze(program).tensors
        declared = {d.name for d in program.decls}
        kept = []
        for t in self.ctx.analysis.tensors.values():
            now = after.get(t.name)
            if t.role in ("out", "tmp") and now is not None and now.role != t.role and t.name not in declared:
                kept.append(A.Decl(t.role, t.name, t.dtype, t.shape, t.scope))
        return replace(program, decls=program.decls + tuple(kept)) if kept else program


def num(value: int | float) -> A.Num:
    if value == float("inf"):
        return A.Num(float("inf"), "inf")
    return A.Num(value, repr(value))


def neg_inf() -> A.Expr:
    return A.Unary("-", num(float("inf")))


def zero(dtype: str) -> A.Num:
    return num(0.0) if VT.is_float_dtype(dtype) else num(0)


def var(name: str) -> A.Var:
    return A.Var(name)


def call(func: str, *args: A.Expr) -> A.Call:
    return A.Call(func, tuple(args))


def binary(op: str, a: A.Expr, b: A.Expr) -> A.Binary:
    return A.Binary(op, a, b)


def equation(lhs: A.Access, rhs: A.Expr, guard: A.Expr | None = None) -> A.Equation:
    return A.Equation(lhs, rhs, guard)


def nest(loops, body) -> tuple[A.Item, ...]:
    """``loops [ body ]``, or the body items themselves when there are no loops."""
    loops, body = tuple(loops), tuple(body)
    return (A.Nest(loops, body),) if loops else body


def fresh_loop(loop: A.Loop, var_name: str, kind: str | None = None) -> A.Loop:
    return A.Loop(kind or loop.kind, loop.extent, var_name, loop.start)


def copies(loops) -> tuple[A.Loop, ...]:
    """The loops again, without their comments (for a second nest over
    the same iterations)."""
    return tuple(A.Loop(l.kind, l.extent, l.var, l.start) for l in loops)


def placed(rows: tuple[A.Loop, ...], axis: A.Loop, item: A.Nest) -> tuple[tuple[A.Loop, ...], A.Loop, A.Comments]:
    """The row loops and the reduction loop of a fused nest that takes the
    place of ``item``: the comments written before ``item`` go before the
    fused nest (on its first loop, or returned for a nest without loops),
    not with whichever loop carried them."""
    first = item.loops[0] if item.loops else None
    lead = first.comments if first is not None else item.open_comments
    rows = tuple(replace(l, comments=A.NO_COMMENTS) if l is first else l for l in rows)
    if axis is first:
        axis = replace(axis, comments=A.NO_COMMENTS)
    if not rows or lead == A.NO_COMMENTS:
        return rows, axis, lead
    own = rows[0].comments
    merged = A.Comments(lead.before + own.before, own.after or lead.after)
    return (replace(rows[0], comments=merged),) + rows[1:], axis, A.NO_COMMENTS


def replace_group(program: A.Program, parent: tuple[int, ...], positions: list[int], items: tuple[A.Item, ...]) -> A.Program:
    """``items`` at the first position, the other positions deleted."""
    positions = sorted(positions)
    for p in reversed(positions[1:]):
        program = replace_at(program, parent + (p,), ())
    if not parent and any(isinstance(i, A.Equation) for i in items):
        # A top-level equation is a unit of its own (a bare equation).
        items = tuple(i if isinstance(i, A.Nest) else A.Nest((), (i,), None, bracketed=False) for i in items)
    return replace_at(program, parent + (positions[0],), items)


# ---------------------------------------------------------------- candidates


class _Match(Protocol):
    """What a step's ``match`` finds: a row reduction, a softmax..."""

    @property
    def members(self) -> frozenset[int]: ...


Matched = TypeVar("Matched", bound=_Match)


def selected(ctx: Context, at: int | None) -> set[int] | None:
    """Indices of the equations a cursor selects: the equation it is on,
    else those under the loop whose header it is on or that enclose it;
    None selects everything."""
    if at is None:
        return None
    on = ctx.equations_at(at)
    if on:
        return {i.index for i in on}
    return {e for site in ctx.loops_at(at) for e in site.equations}


def block_arg(ctx: Context, args: dict, step_id: str) -> EquationInfo:
    return ctx.equation_of_block(str_arg(args, "block", step_id))


def step(step_id: str, ctx: Context, info: EquationInfo) -> Step:
    return Step(step_id, {"block": ctx.block_names[info.index]})


def candidates(ctx: Context, at: int | None, step_id: str, shaped: Callable[[EquationInfo], bool],
               match: Callable[[Context, EquationInfo], Matched], title: Callable[[Matched], str]) -> list[Candidate]:
    """A step on each equation that ``shaped`` lets through (a cheap test
    of its form: listings do not build the refusal messages of every
    equation) and ``match`` accepts, when the cursor selects one of the
    equations the match rewrites (its ``members``)."""
    from leir.cancel import checkpoint

    chosen = selected(ctx, at)
    # Every match of the program, once per context: a listing at a cursor
    # then only filters them (matching every equation on each request made
    # hover and listing linear in the program, seconds on 100,000 lines).
    cache = ctx.__dict__.setdefault("_rows_matches", {})
    matches = cache.get(step_id)
    if matches is None:
        matches = []
        for info in ctx.analysis.equations:
            if not info.index & 31:
                checkpoint()
            if not shaped(info):
                continue
            try:
                matches.append((info, match(ctx, info)))
            except Refusal:
                continue
        cache[step_id] = matches
    out = []
    for info, found in matches:
        if chosen is not None and not chosen & found.members:
            continue
        out.append(Candidate(step(step_id, ctx, info), title(found), info.equation.span))
    return out


def check(ctx: Context, args: dict, step_id: str, match: Callable[[Context, EquationInfo], object],
          errors: dict[str, type[NotApplicable]]) -> None:
    """Raise the typed error of the first precondition the step's block fails."""
    info = block_arg(ctx, args, step_id)
    try:
        match(ctx, info)
    except Refusal as refusal:
        raise typed(errors, refusal) from None


def apply_step(step: str, program, block: str):
    """Apply the step module named ``step`` (its ``__name__``) to ``block``
    and return the new program."""
    return apply_transform(step, program, Step(sys.modules[step].ID, {"block": block}))

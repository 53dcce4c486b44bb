"""The meaning of each equation, in program order: a plain write
(``assign``), the first write of a reduction with an implied initial value
(``reduce``), or an update of an earlier value (``update``), with their
spatial and reduction axes; and the checks on roles and order that need
them (``reduction-init``, ``repeated-write`` (warning),
``read-before-write``).

``classify_equations`` is the light path: ``leir.semantics.classify``
runs it alone, for the predicted analysis of a loop rewrite
(``leir.explain.prediction``, which hover's explanations use) and the
transformations' own checks, so it must stay cheap."""

from __future__ import annotations

from leir import ast as A
from leir.cancel import checkpoint
from leir.diagnostics import Related, error, warning
from leir.printer import access_text
from leir.semantics.context import NO_SPAN, PARALLEL_KINDS, Context, accesses_in
from leir.semantics.model import EquationInfo, TensorInfo


def reduction_shape(eq: A.Equation) -> tuple[str | None, A.Expr | None]:
    """The combiner and combined operand if ``eq`` reads its own element in
    a reduction shape (``C = C + e``, ``C = e + C``, ``C = C - e``,
    ``C = C * e``, ``C = max(C, e)``...), else (None, None)."""
    lhs, rhs = eq.lhs, eq.rhs

    def is_self(e: A.Expr) -> bool:
        return isinstance(e, A.Access) and e.tensor == lhs.tensor and e.indices == lhs.indices

    def reads_self(e: A.Expr) -> bool:
        return any(a.tensor == lhs.tensor for a in accesses_in(e))

    if isinstance(rhs, A.Binary) and rhs.op in ("+", "*", "-"):
        combiner = {"+": "sum", "*": "prod", "-": "sum"}[rhs.op]
        if is_self(rhs.lhs) and not reads_self(rhs.rhs):
            operand = rhs.rhs if rhs.op != "-" else A.Unary("-", rhs.rhs)
            return combiner, operand
        if rhs.op != "-" and is_self(rhs.rhs) and not reads_self(rhs.lhs):
            return combiner, rhs.lhs
    if isinstance(rhs, A.Call) and rhs.func in ("max", "min") and len(rhs.args) == 2:
        a, b = rhs.args
        if is_self(a) and not reads_self(b):
            return rhs.func, b
        if is_self(b) and not reads_self(a):
            return rhs.func, a
    return None, None


def classify_equations(ctx: Context) -> list[EquationInfo]:
    """Each equation's ``EquationInfo``, in program order: its kind (an
    equation that reads its own tensor is a reduction at the tensor's first
    write, an update after it), combiner and operand, spatial and
    reduction axes."""
    infos: list[EquationInfo] = []
    written: set[str] = set()
    for k, facts in enumerate(ctx.facts):
        if not k & 63:
            checkpoint()
        site = facts.site
        eq = site.equation
        lhs = eq.lhs
        self_reads = [r for r in facts.reads if r.tensor == lhs.tensor]
        combiner, operand = reduction_shape(eq) if self_reads else (None, None)
        first = lhs.tensor not in written
        if not self_reads:
            kind = "assign"
        elif first:
            if combiner is None:
                bad = next((r for r in self_reads if r.indices != lhs.indices), self_reads[0])
                ctx.report(error(bad.span or NO_SPAN, "reduction-init",
                                 f"{lhs.tensor} is read before it is first written, so its initial value cannot be implied: "
                                 f"write a reduction as {lhs.tensor} = {lhs.tensor} + e (or *, max, min), "
                                 f"or initialise {lhs.tensor} in an earlier equation"))
            kind = "reduce"
        else:
            kind = "update"
        lhs_vars: set[str] = set()
        for index in lhs.indices or ():
            lhs_vars |= ctx.vars_of(index)
        spatial = tuple(l.var for l in site.loops if l.var in lhs_vars)
        rest = tuple(l.var for l in site.loops if l.var not in lhs_vars)
        guard_vars = ctx.vars_of(eq.predicate) if eq.predicate is not None else frozenset()
        # Parallel loops that repeat a write are races, reported apart.
        repeated = [l for l in site.loops if l.var in rest and l.var not in guard_vars
                    and l.kind not in PARALLEL_KINDS and l.extent > 1]
        if kind == "assign":
            # A value read inside the loop (a running maximum, a per-row
            # temporary) is used at every iteration, not only the last.
            repeated = [l for l in repeated if not read_inside(ctx, l, lhs.tensor, k)]
        if kind == "assign" and repeated:
            loop = repeated[0]
            ctx.report(warning(lhs.span or NO_SPAN, "repeated-write",
                               f"{access_text(lhs)} is written on every iteration of loop {loop.var}, which its index does not use; "
                               f"only the last iteration's value remains",
                               Related(loop.span or NO_SPAN, f"loop {loop.var}")))
        infos.append(EquationInfo(site, kind, combiner, operand, spatial, rest, k))
        written.add(lhs.tensor)
    return infos


def read_inside(ctx: Context, loop: A.Loop, tensor: str, writer: int) -> bool:
    """Whether an equation other than ``writer`` inside ``loop`` reads
    ``tensor``."""
    for k, facts in enumerate(ctx.facts):
        if k != writer and any(l is loop for l in facts.site.loops):
            if any(r.tensor == tensor for r in facts.reads + facts.guard_reads):
                return True
    return False


def check_init_order(ctx: Context, tensors: dict[str, TensorInfo], equations: list[EquationInfo]) -> None:
    """A temporary or output read before any equation wrote it."""
    first_write: dict[str, int] = {}
    for info in equations:
        first_write.setdefault(info.equation.lhs.tensor, info.index)
    for info, facts in zip(equations, ctx.facts):
        eq = info.equation
        for node in facts.reads + facts.guard_reads:
            t = tensors.get(node.tensor)
            if t is None or t.role == "in":
                continue
            if node.tensor == eq.lhs.tensor and info.kind in ("reduce", "update"):
                continue
            fw = first_write.get(node.tensor)
            if fw is None or fw >= info.index:
                ctx.report(error(node.span or NO_SPAN, "read-before-write",
                                 f"{node.tensor} is read here before any equation writes it"))

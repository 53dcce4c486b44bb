"""Reductions' implied initial values, which TVM stores (``T.init``) at
the first iteration of the reduction loops, under the equation's guard:
a guard false there but true later would skip it
(``guarded-reduction-init``), and two iterations of the spatial loops
writing one element would store it twice, resetting what the first
accumulated (``reduction-not-injective``)."""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.diagnostics import error
from leir.semantics.context import NO_SPAN, Context
from leir.semantics.model import EquationInfo


def check_reduction_injective(ctx: Context, equations: list[EquationInfo]) -> None:
    """A reduction's implied init is stored once per iteration of the
    loops that index the written element (TVM's ``T.init``); if two of
    those iterations write one element, the second would reset it."""
    np = affine._numpy()
    for info in equations:
        eq = info.equation
        if info.kind != "reduce" or not eq.lhs.indices or not info.spatial:
            continue
        spatial = [l for l in info.loops if l.var in info.spatial]
        if affine.injective(eq.lhs.indices, spatial):
            continue
        space = ctx.space(spatial)
        if space is None:
            continue  # too large to decide: no false error
        columns = []
        for index in eq.lhs.indices:
            values = space.evaluate(index)
            if values is None:
                break
            columns.append(space.full(values).ravel())
        else:
            if _repeats(columns, np):
                names = ", ".join(l.var for l in spatial)
                ctx.report(error(eq.lhs.span or eq.span or NO_SPAN, "reduction-not-injective",
                                 f"several iterations of loops {names} write the same element of {eq.lhs.tensor}, "
                                 f"and each would store the implied initial value: initialise {eq.lhs.tensor} "
                                 f"in an earlier equation"))


def check_guarded_reduction_inits(ctx: Context, equations: list[EquationInfo]) -> None:
    """A reduction's implied initial value is stored under its guard
    (TVM runs ``T.init`` only where ``T.where`` holds, at the first
    iteration of the reduction loops). An element whose guard is false
    there but true later would accumulate onto garbage."""
    np = affine._numpy()
    for info in equations:
        eq = info.equation
        if info.kind != "reduce" or eq.predicate is None:
            continue
        names = ctx.vars_of(eq.predicate)
        reduce_vars = [l for l in info.loops if l.var in info.reduce_axes and l.var in names]
        if not reduce_vars:
            continue  # the guard only chooses elements: each gets its init
        loops = [l for l in info.loops if l.var in names]
        space = ctx.space(loops)
        mask = space.evaluate(eq.predicate) if space is not None else None
        if mask is None:
            continue  # cannot decide: no false error
        holds = space.full(mask).astype(bool)
        at_start = np.ones(holds.shape, dtype=bool)
        for l in reduce_vars:
            at_start &= space.full(space.axes[l.var]) == l.start
        element_vars = [l.var for l in loops if l.var not in info.reduce_axes]
        keys = np.stack([space.full(space.axes[v]).ravel() for v in element_vars], axis=1) if element_vars \
            else np.zeros((holds.size, 1), dtype=np.int64)
        written = {tuple(k) for k in keys[holds.ravel()]}
        initialised = {tuple(k) for k in keys[(holds & at_start).ravel()]}
        missing = written - initialised
        if missing:
            example = dict(zip(element_vars, sorted(missing)[0]))
            starts = ", ".join(f"{l.var}={l.start}" for l in reduce_vars)
            where = ", ".join(f"{k}={v}" for k, v in example.items())
            ctx.report(error(eq.predicate.span or eq.span or NO_SPAN, "guarded-reduction-init",
                             f"the guard is false at the first reduction iteration ({starts})"
                             f"{' for ' + where if where else ''} but true later, so {eq.lhs.tensor}'s implied "
                             f"initial value would be skipped there (TVM stores it under the guard): "
                             f"initialise {eq.lhs.tensor} in an earlier equation"))


def _repeats(columns: list, np) -> bool:
    """Whether two rows of the index columns (one per index, one row per
    iteration) are equal: the columns flattened into one integer per row
    (mixed radix over each column's range), then sorted."""
    if not columns or columns[0].size < 2:
        return False
    flat = np.zeros(columns[0].shape, dtype=np.int64)
    radix = 1
    for col in columns:
        lo, hi = int(col.min()), int(col.max())
        width = hi - lo + 1
        if radix * width >= 1 << 62:  # no room to flatten: compare rows
            return len(np.unique(np.stack(columns, axis=1), axis=0)) < columns[0].size
        flat += (col - lo) * radix
        radix *= width
    if radix < columns[0].size:
        return True  # more iterations than elements they can reach
    flat.sort()
    return bool((flat[1:] == flat[:-1]).any())

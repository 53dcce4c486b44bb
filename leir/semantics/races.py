"""Races in parallel loops: two iterations of a P, V or B loop that write
one element (``race``; ``vectorized-reduction`` when the loop is a
vectorized reduction axis), or that may, when it cannot be decided
(``possible-race``, a warning). Affine writes are separated by their
coefficients where possible; otherwise the iteration space is enumerated,
within the analysis's budget."""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.cancel import checkpoint
from leir.diagnostics import Related, error, warning
from leir.printer import access_text
from leir.semantics.context import NO_SPAN, PARALLEL_KINDS, Context
from leir.semantics.model import EquationInfo


def check_races(ctx: Context, equations: list[EquationInfo]) -> None:
    """Two iterations of a P, V or B loop (same values of the loops
    outside it, any values of the loops inside) must never write the
    same element."""
    for info in equations:
        if not info.index & 63:
            checkpoint()
        loops = info.loops
        for k, loop in enumerate(loops):
            if loop.kind in PARALLEL_KINDS and loop.extent > 1:
                check_race(ctx, info, loop, loops[:k], loops[k + 1:])


def check_race(ctx: Context, info: EquationInfo, loop: A.Loop, outer: tuple[A.Loop, ...], inner: tuple[A.Loop, ...]) -> None:
    eq = info.equation
    lhs = eq.lhs
    indices = lhs.indices or ()
    forms = [ctx.form(i) for i in indices]
    free = affine.loop_ranges((loop,) + inner)
    if affine.separates([f for f in forms if f is not None], loop.var, free):
        return
    if affine.separates_iterations(indices, loop, affine.loop_ranges(inner)):
        return  # a fused loop's digits, or non-affine parts of the outer loops (no enumeration)
    index_names = frozenset().union(*(ctx.vars_of(i) for i in indices)) if indices else frozenset()
    guard, certain = ctx.relevant_guard(eq.predicate, index_names | {loop.var}, info.loops)
    if certain is None:
        return  # the guard never holds: nothing is written
    if loop.var not in index_names and guard is None:
        # Iterations of the loop with the same inner values write the
        # same element.
        collision = ((loop.start, loop.start + 1), None)
    else:
        names = index_names | (ctx.vars_of(guard) if guard is not None else frozenset())
        # Loops inside vary freely; with affine indices and no guard,
        # loops outside cancel out, otherwise they are enumerated too.
        if guard is None and all(f is not None for f in forms):
            enumerated_outer: list[A.Loop] = []
        else:
            enumerated_outer = [l for l in outer if l.var in names]
        space_loops = enumerated_outer + [loop] + [l for l in inner if l.var in names]
        # Loops left out of the space sit at their first iteration, so
        # that the witness is an element the program really writes.
        first_iteration = {l.var: l.start for l in outer}
        collision = find_collision(ctx, space_loops, loop, enumerated_outer, indices, forms, guard, first_iteration)
    if collision == ():
        return
    if collision is None or not certain:
        ctx.report(warning(loop.var_span or loop.span or NO_SPAN, "possible-race",
                           f"could not prove that different iterations of {A.KIND_WORDS.get(loop.kind, loop.kind)} loop {loop.var} "
                           f"write different elements of {lhs.tensor} (the index is not affine, the guard reads "
                           f"tensors, or there are too many iterations to enumerate); a race if they do",
                           Related(lhs.span or NO_SPAN, "the write")))
        return
    report_race(ctx, info, loop, collision[0], collision[1])


def find_collision(ctx: Context, loops: list[A.Loop], loop: A.Loop, outer: list[A.Loop], indices: tuple[A.Expr, ...],
                   forms: list[affine.Affine | None], guard: A.Expr | None, fixed: dict[str, int]):
    """Two values of ``loop`` that write the same element (with equal
    values of the ``outer`` loops), as ``((v1, v2), element)``; ``()``
    when there are none; None when the space cannot be enumerated.
    Affine indices may name loops outside the space: they take their
    ``fixed`` values."""
    space = ctx.space(loops)
    if space is None:
        return None
    np = affine._numpy()
    columns = []
    for index, form in zip(indices, forms):
        values = space.affine_values(form, fixed) if form is not None else space.evaluate(index)
        if values is None:
            return None
        columns.append(space.full(values))
    keys = columns + [space.full(space.axes[l.var]) for l in outer]
    var_values = space.full(space.axes[loop.var])
    if guard is not None:
        mask = space.evaluate(guard)
        if mask is None:
            return None
        mask = space.full(mask).astype(bool)
        keys = [c[mask] for c in keys]
        var_values = var_values[mask]
    if var_values.size < 2:
        return ()
    # Sort the points by (element, outer values, loop value): a race is
    # two neighbours with the same element and outer values but
    # different loop values.
    order = np.lexsort([var_values] + keys[::-1])
    same_key = np.ones(order.size - 1, dtype=bool)
    for column in keys:
        sorted_column = column[order]
        same_key &= sorted_column[1:] == sorted_column[:-1]
    sorted_var = var_values[order]
    hits = np.nonzero(same_key & (sorted_var[1:] != sorted_var[:-1]))[0]
    if hits.size == 0:
        return ()
    first = order[hits[0]]
    element = tuple(int(c[first]) for c in keys[: len(columns)])
    return (int(sorted_var[hits[0]]), int(sorted_var[hits[0] + 1])), element


def report_race(ctx: Context, info: EquationInfo, loop: A.Loop, values: tuple[int, int], element: tuple[int, ...] | None) -> None:
    lhs = info.equation.lhs
    span = loop.var_span or loop.span or NO_SPAN
    target = f"element ({', '.join(map(str, element))}) of {lhs.tensor}" if element else access_text(lhs)
    a, b = values
    if loop.kind == "V" and loop.var in info.reduce_axes and info.kind in ("reduce", "update"):
        # Measured with TVM 0.27: the vectorized reduction builds and
        # silently returns a wrong sum.
        ctx.report(error(span, "vectorized-reduction",
                         f"vectorized loop {loop.var} is a reduction axis of {lhs.tensor}: all its lanes accumulate into "
                         f"{target} at once, which TVM cannot vectorize without rfactor; make {loop.var} serial "
                         f"or vectorize a spatial loop",
                         Related(lhs.span or NO_SPAN, "the reduction")))
        return
    ctx.report(error(span, "race",
                     f"iterations {loop.var}={a} and {loop.var}={b} of {A.KIND_WORDS.get(loop.kind, loop.kind)} loop {loop.var} both write "
                     f"{target} (a race): make {loop.var} serial or index the write by it",
                     Related(lhs.span or NO_SPAN, "the write")))

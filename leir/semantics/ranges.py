"""The values an index takes where its access runs (under its equation's
guard): a cheap sound range that may be wider, and the exact one, found by
enumerating the iteration space when the index is not affine or a guard
narrows it. Shared by shape inference (``leir.semantics.tensors``) and the
bounds check (``leir.semantics.bounds``)."""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.semantics.context import Context, Use


def sound_range(ctx: Context, index: A.Expr, use: Use) -> affine.Range | None:
    """Bounds that hold every value ``index`` takes where ``use`` runs
    (possibly wider), or None when there are none. Cheap."""
    form = ctx.form(index)
    if form is None:
        return affine.bounds(index, use.ranges)
    if use.predicate is None:
        return form.bounds(use.ranges)
    return affine.guarded_bounds(form, use.ranges, use.predicate)


def exact_range(ctx: Context, index: A.Expr, use: Use) -> tuple[affine.Range | None, bool]:
    """The smallest and largest value ``index`` takes where ``use`` runs
    (under its guard), as ``(range, True)``; ``(None, True)`` when the
    guard never holds; ``(None, False)`` when it cannot be known
    exactly (too many points to enumerate, or a guard that reads
    tensors)."""
    form = ctx.form(index)
    guard, certain = ctx.relevant_guard(use.predicate, ctx.vars_of(index), use.loops)
    if certain is None:
        return None, True
    if not certain:
        return None, False
    if form is not None and guard is None:
        return form.bounds(use.ranges), True
    names = ctx.vars_of(index) | (ctx.vars_of(guard) if guard is not None else frozenset())
    loops = [l for l in use.loops if l.var in names]
    values = enumerate_values(ctx, loops, index, guard)
    if values is None:
        return None, False
    if values.size == 0:
        return None, True
    return (int(values.min()), int(values.max())), True


def enumerate_values(ctx: Context, loops: list[A.Loop], index: A.Expr, guard: A.Expr | None):
    """The index's values at the points of ``loops`` where the guard
    holds (a flat array), or None when that cannot be enumerated."""
    space = ctx.space(loops)
    if space is None:
        return None
    values = space.evaluate(index)
    if values is None:
        return None
    values = space.full(values)
    if guard is not None:
        mask = space.evaluate(guard)
        if mask is None:
            return None
        values = values[space.full(mask).astype(bool)]
    return values

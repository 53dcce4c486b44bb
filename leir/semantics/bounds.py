"""Indices of declared tensors out of their declared shape
(``index-out-of-bounds``)."""

from __future__ import annotations

from leir.diagnostics import error
from leir.semantics.context import NO_SPAN, Context, Use
from leir.semantics.model import TensorInfo
from leir.semantics.ranges import exact_range, sound_range


def check_bounds(ctx: Context, tensors: dict[str, TensorInfo], uses: dict[str, list[Use]]) -> None:
    """Every index of a declared tensor stays inside its shape where it
    runs (under its equation's guard). Reported only when the range is
    exact: an over-estimate is no evidence of an error."""
    for name, tensor_uses in uses.items():
        t = tensors.get(name)
        if t is None or not t.declared:
            continue  # inferred shapes hold every index by construction
        for u in tensor_uses:
            a = u.access
            if a.indices is None or len(a.indices) != len(t.shape):
                continue
            for d, index in enumerate(a.indices):
                if not ctx.vars_of(index) <= u.ranges.keys():
                    continue  # an unbound variable, reported already
                extent = t.shape[d]
                b = sound_range(ctx, index, u)
                if b is not None and 0 <= b[0] and b[1] < extent:
                    continue
                b, exact = exact_range(ctx, index, u)
                if b is None or not exact or (0 <= b[0] and b[1] < extent):
                    continue
                lo, hi = b
                guarded = " where the guard holds" if u.predicate is not None else ""
                ctx.report(error(index.span or a.span or NO_SPAN, "index-out-of-bounds",
                                 f"index {d} of {name} ranges over {lo}..{hi}{guarded}, outside 0..{extent - 1} "
                                 f"(dimension {d} of {name} has extent {extent})"))

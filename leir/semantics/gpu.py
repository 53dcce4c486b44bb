"""GPU launch limits: within one kernel, one extent per thread axis
(``thread-extent-mismatch``), each axis within CUDA's limit
(``thread-extent-limit``), and the threads of a block within theirs
(``threads-per-block``)."""

from __future__ import annotations

from leir import ast as A
from leir.diagnostics import Related, error
from leir.semantics.context import NO_SPAN, Context

#: CUDA's launch limits (compute capability 3.0 and later): threads per
#: block, and the largest extent of each thread and block axis.
MAX_THREADS_PER_BLOCK = 1024
THREAD_AXIS_LIMITS = {
    "tx": 1024,
    "ty": 1024,
    "tz": 64,
    "bx": 2**31 - 1,
    "by": 65535,
    "bz": 65535,
}
_THREAD_IDX = ("tx", "ty", "tz")


def check_kernel(ctx: Context, loops: list[A.Loop]) -> None:
    """One kernel's thread-bound loops: one extent per axis, and CUDA's
    launch limits."""
    first: dict[str, A.Loop] = {}
    extent: dict[str, int] = {}
    over_limit = False
    for loop in loops:
        axis = loop.var
        span = loop.extent_span or loop.span or NO_SPAN
        tag = A.THREAD_AXES[axis]
        if axis in first and loop.extent != first[axis].extent:
            # Seen with TVM 0.27: the kernel is launched with the first
            # binding's extent and the other loop's body runs under it
            # unguarded, cutting it short or running past its end.
            launched = first[axis].extent
            ctx.report(error(span, "thread-extent-mismatch",
                             f"{tag} has extent {loop.extent} here but {launched} earlier in the same kernel: TVM "
                             f"launches the kernel with the first extent, so this loop would run {launched} "
                             f"iterations instead of {loop.extent}",
                             Related(first[axis].extent_span or NO_SPAN, f"{tag} with extent {launched}")))
        first.setdefault(axis, loop)
        extent[axis] = max(extent.get(axis, 0), loop.extent)
        limit = THREAD_AXIS_LIMITS[axis]
        if loop.extent > limit:
            over_limit = True
            ctx.report(error(span, "thread-extent-limit",
                             f"{tag} extent {loop.extent} exceeds CUDA's limit of {limit}"))
    threads = [first[a] for a in _THREAD_IDX if a in first]
    total = 1
    for axis in _THREAD_IDX:
        total *= extent.get(axis, 1)
    if total > MAX_THREADS_PER_BLOCK and not over_limit:
        last = threads[-1]
        sizes = " x ".join(f"{A.THREAD_AXES[l.var]} {extent[l.var]}" for l in threads)
        ctx.report(error(last.extent_span or last.span or NO_SPAN, "threads-per-block",
                         f"{total} threads per block ({sizes}) exceed CUDA's limit of {MAX_THREADS_PER_BLOCK}",
                         *(Related(l.extent_span or NO_SPAN, f"{A.THREAD_AXES[l.var]} extent {extent[l.var]}")
                           for l in threads[:-1])))

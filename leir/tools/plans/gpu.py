"""GPU plans (``--target cuda``): a contraction's output tiled over thread
blocks and threads, each thread accumulating its own small tile in local
memory (registers).

The output's row loop splits into ``blocks x ty x ti`` and its vector
(stride-1) loop into ``blocks x tx x tj``; the reduction loop optionally
into chunks. The loops are reordered to

    block rows, block columns, thread rows, thread columns, reductions,
    ti, tj

the accumulator is cached in local memory (``cache_write``) and its copy
moved under the thread-column loop (``reverse_compute_at``), and then the
four outer loops are bound to ``by``, ``bx``, ``ty`` and ``tx``; the
per-thread tile loops are unrolled. The catalogue's ``bind`` checks CUDA's
limits (1,024 threads a block), so a plan that exceeds them fails at that
step. Shared-memory staging of the inputs (``cache_read`` at the reduction
tile, bound to the threads for a cooperative load) is not planned yet.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass
from typing import Iterator

from leir.semantics import Analysis
from leir.tools.plans.builder import Builder, PlanFailed

__all__ = ["GpuTiling", "gpu_plans"]

#: Threads per block along each axis tried.
THREADS = (8, 16, 32)
#: Outputs per thread along each axis tried.
PER_THREAD = (1, 2, 4)
#: Reduction chunks tried.
K_CHUNKS = (None, 8, 16, 32)


@dataclass(frozen=True)
class GpuTiling:
    block: str
    row: str
    vector: str
    reduce: str
    ty: int
    ti: int
    tx: int
    tj: int
    k_in: int | None = None

    kind = "GPU kernel with per-thread tiles"

    def to_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    def realize(self, b: Builder) -> None:
        block = self.block
        eq = b.info(block)
        reductions = list(eq.reduce_axes)
        i_b, i_t, i_in = self._three(b, block, self.row, self.ty, self.ti)
        # Each thread's tj columns are adjacent (tx*tj+jj): TVM's region of the
        # copy under the thread loop is then exactly the thread's own; with
        # the threads inner (jj*tx+tx) it would span the others' columns.
        j_b, j_t, j_in = self._three(b, block, self.vector, self.tx, self.tj)
        reduce_inner = list(reductions)
        k_out = None
        if self.k_in:
            k_out, k_in = b.split(block, self.reduce, self.k_in)
            reduce_inner[reduce_inner.index(self.reduce)] = k_in
        others = [v for v in eq.spatial if v not in (self.row, self.vector)]
        order = (others + [i_b, j_b, i_t, j_t] + ([k_out] if k_out else []) + reduce_inner
                 + [v for v in (i_in, j_in) if v])
        b.reorder_to(block, order)
        local = b.cache_write(block, "l")
        b.apply("reverse_compute_at", {"block": block, "at": {"block": local, "loop": j_t}})
        if others:
            raise PlanFailed(None, "a GPU plan binds two spatial loops; fuse the others first")
        for var, axis in ((i_b, "by"), (j_b, "bx"), (i_t, "ty"), (j_t, "tx")):
            b.apply("bind", {"block": local, "loop": var, "axis": axis})
        for var in (i_in, j_in):
            if var:
                b.apply("unroll", {"block": local, "loop": var}, optional=True)
        # The initial value written once, before the reduction loops, not
        # tested for at every iteration.
        b.decompose_reduction(local)

    @staticmethod
    def _three(b: Builder, block: str, var: str, threads: int, per: int):
        """``var`` split into (blocks, threads, per-thread) loops; the last
        is None when ``per`` is 1."""
        outer, inner = b.split(block, var, threads * per)
        if per == 1:
            return outer, inner, None
        t, p = b.split(block, inner, per)
        return outer, t, p


def gpu_plans(analysis: Analysis, rng: random.Random, limit: int = 64) -> Iterator[GpuTiling]:
    from leir.tools.plans.cpu import _block_names, _vector_axis

    for info, block in zip(analysis.equations, _block_names(analysis)):
        if info.kind != "reduce" or not info.reduce_axes or len(info.spatial) != 2:
            continue
        extents = {l.var: l.extent for l in info.loops}
        vector = _vector_axis(analysis, info, gathers=True)
        if vector is None:
            continue
        row = next(v for v in info.spatial if v != vector)
        reduce = max(info.reduce_axes, key=lambda v: extents[v])
        grid = []
        for ty, ti, tx, tj, k_in in itertools.product(THREADS, PER_THREAD, THREADS, PER_THREAD, K_CHUNKS):
            if ty * tx > 1024 or ty * tx < 64:
                continue
            if extents[row] % (ty * ti) or extents[row] == ty * ti or extents[vector] % (tx * tj) \
                    or extents[vector] == tx * tj:
                continue
            if k_in and (extents[reduce] % k_in or k_in == extents[reduce]):
                continue
            grid.append(GpuTiling(block, row, vector, reduce, ty, ti, tx, tj, k_in))
        rng.shuffle(grid)
        yield from grid[:limit]

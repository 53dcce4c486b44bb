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
step.

A plan with ``stage=True`` (it needs reduction chunks, ``k_in``) also stages
each input of the contraction in shared memory, as MetaSchedule does: a
``cache_read`` into shared scope, moved to the reduction-chunk loop
(``compute_at``) so that each block loads each k-chunk of its rows of ``X``
and columns of ``W`` once, and the copy's loops fused, split by the block's
``ty x tx`` threads (and 4 or 2 lanes where the chunk allows) and bound to
``ty`` and ``tx``: a cooperative, optionally vectorized load.

The catalogue refuses that placement today, so the staged variant stops at
its ``compute_at`` (``PlanFailed``, with the step's own reason), and
``gpu_plans`` offers it only when asked (``stage=True``, or ``stage=None``:
where ``staging_supported()`` finds that it applies, probed once a process
on a small matmul). What blocks it:

- ``compute_at`` refuses a shared temporary under a thread-bound loop
  (``compute_at-thread-loop``: "X_shared is in shared memory, under
  thread-bound loop ty"), the very place a cooperative load goes;
- it refuses a site whose loops a read does not use
  (``compute_at-recomputes``: ``X`` does not use the ``bx`` loop of ``W``'s
  columns, ``W`` not ``by``), where on a GPU that is each block loading its
  own tile; fusing ``by`` and ``bx`` into one block loop instead makes the
  reads ``bx//2*16 + ...``, which its region check does not see as a box
  (``compute_at-irregular-read``);
- ``bind`` refuses an axis already bound around the loop ("threadIdx.x is
  already bound around loop j"), which the copy's thread loops inside the
  kernel's thread loops would be (TVM accepts nested loops bound to the same
  axis with the same extent);
- and LEIR's own race check (``leir.semantics.races``) models every scope as
  one array: a shared copy that blocks ``bx=0`` and ``bx=1`` both write (the
  same rows of ``X``) is reported as a race, even with the copy spread over
  the threads (``X_shared_{by*16+(ty*16+tx)//8, ...}``). Verifying such a
  program on the CPU, where thread loops run one after the other, would also
  need the copy of all threads to run before any thread's compute (TVM's
  ``__syncthreads()``).
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import asdict, dataclass, replace
from typing import Iterator

from leir.semantics import Analysis
from leir.tools.plans.builder import Builder, PlanFailed
from leir.transforms.lib.tensors import rhs_reads

__all__ = ["GpuTiling", "gpu_plans", "staging_supported"]

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
    #: Stage each input in shared memory at the reduction chunk (needs k_in).
    stage: bool = False

    @property
    def kind(self) -> str:
        return "GPU kernel with per-thread tiles" + (" and shared-memory staging" if self.stage else "")

    def to_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    def realize(self, b: Builder) -> None:
        block = self.block
        if self.stage and not self.k_in:
            raise PlanFailed(None, "shared-memory staging loads one reduction chunk at a time: it needs k_in")
        eq = b.info(block)
        reductions = list(eq.reduce_axes)
        inputs = list(dict.fromkeys(a.tensor for a in rhs_reads(eq.equation) if a.tensor != eq.equation.lhs.tensor))
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
        if self.stage:
            # After the binds: shared memory is a scope of a program with
            # thread-bound loops only.
            for tensor in inputs:
                copy = b.cache_read(local, tensor, "s")
                b.apply("compute_at", {"block": copy, "at": {"block": local, "loop": k_out}})
                self._cooperative_load(b, copy, k_out)
        for var in (i_in, j_in):
            if var:
                b.apply("unroll", {"block": local, "loop": var}, optional=True)
        # The initial value written once, before the reduction loops, not
        # tested for at every iteration.
        b.decompose_reduction(local)

    def _cooperative_load(self, b: Builder, copy: str, at: str) -> None:
        """The copy's own loops (those inside ``at``) fused into one and split
        into ``[rest, ty, tx, lanes]``, bound to ``ty`` and ``tx`` (the
        kernel's own extents: one extent per axis) and the lanes vectorized."""
        loops = b.loops(copy)
        own = loops[loops.index(at) + 1:]
        fused = own[0]
        for var in own[1:]:
            fused = b.fuse(copy, fused, var)
        threads = self.ty * self.tx
        extent = b.extent(copy, fused)
        if extent % threads:
            raise PlanFailed(None, f"the {extent} elements a chunk copies do not divide among {threads} threads")
        last = b.extent(copy, own[-1]) if len(own) > 1 else extent
        lanes = next((v for v in (4, 2) if extent % (threads * v) == 0 and last % v == 0), 1)
        rest = fused
        if extent > threads * lanes:
            _, rest = b.split(copy, fused, threads * lanes)
        vector = None
        if lanes > 1:
            rest, vector = b.split(copy, rest, lanes)
        t_y, t_x = b.split(copy, rest, self.tx)
        b.apply("bind", {"block": copy, "loop": t_y, "axis": "ty"})
        b.apply("bind", {"block": copy, "loop": t_x, "axis": "tx"})
        if vector is not None:
            b.apply("vectorize", {"block": copy, "loop": vector}, optional=True)

    @staticmethod
    def _three(b: Builder, block: str, var: str, threads: int, per: int):
        """``var`` split into (blocks, threads, per-thread) loops; the last
        is None when ``per`` is 1."""
        outer, inner = b.split(block, var, threads * per)
        if per == 1:
            return outer, inner, None
        t, p = b.split(block, inner, per)
        return outer, t, p


def gpu_plans(analysis: Analysis, rng: random.Random, limit: int = 64,
              stage: bool | None = False) -> Iterator[GpuTiling]:
    """The GPU tilings of each contraction of ``analysis`` (at most ``limit``
    each). With ``stage``, each tiling with reduction chunks whose chunk
    copies divide among its threads comes with its shared-memory staged twin
    right after it, so that a search measures both: True always, None only
    where ``staging_supported()`` (a probe of about 2 s), False (the default,
    while the catalogue refuses the staging: module docstring) never."""
    from leir.tools.plans.cpu import _block_names, _vector_axis

    if stage is None:
        stage = staging_supported()
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
        out: list[GpuTiling] = []
        for t in grid:
            out.append(t)
            if stage and _stageable(t):
                out.append(replace(t, stage=True))
        yield from out[:limit]


def _stageable(t: GpuTiling) -> bool:
    """Whether each chunk copy (``ty*ti`` rows by ``k_in``, ``k_in`` by
    ``tx*tj`` columns) divides among the block's threads: plans add no
    guards."""
    threads = t.ty * t.tx
    return bool(t.k_in) and (t.ty * t.ti * t.k_in) % threads == 0 and (t.k_in * t.tx * t.tj) % threads == 0


#: The matmul ``staging_supported`` tries.
_PROBE = """\
L^{64}_{i}
  L^{64}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


@functools.lru_cache(maxsize=1)
def staging_supported() -> bool:
    """Whether the catalogue lets a staged plan apply (a 64x64x32 matmul,
    16x16 threads of 2x2 outputs, chunks of 8): False while ``compute_at``
    refuses a shared copy under thread-bound loops (the module docstring),
    so that a search does not spend its time realizing plans that stop
    there."""
    from leir.bridge.document import load_leir
    from leir.errors import LeirError

    try:
        GpuTiling("C", "i", "j", "k", 16, 2, 16, 2, 8, stage=True).realize(Builder.of(load_leir(_PROBE).analysis))
    except (PlanFailed, LeirError):
        return False
    return True

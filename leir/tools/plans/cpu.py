"""CPU plans: multi-level tiling of a contraction, and rows of element-wise
and reduction nests.

**Tiled contraction** (MetaSchedule's multi-level tiling, reduced to what
pays on a CPU core): the output's stride-1 loop (``vector``) and another
spatial loop (``row``) are split into a register tile (``r_in`` x
``v_in``; with a third spatial loop along which a read does not move, a
convolution's output rows, ``r2_in`` x ``r_in`` x ``v_in``), optionally a
cache tile around it (``r_mid`` x ``v_mid``), and
the main reduction loop optionally into ``k_in``-long chunks. The loops are
reordered to

    other spatial loops, row outer, vector outer, [k outer],
    [row mid, vector mid], reduction loops, row inner, vector inner

the accumulator is cached in a local buffer (``cache_write``) and its copy
out moved under the last spatial tile loop (``reverse_compute_at``), so the
partial sums of one tile stay in registers or L1 while the reduction runs;
an element-wise consumer of the output (a bias, an activation) is moved
there too. Then the outermost tile loop (fused with the next one when it is
too short to share among the cores) is made parallel, the vector-inner loop
vectorized and the row-inner loop unrolled.

**Rows** (softmax, layer norm, element-wise chains, reductions): every nest
gets its outermost spatial loop parallel and its innermost stride-1 spatial
loop vectorized (split first when longer than a vector's worth of lanes); a
reduction over the rows of a column-major walk (``S_j += X_{i,j}``) is
reordered so that the stride-1 spatial loop is innermost. Optionally
(``share``) a function call computed more often than its operands change is
computed once into a temporary first: one that two nests compute alike (a
softmax's ``exp(X_{i,j} - M_{i})``, in its sum and in its divide:
``common_subexpression_elimination``), or one that an inner loop does not
change (a layer norm's ``rsqrt(var_{i} + 1e-05)``, once per row instead of
once per element: ``precompute``). A call such as ``exp`` stays a scalar
library call per element even in a vectorized loop, so it is the costliest
work of such a nest (softmax 256x1024: 0.74 ms with ``exp`` computed once,
1.37 ms for the best plan without, timed turn about, load 0.4-0.7).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass
from typing import Iterator

from leir import ast as A
from leir.explain import access_strides
from leir.explain.machine import Machine
from leir.parser import parse_expression
from leir.semantics import Analysis
from leir.tools.plans.builder import Builder, PlanFailed
from leir.transforms.base import divisors

__all__ = ["ContractionTiling", "Rows", "contraction_tilings", "rows_plans"]

#: Most lanes a vectorized loop may have (the catalogue's vectorize limit).
MAX_LANES = 64
#: The fewest lanes a vectorized loop gets where no whole vector fits.
HALF_VECTOR = 8
#: Register tile rows tried (how many output rows share one loaded vector).
ROW_TILES = (1, 2, 4, 6, 8, 12, 16, 24)
#: Vector registers a tiling leaves for the loaded operands (the rest hold
#: accumulators): 12 of AVX2's 16, 28 of AVX-512's 32 (BLIS's AVX-512
#: kernel keeps 14 x 2 accumulators).
SPARE_REGISTERS = 4
#: Iterations of a second row loop in the register tile (``row2``).
ROW2_TILES = (2, 4)
#: Cache tiles tried: columns (elements along the vector loop) and rows.
V_MID_ELEMENTS = (64, 128, 256)
R_MID_ROWS = (8, 16, 32, 64)
#: Reduction chunks tried for the main reduction loop.
K_CHUNKS = (4, 8, 16, 32, 64)


def _var_index(expr) -> str | None:
    from leir import ast as A

    return expr.name if isinstance(expr, A.Var) else None


def _stride_ok(analysis: Analysis, info, var: str) -> bool:
    strides = access_strides(analysis, info, var)
    return bool(strides) and all(s in (0, 1) for s in strides.values())


@dataclass(frozen=True)
class ContractionTiling:
    """The parameters of one tiled-contraction plan."""

    block: str
    vector: str
    v_in: int
    row: str | None
    r_in: int
    reduce: str
    k_in: int | None = None
    v_mid: int | None = None
    r_mid: int | None = None
    fuse_outer: bool = False
    unroll: bool = True
    #: Accumulate in a local buffer (``cache_write``) rather than in the output.
    cache: bool = True
    #: Unroll the innermost reduction loop too (when it is short enough).
    unroll_reduction: bool = False
    #: Walk the tiles column by column (the vector loop's tiles outside the
    #: row tiles): a panel of the right operand stays in cache across the rows.
    columns_outer: bool = False
    #: An input read across the vector loop's lanes (``K`` in ``Q @ K^T``)
    #: copied first into a temporary with its last two dimensions
    #: transposed (``cache_read`` + ``transform_layout``: packing), so the
    #: lanes load consecutive elements instead of gathering.
    pack: str | None = None
    #: A second spatial loop in the register tile (``r2_in`` of its
    #: iterations, unrolled beside ``r_in``): in a convolution, the output
    #: rows ``h`` beside the channels ``k``, so that one weight broadcast
    #: serves ``r2_in`` rows and one input vector ``r_in`` channels.
    row2: str | None = None
    r2_in: int = 1

    kind = "tiled contraction"

    def to_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    def realize(self, b: Builder) -> None:
        block = self.block
        if self.pack is not None:
            _pack(b, block, self.pack)
        eq = b.info(block)
        spatial, reductions = list(eq.spatial), list(eq.reduce_axes)
        v_out, v_in = b.split(block, self.vector, self.v_in)
        v_mid = None
        if self.v_mid:
            v_out, v_mid = b.split(block, v_out, self.v_mid)
        r_out = r_in = r_mid = None
        if self.row is not None:
            if self.r_in > 1:
                r_out, r_in = b.split(block, self.row, self.r_in)
            else:
                r_out = self.row
            if self.r_mid:
                r_out, r_mid = b.split(block, r_out, self.r_mid)
        r2_out = r2_in = None
        if self.row2 is not None:
            r2_out, r2_in = b.split(block, self.row2, self.r2_in)
        k_out = None
        reduce_inner = list(reductions)
        if self.k_in:
            k_out, k_in = b.split(block, self.reduce, self.k_in)
            reduce_inner[reduce_inner.index(self.reduce)] = k_in
        others = [v for v in spatial if v not in (self.vector, self.row, self.row2)] + ([r2_out] if r2_out else [])
        outer = others + [v for v in ((v_out, r_out) if self.columns_outer else (r_out, v_out)) if v]
        order = (outer + ([k_out] if k_out else []) + [v for v in (r_mid, v_mid) if v] + reduce_inner
                 + [v for v in self._register_rows(spatial, r_in, r2_in) if v] + [v_in])
        b.reorder_to(block, order)
        # The loop the accumulator's copy goes under: the last spatial loop
        # outside every reduction loop.
        first_reduction = min(order.index(v) for v in reduce_inner + ([k_out] if k_out else []))
        attach = order[:first_reduction]
        if not attach:
            raise PlanFailed(None, "no spatial loop outside the reduction loops to hold a tile")
        tensor = eq.equation.lhs.tensor
        local = block
        if self.cache:
            local = b.cache_write(block)
            b.apply("reverse_compute_at", {"block": block, "at": {"block": local, "loop": attach[-1]}})
        for consumer in _elementwise_consumers(b, tensor, block):
            b.apply("reverse_compute_at", {"block": consumer, "at": {"block": local, "loop": attach[-1]}},
                    optional=True)
        # The parallel loop: the first tile loop with more than one
        # iteration (a batch of 1 has nothing to share among the cores),
        # fused with the next when ``fuse_outer``.
        live = [v for v in b.loops(local) if v in outer and b.extent(local, v) > 1] or b.loops(local)[:1]
        first = live[0]
        if self.fuse_outer and len(live) >= 2:
            first = b.fuse(local, live[0], live[1])
        b.apply("parallelize", {"block": local, "loop": first})
        b.apply("vectorize", {"block": local, "loop": v_in})
        # The copy out of the cache and the epilogue: their own inner loop in vectors.
        for other in ([block] if self.cache else []) + _elementwise_consumers(b, tensor, block):
            inner = b.loops(other)[-1]
            if inner in b.loops(local):
                continue
            if b.extent(other, inner) > MAX_LANES and b.extent(other, inner) % self.v_in == 0:
                try:
                    _, inner = b.split(other, inner, self.v_in)
                except PlanFailed:
                    continue
            b.apply("vectorize", {"block": other, "loop": inner}, optional=True)
        for var in (r2_in, r_in) if self.unroll else ():
            if var:
                b.apply("unroll", {"block": local, "loop": var}, optional=True)
        if self.unroll_reduction:
            # The innermost reduction loop unrolled: its vector accumulators
            # stay in registers across it (MetaSchedule's auto-unroll).
            inner_reduction = [v for v in b.loops(local) if v in reduce_inner][-1]
            b.apply("unroll", {"block": local, "loop": inner_reduction}, optional=True)
        # The initial value written once per tile, before the reduction
        # loops, instead of a test for the first iteration inside them.
        b.decompose_reduction(local)

    def _register_rows(self, spatial: list[str], r_in: str | None, r2_in: str | None) -> list[str | None]:
        """The register tile's row loops in the order of the loops they
        come from (fewer swaps: the order does not matter once unrolled)."""
        if self.row2 is not None and self.row is not None and spatial.index(self.row2) < spatial.index(self.row):
            return [r2_in, r_in]
        return [r_in, r2_in]


def _pack(b: Builder, block: str, tensor: str) -> None:
    """Copy ``tensor`` for ``block`` into a global temporary, transpose the
    copy's last two dimensions and run the copy over parallel rows."""
    copy = b.cache_read(block, tensor, "g")
    b.apply("transform_layout", {"tensor": b.info(copy).equation.lhs.tensor, "layout": "transpose"})
    b.apply("parallelize", {"block": copy, "loop": b.loops(copy)[0]}, optional=True)


def _packable(analysis: Analysis, info, vector: str) -> list[str]:
    """The inputs ``info`` reads across ``vector``'s lanes (a stride other
    than 0 and 1) whose last index is a reduction loop and the one before it
    ``vector`` itself: transposing their last two dimensions gives stride 1."""
    from leir import ast as A

    strides = access_strides(analysis, info, vector)
    inputs = {t.name for t in analysis.inputs()}
    out = []
    for a in A.walk(info.equation.rhs):
        if not isinstance(a, A.Access) or a.tensor not in inputs or len(a.indices) < 2 or a.tensor in out:
            continue
        if strides.get(a.tensor) in (0, 1, None):
            continue
        if _var_index(a.indices[-2]) == vector and _var_index(a.indices[-1]) in info.reduce_axes:
            out.append(a.tensor)
    return out


def _elementwise_consumers(b: Builder, tensor: str, copy_block: str) -> list[str]:
    """Blocks after ``copy_block`` that read ``tensor`` element-wise (an
    assignment indexed by all its loops)."""
    from leir import ast as A

    out = []
    blocks = b.blocks()
    for name in blocks[blocks.index(copy_block) + 1:]:
        info = b.info(name)
        reads = [a for a in A.walk(info.equation.rhs) if isinstance(a, A.Access) and a.tensor == tensor]
        if reads and info.kind == "assign" and not info.reduce_axes:
            out.append(name)
    return out


def _contractions(analysis: Analysis):
    """(equation, block name, extents, vector loop, reduction loop) of each
    contraction a tiling fits."""
    for info, block in zip(analysis.equations, _block_names(analysis)):
        if info.kind != "reduce" or not info.reduce_axes or not info.spatial:
            continue
        extents = {l.var: l.extent for l in info.loops}
        vector = _vector_axis(analysis, info, gathers=len(info.spatial) >= 2)
        if vector is None:
            continue
        yield (info, block, extents, vector, max(info.reduce_axes, key=lambda v: extents[v]),
               _packable(analysis, info, vector), _invariant(analysis, info))


def _invariant(analysis: Analysis, info) -> tuple[str, ...]:
    """The spatial loops of ``info`` along which some input read does not
    move (stride 0): a register tile along them reuses that read."""
    inputs = {t.name for t in analysis.inputs()}
    return tuple(v for v in info.spatial
                 if any(s == 0 for t, s in access_strides(analysis, info, v).items() if t in inputs))


def _grid(info, block: str, extents: dict[str, int], vector: str, reduce: str, lanes: int,
          packable: list[str] = (), invariant: tuple[str, ...] = (), registers: int = 16) -> list[ContractionTiling]:
    """Every tiling of one contraction: the divisors of its extents that
    make register tiles within ``registers`` vector registers less
    ``SPARE_REGISTERS``, cache tiles of the sizes
    in ``V_MID_ELEMENTS`` and ``R_MID_ROWS``, reduction chunks ``K_CHUNKS``;
    with a gathered operand, each packed and not (one gathered operand is
    packed: the contractions here have at most one); with a third spatial
    loop along which a read is ``invariant``, register tiles over two row
    loops too."""
    # Powers of two, whole vectors, or half a vector (8 lanes) where the
    # extent has no whole power-of-two one: a 56-wide row takes 8 x 7.
    # 28 or 56 lanes legalise into 16 + 8 + 4 and measured 3-8x slower
    # than 8 on the 56-wide ResNet convolution.
    half = min(lanes, HALF_VECTOR)
    extent = extents[vector]
    v_ins = [d for d in divisors(extent) if half <= d <= MAX_LANES and d < extent and d & (d - 1) == 0
             and (d >= lanes or not any(lanes <= e < extent for e in divisors(extent) if e & (e - 1) == 0))]
    rows = [v for v in info.spatial if v != vector and extents[v] > 1] or [None]
    grid = []
    for row in rows:
        r_ins = [r for r in ROW_TILES if row is None and r == 1
                 or row is not None and (r == 1 or extents[row] % r == 0 and r < extents[row])]
        k_ins = (None,) + tuple(k for k in K_CHUNKS if extents[reduce] % k == 0 and k < extents[reduce])
        # A second row loop: another spatial loop of more than one
        # iteration, along which some read does not move (a convolution's
        # weights along the output rows), so the register tile reuses it.
        seconds = [(None, 1)] + [(v, r2) for v in rows if v not in (row, None) and v in invariant
                                 for r2 in ROW2_TILES if extents[v] % r2 == 0 and r2 < extents[v]]
        for v_in, r_in, (row2, r2_in) in itertools.product(v_ins, r_ins, seconds):
            # Accumulators in registers: r2_in x r_in x v_in floats, leaving room for the operands.
            if r2_in * r_in * -(-v_in // lanes) > registers - SPARE_REGISTERS or (row2 is not None and r_in == 1):
                continue
            v_mids = _mid_factors(extents[vector] // v_in, v_in, V_MID_ELEMENTS)
            r_mids = _mid_factors(extents[row] // r_in, r_in, R_MID_ROWS) if row is not None else [None]
            for k_in, v_mid, r_mid, fuse, cache, unroll_k, pack in itertools.product(
                    k_ins, v_mids, r_mids, (False, True), (True, False), (False, True), (None, *packable[:1])):
                grid.append(ContractionTiling(block, vector, v_in, row, r_in, reduce, k_in, v_mid, r_mid,
                                              fuse_outer=fuse, cache=cache, unroll_reduction=unroll_k, pack=pack,
                                              row2=row2, r2_in=r2_in))
    return grid


def contraction_tilings(analysis: Analysis, machine: Machine, rng: random.Random,
                        limit: int = 64) -> list[ContractionTiling]:
    """Up to ``limit`` tilings of each contraction of the program (a
    reduction with a spatial loop along which the output moves by 1), drawn
    from ``_grid``: two thirds the ones ``prior`` ranks first, one third at
    random from the rest (exploration); a learned cost model reorders them
    later (``leir.tools.optimize.planned``)."""
    out: list[ContractionTiling] = []
    lanes = max(1, machine.vector_bytes // 4)
    for info, block, extents, vector, reduce, packable, invariant in _contractions(analysis):
        grid = _grid(info, block, extents, vector, reduce, lanes, packable, invariant, machine.vector_registers)
        if not grid:
            continue
        rng.shuffle(grid)
        grid.sort(key=lambda t: -prior(t, extents, machine, gathered=bool(packable), spatial=tuple(info.spatial)))
        top = grid[: max(1, 2 * limit // 3)]
        rest = grid[len(top):]
        out.extend(top + rng.sample(rest, min(len(rest), limit - len(top))))
    return out


#: The parameters a neighbour changes (one at a time).
_KNOBS = ("v_in", "row", "r_in", "k_in", "v_mid", "r_mid", "fuse_outer", "unroll", "cache", "unroll_reduction",
          "columns_outer", "pack", "row2", "r2_in")


def tiling_neighbours(t: ContractionTiling, analysis: Analysis, machine: Machine) -> list[ContractionTiling]:
    """The tilings of ``t``'s contraction that differ from it in one
    parameter (MetaSchedule's evolutionary search mutates one decision at a
    time the same way)."""
    lanes = max(1, machine.vector_bytes // 4)
    for info, block, extents, vector, reduce, packable, invariant in _contractions(analysis):
        if block != t.block:
            continue
        grid = _grid(info, block, extents, vector, reduce, lanes, packable, invariant, machine.vector_registers)
        grid += [ContractionTiling(**{**asdict(g), "columns_outer": True}) for g in grid if not g.columns_outer]
        return [g for g in grid if sum(getattr(g, k) != getattr(t, k) for k in _KNOBS) == 1]
    return []


def prior(t: ContractionTiling, extents: dict[str, int], machine: Machine, gathered: bool = False,
          spatial: tuple[str, ...] = ()) -> float:
    """A hand-written score of a tiling, higher is better, from what made
    tilings fast on this project's measurements (docs/optimize.md): a
    register tile of about half the vector registers in accumulators (8 of
    AVX2's 16), a cache tile of the output
    that fits half the L1, reduction chunks of 8-16, enough parallel
    iterations for the cores, and a gathered operand packed (``gathered``:
    the contraction has one). Used to order plans when no learned cost
    model is installed; it predicts no latency. ``spatial``: the
    contraction's spatial loops in order (the row and vector loops alone
    when empty)."""
    import math

    lanes = max(1, machine.vector_bytes // 4)
    regs = _register_use(t, lanes)
    score = -abs(math.log2(max(regs, 1) / (machine.vector_registers / 2)))
    rows = t.r_in * (t.r_mid or 1)  # of the row loop; the register tile also spans r2_in of row2
    cols = t.v_in * (t.v_mid or 1)
    tile_bytes = t.r2_in * rows * cols * 4
    score -= 0.5 * abs(math.log2(tile_bytes / (machine.l1d / 2)))
    if t.k_in:
        score -= 0.25 * abs(math.log2(t.k_in / 16))
    else:
        score -= 0.5
    # The parallel loop's iterations, as ``realize`` picks it: the first
    # tile loop longer than 1 (the other spatial loops come first), times
    # the next one when fused.
    row_tiles, vector_tiles = (extents[t.row] // rows if t.row else 1), extents[t.vector] // cols
    tiles = [extents[v] for v in spatial if v not in (t.row, t.vector, t.row2)]
    tiles += [extents[t.row2] // t.r2_in] if t.row2 else []  # row2's outer loop, last of the others
    tiles += [vector_tiles, row_tiles] if t.columns_outer else [row_tiles, vector_tiles]
    tiles = [n for n in tiles if n > 1] or [1]
    outer = tiles[0] * (tiles[1] if t.fuse_outer and len(tiles) > 1 else 1)
    if outer < 4 * machine.cores:
        score -= 1.0
    if gathered and t.pack is None:
        score -= 1.0
    return score


def _mid_factors(outer: int, inner: int, sizes: tuple[int, ...]) -> list[int | None]:
    """None (no cache tile) and each factor ``m`` of ``outer`` with
    ``m * inner`` among ``sizes`` (a proper split of ``outer``)."""
    return [None] + [size // inner for size in sizes
                     if size % inner == 0 and 1 < size // inner < outer and outer % (size // inner) == 0]


def _register_use(t: ContractionTiling, lanes: int) -> int:
    return t.r2_in * t.r_in * -(-t.v_in // lanes)


def _vector_axis(analysis: Analysis, info, gathers: bool = False) -> str | None:
    """The spatial loop indexing the output's last dimension directly, along
    which every access has stride 0 or 1 (or, with ``gathers``, any known
    stride for the reads: the lanes then gather, as in ``Q @ K^T`` along
    ``K``'s rows)."""
    last = info.equation.lhs.indices[-1] if info.equation.lhs.indices else None
    var = _var_index(last) if last is not None else None
    if var is None or var not in info.spatial:
        return None
    if _stride_ok(analysis, info, var):
        return var
    if gathers:  # a contraction of two or more spatial axes, where the tiles pay anyway
        strides = access_strides(analysis, info, var)
        if strides.get(info.equation.lhs.tensor) == 1 and all(s is not None for s in strides.values()):
            return var
    return None


def _block_names(analysis: Analysis) -> list[str]:
    from leir.transforms.base import Context

    return Context.of(analysis).block_names


@dataclass(frozen=True)
class Rows:
    """The parameters of one rows plan: each nest's lanes, whether its
    outer spatial loops are fused before they are made parallel, and
    whether a row reduction is factored into one partial result per lane
    first (``rfactor``), so that its stride-1 loop runs as vector lanes
    instead of one element after another, and whether a function call
    computed more often than its operands change is computed once first
    (``share``)."""

    lanes: int
    fuse_outer: bool = False
    rfactor: bool = False
    share: bool = False

    kind = "parallel rows"

    def to_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    def realize(self, b: Builder) -> None:
        if self.share and not _share_calls(b):
            raise PlanFailed(None, "no function call is computed more often than its operands change")
        if self.rfactor:
            for block in list(b.blocks()):
                self._lanes_of_partial_results(b, block)
        done: set[int] = set()
        any_parallel = False
        for block in list(b.blocks()):
            info = b.info(block)
            top = info.loops[0] if info.loops else None
            if top is None or id(top) in done:
                continue
            any_parallel |= self._nest(b, block)
            done.add(id(b.info(block).loops[0]))
        if not any_parallel:
            raise PlanFailed(b.steps[-1] if b.steps else None, "no nest has a loop to run in parallel")

    def _lanes_of_partial_results(self, b: Builder, block: str) -> None:
        """A reduction along its innermost, stride-1 loop (``S_i += X_{i,j}``)
        split by the lanes and factored over the inner part: ``S_rf_{i,jj}``
        accumulates one partial result per lane, ``jj`` a spatial loop that
        ``_nest`` vectorizes; a short nest then adds the lanes up. A float
        max or min is refused by ``rfactor`` (TVM starts it at the lowest
        finite value, LEIR at -inf) and stays as it is."""
        info = b.info(block)
        if info.kind != "reduce" or not info.loops or info.combiner not in ("sum", "prod"):
            return  # a max or min: rfactor takes integer ones only, and rows here are floats
        inner = info.loops[-1]
        if inner.var not in info.reduce_axes or inner.kind != "L" or not _stride_ok(b.analysis, info, inner.var):
            return
        if 1 not in access_strides(b.analysis, info, inner.var).values():
            return
        if inner.extent <= self.lanes or inner.extent % self.lanes:
            return
        if any(b.info(other).loops and b.info(other).loops[-1] is inner for other in b.blocks() if other != block):
            return  # another equation shares the loop (a shared temporary's): rfactor takes a nest of one
        _, lane = b.split(block, inner.var, self.lanes)
        rank = len(info.equation.lhs.indices)
        if not b.apply("rfactor", {"block": block, "loop": lane, "factor_axis": rank}, optional=True):
            raise PlanFailed(b.steps[-1], f"{block} does not factor over its lanes")

    def _nest(self, b: Builder, block: str) -> bool:
        """Parallel outer spatial loop, vectorized stride-1 inner one, the
        reduction loops between them (a column sum's ``i`` goes inside the
        tiles of ``j``)."""
        info = b.info(block)
        vector = next((v for v in reversed(info.spatial) if _stride_ok(b.analysis, info, v)), None)
        if vector is not None and b.loop(block, vector).kind == "L":
            if b.loops(block)[-1] != vector:
                try:
                    b.reorder_to(block, [v for v in b.loops(block) if v != vector] + [vector])
                except PlanFailed:
                    vector = None
        if vector is not None and b.loops(block)[-1] == vector:
            extent = b.extent(block, vector)
            if extent > self.lanes and extent % self.lanes == 0:
                try:
                    _, vector = b.split(block, vector, self.lanes)
                except PlanFailed:
                    vector = None
        info = b.info(block)
        spatial = [v for v in b.loops(block) if v in info.spatial and v != vector]
        reductions = [v for v in b.loops(block) if v not in info.spatial]
        if spatial and reductions:
            try:
                b.reorder_to(block, spatial + reductions + ([vector] if vector else []))
            except PlanFailed:
                pass
        parallel = False
        info = b.info(block)
        first = info.loops[0]
        if first.var in info.spatial and first.kind == "L" and first.var != vector:
            var = first.var
            second = info.loops[1] if len(info.loops) > 1 else None
            if (self.fuse_outer and second is not None and second.var in info.spatial and second.var != vector
                    and second.kind == "L"):
                try:
                    var = b.fuse(block, var, second.var)
                except PlanFailed:
                    pass
            parallel = b.apply("parallelize", {"block": block, "loop": var}, optional=True)
        if vector is not None and b.loops(block)[-1] == vector and b.extent(block, vector) <= MAX_LANES:
            b.apply("vectorize", {"block": block, "loop": vector}, optional=True)
        return parallel


#: Temporaries a plan makes at most for calls (each rewrites the program once).
MAX_SHARED = 4
#: The steps that compute a call once: for two nests that compute it alike,
#: then for an inner loop that does not change it.
SHARING = ("common_subexpression_elimination", "precompute")


#: The programs ``_shared_calls`` listed last and what it found: every
#: ``share`` plan of a program starts by listing the start program (a
#: softmax's listing takes about 0.4 s; ``rows_plans`` offers 12 such plans),
#: and lists the programs it makes after, so a few are kept. One tuple,
#: replaced whole, so a thread never reads one program's steps under
#: another's key; by identity (an analysis is not changed once made).
_SHARED_MEMO: tuple = ()
_SHARED_MEMO_SIZE = 8


def _shared_calls(analysis: Analysis) -> list:
    """The steps of ``SHARING`` that apply to ``analysis`` and compute a
    function call once, in ``SHARING`` order, the largest expression first
    within each (``exp(X_{i,j} - M_{i})`` before ``X_{i,j} - M_{i}``, which
    it contains)."""
    global _SHARED_MEMO
    memo = _SHARED_MEMO
    found = next((steps for seen, steps in memo if seen is analysis), None)
    if found is None:
        found = tuple(_list_shared_calls(analysis))
        _SHARED_MEMO = ((analysis, found),) + memo[:_SHARED_MEMO_SIZE - 1]
    return list(found)


def _list_shared_calls(analysis: Analysis) -> list:
    from leir.transforms import candidates

    found = []
    for c in candidates(analysis, only=SHARING):
        expr, _ = parse_expression(c.step.args["expr"])
        if expr is not None and any(isinstance(n, A.Call) for n in A.walk(expr)):
            found.append((SHARING.index(c.step.id), -sum(1 for _ in A.walk(expr)), c.step))
    return [step for *_, step in sorted(found, key=lambda f: f[:2])]


def _share_calls(b: Builder) -> bool:
    """Compute each call that is computed more often than its operands
    change once, listing the steps again after each (the program has
    changed); whether any was."""
    shared = 0
    while shared < MAX_SHARED:
        step = next(iter(_shared_calls(b.analysis)), None)
        if step is None or not b.apply(step.id, step.args, optional=True):
            break
        shared += 1
    return shared > 0


def rows_plans(analysis: Analysis, machine: Machine) -> Iterator[Rows]:
    lanes = max(2, machine.vector_bytes // 4)
    shares = (True, False) if _shared_calls(analysis) else (False,)
    for share, n, fuse, rf in itertools.product(shares, (lanes, 2 * lanes, 4 * lanes), (False, True), (True, False)):
        yield Rows(n, fuse, rf, share)

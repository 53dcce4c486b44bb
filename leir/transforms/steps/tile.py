"""Tile two directly nested loops: split each by a tile size and run the tiles outside.

Loops ``i`` and ``j`` become ``i_0``, ``j_0``, ``i_1``, ``j_1``: the outer
pair walks the tiles, the inner pair the elements of one tile. A tile of
a matrix multiply's output reuses its rows of ``X`` and columns of ``W``
while they are in cache, and the tile loops are what later steps make
parallel, vectorized or bound to GPU threads. A size that does not divide
its loop's extent rounds the number of tiles up and adds a guard
(``where``) that skips the iterations past the end.

It is TVM's split of each loop followed by a reorder, so it needs what
both need: the loops' iterations may run tile by tile only when no
element is accessed, with a write among the accesses, by two iterations
that the tiled order runs the other way round (a reduction's own
accumulation excepted, as for ``reorder``).

It requires:

- the inner loop directly inside the outer one;
- nothing but the inner loop in the outer loop's body (no equation or other
  loop beside it);
- both loops serial (L) and starting at 0 (tile before annotating: TVM's
  split drops a parallel, vectorized, unrolled or thread-bound annotation);
- tile sizes between 2 and each loop's extent minus 1;
- guards under the loops that TVM keeps around reordered loops (each
  conjunct bounds at most one of the loops tiled or inside them, written as
  ``i < n``, ``i + c <= n`` or ``n > i``);
- no dependence that the tiled order reverses.

Example: tile a matrix multiply's output by 32x16

    step: {"block": "C", "loops": ["i", "j"], "sizes": [32, 16]}

    before:
    L^{64}_{i}$0
      L^{32}_{j}
        L^{128}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{2}_{i_0}
      L^{2}_{j_0}
        L^{32}_{i_1}
          L^{16}_{j_1}
            L^{128}_{k} [
              C_{i_0*32+i_1,j_0*16+j_1} += X_{i_0*32+i_1,k}*W_{k,j_0*16+j_1};
            ];

Example: sizes that do not divide the extents add guards

    step: {"block": "Y", "loops": ["i", "j"], "sizes": [16, 16]}

    before:
    L^{40}_{i}$0
      L^{20}_{j} [
        Y_{j,i} = X_{i,j};
      ];

    after:
    L^{3}_{i_0}
      L^{2}_{j_0}
        L^{16}_{i_1}
          L^{16}_{j_1} [
            Y_{j_0*16+j_1,i_0*16+i_1} = X_{i_0*16+i_1,j_0*16+j_1} where i_0*16 + i_1 < 40 & j_0*16 + j_1 < 20;
          ];

Example: a parallel loop is tiled before it is annotated

    step: {"block": "Y", "loops": ["i", "j"], "sizes": [8, 8]}

    before:
    P^{64}_{i}$0
      L^{64}_{j} [
        Y_{i,j} = X_{i,j}*2.0;
      ];

    refused: tile-loop-not-serial
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    BadStep,
    Candidate,
    Context,
    LoopSite,
    NotApplicable,
    Step,
    divisors,
    int_list_arg,
    tvm_loop,
)
from leir.transforms.lib.loop_pairs import (
    guard_text,
    loop_pairs,
    nesting_refusal,
    order_conflict,
    pair_arg,
    pair_span,
    unsupported_guard,
)

ID = "tile"
GROUP = "loop"
TITLE = "Tile loops"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_tiling"

#: Tile sizes offered where they divide a loop's extent.
TILE_SIZES = (8, 16, 32, 64)
#: Square tiles offered as imperfect (guarded) tilings.
IMPERFECT_SIZES = (16, 32)
#: At most this many exact tilings per pair of loops, square ones first.
MAX_EXACT = 8


class LoopsNotNested(NotApplicable):
    """The inner loop is not directly inside the outer one."""

    code = "tile-loops-not-nested"


class NotOnlyChild(NotApplicable):
    """The outer loop's body holds more than the inner loop (an equation or another loop beside
    it)."""

    code = "tile-not-only-child"


class LoopNotSerial(NotApplicable):
    """A loop is not serial (L): TVM's split drops a parallel, vectorized, unrolled or
    thread-bound annotation."""

    code = "tile-loop-not-serial"


class LoopStartNotZero(NotApplicable):
    """A loop does not start at 0."""

    code = "tile-loop-start-not-zero"


class LoopTooShort(NotApplicable):
    """A loop has fewer than 3 iterations: no tile size between 2 and its extent minus 1."""

    code = "tile-loop-too-short"


class WrongSizes(NotApplicable):
    """A tile size is not between 2 and its loop's extent minus 1."""

    code = "tile-wrong-sizes"


class GuardNotBound(NotApplicable):
    """A guard under the loops is not one TVM keeps around reordered loops (each conjunct
    bounding at most one of the loops tiled or inside them)."""

    code = "tile-guard"


class DependenceReversed(NotApplicable):
    """The tiled order reverses a dependence."""

    code = "tile-dependence"




def loop_sizes(extent: int) -> list[tuple[int, bool]]:
    """(tile size, exact) options for one loop: the common sizes that
    divide its extent, else its largest divisors up to 64, else the largest
    power of two below it (guarded)."""
    exact = [t for t in TILE_SIZES if t < extent and extent % t == 0]
    if not exact:
        exact = [d for d in divisors(extent) if 2 <= d < extent and d <= max(TILE_SIZES)][-2:]
    if exact:
        return [(t, True) for t in exact]
    power = 1 << (extent - 1).bit_length() - 1
    return [(power, False)]


def tile_sizes(extent_a: int, extent_b: int) -> list[tuple[int, int]]:
    """The tilings offered for a pair of loops of these extents: exact ones
    no more than twice as long as wide, square first; a few square guarded
    ones; at least one."""
    options_a, options_b = loop_sizes(extent_a), loop_sizes(extent_b)
    exact = [(ta, tb) for ta, ea in options_a for tb, eb in options_b
             if ea and eb and max(ta, tb) <= 2 * min(ta, tb)]
    exact.sort(key=lambda s: (s[0] != s[1], -min(s)))
    out = sorted(exact[:MAX_EXACT])
    out += [(t, t) for t in IMPERFECT_SIZES
            if t < extent_a and t < extent_b and (extent_a % t or extent_b % t)]
    if not out:
        out = [(options_a[-1][0], options_b[-1][0])]
    return out


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for outer, inner in loop_pairs(ctx, at):
        if _refusal(ctx, outer, inner) is not None:
            continue
        a, b = outer.loop, inner.loop
        for ta, tb in tile_sizes(a.extent, b.extent):
            args = {"block": ctx.block_names[inner.equations[0]], "loops": [a.var, b.var], "sizes": [ta, tb]}
            title = f"Tile loops {a.var}, {b.var} by {ta}x{tb}"
            if a.extent % ta or b.extent % tb:
                title += " (guarded)"
            out.append(Candidate(Step(ID, args), title, pair_span(outer, inner)))
    return out


def _refusal(ctx: Context, outer: LoopSite, inner: LoopSite) -> NotApplicable | None:
    refusal = nesting_refusal(ctx, outer, inner, LoopsNotNested, NotOnlyChild, "tiled")
    if refusal is not None:
        return refusal
    for loop in (outer.loop, inner.loop):
        if loop.kind != "L":
            kind = A.KIND_WORDS[loop.kind]
            return LoopNotSerial(
                f"loop {loop.var} is {kind}",
                f"only serial (L) loops are tiled: TVM's split drops the {kind} annotation of {loop.var}; "
                f"tile before annotating, then annotate the tile loop that should be {kind}",
                loop.span,
            )
        if loop.start != 0:
            return LoopStartNotZero(f"loop {loop.var} starts at {loop.start}",
                                    f"only loops starting at 0 are tiled; {loop.var} starts at {loop.start}", loop.span)
        if loop.extent < 3:
            return LoopTooShort(f"loop {loop.var} has {loop.extent} iterations",
                                f"a loop of {loop.extent} iterations has no tile size between 2 and {loop.extent - 1}",
                                loop.span)
    a, b = outer.loop, inner.loop
    guarded = unsupported_guard(ctx, outer, inner)
    if guarded is not None:
        info, conjunct = guarded
        return GuardNotBound(
            f"TVM cannot tile loops around the guard {guard_text(conjunct)}",
            f"TVM reorders the tile loops only around guards that bound one of the loops tiled ({a.var}, {b.var} and "
            f"those inside) by a plain comparison such as {a.var} < 5 or {a.var} + 1 <= n; the guard "
            f"{guard_text(conjunct)} of {info.equation.lhs.tensor} is not one",
            info.equation.predicate.span if info.equation.predicate is not None else b.span,
        )
    conflict = order_conflict(ctx, outer, inner)
    if conflict is not None:
        return DependenceReversed(
            f"tiling {a.var} and {b.var} reverses a dependence on {conflict.tensor}",
            f"loops {a.var} and {b.var} cannot be tiled (running a tile of {b.var} before the next rows of {a.var} "
            f"swaps iterations): {conflict.describe(a.var, b.var)}",
            conflict.span or pair_span(outer, inner),
        )
    return None


def check(ctx: Context, args: dict) -> None:
    outer, inner = pair_arg(ctx, args, ID)
    refusal = _refusal(ctx, outer, inner)
    if refusal is not None:
        raise refusal
    sizes = int_list_arg(args, "sizes", ID)
    if len(sizes) != 2:
        raise BadStep(f"tile: \"sizes\" is one tile size per loop, [outer, inner]; got {sizes}")
    for loop, size in zip((outer.loop, inner.loop), sizes):
        if not 2 <= size < loop.extent:
            raise WrongSizes(
                f"tile size {size} does not fit loop {loop.var}",
                f"loop {loop.var} has {loop.extent} iterations: its tile size must be between 2 and {loop.extent - 1}",
                loop.span,
            )


def schedule(sch, ctx: Context, args: dict) -> None:
    block = args["block"]
    (a, b), (ta, tb) = args["loops"], args["sizes"]
    outer, inner = ctx.loop_site(block, a).loop, ctx.loop_site(block, b).loop
    a0, a1 = sch.split(tvm_loop(sch, block, a), factors=[-(-outer.extent // ta), ta], preserve_unit_iters=True)
    b0, b1 = sch.split(tvm_loop(sch, block, b), factors=[-(-inner.extent // tb), tb], preserve_unit_iters=True)
    sch.reorder(a0, b0, a1, b1)


def tile(program, block: str, loops: list[str], sizes: list[int]):
    """Apply a tiling (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loops": list(loops), "sizes": list(sizes)}))

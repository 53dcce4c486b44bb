"""Store a temporary in another layout: its last two dimensions transposed, or cut into square tiles.

Which element follows which in memory decides whether a loop walks a
tensor with stride 1 (one cache line serves many iterations, vector loads
work, GPU threads coalesce) or jumps. Transposing puts the dimension the
consumer's inner loop walks last; tiling (``C_{i,j}`` stored as
``C_{i//t,j//t,i%t,j%t}``) keeps a ``t`` x ``t`` tile contiguous, for loops
that work tile by tile. Every access of the temporary is rewritten (TVM's
``transform_layout``); the values are the same, only where they live
changes.

It requires:

- a temporary (an input's or output's layout is the kernel's interface:
  changing it changes what the caller must pass);
- at least two dimensions (the last two are transformed);
- for tiles, a tile size of 4, 8, 16 or 32 (what vectors, warps and cache
  lines work in) that divides both of the last two dimensions and is smaller
  than both (no padding, and at least two tiles each way).

Example: transpose a temporary

    step: {"tensor": "T", "layout": "transpose"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        T$0_{i,j} = X_{i,j}*2.0;
      ];

    L^{16}_{j}
      L^{8}_{i} [
        Y_{j,i} = T_{i,j} + 1.0;
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        T_{j,i} = X_{i,j}*2.0;
      ];

    L^{16}_{j}
      L^{8}_{i} [
        Y_{j,i} = T_{j,i} + 1.0;
      ];

Example: store a temporary in 4x4 tiles

    step: {"tensor": "T", "layout": "tile", "tile": 4}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        T$0_{i,j} = X_{i,j}*2.0;
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = T_{i,j} + 1.0;
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        T_{i//4,j//4,i%4,j%4} = X_{i,j}*2.0;
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = T_{i//4,j//4,i%4,j%4} + 1.0;
      ];

Example: an input's layout is the caller's

    step: {"tensor": "X", "layout": "transpose"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = X$0_{i,j}*2.0;
      ];

    refused: transform_layout-not-temporary
"""

from __future__ import annotations

from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    BadStep,
    Candidate,
    Context,
    NotApplicable,
    Step,
    int_arg,
    str_arg,
)
from leir.transforms.lib.tensors import not_temporary, tensor_arg, tensors_at, writers

ID = "transform_layout"
GROUP = "memory"
TITLE = "Transform layout"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "layout_transformation"

LAYOUTS = ("transpose", "tile")
#: Tile sizes offered where they divide both of the last two dimensions.
TILES = (4, 8, 16, 32)


class NotTemporary(NotApplicable):
    """The tensor is an input or an output: its layout is the kernel's interface."""

    code = "transform_layout-not-temporary"


class RankTooLow(NotApplicable):
    """The tensor has fewer than two dimensions (the last two are transformed)."""

    code = "transform_layout-rank-too-low"


class BadTile(NotApplicable):
    """The tile size is not 4, 8, 16 or 32, does not divide both of the last two dimensions, or
    is not smaller than both."""

    code = "transform_layout-bad-tile"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for name in tensors_at(ctx, at):
        t = ctx.analysis.tensors.get(name)
        if t is None or _refusal(ctx, name) is not None:
            continue
        out.append(Candidate(Step(ID, {"tensor": name, "layout": "transpose"}),
                             f"Store {name} with its last two dimensions transposed", t.span))
        for tile in TILES:
            if _tile_refusal(ctx, name, tile) is None:
                out.append(Candidate(Step(ID, {"tensor": name, "layout": "tile", "tile": tile}),
                                     f"Store {name} in {tile}x{tile} tiles", t.span))
    return out


def _refusal(ctx: Context, name: str) -> NotApplicable | None:
    refusal = not_temporary(ctx, name, NotTemporary,
                            "its layout is the kernel's interface, and changing it changes what the caller must pass")
    if refusal is not None:
        return refusal
    t = ctx.analysis.tensors[name]
    if len(t.shape) < 2:
        return RankTooLow(f"{name} has {len(t.shape)} dimension{'s' if len(t.shape) != 1 else ''}",
                          f"the layouts offered transform the last two dimensions, and {name} has "
                          f"{len(t.shape)}", t.span)
    return None


def _tile_refusal(ctx: Context, name: str, tile: int) -> NotApplicable | None:
    t = ctx.analysis.tensors[name]
    rows, cols = t.shape[-2:]
    if tile not in TILES or rows % tile or cols % tile or tile >= rows or tile >= cols:
        return BadTile(f"{tile} does not tile {rows}x{cols}",
                       f"a tile size is one of {', '.join(map(str, TILES))}, divides both of the last two dimensions "
                       f"of {name} ({rows} and {cols}) and is smaller than both", t.span)
    return None


def _args(args: dict) -> tuple[str, int | None]:
    layout = str_arg(args, "layout", ID)
    if layout not in LAYOUTS:
        raise BadStep(f"{ID}: \"layout\" is one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "tile":
        return layout, int_arg(args, "tile", ID)
    if "tile" in args:
        raise BadStep(f"{ID}: a transpose takes no \"tile\"")
    return layout, None


def check(ctx: Context, args: dict) -> None:
    name = tensor_arg(ctx, args, ID)
    layout, tile = _args(args)
    refusal = _refusal(ctx, name) or (_tile_refusal(ctx, name, tile) if layout == "tile" else None)
    if refusal is not None:
        raise refusal


def index_map(layout: str, tile: int | None):
    """The map from old to new indices, over the last two dimensions."""
    if layout == "transpose":
        return lambda *idx: (*idx[:-2], idx[-1], idx[-2])
    return lambda *idx: (*idx[:-2], idx[-2] // tile, idx[-1] // tile, idx[-2] % tile, idx[-1] % tile)


def schedule(sch, ctx: Context, args: dict) -> None:
    name = args["tensor"]
    producer = writers(ctx, name)[0]  # a temporary always has one
    layout, tile = _args(args)
    sch.transform_layout(ctx.block_names[producer.index], name, index_map(layout, tile))


def transform_layout(program, tensor: str, layout: str, tile: int | None = None):
    """Apply a transform_layout (see the module docstring) and return the new program."""
    args = {"tensor": tensor, "layout": layout}
    if tile is not None:
        args["tile"] = tile
    return apply_transform(__name__, program, Step(ID, args))

"""Pad the rows of a shared or local temporary so that its stride avoids memory bank conflicts.

Shared memory is split into 32 banks of 4 bytes; when the threads of a warp
read a column of a tile whose row length is a multiple of 32 words, they
all hit one bank and wait for each other. TVM's ``storage_align(block,
buffer, axis, factor, offset)`` makes the stride of ``axis`` equal to
``k*factor + offset`` (a 32x32 tile stored with rows of 33), so that a
column spreads over all banks.

Not offered: LEIR cannot carry the result. TVM records the alignment as an
annotation of the producing block (``buffer_dim_align``), which leir's
raising back to LEIR does not read, so the step would come back as the
unchanged program; and writing the padding as a wider declaration
(``tmp S: f32[32,33] @s``) does not say it either, since TVM's lowering
compacts a temporary to the region its accesses touch
(``CompactBufferAllocation``) and drops the unused column. The step
becomes possible when LEIR can declare a padded stride and both the
lowering (as a ``storage_align``) and the raising (from
``buffer_dim_align``) translate it.

It requires:

- a shared or local temporary (TVM aligns allocated buffers, and bank
  conflicts are a shared-memory matter);
- an axis that is not the last (the last one has stride 1);
- a factor from 1 up and an offset in ``0..factor-1``;
- a way for LEIR to write the padded stride, which it does not have (see
  above), so the step is refused with ``storage_align-not-expressible``.

Example: a padded shared tile is not expressible

    step: {"tensor": "S", "axis": 0, "factor": 32, "offset": 1}

    before:
    tmp S: f32[32,32] @s

    B^{32}_{tx} [
      L^{32}_{j} [
        S$0_{tx,j} = X_{tx,j};
      ];
      L^{32}_{j2} [
        Y_{tx,j2} = S_{j2,tx};
      ];
    ];

    refused: storage_align-not-expressible
"""

from __future__ import annotations

from leir.ast import SCOPES
from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    BadStep,
    Candidate,
    Context,
    NotApplicable,
    Step,
    int_arg,
)
from leir.transforms.lib.tensors import not_temporary, tensor_arg, writers

ID = "storage_align"
GROUP = "memory"
TITLE = "Align storage"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "set_storage_layout"


class NotTemporary(NotApplicable):
    """The tensor is an input or an output: TVM aligns only buffers the program allocates."""

    code = "storage_align-not-temporary"


class NotOnChip(NotApplicable):
    """The tensor is in global memory: bank conflicts are a matter of shared (and local) memory."""

    code = "storage_align-not-on-chip"


class BadAxis(NotApplicable):
    """The axis is the last one (stride 1) or not an axis of the tensor."""

    code = "storage_align-bad-axis"


class NotExpressible(NotApplicable):
    """LEIR cannot write a padded stride, so every otherwise valid ``storage_align`` step is
    refused with this."""

    code = "storage_align-not-expressible"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    # Nothing is offered while LEIR cannot write the result (see the module
    # docstring); check() says why for any step asked for.
    return []


def check(ctx: Context, args: dict) -> None:
    name = tensor_arg(ctx, args, ID)
    axis, factor, offset = (int_arg(args, k, ID) for k in ("axis", "factor", "offset"))
    if factor < 1 or not 0 <= offset < factor:
        raise BadStep(f"{ID}: needs factor >= 1 and 0 <= offset < factor, got factor {factor}, offset {offset}")
    refusal = not_temporary(ctx, name, NotTemporary,
                            "TVM aligns buffers the program allocates, and inputs and outputs are the caller's")
    if refusal is not None:
        raise refusal
    t = ctx.analysis.tensors[name]
    if t.scope == "g":
        raise NotOnChip(f"{name} is in global memory",
                        f"bank conflicts are a matter of shared (and local) memory; {name} is global: move it with "
                        f"set_scope first", t.span)
    if not 0 <= axis < len(t.shape) - 1:
        raise BadAxis(f"{name} has no axis {axis} to align",
                      f"the stride of an axis from 0 to {len(t.shape) - 2} can be padded ({name} has "
                      f"{len(t.shape)} dimensions, and the last has stride 1)", t.span)
    raise NotExpressible(
        f"LEIR cannot write a padded stride of {name}",
        f"TVM records storage_align as an annotation of the block that writes {name}, which raising back to LEIR "
        f"drops, and a wider declaration of {SCOPES[t.scope]} {name} would be compacted away by TVM's lowering: "
        f"the step would come back unchanged", t.span)


def schedule(sch, ctx: Context, args: dict) -> None:
    # Unreachable while check() refuses every step; kept as what the step
    # is once LEIR can carry the alignment.
    name = args["tensor"]
    block = ctx.block_names[writers(ctx, name)[0].index]
    sch.storage_align(block, 0, args["axis"], args["factor"], args["offset"])


def storage_align(program, tensor: str, axis: int, factor: int, offset: int):
    """Apply a storage_align (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"tensor": tensor, "axis": axis, "factor": factor, "offset": offset}))

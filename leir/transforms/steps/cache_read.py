"""Read a tensor through a cache: copy it into a new temporary and let one block read the copy.

The copy is the first half of staging data close to where it is used: on a
GPU, a tile of an input in shared memory is loaded once per thread block
and then read by all its threads, and values a thread reuses are held in
local memory (registers); on a CPU, a copy into a small contiguous buffer
("packing") keeps a strided tile in cache. TVM puts the copy right after
the tensor's producer (first, for an input), outside the loops they do not
share, over the whole region the block reads; moving it inside the block's
loops, so that it copies one tile at a time, is the next step
(``compute_at``). Until then a GPU program usually has the copy outside its
thread loops, so it runs on the CPU (as every step is verified) but not yet
on the GPU (the analysis warns: ``unbound-on-gpu``). The new tensor is
named after the cached one and the scope (``X_shared``) and declared with
its scope; only this block reads it, other readers keep the original.

Scopes offered: shared and local memory in a program with thread-bound
(``B``) loops; local and global memory in a CPU program, where shared
memory does not exist (``local`` is a buffer TVM keeps on the stack, for
register-level reuse; ``global`` a heap buffer, for packing).

It requires:

- a block that reads the tensor in its right-hand side (a tensor read only
  in a ``where`` guard is not part of TVM's reads, and a guard's reads are
  not redirected);
- a tensor other than the block's own output (caching the accumulator is
  ``cache_write``);
- a tensor written by at most one block (TVM copies what that one block
  produced);
- a copy that stays inside the tensor (where only the guard keeps a read in
  bounds, the guard must bound that very index, as an imperfect split's
  guard does);
- a scope the program can use (shared or local with ``B`` loops, local or
  global without).

Example: cache an input in local memory for a CPU block

    step: {"block": "Y", "tensor": "X", "scope": "l"}

    before:
    L^{16}_{i}
      L^{8}_{j} [
        Y_{i,j} = X$0_{i,j}*2.0;
      ];

    after:
    tmp X_local: f32[16,8] @l

    L^{16}_{ax0}
      L^{8}_{ax1} [
        X_local_{ax0,ax1} = X_{ax0,ax1};
      ];

    L^{16}_{i}
      L^{8}_{j} [
        Y_{i,j} = X_local_{i,j}*2.0;
      ];

Example: a shared-memory stage for a GPU matmul

    step: {"block": "C", "tensor": "W", "scope": "s"}

    before:
    B^{4}_{bx}
      B^{16}_{tx}
        L^{32}_{k} [
          C_{bx,tx} += X_{bx,k}*W$0_{k,tx};
        ];

    after:
    tmp W_shared: f32[32,16] @s

    L^{32}_{ax0}
      L^{16}_{ax1} [
        W_shared_{ax0,ax1} = W_{ax0,ax1};
      ];

    B^{4}_{bx}
      B^{16}_{tx}
        L^{32}_{k} [
          C_{bx,tx} += X_{bx,k}*W_shared_{k,tx};
        ];

Example: shared memory needs thread-bound loops

    step: {"block": "Y", "tensor": "X", "scope": "s"}

    before:
    L^{16}_{i} [
      Y_{i} = X$0_{i}*2.0;
    ];

    refused: cache_read-wrong-scope
"""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.ast import SCOPES
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    Candidate,
    Context,
    NotApplicable,
    Step,
    str_arg,
)
from leir.transforms.lib.tensors import (
    access_at,
    affine_guard,
    guard_reads,
    offered_scopes,
    rhs_reads,
    scope_arg,
    scope_refusal,
    tensor_arg,
    writers,
)

ID = "cache_read"
GROUP = "memory"
TITLE = "Cache read"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "cache_read_write"


class NotRead(NotApplicable):
    """The block does not read the tensor in its right-hand side."""

    code = "cache_read-not-read"


class ReadInGuard(NotApplicable):
    """The block's ``where`` guard reads the tensor: TVM does not count a guard's reads, so the
    guard would keep reading the original."""

    code = "cache_read-read-in-guard"


class OwnOutput(NotApplicable):
    """The tensor is the block's own output: caching the accumulator is ``cache_write``."""

    code = "cache_read-own-output"


class SeveralWriters(NotApplicable):
    """More than one block writes the tensor: TVM copies what one block produced."""

    code = "cache_read-several-writers"


class UnboundedCopy(NotApplicable):
    """The copy would not stay inside the tensor: only a guard keeps a read in bounds, and it
    does not bound that very index."""

    code = "cache_read-unbounded-copy"


class WrongScope(NotApplicable):
    """The program cannot use the scope: shared memory needs thread-bound (``B``) loops, and a
    GPU program stages in shared or local memory, not global."""

    code = "cache_read-wrong-scope"


# ------------------------------------------------------------------ the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    scopes = offered_scopes(ctx)
    for info in ctx.equations_at(at):
        eq = info.equation
        block = ctx.block_names[info.index]
        pointed = access_at(eq, at)
        if pointed is not None:
            names = [] if pointed is eq.lhs or pointed.tensor == eq.lhs.tensor else [pointed.tensor]
        else:
            names = list(dict.fromkeys(a.tensor for a in rhs_reads(eq)))
        for name in names:
            if _refusal(ctx, info, name) is not None:
                continue
            span = pointed.span if pointed is not None else next(a.span for a in rhs_reads(eq) if a.tensor == name)
            for scope in scopes:
                title = f"Cache {name} in {SCOPES[scope]} memory for block {block}"
                out.append(Candidate(Step(ID, {"block": block, "tensor": name, "scope": scope}), title, span))
    return out


def _refusal(ctx: Context, info: EquationInfo, name: str) -> NotApplicable | None:
    """Why ``name`` cannot be cached for the block of ``info``, whatever
    the scope (None if it can)."""
    eq = info.equation
    block = ctx.block_names[info.index]
    reads = [a for a in rhs_reads(eq) if a.tensor == name]
    if name == eq.lhs.tensor:
        return OwnOutput(f"{name} is what block {block} writes",
                         f"block {block} reads {name} only to accumulate into it; to stage the value it builds, "
                         f"use cache_write on block {block}", eq.lhs.span)
    in_guard = [a for a in guard_reads(eq) if a.tensor == name]
    if in_guard:
        return ReadInGuard(f"block {block} reads {name} in its guard",
                           f"the where guard of block {block} reads {name}; TVM does not count a guard's reads as the "
                           f"block's reads, so a cache would leave the guard reading the original", in_guard[0].span)
    if not reads:
        read = ", ".join(dict.fromkeys(a.tensor for a in rhs_reads(eq))) or "no tensor"
        return NotRead(f"block {block} does not read {name}", f"block {block} reads {read}", eq.span)
    producers = writers(ctx, name)
    if len(producers) > 1:
        blocks = [ctx.block_names[p.index] for p in producers]
        return SeveralWriters(f"{name} is written by {len(producers)} blocks",
                              f"{name} is written by blocks {', '.join(blocks)}; TVM caches a tensor that one block "
                              f"produces, so there is no single value to copy", reads[0].span)
    shape = ctx.analysis.tensors[name].shape
    ranges = affine.loop_ranges(info.loops)
    for access in reads:
        for d, index in enumerate(access.indices or ()):
            if not _copy_in_bounds(index, shape[d], ranges, eq.predicate):
                return UnboundedCopy(
                    f"cannot bound the copy of {name} inside it",
                    f"index {d} of this read of {name} stays inside 0..{shape[d] - 1} only by a guard TVM cannot use "
                    f"to bound its copy (or not provably at all); the copy would read outside {name}",
                    access.span)
    return None


def _copy_in_bounds(index: A.Expr, extent: int, ranges: dict, guard: A.Expr | None) -> bool:
    """Whether the region TVM copies for this index stays in 0..extent-1.
    TVM bounds the region by the loop ranges and, where the guard is made
    of affine comparisons only, by the guard (an imperfect split's
    ``where io*32 + ii < 100``)."""
    bounds = affine.bounds(index, ranges)
    if bounds is not None and 0 <= bounds[0] and bounds[1] < extent:
        return True
    form = affine.linearize(index)
    if form is None or guard is None or not affine_guard(guard):
        return False
    lo, hi = affine.guarded_bounds(form, ranges, guard)
    return 0 <= lo and hi < extent


def check(ctx: Context, args: dict) -> None:
    info = ctx.equation_of_block(str_arg(args, "block", ID))
    name = tensor_arg(ctx, args, ID)
    scope = scope_arg(args, ID)
    refusal = _refusal(ctx, info, name)
    if refusal is not None:
        raise refusal
    refusal = scope_refusal(ctx, scope, WrongScope, "cache", info.equation.span)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    block = args["block"]
    # Only this block reads the copy: other readers keep the original, so
    # that a later compute_at can move the copy under this block's loops.
    sch.cache_read(block, args["tensor"], A.SCOPES[args["scope"]], consumer_blocks=[block])


def cache_read(program, block: str, tensor: str, scope: str):
    """Apply a cache_read (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "tensor": tensor, "scope": scope}))

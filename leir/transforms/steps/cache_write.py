"""Write a block's output through a cache: the block writes a new temporary, and a copy moves it to the tensor.

The block then accumulates where it is cheap to: a GPU thread keeps its
partial sums in local memory (registers) or a thread block in shared
memory and writes each result to global memory once; on a CPU, a
reduction into a small local buffer stays in cache or registers. TVM puts
the copy right after the block, outside the loops it has no reason to
share, over the whole region the block writes; moving it inside the
block's loops (``reverse_compute_at``) is the next step. Until then a GPU
program usually has the copy outside its thread loops, so it runs on the
CPU (as every step is verified) but not yet on the GPU. The new
tensor is named after the written one and the scope (``C_local``) and
declared with its scope. Scopes offered are those of ``cache_read``:
shared or local memory with ``B`` loops, local or global without.

It requires:

- a tensor the block writes and no other block writes (TVM caches what one
  block produces);
- a block that writes every element of the box it writes, since the copy
  moves the whole box and would move uninitialised values into the gaps:
  affine indices over distinct loops with no gaps (``Y_{2*i}`` skips
  elements), a guard only of affine bounds on an index (an imperfect split's
  ``where io*32 + ii < 100``), or, for ``//`` and ``%`` indices without a
  guard, a write that fills its box (checked by enumeration);
- not a reduction whose guard names a reduction loop (TVM then skips the
  initial value of some elements, which the output's zeroed memory hides but
  a fresh cache does not);
- a scope the program can use.

Example: accumulate a CPU matmul in a local buffer

    step: {"block": "C", "tensor": "C", "scope": "l"}

    before:
    L^{16}_{i}
      L^{8}_{j}
        L^{32}_{k} [
          C$0_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    tmp C_local: f32[16,8] @l

    L^{16}_{i}
      L^{8}_{j}
        L^{32}_{k} [
          C_local_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{16}_{ax0}
      L^{8}_{ax1} [
        C_{ax0,ax1} = C_local_{ax0,ax1};
      ];

Example: a strided write leaves gaps the copy would fill with garbage

    step: {"block": "Y", "tensor": "Y", "scope": "l"}

    before:
    L^{8}_{i} [
      Y$0_{2*i} = X_{i};
    ];

    refused: cache_write-sparse-write
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
    TvmRefused,
    str_arg,
)
from leir.transforms.lib.tensors import (
    access_at,
    affine_guard,
    offered_scopes,
    scope_arg,
    scope_refusal,
    tensor_arg,
    writers,
)

ID = "cache_write"
GROUP = "memory"
TITLE = "Cache write"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "cache_read_write"

#: Largest write enumerated to prove that ``//``/``%`` indices fill their box.
MAX_ENUMERATED = 1 << 16

Range = tuple[int, int]


class NotWritten(NotApplicable):
    """The block does not write the tensor (to stage a tensor it reads, use ``cache_read``)."""

    code = "cache_write-not-written"


class SeveralWriters(NotApplicable):
    """Another block writes the tensor too: TVM caches what one block produces."""

    code = "cache_write-several-writers"


class SparseWrite(NotApplicable):
    """The block does not write every element of the box it writes: the copy would move
    uninitialised cache values into the gaps."""

    code = "cache_write-sparse-write"


class GuardedReduction(NotApplicable):
    """The block is a reduction whose guard names a reduction loop: TVM then skips the initial
    value of some elements, which a fresh cache does not hide."""

    code = "cache_write-guarded-reduction"


class WrongScope(NotApplicable):
    """The program cannot use the scope: shared memory needs thread-bound (``B``) loops, and a
    GPU program stages in shared or local memory, not global."""

    code = "cache_write-wrong-scope"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    scopes = offered_scopes(ctx)
    for info in ctx.equations_at(at):
        eq = info.equation
        pointed = access_at(eq, at)
        if pointed is not None and pointed.tensor != eq.lhs.tensor:
            continue  # the cursor is on a read: that is cache_read's
        if _refusal(ctx, info) is not None:
            continue
        block = ctx.block_names[info.index]
        name = eq.lhs.tensor
        for scope in scopes:
            title = f"Cache writes of {name} in {SCOPES[scope]} memory for block {block}"
            out.append(Candidate(Step(ID, {"block": block, "tensor": name, "scope": scope}), title, eq.lhs.span))
    return out


def _refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    eq = info.equation
    name = eq.lhs.tensor
    block = ctx.block_names[info.index]
    producers = writers(ctx, name)
    if len(producers) > 1:
        blocks = [ctx.block_names[p.index] for p in producers]
        return SeveralWriters(f"{name} is written by {len(producers)} blocks",
                              f"{name} is written by blocks {', '.join(blocks)}; TVM caches a tensor that one block "
                              f"produces (fuse the blocks, or cache one that writes a tensor of its own)", eq.lhs.span)
    if info.kind == "reduce" and eq.predicate is not None:
        named = affine.index_vars(eq.predicate) & set(info.reduce_axes)
        if named:
            loop = sorted(named)[0]
            return GuardedReduction(
                f"the guard of reduction {block} names its reduction loop {loop}",
                f"TVM starts the reduction {block} only where its guard holds at the first iteration of its reduction "
                f"loops, and this guard names {loop}: some elements would get no initial value, which the zeroed "
                f"memory of {name} hides but a fresh cache does not", eq.span)
    _, reason = written_box(info)
    if reason:
        return SparseWrite(f"block {block} does not write every element of its box of {name}",
                           f"{reason}; the copy moves every element of the box, so it would move uninitialised "
                           f"cache values into {name}", eq.lhs.span)
    return None


def written_box(info: EquationInfo) -> tuple[list[Range], str]:
    """The box of elements the equation writes (inclusive ranges per
    dimension) when it provably writes every element of it, else an empty
    box and why not.

    Dimensions that share no loop are independent, so the box is full when
    each group of dimensions that do share loops fills its own box: a lone
    affine index by its strides (a mixed radix such as ``io*32+ii``), a
    group with ``//`` or ``%`` (fused loops) by enumerating its loops."""
    eq = info.equation
    indices = eq.lhs.indices or ()
    ranges = affine.loop_ranges(info.loops)
    forms = [affine.linearize(i) for i in indices]
    moving = [{v for v in affine.index_vars(i) if ranges[v][1] > ranges[v][0]} for i in indices]
    groups: list[list[int]] = []
    for d in range(len(indices)):
        joined = [g for g in groups if any(moving[e] & moving[d] for e in g)]
        for g in joined:
            groups.remove(g)
        groups.append(sorted(sum(joined, []) + [d]))
    if eq.predicate is not None:
        if any(len(g) > 1 or forms[g[0]] is None for g in groups):
            return [], "its guard cannot be proved to leave no gaps in indices that share loops or use // or %"
        clipping = _clips_indices(eq.predicate, forms)
        if clipping:
            return [], clipping
    box: list[Range] = [(0, -1)] * len(indices)
    for group in groups:
        if len(group) == 1 and forms[group[0]] is not None:
            d = group[0]
            if not _contiguous(forms[d], ranges):
                return [], f"index {d} skips elements (its loops' strides leave gaps)"
            box[d] = affine.guarded_bounds(forms[d], ranges, eq.predicate)
            continue
        sub, reason = _enumerated_box([indices[d] for d in group], info.loops, ranges)
        if reason:
            return [], reason
        for d, b in zip(group, sub):
            box[d] = b
    if any(lo > hi for lo, hi in box):
        return [], "its guard never holds"
    return box, ""


def _contiguous(form: affine.Affine, ranges: dict[str, Range]) -> bool:
    """Whether an affine index takes every value between its bounds (a
    mixed radix such as ``io*32+ii`` with ``ii < 32``)."""
    reach = 0  # the values 0..reach are made by the smaller strides
    for coeff, width in sorted((abs(c), ranges[v][1] - ranges[v][0]) for v, c in form.coeffs):
        if width == 0:
            continue
        if coeff > reach + 1:
            return False
        reach += coeff * width
    return True


def _clips_indices(guard: A.Expr, forms: list[affine.Affine]) -> str:
    """Why the guard may leave gaps ("" if each of its conjuncts is an
    affine bound on one written index, which only trims the box)."""
    if not affine_guard(guard):
        return "its guard is not made of affine comparisons, so the written elements need not form a box"
    conjuncts = [guard]
    while any(isinstance(c, A.Binary) and c.op == "&" for c in conjuncts):
        c = next(c for c in conjuncts if isinstance(c, A.Binary) and c.op == "&")
        conjuncts.remove(c)
        conjuncts += [c.lhs, c.rhs]
    for c in conjuncts:
        for bound, _ in affine.guard_upper_bounds(c):
            negated = tuple((v, -k) for v, k in bound.coeffs)
            if not any(f.coeffs in (bound.coeffs, negated) for f in forms):
                return "its guard bounds an expression that is not one of the written indices, so it can leave gaps"
    return ""


def _enumerated_box(indices, loops, ranges) -> tuple[list[Range], str]:
    """The box of indices that share loops, when they fill it (checked
    point by point)."""
    names = set().union(*(affine.index_vars(i) for i in indices))
    used = [l for l in loops if l.var in names]
    if affine.Space.size_of(used) > MAX_ENUMERATED:
        return [], (f"its indices that share loops range over more than {MAX_ENUMERATED} points, "
                    f"too many to check for gaps")
    import numpy as np

    space = affine.Space(used)
    columns = []
    for index in indices:
        values = space.evaluate(index)
        if values is None:
            return [], "an index cannot be evaluated to check for gaps"
        columns.append(space.full(values))
    box = [(int(c.min()), int(c.max())) for c in columns]
    flat = np.zeros(space.size, dtype=np.int64)
    volume = 1
    for column, (lo, hi) in zip(columns, box):
        flat = flat * (hi - lo + 1) + (column - lo)
        volume *= hi - lo + 1
    if len(np.unique(flat)) != volume:
        return [], "its indices that share loops skip elements of their box (or write one twice while missing another)"
    # TVM bounds the copy by interval arithmetic, as affine.bounds does: the
    # box it copies must be the box written, not a looser one.
    if any(affine.bounds(i, ranges) != b for i, b in zip(indices, box)):
        return [], "the box its indices fill is tighter than TVM's estimate of it"
    return box, ""


def check(ctx: Context, args: dict) -> None:
    info = ctx.equation_of_block(str_arg(args, "block", ID))
    name = tensor_arg(ctx, args, ID)
    scope = scope_arg(args, ID)
    block = args["block"]
    if name != info.equation.lhs.tensor:
        raise NotWritten(f"block {block} does not write {name}",
                         f"block {block} writes {info.equation.lhs.tensor}; to stage a tensor it reads, use cache_read",
                         info.equation.lhs.span)
    refusal = _refusal(ctx, info) or scope_refusal(ctx, scope, WrongScope, "cache", info.equation.span)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    cache = sch.cache_write(args["block"], args["tensor"], A.SCOPES[args["scope"]])
    # Our proof that the block fills the copied box assumed TVM copies the
    # box we computed; a larger one would copy uninitialised values.
    copied = [int(d) for d in sch.get(cache).reads[0].source.shape]
    box, _ = written_box(ctx.equation_of_block(args["block"]))
    if copied != [hi - lo + 1 for lo, hi in box]:
        raise TvmRefused(f"TVM's write cache of {args['tensor']} has shape {copied}, not the written box {box}",
                         "this is a bug in leir's check of cache_write, not in your program")


def cache_write(program, block: str, tensor: str, scope: str):
    """Apply a cache_write (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "tensor": tensor, "scope": scope}))

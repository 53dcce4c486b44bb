"""Move the equation that computes a temporary under a loop of the equations that read it.

The producer's nest disappears from where it was and is regenerated inside
the chosen loop of its consumers, over just the part of the temporary that
one iteration of that loop reads: computed right before it is used, the
temporary stays in cache (and a later ``set_scope`` can shrink it to a
row or a tile). A reduction moves with its whole reduction loop. The loops
the step creates are serial (annotate them again if needed) and take the
producer's loop names where they run over the same range (TVM calls them
``ax0``, ``ax1``...).

It requires:

- a producer that is the only equation writing a temporary;
- a producer that is either a plain assignment indexed by all its loops or a
  reduction with an implied initial value;
- a producer without a guard;
- a producer whose write is indexed by distinct loop variables per dimension
  (a dimension indexed by several variables, as after a split, only for a
  plain assignment and only where the loop needs all of that dimension or
  one element of it);
- no equation reading the temporary in a guard;
- a program without write-after-read dependences whose reads TVM can see
  covered by earlier writes (TVM's "stage pipeline");
- a loop that does not already enclose the producer and encloses every
  equation reading the temporary;
- no vectorized loop down to it;
- thread-bound loops down to it only where every thread axis of the kernel
  is among them and the temporary is local (TVM computes a global or shared
  temporary for every thread of the block otherwise);
- every loop down to the chosen one used by each read of the temporary
  (otherwise the producer would be recomputed on every iteration of that
  loop);
- reads that make one box per iteration (affine indices of the same shape);
- parallel loops down to it whose iterations read different elements.

Example: compute the variance once per row, next to its use

    step: {"block": "var", "at": {"block": "Y", "loop": "i"}}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        $0var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];

    L^{64}_{i}
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*rsqrt(var_{i} + 1e-05);
      ];

    after:
    L^{64}_{i} [
      L^{32}_{j} [
        var_{i} += X_{i,j}*X_{i,j}/32.0;
      ];
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}*rsqrt(var_{i} + 1e-05);
      ];
    ];

Example: a matrix product computed element by element where the epilogue reads it

    step: {"block": "C", "at": {"block": "Y", "loop": "j"}}

    before:
    L^{32}_{i}
      L^{24}_{j}
        L^{64}_{k} [
          $0C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{32}_{i}
      L^{24}_{j} [
        Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

    after:
    L^{32}_{i}
      L^{24}_{j} [
        L^{64}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];
        Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

Example: the row sum would be recomputed for every column

    step: {"block": "S", "at": {"block": "Y", "loop": "j"}}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        $0S_{i} += X_{i,j};
      ];

    L^{64}_{i}
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}/S_{i};
      ];

    refused: compute_at-recomputes
"""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib.producer_consumer import (Interval, attach_candidates, attach_check, attach_tidy, box_union, complete_refusal, dataflow, disjoint_dims, encloses_refusal, kernel_loop_refusal, region_misfit, relaxed_ranges, stage_pipeline_refusal, thread_relaxes, write_index_problem)
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, tvm_loop
from leir.printer import access_text, equation_text

ID = "compute_at"
GROUP = "memory"
TITLE = "Compute at loop"
#: Step-TP has no strategy for this; TVM's primitive names it. (Step-TP's
#: closest, operator_fusion, is the nest fusion of ``operator_fusion``.)
STEPTP = "compute_at"



class OutputTensor(NotApplicable):
    """The producer writes an output: TVM moves only the computation of a temporary."""

    code = "compute_at-output"


class NotComplete(NotApplicable):
    """The producer is not the only equation writing its tensor, or is neither a plain
    assignment indexed by all its loops nor a reduction with an implied initial value."""

    code = "compute_at-not-complete"


class Guarded(NotApplicable):
    """The producer has a guard: TVM rebuilds a moved equation's loops from what its readers
    need."""

    code = "compute_at-guarded"


class IndexNotLoops(NotApplicable):
    """The producer's write is not indexed by distinct loop variables per dimension (that TVM
    can invert)."""

    code = "compute_at-index-not-loops"


class ReadInGuard(NotApplicable):
    """An equation reads the temporary in its guard, which TVM does not count as a read."""

    code = "compute_at-read-in-guard"


class NotStagePipeline(NotApplicable):
    """The program is not what TVM calls a stage pipeline: a tensor is written after an equation
    reads it, or a read is not covered by earlier writes."""

    code = "compute_at-not-stage-pipeline"


class LoopEnclosesBlock(NotApplicable):
    """The loop already encloses the producer."""

    code = "compute_at-loop-encloses-block"


class ConsumerOutside(NotApplicable):
    """An equation reading the temporary is outside the loop."""

    code = "compute_at-consumer-outside"


class VectorLoop(NotApplicable):
    """A loop down to the chosen one is vectorized: TVM vectorizes only the innermost loop."""

    code = "compute_at-vector-loop"


class ThreadLoop(NotApplicable):
    """The thread-bound loops down to the chosen one miss a thread axis of the kernel, or the
    temporary is not local: every thread of the block would compute it."""

    code = "compute_at-thread-loop"


class Recomputes(NotApplicable):
    """A loop down to the chosen one is not used by a read of the temporary: the producer would
    be recomputed on every iteration of it."""

    code = "compute_at-recomputes"


class IrregularRead(NotApplicable):
    """What an iteration of the loop reads of the temporary is not one box."""

    code = "compute_at-irregular-read"


class Race(NotApplicable):
    """Iterations of a parallel loop down to the chosen one read the same elements of the
    temporary."""

    code = "compute_at-race"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return attach_candidates(ctx, at, ID, _producer_refusal, _loop_refusal,
                             partner=lambda flow, info: flow.later_readers(info)[0])


def check(ctx: Context, args: dict) -> None:
    attach_check(ctx, args, ID, _producer_refusal, _loop_refusal)


def schedule(sch, ctx: Context, args: dict) -> None:
    at = args["at"]
    sch.compute_at(sch.get_sblock(args["block"]), tvm_loop(sch, at["block"], at["loop"]))


def tidy(ctx: Context, args: dict, program: A.Program) -> A.Program:
    """The moved producer's new loops named after its own loops where they
    run over the same range."""
    return attach_tidy(ctx, args, program, ID)


def compute_at(program, block: str, at: dict):
    """Apply a compute_at (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "at": dict(at)}))


# ------------------------------------------------------------- refusals


def _producer_refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    """What rules the producer out wherever it would go."""
    eq = info.equation
    tensor = eq.lhs.tensor
    flow = dataflow(ctx)
    if ctx.analysis.tensors[tensor].role != "tmp":
        return OutputTensor(
            f"{tensor} is an output",
            f"{equation_text(eq)} writes {tensor}, an output of the program: TVM only moves the computation of a "
            f"temporary under its readers' loops; move the readers instead (reverse_compute_at)", eq.span)
    refusal = complete_refusal(ctx, info, NotComplete, "moved under another loop")
    if refusal is not None:
        return refusal
    if eq.predicate is not None:
        return Guarded(
            f"{tensor} is written under a guard",
            f"{equation_text(eq)} has a guard: TVM rebuilds the loops of a moved equation from what its readers need "
            f"and drops the guard, so the moved equation would write where the guard said not to", eq.span)
    bad = write_index_problem(eq.lhs, info.loops, split=info.kind == "assign")
    if bad is not None:
        return IndexNotLoops(
            f"the write of {tensor} is not indexed by loop variables",
            f"{equation_text(eq)}: {bad}; TVM derives the moved loops from the written index, which it inverts exactly "
            f"only for loop variables", eq.lhs.span)
    guard_reader = next((k for k in flow.guard_reads.get(tensor, ()) if k != info.index), None)
    if guard_reader is not None:
        reader = ctx.analysis.equations[guard_reader].equation
        return ReadInGuard(
            f"{tensor} is read in a guard",
            f"{equation_text(reader)} reads {tensor} in its guard, which TVM does not count as a read: it would not "
            f"keep the guard's reads computed", reader.span)
    return stage_pipeline_refusal(ctx, NotStagePipeline, "moves equations")


def _loop_refusal(ctx: Context, info: EquationInfo, site: LoopSite) -> NotApplicable | None:
    """What rules out moving the producer under this loop."""
    flow = dataflow(ctx)
    eq = info.equation
    tensor = eq.lhs.tensor
    loop = site.loop
    name = ctx.block_names[info.index]
    refusal = encloses_refusal(ctx, info, site, LoopEnclosesBlock, f"the equations that read {tensor}")
    if refusal is not None:
        return refusal
    readers = flow.later_readers(info)
    outside = next((r for r in readers if r.index not in site.equations), None)
    if outside is not None:
        return ConsumerOutside(
            f"{ctx.block_names[outside.index]} reads {tensor} outside loop {loop.var}",
            f"every equation that reads {tensor} must be inside loop {loop.var}, where {tensor} will be computed; "
            f"{equation_text(outside.equation)} is not", outside.equation.span)
    path = site.outer + (loop,)
    refusal = (kernel_loop_refusal(ctx, name, site, path, VectorLoop, ThreadLoop)
               or _shared_memory_refusal(ctx, info, path))
    if refusal is not None:
        return refusal
    reads = [(a, r.loops) for r in readers for a in flow.reads_of(r.index, tensor)]
    for l in path:
        unused = next((a for a, _ in reads if l.var not in affine.index_vars(a)), None)
        if unused is not None:
            return Recomputes(
                f"{name} would be recomputed for every {l.var}",
                f"{access_text(unused)} does not use loop {l.var}: computed at loop {loop.var}, {name} would "
                f"compute the same elements of {tensor} again on every iteration of {l.var}; compute it at a loop "
                f"whose variables, and those of the loops around it, all index what is read",
                unused.span or loop.span)
    region = read_region(ctx, site, readers, tensor)
    if isinstance(region, str):
        return IrregularRead(
            f"what loop {loop.var} reads of {tensor} is not a box",
            f"TVM computes, per iteration of loop {loop.var}, the box of elements read: {region}", loop.span)
    misfit = region_misfit(eq.lhs, info.loops, region, ctx.analysis.tensors[tensor].shape)
    if misfit is not None:
        return IrregularRead(
            f"{tensor} is written through a split index and read in part",
            f"{equation_text(eq)} writes dimension {misfit} of {tensor} through several loop variables; per iteration "
            f"of loop {loop.var} only part of that dimension is read, and TVM's inverse of such an index may "
            f"miss elements; compute {name} at a loop where the whole dimension or one element is read",
            eq.lhs.span)
    for l in path:
        if l.kind in ("P", "B") and not boxes_disjoint(reads, l, path):
            return Race(
                f"iterations of {A.KIND_WORDS[l.kind]} loop {l.var} would compute the same elements",
                f"the elements of {tensor} read by different iterations of {A.KIND_WORDS[l.kind]} loop {l.var} overlap, "
                f"so {name} moved inside it would write them from several iterations at once (a race)", l.span)
    return None


def _shared_memory_refusal(ctx: Context, info: EquationInfo, path) -> NotApplicable | None:
    """A thread-bound loop down to the site over which TVM computes the
    temporary for all the threads that share its memory."""
    tensor = ctx.analysis.tensors[info.equation.lhs.tensor]
    relaxed = next((l for l in path if l.kind == "B" and thread_relaxes(tensor.scope, l.var)), None)
    if relaxed is not None:
        where = {"g": "global", "s": "shared"}[tensor.scope]
        return ThreadLoop(
            f"{tensor.name} is in {where} memory, under thread-bound loop {relaxed.var}",
            f"under thread-bound loop {relaxed.var}, TVM computes a {where} temporary for all the threads that "
            f"share it, so every thread would compute all of {tensor.name} (a race); put {tensor.name} in local "
            f"memory first (set_scope)", relaxed.span)
    return None


# ------------------------------------------------------------- regions


def read_region(ctx: Context, site: LoopSite, readers: list[EquationInfo], tensor: str) -> list[Interval] | str:
    """Per dimension, the box of elements of ``tensor`` the readers read in
    one iteration of the loop (loops inside it vary), or why it is not one."""
    flow = dataflow(ctx)
    depth = site.depth + 1
    scope = ctx.analysis.tensors[tensor].scope
    reads = ((access, relaxed_ranges(reader.loops, depth, scope))
             for reader in readers for access in flow.reads_of(reader.index, tensor))
    return box_union(reads, f"another read of {tensor}", rank=len(ctx.analysis.tensors[tensor].shape))


def boxes_disjoint(reads: list[tuple[A.Access, tuple[A.Loop, ...]]], loop: A.Loop, path) -> bool:
    """Whether different iterations of ``loop`` touch disjoint boxes of the
    accesses (each given with the loops around it)."""
    return bool(disjoint_dims(reads, loop, path))

"""Move an equation under a loop of the equations that compute what it reads.

The reverse of ``compute_at``: the consumer's nest disappears from where it
was and is regenerated at the end of the chosen loop of its producers, over
just the elements one iteration of that loop has finished. An epilogue (a
bias, an activation, a normalisation) then runs while the values it reads
are still in cache, and an output can be moved too. The loops the step
creates are serial (annotate them again if needed) and take the
consumer's loop names where they run over the same range (TVM calls them
``ax0``, ``ax1``...).

It requires:

- a consumer that is the only equation writing its tensor;
- a consumer that is either a plain assignment indexed by all its loops or a
  reduction with an implied initial value;
- a consumer without a guard;
- a consumer reading at least one computed tensor;
- each computed tensor read always at the same element and indexed by
  distinct loop variables (several variables per dimension only when they
  are all of its loops, and the loop finishes that whole dimension or one
  element of it);
- a program without write-after-read dependences whose reads TVM can see
  covered by earlier writes (TVM's "stage pipeline");
- a loop that does not already enclose the consumer and encloses every
  equation computing what it reads;
- no vectorized loop down to it;
- thread-bound loops down to it only where every thread axis of the kernel
  is among them;
- every loop down to the chosen one indexing what those equations write
  (otherwise the consumer would be recomputed on each of its iterations from
  unfinished values);
- parallel loops down to it that give each iteration its own elements of the
  consumer's tensor.

Example: apply the epilogue to each element right after it is computed

    step: {"block": "Y", "at": {"block": "C", "loop": "j"}}

    before:
    L^{32}_{i}
      L^{24}_{j}
        L^{64}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{32}_{i}
      L^{24}_{j} [
        $0Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

    after:
    L^{32}_{i}
      L^{24}_{j} [
        L^{64}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];
        Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

Example: normalise each row once its sum is known

    step: {"block": "Y", "at": {"block": "S", "loop": "i"}}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        S_{i} += X_{i,j};
      ];

    L^{64}_{i}
      L^{32}_{j} [
        $0Y_{i,j} = X_{i,j}/S_{i};
      ];

    after:
    L^{64}_{i} [
      L^{32}_{j} [
        S_{i} += X_{i,j};
      ];
      L^{32}_{j} [
        Y_{i,j} = X_{i,j}/S_{i};
      ];
    ];

Example: inside the reduction loop, the sum is not finished

    step: {"block": "Y", "at": {"block": "S", "loop": "j"}}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        S_{i} += X_{i,j};
      ];

    L^{64}_{i}
      L^{32}_{j} [
        $0Y_{i,j} = X_{i,j}/S_{i};
      ];

    refused: reverse_compute_at-recomputes
"""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib.producer_consumer import (Interval, attach_candidates, attach_check, attach_tidy, box_union, complete_refusal, dataflow, disjoint_dims, encloses_refusal, kernel_loop_refusal, region_misfit, stage_pipeline_refusal, write_index_problem)
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, tvm_loop
from leir.printer import access_text, equation_text

ID = "reverse_compute_at"
GROUP = "memory"
TITLE = "Compute at a producer's loop"
#: Step-TP has no strategy for this; TVM's primitive names it.
STEPTP = "reverse_compute_at"



class NotComplete(NotApplicable):
    """The consumer is not the only equation writing its tensor, or is neither a plain
    assignment indexed by all its loops nor a reduction with an implied initial value."""

    code = "reverse_compute_at-not-complete"


class Guarded(NotApplicable):
    """The consumer has a guard: TVM rebuilds a moved equation's loops from what is computed
    before."""

    code = "reverse_compute_at-guarded"


class NoProducer(NotApplicable):
    """The consumer reads no computed tensor: nothing ties it to another nest."""

    code = "reverse_compute_at-no-producer"


class IndexNotLoops(NotApplicable):
    """The consumer reads a computed tensor at an index TVM cannot invert (not always the same
    element, or not distinct loop variables)."""

    code = "reverse_compute_at-index-not-loops"


class NotStagePipeline(NotApplicable):
    """The program is not what TVM calls a stage pipeline: a tensor is written after an equation
    reads it, or a read is not covered by earlier writes."""

    code = "reverse_compute_at-not-stage-pipeline"


class LoopEnclosesBlock(NotApplicable):
    """The loop already encloses the consumer."""

    code = "reverse_compute_at-loop-encloses-block"


class ProducerOutside(NotApplicable):
    """An equation computing what the consumer reads is outside the loop."""

    code = "reverse_compute_at-producer-outside"


class VectorLoop(NotApplicable):
    """A loop down to the chosen one is vectorized: TVM vectorizes only the innermost loop."""

    code = "reverse_compute_at-vector-loop"


class ThreadLoop(NotApplicable):
    """The thread-bound loops down to the chosen one miss a thread axis of the kernel."""

    code = "reverse_compute_at-thread-loop"


class Recomputes(NotApplicable):
    """A loop down to the chosen one does not index what the producers write: the consumer would
    be recomputed on each of its iterations from unfinished values."""

    code = "reverse_compute_at-recomputes"


class IrregularWrite(NotApplicable):
    """What an iteration of the loop computes of a tensor the consumer reads is not one box."""

    code = "reverse_compute_at-irregular-write"


class Race(NotApplicable):
    """Iterations of a parallel loop down to the chosen one would write the same elements of the
    consumer's tensor."""

    code = "reverse_compute_at-race"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return attach_candidates(ctx, at, ID, _consumer_refusal, _loop_refusal,
                             partner=lambda flow, info: flow.producers(info)[-1])


def check(ctx: Context, args: dict) -> None:
    attach_check(ctx, args, ID, _consumer_refusal, _loop_refusal)


def schedule(sch, ctx: Context, args: dict) -> None:
    at = args["at"]
    sch.reverse_compute_at(sch.get_sblock(args["block"]), tvm_loop(sch, at["block"], at["loop"]))


def tidy(ctx: Context, args: dict, program: A.Program) -> A.Program:
    """The moved consumer's new loops named after its own loops where they
    run over the same range."""
    return attach_tidy(ctx, args, program, ID)


def reverse_compute_at(program, block: str, at: dict):
    """Apply a reverse_compute_at (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "at": dict(at)}))


# ------------------------------------------------------------- refusals


def _consumer_refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    """What rules the consumer out wherever it would go."""
    eq = info.equation
    name = ctx.block_names[info.index]
    flow = dataflow(ctx)
    refusal = complete_refusal(ctx, info, NotComplete, "moved under another loop")
    if refusal is not None:
        return refusal
    if eq.predicate is not None:
        return Guarded(
            f"{name} has a guard",
            f"{equation_text(eq)} has a guard: TVM rebuilds the loops of a moved equation from what is computed before "
            f"it and drops the guard", eq.span)
    computed = _computed_reads(ctx, info)
    if not computed:
        return NoProducer(
            f"{name} reads no computed tensor",
            f"{equation_text(eq)} reads only inputs, so no loop computes what it needs; nothing ties it to another nest",
            eq.span)
    for tensor in computed:
        reads = flow.reads_of(info.index, tensor)
        problem = _read_problem(reads, info)
        if problem is not None:
            return IndexNotLoops(
                f"{name} reads {tensor} at an index TVM cannot invert",
                f"{equation_text(eq)}: {problem}; TVM finds the consumer's loops from the elements it reads", reads[0].span)
    return stage_pipeline_refusal(ctx, NotStagePipeline, "moves equations")


def _computed_reads(ctx: Context, info: EquationInfo) -> list[str]:
    """Tensors the equation reads that an earlier equation writes."""
    flow = dataflow(ctx)
    return [t for t in flow.tensors_read(info.index) if any(k < info.index for k in flow.writers.get(t, ()))]


def _read_problem(reads: list[A.Access], info: EquationInfo) -> str | None:
    first = reads[0]
    other = next((a for a in reads if a != first), None)
    if other is not None:
        return f"it reads both {access_text(first)} and {access_text(other)}"
    indices = first.indices or ()
    if all(isinstance(i, A.Var) for i in indices) and len({i.name for i in indices}) == len(indices):
        return None
    # Several variables in a dimension: TVM inverts the index only when it
    # is an exact map of all the consumer's loops.
    problem = write_index_problem(first, info.loops)
    if problem is not None:
        return problem.replace("index", f"index of {access_text(first)}", 1)
    used = affine.index_vars(first)
    missing = [l.var for l in info.loops if l.var not in used and l.extent > 1]
    if missing:
        return (f"{access_text(first)} has an index made of several loop variables but does not use loop "
                f"{missing[0]}")
    return None


def _loop_refusal(ctx: Context, info: EquationInfo, site: LoopSite) -> NotApplicable | None:
    """What rules out moving the consumer under this loop."""
    flow = dataflow(ctx)
    eq = info.equation
    loop = site.loop
    name = ctx.block_names[info.index]
    refusal = encloses_refusal(ctx, info, site, LoopEnclosesBlock, "the equations that compute what it reads")
    if refusal is not None:
        return refusal
    producers = flow.producers(info)
    outside = next((p for p in producers if p.index not in site.equations), None)
    if outside is not None:
        return ProducerOutside(
            f"{ctx.block_names[outside.index]} is not inside loop {loop.var}",
            f"every equation computing what {name} reads must be inside loop {loop.var}, where {name} will be "
            f"computed; {equation_text(outside.equation)} is not", outside.equation.span)
    path = site.outer + (loop,)
    refusal = kernel_loop_refusal(ctx, name, site, path, VectorLoop, ThreadLoop)
    if refusal is not None:
        return refusal
    for l in path:
        unfinished = next((p for p in producers if l.var not in affine.index_vars(p.equation.lhs)), None)
        if unfinished is not None:
            what = ("a reduction loop of" if l.var in unfinished.reduce_axes else "a loop that does not index")
            return Recomputes(
                f"{name} would be recomputed for every {l.var}",
                f"loop {l.var} is {what} {equation_text(unfinished.equation)}: inside it, what {name} reads is not "
                f"finished, and {name} would be computed again on every iteration of {l.var}",
                unfinished.equation.span)
    depth = site.depth + 1
    for tensor in _computed_reads(ctx, info):
        writers = [p for p in producers if p.equation.lhs.tensor == tensor]
        region = _write_region(writers, depth)
        if isinstance(region, str):
            return IrregularWrite(
                f"what loop {loop.var} computes of {tensor} is not a box",
                f"TVM computes, per iteration of loop {loop.var}, the box of elements written: {region}", loop.span)
        read = flow.reads_of(info.index, tensor)[0]
        if region_misfit(read, info.loops, region, ctx.analysis.tensors[tensor].shape) is not None:
            return IrregularWrite(
                f"{name} reads {tensor} through a split index, and loop {loop.var} computes part of it",
                f"{access_text(read)} combines several loop variables in one dimension, of which one iteration of "
                f"loop {loop.var} computes only part; TVM's inverse of such an index may miss elements",
                read.span)
    for l in path:
        if l.kind in ("P", "B") and not _own_elements(ctx, info, producers, l, path):
            return Race(
                f"iterations of {A.KIND_WORDS[l.kind]} loop {l.var} would write the same elements of {eq.lhs.tensor}",
                f"inside {A.KIND_WORDS[l.kind]} loop {l.var}, each iteration would compute {name} for the elements it "
                f"reads, which overlap between iterations or do not set which element of {eq.lhs.tensor} is "
                f"written (a race)", l.span)
    return None


def _write_region(writers: list[EquationInfo], depth: int) -> list[Interval] | str:
    """Per dimension, the box of elements the writers write in one
    iteration of the loop at ``depth`` (loops inside it vary), or why it is
    not one."""
    return box_union(((w.equation.lhs, affine.loop_ranges(w.loops[depth:])) for w in writers), "another write")


def _own_elements(ctx: Context, info: EquationInfo, producers: list[EquationInfo], loop: A.Loop, path) -> bool:
    """Whether each iteration of a parallel ``loop`` computes the consumer
    for its own elements: some computed tensor is written in disjoint
    intervals per iteration in a dimension that the consumer reads through
    one of its own spatial loops."""
    flow = dataflow(ctx)
    for tensor in _computed_reads(ctx, info):
        writers = [(p.equation.lhs, p.loops) for p in producers if p.equation.lhs.tensor == tensor]
        read = flow.reads_of(info.index, tensor)[0]
        for d in disjoint_dims(writers, loop, path):
            index = read.indices[d]
            if isinstance(index, A.Var) and index.name in info.spatial:
                return True
    return False

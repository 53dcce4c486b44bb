"""Fold an elementwise equation into the equation that computes what it reads.

The reverse of ``compute_inline``: the consumer disappears from where it
was, and the producer writes the consumer's tensor directly, computing the
consumer's expression on the value it used to store. The intermediate
tensor is never stored (its declaration goes too). This is how an
epilogue (a bias, an activation) joins the elementwise computation before
it when the consumer's result, not the producer's, is the one that stays.

It requires:

- a consumer that is the only equation writing its tensor;
- a consumer that is a plain assignment (not a reduction) indexed by all its
  loops;
- a consumer without a guard;
- a consumer that reads exactly one computed tensor, always at the same
  element, indexed by its own loop variables (one per dimension, each loop
  once);
- that tensor a temporary read by no other equation;
- that tensor written by one equation only, a plain assignment indexed by
  all its loops without a guard;
- each dimension of that write an index that runs densely over at least the
  consumer's range;
- a program without write-after-read dependences whose reads TVM can see
  covered by earlier writes (TVM's "stage pipeline").

Example: the activation is applied as the product is stored

    step: {"block": "Y"}

    before:
    tmp T: f32[32,24]

    L^{32}_{i}
      L^{24}_{j} [
        T_{i,j} = X_{i,j}*s_{j} + b_{j};
      ];

    L^{32}_{i}
      L^{24}_{j} [
        $0Y_{i,j} = max(T_{i,j}, 0.0);
      ];

    after:
    L^{32}_{i}
      L^{24}_{j} [
        Y_{i,j} = max(X_{i,j}*s_{j} + b_{j}, 0.0);
      ];

Example: a reduction's result is only known after its loop

    step: {"block": "Y"}

    before:
    L^{32}_{i}
      L^{24}_{j}
        L^{64}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{32}_{i}
      L^{24}_{j} [
        $0Y_{i,j} = max(C_{i,j}, 0.0);
      ];

    refused: reverse_compute_inline-producer-not-complete
"""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib.producer_consumer import (check_block, complete_refusal, dataflow, stage_pipeline_refusal, write_index_problem)
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, Step
from leir.printer import access_text, equation_text

ID = "reverse_compute_inline"
GROUP = "memory"
TITLE = "Inline into the producer"
#: Step-TP's compute_inline covers inlining in both directions.
STEPTP = "compute_inline"


class Reduction(NotApplicable):
    """The consumer is a reduction: only a plain assignment is inlined."""

    code = "reverse_compute_inline-reduction"


class NotComplete(NotApplicable):
    """The consumer is not the only equation writing its tensor, or is not a plain assignment
    indexed by all its loops."""

    code = "reverse_compute_inline-not-complete"


class Guarded(NotApplicable):
    """The consumer has a guard: TVM inlines only an equation computed at every iteration."""

    code = "reverse_compute_inline-guarded"


class NoProducer(NotApplicable):
    """The consumer reads no computed tensor: there is no equation to fold it into."""

    code = "reverse_compute_inline-no-producer"


class ReadsSeveral(NotApplicable):
    """The consumer reads more than one computed tensor."""

    code = "reverse_compute_inline-reads-several"


class IndexNotLoops(NotApplicable):
    """The consumer does not read the computed tensor at the same element, at its own loop
    variables (one per dimension, each loop once)."""

    code = "reverse_compute_inline-index-not-loops"


class OutputTensor(NotApplicable):
    """The tensor the consumer reads is an output: the equation computing it must keep storing
    it."""

    code = "reverse_compute_inline-output"


class OtherReaders(NotApplicable):
    """Another equation reads the tensor the consumer reads."""

    code = "reverse_compute_inline-other-readers"


class ProducerNotComplete(NotApplicable):
    """The tensor the consumer reads is not written by one plain assignment indexed by all its
    loops (a reduction, for one)."""

    code = "reverse_compute_inline-producer-not-complete"


class ProducerGuarded(NotApplicable):
    """The equation computing the tensor the consumer reads has a guard."""

    code = "reverse_compute_inline-producer-guarded"


class NotCovered(NotApplicable):
    """The write of the tensor the consumer reads does not run densely over the consumer's range
    in every dimension."""

    code = "reverse_compute_inline-not-covered"


class NotStagePipeline(NotApplicable):
    """The program is not what TVM calls a stage pipeline: a tensor is written after an equation
    reads it, or a read is not covered by earlier writes."""

    code = "reverse_compute_inline-not-stage-pipeline"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for info in ctx.equations_at(at):
        if _refusal(ctx, info) is not None:
            continue
        name = ctx.block_names[info.index]
        producer = ctx.block_names[_producer(ctx, info, _computed_reads(ctx, info)[0]).index]
        out.append(Candidate(Step(ID, {"block": name}), f"Inline {name} into {producer}", info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    check_block(ctx, args, ID, _refusal)


def schedule(sch, ctx: Context, args: dict) -> None:
    sch.reverse_compute_inline(sch.get_sblock(args["block"]))


def reverse_compute_inline(program, block: str):
    """Apply a reverse_compute_inline (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block}))


def _computed_reads(ctx: Context, info: EquationInfo) -> list[str]:
    """What the equation reads that some equation writes (TVM counts a
    tensor as computed whoever writes it, before or after)."""
    flow = dataflow(ctx)
    return [t for t in flow.tensors_read(info.index) if t in flow.writers]


def _producer(ctx: Context, info: EquationInfo, tensor: str) -> EquationInfo:
    writers = dataflow(ctx).writers[tensor]
    return ctx.analysis.equations[writers[0]]


def _refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    flow = dataflow(ctx)
    eq = info.equation
    name = ctx.block_names[info.index]
    if info.kind == "reduce":
        return Reduction(
            f"{name} is a reduction",
            f"{equation_text(eq)} accumulates over loop {info.reduce_axes[0] if info.reduce_axes else '...'}: the "
            f"equation before it computes each element once, so it has nowhere to put the accumulation", eq.span)
    refusal = complete_refusal(ctx, info, NotComplete, "inlined", allow_reduction=False)
    if refusal is not None:
        return refusal
    if eq.predicate is not None:
        return Guarded(
            f"{name} has a guard",
            f"{equation_text(eq)} has a guard, and TVM inlines only an equation computed at every iteration", eq.span)
    computed = _computed_reads(ctx, info)
    if not computed:
        return NoProducer(f"{name} reads no computed tensor",
                          f"{equation_text(eq)} reads only inputs: there is no equation to fold it into", eq.span)
    if len(computed) > 1:
        return ReadsSeveral(
            f"{name} reads {computed[0]} and {computed[1]}",
            f"{equation_text(eq)} reads {' and '.join(computed)}, all computed by the program: it can be folded into the "
            f"equation computing one of them only if it reads nothing else computed", eq.span)
    tensor = computed[0]
    reads = flow.reads_of(info.index, tensor)
    problem = _read_problem(reads, info)
    if problem is not None:
        return IndexNotLoops(
            f"{name} does not read {tensor} at its own loop variables",
            f"{equation_text(eq)}: {problem}; folded into the producer, the consumer's loop variables are found from the "
            f"element it reads", reads[0].span)
    producer = _producer(ctx, info, tensor)
    if ctx.analysis.tensors[tensor].role != "tmp":
        return OutputTensor(
            f"{tensor} is an output",
            f"{tensor} is an output of the program: the equation computing it must keep storing it, so {name} "
            f"cannot take its place", producer.equation.span)
    other = _other_reader(ctx, info, tensor)
    if other is not None:
        reader = ctx.analysis.equations[other].equation
        return OtherReaders(
            f"{ctx.block_names[other]} also reads {tensor}",
            f"{equation_text(reader)} reads {tensor} too; folding {name} into the equation computing {tensor} would stop "
            f"storing it", reader.span)
    if producer.kind == "reduce":
        return ProducerNotComplete(
            f"{tensor} is computed by a reduction",
            f"{equation_text(producer.equation)} accumulates {tensor}: its value is final only after the loop, so "
            f"{name} cannot be applied as it is stored; move {name} under its loops instead (reverse_compute_at)",
            producer.equation.span)
    refusal = complete_refusal(ctx, producer, ProducerNotComplete, "inlined into", allow_reduction=False)
    if refusal is not None:
        return refusal
    if producer.equation.predicate is not None:
        return ProducerGuarded(
            f"{tensor} is written under a guard",
            f"{equation_text(producer.equation)} has a guard, which TVM would replace by the consumer's bounds",
            producer.equation.span)
    uncovered = _coverage_problem(info, producer, reads[0])
    if uncovered is not None:
        return NotCovered(
            f"{tensor} is not written over all of {name}'s loops",
            f"{equation_text(producer.equation)} {uncovered}; {name} would not be computed everywhere",
            producer.equation.lhs.span)
    return stage_pipeline_refusal(ctx, NotStagePipeline, "inlines")


def _other_reader(ctx: Context, info: EquationInfo, tensor: str) -> int | None:
    flow = dataflow(ctx)
    for k in range(len(ctx.analysis.equations)):
        if k != info.index and (tensor in flow.tensors_read(k) or k in flow.guard_reads.get(tensor, ())):
            return k
    return None


def _read_problem(reads: list[A.Access], info: EquationInfo) -> str | None:
    first = reads[0]
    other = next((a for a in reads if a != first), None)
    if other is not None:
        return f"it reads both {access_text(first)} and {access_text(other)}"
    indices = first.indices or ()
    names = [i.name for i in indices if isinstance(i, A.Var)]
    if len(names) != len(indices) or len(set(names)) != len(names):
        return f"{access_text(first)} is not indexed by one loop variable per dimension"
    missing = [l.var for l in info.loops if l.var not in names]
    if missing:
        return f"{access_text(first)} does not use loop {missing[0]}"
    return None


def _coverage_problem(consumer: EquationInfo, producer: EquationInfo, read: A.Access) -> str | None:
    """Whether the producer's write, dimension by dimension, runs densely
    over at least the range of the consumer loop reading that dimension."""
    lhs = producer.equation.lhs
    problem = write_index_problem(lhs, producer.loops)
    if problem is not None:
        return f"writes {access_text(lhs)}: {problem}"
    ranges = affine.loop_ranges(producer.loops)
    consumer_ranges = affine.loop_ranges(consumer.loops)
    for d, (written, index) in enumerate(zip(lhs.indices or (), read.indices or ())):
        lo, hi = affine.linearize(written).bounds(ranges)
        clo, chi = consumer_ranges[index.name]
        if lo > clo or hi < chi:
            return (f"writes index {d} of {lhs.tensor} over {lo}..{hi}, but the consumer reads it over {clo}..{chi} "
                    f"(loop {index.name})")
    return None

"""Substitute an elementwise temporary into the equations that read it.

The equation that computes the temporary disappears, and every read of
the temporary becomes the expression it was computed from, with the
reader's indices: the values are computed where they are used and never
stored. This saves a pass over memory and the temporary itself (its
declaration goes too); where a reader reads an element several times
(a convolution window), the expression is evaluated that many times.

It requires:

- a temporary (not an output) written by one equation only;
- that equation a plain assignment (not a reduction) indexed by all its
  loops;
- that equation without a guard;
- each dimension of its write indexed by its own loop variable;
- a program without write-after-read dependences whose reads TVM can see
  covered by earlier writes (TVM's "stage pipeline"), so that what the
  expression reads is the same where it is substituted.

Example: an activation computed inside the matrix product that reads it

    step: {"block": "A"}

    before:
    tmp A: f32[32,64]

    L^{32}_{i}
      L^{64}_{k} [
        $0A_{i,k} = max(X_{i,k}, 0.0);
      ];

    L^{32}_{i}
      L^{24}_{j}
        L^{64}_{k} [
          C_{i,j} += A_{i,k}*W_{k,j};
        ];

    after:
    L^{32}_{i}
      L^{24}_{j}
        L^{64}_{k} [
          C_{i,j} += max(X_{i,k}, 0.0)*W_{k,j};
        ];

Example: a transposed read takes the reader's indices

    step: {"block": "T"}

    before:
    L^{16}_{i}
      L^{8}_{j} [
        $0T_{j,i} = X_{i,j}*2.0;
      ];

    L^{8}_{a}
      L^{16}_{b} [
        Y_{a,b} = T_{a,b} + 1.0;
      ];

    after:
    L^{8}_{a}
      L^{16}_{b} [
        Y_{a,b} = X_{b,a}*2.0 + 1.0;
      ];

Example: a reduction has no expression to substitute

    step: {"block": "S"}

    before:
    L^{64}_{i}
      L^{32}_{j} [
        $0S_{i} += X_{i,j};
      ];

    L^{64}_{i} [
      Y_{i} = S_{i}*2.0;
    ];

    refused: compute_inline-reduction
"""

from __future__ import annotations

from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib.producer_consumer import check_block, complete_refusal, dataflow, stage_pipeline_refusal
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, Step
from leir.printer import equation_text

ID = "compute_inline"
GROUP = "memory"
TITLE = "Inline a computation"
STEPTP = "compute_inline"


class OutputTensor(NotApplicable):
    """The equation writes an output: only a temporary is inlined."""

    code = "compute_inline-output"


class Reduction(NotApplicable):
    """The equation is a reduction: only a plain assignment is inlined."""

    code = "compute_inline-reduction"


class NotComplete(NotApplicable):
    """The equation is not the only one writing its tensor, or is not a plain assignment indexed
    by all its loops."""

    code = "compute_inline-not-complete"


class Guarded(NotApplicable):
    """The equation has a guard: inlined, the expression would be used where the guard said no."""

    code = "compute_inline-guarded"


class IndexNotLoops(NotApplicable):
    """A dimension of the write is not indexed by a loop variable of its own."""

    code = "compute_inline-index-not-loops"


class NotStagePipeline(NotApplicable):
    """The program is not what TVM calls a stage pipeline: a tensor is written after an equation
    reads it, or a read is not covered by earlier writes."""

    code = "compute_inline-not-stage-pipeline"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    flow = dataflow(ctx)
    for info in ctx.equations_at(at):
        if _refusal(ctx, info) is not None:
            continue
        name = ctx.block_names[info.index]
        tensor = info.equation.lhs.tensor
        indices = [r.index for r in flow.later_readers(info)] + flow.guard_reads.get(tensor, [])
        readers = ", ".join(ctx.block_names[k] for k in sorted(set(indices)))
        title = f"Inline {tensor} into {readers}"
        out.append(Candidate(Step(ID, {"block": name}), title, info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    check_block(ctx, args, ID, _refusal)


def schedule(sch, ctx: Context, args: dict) -> None:
    sch.compute_inline(sch.get_sblock(args["block"]))


def compute_inline(program, block: str):
    """Apply a compute_inline (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block}))


def _refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    eq = info.equation
    tensor = eq.lhs.tensor
    name = ctx.block_names[info.index]
    if ctx.analysis.tensors[tensor].role != "tmp":
        return OutputTensor(
            f"{tensor} is an output",
            f"{equation_text(eq)} writes {tensor}, an output of the program: it must stay stored; only a temporary is "
            f"inlined", eq.span)
    if info.kind == "reduce":
        return Reduction(
            f"{name} is a reduction",
            f"{equation_text(eq)} accumulates over loop {info.reduce_axes[0] if info.reduce_axes else '...'}: its value "
            f"exists only once the loop is done, so there is no expression to put in its place; move it next to "
            f"its readers instead (compute_at)", eq.span)
    refusal = complete_refusal(ctx, info, NotComplete, "inlined", allow_reduction=False)
    if refusal is not None:
        return refusal
    if eq.predicate is not None:
        return Guarded(
            f"{tensor} is written under a guard",
            f"{equation_text(eq)} has a guard; inlined, the expression would be used where the guard said {tensor} is "
            f"not written", eq.span)
    indices = eq.lhs.indices or ()
    names = [i.name for i in indices if isinstance(i, A.Var)]
    if len(names) != len(indices) or len(set(names)) != len(names):
        return IndexNotLoops(
            f"{tensor} is not indexed by its loop variables",
            f"{equation_text(eq)}: every index of {tensor} must be a loop variable of its own, so that a read "
            f"{tensor}_{{...}} says which iteration computed it", eq.lhs.span)
    return stage_pipeline_refusal(ctx, NotStagePipeline, "inlines")

"""Run the iterations of a loop in parallel on the CPU's cores.

A parallel loop (``P``) splits its iterations among threads; the outermost
data-parallel loop of a nest is the usual choice, with enough iterations to
keep every core busy and enough work in each to pay for starting them.

It requires:

- a serial (L) loop of at least 2 iterations;
- no parallel loop around it or inside it (TVM cannot nest parallel
  regions);
- no vectorized loop around it;
- no thread-bound loop around it or inside it (a GPU kernel binds threads
  instead);
- a loop that is a spatial axis of every equation under it (not a reduction
  axis: iterations would add into the same element at once);
- equations under it that TVM can schedule (each computes a fresh value or a
  reduction with its implied initial value, is the only writer of its tensor
  under the loop, and a reduction's guard bounds single loop variables);
- no dependence between iterations (no iteration reads or writes an element
  that another writes).

Example: rows in parallel

    step: {"block": "Y", "loop": "i"}

    before:
    L^{128}_{i}$0
      L^{96}_{j} [
        Y_{i,j} = X_{i,j}*2.0;
      ];

    after:
    P^{128}_{i}
      L^{96}_{j} [
        Y_{i,j} = X_{i,j}*2.0;
      ];

Example: a reduction in parallel over its rows

    step: {"block": "S", "loop": "i"}

    before:
    L^{64}_{i}$0
      L^{100}_{j} [
        S_{i} += X_{i,j};
      ];

    after:
    P^{64}_{i}
      L^{100}_{j} [
        S_{i} += X_{i,j};
      ];

Example: not over a reduction axis

    step: {"block": "S", "loop": "j"}

    before:
    L^{64}_{i}
      L^{100}_{j}$0 [
        S_{i} += X_{i,j};
      ];

    refused: parallelize-reduction-axis

Example: not when one iteration reads what another writes

    step: {"block": "T", "loop": "i"}

    before:
    L^{63}_{i}$0 [
      T_{i} = X_{i}*2.0;
      Y_{i} = T_{i+1} - T_{i};
    ];

    refused: parallelize-dependence
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg, tvm_loop
from leir.transforms.lib.loop_kinds import concurrency_problem, kind_loops

ID = "parallelize"
GROUP = "loop"
TITLE = "Parallelize loop"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_parallelization"


class LoopNotSerial(NotApplicable):
    """The loop is not serial (L): only a serial loop is parallelized."""

    code = "parallelize-loop-not-serial"


class LoopTooShort(NotApplicable):
    """The loop has fewer than 2 iterations: nothing to run in parallel."""

    code = "parallelize-loop-too-short"


class NestedParallel(NotApplicable):
    """A parallel loop is around or inside the loop: TVM cannot nest parallel regions."""

    code = "parallelize-nested-parallel"


class InsideVector(NotApplicable):
    """The loop is inside a vectorized loop: threads cannot start inside a vector operation."""

    code = "parallelize-inside-vector"


class InKernel(NotApplicable):
    """A thread-bound loop is around or inside the loop: a GPU kernel binds threads (``bind``)
    instead of running parallel loops."""

    code = "parallelize-in-kernel"


class ReductionAxis(NotApplicable):
    """The loop is a reduction axis of an equation under it: its iterations would add into the
    same element at once."""

    code = "parallelize-reduction-axis"


class NotCompactDataflow(NotApplicable):
    """An equation under the loop is not one TVM can schedule: each must compute a fresh value
    or a reduction with its implied initial value, be the only writer of its tensor under the
    loop (written before it is read there), and a reduction's guard must bound single loop
    variables."""

    code = "parallelize-not-compact-dataflow"


class Dependence(NotApplicable):
    """Iterations of the loop may depend on each other: one may read or write an element that
    another writes."""

    code = "parallelize-dependence"


# ------------------------------------------------------------- parallelize


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for site in ctx.loops_at(at):
        if _refusal(ctx, site) is None:
            title = f"Parallelize loop {site.loop.var} ({site.loop.extent} iterations)"
            out.append(Candidate(Step(ID, ctx.loop_ref(site)), title, site.loop.span))
    return out


_PROBLEMS = {"reduction-axis": ReductionAxis, "not-compact-dataflow": NotCompactDataflow, "dependence": Dependence}


def _refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    loop = site.loop
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(f"loop {loop.var} is {kind}",
                             f"only a serial (L) loop is parallelized; {loop.var} is already {kind}", loop.span)
    if loop.extent < 2:
        return LoopTooShort(f"loop {loop.var} has {loop.extent} iteration",
                            f"a loop of {loop.extent} iteration has nothing to run in parallel", loop.span)
    around, inside = kind_loops(site, ctx, "P")
    if around or inside:
        other = (around or inside)[0]
        where = "inside" if around else "around"
        return NestedParallel(f"parallel loop {other.var} is {where} loop {loop.var}",
                              f"loop {loop.var} has the parallel loop {other.var} {where} it: TVM cannot nest parallel "
                              f"loops; parallelize one of them (fuse them first to parallelize both)", loop.span)
    around, _ = kind_loops(site, ctx, "V")
    if around:
        return InsideVector(f"loop {loop.var} is inside vectorized loop {around[0].var}",
                            f"loop {loop.var} is inside the vectorized loop {around[0].var}: threads cannot start "
                            f"inside a vector operation", loop.span)
    around, inside = kind_loops(site, ctx, "B")
    if around or inside:
        other = (around or inside)[0]
        return InKernel(f"loop {loop.var} is in a GPU kernel",
                        f"loop {loop.var} is {'inside' if around else 'around'} the thread-bound loop {other.var}: "
                        f"a GPU kernel runs its iterations on threads by binding loops (bind), not with parallel "
                        f"loops", loop.span)
    problem = concurrency_problem(ctx, site, "in parallel")
    if problem is not None:
        return _PROBLEMS[problem.reason](problem.short, problem.detail, problem.span)
    return None


def check(ctx: Context, args: dict) -> None:
    refusal = _refusal(ctx, loop_arg(ctx, args, ID))
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    sch.parallel(tvm_loop(sch, args["block"], args["loop"]))


def parallelize(program, block: str, loop: str):
    """Apply a parallelization (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop}))

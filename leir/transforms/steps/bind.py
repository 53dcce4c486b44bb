"""Bind a loop to a GPU thread axis: each iteration runs on its own block or thread.

A loop bound to ``bx``/``by``/``bz`` (blockIdx) spreads its iterations over
the blocks of a kernel launch, one bound to ``tx``/``ty``/``tz``
(threadIdx) over the threads of a block; the loop's variable becomes the
axis name (``B^{128}_{bx}``). The usual shape is a block axis on an outer
loop and a thread axis on an inner one, with consecutive threads (``tx``)
touching consecutive elements so that their loads coalesce.

It requires:

- a serial (L) loop starting at 0;
- a loop not inside a parallel or vectorized loop, with no parallel loop
  inside it;
- no vectorized loop inside it other than of 2 or 4 lanes (CUDA's vector
  types);
- an axis that no loop around it or inside it is bound to, and that no
  tensor or other loop is named after;
- a block axis outside every thread axis;
- CUDA's limits (threadIdx.x and .y up to 1024, .z up to 64, blockIdx.x up
  to 2^31-1, .y and .z up to 65535, at most 1024 threads per block);
- one extent per axis in the kernel;
- no reduction left outside a loop of some axis the kernel uses (every
  thread would accumulate into it);
- a loop that is a spatial axis of every equation under it;
- equations under it that TVM can schedule (each computes a fresh value or a
  reduction with its implied initial value, is the only writer of its tensor
  under the loop, and a reduction's guard bounds single loop variables);
- no dependence between iterations.

On a CPU, thread-bound loops run serially (leir.bridge.run).

Example: one block per row, one thread per column

    step: {"block": "Y", "loop": "j", "axis": "tx"}

    before:
    B^{128}_{bx}
      L^{96}_{j}$0 [
        Y_{bx,j} = X_{bx,j}*2.0;
      ];

    after:
    B^{128}_{bx}
      B^{96}_{tx} [
        Y_{bx,tx} = X_{bx,tx}*2.0;
      ];

Example: the rows of a reduction over the blocks

    step: {"block": "S", "loop": "i", "axis": "bx"}

    before:
    L^{64}_{i}$0
      L^{100}_{j} [
        S_{i} += X_{i,j};
      ];

    after:
    B^{64}_{bx}
      L^{100}_{j} [
        S_{bx} += X_{bx,j};
      ];

Example: too many threads in a block

    step: {"block": "C", "loop": "j", "axis": "ty"}

    before:
    B^{512}_{tx}
      L^{4}_{j}$0 [
        C_{tx,j} = X_{tx,j} + 1.0;
      ];

    refused: bind-threads-per-block
"""

from __future__ import annotations

from leir import ast as A
from leir.semantics import MAX_THREADS_PER_BLOCK, THREAD_AXIS_LIMITS
from leir.transforms.applying import apply_transform
from leir.transforms.base import BadStep, Candidate, Context, LoopSite, NotApplicable, Step, loop_arg, str_arg, tvm_loop
from leir.transforms.lib.loop_kinds import GPU_LANES, concurrency_problem, kind_loops

ID = "bind"
GROUP = "loop"
TITLE = "Bind loop to a thread axis"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_binding"

#: Axes in the order they are offered: blocks first, x before y before z.
AXES = ("bx", "by", "bz", "tx", "ty", "tz")
_THREAD_AXES = ("tx", "ty", "tz")


class LoopNotSerial(NotApplicable):
    """The loop is not serial (L): only a serial loop is bound to a thread axis."""

    code = "bind-loop-not-serial"


class LoopStartNotZero(NotApplicable):
    """The loop does not start at 0: a thread axis counts from 0."""

    code = "bind-loop-start-not-zero"


class InParallel(NotApplicable):
    """The loop is inside a parallel or vectorized loop, or holds a parallel loop: a GPU kernel
    cannot start inside CPU threads or vectors, nor hold CPU threads."""

    code = "bind-in-parallel"


class WideVectorInside(NotApplicable):
    """A vectorized loop inside the loop has other than 2 or 4 lanes (CUDA's vector types)."""

    code = "bind-wide-vector-inside"


class AxisTaken(NotApplicable):
    """A loop around or inside the loop is already bound to the axis."""

    code = "bind-axis-taken"


class NameTaken(NotApplicable):
    """A tensor or another loop of the program is already named after the axis."""

    code = "bind-name-taken"


class AxisOrder(NotApplicable):
    """The block axis would be inside a thread axis: a block axis goes outside every thread axis."""

    code = "bind-axis-order"


class ExtentLimit(NotApplicable):
    """The loop has more iterations than CUDA allows for the axis (threadIdx.x and .y 1024, .z
    64, blockIdx.x 2^31-1, .y and .z 65535)."""

    code = "bind-extent-limit"


class ExtentMismatch(NotApplicable):
    """The kernel already binds the axis with another extent: a kernel launches each axis with
    one extent."""

    code = "bind-extent-mismatch"


class ThreadsPerBlock(NotApplicable):
    """Binding the loop would make more than 1024 threads per block (CUDA's limit)."""

    code = "bind-threads-per-block"


class ReplicatedReduction(NotApplicable):
    """A reduction would be left outside a loop of some axis the kernel uses: every thread would
    accumulate into it."""

    code = "bind-replicated-reduction"


class ReductionAxis(NotApplicable):
    """The loop is a reduction axis of an equation under it: its iterations would accumulate
    into the same element at once."""

    code = "bind-reduction-axis"


class NotCompactDataflow(NotApplicable):
    """An equation under the loop is not one TVM can schedule: each must compute a fresh value
    or a reduction with its implied initial value, be the only writer of its tensor under the
    loop (written before it is read there), and a reduction's guard must bound single loop
    variables."""

    code = "bind-not-compact-dataflow"


class Dependence(NotApplicable):
    """Iterations of the loop may depend on each other: one may read or write an element that
    another writes."""

    code = "bind-dependence"


_PROBLEMS = {"reduction-axis": ReductionAxis, "not-compact-dataflow": NotCompactDataflow, "dependence": Dependence}


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for site in ctx.loops_at(at):
        if _loop_refusal(ctx, site) is not None:
            continue
        for axis in AXES:
            if _axis_refusal(ctx, site, axis) is None:
                title = f"Bind loop {site.loop.var} to {A.THREAD_AXES[axis]} ({site.loop.extent} {_unit(axis)})"
                out.append(Candidate(Step(ID, {**ctx.loop_ref(site), "axis": axis}), title, site.loop.span))
    return out


def _unit(axis: str) -> str:
    return "threads" if axis in _THREAD_AXES else "blocks"


def _loop_refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    """What does not depend on the axis."""
    loop = site.loop
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(f"loop {loop.var} is {kind}",
                             f"only a serial (L) loop is bound to a thread axis; {loop.var} is already {kind}", loop.span)
    if loop.start != 0:
        return LoopStartNotZero(f"loop {loop.var} starts at {loop.start}",
                                f"a thread axis counts from 0; {loop.var} starts at {loop.start}", loop.span)
    around, inside = kind_loops(site, ctx, "PV")
    inside = [l for l in inside if l.kind == "P"]
    if around or inside:
        other = (around or inside)[0]
        return InParallel(f"loop {loop.var} is {'inside' if around else 'around'} {A.KIND_WORDS[other.kind]} loop {other.var}",
                          f"loop {loop.var} is {'inside' if around else 'around'} the {A.KIND_WORDS[other.kind]} loop "
                          f"{other.var}: a GPU kernel cannot {'start inside CPU threads or vectors' if around else 'hold CPU threads'}; "
                          f"make {other.var} serial first", loop.span)
    _, vectors = kind_loops(site, ctx, "V")
    wide = [l for l in vectors if l.extent not in GPU_LANES]
    if wide:
        return WideVectorInside(f"vectorized loop {wide[0].var} inside has {wide[0].extent} lanes",
                                f"loop {loop.var} contains the vectorized loop {wide[0].var} of {wide[0].extent} lanes, "
                                f"but inside a GPU kernel a vector has {' or '.join(map(str, GPU_LANES))} lanes (CUDA's "
                                f"vector types): split {wide[0].var} first", loop.span)
    problem = concurrency_problem(ctx, site, "as threads")
    if problem is not None:
        return _PROBLEMS[problem.reason](problem.short, problem.detail, problem.span)
    return None


def _axis_refusal(ctx: Context, site: LoopSite, axis: str) -> NotApplicable | None:
    loop = site.loop
    tag = A.THREAD_AXES[axis]
    around, inside = kind_loops(site, ctx, "B")
    same = [l for l in around + inside if l.var == axis]
    if same:
        where = "around" if any(same[0] is l for l in around) else "inside"
        return AxisTaken(f"{tag} is already bound {where} loop {loop.var}",
                         f"the loop {where} {loop.var} is already bound to {tag} ({same[0].var}); one loop of a nest "
                         f"binds each axis: choose another axis", loop.span)
    if axis in ctx.analysis.tensors or any(s.loop.var == axis and s.loop.kind != "B" for s in ctx.loop_sites):
        what = "a tensor" if axis in ctx.analysis.tensors else "a loop"
        return NameTaken(f"{what} is named {axis}",
                         f"a loop bound to {tag} is named {axis}, but {what} of the program already has that name: "
                         f"rename it first", loop.span)
    if axis not in _THREAD_AXES:
        threads = [l for l in around if l.var in _THREAD_AXES]
        if threads:
            return AxisOrder(f"block axis {tag} inside thread loop {threads[0].var}",
                             f"loop {loop.var} is inside the loop bound to {A.THREAD_AXES[threads[0].var]}: the blocks of "
                             f"a kernel contain its threads, so a block axis goes outside every thread axis", loop.span)
    else:
        blocks = [l for l in inside if l.var not in _THREAD_AXES]
        if blocks:
            return AxisOrder(f"thread axis {tag} around block loop {blocks[0].var}",
                             f"loop {loop.var} contains the loop bound to {A.THREAD_AXES[blocks[0].var]}: the blocks of "
                             f"a kernel contain its threads, so a thread axis goes inside every block axis", loop.span)
    limit = THREAD_AXIS_LIMITS[axis]
    if loop.extent > limit:
        return ExtentLimit(f"{tag} extent {loop.extent} exceeds CUDA's limit of {limit}",
                           f"loop {loop.var} has {loop.extent} iterations, more than CUDA allows for {tag} ({limit}): "
                           f"split it and bind the inner part", loop.span)
    return _kernel_refusal(ctx, site, axis)


def _kernel_refusal(ctx: Context, site: LoopSite, axis: str) -> NotApplicable | None:
    """The kernel the loop ends up in: one extent per axis, threads per
    block, and no reduction replicated over an axis."""
    loop = site.loop
    tag = A.THREAD_AXES[axis]
    root = next((s for s in ctx.loop_sites if s.loop.kind == "B" and any(s.loop is l for l in site.outer)), site)
    bound = [s.loop for s in ctx.loop_sites
             if s.loop.kind == "B" and (s is root or any(root.loop is l for l in s.outer))]
    for other in bound:
        if other.var == axis and other.extent != loop.extent:
            return ExtentMismatch(f"{tag} has extent {other.extent} elsewhere in the kernel",
                                  f"loop {loop.var} has {loop.extent} iterations, but the same kernel already binds "
                                  f"{tag} with extent {other.extent}: a kernel launches each axis with one extent",
                                  loop.span)
    extent = {l.var: l.extent for l in bound}
    extent[axis] = loop.extent
    threads = 1
    for t in _THREAD_AXES:
        threads *= extent.get(t, 1)
    if threads > MAX_THREADS_PER_BLOCK:
        sizes = " x ".join(f"{A.THREAD_AXES[t]} {extent[t]}" for t in _THREAD_AXES if t in extent)
        return ThreadsPerBlock(f"{threads} threads per block",
                               f"binding loop {loop.var} to {tag} makes {threads} threads per block ({sizes}), more "
                               f"than CUDA's limit of {MAX_THREADS_PER_BLOCK}", loop.span)
    axes = set(extent)
    for k in root.equations:
        info = ctx.analysis.equations[k]
        if info.kind not in ("reduce", "update"):
            continue
        own = {l.var for l in info.loops if l.kind == "B"} | ({axis} if any(l is loop for l in info.loops) else set())
        missing = sorted(axes - own, key=AXES.index)
        if missing:
            lhs = info.equation.lhs.tensor
            return ReplicatedReduction(
                f"every {A.THREAD_AXES[missing[0]]} would accumulate into {lhs}",
                f"after binding loop {loop.var} to {tag}, the kernel runs on {', '.join(A.THREAD_AXES[a] for a in sorted(axes, key=AXES.index))}, "
                f"but the reduction into {lhs} is under no loop bound to {A.THREAD_AXES[missing[0]]}: every one of "
                f"those would accumulate into the same element at once", info.equation.span)
    return None


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    axis = str_arg(args, "axis", ID)
    if axis not in AXES:
        raise BadStep(f"bind: \"axis\" is one of {', '.join(AXES)}, got {axis!r}")
    refusal = _loop_refusal(ctx, site) or _axis_refusal(ctx, site, axis)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    sch.bind(tvm_loop(sch, args["block"], args["loop"]), A.THREAD_AXES[args["axis"]])


def bind(program, block: str, loop: str, axis: str):
    """Apply a binding (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop, "axis": axis}))

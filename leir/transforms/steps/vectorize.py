"""Run the iterations of an innermost loop as the lanes of vector instructions.

A vectorized loop (``V``) computes all its iterations with one instruction
per operation: SIMD on a CPU (AVX, NEON), vector loads and stores on a GPU.
It pays most on a loop that indexes the last dimension of what it reads and
writes, so that the lanes touch consecutive elements; split a long loop
first and vectorize the inner part.

It requires:

- a serial (L) loop;
- no loop inside it;
- no vectorized loop around it;
- 2 to 64 iterations (lanes), or 2 or 4 inside a GPU kernel (CUDA's vector
  types);
- a loop that is a spatial axis of every equation under it (TVM 0.27
  vectorizes a reduction axis into a wrong sum);
- equations under it that TVM can schedule (each computes a fresh value or a
  reduction with its implied initial value, is the only writer of its tensor
  under the loop, and a reduction's guard bounds single loop variables);
- no dependence between iterations (no lane reads or writes an element that
  another lane writes);
- no temporary used only under the loop (TVM 0.27 allocates it inside the
  vector loop, one lane wide: measured wrong).

Example: eight lanes along a row

    step: {"block": "Y", "loop": "ji"}

    before:
    L^{128}_{i}
      L^{12}_{jo}
        L^{8}_{ji}$0 [
          Y_{i,jo*8+ji} = exp(X_{i,jo*8+ji});
        ];

    after:
    L^{128}_{i}
      L^{12}_{jo}
        V^{8}_{ji} [
          Y_{i,jo*8+ji} = exp(X_{i,jo*8+ji});
        ];

Example: the spatial loop inside a reduction

    step: {"block": "C", "loop": "j"}

    before:
    L^{64}_{i}
      L^{32}_{k}
        L^{16}_{j}$0 [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{64}_{i}
      L^{32}_{k}
        V^{16}_{j} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

Example: not a reduction axis

    step: {"block": "S", "loop": "j"}

    before:
    L^{64}_{i}
      L^{16}_{j}$0 [
        S_{i} += X_{i,j};
      ];

    refused: vectorize-reduction-axis
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.lib import kind_change as K
from leir.transforms.base import Context, LoopSite, NotApplicable
from leir.transforms.lib.loop_kinds import GPU_LANES, concurrency_problem, kind_loops

ID = "vectorize"
GROUP = "loop"
TITLE = "Vectorize loop"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_vectorization"

#: Most lanes offered on a CPU: 64 f32 lanes are four AVX-512 registers,
#: and TVM's meta-schedule vectorizes at most 64 iterations
#: (``max_vectorize_extent``); longer loops are split first.
MAX_LANES = 64


class LoopNotSerial(NotApplicable):
    """The loop is not serial (L): only a serial loop is vectorized."""

    code = "vectorize-loop-not-serial"


class NotInnermost(NotApplicable):
    """The loop holds another loop: only an innermost loop is vectorized."""

    code = "vectorize-not-innermost"


class InsideVector(NotApplicable):
    """The loop is inside a vectorized loop: vectors do not nest."""

    code = "vectorize-inside-vector"


class WrongLanes(NotApplicable):
    """The loop has other than 2 to 64 iterations (lanes), or inside a GPU kernel other than 2
    or 4 (CUDA's vector types)."""

    code = "vectorize-wrong-lanes"


class TemporaryInside(NotApplicable):
    """A temporary is used only under the loop: TVM 0.27 allocates it inside the vector loop,
    one lane wide (measured wrong)."""

    code = "vectorize-temporary-inside"


class ReductionAxis(NotApplicable):
    """The loop is a reduction axis of an equation under it: TVM 0.27 vectorizes a reduction
    axis into a wrong sum."""

    code = "vectorize-reduction-axis"


class NotCompactDataflow(NotApplicable):
    """An equation under the loop is not one TVM can schedule: each must compute a fresh value
    or a reduction with its implied initial value, be the only writer of its tensor under the
    loop (written before it is read there), and a reduction's guard must bound single loop
    variables."""

    code = "vectorize-not-compact-dataflow"


class Dependence(NotApplicable):
    """Lanes of the loop may depend on each other: one may read or write an element that another
    lane writes."""

    code = "vectorize-dependence"


_PROBLEMS = {"reduction-axis": ReductionAxis, "not-compact-dataflow": NotCompactDataflow, "dependence": Dependence}


def _refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    loop = site.loop
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(f"loop {loop.var} is {kind}",
                             f"only a serial (L) loop is vectorized; {loop.var} is already {kind}", loop.span)
    _, inside = kind_loops(site, ctx, "LPVUB")
    if inside:
        inner = inside[0]
        return NotInnermost(f"loop {loop.var} contains loop {inner.var}",
                            f"only an innermost loop is vectorized: {loop.var} contains loop {inner.var}, which TVM "
                            f"would keep as a loop around one vector operation per iteration; vectorize {inner.var} "
                            f"or move {loop.var} inside it (reorder)", loop.span)
    around, _ = kind_loops(site, ctx, "V")
    if around:
        return InsideVector(f"loop {loop.var} is inside vectorized loop {around[0].var}",
                            f"loop {loop.var} is inside the vectorized loop {around[0].var}: vectors do not nest",
                            loop.span)
    in_kernel = any(l.kind == "B" for l in site.outer)
    if in_kernel and loop.extent not in GPU_LANES:
        return WrongLanes(f"{loop.extent} lanes in a GPU kernel",
                          f"loop {loop.var} has {loop.extent} iterations, but inside a GPU kernel a vector has "
                          f"{' or '.join(map(str, GPU_LANES))} lanes (CUDA's vector types); split {loop.var} by "
                          f"{GPU_LANES[-1]} first", loop.span)
    if not 2 <= loop.extent <= MAX_LANES:
        return WrongLanes(f"{loop.extent} lanes", f"loop {loop.var} has {loop.extent} iterations; a vector has 2 to "
                          f"{MAX_LANES} lanes" + (f": split {loop.var} by 8, 16 or 32 first" if loop.extent > MAX_LANES else ""),
                          loop.span)
    problem = concurrency_problem(ctx, site, "as vector lanes")
    if problem is not None:
        return _PROBLEMS[problem.reason](problem.short, problem.detail, problem.span)
    return _temporary_refusal(ctx, site)


def _temporary_refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    """A temporary used only under the loop: TVM 0.27 allocates it inside
    the vector loop, one element wide, and the lanes overwrite each other
    (measured: ``T_{i,j} = X_{i,j} + 1.0; Y_{i,j} = T_{i,j}*2.0`` under a
    ``V`` loop j computes wrong values)."""
    inside = set(site.equations)
    for k in site.equations:
        info = ctx.analysis.equations[k]
        tensor = ctx.analysis.tensors[info.equation.lhs.tensor]
        if tensor.role != "tmp":
            continue
        users = {o.index for o in ctx.analysis.equations
                 if o.equation.lhs.tensor == tensor.name
                 or any(isinstance(n, A.Access) and n.tensor == tensor.name for n in A.walk(o.equation))}
        if users <= inside:
            loop = site.loop
            return TemporaryInside(f"temporary {tensor.name} is used only inside loop {loop.var}",
                                   f"every use of the temporary {tensor.name} is inside loop {loop.var}: TVM 0.27 then "
                                   f"allocates {tensor.name} inside the vector loop, one element wide, and its lanes "
                                   f"overwrite each other; vectorize a loop around it, or compute {tensor.name} in a "
                                   f"nest of its own", loop.span)
    return None


candidates, check, schedule = K.entry_points(
    ID, _refusal, lambda loop: f"Vectorize loop {loop.var} ({loop.extent} lanes)", "vectorize")


def vectorize(program, block: str, loop: str):
    """Apply a vectorization (see the module docstring) and return the new program."""
    return K.apply_step(__name__, program, block, loop)

"""Fuse two directly nested loops into one loop over their product.

The fused loop ``ij`` runs ``i`` and ``j`` in the same order as before,
recovering them as ``ij//n`` and ``ij%n`` (``n`` the inner extent; loops
with longer names fuse into ``i_0_j_0``). One long loop gives a parallel
loop enough iterations to share among all cores, or a GPU enough threads
to bind to one axis, and it is how loops are regrouped after a split. The
order of iterations does not change, so neither does the result.

It requires:

- the inner loop directly inside the outer one;
- nothing but the inner loop in the outer loop's body (no equation or other
  loop beside it);
- both loops serial (L) and starting at 0 (fuse before annotating: TVM's
  fuse drops a parallel, vectorized, unrolled or thread-bound annotation);
- both loops of the same role for every equation inside: both index the
  written element or neither does (a fused loop cannot be partly a reduction
  axis);
- a product of extents that a 32-bit loop variable can count.

Example: fuse the output loops of a matrix multiply

    step: {"block": "C", "loops": ["i", "j"]}

    before:
    L^{64}_{i}$0
      L^{32}_{j}
        L^{128}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{2048}_{ij}
      L^{128}_{k} [
        C_{ij//32,ij%32} += X_{ij//32,k}*W_{k,ij%32};
      ];

Example: a spatial loop and a reduction loop do not fuse

    step: {"block": "C", "loops": ["j", "k"]}

    before:
    L^{64}_{i}
      L^{32}_{j}$0
        L^{128}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    refused: fuse-mixed-axes
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, tvm_loop
from leir.transforms.lib.loop_pairs import loop_pairs, nesting_refusal, pair_arg, pair_span
from leir.transforms.rewrite import fresh_name, map_equation, substitute

ID = "fuse"
GROUP = "loop"
TITLE = "Fuse loops"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_fusion"

#: Largest fused extent: TVM's loop variables here are 32-bit integers.
MAX_EXTENT = 2**31 - 1


class LoopsNotNested(NotApplicable):
    """The inner loop is not directly inside the outer one."""

    code = "fuse-loops-not-nested"


class NotOnlyChild(NotApplicable):
    """The outer loop's body holds more than the inner loop (an equation or another loop beside
    it)."""

    code = "fuse-not-only-child"


class LoopNotSerial(NotApplicable):
    """A loop is not serial (L): TVM's fuse drops a parallel, vectorized, unrolled or
    thread-bound annotation."""

    code = "fuse-loop-not-serial"


class LoopStartNotZero(NotApplicable):
    """A loop does not start at 0."""

    code = "fuse-loop-start-not-zero"


class MixedAxes(NotApplicable):
    """The loops play different roles for an equation inside: one indexes the written element
    and the other does not."""

    code = "fuse-mixed-axes"


class ExtentTooLarge(NotApplicable):
    """The product of the extents is more than a 32-bit loop variable can count."""

    code = "fuse-extent-too-large"




def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for outer, inner in loop_pairs(ctx, at):
        if _refusal(ctx, outer, inner) is not None:
            continue
        a, b = outer.loop, inner.loop
        args = {"block": ctx.block_names[inner.equations[0]], "loops": [a.var, b.var]}
        out.append(Candidate(Step(ID, args), f"Fuse loops {a.var} and {b.var}", pair_span(outer, inner)))
    return out


def _refusal(ctx: Context, outer: LoopSite, inner: LoopSite) -> NotApplicable | None:
    refusal = nesting_refusal(ctx, outer, inner, LoopsNotNested, NotOnlyChild, "fused")
    if refusal is not None:
        return refusal
    a, b = outer.loop, inner.loop
    for loop in (a, b):
        if loop.kind != "L":
            kind = A.KIND_WORDS[loop.kind]
            return LoopNotSerial(
                f"loop {loop.var} is {kind}",
                f"only serial (L) loops are fused: TVM's fuse drops the {kind} annotation of {loop.var}; "
                f"fuse before annotating, then annotate the fused loop",
                loop.span,
            )
        if loop.start != 0:
            return LoopStartNotZero(f"loop {loop.var} starts at {loop.start}",
                                    f"only loops starting at 0 are fused; {loop.var} starts at {loop.start}", loop.span)
    for k in inner.equations:
        info = ctx.analysis.equations[k]
        a_spatial, b_spatial = a.var in info.spatial, b.var in info.spatial
        if a_spatial != b_spatial:
            spatial, other = (a, b) if a_spatial else (b, a)
            tensor = info.equation.lhs.tensor
            role = "is a reduction axis" if info.kind != "assign" else "repeats the write"
            return MixedAxes(
                f"{spatial.var} indexes {tensor} and {other.var} does not",
                f"loops {a.var} and {b.var} play different roles for {tensor}: {spatial.var} indexes the written "
                f"element and {other.var} does not (it {role}); "
                f"one loop cannot be both (fusing them would need an explicit, guarded initialisation of {tensor}); "
                f"swap the loops so that loops of one role are adjacent, then fuse those",
                info.equation.lhs.span or pair_span(outer, inner),
            )
    if a.extent * b.extent > MAX_EXTENT:
        return ExtentTooLarge(
            f"{a.var} and {b.var} fused would run {a.extent * b.extent} iterations",
            f"the fused loop would run {a.extent}*{b.extent} = {a.extent * b.extent} iterations, more than a 32-bit "
            f"loop variable counts ({MAX_EXTENT})",
            pair_span(outer, inner),
        )
    return None


def check(ctx: Context, args: dict) -> None:
    outer, inner = pair_arg(ctx, args, ID)
    refusal = _refusal(ctx, outer, inner)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    block = args["block"]
    outer, inner = (tvm_loop(sch, block, var) for var in args["loops"])
    sch.fuse(outer, inner, preserve_unit_iters=True)


def fused_name(outer: str, inner: str) -> str:
    """The fused loop's name: ``ij`` for ``i`` and ``j``, as a person
    names it (TVM's ``i_j_fused`` repeats itself in every index); names
    longer than a letter joined by ``_`` (``i_0_j_0``, ``ij_k``)."""
    return outer + inner if len(outer) == len(inner) == 1 else f"{outer}_{inner}"


#: Names a loop must not take: LEIR's reserved words, dtypes and functions
#: (fusing ``i`` and ``n`` must not give ``in``).
_RESERVED = frozenset({"in", "out", "tmp", "where", "inf"}) | frozenset(A.DTYPES) | frozenset(A.FUNCTIONS)


def tidy(ctx: Context, args: dict, program: A.Program) -> A.Program:
    """TVM's fused loop renamed ``fused_name`` (made fresh against the
    tensors and the loops of its nest)."""
    a, b = args["loops"]
    tvm_name = f"{a}_{b}_fused"
    before = {n.var for n in A.walk(ctx.program) if isinstance(n, A.Loop)}
    tensors = {n.tensor for n in A.walk(program) if isinstance(n, A.Access)} | {d.name for d in program.decls}
    units = list(program.units)
    for u, unit in enumerate(units):
        loops = [n for n in A.walk(unit) if isinstance(n, A.Loop)]
        fused = [l.var for l in loops if l.var not in before and l.var.startswith(tvm_name)]
        if not fused:
            continue
        taken = tensors | {l.var for l in loops} | _RESERVED
        units[u] = _rename_loop(unit, fused[0], fresh_name(fused_name(a, b), taken))
    return replace(program, units=tuple(units))


def _rename_loop(nest: A.Nest, old: str, new: str) -> A.Nest:
    mapping = {old: A.Var(new)}
    loops = tuple(replace(l, var=new) if l.var == old else l for l in nest.loops)
    body = tuple(map_equation(item, lambda e: substitute(e, mapping)) if isinstance(item, A.Equation)
                 else _rename_loop(item, old, new) for item in nest.body)
    return replace(nest, loops=loops, body=body)


def fuse(program, block: str, loops: list[str]):
    """Apply a fusion (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loops": list(loops)}))

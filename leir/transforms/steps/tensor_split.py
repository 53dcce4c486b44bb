"""Decouple one operator into two over the two halves of a loop's range.

The nest of a single equation is repeated: the first copy runs the chosen
loop over ``0 .. at-1``, the second over ``at ..`` (its variable shifted by
``at`` in every index). Along a spatial loop each copy computes its own
part of the output (a reduction's second part gets its initial value
first); along a reduction loop the second copy accumulates onto the first
one's partial result (split-K). The two smaller operators can then be
scheduled, placed or fused independently. Inputs and outputs are read and
written in place: the halves address their part of each tensor by index
instead of copying it into new tensors.

It requires:

- a nest (from the chosen loop's nest inward) that holds only this equation;
- a loop not bound to a thread axis;
- ``at`` strictly inside the loop's range;
- an equation that reads no element of its own tensor but the one it writes;
- along a reduction loop, an order-free combiner (sum, product, max, min)
  unless no reduction loop of the nest comes before the chosen one;
- for a reduction split along a spatial loop, an initial value that can be
  written (not for integer max/min), under a guard that uses spatial loops
  only;
- for a reduction split along a spatial loop, an initial value written
  outside every reduction loop (no reduction loop around the nest).

Splitting a sum along its reduction loop reassociates it: the result is
equal up to rounding.

Example: a matmul split along its rows

    step: {"block": "C", "loop": "i", "at": 32}

    before:
    L^{64}_{i}$0
      L^{48}_{j}
        L^{16}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{32}_{i}
      L^{48}_{j}
        L^{16}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{32}_{i}
      L^{48}_{j} [
        C_{i+32,j} = 0.0;
      ];

    L^{32}_{i}
      L^{48}_{j}
        L^{16}_{k} [
          C_{i+32,j} += X_{i+32,k}*W_{k,j};
        ];

Example: split-K: the second half accumulates onto the first

    step: {"block": "C", "loop": "k", "at": 8}

    before:
    L^{64}_{i}
      L^{48}_{j}
        L^{16}_{k}$0 [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{64}_{i}
      L^{48}_{j}
        L^{8}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{64}_{i}
      L^{48}_{j}
        L^{8}_{k} [
          C_{i,j} += X_{i,k+8}*W_{k+8,j};
        ];

Example: a nest of two equations is two operators

    step: {"block": "A", "loop": "i", "at": 8}

    before:
    L^{16}_{i}$0 [
      A_{i} = X_{i}*2.0;
      B_{i} = A_{i} + 1.0;
    ];

    refused: tensor_split-not-alone
"""

from __future__ import annotations

from dataclasses import replace

from leir import affine
from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, int_arg, loop_arg
from leir.transforms.lib.combiners import init_value as _init_value
from leir.transforms.lib.dependence import touches
from leir.transforms.lib.nests import fresh_loops, places_of, replace_items
from leir.transforms.rewrite import map_equation, substitute

ID = "tensor_split"
GROUP = "operator"
TITLE = "Split operator along a loop"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "tensor_split_to_decouple_operators"


class NotAlone(NotApplicable):
    """The nest from the chosen loop inward holds more than this equation."""

    code = "tensor_split-not-alone"


class ThreadLoop(NotApplicable):
    """The loop is bound to a thread axis: the halves would launch threads of different extents."""

    code = "tensor_split-thread-loop"


class BadPoint(NotApplicable):
    """``at`` is not strictly inside the loop's range."""

    code = "tensor_split-bad-point"


class ReadsOwnOutput(NotApplicable):
    """The equation reads another element of its own tensor than the one it writes."""

    code = "tensor_split-reads-own-output"


class OrderMatters(NotApplicable):
    """Along a reduction loop, the combiner is not order-free and a reduction loop of the nest
    comes before the chosen one."""

    code = "tensor_split-order"


class NoInit(NotApplicable):
    """For a reduction split along a spatial loop, the second half's initial value cannot be
    written (no literal, a guard using reduction loops, or a reduction loop around the nest)."""

    code = "tensor_split-init"


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    for site in ctx.loops_at(at):
        if len(site.equations) != 1 or site.loop.extent < 2:
            continue
        point = site.loop.extent // 2
        if _refusal(ctx, site, point) is not None:
            continue
        args = {**ctx.loop_ref(site), "at": point}
        loop = site.loop
        end = loop.start + loop.extent
        title = (f"Split {args['block']} along {loop.var} into {loop.start}..{loop.start + point - 1} "
                 f"and {loop.start + point}..{end - 1}")
        out.append(Candidate(Step(ID, args), title, loop.span))
    return out


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    refusal = _refusal(ctx, site, int_arg(args, "at", ID))
    if refusal is not None:
        raise refusal


def _refusal(ctx: Context, site: LoopSite, point: int) -> NotApplicable | None:
    loop = site.loop
    if len(site.equations) != 1:
        names = ", ".join(ctx.block_names[k] for k in site.equations)
        return NotAlone(f"loop {loop.var} holds {len(site.equations)} equations",
                        f"tensor split decouples one operator: the nest of loop {loop.var} holds {names}; "
                        f"split it with operator fission first", loop.span)
    info = ctx.analysis.equations[site.equations[0]]
    name = ctx.block_names[info.index]
    if loop.kind == "B":
        return ThreadLoop(f"loop {loop.var} is bound to a thread axis",
                          f"two halves of thread-bound loop {loop.var} would launch threads of different extents in "
                          f"one kernel; split another loop", loop.span)
    if not 1 <= point < loop.extent:
        return BadPoint(f"{point} is not inside loop {loop.var}",
                        f"loop {loop.var} has {loop.extent} iterations: split it at a point between 1 and {loop.extent - 1}",
                        loop.span)
    eq = info.equation
    for t in touches(info):
        if t.access.tensor == eq.lhs.tensor and not t.is_write and t.access.indices != eq.lhs.indices:
            return ReadsOwnOutput(f"{name} reads another element of {eq.lhs.tensor}",
                                  f"{name} reads {_access(t.access)} while writing {_access(eq.lhs)}: the two halves "
                                  f"would see each other's writes in another order", t.access.span)
    spatial = loop.var in info.spatial
    if not spatial and info.combiner is None:
        before = [l for l in site.nest.loops[:site.position] if l.var in info.reduce_axes and l.extent > 1]
        if before:
            what = "writes" if info.kind == "assign" else "updates"
            return OrderMatters(
                f"{name} {what} {eq.lhs.tensor} in an order that the split would change",
                f"{name} {what} each element of {eq.lhs.tensor} at every iteration of {before[0].var} and {loop.var}, "
                f"and the result depends on their order; splitting {loop.var} would run all its first half before "
                f"the second for every {before[0].var}", loop.span)
    if spatial and info.kind == "reduce":
        if _init_value(ctx, info) is None:
            return NoInit(f"no literal initial value for {name}",
                          f"the second half of a reduction split along {loop.var} starts from the initial value, "
                          f"which for {info.combiner} of {ctx.analysis.tensors[eq.lhs.tensor].dtype} has no literal",
                          eq.span)
        outside = info.loops[:len(info.loops) - _depth_inside(info, site.nest)]
        around = next((l for l in outside if l.var in info.reduce_axes and l.extent > 1), None)
        if around is not None:
            return NoInit(f"{name} accumulates over loop {around.var} around the nest",
                          f"the initial value of the second half would be written at every iteration of reduction "
                          f"loop {around.var}, which is outside the split nest; split a nest that holds all of "
                          f"{name}'s reduction loops", around.span)
        if eq.predicate is not None and not affine.index_vars(eq.predicate) <= set(info.spatial):
            return NoInit(f"{name} is guarded by a reduction loop",
                          f"the initial value of the second half would be written under {name}'s guard, which "
                          f"uses reduction loops", eq.predicate.span)
    return None


def rewrite(ctx: Context, args: dict) -> A.Program:
    site = loop_arg(ctx, args, ID)
    point = args["at"]
    nest = site.nest
    loop = site.loop
    info = ctx.analysis.equations[site.equations[0]]
    path = places_of(ctx)[id(nest)].path
    shift = {loop.var: A.Binary("+", A.Var(loop.var), A.Num(point, str(point)))}

    def halve(loops: tuple[A.Loop, ...], extent: int) -> tuple[A.Loop, ...]:
        return tuple(replace(l, extent=extent) if l is loop or (l.var == loop.var and l.extent == loop.extent) else l
                     for l in loops)

    first = replace(nest, loops=halve(nest.loops, point), end_comments=A.NO_COMMENTS, span=None)
    second = _shifted(replace(nest, loops=halve(fresh_loops(nest.loops), loop.extent - point), span=None), shift)
    items: tuple[A.Item, ...] = (first, second)
    if loop.var in info.spatial and info.kind == "reduce":
        eq = info.equation
        inner = info.loops[len(info.loops) - _depth_inside(info, nest):]
        loops = halve(fresh_loops(tuple(l for l in inner if l.var in info.spatial)), loop.extent - point)
        init = A.Equation(eq.lhs, _init_value(ctx, info), eq.predicate)
        items = (first, A.Nest(loops, (map_equation(init, lambda e: substitute(e, shift)),)), second)
    return replace_items(ctx.program, path, 1, items)


def tensor_split(program, block: str, loop: str, at: int):
    """Split the operator ``block`` along ``loop`` at ``at`` (see the module
    docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop, "at": at}))


def _depth_inside(info: EquationInfo, nest: A.Nest) -> int:
    """How many of the equation's loops are ``nest``'s or inside it."""
    first = next(k for k, l in enumerate(info.loops) if l is nest.loops[0])
    return len(info.loops) - first


def _shifted(item: A.Item, shift: dict[str, A.Expr]) -> A.Item:
    if isinstance(item, A.Equation):
        return map_equation(item, lambda e: substitute(e, shift))
    return replace(item, body=tuple(_shifted(b, shift) for b in item.body))


def _access(a: A.Access) -> str:
    from leir.printer import print_expr

    return print_expr(a, declared=frozenset({a.tensor}))

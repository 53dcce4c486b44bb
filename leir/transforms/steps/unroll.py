"""Unroll a short loop: its body is repeated once per iteration.

An unrolled loop (``U``) has no loop counter, branch or index arithmetic
left at run time, and the compiler can keep values in registers and
schedule instructions across iterations. It pays on short inner loops (the
inner part of a split, a 3x3 filter window); unrolling a long loop only
makes the code larger.

It requires:

- a serial (L) loop of at least 2 iterations;
- at most 64 equation instances in one run of the unrolled loop (its extent
  times the iterations of the loops inside it, a vectorized loop counting
  once, summed over its equations:
  the code it unrolls to, at worst; TVM's meta-schedule tries 16, 64 and 512
  steps).

Example: a 3x3 window

    step: {"block": "O", "loop": "s"}

    before:
    L^{30}_{h}
      L^{30}_{w}
        L^{3}_{r}
          L^{3}_{s}$0 [
            O_{h,w} += X_{h+r,w+s}*K_{r,s};
          ];

    after:
    L^{30}_{h}
      L^{30}_{w}
        L^{3}_{r}
          U^{3}_{s} [
            O_{h,w} += X_{h+r,w+s}*K_{r,s};
          ];

Example: a loop with a loop inside (3 x 3 instances)

    step: {"block": "O", "loop": "r"}

    before:
    L^{30}_{h}
      L^{30}_{w}
        L^{3}_{r}$0
          L^{3}_{s} [
            O_{h,w} += X_{h+r,w+s}*K_{r,s};
          ];

    after:
    L^{30}_{h}
      L^{30}_{w}
        U^{3}_{r}
          L^{3}_{s} [
            O_{h,w} += X_{h+r,w+s}*K_{r,s};
          ];

Example: too long to unroll

    step: {"block": "S", "loop": "j"}

    before:
    L^{64}_{i}
      L^{100}_{j}$0 [
        S_{i} += X_{i,j};
      ];

    refused: unroll-too-many-instances
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.lib import kind_change as K
from leir.transforms.base import Context, LoopSite, NotApplicable


ID = "unroll"
GROUP = "loop"
TITLE = "Unroll loop"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_unrolling"

#: Most equation instances one run of an unrolled loop may hold: the
#: largest of TVM meta-schedule's default unroll steps but the last
#: (0, 16, 64, 512), beyond which code size costs more than the loop.
MAX_INSTANCES = 64


class LoopNotSerial(NotApplicable):
    """The loop is not serial (L): unrolling it would drop its annotation."""

    code = "unroll-loop-not-serial"


class LoopTooShort(NotApplicable):
    """The loop has fewer than 2 iterations: nothing to unroll."""

    code = "unroll-loop-too-short"


class TooManyInstances(NotApplicable):
    """One run of the loop executes more than 64 equation instances: too much code unrolled."""

    code = "unroll-too-many-instances"


def instances(ctx: Context, site: LoopSite) -> int:
    """Equation instances in one run of the loop: for each equation under
    it, the product of the extents from the loop inwards, a vectorized
    loop counting once (its lanes are one vector statement in the unrolled
    code, as in the loop)."""
    total = 0
    for k in site.equations:
        loops = ctx.analysis.equations[k].loops
        first = next(n for n, l in enumerate(loops) if l is site.loop)
        count = 1
        for l in loops[first:]:
            count *= 1 if l.kind == "V" else l.extent
        total += count
    return total


def _refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    loop = site.loop
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(f"loop {loop.var} is {kind}",
                             f"only a serial (L) loop is unrolled: unrolling {loop.var} would drop its {kind} "
                             f"annotation", loop.span)
    if loop.extent < 2:
        return LoopTooShort(f"loop {loop.var} has {loop.extent} iteration",
                            f"a loop of {loop.extent} iteration has nothing to unroll", loop.span)
    n = instances(ctx, site)
    if n > MAX_INSTANCES:
        return TooManyInstances(
            f"unrolling loop {loop.var} makes {n} copies of its equations",
            f"one run of loop {loop.var} executes {n} equation instances ({loop.extent} iterations times the "
            f"loops and equations inside it); unrolling repeats the body that many times, more than the "
            f"{MAX_INSTANCES} worth it: split {loop.var} and unroll the inner part", loop.span)
    return None


candidates, check, schedule = K.entry_points(
    ID, _refusal, lambda loop: f"Unroll loop {loop.var} ({loop.extent} iterations)", "unroll")


def unroll(program, block: str, loop: str):
    """Apply an unrolling (see the module docstring) and return the new program."""
    return K.apply_step(__name__, program, block, loop)

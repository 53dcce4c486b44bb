"""Split a loop into an outer loop and an inner loop of ``factor`` iterations.

When the factor does not divide the extent, the outer loop rounds up and the
equations get a guard (``where``) that skips the iterations past the end.
Splitting is the first half of tiling: the inner loop's data can then stay
in cache or registers, or become a vector or a thread axis.

It requires:

- a serial (L) loop starting at 0 (split a parallel, vectorized, unrolled or
  thread-bound loop before annotating it: TVM drops the annotation);
- an inner factor between 2 and the extent minus 1.

Example: split k by 32

    step: {"block": "S", "loop": "k", "factors": [8, 32]}

    before:
    L^{64}_{i}
      L^{256}_{k}$0 [
        S_{i} += X_{i,k};
      ];

    after:
    L^{64}_{i}
      L^{8}_{k_0}
        L^{32}_{k_1} [
          S_{i} += X_{i,k_0*32+k_1};
        ];

Example: an imperfect split adds a guard

    step: {"block": "Y", "loop": "i", "factors": [4, 32]}

    before:
    L^{100}_{i}$0 [
      Y_{i} = X_{i}*2.0;
    ];

    after:
    L^{4}_{i_0}
      L^{32}_{i_1} [
        Y_{i_0*32+i_1} = X_{i_0*32+i_1}*2.0 where i_0*32 + i_1 < 100;
      ];
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    BadStep,
    Candidate,
    Context,
    LoopSite,
    NotApplicable,
    Step,
    divisors,
    int_list_arg,
    loop_arg,
    tvm_loop,
)

ID = "split"
GROUP = "loop"
TITLE = "Split loop"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_split"

#: Inner factors offered beyond the extent's divisors (as imperfect splits).
COMMON_FACTORS = (4, 8, 16, 32, 64)
#: At most this many exact factors per loop, the powers of two first.
MAX_EXACT = 8


class LoopNotSerial(NotApplicable):
    """The loop is not serial (L): split refuses a parallel, vectorized, unrolled or
    thread-bound loop (TVM drops the annotation)."""

    code = "split-loop-not-serial"


class LoopStartNotZero(NotApplicable):
    """The loop does not start at 0."""

    code = "split-loop-start-not-zero"


class LoopTooShort(NotApplicable):
    """The loop has fewer than 3 iterations: no inner factor between 2 and the extent minus 1."""

    code = "split-loop-too-short"


class WrongFactors(NotApplicable):
    """The inner factor is not between 2 and the extent minus 1, or the outer factor is not the
    extent divided by it, rounded up."""

    code = "split-wrong-factors"


def inner_factors(extent: int) -> list[tuple[int, bool]]:
    """(inner factor, exact) pairs offered for a loop of this extent."""
    exact = [d for d in divisors(extent) if 2 <= d < extent]
    exact.sort(key=lambda d: (d & (d - 1) != 0, d))  # powers of two first
    exact = sorted(exact[:MAX_EXACT])
    imperfect = [f for f in COMMON_FACTORS if f < extent and extent % f != 0]
    return [(f, True) for f in exact] + [(f, False) for f in imperfect]


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for site in ctx.loops_at(at):
        if _refusal(site) is not None:
            continue
        extent = site.loop.extent
        for inner, exact in inner_factors(extent):
            outer = -(-extent // inner)
            args = {**ctx.loop_ref(site), "factors": [outer, inner]}
            title = f"Split loop {site.loop.var} by {inner}" + ("" if exact else f" (guarded: {outer * inner - extent} extra iterations skipped)")
            out.append(Candidate(Step(ID, args), title, site.loop.span))
    return out


def _refusal(site: LoopSite) -> NotApplicable | None:
    loop = site.loop
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(
            f"loop {loop.var} is {kind}",
            f"only a serial (L) loop is split: TVM's split drops the {kind} annotation of {loop.var}; "
            f"split before annotating, then annotate the part that should be {kind}",
            loop.span,
        )
    if loop.start != 0:
        return LoopStartNotZero(f"loop {loop.var} starts at {loop.start}",
                                f"only a loop starting at 0 is split; {loop.var} starts at {loop.start}", loop.span)
    if loop.extent < 3:
        return LoopTooShort(f"loop {loop.var} has {loop.extent} iterations",
                            f"a loop of {loop.extent} iterations has no inner factor between 2 and {loop.extent - 1}", loop.span)
    return None


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    refusal = _refusal(site)
    if refusal is not None:
        raise refusal
    factors = int_list_arg(args, "factors", ID)
    if len(factors) != 2:
        raise BadStep(f"split: \"factors\" is [outer, inner], got {factors}")
    outer, inner = factors
    extent = site.loop.extent
    if not 2 <= inner < extent or outer != -(-extent // inner):
        raise WrongFactors(
            f"factors {factors} do not split {extent} iterations",
            f"loop {site.loop.var} has {extent} iterations: the inner factor must be between 2 and {extent - 1}, "
            f"and the outer factor the extent divided by it, rounded up ({-(-extent // max(inner, 1))} for inner {inner})",
            site.loop.span,
        )


def schedule(sch, ctx: Context, args: dict) -> None:
    loop = tvm_loop(sch, args["block"], args["loop"])
    sch.split(loop, factors=list(args["factors"]), preserve_unit_iters=True)


def split(program, block: str, loop: str, factors: list[int]):
    """Apply a split (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop, "factors": list(factors)}))

"""Swap two directly nested loops.

Interchanging loops changes which index varies fastest: putting the loop
that walks the last dimension of the tensors innermost turns strided
accesses into contiguous ones, and moving a reduction loop outward (``k``
outside ``j`` in a matrix multiply) lets the inner loop stream a row while
the accumulators stay put. It is also how a parallel loop gets outermost.

The two loops keep their kinds (a parallel loop stays parallel). Swapping
them reorders the iterations of the pair; it is legal when no element is
accessed, with a write among the accesses, by two iterations that the swap
runs in the opposite order. Accumulating into a reduction (``+=``, ``*=``,
``max``, ``min``) in another order is allowed: the combiner is associative
and commutative, and the result differs at most by rounding.

It requires:

- the inner loop directly inside the outer one;
- nothing but the inner loop in the outer loop's body (no equation or other
  loop beside it);
- neither loop bound to a GPU thread;
- the inner loop not vectorized (a vectorized loop stays innermost);
- guards under the loops that TVM keeps around reordered loops: each
  conjunct bounds at most one of the loops moved, written as ``i < n``,
  ``i + c <= n`` or ``n > i``;
- when the inner loop is parallel, no element accessed, with a write among
  the accesses, by two of its iterations (with the outer loop inside, they
  all run at once);
- no element accessed, with a write among the accesses, by two iterations
  whose order the swap reverses (a reduction's own accumulation excepted).

Example: move the reduction loop outward

    step: {"block": "C", "loops": ["j", "k"]}

    before:
    L^{64}_{i}
      L^{32}_{j}$0
        L^{128}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{64}_{i}
      L^{128}_{k}
        L^{32}_{j} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

Example: a parallel loop moves outermost

    step: {"block": "Y", "loops": ["j", "i"]}

    before:
    L^{96}_{j}$0
      P^{128}_{i} [
        Y_{i,j} = X_{j,i};
      ];

    after:
    P^{128}_{i}
      L^{96}_{j} [
        Y_{i,j} = X_{j,i};
      ];

Example: a recurrence along j is refused

    step: {"block": "Y_1", "loops": ["i", "j"]}

    before:
    L^{16}_{j} [
      Y_{0,j} = X_{0,j};
    ];

    L^{15}_{i}$0
      L^{15}_{j} [
        Y_{i+1,j} = Y_{i,j+1} + X_{i+1,j};
      ];

    refused: reorder-dependence
"""

from __future__ import annotations

from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, tvm_loop
from leir.transforms.lib.loop_pairs import (
    guard_text,
    loop_pairs,
    nesting_refusal,
    order_conflict,
    pair_arg,
    pair_span,
    parallel_conflict,
    unsupported_guard,
)

ID = "reorder"
GROUP = "loop"
TITLE = "Reorder loops"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "loop_reorder"


class LoopsNotNested(NotApplicable):
    """The inner loop is not directly inside the outer one."""

    code = "reorder-loops-not-nested"


class NotOnlyChild(NotApplicable):
    """The outer loop's body holds more than the inner loop (an equation or another loop beside
    it)."""

    code = "reorder-not-only-child"


class ThreadBound(NotApplicable):
    """A loop is bound to a GPU thread: all its iterations run at once."""

    code = "reorder-thread-bound"


class VectorOutward(NotApplicable):
    """The inner loop is vectorized: a vectorized loop stays innermost."""

    code = "reorder-vector-outward"


class GuardNotBound(NotApplicable):
    """A guard under the loops is not one TVM keeps around reordered loops (each conjunct
    bounding at most one of the loops moved)."""

    code = "reorder-guard"


class ParallelRace(NotApplicable):
    """The inner loop is parallel and two of its iterations access an element, one writing it:
    with the outer loop inside, they would run at once."""

    code = "reorder-parallel-race"


class DependenceReversed(NotApplicable):
    """Swapping the loops reverses the order of two accesses to an element, one a write."""

    code = "reorder-dependence"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for outer, inner in loop_pairs(ctx, at):
        if _refusal(ctx, outer, inner) is not None:
            continue
        args = {"block": ctx.block_names[inner.equations[0]], "loops": [outer.loop.var, inner.loop.var]}
        out.append(Candidate(Step(ID, args), f"Swap loops {outer.loop.var} and {inner.loop.var}", pair_span(outer, inner)))
    return out


def check(ctx: Context, args: dict) -> None:
    outer, inner = pair_arg(ctx, args, ID)
    refusal = _refusal(ctx, outer, inner)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    outer, inner = (tvm_loop(sch, args["block"], var) for var in args["loops"])
    sch.reorder(inner, outer)


def reorder(program, block: str, loops: list[str]):
    """Apply a reorder (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loops": list(loops)}))


def _refusal(ctx: Context, outer: LoopSite, inner: LoopSite) -> NotApplicable | None:
    refusal = nesting_refusal(ctx, outer, inner, LoopsNotNested, NotOnlyChild, "swapped")
    if refusal is not None:
        return refusal
    a, b = outer.loop, inner.loop
    bound = [l for l in (a, b) if l.kind == "B"]
    if bound:
        l = bound[0]
        other = b if l is a else a
        return ThreadBound(
            f"loop {l.var} is bound to a GPU thread",
            f"{l.var} is bound to a GPU thread: all its iterations run at once, so swapping it with {other.var} "
            f"would not change the order of any thread's work (and a loop moved above the outermost bound loop "
            f"would launch the kernel once per iteration); swap serial loops inside the bound ones instead",
            l.span,
        )
    if b.kind == "V":
        return VectorOutward(
            f"loop {b.var} is vectorized",
            f"a vectorized loop stays innermost: with {a.var} inside it, TVM would vectorize {a.var}'s body across "
            f"{b.var}, one vector operation per iteration of {a.var}; swap before vectorizing",
            b.span,
        )
    guarded = unsupported_guard(ctx, outer, inner)
    if guarded is not None:
        info, conjunct = guarded
        return GuardNotBound(
            f"TVM cannot swap loops around the guard {guard_text(conjunct)}",
            f"TVM reorders loops only around guards that bound one of the loops moved ({a.var}, {b.var} and those "
            f"inside) by a plain comparison such as {a.var} < 5 or {a.var} + 1 <= n; the guard {guard_text(conjunct)} "
            f"of {info.equation.lhs.tensor} is not one",
            info.equation.predicate.span if info.equation.predicate is not None else b.span,
        )
    if b.kind == "P":
        race = parallel_conflict(ctx, outer, inner)
        if race is not None:
            return ParallelRace(
                f"parallel loop {b.var} would race outside {a.var}",
                f"with {a.var} inside it, different iterations of parallel loop {b.var} would run at once: "
                f"{race.describe(a.var, b.var, parallel=True)}; keep {b.var} inside {a.var}, or make it serial "
                f"before swapping",
                race.span or b.span,
            )
    conflict = order_conflict(ctx, outer, inner)
    if conflict is not None:
        return DependenceReversed(
            f"swapping {a.var} and {b.var} reverses a dependence on {conflict.tensor}",
            f"loops {a.var} and {b.var} cannot be swapped: {conflict.describe(a.var, b.var)}",
            conflict.span or pair_span(outer, inner),
        )
    return None

"""Swap two directly nested loops, or put a run of directly nested loops in a new order.

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

With ``"order"`` instead of ``"loops"`` the step names a run of directly
nested loops in the order they are to take, outermost first (TVM's
``reorder`` with several loops, one primitive): a tiled kernel's loops
reach their final order in one step instead of a swap per pair. It is
legal when every swap of adjacent loops that sorts the run into that order
is (each is checked in turn on the program it meets), so it allows what a
sequence of swaps allows, no more.

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
  whose order the swap reverses (a reduction's own accumulation excepted);
- with ``"order"``: at least two different loops around the block that
  form a run, each the only thing in the body of the one around it, named
  in an order other than their current one, and every swap of adjacent
  loops that sorts them into it allowed as above.

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

Example: a tiled matmul's loops in their final order in one step

    step: {"block": "C", "order": ["i_0", "j_0", "k", "i_1", "j_1"]}
    listed: no

    before:
    L^{4}_{i_0}$0
      L^{16}_{i_1}
        L^{8}_{j_0}
          L^{8}_{j_1}
            L^{32}_{k} [
              C_{i_0*16+i_1,j_0*8+j_1} += X_{i_0*16+i_1,k}*W_{k,j_0*8+j_1};
            ];

    after:
    L^{4}_{i_0}
      L^{8}_{j_0}
        L^{32}_{k}
          L^{16}_{i_1}
            L^{8}_{j_1} [
              C_{i_0*16+i_1,j_0*8+j_1} += X_{i_0*16+i_1,k}*W_{k,j_0*8+j_1};
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

from leir.transforms.applying import apply_transform, context_of
from leir.transforms.base import BadStep, Candidate, Context, LoopSite, NotApplicable, Step, str_arg, tvm_loop
from leir.transforms.lib.loop_pairs import (
    guard_text,
    loop_pairs,
    nesting_refusal,
    only_child,
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


class NotARun(NotApplicable):
    """The loops named in ``"order"`` are not a run of directly nested loops, each the only
    thing in the body of the one around it."""

    code = "reorder-not-a-run"


class SameOrder(NotApplicable):
    """The loops named in ``"order"`` are already in that order."""

    code = "reorder-same-order"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for outer, inner in loop_pairs(ctx, at):
        if _refusal(ctx, outer, inner) is not None:
            continue
        args = {"block": ctx.block_names[inner.equations[0]], "loops": [outer.loop.var, inner.loop.var]}
        out.append(Candidate(Step(ID, args), title(args), pair_span(outer, inner)))
    return out


def check(ctx: Context, args: dict) -> None:
    if "order" in args:
        _check_order(ctx, args)
        return
    outer, inner = pair_arg(ctx, args, ID)
    refusal = _refusal(ctx, outer, inner)
    if refusal is not None:
        raise refusal


def schedule(sch, ctx: Context, args: dict) -> None:
    if "order" in args:
        sch.reorder(*(tvm_loop(sch, args["block"], var) for var in args["order"]))
        return
    outer, inner = (tvm_loop(sch, args["block"], var) for var in args["loops"])
    sch.reorder(inner, outer)


def reorder(program, block: str, loops: list[str]):
    """Apply a reorder (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loops": list(loops)}))


def swaps(current: list[str], order: list[str]) -> list[tuple[str, str]]:
    """The swaps of adjacent loops, (outer, inner) each, that take the run
    ``current`` (outermost first) to ``order``: a bubble sort's, the fewest
    there are (one per pair of loops the new order inverts)."""
    rank = {v: k for k, v in enumerate(order)}
    run, out = list(current), []
    for end in range(len(run) - 1, 0, -1):
        for k in range(end):
            if rank[run[k]] > rank[run[k + 1]]:
                out.append((run[k], run[k + 1]))
                run[k], run[k + 1] = run[k + 1], run[k]
    return out


def title(args: dict) -> str:
    """What a step does, in the words the editor shows."""
    if "order" in args:
        return f"Reorder loops to {', '.join(args['order'])}"
    return f"Swap loops {args['loops'][0]} and {args['loops'][1]}"


def _order_arg(ctx: Context, args: dict) -> tuple[str, list[LoopSite]]:
    """The block and the named loops' sites, outermost first as they are now."""
    block = str_arg(args, "block", ID)
    order = args.get("order")
    if (not isinstance(order, list) or len(order) < 2 or not all(isinstance(v, str) and v for v in order)
            or len(set(order)) != len(order)):
        raise BadStep(f"{ID}: \"order\" is a list of two or more different loop names; got {order!r}")
    if "loops" in args:
        raise BadStep(f"{ID}: give \"loops\" (a swap) or \"order\" (a run in a new order), not both")
    sites = sorted((ctx.loop_site(block, v) for v in order), key=lambda site: site.depth)
    return block, sites


def _check_order(ctx: Context, args: dict) -> None:
    block, sites = _order_arg(ctx, args)
    for outer, inner in zip(sites, sites[1:]):
        if inner.depth != outer.depth + 1 or only_child(ctx, outer) is not inner:
            a, b = outer.loop, inner.loop
            raise NotARun(
                f"loops {', '.join(s.loop.var for s in sites)} are not a run of directly nested loops",
                f"a new order is given to loops that are nested one directly inside the other, each the only thing "
                f"in the body of the one around it: {b.var} is not all that {a.var}'s body holds"
                if inner.depth == outer.depth + 1 else
                f"a new order is given to loops that are nested one directly inside the other: loops between "
                f"{a.var} and {b.var} are not named (name them too, in the place they are to take)",
                b.span)
    current = [s.loop.var for s in sites]
    order = list(args["order"])
    if current == order:
        raise SameOrder(f"loops {', '.join(order)} are already in this order",
                        "the step would change nothing; name the loops in the order they are to take", sites[0].loop.span)
    # Each swap checked on the program it meets: the run may be legal as a
    # whole only through the swaps that sort it, and those are what is checked.
    # The refusal points at the document's loop: the programs between have
    # no spans of the document's.
    spans = {s.loop.var: s.loop.span for s in sites}
    here = ctx
    moves = swaps(current, order)
    for k, (a, b) in enumerate(moves):
        refusal = _refusal(here, here.loop_site(block, a), here.loop_site(block, b))
        if refusal is not None:
            raise type(refusal)(f"{refusal.short} (on the way to the order {', '.join(order)})", refusal.detail,
                                spans[b])
        if k + 1 < len(moves):
            here = context_of(apply_transform(__name__, here, Step(ID, {"block": block, "loops": [a, b]}), ctx.name),
                              ctx.name)


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

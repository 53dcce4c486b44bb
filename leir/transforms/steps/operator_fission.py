"""Split a nest whose body holds several items into consecutive nests over the same loops.

The inverse of operator fusion: the loops from the chosen one inward are
repeated around the items before the chosen block and around the items from
it on, so that all iterations of the first part run before the second part
starts. Fission separates operators that want different schedules (a
reduction and an elementwise map), shrinks the working set of each loop,
and undoes a fusion that did not pay off.

It requires:

- a chosen block that is not in the first item of the body of the nest that
  holds the loop;
- no element that one part writes and the other touches touched by the
  second part at an earlier iteration of the repeated loops than by the
  first (so that running the first part to completion first changes
  nothing);
- parallel, vectorized and thread-bound repeated loops touching such an
  element in one iteration only.

Example: split the fused max and sum of a softmax back into two nests

    step: {"block": "Z", "loop": "i"}

    before:
    L^{64}_{i}$0 [
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];
      # sum of exp
      L^{100}_{c} [
        Z_{i} += exp(X_{i,c} - M_{i});
      ];
    ];

    after:
    L^{64}_{i}
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    # sum of exp
    L^{64}_{i}
      L^{100}_{c} [
        Z_{i} += exp(X_{i,c} - M_{i});
      ];

Example: distribute only the inner loop

    step: {"block": "B", "loop": "j"}

    before:
    L^{16}_{i}
      L^{32}_{j}$0 [
        A_{i,j} = X_{i,j}*2.0;
        B_{i,j} = A_{i,j} + 1.0;
      ];

    after:
    L^{16}_{i} [
      L^{32}_{j} [
        A_{i,j} = X_{i,j}*2.0;
      ];
      L^{32}_{j} [
        B_{i,j} = A_{i,j} + 1.0;
      ];
    ];

Example: the second equation reads what the first writes one iteration later

    step: {"block": "B", "loop": "i"}

    before:
    L^{16}_{i}$0 [
      A_{i} = X_{i}*2.0;
      B_{i} = A_{15 - i} + 1.0;
    ];

    refused: operator_fission-dependence
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg
from leir.transforms.lib.dependence import order_conflict
from leir.transforms.lib.nests import equations_under, fresh_loops, make_nest, places_of, replace_items

ID = "operator_fission"
GROUP = "operator"
TITLE = "Split operators into separate nests"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "operator_fission"


class NothingBefore(NotApplicable):
    """The chosen block is in the first item of the loop's body: nothing would run before it."""

    code = "operator_fission-nothing-before"


class DependenceViolated(NotApplicable):
    """Running the first part to completion first would change something: the second part
    touches an element the other writes at an earlier iteration, or a parallel, vectorized or
    thread-bound repeated loop touches it in two iterations."""

    code = "operator_fission-dependence"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    seen: set[tuple[int, int]] = set()
    places = places_of(ctx)
    for site in ctx.loops_at(at):
        key = (id(site.nest), site.position)
        if key in seen:
            continue
        seen.add(key)
        path = places[id(site.nest)].path
        for k in range(1, len(site.nest.body)):
            first_block = ctx.block_names[equations_under(ctx, path + (k,))[0].index]
            if _refusal(ctx, site, k) is not None:
                continue
            before = _names(ctx, path, range(0, k))
            after = _names(ctx, path, range(k, len(site.nest.body)))
            loops = ", ".join(l.var for l in site.nest.loops[site.position:])
            title = f"Split loop{'s' if ',' in loops else ''} {loops} between {before} and {after}"
            out.append(Candidate(Step(ID, {"block": first_block, "loop": site.loop.var}), title, site.loop.span))
    return out


def _names(ctx: Context, path: tuple[int, ...], items) -> str:
    names = [ctx.block_names[info.index] for k in items for info in equations_under(ctx, path + (k,))]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}...{names[-1]}"


def _split_point(ctx: Context, site: LoopSite, block: str) -> int:
    info = ctx.equation_of_block(block)
    path = places_of(ctx)[id(site.nest)].path
    return info.site.path[len(path)]


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    refusal = _refusal(ctx, site, _split_point(ctx, site, args["block"]))
    if refusal is not None:
        raise refusal


def _refusal(ctx: Context, site: LoopSite, k: int) -> NotApplicable | None:
    nest = site.nest
    place = places_of(ctx)[id(nest)]
    if k == 0:
        first = equations_under(ctx, place.path + (0,))[0]
        name = ctx.block_names[first.index]
        return NothingBefore(f"{name} is in the first item of the loop body",
                             f"fission splits the body of loop {site.loop.var} before an item; {name} is in its first "
                             f"item, so nothing would run before it", first.equation.span)
    first = [info for i in range(k) for info in equations_under(ctx, place.path + (i,))]
    second = [info for i in range(k, len(nest.body)) for info in equations_under(ctx, place.path + (i,))]
    repeated = nest.loops[site.position:]
    conflict = order_conflict(ctx, place.outer + nest.loops[:site.position], first, second, repeated, repeated)
    if conflict is not None:
        names = ", ".join(l.var for l in repeated)
        first_name = "the part with " + _names(ctx, place.path, range(0, k))
        second_name = "the part with " + _names(ctx, place.path, range(k, len(nest.body)))
        return DependenceViolated(
            f"splitting loop{'s' if len(repeated) > 1 else ''} {names} breaks a dependence on {conflict.tensor}",
            f"after fission, {conflict.describe(first_name, second_name)}", conflict.span or site.loop.span)
    return None


def rewrite(ctx: Context, args: dict) -> A.Program:
    site = loop_arg(ctx, args, ID)
    nest = site.nest
    k = _split_point(ctx, site, args["block"])
    path = places_of(ctx)[id(nest)].path
    p = site.position
    repeated = nest.loops[p:]
    if p == 0:
        part1 = make_nest(repeated, nest.body[:k])
        part2 = make_nest(fresh_loops(repeated), nest.body[k:], nest.end_comments)
        return replace_items(ctx.program, path, 1, (part1, part2))
    part1 = make_nest(repeated, nest.body[:k])
    part2 = make_nest(fresh_loops(repeated), nest.body[k:])
    kept = A.Nest(nest.loops[:p], (part1, part2), None, nest.end_comments)
    return replace_items(ctx.program, path, 1, (kept,))


def operator_fission(program, block: str, loop: str):
    """Split the nest holding ``loop`` before the item with ``block``,
    repeating the loops from ``loop`` inward (see the module docstring)."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop}))

"""Fuse a nest with the next one over their common outer loops.

Two consecutive nests that run the same loops (same kinds, extents and
starts; the variables may differ) become one nest whose body holds both
bodies in order. Fusing only the outer loops of the two is allowed: the
loops below stay as two nests inside the fused ones. Fusion lets the second
computation read what the first wrote while it is still in cache or
registers, and turns two passes over the data into one.

It requires:

- a next nest right after this one in the same body;
- first loops of the next nest, down to the fused one, that match these
  loops in kind, extent and start;
- no element that one nest writes and the other touches touched by the
  second nest at an earlier iteration of the fused loops than by the first
  (an iteration of the fused loops must find everything it reads from the
  first nest complete);
- parallel, vectorized and thread-bound fused loops touching such an element
  only in one iteration;
- a temporary used by the two nests alone passed within one iteration (TVM
  allocates such a temporary inside the fused loops);
- when a fused loop is bound to a thread axis, no other thread-bound loop
  left inside either nest (threads of one kernel do not wait for each other
  between the two parts);
- no temporary used by the two nests alone written and read inside a fused
  vectorized loop (TVM 0.27 computes it wrong).

What operator-level steps share -- where a nest sits in the program,
renaming loop variables (``leir.transforms.lib.nests``), and
``order_conflict``, the dependence test that decides whether two groups of
equations may run in an order other than the written one
(``leir.transforms.lib.dependence``) -- is imported here from the library.

Example: fuse the row loops of the max and the sum of a softmax (the column loops cannot be fused: the sum needs the finished row max)

    step: {"block": "M", "loop": "i"}

    before:
    L^{64}_{i}$0
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{64}_{r}
      L^{100}_{c} [
        Z_{r} += exp(X_{r,c} - M_{r});
      ];

    after:
    L^{64}_{i} [
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];
      L^{100}_{c} [
        Z_{i} += exp(X_{i,c} - M_{i});
      ];
    ];

Example: an elementwise operator fused into the loops of the matmul that produces its input

    step: {"block": "C", "loop": "j"}

    before:
    L^{64}_{i}
      L^{48}_{j}$0
        L^{32}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    L^{64}_{i}
      L^{48}_{j} [
        Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

    after:
    L^{64}_{i}
      L^{48}_{j} [
        L^{32}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];
        Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
      ];

Example: the sum needs the whole row max, so the column loops are not fused

    step: {"block": "M", "loop": "j"}

    before:
    L^{64}_{i}
      L^{100}_{j}$0 [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{64}_{i}
      L^{100}_{j} [
        Z_{i} += exp(X_{i,j} - M_{i});
      ];

    refused: operator_fusion-dependence
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg
from leir.transforms.lib.dependence import order_conflict
from leir.transforms.lib.nests import (
    VECTOR_TEMPORARY_BUG,
    equations_under,
    places_of,
    rename_vars,
    replace_items,
    shared_temporary,
    sibling,
    with_leading_comments,
)
from leir.transforms.rewrite import fresh_name, names_in

ID = "operator_fusion"
GROUP = "operator"
TITLE = "Fuse operators"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "operator_fusion"


class NoNextNest(NotApplicable):
    """No nest comes right after this one in the same body."""

    code = "operator_fusion-no-next-nest"


class HeadersDiffer(NotApplicable):
    """The next nest's first loops, down to the fused one, do not match these loops in kind,
    extent and start."""

    code = "operator_fusion-headers-differ"


class DependenceViolated(NotApplicable):
    """An iteration of the fused loops would not find everything it reads from the first nest
    complete (or a parallel, vectorized or thread-bound fused loop touches such an element in
    two iterations, or a shared temporary crosses iterations)."""

    code = "operator_fusion-dependence"


class UnsynchronizedThreads(NotApplicable):
    """A fused loop is bound to a thread axis and another thread-bound loop is left inside a
    nest: threads of one kernel do not wait for each other."""

    code = "operator_fusion-unsynchronized-threads"


class VectorizedTemporary(NotApplicable):
    """A temporary used by the two nests alone would be written and read inside a fused
    vectorized loop, which TVM 0.27 computes wrong."""

    code = "operator_fusion-vectorized-temporary"


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    wanted: list[tuple[A.Nest, int]] = []
    places = places_of(ctx)
    for site in ctx.loops_at(at):
        wanted.append((site.nest, site.position + 1))
        if at is not None:
            # The cursor on the second nest offers fusing it into the one before.
            place = places[id(site.nest)]
            before = sibling(ctx.program, place.path, -1)
            if isinstance(before, A.Nest) and len(before.loops) > site.position:
                wanted.append((before, site.position + 1))
    out: list[Candidate] = []
    seen: set[tuple[int, int]] = set()
    for nest, depth in wanted:
        if (id(nest), depth) in seen:
            continue
        seen.add((id(nest), depth))
        site = _site_of(ctx, nest, depth - 1)
        if site is None or _refusal(ctx, site) is not None:
            continue
        fused = ", ".join(l.var for l in nest.loops[:depth])
        title = (f"Fuse {_blocks_text(ctx, places[id(nest)].path)} with {_blocks_text(ctx, _next_path(places[id(nest)].path))} "
                 f"over loop{'s' if depth > 1 else ''} {fused}")
        span = _span_of_loops(nest.loops[:depth])
        out.append(Candidate(Step(ID, ctx.loop_ref(site)), title, span))
    return out


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    refusal = _refusal(ctx, site)
    if refusal is not None:
        raise refusal


def _refusal(ctx: Context, site: LoopSite) -> NotApplicable | None:
    first = site.nest
    depth = site.position + 1
    place = places_of(ctx)[id(first)]
    second = sibling(ctx.program, place.path, 1)
    blocks = _blocks_text(ctx, place.path)
    if not isinstance(second, A.Nest) or not second.loops:
        what = "nothing" if second is None else "a bare equation"
        return NoNextNest(f"no nest follows the nest of {blocks}",
                          f"operator fusion merges a nest with the next nest in the same body; "
                          f"{what} follows the nest of {blocks}", first.loops[0].span)
    other = _blocks_text(ctx, _next_path(place.path))
    for t in range(depth):
        a = first.loops[t]
        b = second.loops[t] if t < len(second.loops) else None
        if b is None:
            return HeadersDiffer(f"the nest of {other} has only {len(second.loops)} loop{'s' if len(second.loops) != 1 else ''}",
                                 f"fusing down to loop {site.loop.var} needs {depth} loops in both nests; "
                                 f"the nest of {other} has {len(second.loops)}", site.loop.span)
        if (a.kind, a.extent, a.start) != (b.kind, b.extent, b.start):
            return HeadersDiffer(
                f"loops {a.var} and {b.var} differ",
                f"loop {a.var} of {blocks} is {_header(a)} but the matching loop {b.var} of {other} is {_header(b)}: "
                f"fused loops must have the same kind, extent and start", b.span or a.span)
    prefix = first.loops[:depth]
    if any(l.kind == "B" for l in prefix):
        inner = [l for l in _loops_below(first, depth) + _loops_below(second, depth) if l.kind == "B"]
        if inner:
            return UnsynchronizedThreads(
                f"thread-bound loop {inner[0].var} would stay inside the fused kernel",
                f"fusing thread-bound loops puts both nests in one kernel, where the threads of loop {inner[0].var} "
                f"run the second part without waiting for the first; fuse the thread-bound loops {inner[0].var} too",
                inner[0].span)
    vector = next((l for l in prefix if l.kind == "V"), None)
    if vector is not None:
        shared = shared_temporary(ctx, equations_under(ctx, place.path), equations_under(ctx, _next_path(place.path)))
        if shared is not None:
            return VectorizedTemporary(
                f"temporary {shared} would be written and read in one vectorized loop {vector.var}",
                f"{VECTOR_TEMPORARY_BUG}; fusing vectorized loop {vector.var} would put the write and the read of "
                f"temporary {shared} in it", vector.span)
    outer = place.outer
    conflict = order_conflict(ctx, outer, equations_under(ctx, place.path), equations_under(ctx, _next_path(place.path)),
                              prefix, second.loops[:depth])
    if conflict is not None:
        return DependenceViolated(
            f"fusing loop{'s' if depth > 1 else ''} {', '.join(l.var for l in prefix)} breaks a dependence on {conflict.tensor}",
            f"after fusion, {conflict.describe('the nest of ' + blocks, 'the nest of ' + other)}",
            conflict.span or site.loop.span)
    return None


def rewrite(ctx: Context, args: dict) -> A.Program:
    site = loop_arg(ctx, args, ID)
    first = site.nest
    depth = site.position + 1
    path = places_of(ctx)[id(first)].path
    second = sibling(ctx.program, path, 1)
    assert isinstance(second, A.Nest)
    fused = fuse_nests(ctx.program, first, second, depth)
    return replace_items(ctx.program, path, 2, (fused,))


def fuse_nests(program: A.Program, first: A.Nest, second: A.Nest, depth: int) -> A.Nest:
    """One nest over the first ``depth`` loops of ``first`` holding the rest
    of ``first`` then the rest of ``second`` (its variables renamed to
    those of ``first``)."""
    mapping = {second.loops[t].var: first.loops[t].var for t in range(depth)}
    taken = names_in(program)
    prefix_vars = {l.var for l in first.loops[:depth]}
    for loop in _loops_below(second, depth):
        if loop.var in prefix_vars and loop.var not in mapping:
            new = fresh_name(loop.var, taken | set(mapping.values()))
            mapping[loop.var] = new
            taken.add(new)
    second = rename_vars(second, mapping)
    # Comments stay where they were: inside the nest each part keeps, or
    # (a second nest's header comments) before its part of the body.
    moved = tuple(c for l in second.loops[:depth] for c in l.comments.before)
    if depth < len(first.loops):
        items1 = (A.Nest(first.loops[depth:], first.body, None, first.end_comments),)
    else:
        items1 = first.body
        after = (first.end_comments.after,) if first.end_comments.after else ()
        moved = first.end_comments.before + after + moved
    if depth < len(second.loops):
        items2 = (A.Nest(second.loops[depth:], second.body, None, A.Comments(second.end_comments.before)),)
        end = A.Comments((), second.end_comments.after)
    else:
        items2 = second.body
        end = second.end_comments
    items2 = (with_leading_comments(items2[0], A.Comments(moved)),) + items2[1:]
    return A.Nest(first.loops[:depth], items1 + items2, None, end)


def operator_fusion(program, block: str, loop: str):
    """Fuse the nest around ``block`` with the next one, over its loops down
    to ``loop`` (see the module docstring); return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop}))


def _site_of(ctx: Context, nest: A.Nest, position: int) -> LoopSite | None:
    for s in ctx.loop_sites:
        if s.nest is nest and s.position == position:
            return s
    return None


def _header(loop: A.Loop) -> str:
    kind = A.KIND_WORDS[loop.kind]
    start = f" from {loop.start}" if loop.start else ""
    return f"{kind} with {loop.extent} iterations{start}"


def _span_of_loops(loops) -> A.Span | None:
    spans = [l.span for l in loops if l.span is not None]
    if not spans:
        return None
    out = spans[0]
    for s in spans[1:]:
        out = out.cover(s)
    return out


def _next_path(path: tuple[int, ...]) -> tuple[int, ...]:
    return path[:-1] + (path[-1] + 1,)


def _blocks_text(ctx: Context, path: tuple[int, ...]) -> str:
    names = [ctx.block_names[info.index] for info in equations_under(ctx, path)]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}...{names[-1]}"


def _loops_below(nest: A.Nest, depth: int) -> list[A.Loop]:
    """The loops of ``nest`` after its first ``depth``, and every loop of
    the nests in its body."""
    out = list(nest.loops[depth:])
    for item in nest.body:
        if isinstance(item, A.Nest):
            out.extend(_loops_below(item, 0))
    return out

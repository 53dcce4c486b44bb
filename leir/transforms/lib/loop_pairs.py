"""What the steps that act on a loop with its only child share (reorder,
tile and fuse): the pair named by a step, the pairs a cursor selects,
whether the inner loop is the outer one's only child, guards TVM cannot
keep around moved loops, and the dependences that reordering the pair's
iterations would reverse. Moved from ``reorder``, which imports it back."""

from __future__ import annotations

from dataclasses import dataclass

from leir import affine
from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.base import BadStep, Context, LoopSite, NotApplicable, str_arg


# --------------------------------------------------------- pairs of loops
# Shared with tile and fuse, which act on the same kind of pair.


def pair_arg(ctx: Context, args: dict, step_id: str) -> tuple[LoopSite, LoopSite]:
    """The loops named by ``args["block"]`` and ``args["loops"]`` (outer
    first)."""
    block = str_arg(args, "block", step_id)
    loops = args.get("loops")
    if (not isinstance(loops, list) or len(loops) != 2 or not all(isinstance(v, str) and v for v in loops)
            or loops[0] == loops[1]):
        raise BadStep(f"{step_id}: \"loops\" is [outer, inner], two different loop names; got {loops!r}")
    return ctx.loop_site(block, loops[0]), ctx.loop_site(block, loops[1])


def child_loops(ctx: Context, site: LoopSite) -> list[LoopSite]:
    """The loops directly inside ``site``'s loop."""
    return ctx.child_sites.get(id(site.loop), [])


def only_child(ctx: Context, site: LoopSite) -> LoopSite | None:
    """The loop directly inside ``site``'s loop when it is all its body
    holds."""
    if site.position + 1 < len(site.nest.loops):
        nested = site.nest
    else:
        nested = _whole_body_nest(site.nest)
        if nested is None:
            return None
    for s in child_loops(ctx, site):
        if s.nest is nested and s.position == (site.position + 1 if nested is site.nest else 0):
            return s
    return None


def _whole_body_nest(nest: A.Nest) -> A.Nest | None:
    """The nest with loops that is the whole body of ``nest`` (looking
    through brackets without loops, which lower to nothing), or None."""
    body = nest.body
    while len(body) == 1 and isinstance(body[0], A.Nest):
        if body[0].loops:
            return body[0]
        body = body[0].body
    return None


def loop_pairs(ctx: Context, at: int | None) -> list[tuple[LoopSite, LoopSite]]:
    """Loops with their only child that a cursor selects: pairs with a
    selected loop as the outer or the inner one, outermost first."""
    selected = ctx.loops_at(at)
    parent_of = ctx.__dict__.get("_reorder_parent_of")
    if parent_of is None:  # once per context: the whole program's loops
        parent_of = {}
        for site in ctx.loop_sites:
            child = only_child(ctx, site)
            if child is not None:
                parent_of[id(child.loop)] = site
        ctx.__dict__["_reorder_parent_of"] = parent_of
    pairs: dict[int, tuple[LoopSite, LoopSite]] = {}
    for site in selected:
        child = only_child(ctx, site)
        if child is not None:
            pairs[id(site.loop)] = (site, child)
        parent = parent_of.get(id(site.loop))
        if parent is not None and at is not None:
            pairs[id(parent.loop)] = (parent, site)
    order = ctx.__dict__.get("_reorder_order")
    if order is None:
        order = ctx.__dict__["_reorder_order"] = {id(s.loop): k for k, s in enumerate(ctx.loop_sites)}
    return sorted(pairs.values(), key=lambda p: order[id(p[0].loop)])


def pair_span(outer: LoopSite, inner: LoopSite):
    if outer.loop.span is None:
        return inner.loop.span
    return outer.loop.span.cover(inner.loop.span)


def nesting_refusal(ctx: Context, outer: LoopSite, inner: LoopSite, not_nested: type[NotApplicable],
                    not_only_child: type[NotApplicable], done: str) -> NotApplicable | None:
    """Why ``inner`` is not the only child of ``outer`` (None when it is).
    ``done`` says what would be done to them ("swapped", "fused")."""
    a, b = outer.loop, inner.loop
    if not (inner.outer and inner.depth == outer.depth + 1 and inner.outer[-1] is a):
        if outer.outer and any(l is b for l in outer.outer):
            detail = f"{b.var} encloses {a.var}: name the outer loop first ([\"{b.var}\", \"{a.var}\"])"
        else:
            detail = f"{b.var} is not the loop directly inside {a.var}"
        return not_nested(f"loop {b.var} is not directly inside loop {a.var}",
                          f"only two directly nested loops are {done}: {detail}", b.span)
    if only_child(ctx, outer) is not inner:
        return not_only_child(
            f"loop {a.var} holds more than loop {b.var}",
            f"loops {a.var} and {b.var} are {done} only when {b.var} is all that {a.var}'s body holds: "
            f"the other statements in {a.var} would have to move with {b.var}; put them in a nest of their own first",
            a.span)
    return None


def unsupported_guard(ctx: Context, outer: LoopSite, inner: LoopSite) -> tuple[EquationInfo, A.Expr] | None:
    """An equation under the pair whose guard TVM's reorder does not
    accept, with the offending conjunct. TVM keeps a guard around
    reordered loops only when each conjunct bounds at most one loop of the
    pair (or inside it) by a plain comparison, with that loop's variable
    added once on one side (``i < 5``, ``i + 1 <= n``, ``5 > i``, ``j <= k``
    with ``k`` outside the pair); anything else (``i + j < 8``, ``2*i < 7``,
    ``7 - i >= 2``, ``i == 3``) makes the block's binding non-affine to it
    (seen with TVM 0.27)."""
    for k in inner.equations:
        info = ctx.analysis.equations[k]
        guard = info.equation.predicate
        if guard is None:
            continue
        moved = {l.var for l in info.loops[outer.depth:]}
        for conjunct in _conjuncts(guard):
            if not (affine.index_vars(conjunct) & moved):
                continue
            if not _plain_bound(conjunct, moved):
                return info, conjunct
    return None


def _conjuncts(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.Binary) and e.op == "&":
        return _conjuncts(e.lhs) + _conjuncts(e.rhs)
    return [e]


def _plain_bound(e: A.Expr, moved: set[str]) -> bool:
    if not (isinstance(e, A.Binary) and e.op in ("<", "<=", ">", ">=")):
        return False
    sides = [affine.linearize(e.lhs), affine.linearize(e.rhs)]
    if any(f is None for f in sides):
        return False
    terms = [(v, c) for f in sides for v, c in f.coeffs if v in moved]
    return len(terms) == 1 and terms[0][1] == 1


def guard_text(e: A.Expr) -> str:
    from leir.printer import print_expr

    return print_expr(e)


# ------------------------------------------------------------ dependences


@dataclass(frozen=True)
class _Use:
    """One access of a tensor by an equation under a pair of loops."""

    access: A.Access
    info: EquationInfo
    write: bool

    @property
    def accumulates(self) -> bool:
        """The written element or its read in a reduction shape."""
        return self.info.combiner is not None and self.access.tensor == self.info.equation.lhs.tensor


@dataclass(frozen=True)
class Conflict:
    """Two accesses of one element that the transformation would run in the
    other order (``witness``: the loop values of each and the element), or
    whose order it could not prove kept (``witness`` None)."""

    tensor: str
    first: _Use
    second: _Use
    witness: tuple[tuple[int, int], tuple[int, int], tuple[int, ...]] | None

    @property
    def span(self):
        return self.second.access.span or self.first.access.span

    def describe(self, a: str, b: str, parallel: bool = False) -> str:
        x, y = _use_text(self.first), _use_text(self.second)
        if self.witness is None:
            return (f"could not prove that {x} and {y} never touch the same element of {self.tensor} in iterations "
                    f"that the transformation would reorder (an index is not affine or there are too many iterations "
                    f"to enumerate)")
        (a1, b1), (a2, b2), element = self.witness
        where = f"element ({', '.join(map(str, element))})" if element else "the scalar"
        both = f"{x} at {a}={a1}, {b}={b1} and {y} at {a}={a2}, {b}={b2} both touch {where} of {self.tensor}"
        if parallel:
            return both
        return f"{both}; {a} before {b} runs them in one order, {b} before {a} in the other"


def _use_text(use: _Use) -> str:
    from leir.bridge.lower import equation_text
    from leir.printer import print_expr

    if use.write:
        return f"the write {equation_text(use.info.equation)}"
    access = print_expr(use.access, declared=frozenset({use.access.tensor}))
    return f"the read of {access} in {equation_text(use.info.equation)}"


def _uses(info: EquationInfo) -> list[_Use]:
    eq = info.equation
    out = [_Use(eq.lhs, info, True)]
    for part in (eq.rhs, eq.predicate):
        if part is not None:
            out.extend(_Use(n, info, False) for n in A.walk(part) if isinstance(n, A.Access))
    return out


def order_conflict(ctx: Context, outer: LoopSite, inner: LoopSite) -> Conflict | None:
    """Two accesses of the same element, one of them a write, by
    iterations of the pair (outer, inner) in opposite directions
    (``outer`` earlier and ``inner`` later in one, the reverse in the
    other): swapping or tiling the pair would run them in the other order.
    Accumulations of one reduction into its element are exempt."""

    def opposite(p, q):
        return (p[0] - q[0]) * (p[1] - q[1]) < 0

    return _conflict(ctx, outer, inner, opposite, (outer.loop.var, inner.loop.var), exempt_reductions=True)


def parallel_conflict(ctx: Context, outer: LoopSite, inner: LoopSite) -> Conflict | None:
    """Two accesses of the same element, one of them a write, by different
    iterations of the inner loop: with the inner loop parallel and moved
    outside the outer one, they would run at once (before, the serial outer
    loop may have kept them apart)."""

    def different_inner(p, q):
        return p[1] != q[1]

    return _conflict(ctx, outer, inner, different_inner, (inner.loop.var,), exempt_reductions=False)


def _conflict(ctx: Context, outer: LoopSite, inner: LoopSite, related, pinned_any: tuple[str, ...],
              exempt_reductions: bool) -> Conflict | None:
    infos = [ctx.analysis.equations[k] for k in inner.equations]
    uses = [u for info in infos for u in _uses(info)]
    written = {u.access.tensor for u in uses if u.write}
    by_tensor: dict[str, list[_Use]] = {}
    for u in uses:
        if u.access.tensor in written:
            by_tensor.setdefault(u.access.tensor, []).append(u)
    a, b = outer.loop, inner.loop
    for tensor, tensor_uses in by_tensor.items():
        for k, x in enumerate(tensor_uses):
            for y in tensor_uses[k:]:
                if not (x.write or y.write):
                    continue
                if exempt_reductions and x.info is y.info and x.accumulates and y.accumulates:
                    continue  # reassociating a reduction
                if _same_affine_element_pins(x, y, outer, pinned_any):
                    continue
                found = _find_pair(x, y, outer, a, b, related)
                if found != ():
                    return Conflict(tensor, x, y, found)
    return None


def _inner_loops(use: _Use, outer: LoopSite) -> tuple[A.Loop, ...]:
    """The loops of the pair and those inside it, around ``use``."""
    return use.info.loops[outer.depth:]


def _same_affine_element_pins(x: _Use, y: _Use, outer: LoopSite, pinned_any: tuple[str, ...]) -> bool:
    """Whether two accesses with the same affine indices can only reach the
    same element with equal values of one of the loops ``pinned_any``
    (the loops outside the pair are equal at both; those of the pair and
    inside it are free). A proof when True; False proves nothing."""
    if x.access.indices != y.access.indices:
        return False
    forms = [affine.linearize(i) for i in x.access.indices or ()]
    if any(f is None for f in forms):
        return False
    ranges: dict[str, affine.Range] = {}
    for loop in _inner_loops(x, outer) + _inner_loops(y, outer):
        lo, hi = loop.start, loop.start + loop.extent - 1
        if loop.var in ranges:  # the same name in two nests: cover both
            lo, hi = min(lo, ranges[loop.var][0]), max(hi, ranges[loop.var][1])
        ranges[loop.var] = (lo, hi)
    return any(affine.separates(forms, var, ranges) for var in pinned_any)


#: Most iteration points enumerated per access, and pairs of points
#: compared, when the cheap proof does not apply.
MAX_POINTS = 1 << 16
MAX_PAIRS = 1 << 20


def _find_pair(x: _Use, y: _Use, outer: LoopSite, a: A.Loop, b: A.Loop, related):
    """Iterations ``p`` of ``x`` and ``q`` of ``y`` with equal values of the
    loops outside the pair that reach the same element and for which
    ``related((a_p, b_p), (a_q, b_q))`` holds, as ``((a_p, b_p), (a_q, b_q),
    element)``; ``()`` when there are none; None when they cannot be
    enumerated."""
    import numpy as np

    outer_loops = outer.outer
    names = set()
    for use in (x, y):
        for index in use.access.indices or ():
            names |= affine.index_vars(index)
        if use.info.equation.predicate is not None:
            names |= affine.index_vars(use.info.equation.predicate)
    shared = [l for l in outer_loops if l.var in names]
    sides = []
    for use in (x, y):
        own = set()
        for index in use.access.indices or ():
            own |= affine.index_vars(index)
        guard = use.info.equation.predicate
        if guard is not None:
            own |= affine.index_vars(guard)
        rest = [l for l in _inner_loops(use, outer)[2:] if l.var in own]
        loops = shared + [a, b] + rest
        if affine.Space.size_of(loops) > MAX_POINTS:
            return None
        space = affine.Space(loops)
        columns = [space.full(space.axes[l.var]) for l in shared]
        for index in use.access.indices or ():
            values = space.evaluate(index)
            if values is None:
                return None
            columns.append(space.full(values))
        keys = np.stack(columns, axis=1) if columns else np.zeros((space.size, 0), dtype=np.int64)
        pair = np.stack([space.full(space.axes[a.var]), space.full(space.axes[b.var])], axis=1)
        if guard is not None:
            mask = space.evaluate(guard)
            if mask is not None:  # a guard that reads tensors: every iteration may run
                mask = space.full(mask).astype(bool)
                keys, pair = keys[mask], pair[mask]
        sides.append((keys, pair))
    (keys1, pair1), (keys2, pair2) = sides
    if len(keys1) == 0 or len(keys2) == 0:
        return ()
    _, group = np.unique(np.concatenate([keys1, keys2]), axis=0, return_inverse=True)
    group = group.reshape(-1)
    g1, g2 = group[: len(keys1)], group[len(keys1):]
    counts1 = np.bincount(g1, minlength=group.max() + 1)
    per_y = counts1[g2]
    total = int(per_y.sum())
    if total > MAX_PAIRS:
        return None
    if total == 0:
        return ()
    order1 = np.argsort(g1, kind="stable")
    starts1 = np.cumsum(counts1) - counts1
    y_idx = np.repeat(np.arange(len(g2)), per_y)
    offsets = np.arange(total) - np.repeat(np.cumsum(per_y) - per_y, per_y)
    x_idx = order1[starts1[g2[y_idx]] + offsets]
    p, q = pair1[x_idx], pair2[y_idx]
    hits = np.nonzero(related((p[:, 0], p[:, 1]), (q[:, 0], q[:, 1])))[0]
    if hits.size == 0:
        return ()
    h = hits[0]
    element = tuple(int(v) for v in keys1[x_idx[h]][len(shared):])
    return (int(p[h, 0]), int(p[h, 1])), (int(q[h, 0]), int(q[h, 1])), element

"""Fuse a nest with the next one over their common outer loops.

Two consecutive nests that run the same loops (same kinds, extents and
starts; the variables may differ) become one nest whose body holds both
bodies in order. Fusing only the outer loops of the two is allowed: the
loops below stay as two nests inside the fused ones. Fusion lets the second
computation read what the first wrote while it is still in cache or
registers, and turns two passes over the data into one.

It requires: a next nest right after this one in the same body, whose first
loops down to the fused one match these loops in kind, extent and start; no
element that one nest writes and the other touches is touched by the
second nest at an earlier iteration of the fused loops than by the first
(an iteration of the fused loops must find everything it reads from the
first nest complete), with parallel, vectorized and thread-bound fused loops
touching such an element only in one iteration, and a temporary used by
the two nests alone passed within one iteration (TVM allocates such a
temporary inside the fused loops); when a fused loop is bound to a thread
axis, no other thread-bound loop left inside either nest (threads of one
kernel do not wait for each other between the two parts); and no
temporary used by the two nests alone written and read inside a fused
vectorized loop (TVM 0.27 computes it wrong).

This module also holds what operator-level steps share: where a nest sits
in the program, renaming loop variables, and ``order_conflict``, the
dependence test that decides whether two groups of equations may run in an
order other than the written one (fusion, fission, and the temporaries of
common subexpression elimination use it).

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

from dataclasses import dataclass, replace

from leir import affine
from leir import ast as A
from leir.printer import print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg
from leir.transforms.rewrite import fresh_name, map_equation, names_in, substitute

ID = "operator_fusion"
TITLE = "Fuse operators"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "operator_fusion"


class NoNextNest(NotApplicable):
    code = "operator_fusion-no-next-nest"


class HeadersDiffer(NotApplicable):
    code = "operator_fusion-headers-differ"


class DependenceViolated(NotApplicable):
    code = "operator_fusion-dependence"


class UnsynchronizedThreads(NotApplicable):
    code = "operator_fusion-unsynchronized-threads"


class VectorizedTemporary(NotApplicable):
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
    kind = {"L": "serial", "P": "parallel", "V": "vectorized", "U": "unrolled", "B": "thread-bound"}[loop.kind]
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


# ============================================================ shared helpers


@dataclass(frozen=True)
class NestPlace:
    #: The unit index, then body indices: where the nest sits.
    path: tuple[int, ...]
    #: The loops of the nests around it, outermost first.
    outer: tuple[A.Loop, ...]


def places_of(ctx: Context) -> dict[int, NestPlace]:
    """``nest_places`` of the context's program, once per program."""
    return ctx.memo("nest_places", lambda: nest_places(ctx.program))


def nest_places(program: A.Program) -> dict[int, NestPlace]:
    """Where every nest is, keyed by ``id(nest)``."""
    out: dict[int, NestPlace] = {}

    def visit(nest: A.Nest, path: tuple[int, ...], outer: tuple[A.Loop, ...]) -> None:
        out[id(nest)] = NestPlace(path, outer)
        for i, item in enumerate(nest.body):
            if isinstance(item, A.Nest):
                visit(item, path + (i,), outer + nest.loops)

    for u, unit in enumerate(program.units):
        visit(unit, (u,), ())
    return out


def body_at(program: A.Program, path: tuple[int, ...]) -> tuple[A.Item, ...]:
    """The items among which the item at ``path`` sits (the units for a
    path of length 1)."""
    if len(path) == 1:
        return program.units
    node: A.Item = program.units[path[0]]
    for i in path[1:-1]:
        assert isinstance(node, A.Nest)
        node = node.body[i]
    assert isinstance(node, A.Nest)
    return node.body


def sibling(program: A.Program, path: tuple[int, ...], offset: int) -> A.Item | None:
    """The item ``offset`` places after (or before) the one at ``path``."""
    items = body_at(program, path)
    k = path[-1] + offset
    return items[k] if 0 <= k < len(items) else None


def replace_items(program: A.Program, path: tuple[int, ...], count: int, items: tuple[A.Item, ...]) -> A.Program:
    """The program with ``count`` items starting at ``path`` replaced by
    ``items``. Top-level items must be nests (a bare equation is wrapped)."""
    k = path[-1]
    if len(path) == 1:
        units = tuple(i if isinstance(i, A.Nest) else A.Nest((), (i,), None, bracketed=False) for i in items)
        return replace(program, units=program.units[:k] + units + program.units[k + count:])

    def inside(nest: A.Nest, rest: tuple[int, ...]) -> A.Nest:
        if len(rest) == 1:
            return replace(nest, body=nest.body[:k] + items + nest.body[k + count:])
        child = nest.body[rest[0]]
        assert isinstance(child, A.Nest)
        return replace(nest, body=nest.body[:rest[0]] + (inside(child, rest[1:]),) + nest.body[rest[0] + 1:])

    u = path[0]
    return replace(program, units=program.units[:u] + (inside(program.units[u], path[1:]),) + program.units[u + 1:])


def equations_under(ctx: Context, path: tuple[int, ...]) -> list[EquationInfo]:
    """The equations at or under the item at ``path``, in program order."""
    n = len(path)
    return [info for info in ctx.analysis.equations if info.site.path[:n] == path]


def rename_vars(item: A.Item, mapping: dict[str, str]) -> A.Item:
    """``item`` with loop variables renamed (loops and uses, all at once)."""
    if not mapping:
        return item
    values = {old: A.Var(new) for old, new in mapping.items()}
    if isinstance(item, A.Equation):
        return map_equation(item, lambda e: substitute(e, values))
    loops = tuple(replace(l, var=mapping.get(l.var, l.var)) for l in item.loops)
    return replace(item, loops=loops, body=tuple(rename_vars(b, mapping) for b in item.body))


def with_leading_comments(item: A.Item, comments: A.Comments) -> A.Item:
    """``item`` with ``comments.before`` added above its first line."""
    if not comments.before:
        return item

    def merge(c: A.Comments) -> A.Comments:
        return A.Comments(comments.before + c.before, c.after)

    if isinstance(item, A.Equation):
        return replace(item, comments=merge(item.comments))
    if item.loops:
        return replace(item, loops=(replace(item.loops[0], comments=merge(item.loops[0].comments)),) + item.loops[1:])
    return replace(item, open_comments=merge(item.open_comments))


def make_nest(loops: tuple[A.Loop, ...], body: tuple[A.Item, ...], end: A.Comments = A.NO_COMMENTS) -> A.Nest:
    """``loops [ body ]``, written as one nest when the body is a single
    nest (``L i [ L j [...] ]`` is ``L i L j [...]``)."""
    if len(body) == 1 and isinstance(body[0], A.Nest) and body[0].loops and body[0].bracketed:
        inner = body[0]
        moved = inner.loops[0].comments
        inner_loops = (replace(inner.loops[0], comments=A.NO_COMMENTS),) + inner.loops[1:] if loops else inner.loops
        merged_loops = loops + inner_loops
        if loops and moved != A.NO_COMMENTS:
            first = merged_loops[0]
            merged_loops = (replace(first, comments=A.Comments(first.comments.before + moved.before,
                                                               first.comments.after or moved.after)),) + merged_loops[1:]
        after = end.after if end.after is not None else inner.end_comments.after
        return A.Nest(merged_loops, inner.body, None, A.Comments(inner.end_comments.before, after))
    return A.Nest(loops, body, None, end)


def fresh_loops(loops: tuple[A.Loop, ...]) -> tuple[A.Loop, ...]:
    """Copies of loop headers without their source positions and comments."""
    return tuple(A.Loop(l.kind, l.extent, l.var, l.start) for l in loops)


# ------------------------------------------------------- a TVM limitation

#: Measured with TVM 0.27 (llvm): TVM allocates a temporary inside the
#: innermost loop around all its accesses; when that loop is (or is inside)
#: a vectorized loop, the values one equation writes there and another
#: reads come out wrong. Steps that would create that pattern are not
#: offered. (A temporary also used outside the loop is allocated outside
#: and computes correctly.)
VECTOR_TEMPORARY_BUG = ("TVM 0.27 computes wrong values for a temporary written and read inside one vectorized "
                        "loop and used nowhere else (it allocates the temporary inside the loop)")


def shared_temporary(ctx: Context, first: list[EquationInfo], second: list[EquationInfo]) -> str | None:
    """A temporary that one group writes and the other reads, used by no
    other equation, if any."""
    inside = {i.index for i in first} | {i.index for i in second}

    def written(infos):
        return {i.equation.lhs.tensor for i in infos}

    def read(infos):
        return {t.access.tensor for i in infos for t in touches(i) if not t.is_write}

    for a, b in ((first, second), (second, first)):
        for name in sorted(written(a) & read(b)):
            if ctx.analysis.tensors[name].role == "tmp" and all(
                    info.index in inside for info in ctx.analysis.equations if _touches_tensor(info, name)):
                return name
    return None


# ---------------------------------------------------------------- dependences

#: Loop kinds whose iterations run at the same time (or as one vector).
PARALLEL_KINDS = frozenset({"P", "V", "B"})
#: Iteration points enumerated at most for one tensor of one test, when the
#: affine test cannot decide (a few milliseconds of NumPy).
ENUMERATION_LIMIT = 1 << 17


@dataclass(frozen=True)
class Touch:
    """One access of an equation to a tensor element."""

    info: EquationInfo
    access: A.Access
    is_write: bool
    #: The combiner when the access is the written element of a reduction
    #: shape (``C = C + e``: both the write and the read of ``C``).
    accumulates: str | None


@dataclass(frozen=True)
class Conflict:
    """Two accesses to ``tensor`` whose order a rewrite would change."""

    tensor: str
    first: A.Access
    second: A.Access
    #: What happens, in words ("writes M_{3} at j=99 ... reads it at j=0").
    what: str
    span: A.Span | None = None

    def describe(self, first_name: str, second_name: str) -> str:
        return self.what.replace("<first>", first_name).replace("<second>", second_name)


def touches(info: EquationInfo) -> list[Touch]:
    """The element accesses of an equation: its write, then its reads (the
    value's and the guard's)."""
    eq = info.equation
    combiner = info.combiner if info.kind in ("reduce", "update") else None
    out = [Touch(info, eq.lhs, True, combiner)]
    reads: list[A.Access] = [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
    if eq.predicate is not None:
        reads += [n for n in A.walk(eq.predicate) if isinstance(n, A.Access)]
    for r in reads:
        own = combiner is not None and r.tensor == eq.lhs.tensor and r.indices == eq.lhs.indices
        out.append(Touch(info, r, False, combiner if own else None))
    return out


def order_conflict(ctx: Context, outer: tuple[A.Loop, ...], first: list[EquationInfo], second: list[EquationInfo],
                   first_time: tuple[A.Loop, ...], second_time: tuple[A.Loop, ...],
                   only: frozenset[str] | None = None) -> Conflict | None:
    """Whether running ``first`` and ``second`` interleaved over shared
    *time* loops keeps every dependence between them.

    Both groups sit inside the ``outer`` loops (the same loops for both).
    Below those, each group's equations are inside its own copy of the time
    loops (``first_time`` and ``second_time`` match position by position).
    The order tested: for equal outer iterations, an iteration of the time
    loops runs the first group's part, then the second's. Every pair of
    accesses to one element, one of them a write, must then still have the
    first group's access first: its time must not come after the second's,
    and where they differ first at a parallel, vectorized or thread-bound
    loop the two are not ordered at all. Accumulations with one combiner
    (``C += a`` in one group, ``C += b`` in the other) may be reordered; the
    implied initial value must still come first.

    None when every dependence holds (proved by the affine forms of the
    indices, or by enumerating the iterations); otherwise the first broken
    one, or one that could not be proved. ``only`` limits the test to the
    dependences through some tensors.
    """
    if not first_time:
        return None  # both groups in one iteration of everything: the written order
    by_tensor: dict[str, tuple[list[Touch], list[Touch]]] = {}
    for side, infos in enumerate((first, second)):
        for info in infos:
            for t in touches(info):
                by_tensor.setdefault(t.access.tensor, ([], []))[side].append(t)
    tester = _OrderTest(ctx, outer, first_time, second_time)
    inside = {info.index for info in first} | {info.index for info in second}
    for tensor, (ones, twos) in by_tensor.items():
        if not ones or not twos or (only is not None and tensor not in only):
            continue
        if not any(t.is_write for t in ones) and not any(t.is_write for t in twos):
            continue
        local = ctx.analysis.tensors[tensor].role == "tmp" and all(
            info.index in inside for info in ctx.analysis.equations if _touches_tensor(info, tensor))
        conflict = tester.tensor(tensor, ones, twos, local)
        if conflict is not None:
            return conflict
    return None


class _OrderTest:
    def __init__(self, ctx: Context, outer, first_time, second_time):
        self.ctx = ctx
        self.outer = tuple(outer)
        self.time = (tuple(first_time), tuple(second_time))
        self.depth = len(first_time)
        parallel = [t for t, l in enumerate(first_time) if l.kind in PARALLEL_KINDS]
        #: Time positions up to the last parallel one must agree exactly.
        self.parallel_depth = parallel[-1] + 1 if parallel else 0

    def tensor(self, tensor: str, ones: list[Touch], twos: list[Touch], local: bool = False) -> Conflict | None:
        combiners = {t.accumulates for t in ones + twos}
        commutative = len(combiners) == 1 and None not in combiners
        writes1 = [t for t in ones if t.is_write]
        writes2 = [t for t in twos if t.is_write]
        if commutative:
            inits = [t for t in writes1 if t.info.kind == "reduce"]
            checks = [("first", inits, twos), ("parallel", ones, twos)]
        else:
            checks = [("last", writes1, twos), ("last", ones, writes2)]
        if local:
            # TVM allocates a temporary at the innermost loop around all its
            # accesses, so one used only inside these loops lives for one
            # iteration of them: values must not pass between iterations.
            checks += [("same", writes1, twos), ("same", ones, writes2)]
        for kind, left, right in checks:
            if not left or not right or (kind == "parallel" and not self.parallel_depth):
                continue
            pending = [(a, b) for a in left for b in right if not self.same_iteration(a, b)]
            if not pending:
                continue
            conflict = self.enumerate(tensor, kind, sorted({id(a): a for a, _ in pending}.values(), key=_order),
                                      sorted({id(b): b for _, b in pending}.values(), key=_order))
            if conflict is not None:
                return conflict
        return None

    # -- the affine test: the two accesses meet only in one time iteration

    def same_iteration(self, a: Touch, b: Touch) -> bool:
        """A proof that whenever ``a`` and ``b`` touch the same element (in
        one outer iteration) they do it in the same time iteration, or never
        touch the same element."""
        fa = _forms(a.access)
        fb = _forms(b.access)
        if fa is None or fb is None or len(fa) != len(fb):
            return False
        ranges: dict[str, affine.Range] = {}
        rename_a = self._names(a.info, 0, ranges)
        rename_b = self._names(b.info, 1, ranges)
        widths = [l.extent - 1 for l in self.time[0]]
        rows = []
        for f, g in zip(fa, fb):
            coeffs: dict[str, int] = {}
            for v, c in f.coeffs:
                name = rename_a.get(v)
                if name is None:
                    return False
                if isinstance(name, int):
                    coeffs[f"#p{name}"] = coeffs.get(f"#p{name}", 0) + c
                else:
                    coeffs[name] = coeffs.get(name, 0) + c
            for v, c in g.coeffs:
                name = rename_b.get(v)
                if name is None:
                    return False
                if isinstance(name, int):
                    coeffs[f"#q{name}"] = coeffs.get(f"#q{name}", 0) - c
                else:
                    coeffs[name] = coeffs.get(name, 0) - c
            # Equal coefficients of p_t and q_t make the row a_t*(p_t - q_t) + rest.
            for t in range(self.depth):
                if coeffs.get(f"#p{t}", 0) + coeffs.get(f"#q{t}", 0) != 0:
                    return False
            rest = affine.Affine.of({v: c for v, c in coeffs.items() if not v.startswith("#")}, f.const - g.const)
            rows.append(([coeffs.get(f"#p{t}", 0) for t in range(self.depth)], rest.bounds(ranges)))
        unpinned = {t for t in range(self.depth) if widths[t] > 0}
        changed = True
        while changed and unpinned:
            changed = False
            for a_row, (lo, hi) in rows:
                swing = sum(abs(a_row[t]) * widths[t] for t in unpinned)
                if lo - swing > 0 or hi + swing < 0:
                    return True  # never the same element
                r = max(abs(lo), abs(hi))
                for t in list(unpinned):
                    c = abs(a_row[t])
                    if c and c > swing - c * widths[t] + r:
                        unpinned.discard(t)
                        changed = True
        return not unpinned

    def _names(self, info: EquationInfo, side: int, ranges: dict[str, affine.Range]) -> dict[str, str | int]:
        """Loop variable -> its name in the test: outer loops keep theirs
        (one value for both sides), time loops become their position, the
        others get a name private to the side."""
        out: dict[str, str | int] = {}
        time = self.time[side]
        for loop in info.loops:
            if any(loop is o for o in self.outer):
                out[loop.var] = loop.var
                ranges[loop.var] = (loop.start, loop.start + loop.extent - 1)
            elif any(loop is t for t in time):
                out[loop.var] = next(k for k, t in enumerate(time) if t is loop)
            else:
                name = f"{side}:{loop.var}"
                out[loop.var] = name
                ranges[name] = (loop.start, loop.start + loop.extent - 1)
        return out

    # -- the exact test: enumerate the iterations

    def enumerate(self, tensor: str, kind: str, left: list[Touch], right: list[Touch]) -> Conflict | None:
        np = affine._numpy()
        shape = self.ctx.analysis.tensors[tensor].shape
        sides = []
        for side, group in ((0, left), (1, right)):
            parts = [self.points(t, side, shape) for t in group]
            if any(p is None for p in parts):
                return self.unknown(tensor, left[0], right[0])
            keys = np.concatenate([p[0] for p in parts])
            ranks = np.concatenate([p[1] for p in parts])
            pranks = np.concatenate([p[2] for p in parts])
            which = np.concatenate([np.full(p[0].size, k) for k, p in enumerate(parts)])
            sides.append((keys, ranks, pranks, which, group))
        (k1, r1, p1, w1, g1), (k2, r2, p2, w2, g2) = sides
        if k1.size == 0 or k2.size == 0:
            return None
        u1, first1, last1 = _group(np, k1, r1)
        u2, first2, last2 = _group(np, k2, r2)
        common, i1, i2 = np.intersect1d(u1, u2, assume_unique=True, return_indices=True)
        if common.size == 0:
            return None
        if kind == "same":
            lo1, hi1, lo2, hi2 = r1[first1[i1]], r1[last1[i1]], r2[first2[i2]], r2[last2[i2]]
            bad = (lo1 != hi1) | (lo2 != hi2) | (lo1 != lo2)
            a_at, b_at = np.where(hi1 != lo2, last1[i1], first1[i1]), first2[i2]
        elif kind == "last":
            bad = r1[last1[i1]] > r2[first2[i2]]
            a_at, b_at = last1[i1], first2[i2]
        elif kind == "first":
            bad = r1[first1[i1]] > r2[first2[i2]]
            a_at, b_at = first1[i1], first2[i2]
        else:
            bad = np.zeros(common.size, dtype=bool)
            a_at, b_at = first1[i1], first2[i2]
        if self.parallel_depth:
            pmin1, pmax1 = _spread(np, k1, p1, u1)
            pmin2, pmax2 = _spread(np, k2, p2, u2)
            split = ((pmin1[i1] != pmax1[i1]) | (pmin2[i2] != pmax2[i2]) | (pmin1[i1] != pmin2[i2]))
            if split.any():
                n = int(np.argmax(split))
                if not bad[:n + 1].any():
                    return self.parallel_conflict(tensor, shape, int(common[n]), g1, g2, k1, w1, k2, w2)
        if bad.any():
            n = int(np.argmax(bad))
            a, b = int(a_at[n]), int(b_at[n])
            return self.order_conflict(tensor, shape, int(common[n]), g1[int(w1[a])], int(r1[a]),
                                       g2[int(w2[b])], int(r2[b]), kind)
        return None

    def points(self, touch: Touch, side: int, shape: tuple[int, ...]):
        """(element keys, time ranks, parallel ranks) of every iteration of
        an access, or None when they cannot be enumerated."""
        np = affine._numpy()
        info = touch.info
        eq = info.equation
        names = set()
        for index in touch.access.indices or ():
            names |= affine.index_vars(index)
        guard = eq.predicate
        if guard is not None:
            names |= affine.index_vars(guard)
        time = self.time[side]
        # A time loop the access does not depend on touches the same
        # elements at every iteration: its first and last iterations give
        # the earliest and latest times, so only those two are enumerated.
        stride = {l.var: 1 for l in time}
        loops = []
        for l in info.loops:
            if any(l is t for t in time) and l.var not in names and l.extent > 2:
                stride[l.var] = l.extent - 1
                loops.append(A.Loop(l.kind, 2, l.var, l.start))
            elif l.var in names or any(l is o for o in self.outer) or any(l is t for t in time):
                loops.append(l)
        if affine.Space.size_of(loops) > ENUMERATION_LIMIT:
            return None
        space = affine.Space(loops)
        columns = []
        for index in touch.access.indices or ():
            values = space.evaluate(index)
            if values is None:
                return None
            columns.append(space.full(values))
        mask = None
        if guard is not None:
            m = space.evaluate(guard)
            if m is None:
                # A guard that reads tensors: every iteration counts, which
                # over-approximates the accesses -- except for the first
                # accumulation, which must not be over-approximated.
                if touch.is_write and info.kind == "reduce":
                    return None
            else:
                mask = space.full(m).astype(bool)
        key = np.zeros(space.size, dtype=np.int64)
        for loop in self.outer:
            key = key * loop.extent + (space.full(space.axes[loop.var]) - loop.start)
        for d, column in enumerate(columns):
            key = key * max(shape[d], 1) + np.clip(column, 0, max(shape[d] - 1, 0))
        rank = np.zeros(space.size, dtype=np.int64)
        prank = np.zeros(space.size, dtype=np.int64)
        for t, loop in enumerate(time):
            rank = rank * loop.extent + (space.full(space.axes[loop.var]) - loop.start) * stride[loop.var]
            if t + 1 == self.parallel_depth:
                prank = rank.copy()
        if mask is not None:
            key, rank, prank = key[mask], rank[mask], prank[mask]
        return key, rank, prank

    # -- messages

    def decode(self, key: int, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        element = []
        for extent in reversed(shape):
            extent = max(extent, 1)
            element.append(key % extent)
            key //= extent
        outer = []
        for loop in reversed(self.outer):
            outer.append(key % loop.extent + loop.start)
            key //= loop.extent
        return tuple(reversed(outer)), tuple(reversed(element))

    def when(self, side: int, rank: int) -> str:
        values = []
        for loop in reversed(self.time[side]):
            values.append(f"{loop.var}={rank % loop.extent + loop.start}")
            rank //= loop.extent
        return ", ".join(reversed(values))

    def element_text(self, tensor: str, key: int, shape: tuple[int, ...]) -> str:
        outer, element = self.decode(key, shape)
        text = tensor + ("_{" + ",".join(map(str, element)) + "}" if shape else "")
        if outer:
            text += " (in iteration " + ", ".join(f"{l.var}={v}" for l, v in zip(self.outer, outer)) + ")"
        return text

    def order_conflict(self, tensor, shape, key, a: Touch, ra: int, b: Touch, rb: int, kind: str) -> Conflict:
        element = self.element_text(tensor, key, shape)
        verb_a = "writes" if a.is_write else "reads"
        verb_b = "writes" if b.is_write else "reads"
        if kind == "first":
            what = (f"<second> would update {element} at {self.when(1, rb)} before <first> starts it "
                    f"(with its initial value) at {self.when(0, ra)}")
        elif kind == "same":
            what = (f"<second> {verb_b} {element} at {self.when(1, rb)} and <first> {verb_a} it at {self.when(0, ra)}: "
                    f"{tensor} is a temporary used only inside these loops, which TVM allocates inside them, so its "
                    f"values cannot pass from one iteration to another")
        else:
            what = (f"<second> {verb_b} {element} at {self.when(1, rb)}, before <first> {verb_a} it at "
                    f"{self.when(0, ra)}")
        return Conflict(tensor, a.access, b.access, what, b.access.span or a.access.span)

    def parallel_conflict(self, tensor, shape, key, g1, g2, k1, w1, k2, w2) -> Conflict:
        np = affine._numpy()
        a = g1[int(w1[int(np.argmax(k1 == key))])]
        b = g2[int(w2[int(np.argmax(k2 == key))])]
        loops = ", ".join(l.var for l in self.time[0][: self.parallel_depth] if l.kind in PARALLEL_KINDS)
        what = (f"{self.element_text(tensor, key, shape)} is touched by <first> and <second> in different iterations of "
                f"the parallel loop{'s' if ',' in loops else ''} {loops}, which run in no fixed order")
        return Conflict(tensor, a.access, b.access, what, b.access.span or a.access.span)

    def unknown(self, tensor: str, a: Touch, b: Touch) -> Conflict:
        what = (f"could not prove that <first> finishes with {tensor} before <second> needs it: the indices "
                f"{_text(a.access)} and {_text(b.access)} are not comparable by their affine forms and there are too "
                f"many iterations to enumerate")
        return Conflict(tensor, a.access, b.access, what, b.access.span or a.access.span)


def _touches_tensor(info: EquationInfo, tensor: str) -> bool:
    return any(t.access.tensor == tensor for t in touches(info))


def _order(t: Touch) -> tuple[int, int]:
    return (t.info.index, 0 if t.is_write else 1)


def _forms(access: A.Access) -> list[affine.Affine] | None:
    forms = []
    for index in access.indices or ():
        f = affine.linearize(index)
        if f is None:
            return None
        forms.append(f)
    return forms


def _group(np, keys, ranks):
    """Unique keys, and for each the position of its smallest and of its
    largest rank."""
    order = np.lexsort((ranks, keys))
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], sorted_keys.size] - 1
    return sorted_keys[starts], order[starts], order[ends]


def _spread(np, keys, values, unique):
    """Smallest and largest value per key of ``unique`` (sorted)."""
    order = np.lexsort((values, keys))
    sorted_keys = keys[order]
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    ends = np.r_[starts[1:], sorted_keys.size] - 1
    return sorted_values[starts], sorted_values[ends]


def _text(access: A.Access) -> str:
    return print_expr(access, declared=frozenset({access.tensor}))

"""The dependence test of operator-level steps: ``order_conflict`` decides
whether two groups of equations may run interleaved over shared loops, in
an order other than the written one (operator fusion and fission, tensor
concatenation, dead code elimination and the temporaries of common
subexpression elimination use it), and ``touches``, the element accesses of
an equation it works on.

Moved out of ``operator_fusion``, which imports these back.
"""

from __future__ import annotations

from dataclasses import dataclass

from leir import affine
from leir import ast as A
from leir.printer import access_text
from leir.semantics import EquationInfo
from leir.transforms.base import Context


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
                f"{access_text(a.access)} and {access_text(b.access)} are not comparable by their affine forms and there are too "
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

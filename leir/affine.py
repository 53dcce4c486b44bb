"""Index expressions as affine forms, their bounds over loop ranges, and
exact answers by enumerating small iteration spaces.

An index like ``i*32+j-1`` is ``{i: 32, j: 1} + (-1)``. Bounds of an affine
form over independent loop ranges are exact; ``//`` and ``%`` (produced by
loop fusion) are bounded by interval arithmetic, which may over-estimate.
Where an over-estimate is not good enough (a guard, a ``%`` that wraps, a
race between iterations), ``Space`` enumerates the iteration points with
NumPy when there are at most ``MAX_POINTS`` of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from leir import ast as A

if TYPE_CHECKING:
    import numpy as np

Range = tuple[int, int]  # inclusive (lo, hi)

#: Most iteration points one check enumerates: 2^20 int64 values are 8 MB
#: per array and take a few milliseconds to evaluate and sort.
MAX_POINTS = 1 << 20
#: Values beyond this are not enumerated: products could overflow int64.
_MAX_MAGNITUDE = 1 << 62


@dataclass(frozen=True)
class Affine:
    coeffs: tuple[tuple[str, int], ...]  # sorted by variable name, no zeros
    const: int

    @staticmethod
    def of(coeffs: dict[str, int], const: int) -> "Affine":
        return Affine(tuple(sorted((v, c) for v, c in coeffs.items() if c != 0)), const)

    def coeff(self, var: str) -> int:
        for v, c in self.coeffs:
            if v == var:
                return c
        return 0

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.coeffs)

    def bounds(self, ranges: dict[str, Range]) -> Range:
        lo = hi = self.const
        for v, c in self.coeffs:
            vlo, vhi = ranges[v]
            if c > 0:
                lo += c * vlo
                hi += c * vhi
            else:
                lo += c * vhi
                hi += c * vlo
        return lo, hi


def linearize(expr: A.Expr) -> Affine | None:
    """The affine form of an integer index expression, or None when it is
    not affine (``//``, ``%``, products of variables, calls...)."""
    if type(expr) is A.Var:  # most indices: one loop variable
        return Affine(((expr.name, 1),), 0)
    form = _lin(expr)
    if form is None:
        return None
    coeffs, const = form
    return Affine.of(coeffs, const)


def _lin(e: A.Expr) -> tuple[dict[str, int], int] | None:
    if isinstance(e, A.Num):
        return ({}, e.value) if isinstance(e.value, int) else None
    if isinstance(e, A.Var):
        return ({e.name: 1}, 0)
    if isinstance(e, A.Unary) and e.op == "-":
        inner = _lin(e.operand)
        if inner is None:
            return None
        return ({v: -c for v, c in inner[0].items()}, -inner[1])
    if isinstance(e, A.Binary) and e.op in ("+", "-", "*"):
        lhs, rhs = _lin(e.lhs), _lin(e.rhs)
        if lhs is None or rhs is None:
            return None
        if e.op == "*":
            if lhs[0] and rhs[0]:
                return None
            if not lhs[0]:
                lhs, rhs = rhs, lhs
            k = rhs[1]
            return ({v: c * k for v, c in lhs[0].items()}, lhs[1] * k)
        sign = 1 if e.op == "+" else -1
        coeffs = dict(lhs[0])
        for v, c in rhs[0].items():
            coeffs[v] = coeffs.get(v, 0) + sign * c
        return (coeffs, lhs[1] + sign * rhs[1])
    return None


def bounds(expr: A.Expr, ranges: dict[str, Range]) -> Range | None:
    """Inclusive bounds of an integer expression over the loop ranges, or
    None when they cannot be computed (unknown variable, non-integer...).
    Exact for affine expressions, an over-estimate for some others."""
    form = linearize(expr)
    if form is not None:
        if not form.variables <= ranges.keys():
            return None
        return form.bounds(ranges)
    if isinstance(expr, A.Binary) and expr.op in ("//", "%", "+", "-", "*"):
        lhs = bounds(expr.lhs, ranges)
        rhs = bounds(expr.rhs, ranges)
        if lhs is None or rhs is None:
            return None
        if expr.op == "+":
            return lhs[0] + rhs[0], lhs[1] + rhs[1]
        if expr.op == "-":
            return lhs[0] - rhs[1], lhs[1] - rhs[0]
        if expr.op == "*":
            products = [a * b for a in lhs for b in rhs]
            return min(products), max(products)
        if rhs[0] != rhs[1] or rhs[0] <= 0:
            return None  # only division by a positive constant is bounded
        k = rhs[0]
        if expr.op == "//":
            return lhs[0] // k, lhs[1] // k
        if lhs[0] >= 0 and lhs[1] < k:
            return lhs  # no wrap-around
        if lhs[0] // k == lhs[1] // k:
            return lhs[0] % k, lhs[1] % k
        return 0, k - 1
    if isinstance(expr, A.Unary) and expr.op == "-":
        inner = bounds(expr.operand, ranges)
        return None if inner is None else (-inner[1], -inner[0])
    return None


def loop_ranges(loops: tuple[A.Loop, ...] | list[A.Loop]) -> dict[str, Range]:
    return {l.var: (l.start, l.start + l.extent - 1) for l in loops}


def index_vars(expr: A.Expr) -> frozenset[str]:
    """The loop variables an expression names."""
    if type(expr) is A.Var:
        return frozenset((expr.name,))
    names = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, A.Var):
            names.add(e.name)
        elif isinstance(e, A.Binary):
            stack.append(e.lhs)
            stack.append(e.rhs)
        elif isinstance(e, A.Unary):
            stack.append(e.operand)
        elif isinstance(e, A.Call):
            stack.extend(e.args)
        elif isinstance(e, A.Access) and e.indices:
            stack.extend(e.indices)
    return frozenset(names)


def separates(forms: list[Affine], var: str, ranges: dict[str, Range]) -> bool:
    """Whether two points that differ in ``var`` always differ in the value
    of some form. ``var`` and the other variables in ``ranges`` are free
    (each point picks its own values); variables not in ``ranges`` are the
    same at both points and cancel out.

    A sufficient test (True is a proof, False proves nothing): a variable is
    pinned (equal at both points) when, in some form, its coefficient is
    larger than the widest swing of that form's other unpinned variables;
    pinning one variable can pin others, as in the mixed radix
    ``a*4+b`` (b < 4) or ``{v+j, j}``.
    """
    width = {x: hi - lo for x, (lo, hi) in ranges.items()}
    if width.get(var, 0) == 0:
        return True  # a single iteration cannot race with itself
    unpinned = {x for f in forms for x, _ in f.coeffs if x in width} | {var}
    changed = True
    while changed and var in unpinned:
        changed = False
        for f in forms:
            terms = [(x, abs(c)) for x, c in f.coeffs if x in unpinned]
            if not terms:
                continue
            swing = sum(c * width[x] for x, c in terms)
            for x, c in terms:
                if c > swing - c * width[x]:
                    unpinned.discard(x)
                    changed = True
    return var not in unpinned


# ------------------------------------------------- fused loops' digits
#
# A fused loop ``v`` of extent ``a*n`` appears in indices as ``v//n`` and
# ``v%n``, which are not affine in ``v``; but ``v`` is one-to-one with those
# two digits, and the indices are affine in them. Proofs about ``v`` (two
# iterations never write one element) then become proofs about the digits.


def digit_names(var: str) -> tuple[str, str]:
    """The names of ``var``'s high (``var//n``) and low (``var%n``) digits."""
    return f"{var}#hi", f"{var}#lo"


def digit_base(indices, var: str) -> int | None:
    """The ``n`` when ``var`` occurs in ``indices`` only as ``var//n`` and
    ``var%n`` with one literal ``n``; else None."""
    bases: set[int] = set()
    bare = False
    stack = list(indices)
    while stack:
        e = stack.pop()
        if isinstance(e, A.Binary):
            if (e.op in ("//", "%") and isinstance(e.lhs, A.Var) and e.lhs.name == var and isinstance(e.rhs, A.Num)
                    and isinstance(e.rhs.value, int) and not isinstance(e.rhs.value, bool)):
                bases.add(e.rhs.value)
                continue
            stack += [e.lhs, e.rhs]
        elif isinstance(e, A.Unary):
            stack.append(e.operand)
        elif isinstance(e, A.Call):
            stack.extend(e.args)
        elif isinstance(e, A.Var) and e.name == var:
            bare = True
    return bases.pop() if len(bases) == 1 and not bare else None


def with_digits(e: A.Expr, var: str) -> A.Expr:
    """``e`` with ``var//n`` as the variable ``var#hi`` and ``var%n`` as ``var#lo``."""
    hi, lo = digit_names(var)

    def go(x: A.Expr) -> A.Expr:
        if isinstance(x, A.Binary):
            if x.op in ("//", "%") and isinstance(x.lhs, A.Var) and x.lhs.name == var:
                return A.Var(hi if x.op == "//" else lo)
            return A.Binary(x.op, go(x.lhs), go(x.rhs))
        if isinstance(x, A.Unary):
            return A.Unary(x.op, go(x.operand))
        return x

    return go(e)


def split_digits(indices, loop: A.Loop) -> tuple[list[A.Expr], dict[str, Range]] | None:
    """``indices`` in the digits of ``loop`` and the digits' ranges, when the
    loop (from 0, extent a multiple of ``n``) appears only as ``v//n`` and
    ``v%n``; else None. A digit that is itself read as ``d//m`` and ``d%m``
    (a loop fused twice) is split again: the ranges are those of the final
    digits, every one of them a variable the indices are affine in."""
    work = [(loop.var, loop.start, loop.extent)]
    ranges: dict[str, Range] = {}
    indices = list(indices)
    split_any = False
    while work:
        var, start, extent = work.pop()
        n = digit_base(indices, var)
        if n is None or start != 0 or extent % n or not 1 < n < extent:
            if var != loop.var:
                ranges[var] = (start, start + extent - 1)
            continue
        split_any = True
        hi, lo = digit_names(var)
        indices = [with_digits(i, var) for i in indices]
        work += [(hi, 0, extent // n), (lo, 0, n)]
    return (indices, ranges) if split_any else None


def opaque_outer(e: A.Expr, free: set[str] | frozenset[str], names: dict) -> A.Expr:
    """``e`` with each ``//`` or ``%`` part that names none of the ``free``
    variables (``io//4`` of an outer fused loop) as a variable of its own,
    one name per distinct part (``names``): such a part is the same at two
    points that share the outer loops, so it cancels as an outer variable
    does, and the rest of the index stays affine."""
    if isinstance(e, A.Binary):
        if e.op in ("//", "%") and not (index_vars(e) & free):
            if e not in names:
                names[e] = f"#outer{len(names)}"
            return A.Var(names[e])
        return A.Binary(e.op, opaque_outer(e.lhs, free, names), opaque_outer(e.rhs, free, names))
    if isinstance(e, A.Unary):
        return A.Unary(e.op, opaque_outer(e.operand, free, names))
    return e


def separates_iterations(indices, loop: A.Loop, ranges: dict[str, Range]) -> bool:
    """Whether two iterations of ``loop`` (the other variables in ``ranges``
    free, every other variable equal at both) never give equal ``indices``:
    ``separates`` on the affine forms, with non-affine parts of the equal
    variables made opaque, and for a fused loop, on its two digits (each
    digit separates with the other free). A sufficient test."""
    free = set(ranges) | {loop.var}
    plain = [opaque_outer(i, free, {}) for i in indices]
    forms = [linearize(i) for i in plain]
    if separates([f for f in forms if f is not None], loop.var, {**ranges, loop.var: (loop.start, loop.start + loop.extent - 1)}):
        return True
    split = split_digits(plain, loop)
    if split is None:
        return False
    digits, digit_ranges = split
    forms = [linearize(i) for i in digits]
    if any(f is None for f in forms):
        return False
    both = {**ranges, **digit_ranges}
    # The loop is one-to-one with its digits: two iterations differ in one
    # of them, which must then separate with the others free.
    return all(separates(forms, d, both) for d in digit_ranges)


def injective(indices, loops) -> bool:
    """Whether ``indices`` map the iterations of ``loops`` to distinct index
    tuples, proven without enumerating: each loop (a fused one split into
    its two digits first) appears in one index only, and within an index
    the variables are mixed-radix digits (sorted by coefficient, each
    coefficient exceeds the largest value the smaller terms reach), as
    after a split (``io*8 + ii`` with ``ii`` in 0..7). False when not
    proven."""
    extents = {l.var: l.extent for l in loops}
    indices = list(indices)
    for l in loops:
        split = split_digits(indices, l)
        if split is not None:
            indices, ranges = split
            del extents[l.var]
            extents.update({d: hi - lo + 1 for d, (lo, hi) in ranges.items()})
    seen: set[str] = set()
    for form in (linearize(i) for i in indices):
        if form is None:
            return False
        reach = 0
        for var, c in sorted(form.coeffs, key=lambda vc: abs(vc[1])):
            if var not in extents or var in seen or abs(c) <= reach:
                return False
            seen.add(var)
            reach += abs(c) * (extents[var] - 1)
    return seen == set(extents)


def guard_upper_bounds(guard: A.Expr | None) -> list[tuple[Affine, int]]:
    """Affine upper bounds a guard implies: ``(f, k)`` for each conjunct
    that says ``f <= k`` (``i*32+j < 100`` gives ``({i: 32, j: 1}, 99)``;
    ``a >= b`` gives ``b - a <= 0``). Conjuncts that are not affine
    comparisons imply nothing here."""
    out: list[tuple[Affine, int]] = []
    stack = [guard] if guard is not None else []
    while stack:
        e = stack.pop()
        if not isinstance(e, A.Binary):
            continue
        if e.op == "&":
            stack.append(e.lhs)
            stack.append(e.rhs)
            continue
        if e.op not in ("<", "<=", ">", ">=", "=="):
            continue
        lhs, rhs = linearize(e.lhs), linearize(e.rhs)
        if lhs is None or rhs is None:
            continue
        diffs = []  # lhs - rhs <= bound, or rhs - lhs <= bound
        if e.op in ("<", "<=", "=="):
            diffs.append((_sub(lhs, rhs), -1 if e.op == "<" else 0))
        if e.op in (">", ">=", "=="):
            diffs.append((_sub(rhs, lhs), -1 if e.op == ">" else 0))
        for form, bound in diffs:
            # form + const <= bound  ->  form <= bound - const
            out.append((Affine(form.coeffs, 0), bound - form.const))
    return out


def _sub(a: Affine, b: Affine) -> Affine:
    coeffs = dict(a.coeffs)
    for v, c in b.coeffs:
        coeffs[v] = coeffs.get(v, 0) - c
    return Affine.of(coeffs, a.const - b.const)


def guarded_bounds(form: Affine, ranges: dict[str, Range], guard: A.Expr | None) -> Range:
    """Bounds of an affine index over the loop ranges, tightened by the
    guard's affine conjuncts on the same combination of variables (the
    imperfect split ``Y_{io*32+ii} ... where io*32+ii < 100``)."""
    lo, hi = form.bounds(ranges)
    for bound_form, k in guard_upper_bounds(guard):
        if bound_form.coeffs == form.coeffs:
            hi = min(hi, k + form.const)
        elif bound_form.coeffs == tuple((v, -c) for v, c in form.coeffs):
            lo = max(lo, form.const - k)
    return lo, hi


# ---------------------------------------------------------------- enumeration


def _numpy():
    import numpy

    return numpy


class Space:
    """The iteration points of some loops, as broadcastable NumPy axes, for
    checks that need exact answers. Build it only for ``size <= MAX_POINTS``.
    """

    def __init__(self, loops: list[A.Loop]):
        np = _numpy()
        self.loops = list(loops)
        self.shape = tuple(l.extent for l in self.loops)
        self.size = 1
        for n in self.shape:
            self.size *= n
        self.axes: dict[str, np.ndarray] = {}
        for k, loop in enumerate(self.loops):
            view = [1] * len(self.loops)
            view[k] = loop.extent
            self.axes[loop.var] = np.arange(loop.start, loop.start + loop.extent, dtype=np.int64).reshape(view)

    @staticmethod
    def size_of(loops: list[A.Loop]) -> int:
        n = 1
        for l in loops:
            n *= max(l.extent, 1)
        return n

    def full(self, values) -> "np.ndarray":
        """``values`` (an array or scalar from ``evaluate``) at every point,
        flattened."""
        np = _numpy()
        return np.broadcast_to(values, self.shape).reshape(-1)

    def affine_values(self, form: Affine, fixed: dict[str, int]):
        """The values of an affine form over the space, with the variables
        outside it held at their ``fixed`` values (0 if not given)."""
        np = _numpy()
        values = np.int64(form.const)
        for var, c in form.coeffs:
            axis = self.axes.get(var)
            values = values + c * (axis if axis is not None else fixed.get(var, 0))
        return values

    def evaluate(self, expr: A.Expr):
        """The values of an integer or boolean expression over the space
        (broadcastable to ``shape``), or None when it cannot be evaluated
        here: it reads a tensor, uses a variable not in the space, divides
        with ``/``, calls a function other than max/min/if_then_else, or
        its values could overflow int64."""
        np = _numpy()
        try:
            with np.errstate(all="raise"):
                return self._eval(expr, np)
        except (_NotEvaluable, FloatingPointError, OverflowError, ZeroDivisionError):
            return None

    def _eval(self, e: A.Expr, np):
        if isinstance(e, A.Num):
            if isinstance(e.value, int):
                if abs(e.value) >= _MAX_MAGNITUDE:
                    raise _NotEvaluable
                return np.int64(e.value)
            raise _NotEvaluable  # float literals: not an index computation
        if isinstance(e, A.Var):
            axis = self.axes.get(e.name)
            if axis is None:
                raise _NotEvaluable
            return axis
        if isinstance(e, A.Unary):
            x = self._eval(e.operand, np)
            if e.op == "-":
                return -_integer(x, np)
            return np.logical_not(_boolean(x, np))
        if isinstance(e, A.Binary):
            a = self._eval(e.lhs, np)
            b = self._eval(e.rhs, np)
            op = e.op
            if op in ("&", "|"):
                a, b = _boolean(a, np), _boolean(b, np)
                return np.logical_and(a, b) if op == "&" else np.logical_or(a, b)
            if op in A.COMPARISONS:
                a, b = _integer(a, np), _integer(b, np)
                return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                        "==": np.equal, "!=": np.not_equal}[op](a, b)
            a, b = _integer(a, np), _integer(b, np)
            if op == "+":
                return _checked(a + b, np)
            if op == "-":
                return _checked(a - b, np)
            if op == "*":
                if _magnitude(a, np) * _magnitude(b, np) >= _MAX_MAGNITUDE:
                    raise _NotEvaluable
                return a * b
            if op in ("//", "%"):
                if np.any(b == 0):
                    raise _NotEvaluable
                # NumPy's integer // and % floor, like LEIR's (and TVM's
                # floordiv/floormod).
                return a // b if op == "//" else a % b
            raise _NotEvaluable  # "/" and "**" are not index arithmetic
        if isinstance(e, A.Call):
            args = [self._eval(a, np) for a in e.args]
            if e.func in ("max", "min") and len(args) == 2:
                a, b = _integer(args[0], np), _integer(args[1], np)
                return np.maximum(a, b) if e.func == "max" else np.minimum(a, b)
            if e.func == "if_then_else" and len(args) == 3:
                cond = _boolean(args[0], np)
                return np.where(cond, _integer(args[1], np), _integer(args[2], np))
        raise _NotEvaluable


class _NotEvaluable(Exception):
    pass


def _integer(x, np):
    if np.asarray(x).dtype == np.bool_:
        return np.asarray(x, dtype=np.int64)
    return x


def _boolean(x, np):
    arr = np.asarray(x)
    if arr.dtype != np.bool_:
        return arr != 0
    return arr


def _magnitude(x, np) -> int:
    arr = np.asarray(x)
    if arr.size == 0:
        return 0
    return int(max(abs(int(arr.max())), abs(int(arr.min()))))


def _checked(x, np):
    if _magnitude(x, np) >= _MAX_MAGNITUDE:
        raise _NotEvaluable
    return x

"""Index expressions as affine forms, and their bounds over loop ranges.

An index like ``i*32+j-1`` is ``{i: 32, j: 1} + (-1)``. Bounds of an affine
form over independent loop ranges are exact; ``//`` and ``%`` (produced by
loop fusion) are bounded by interval arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from leir import ast as A

Range = tuple[int, int]  # inclusive (lo, hi)


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
    None when they cannot be computed (unknown variable, non-integer...)."""
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
    return frozenset(n.name for n in A.walk(expr) if isinstance(n, A.Var))

"""Split a fraction whose numerator is a sum into a sum of fractions.

The inverse of ``cancellation``'s combining: ``(A + B)/Z`` becomes
``A/Z + B/Z``. Each term can then be computed, hoisted or fused on its own
(one term may not depend on the inner loop). The denominator is the one
the value already divided by, so no division by zero is added. Function
arguments are split too; a reduction's combined operand is rewritten and
the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value divides by something;
- some fraction has a sum (once multiplied out) above the line;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: split over the row sum

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (exp(X_{i,j}) + A_{i,j})/Z_{i};$0
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = A_{i,j}/Z_{i} + exp(X_{i,j})/Z_{i};
      ];

Example: nothing to split without a fraction

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i}*(A_{i} + B_{i});$0
    ];

    refused: expand_cancellation-no-fraction
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "expand_cancellation"
GROUP = "algebraic"
TITLE = "Split a fraction"
STEPTP = "expand_cancellation"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NoFraction(NotApplicable):
    """The value divides by nothing: splitting a fraction works on fractions."""

    code = "expand_cancellation-no-fraction"


def _split(x):
    """Every fraction ``p/q`` among the terms of ``x`` with ``p`` a sum,
    as the sum of its terms over ``q``."""
    sp = algebra.sympy_module()
    if x.is_Add:
        return sp.Add(*[_split(t) for t in x.args])
    numerator, denominator = sp.fraction(x)
    if denominator == 1:
        return x
    numerator = sp.expand_mul(numerator)
    if not numerator.is_Add:
        return x
    return sp.Add(*[t / denominator for t in numerator.args])


def _expand_cancellation(env: algebra.Env):
    algebra.require_fraction(env, "splitting a fraction")
    return algebra.polynomial(_split)(env.value)


SPEC = algebra.Spec(ID, "Split fraction", _expand_cancellation, ERRORS, (("no-fraction", NoFraction),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def expand_cancellation(program, block: str):
    """Split the fractions in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

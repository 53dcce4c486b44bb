"""Cancel the common factors of a fraction's numerator and denominator (SymPy's ``cancel``).

The value becomes one fraction ``p/q`` with ``p`` and ``q`` multiplied out
and no factor in common: a division and the multiplications that only
undid each other disappear (``(E*Z + Z)/(Z*Z)`` becomes ``(E + 1.0)/Z``).
Cancelling can remove a point where the original divided by zero; it never
adds one. An ``exp``, ``log`` or root is cancelled as a whole, never opened
up. A reduction's combined operand is rewritten and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value divides by something;
- cancelling changes the value;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: cancel the row sum

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (exp(X_{i,j})*Z_{i} + Z_{i})/(Z_{i}*Z_{i});$0
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (exp(X_{i,j}) + 1.0)/Z_{i};
      ];

Example: nothing to cancel without a fraction

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i}*(A_{i} + B_{i});$0
    ];

    refused: cancellation-no-fraction
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "cancellation"
GROUP = "algebraic"
TITLE = "Cancel common factors"
STEPTP = "cancellation"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NoFraction(NotApplicable):
    """The value divides by nothing: cancelling works on fractions."""

    code = "cancellation-no-fraction"


def _cancel(env: algebra.Env):
    # Without a fraction, SymPy's cancel only multiplies out: that is expand_factorization.
    algebra.require_fraction(env, "cancelling")
    return algebra.polynomial(algebra.sympy_module().cancel)(env.value)


SPEC = algebra.Spec(ID, "Cancel", _cancel, ERRORS, (("no-fraction", NoFraction),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def cancellation(program, block: str):
    """Cancel the fraction in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

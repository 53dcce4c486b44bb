"""Put a sum of fractions over a common denominator (SymPy's ``together``).

``A/Z + B/Z`` becomes ``(A + B)/Z`` and ``A/P + B/Q`` becomes
``(A*Q + B*P)/(P*Q)``: several divisions become one, usually the most
expensive operation in the expression. The new denominator is a product
of the old ones, so it is zero only where one of them was. Function
arguments are combined too; a reduction's combined operand is rewritten
and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value divides by something;
- combining changes the value;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: one division instead of two

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = exp(X_{i,j})/Z_{i} + A_{i,j}/Z_{i};$0
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
      ];

    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (A_{i,j} + exp(X_{i,j}))/Z_{i};
      ];

Example: nothing to combine without a fraction

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i} + A_{i};$0
    ];

    refused: together-no-fraction
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "together"
GROUP = "algebraic"
TITLE = "Combine fractions"
STEPTP = "together"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NoFraction(NotApplicable):
    """The value divides by nothing: combining fractions works on fractions."""

    code = "together-no-fraction"


def _together(env: algebra.Env):
    algebra.require_fraction(env, "combining fractions")
    return algebra.polynomial(algebra.sympy_module().together)(env.value)


SPEC = algebra.Spec(ID, "Combine fractions", _together, ERRORS, (("no-fraction", NoFraction),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def together(program, block: str):
    """Combine the fractions in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

"""Combine sums of logarithms into the logarithm of a product (SymPy's ``logcombine``).

``log(Z) + log(W)`` becomes ``log(Z*W)`` and ``2.0*log(Z)`` becomes
``log(Z*Z)``: one logarithm instead of several. It is true only for
positive arguments, so it is done only where every argument is provably
positive (a sum of ``exp``, an ``exp``), never for inputs. The product can
overflow where the sum of logarithms does not; that is not analysed. A
reduction's combined operand is rewritten and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value has logarithms to combine whose arguments are provably positive;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: one log of two row sums

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
        W_{i} += exp(A_{i,j});
      ];

    L^{8}_{i} [
      Y_{i} = log(Z_{i}) + log(W_{i});$0
    ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
        W_{i} += exp(A_{i,j});
      ];

    L^{8}_{i} [
      Y_{i} = log(W_{i}*Z_{i});
    ];

Example: inputs may be negative

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = log(A_{i}) + log(B_{i});$0
    ];

    refused: logsimp-not-positive
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "logsimp"
GROUP = "algebraic"
TITLE = "Combine logarithms"
STEPTP = "logsimp"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NotPositive(NotApplicable):
    """The value has logarithms whose arguments are not provably positive: combining logarithms
    is only true for positive arguments."""

    code = "logsimp-not-positive"


def _logcombine(env: algebra.Env):
    return algebra.positive_logs_only(env, algebra.sympy_module().logcombine,
                                      "combining logarithms is only true for positive arguments")


SPEC = algebra.Spec(ID, "Combine logarithms", _logcombine, ERRORS, (("not-positive", NotPositive),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def logsimp(program, block: str):
    """Combine the logarithms in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

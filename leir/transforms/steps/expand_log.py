"""Split the logarithm of a product or power into a sum of logarithms (SymPy's ``expand_log``).

The inverse of ``logsimp``: ``log(Z*W)`` becomes ``log(Z) + log(W)`` and
``log(exp(X)*Z)`` becomes ``X + log(Z)``, which cannot overflow where the
product could. It is true only for positive arguments, so it is done only
where each factor is provably positive (a sum of ``exp``, an ``exp``),
never for inputs. A reduction's combined operand is rewritten and the
reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value has a logarithm of a product, quotient or power whose factors
  are provably positive;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: the log of a product of two row sums

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
        W_{i} += exp(A_{i,j});
      ];

    L^{8}_{i} [
      Y_{i} = log(Z_{i}*W_{i});$0
    ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{i,j});
        W_{i} += exp(A_{i,j});
      ];

    L^{8}_{i} [
      Y_{i} = log(W_{i}) + log(Z_{i});
    ];

Example: inputs may be negative

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = log(A_{i}*B_{i});$0
    ];

    refused: expand_log-not-positive
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "expand_log"
GROUP = "algebraic"
TITLE = "Split logarithms"
STEPTP = "expand_log"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NotPositive(NotApplicable):
    """The value's logarithms have factors that are not provably positive: splitting a logarithm
    is only true for positive factors."""

    code = "expand_log-not-positive"


def _expand_log(env: algebra.Env):
    return algebra.positive_logs_only(env, algebra.sympy_module().expand_log,
                                      "splitting a logarithm is only true for positive factors")


SPEC = algebra.Spec(ID, "Split logarithms", _expand_log, ERRORS, (("not-positive", NotPositive),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def expand_log(program, block: str):
    """Split the logarithms in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

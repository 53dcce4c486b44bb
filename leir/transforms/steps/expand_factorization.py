"""Multiply out the products of sums in an equation's value (SymPy's ``expand``).

The inverse of ``factorization``: ``X*(A + B)`` becomes ``X*A + X*B``, and
``(A + B)*(A + B)`` becomes ``A*A + 2.0*A*B + B*B``. It costs operations, but
separates terms that can then be moved, hoisted or fused independently
(the part of a normalization that does not depend on the inner loop).
Function arguments are expanded too; ``exp(a + b)`` is not split (that is
``expand_powsimp``). A reduction's combined operand is expanded and the
reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- expanding changes the value;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: expand the exact GELU

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = 0.5*X_{i}*(1.0 + erf(X_{i}*0.7071067811865476));$0
    ];

    after:
    L^{64}_{i} [
      Y_{i} = 0.5*X_{i}*erf(X_{i}*0.7071067811865476) + 0.5*X_{i};
    ];

Example: integer arithmetic is not rewritten

    step: {"block": "Y"}

    before:
    in  X: i32[64]
    out Y: i32[64]

    L^{64}_{i} [
      Y_{i} = X_{i}*(X_{i} + 2);$0
    ];

    refused: expand_factorization-not-float
"""

from __future__ import annotations

from leir.transforms.lib import algebra

ID = "expand_factorization"
GROUP = "algebraic"
TITLE = "Expand products"
STEPTP = "expand_factorization"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


def _expand(env: algebra.Env):
    return algebra.polynomial(algebra.sympy_module().expand)(env.value)


SPEC = algebra.Spec(ID, "Expand", _expand, ERRORS)

candidates, check, rewrite = algebra.entry_points(SPEC)


def expand_factorization(program, block: str):
    """Expand the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

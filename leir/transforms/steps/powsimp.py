"""Combine powers with a common base or exponent (SymPy's ``powsimp``).

``exp(A)*exp(B)`` becomes ``exp(A + B)`` and ``X**A*X**B`` becomes
``X**(A + B)``: one transcendental call instead of two. Combining
``sqrt(A)*sqrt(B)`` into ``sqrt(A*B)`` is only done where SymPy can prove
the bases nonnegative (a sum of squares, an ``exp``), never for inputs. A
reduction's combined operand is rewritten and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- combining changes the value;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: one exp instead of two

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = exp(X_{i})*exp(A_{i});$0
    ];

    after:
    L^{64}_{i} [
      Y_{i} = exp(A_{i} + X_{i});
    ];

Example: a single power has nothing to combine with

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = exp(X_{i})*A_{i};$0
    ];

    refused: powsimp-no-change
"""

from __future__ import annotations

from leir.transforms.lib import algebra

ID = "powsimp"
GROUP = "algebraic"
TITLE = "Combine powers"
STEPTP = "powsimp"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


def _powsimp(env: algebra.Env):
    return algebra.sympy_module().powsimp(env.value, deep=True)


SPEC = algebra.Spec(ID, "Combine powers", _powsimp, ERRORS)

candidates, check, rewrite = algebra.entry_points(SPEC)


def powsimp(program, block: str):
    """Combine the powers in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

"""Factor an equation's value into a product of simpler parts (SymPy's ``factor``).

A shared factor pulled out of a sum is computed once instead of once per
term (``X*A + X*B`` becomes ``X*(A + B)``: one multiplication fewer per
element). It is offered only where it saves operations (SymPy multiplies
out what it cannot factor). Function arguments are factored too; an
``exp``, ``log`` or root is never opened up. A reduction's combined operand
is factored and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- factoring saves operations;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: pull out a shared factor

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i}*A_{i} + X_{i}*B_{i};$0
    ];

    after:
    L^{64}_{i} [
      Y_{i} = X_{i}*(A_{i} + B_{i});
    ];

Example: a sum with nothing in common stays as it is

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i} + A_{i}*B_{i};$0
    ];

    refused: factorization-no-change
"""

from __future__ import annotations

from leir.transforms.lib import algebra

ID = "factorization"
GROUP = "algebraic"
TITLE = "Factor"
STEPTP = "factorization"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


def _factor(env: algebra.Env):
    return algebra.polynomial(algebra.fewer_operations(algebra.sympy_module().factor))(env.value)


SPEC = algebra.Spec(ID, "Factor", _factor, ERRORS)

candidates, check, rewrite = algebra.entry_points(SPEC)


def factorization(program, block: str):
    """Factor the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

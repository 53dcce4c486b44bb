"""Decompose a fraction into partial fractions (SymPy's ``apart``).

``(X*X + 1.0)/(X + 2.0)`` becomes ``X - 2.0 + 5.0/(X + 2.0)``: polynomial
division leaves a lower-degree remainder over the denominator, and a
denominator with several factors becomes a sum of simpler fractions. It
helps when the pieces are cheaper or independent of an inner loop. Partial
fractions with other tensors as parameters can divide by their
differences, so the denominator must depend on one tensor only, and the
result may divide only by factors of the original denominator.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value divides by something that depends on exactly one tensor or loop
  variable;
- decomposing changes the value;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: divide out the polynomial part

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = (X_{i}*X_{i} + 1.0)/(X_{i} + 2.0);$0
    ];

    after:
    L^{64}_{i} [
      Y_{i} = X_{i} - 2.0 + 5.0/(X_{i} + 2.0);
    ];

Example: a denominator in two tensors

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i}/(X_{i} + A_{i});$0
    ];

    refused: apart-not-univariate
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "apart"
GROUP = "algebraic"
TITLE = "Partial fractions"
STEPTP = "apart"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class NoFraction(NotApplicable):
    """The value divides by nothing: partial fractions works on fractions."""

    code = "apart-no-fraction"


class NotUnivariate(NotApplicable):
    """The value divides by something that depends on more than one tensor or loop variable (or
    on none): partial fractions need a denominator in one."""

    code = "apart-not-univariate"


def _apart(env: algebra.Env):
    sp = algebra.sympy_module()
    algebra.require_fraction(env, "partial fractions")
    divisors = [p.base for p in env.value.atoms(sp.Pow) if p.exp.is_negative and p.exp.is_integer]
    # Literals are constants, not variables of the decomposition.
    variables = sorted({s for d in divisors for s in d.free_symbols if not isinstance(env.atoms.get(s), A.Num)}, key=str)
    if len(variables) != 1:
        names = ", ".join(env.text(v) for v in variables)
        raise algebra.Refuse("not-univariate", f"the denominator depends on {len(variables)} values",
                             f"partial fractions need a denominator in one tensor or loop variable; "
                             f"{env.text(env.value)} divides by something in {names}")
    return algebra.polynomial(lambda x: sp.apart(x, variables[0]), deep=False)(env.value)


SPEC = algebra.Spec(ID, "Partial fractions", _apart, ERRORS,
                    (("no-fraction", NoFraction), ("not-univariate", NotUnivariate)))

candidates, check, rewrite = algebra.entry_points(SPEC)


def apart(program, block: str):
    """Decompose the value of ``block`` into partial fractions (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

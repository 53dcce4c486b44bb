"""Split powers of sums and of products into products of powers (SymPy's ``expand`` of powers).

The inverse of ``powsimp``: ``exp(A + B)`` becomes ``exp(A)*exp(B)`` and
``(A*B)**C`` becomes ``A**C*B**C`` (the latter only where SymPy can prove
the bases nonnegative). A factor that does not depend on the inner loop
can then be hoisted out of it. A reduction's combined operand is rewritten
and the reduction kept.

A power whose exponent is a difference (``exp(X - M)``) is never split:
``exp(X)*exp(-M)`` overflows where ``exp(X - M)`` does not, and subtracting
the row maximum before ``exp`` is exactly what keeps a softmax finite.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- the value has a power of a sum whose terms all have the same sign, or a
  power of a product of nonnegative bases;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: split an exp of a sum

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = exp(X_{i} + A_{i});$0
    ];

    after:
    L^{64}_{i} [
      Y_{i} = exp(A_{i})*exp(X_{i});
    ];

Example: the max-subtraction of a softmax stays

    step: {"block": "Z"}

    before:
    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Z_{i} += exp(X_{i,j} - M_{i});$0
      ];

    refused: expand_powsimp-unstable-exp
"""

from __future__ import annotations

from leir.transforms.lib import algebra
from leir.transforms.base import NotApplicable

ID = "expand_powsimp"
GROUP = "algebraic"
TITLE = "Split powers"
STEPTP = "expand_powsimp"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


class UnstableExp(NotApplicable):
    """The only powers to split have a difference in their exponent (``exp(x - m)``): split,
    they can overflow where the difference does not."""

    code = "expand_powsimp-unstable-exp"


def _differences(value) -> list:
    """Powers whose exponent is a sum with terms of both signs."""
    sp = algebra.sympy_module()
    out = []
    for node in sp.preorder_traversal(value):
        exponent = node.args[0] if isinstance(node, sp.exp) else node.exp if node.is_Pow else None
        if exponent is not None and exponent.is_Add:
            if len({t.as_coeff_Mul()[0].is_negative for t in exponent.args}) == 2:
                out.append(node)
    return out


def _expand_powsimp(env: algebra.Env):
    sp = algebra.sympy_module()
    kept = {node: sp.Dummy(positive=True) if node.is_positive else sp.Dummy() for node in _differences(env.value)}
    hidden = env.value.xreplace(kept)
    split = sp.expand(hidden, deep=True, mul=False, multinomial=False, power_exp=True, power_base=True,
                      log=False, basic=False)
    result = split.xreplace({d: node for node, d in kept.items()})
    if result == env.value and kept:
        shown = ", ".join(env.text(node) for node in kept)
        raise algebra.Refuse("unstable-exp", f"splitting {shown} can overflow",
                             f"{shown} has a difference in its exponent; split into a product of powers it can "
                             f"overflow where the difference does not (this is the max-subtraction that keeps a "
                             f"softmax finite), so it is not split")
    return result


SPEC = algebra.Spec(ID, "Split powers", _expand_powsimp, ERRORS, (("unstable-exp", UnstableExp),))

candidates, check, rewrite = algebra.entry_points(SPEC)


def expand_powsimp(program, block: str):
    """Split the powers in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

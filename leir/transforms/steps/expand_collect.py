"""Distribute a factor over the sum it multiplies, one level deep.

The inverse of ``collect``: ``g*(X + A) + B`` becomes ``g*X + g*A + B``.
Unlike ``expand_factorization`` it multiplies out only products with one
sum among their factors, at the outermost sums or products of the value
(inside a function call if the value is one), and leaves everything else
as written. A reduction's combined operand is rewritten and the reduction
kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- an outermost product has exactly one sum among its factors;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: distribute the row scale

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = g_{i}*(X_{i,j} + A_{i,j}) + B_{i,j};$0
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = A_{i,j}*g_{i} + B_{i,j} + X_{i,j}*g_{i};
      ];

Example: a product of two sums is for expand_factorization

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = (X_{i} + A_{i})*(X_{i} + B_{i});$0
    ];

    refused: expand_collect-no-change
"""

from __future__ import annotations

from leir.transforms.lib import algebra

ID = "expand_collect"
GROUP = "algebraic"
TITLE = "Distribute a factor"
STEPTP = "expand_collect"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


def _distribute_term(term):
    sp = algebra.sympy_module()
    if not term.is_Mul:
        return term
    sums = [f for f in term.args if f.is_Add]
    if len(sums) != 1:
        return term
    rest = sp.Mul(*[f for f in term.args if f is not sums[0]])
    return sp.Add(*[rest * t for t in sums[0].args])


def _distribute(x):
    """Distribute at the outermost sums or products of ``x``."""
    sp = algebra.sympy_module()
    if x.is_Add:
        return sp.Add(*[_distribute_term(t) for t in x.args])
    if x.is_Mul:
        return _distribute_term(x)
    if x.is_Atom:
        return x
    return x.func(*[_distribute(a) for a in x.args])


def _expand_collect(env: algebra.Env):
    return _distribute(env.value)


SPEC = algebra.Spec(ID, "Distribute", _expand_collect, ERRORS)

candidates, check, rewrite = algebra.entry_points(SPEC)


def expand_collect(program, block: str):
    """Distribute a factor in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

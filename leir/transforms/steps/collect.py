"""Collect the terms of a sum that share a factor (SymPy's ``collect``).

``X*g + A*g + B`` becomes ``g*(X + A) + B``: the shared factor is
multiplied once. When several factors are shared, one that does not
depend on the innermost loop variable is collected first (it can then be
hoisted), then the one shared by the most terms. The outermost sum with a
shared factor is collected, in a function argument if need be. A
reduction's combined operand is rewritten and the reduction kept.

It requires:

- the equation computes in f16, bf16, f32 or f64;
- its value (a reduction's operand) has at most 64 syntax nodes and no
  ``inf``;
- some sum has two terms with a factor (a tensor access, a constant or a
  function call) in common;
- the result divides, takes roots and logarithms only of what the value did
  or of what is provably nonzero, nonnegative or positive;
- the result reads the same tensors.

Example: collect the row scale

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = X_{i,j}*g_{i} + A_{i,j}*g_{i} + B_{i,j};$0
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = B_{i,j} + g_{i}*(A_{i,j} + X_{i,j});
      ];

Example: no two terms share a factor

    step: {"block": "Y"}

    before:
    L^{64}_{i} [
      Y_{i} = X_{i}*A_{i} + B_{i};$0
    ];

    refused: collect-no-change
"""

from __future__ import annotations

from leir.transforms.lib import algebra

ID = "collect"
GROUP = "algebraic"
TITLE = "Collect a common factor"
STEPTP = "collect"

NotFloat, TooLarge, Inexpressible, NoChange, Unsafe, ChangesReads = ERRORS = algebra.refusals(ID, __name__)


def _shared_factors(env: algebra.Env, total) -> list:
    """Factors of at least two terms of the sum ``total``, loop-invariant
    ones first, then by how many terms share them."""
    sp = algebra.sympy_module()
    counts: dict = {}
    for term in total.args:
        for f in set(sp.Mul.make_args(term)):
            if not f.is_number:
                counts[f] = counts.get(f, 0) + 1
    shared = [f for f, n in counts.items() if n >= 2]
    return sorted(shared, key=lambda f: (not env.invariant(f), -counts[f], env.text(f)))


def _collect(env: algebra.Env):
    sp = algebra.sympy_module()
    for node in sp.preorder_traversal(env.value):
        if not node.is_Add:
            continue
        for factor in _shared_factors(env, node):
            collected = sp.collect(node, factor)
            if collected != node:
                return env.value.xreplace({node: collected}), env.text(factor)
    raise algebra.Refuse("no-change", "no two terms share a factor",
                         f"no sum in {env.text(env.value)} has two terms with a factor in common")


SPEC = algebra.Spec(ID, "Collect", _collect, ERRORS)

candidates, check, rewrite = algebra.entry_points(SPEC)


def collect(program, block: str):
    """Collect a shared factor in the value of ``block`` (see the module docstring)."""
    return algebra.apply_step(__name__, program, block)

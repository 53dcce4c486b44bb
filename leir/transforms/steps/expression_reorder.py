"""Reorder the operands of a sum or product so that those that do not change along a loop come first, grouped.

In ``(C_{n,k,h,w} - rmean_{k})*rsqrt(rvar_{k} + 1e-05)*gamma_{k}`` the last
two factors depend on the channel only; written first,
``rsqrt(rvar_{k} + 1e-05)*gamma_{k}*(C_{n,k,h,w} - rmean_{k})``, they form a
subexpression of their own (a per-channel scale) that expression splitting
can then hoist out of the ``h`` and ``w`` loops. Sums are grouped the same
way: ``X_{i,j} - M_{i} - log(Z_{i})`` becomes ``X_{i,j} - (M_{i} +
log(Z_{i}))``. Products may contain divisions (in floating point).

It requires:

- a chain of ``+``/``-`` or of ``*`` (and ``/`` for floating point) in an
  equation's value (not in an index or a condition, not the accumulation of
  a reduction itself);
- no loop variable used as an operand;
- at least two operands that do not depend on the chosen loop;
- an operand that does depend on it;
- those operands not already grouped that way.

Reassociating floating-point arithmetic changes rounding: the result is
equal up to rounding (exact for integers).

Example: the per-channel factors of a batch norm grouped together

    step: {"block": "Y", "expr": "(X_{c,h} - m_{c})*r_{c}*g_{c}", "loop": "h"}

    before:
    L^{4}_{c}
      L^{16}_{h} [
        Y_{c,h} = (X_{c,h} - m_{c})*r_{c}*g_{c}$0;
      ];

    after:
    L^{4}_{c}
      L^{16}_{h} [
        Y_{c,h} = r_{c}*g_{c}*(X_{c,h} - m_{c});
      ];

Example: the row terms of a log-softmax subtracted at once

    step: {"block": "Y", "expr": "X_{i,j} - M_{i} - log(Z_{i})", "loop": "j"}

    before:
    L^{8}_{i}
      L^{10}_{j} [
        Y_{i,j} = X_{i,j} - M_{i} - log(Z_{i})$0;
      ];

    after:
    L^{8}_{i}
      L^{10}_{j} [
        Y_{i,j} = X_{i,j} - (M_{i} + log(Z_{i}));
      ];

Example: only one factor does not depend on j

    step: {"block": "Y", "expr": "A_{i,j}*B_{i}*C_{j}", "loop": "j"}

    before:
    L^{8}_{i}
      L^{10}_{j} [
        Y_{i,j} = A_{i,j}*B_{i}*C_{j}$0;
      ];

    refused: expression_reorder-too-few-invariant
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, StaleStep, Step, str_arg
from leir.transforms.lib.expressions import expr_text, operand_side, replace_at_path
from leir.transforms.lib.nests import replace_items

ID = "expression_reorder"
GROUP = "operator"
TITLE = "Reorder expression"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "expression_reorder"


class TooFewInvariant(NotApplicable):
    """Fewer than two operands of the chain do not depend on the chosen loop."""

    code = "expression_reorder-too-few-invariant"


class AllInvariant(NotApplicable):
    """No operand of the chain depends on the chosen loop: it is already one invariant group."""

    code = "expression_reorder-all-invariant"


class AlreadyGrouped(NotApplicable):
    """The chain already computes its operands that do not depend on the loop together."""

    code = "expression_reorder-already-grouped"


@dataclass(frozen=True)
class Chain:
    """A maximal sum (``+``/``-``) or product (``*``/``/``) in an equation."""

    node: A.Expr
    #: Child positions from the right-hand side.
    path: tuple[int, ...]
    #: "+" or "*".
    family: str
    #: (operand, +1 or -1): -1 for a subtracted term or a divisor.
    terms: tuple[tuple[A.Expr, int], ...]
    text: str


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    for info in ctx.equations_at(at):
        block = ctx.block_names[info.index]
        for chain in chains(ctx, info):
            # The innermost loop names the step; the title lists every loop
            # the same grouping is invariant in.
            loops_of: dict[A.Expr, list[str]] = {}
            for loop in reversed(info.loops):
                regrouped, refusal = _regrouped(chain, loop)
                if refusal is None:
                    loops_of.setdefault(regrouped, []).append(loop.var)
            for regrouped, names in loops_of.items():
                shown = ", ".join(reversed(names))
                title = f"Group the operands invariant in {shown}: {expr_text(regrouped)}"
                out.append(Candidate(Step(ID, {"block": block, "expr": chain.text, "loop": names[0]}), title,
                                     chain.node.span or info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    info, chain, loop = _resolve(ctx, args)
    _, refusal = _regrouped(chain, loop)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    info, chain, loop = _resolve(ctx, args)
    regrouped, _ = _regrouped(chain, loop)
    return replace_items(ctx.program, info.site.path, 1, (replace_at_path(info.equation, chain.path, regrouped),))


def expression_reorder(program, block: str, expr: str, loop: str):
    """Group the operands of ``expr`` in ``block`` that do not depend on
    ``loop`` (see the module docstring); return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "expr": expr, "loop": loop}))


def _resolve(ctx: Context, args: dict) -> tuple[EquationInfo, Chain, A.Loop]:
    info = ctx.equation_of_block(str_arg(args, "block", ID))
    name = ctx.block_names[info.index]
    text = str_arg(args, "expr", ID)
    chain = next((c for c in chains(ctx, info) if c.text == text), None)
    if chain is None:
        raise StaleStep(f"{name} has no sum or product {text}",
                        f"the right-hand side of {name} is {expr_text(info.equation.rhs)}", info.equation.span)
    var = str_arg(args, "loop", ID)
    loop = next((l for l in info.loops if l.var == var), None)
    if loop is None:
        raise StaleStep(f"block {name} has no loop {var}",
                        f"the loops around {name} are {', '.join(l.var for l in info.loops) or 'none'}")
    return info, chain, loop


# ------------------------------------------------------------------- chains


def chains(ctx: Context, info: EquationInfo) -> list[Chain]:
    """The sums and products of an equation's value, outermost first."""
    eq = info.equation
    dtype = ctx.analysis.tensors[eq.lhs.tensor].dtype
    if dtype == "bool":
        return []
    if info.combiner is not None and info.kind in ("reduce", "update"):
        side = operand_side(eq)
        if side is None:
            return []
        root, path = side[1], (side[0],)
    else:
        root, path = eq.rhs, ()
    out = []
    for node, node_path, family, node_dtype in _roots(root, dtype, path, None):
        terms = tuple(_flatten(node, family, node_dtype, 1))
        if any(affine.index_vars(t) and VT.is_index_expr(t) for t, _ in terms):
            continue  # a loop variable as a value: regrouping could turn float arithmetic into integer arithmetic
        out.append(Chain(node, node_path, family, terms, expr_text(node)))
    return out


def _family(e: A.Expr, dtype: str) -> str | None:
    if not isinstance(e, A.Binary) or VT.is_index_expr(e):
        return None
    if e.op in ("+", "-"):
        return "+"
    if e.op == "*" or (e.op == "/" and VT.is_float_dtype(dtype)):
        return "*"
    return None


def _roots(e: A.Expr, dtype: str, path: tuple[int, ...],
           parent: str | None) -> Iterator[tuple[A.Expr, tuple[int, ...], str, str]]:
    if isinstance(e, (A.Num, A.Var, A.Access)) or VT.is_index_expr(e) or VT.is_condition(e):
        return
    if isinstance(e, A.Call):
        if VT.is_cast(e):
            yield from _roots(e.args[0], e.func, path + (0,), None)
            return
        start = 1 if e.func == "if_then_else" else 0  # not into the condition
        for k in range(start, len(e.args)):
            yield from _roots(e.args[k], dtype, path + (k,), None)
        return
    if isinstance(e, A.Unary):
        yield from _roots(e.operand, dtype, path + (0,), None)
        return
    family = _family(e, dtype)
    if family is not None and family != parent:
        yield e, path, family, dtype
    assert isinstance(e, A.Binary)
    yield from _roots(e.lhs, dtype, path + (0,), family)
    yield from _roots(e.rhs, dtype, path + (1,), family)


def _flatten(e: A.Expr, family: str, dtype: str, sign: int) -> Iterator[tuple[A.Expr, int]]:
    if _family(e, dtype) == family:
        assert isinstance(e, A.Binary)
        yield from _flatten(e.lhs, family, dtype, sign)
        yield from _flatten(e.rhs, family, dtype, -sign if e.op in ("-", "/") else sign)
    else:
        yield e, sign


# ---------------------------------------------------------------- regrouping


def _regrouped(chain: Chain, loop: A.Loop) -> tuple[A.Expr | None, NotApplicable | None]:
    invariant = [(t, s) for t, s in chain.terms if loop.var not in affine.index_vars(t)]
    varying = [(t, s) for t, s in chain.terms if loop.var in affine.index_vars(t)]
    what = "terms" if chain.family == "+" else "factors"
    if not varying:
        return None, AllInvariant(f"no {what[:-1]} of {chain.text} depends on {loop.var}",
                                  f"all {what} of {chain.text} are the same at every iteration of loop {loop.var}: "
                                  f"the whole expression is already one invariant group", chain.node.span)
    if len(invariant) < 2:
        names = ", ".join(expr_text(t) for t, _ in invariant) or "none"
        return None, TooFewInvariant(f"fewer than two {what} of {chain.text} are invariant in {loop.var}",
                                     f"grouping needs at least two {what} that do not depend on loop {loop.var}; "
                                     f"{chain.text} has {names}", chain.node.span)
    regrouped = _build(chain.family, invariant, varying)
    if regrouped == chain.node:
        return None, AlreadyGrouped(f"the {what} of {chain.text} invariant in {loop.var} are already grouped",
                                    f"{chain.text} already computes its {what} invariant in {loop.var} together",
                                    chain.node.span)
    return regrouped, None


def _build(family: str, group: list[tuple[A.Expr, int]], rest: list[tuple[A.Expr, int]]) -> A.Expr:
    plus, minus = ("+", "-") if family == "+" else ("*", "/")
    if any(s > 0 for _, s in group):
        out = _fold(group, plus, minus)
        for t, s in rest:
            out = A.Binary(plus if s > 0 else minus, out, t)
        return out
    # Every grouped operand is subtracted (or divides): combine them first,
    # then subtract (or divide by) the group once.
    combined = group[0][0]
    for t, _ in group[1:]:
        combined = A.Binary(plus, combined, t)
    return A.Binary(minus, _fold(rest, plus, minus), combined)


def _fold(terms: list[tuple[A.Expr, int]], plus: str, minus: str) -> A.Expr:
    """The terms combined left to right, starting from the first one that
    is added (or multiplied)."""
    k = next(i for i, (_, s) in enumerate(terms) if s > 0)
    out = terms[k][0]
    for i, (t, s) in enumerate(terms):
        if i != k:
            out = A.Binary(plus if s > 0 else minus, out, t)
    return out

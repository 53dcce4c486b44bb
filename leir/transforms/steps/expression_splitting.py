"""Split an equation in two: a subexpression into a temporary computed just before it, or a sum into two accumulations.

With ``"mode": "temporary"`` the chosen subexpression is computed into a new
temporary right before the equation, at the outermost place where
everything it depends on is known: a subexpression that does not change
along the inner loops is computed once per iteration of the outer ones
(``rsqrt(var_{i} + eps)`` once per row instead of once per element). The
temporary is indexed by the loops around that place. With ``"mode":
"accumulations"`` an equation ``Y = a + b`` becomes ``Y = a; Y += b`` (also
``-``, ``*``, ``/``, ``max``, ``min``), and a reduction ``C += a + b``
becomes ``C += a; C += b`` (also ``C *= a*b`` and ``max``/``min``): each part
can then be scheduled, fissioned or fused on its own.

It requires:

- for a temporary, a subexpression that computes a number from at least one
  tensor (not a lone access or literal, not an index expression or a
  condition, not inside an ``if_then_else``);
- for a temporary, a subexpression that is a proper part of the right-hand
  side;
- for a temporary, a subexpression that does not read the tensor the
  equation writes;
- for a temporary, a subexpression that reads nothing that an equation
  between the temporary and the use writes (the loops the temporary is
  hoisted out of);
- for a temporary, a subexpression that does not depend on a vectorized loop
  (TVM 0.27 computes a temporary written and read inside one vectorized loop
  wrong);
- for accumulations, a right-hand side (or a reduction's operand) whose
  outermost operation is one of those listed, on numbers (not booleans).

Splitting a reduction's operand reassociates it: the result is equal up to
rounding.

Example: compute the row scale of a layer norm once per row

    step: {"block": "Y", "mode": "temporary", "expr": "rsqrt(var_{i} + 1e-05)"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        Y_{i,j} = (X_{i,j} - mean_{i})*rsqrt(var_{i} + 1e-05)$0;
      ];

    after:
    L^{8}_{i} [
      rsqrt_var_{i} = rsqrt(var_{i} + 1e-05);
      L^{16}_{j} [
        Y_{i,j} = (X_{i,j} - mean_{i})*rsqrt_var_{i};
      ];
    ];

Example: a sum of two products as two accumulations

    step: {"block": "C", "mode": "accumulations"}

    before:
    L^{16}_{i}
      L^{32}_{k} [
        C_{i} += X_{i,k}*A_{k} + Y_{i,k}*B_{k}$0;
      ];

    after:
    L^{16}_{i}
      L^{32}_{k} [
        C_{i} += X_{i,k}*A_{k};
        C_{i} += Y_{i,k}*B_{k};
      ];

Example: the subexpression reads what the nest it would leave writes

    step: {"block": "Y", "mode": "temporary", "expr": "S_{i}*2.0"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        S_{i} += X_{i,j};
        Y_{i,j} = X_{i,j} - S_{i}*2.0$0;
      ];

    refused: expression_splitting-operand-changes
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir import value_types as VT
from leir.bridge.lower import equation_text
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import BadStep, Candidate, Context, NotApplicable, Step, str_arg
from leir.transforms.lib.expressions import (
    Occurrence,
    expr_text,
    find_subexpression,
    new_temporary,
    operand_side,
    placement,
    replace_at_path,
    subexpressions,
)
from leir.transforms.lib.nests import VECTOR_TEMPORARY_BUG, replace_items

ID = "expression_splitting"
GROUP = "operator"
TITLE = "Split expression"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "expression_splitting"

MODES = ("temporary", "accumulations")


class ReadsOwnOutput(NotApplicable):
    """The subexpression reads the tensor the equation writes."""

    code = "expression_splitting-reads-own-output"


class OperandChanges(NotApplicable):
    """An equation between the temporary and the use writes what the subexpression reads (in the
    loops the temporary is hoisted out of)."""

    code = "expression_splitting-operand-changes"


class NotSplittable(NotApplicable):
    """The right-hand side (or reduction's operand) has no outermost operation that splits into
    accumulations, or it is not on numbers."""

    code = "expression_splitting-not-splittable"


class VectorizedTemporary(NotApplicable):
    """The subexpression depends on a vectorized loop: TVM 0.27 computes a temporary written and
    read inside one vectorized loop wrong."""

    code = "expression_splitting-vectorized-temporary"


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    for info in ctx.equations_at(at):
        block = ctx.block_names[info.index]
        if _accumulation_parts(ctx, info) is not None:
            title = f"Split {block} into two {'accumulations' if info.combiner else 'equations'}"
            out.append(Candidate(Step(ID, {"block": block, "mode": "accumulations"}), title, info.equation.span))
        seen: set[str] = set()
        for occ in subexpressions(ctx, info):
            if occ.text in seen:
                continue
            seen.add(occ.text)
            if _temporary_refusal(ctx, info, occ) is not None:
                continue
            where = placement(ctx, info, occ.names)
            hoisted = [l.var for l in info.loops[where.depth:]]
            title = f"Compute {occ.text} into a temporary"
            if hoisted:
                title += f" outside loop{'s' if len(hoisted) > 1 else ''} {', '.join(hoisted)}"
            out.append(Candidate(Step(ID, {"block": block, "mode": "temporary", "expr": occ.text}), title,
                                 occ.node.span or info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    info = ctx.equation_of_block(str_arg(args, "block", ID))
    mode = args.get("mode")
    if mode not in MODES:
        raise BadStep(f"{ID}: \"mode\" is one of {', '.join(MODES)}, got {mode!r}")
    if mode == "accumulations":
        if _accumulation_parts(ctx, info) is None:
            raise NotSplittable(
                f"{ctx.block_names[info.index]} is not a sum of two parts",
                f"splitting into accumulations needs a right-hand side (or a reduction's operand) whose outermost "
                f"operation is + - * / max or min on numbers; {expr_text(info.equation.rhs)} is not",
                info.equation.span)
        return
    occ = find_subexpression(ctx, info, str_arg(args, "expr", ID))
    refusal = _temporary_refusal(ctx, info, occ)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    info = ctx.equation_of_block(args["block"])
    eq = info.equation
    if args["mode"] == "accumulations":
        first, second = _accumulation_parts(ctx, info)
        return replace_items(ctx.program, info.site.path, 1, (first, second))
    occ = find_subexpression(ctx, info, args["expr"])
    where = placement(ctx, info, occ.names)
    temp, decls = new_temporary(ctx, occ, where)
    program = replace_items(ctx.program, info.site.path, 1, (replace_at_path(eq, occ.path, where.read(temp)),))
    program = replace(program, decls=program.decls + decls)
    return where.insert(program, where.write(temp, occ.node, eq.predicate))


def expression_splitting(program, block: str, mode: str, expr: str | None = None):
    """Split ``block`` (see the module docstring) and return the new program."""
    args = {"block": block, "mode": mode}
    if expr is not None:
        args["expr"] = expr
    return apply_transform(__name__, program, Step(ID, args))


def _temporary_refusal(ctx: Context, info: EquationInfo, occ: "Occurrence") -> NotApplicable | None:
    eq = info.equation
    if eq.lhs.tensor in occ.tensors:
        return ReadsOwnOutput(f"{occ.text} reads {eq.lhs.tensor}, which {ctx.block_names[info.index]} writes",
                              f"a temporary computed before the equation would hold {eq.lhs.tensor} as it was before "
                              f"the equation's update, not as the equation reads it", occ.node.span)
    where = placement(ctx, info, occ.names)
    vector = next((l for l in where.loops if l.kind == "V"), None)
    if vector is not None:
        return VectorizedTemporary(f"the temporary would be computed inside vectorized loop {vector.var}",
                                   f"{VECTOR_TEMPORARY_BUG}; {occ.text} depends on vectorized loop {vector.var}, "
                                   f"so its temporary "
                                   f"would be written and read inside that loop", vector.span)
    writer = next((w for w in where.scope if w.equation.lhs.tensor in occ.tensors), None)
    if writer is not None:
        loops = ", ".join(l.var for l in info.loops[where.depth:]) or "its nest"
        return OperandChanges(
            f"{writer.equation.lhs.tensor} changes while {occ.text} is in use",
            f"the temporary would be computed before loop{'s' if ',' in loops else ''} {loops}, but "
            f"{equation_text(writer.equation)} inside {'them' if ',' in loops else 'it'} writes {writer.equation.lhs.tensor}, "
            f"so {occ.text} can change between its uses", occ.node.span)
    return None


# ------------------------------------------------------------ accumulations

_ACCUMULATING = {"+": "sum", "-": "sum", "*": "prod"}


def _accumulation_parts(ctx: Context, info: EquationInfo) -> tuple[A.Equation, A.Equation] | None:
    """The two equations an accumulation split gives, or None."""
    eq = info.equation
    lhs = eq.lhs
    rhs = eq.rhs
    if ctx.analysis.tensors[lhs.tensor].dtype == "bool":
        return None
    if info.kind == "assign":
        if isinstance(rhs, A.Binary) and rhs.op in ("+", "-", "*", "/") and not VT.is_index_expr(rhs):
            return (replace(eq, rhs=rhs.lhs, span=None),
                    A.Equation(lhs, A.Binary(rhs.op, lhs, rhs.rhs), eq.predicate))
        if isinstance(rhs, A.Call) and rhs.func in ("max", "min"):
            return (replace(eq, rhs=rhs.args[0], span=None),
                    A.Equation(lhs, A.Call(rhs.func, (lhs, rhs.args[1])), eq.predicate))
        return None
    if info.combiner is None:
        return None
    own = operand_side(eq)
    if own is None:
        return None
    operand = own[1]
    outer_op = rhs.op if isinstance(rhs, A.Binary) else rhs.func
    if isinstance(rhs, A.Binary):
        if info.combiner == "sum" and isinstance(operand, A.Binary) and operand.op in ("+", "-"):
            first_op = outer_op
            second_op = outer_op if operand.op == "+" else ("-" if outer_op == "+" else "+")
        elif info.combiner == "prod" and isinstance(operand, A.Binary) and operand.op == "*":
            first_op = second_op = "*"
        else:
            return None
        return (A.Equation(lhs, A.Binary(first_op, lhs, operand.lhs), eq.predicate, None, eq.comments),
                A.Equation(lhs, A.Binary(second_op, lhs, operand.rhs), eq.predicate))
    if isinstance(operand, A.Call) and operand.func == outer_op:
        return (A.Equation(lhs, A.Call(outer_op, (lhs, operand.args[0])), eq.predicate, None, eq.comments),
                A.Equation(lhs, A.Call(outer_op, (lhs, operand.args[1])), eq.predicate))
    return None

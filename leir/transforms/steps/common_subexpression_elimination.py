"""Compute a subexpression that occurs more than once into a temporary, once.

The subexpression may repeat inside one equation (``(X_{i,j} -
mean_{i})*(X_{i,j} - mean_{i})``) or occur in a later equation too, with
its loop variables renamed (``exp(X_{i,j} - M_{i})`` in both the sum and the
divide of a softmax, ``"also"`` names the later block). The temporary is
computed just before the (first) equation, at the outermost place where
everything it depends on is known, indexed by the loops around that place;
every occurrence then reads it. This trades recomputation (an ``exp`` per
element, twice) for memory traffic (a store and a load).

It requires:

- a subexpression computed from at least one tensor (not a lone access, an
  index expression or a condition, not inside an ``if_then_else``);
- a subexpression that occurs twice in the block, or in the block and in the
  later ``"also"`` block;
- its occurrences computed in the same dtype everywhere;
- a subexpression that reads neither tensor the two blocks write;
- a subexpression that reads nothing written between the temporary and its
  last use (inside the loops the temporary is hoisted out of, by an equation
  between the two blocks, or by one that shares a loop with either);
- for a later block, an unguarded first block;
- for a later block, a later use whose loop variables map to the loops the
  temporary is indexed by (a loop around both blocks maps to itself);
- no vectorized loop around all the uses of the temporary (TVM 0.27 computes
  a temporary written and read inside one vectorized loop wrong).

Example: the exponential of a softmax computed once, in the sum, and read by the divide

    step: {"block": "Z", "expr": "exp(X_{i,j} - M_{i})", "also": "Y"}

    before:
    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Z_{i} += exp(X_{i,j} - M_{i})$0;
      ];

    L^{16}_{r}
      L^{10}_{c} [
        Y_{r,c} = exp(X_{r,c} - M_{r})/Z_{r};
      ];

    after:
    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        exp_X_{i,j} = exp(X_{i,j} - M_{i});
        Z_{i} += exp_X_{i,j};
      ];

    L^{16}_{r}
      L^{10}_{c} [
        Y_{r,c} = exp_X_{r,c}/Z_{r};
      ];

Example: a square written as a product of two equal factors

    step: {"block": "var", "expr": "X_{i,j} - mean_{i}"}

    before:
    L^{8}_{i}
      L^{16}_{j} [
        var_{i} += (X_{i,j} - mean_{i})*(X_{i,j} - mean_{i})$0;
      ];

    after:
    L^{8}_{i}
      L^{16}_{j} [
        X_diff_{i,j} = X_{i,j} - mean_{i};
        var_{i} += X_diff_{i,j}*X_diff_{i,j};
      ];

Example: the max changes between the two uses

    step: {"block": "Z", "expr": "exp(X_{i,j} - M_{i})", "also": "Y"}

    before:
    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Z_{i} += exp(X_{i,j} - M_{i})$0;
      ];

    L^{16}_{i} [
      M_{i} = M_{i}*0.5;
    ];

    L^{16}_{i}
      L^{10}_{j} [
        Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
      ];

    refused: common_subexpression_elimination-operand-changes
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from leir import ast as A
from leir.bridge.lower import equation_text
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, NotApplicable, StaleStep, Step, str_arg
from leir.transforms.lib.expressions import (
    Occurrence,
    Placement,
    new_temporary,
    placement,
    replace_at_path,
    subexpressions,
)
from leir.transforms.lib.nests import VECTOR_TEMPORARY_BUG, replace_items
from leir.transforms.rewrite import map_expr

ID = "common_subexpression_elimination"
GROUP = "operator"
TITLE = "Eliminate common subexpression"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "common_subexpression_elimination"


class SingleUse(NotApplicable):
    """The subexpression occurs once in the block (name a later block that computes it with
    ``"also"``)."""

    code = "common_subexpression_elimination-single-use"


class NotInOther(NotApplicable):
    """The ``"also"`` block does not compute the subexpression (up to renaming its loop
    variables)."""

    code = "common_subexpression_elimination-not-in-other"


class OtherNotLater(NotApplicable):
    """The ``"also"`` block does not come after the block."""

    code = "common_subexpression_elimination-other-not-later"


class DtypeMismatch(NotApplicable):
    """The occurrences compute in different dtypes: one temporary cannot hold both."""

    code = "common_subexpression_elimination-dtype-mismatch"


class ReadsOwnOutput(NotApplicable):
    """The subexpression reads a tensor that one of the blocks writes."""

    code = "common_subexpression_elimination-reads-own-output"


class OperandChanges(NotApplicable):
    """An equation writes what the subexpression reads between the temporary and its last use."""

    code = "common_subexpression_elimination-operand-changes"


class Guarded(NotApplicable):
    """The first block is guarded: the temporary would miss values the later block reads."""

    code = "common_subexpression_elimination-guarded"


class IndexMismatch(NotApplicable):
    """A loop variable of the later use does not map to the loops the temporary is indexed by."""

    code = "common_subexpression_elimination-index-mismatch"


class VectorizedTemporary(NotApplicable):
    """A vectorized loop is around all the uses of the temporary: TVM 0.27 computes a temporary
    written and read inside one vectorized loop wrong."""

    code = "common_subexpression_elimination-vectorized-temporary"


# =================================================================== the step


@dataclass(frozen=True)
class Plan:
    """What a step does: the first block's occurrences, the later block's
    (with the variable renaming that maps the first onto them), and where
    the temporary goes."""

    first: EquationInfo
    uses: tuple[Occurrence, ...]
    other: EquationInfo | None
    other_uses: tuple[Occurrence, ...]
    renaming: dict[str, str]
    where: Placement


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    here = ctx.equations_at(at)
    if not here:
        return out
    infos = ctx.analysis.equations
    chosen = {info.index for info in here}
    # A subexpression reads at least one tensor, so two equations share one
    # only if they read a common tensor: key only those (listing at the
    # cursor must not walk every equation of a long file).
    reads = {info.index: frozenset(n.tensor for n in A.walk(info.equation.rhs) if isinstance(n, A.Access))
             for info in infos}
    near = set().union(*(reads[c] for c in chosen))
    keys = {info.index: _keyed(ctx, info) for info in infos if info.index in chosen or reads[info.index] & near}
    for info in here:
        block = ctx.block_names[info.index]
        for key, occs in keys[info.index].items():
            if len(occs) < 2:
                continue
            args = {"block": block, "expr": occs[0].text}
            if _plan_or_refusal(ctx, args)[1] is None:
                out.append(Candidate(Step(ID, args), f"Compute {occs[0].text} once ({len(occs)} uses in {block})",
                                     occs[0].node.span or info.equation.span))
    pairs = [(a, b) for a in infos for b in infos if a.index < b.index and a.index in keys and b.index in keys
             and (a.index in chosen or b.index in chosen)]
    for a, b in pairs:
        common = {k: v for k, v in keys[a.index].items() if k in keys[b.index]}
        for key, occs in common.items():
            args = {"block": ctx.block_names[a.index], "expr": occs[0].text, "also": ctx.block_names[b.index]}
            if _plan_or_refusal(ctx, args)[1] is None:
                title = f"Compute {occs[0].text} once for {args['block']} and {args['also']}"
                out.append(Candidate(Step(ID, args), title, occs[0].node.span or a.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    plan, refusal = _plan_or_refusal(ctx, args)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    plan, _ = _plan_or_refusal(ctx, args)
    where = plan.where
    temp, decls = new_temporary(ctx, plan.uses[0], where)
    program = ctx.program
    eq = plan.first.equation
    for occ in plan.uses:
        eq = replace_at_path(eq, occ.path, where.read(temp))
    program = replace_items(program, plan.first.site.path, 1, (eq,))
    if plan.other is not None:
        indices = tuple(A.Var(plan.renaming.get(l.var, l.var)) for l in where.loops) or None
        other = plan.other.equation
        for occ in plan.other_uses:
            other = replace_at_path(other, occ.path, A.Access(temp, indices))
        program = replace_items(program, plan.other.site.path, 1, (other,))
    program = replace(program, decls=program.decls + decls)
    return where.insert(program, where.write(temp, plan.uses[0].node, plan.first.equation.predicate))


def common_subexpression_elimination(program, block: str, expr: str, also: str | None = None):
    """Compute ``expr`` of ``block`` (and of ``also``) once (see the module
    docstring) and return the new program."""
    args = {"block": block, "expr": expr}
    if also is not None:
        args["also"] = also
    return apply_transform(__name__, program, Step(ID, args))


# ------------------------------------------------------------------ legality


def _plan_or_refusal(ctx: Context, args: dict) -> tuple[Plan | None, NotApplicable | None]:
    first = ctx.equation_of_block(str_arg(args, "block", ID))
    text = str_arg(args, "expr", ID)
    name = ctx.block_names[first.index]
    keyed = _keyed(ctx, first)
    key = next((k for k, occs in keyed.items() if occs[0].text == text), None)
    if key is None:
        raise StaleStep(f"{name} has no subexpression {text}",
                        f"the right-hand side of {name} is {equation_text(first.equation)}", first.equation.span)
    uses = keyed[key]
    other = other_uses = None
    renaming: dict[str, str] = {}
    if "also" in args:
        other = ctx.equation_of_block(str_arg(args, "also", ID))
        other_name = ctx.block_names[other.index]
        if other.index <= first.index:
            return None, OtherNotLater(f"{other_name} does not come after {name}",
                                       f"the temporary is computed with {name} and read by {other_name}, which must come "
                                       f"later in the program", other.equation.span)
        other_uses = _keyed(ctx, other).get(key)
        if other_uses is None:
            return None, NotInOther(f"{other_name} does not compute {text}",
                                    f"no subexpression of {other_name} equals {text} up to renaming its loop "
                                    f"variables (over loops of the same extents)", other.equation.span)
        renaming = dict(zip(_order(uses[0].node), _order(other_uses[0].node)))
    elif len(uses) < 2:
        return None, SingleUse(f"{text} occurs once in {name}",
                               f"{text} occurs once in {name}: name a later block that computes it too with \"also\"",
                               uses[0].node.span)
    everything = list(uses) + list(other_uses or [])
    dtypes = {o.dtype for o in everything}
    if len(dtypes) > 1:
        return None, DtypeMismatch(f"{text} is computed in {' and '.join(sorted(dtypes))}",
                                   f"the occurrences of {text} compute in different dtypes ({', '.join(sorted(dtypes))}), "
                                   f"so one temporary cannot hold both", uses[0].node.span)
    reads = uses[0].tensors
    for info in (first, other):
        if info is not None and info.equation.lhs.tensor in reads:
            return None, ReadsOwnOutput(f"{text} reads {info.equation.lhs.tensor}, which {ctx.block_names[info.index]} writes",
                                        f"{ctx.block_names[info.index]} writes {info.equation.lhs.tensor}, so the value of "
                                        f"{text} differs before and after it", uses[0].node.span)
    where = placement(ctx, first, uses[0].names)
    # The temporary lives in the innermost loop around all its uses.
    around_uses = [l for l in where.loops if other is None or any(l is m for m in other.loops)]
    vector = next((l for l in around_uses if l.kind == "V"), None)
    if vector is not None:
        return None, VectorizedTemporary(f"the temporary would be computed inside vectorized loop {vector.var}",
                                         f"{VECTOR_TEMPORARY_BUG}; {text} depends on vectorized loop {vector.var}, "
                                         f"so its temporary "
                                         f"would be written and read inside that loop", vector.span)
    changing = _writer_between(ctx, first, other, where, reads)
    if changing is not None:
        return None, OperandChanges(f"{changing.equation.lhs.tensor} changes between the uses of {text}",
                                    f"{equation_text(changing.equation)} writes {changing.equation.lhs.tensor} while the "
                                    f"temporary for {text} would be in use", changing.equation.span)
    if other is not None:
        if first.equation.predicate is not None:
            return None, Guarded(f"{name} is guarded",
                                 f"{name} runs only where its guard holds, so the temporary would miss values that "
                                 f"{ctx.block_names[other.index]} reads", first.equation.predicate.span)
        mismatch = _index_mismatch(first, other, where, renaming)
        if mismatch is not None:
            return None, IndexMismatch(f"loop {mismatch.var} does not map into {ctx.block_names[other.index]}", _mismatch_detail(
                ctx, mismatch, first, other, renaming), mismatch.span)
    return Plan(first, tuple(uses), other, tuple(other_uses or ()), renaming, where), None


def _writer_between(ctx: Context, first: EquationInfo, other: EquationInfo | None, where: Placement,
                    reads: frozenset[str]) -> EquationInfo | None:
    """An equation that writes one of ``reads`` while the temporary is live."""
    for w in where.scope:
        if w.equation.lhs.tensor in reads:
            return w
    if other is None:
        return None
    around = {id(l) for l in first.loops} | {id(l) for l in other.loops}
    for w in ctx.analysis.equations:
        if w.equation.lhs.tensor not in reads:
            continue
        if first.index < w.index < other.index or any(id(l) in around for l in w.loops):
            return w
    return None


def _index_mismatch(first: EquationInfo, other: EquationInfo, where: Placement,
                    renaming: dict[str, str]) -> A.Loop | None:
    """A loop the temporary is indexed by that has no counterpart where the
    later block reads it."""
    shared = {id(l) for l in other.loops}
    for loop in where.loops:
        is_shared = id(loop) in shared
        if loop.var in renaming:
            if is_shared and renaming[loop.var] != loop.var:
                return loop
        elif not is_shared:
            return loop
    return None


def _mismatch_detail(ctx, loop, first, other, renaming) -> str:
    a, b = ctx.block_names[first.index], ctx.block_names[other.index]
    if loop.var in renaming:
        return (f"loop {loop.var} runs around both {a} and {b}, but {b} uses {renaming[loop.var]} where {a} uses "
                f"{loop.var}: {b} would read the temporary at an iteration of {loop.var} that has not computed it")
    return (f"the temporary is indexed by loop {loop.var} of {a}, which the subexpression does not use and {b} is "
            f"not inside, so {b} has no index for it")


# ------------------------------------------------------------ occurrences


def _keyed(ctx: Context, info: EquationInfo) -> dict[A.Expr, list[Occurrence]]:
    """Occurrences of an equation's subexpressions grouped by their shape
    with loop variables replaced by their loops' ranges, in order of first
    appearance (so ``X_{i,j}`` under ``i<16, j<10`` and ``X_{r,c}`` under
    ``r<16, c<10`` group together)."""
    ranges = {l.var: (l.start, l.extent) for l in info.loops}
    out: dict[A.Expr, list[Occurrence]] = {}
    from leir.cancel import checkpoint

    for occ in subexpressions(ctx, info):
        checkpoint()
        out.setdefault(_shape(occ.node, ranges), []).append(occ)
    return out


def _shape(node: A.Expr, ranges: dict[str, tuple[int, int]]) -> A.Expr:
    order = _order(node)

    def fn(n):
        if isinstance(n, A.Var):
            start, extent = ranges.get(n.name, (0, 0))
            return A.Var(f"#{order.index(n.name)}:{start}:{extent}")
        return None

    return map_expr(node, fn)


def _order(node: A.Expr) -> list[str]:
    """Loop variables of an expression in order of first appearance."""
    names: list[str] = []

    def fn(n):
        if isinstance(n, A.Var) and n.name not in names:
            names.append(n.name)
        return None

    map_expr(node, fn)
    return names

"""What the steps that take a reduction block share: whether TVM would
take an equation's block for a reduction block (rfactor and
decompose_reduction both need it, each with its own error classes). Moved
from ``rfactor``, which imports it back."""

from __future__ import annotations

from leir.printer import access_text, print_expr
from leir.semantics import EquationInfo
from leir.transforms.base import Context, NotApplicable
from leir.transforms.lib.loop_kinds import tvm_affine_guard


# ------------------------------------------- reduction blocks, shared
#
# decompose_reduction needs TVM's "reduction block" too.


def reduction_block_refusal(ctx: Context, info: EquationInfo, errors: dict[str, type]) -> NotApplicable | None:
    """Why TVM would not take ``info``'s block for a reduction block: its
    implied initial value (``T.init``), the only writer of its tensor, and
    affine bindings (a guard on single loop variables). ``errors`` maps
    ``not-reduction``, ``written-elsewhere`` and ``guard`` to the caller's
    error classes."""
    eq = info.equation
    lhs = eq.lhs
    text = access_text(lhs)
    if info.kind != "reduce":
        why = ("updates the value an earlier equation wrote (no implied initial value)" if info.kind == "update"
               else "is not a reduction (it does not accumulate into its own element)")
        return errors["not-reduction"](f"{text} is not a reduction with an implied initial value",
                                       f"{text} {why}; only a reduction whose initial value is implied "
                                       f"(C += e as the first write of C) is one", eq.span)
    others = [o for o in ctx.analysis.equations if o.equation.lhs.tensor == lhs.tensor and o is not info]
    if others:
        other = others[0].equation
        return errors["written-elsewhere"](f"{lhs.tensor} is also written by another equation",
                                           f"{lhs.tensor} is written by {access_text(other.lhs)} too: TVM transforms "
                                           f"a reduction only when it is the only writer of its tensor", eq.span)
    if not tvm_affine_guard(eq.predicate):
        guard = print_expr(eq.predicate, declared=frozenset(ctx.analysis.tensors))
        return errors["guard"](f"TVM cannot schedule the guard {guard}",
                               f"the guard of {text} ({guard}) is not a bound on single loop variables (like j < 20): "
                               f"TVM then does not recognise the block as a reduction", eq.span)
    return None

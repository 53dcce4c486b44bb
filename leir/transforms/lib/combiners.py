"""What a reduction's combiner implies: ``init_value``, its identity as a
literal of the tensor's dtype (the value a reduction split in two starts
its second part from).

Moved out of ``tensor_split``, which imports it back; ``tensor_concat``
imports it from here.
"""

from __future__ import annotations

from leir import ast as A
from leir import value_types as VT
from leir.semantics import EquationInfo
from leir.transforms.base import Context


def init_value(ctx: Context, info: EquationInfo) -> A.Expr | None:
    """The combiner's identity as a literal of the tensor's dtype."""
    dtype = ctx.analysis.tensors[info.equation.lhs.tensor].dtype
    floating = VT.is_float_dtype(dtype)
    if dtype == "bool":
        return None
    if info.combiner == "sum":
        return A.Num(0.0, "0.0") if floating else A.Num(0, "0")
    if info.combiner == "prod":
        return A.Num(1.0, "1.0") if floating else A.Num(1, "1")
    if not floating:
        return None
    inf = A.Num(float("inf"), "inf")
    return A.Unary("-", inf) if info.combiner == "max" else inf

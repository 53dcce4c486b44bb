"""The tensor table: each tensor's dtype and memory scope, rank, role and
shape, declared or inferred from its accesses (``unused-tensor``
(warning), ``dtype-conflict``, ``scope-conflict``, ``rank-conflict``,
``write-to-input``, ``never-written``, ``shape-not-inferable``,
``negative-index``, ``tensor-too-large``); and the typing rules of the
equations over it (``type-rule``).

A tensor with neither declaration nor superscript is f32 in global memory:
the default that keeps files short. An undeclared tensor is an input if no
equation writes it, a temporary if an equation after its first write
reads it, else an output; its shape is the smallest that holds every
index where it runs."""

from __future__ import annotations

from leir import ast as A
from leir.diagnostics import Related, error, warning
from leir.limits import MAX_ELEMENTS, power_text
from leir.semantics.context import NO_SPAN, Context, Use
from leir.semantics.model import EquationInfo, TensorInfo
from leir.semantics.ranges import exact_range, sound_range


def build_tensors(ctx: Context, decls: dict[str, A.Decl], uses: dict[str, list[Use]]) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    order = list(decls) + [n for n in uses if n not in decls]
    for name in order:
        decl = decls.get(name)
        tensor_uses = uses.get(name, [])
        if decl is not None and not tensor_uses:
            ctx.report(warning(decl.name_span or NO_SPAN, "unused-tensor", f"tensor {name} is declared but never used"))
        dtype, scope = resolve_type(ctx, name, decl, tensor_uses)
        rank = resolve_rank(ctx, name, decl, tensor_uses)
        role = resolve_role(ctx, name, decl, tensor_uses)
        if decl is not None:
            shape = decl.shape
        else:
            shape = infer_shape(ctx, name, rank, tensor_uses)
        span = (decl.name_span if decl else None) or (tensor_uses[0].access.name_span if tensor_uses else None)
        info = tensors[name] = TensorInfo(name, dtype, shape, scope, role, decl is not None, span)
        if len(shape) > 1 and info.size > MAX_ELEMENTS:
            ctx.report(error(span or NO_SPAN, "tensor-too-large",
                             f"tensor {name} would have {_dims_text(shape)} elements, more than "
                             f"{power_text(MAX_ELEMENTS)} (TVM's and NumPy's int64 offsets)"))
    return tensors


def resolve_type(ctx: Context, name: str, decl: A.Decl | None, uses: list[Use]) -> tuple[str, str]:
    dtype = decl.dtype if decl else None
    scope = decl.scope if decl else None
    first_dtype: A.Access | None = None
    first_scope: A.Access | None = None
    for u in uses:
        a = u.access
        span = a.span or NO_SPAN
        if a.dtype is not None:
            if dtype is None:
                dtype, first_dtype = a.dtype, a
            elif a.dtype != dtype:
                where = Related(decl.name_span or NO_SPAN, f"declared {decl.dtype} here") if decl else Related(first_dtype.span or NO_SPAN, f"{dtype} here")
                ctx.report(error(span, "dtype-conflict", f"{name} is {dtype}, but this access says {a.dtype}", where))
        if a.scope is not None:
            if scope is None:
                scope, first_scope = a.scope, a
            elif a.scope != scope:
                where = Related(decl.name_span or NO_SPAN, f"declared @{decl.scope} here") if decl else Related(first_scope.span or NO_SPAN, f"@{scope} here")
                ctx.report(error(span, "scope-conflict", f"{name} is in scope {scope}, but this access says {a.scope}", where))
    if dtype is None:
        dtype = "f32"  # the documented default
    if dtype not in A.DTYPES:
        dtype = "f32"  # the parser reported it
    if scope not in A.SCOPES:
        scope = "g"
    return dtype, scope


def resolve_rank(ctx: Context, name: str, decl: A.Decl | None, uses: list[Use]) -> int:
    rank = len(decl.shape) if decl else None
    first: A.Access | None = None
    for u in uses:
        a = u.access
        if rank is None:
            rank, first = a.rank, a
        elif a.rank != rank:
            where = Related(decl.name_span or NO_SPAN, f"declared with rank {rank} here") if decl else Related(first.span or NO_SPAN, f"rank {rank} here")
            ctx.report(error(a.span or NO_SPAN, "rank-conflict",
                             f"{name} has {rank} dimension{'s' if rank != 1 else ''}, but this access uses {a.rank}", where))
    return rank or 0


def resolve_role(ctx: Context, name: str, decl: A.Decl | None, uses: list[Use]) -> str:
    writes = [u for u in uses if u.is_write]
    if decl is not None:
        if decl.role == "in" and writes:
            ctx.report(error(writes[0].access.span or NO_SPAN, "write-to-input",
                             f"{name} is an input and cannot be written",
                             Related(decl.name_span or NO_SPAN, "declared as input here")))
        if decl.role in ("out", "tmp") and not writes and uses:
            ctx.report(error(decl.name_span or NO_SPAN, "never-written",
                             f"{decl.role} tensor {name} is never written"))
        return decl.role
    if not writes:
        return "in"
    first_write = min(u.eq_index for u in writes)
    writing_eqs = {u.eq_index for u in writes}
    for u in uses:
        if not u.is_write and u.eq_index > first_write and u.eq_index not in writing_eqs:
            return "tmp"
    return "out"


def infer_shape(ctx: Context, name: str, rank: int, uses: list[Use]) -> tuple[int, ...]:
    extents = [1] * rank
    for u in uses:
        a = u.access
        if a.indices is None or len(a.indices) != rank:
            continue
        for d, index in enumerate(a.indices):
            if not ctx.vars_of(index) <= u.ranges.keys():
                continue  # an unbound variable, reported already
            span = index.span or a.span or NO_SPAN
            b, exact = exact_range(ctx, index, u)
            if not exact:
                b = sound_range(ctx, index, u)
                if b is None:
                    ctx.report(error(span, "shape-not-inferable",
                                     f"cannot infer dimension {d} of {name} from this index; declare {name} with its shape"))
                    continue
            elif b is None:
                continue  # the guard never holds
            elif b[0] < 0:
                ctx.report(error(span, "negative-index",
                                 f"index {d} of {name} can be {b[0]} here, below 0; declare {name} or change the index"))
            extents[d] = max(extents[d], b[1] + 1)
    return tuple(extents)


def _dims_text(shape: tuple[int, ...]) -> str:
    return " x ".join(map(str, shape)) if sum(len(str(d)) for d in shape) < 200 else f"{len(shape)} dimensions' worth of"


def check_types(ctx: Context, tensors: dict[str, TensorInfo], equations: list[EquationInfo]) -> None:
    """What the typing rules (leir.value_types) give no meaning to, e.g.
    ``exp`` in an integer equation: reported here rather than when
    lowering refuses it."""
    from leir import value_types

    for info in equations:
        eq = info.equation
        t = tensors.get(eq.lhs.tensor)
        if t is None:
            continue
        parts = [eq.rhs] + ([eq.predicate] if eq.predicate is not None else [])
        for k, part in enumerate(parts):
            context = t.dtype
            if k == 1:  # the guard is a condition over the written dtype
                found = value_types.type_errors(A.Call("if_then_else", (part, A.Num(0, "0"), A.Num(0, "0"))), context, tensors)
            else:
                found = value_types.type_errors(part, context, tensors)
            for node, message in found:
                ctx.report(error(getattr(node, "span", None) or eq.span or NO_SPAN, "type-rule", message))

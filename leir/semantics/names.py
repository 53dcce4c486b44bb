"""Names and scopes: the declarations (``duplicate-declaration``,
``name-clash``, ``bad-scope``) and every access and loop-variable use,
collected per tensor for the passes after them (``loop-var-out-of-scope``,
``unknown-loop-var``)."""

from __future__ import annotations

from leir import ast as A
from leir.cancel import checkpoint
from leir.diagnostics import Related, error
from leir.semantics.context import NO_SPAN, Context, Use


def check_decls(ctx: Context) -> dict[str, A.Decl]:
    decls: dict[str, A.Decl] = {}
    for d in ctx.program.decls:
        span = d.name_span or d.span or NO_SPAN
        if d.name in decls:
            first = decls[d.name]
            ctx.report(error(span, "duplicate-declaration", f"tensor {d.name} is declared twice",
                             Related(first.name_span or first.span or NO_SPAN, "first declared here")))
            continue
        if d.name in ctx.all_loops:
            ctx.report(error(span, "name-clash", f"{d.name} names both a tensor and a loop variable",
                             Related(ctx.all_loops[d.name].var_span or NO_SPAN, "loop variable here")))
        if d.scope != "g" and d.role != "tmp":
            ctx.report(error(d.span or span, "bad-scope",
                             f"{d.role} tensor {d.name} must live in global memory; only temporaries can be @{d.scope}"))
        decls[d.name] = d
    return decls


def collect_uses(ctx: Context, decls: dict[str, A.Decl]) -> dict[str, list[Use]]:
    uses: dict[str, list[Use]] = {}
    for k, facts in enumerate(ctx.facts):
        if not k & 63:
            checkpoint()
        site = facts.site
        eq = site.equation
        bound = facts.ranges
        parts = [(eq.lhs, True, eq.predicate)]
        parts += [(r, False, eq.predicate) for r in facts.reads]
        parts += [(r, False, None) for r in facts.guard_reads]
        for access, is_write, guard in parts:
            if access.indices is None and access.tensor in ctx.all_loops and access.tensor not in decls:
                loop = ctx.all_loops[access.tensor]
                ctx.report(error(access.span or NO_SPAN, "loop-var-out-of-scope",
                                 f"loop variable {access.tensor} is used outside its loop",
                                 Related(loop.span or NO_SPAN, "the loop is here")))
                continue
            uses.setdefault(access.tensor, []).append(Use(access, k, is_write, site.loops, bound, guard))
        for node in facts.variables:
            if node.name in bound:
                continue
            span = node.span or NO_SPAN
            if node.name in ctx.all_loops:
                loop = ctx.all_loops[node.name]
                ctx.report(error(span, "loop-var-out-of-scope",
                                 f"loop variable {node.name} is used outside its loop",
                                 Related(loop.span or NO_SPAN, "the loop is here")))
            else:
                ctx.report(error(span, "unknown-loop-var", f"unknown loop variable {node.name}"))
    return uses

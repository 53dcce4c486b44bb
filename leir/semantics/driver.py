"""The driver: ``analyze`` runs the passes over one shared ``Context`` in
a fixed order (later passes read what earlier ones built: the declarations,
the uses per tensor, the equations' meaning, the tensor table), then
drops repeated diagnostics and sorts the rest by position; ``classify``
runs the classification alone, for hover's light path."""

from __future__ import annotations

from leir import ast as A
from leir.semantics.bounds import check_bounds
from leir.semantics.context import Context
from leir.semantics.equations import check_init_order, classify_equations
from leir.semantics.loops import check_loops
from leir.semantics.model import Analysis, EquationInfo
from leir.semantics.names import check_decls, collect_uses
from leir.semantics.races import check_races
from leir.semantics.reductions import check_guarded_reduction_inits, check_reduction_injective
from leir.semantics.tensors import build_tensors, check_types


def analyze(program: A.Program) -> Analysis:
    ctx = Context(program)
    decls = check_decls(ctx)
    check_loops(ctx)
    uses = collect_uses(ctx, decls)
    equations = classify_equations(ctx)
    # Races first: when a pathological document exhausts the
    # enumeration budget, better an inferred shape larger than needed
    # than a race left undecided.
    check_races(ctx, equations)
    tensors = build_tensors(ctx, decls, uses)
    check_bounds(ctx, tensors, uses)
    check_init_order(ctx, tensors, equations)
    check_types(ctx, tensors, equations)
    check_guarded_reduction_inits(ctx, equations)
    check_reduction_injective(ctx, equations)
    # ``C += e`` is ``C = C + e`` with both accesses at one span: a check
    # of each access would otherwise report the same problem twice.
    diags = list(dict.fromkeys(ctx.diags))
    diags.sort(key=lambda d: (d.span.start, d.span.end))
    return Analysis(program, tensors, equations, diags)


def classify(program: A.Program) -> list[EquationInfo]:
    """The equations of ``program`` classified (assign, reduce, update;
    their loops and axes) without the checks ``analyze`` runs, for a program
    known to be valid (a loop rewrite of a checked one)."""
    return classify_equations(Context(program))

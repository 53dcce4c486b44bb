"""The program a simple step makes, predicted on the syntax tree without
TVM (``predicted_after``): what hover explains a step with before it is
applied."""

from __future__ import annotations

from leir import ast as A
from leir.explain.facts import _context
from leir.semantics import Analysis


def predicted_after(before: Analysis, step) -> Analysis | None:
    """The program ``step`` produces, computed on the syntax tree without
    TVM (for hover), where that is simple: parallelize, vectorize and
    unroll (a loop kind), reorder of two loops of one nest, split, and
    tile of two adjacent loops by dividing sizes. None for every other
    step (apply it to know). tests/test_explain.py checks the prediction
    against ``leir.transforms.apply`` on the examples (1,457 steps, all
    equal)."""
    from dataclasses import replace

    from leir.errors import LeirError

    args = step.args
    ctx = _context(before)
    kinds = {"parallelize": "P", "vectorize": "V", "unroll": "U", "bind": "B"}
    try:
        if step.id in kinds and step.id != "bind":
            site = ctx.loop_site(args["block"], args["loop"])
            if site.loop.kind != "L":
                return None
            loops = list(site.nest.loops)
            loops[site.position] = replace(site.loop, kind=kinds[step.id])
        elif step.id in ("split", "tile"):
            return _predicted_split(before, ctx, step)
        elif step.id == "reorder" and len(args.get("loops") or ()) == 2:
            outer = ctx.loop_site(args["block"], args["loops"][0])
            inner = ctx.loop_site(args["block"], args["loops"][1])
            if outer.nest is not inner.nest or inner.position != outer.position + 1:
                return None
            loops = list(outer.nest.loops)
            # The comments stay on their lines (with the position, not the loop).
            loops[outer.position] = replace(inner.loop, comments=outer.loop.comments)
            loops[inner.position] = replace(outer.loop, comments=inner.loop.comments)
            site = outer
        else:
            return None
    except (LeirError, KeyError, TypeError, ValueError, IndexError):
        return None
    target_nest = site.nest
    new_nest = replace(target_nest, loops=tuple(loops))

    def rebuild(nest: A.Nest) -> A.Nest:
        if nest is target_nest:
            return new_nest
        body = tuple(rebuild(item) if isinstance(item, A.Nest) else item for item in nest.body)
        return nest if all(a is b for a, b in zip(body, nest.body)) else replace(nest, body=body)

    return _relabelled(before, replace(before.program, units=tuple(rebuild(u) for u in before.program.units)))


def _predicted_split(before: Analysis, ctx, step) -> Analysis | None:
    """split (exact, or imperfect on unguarded equations) and exact tile of
    two adjacent loops of one nest, on the syntax tree: ``k`` becomes
    ``k_0*F+k_1`` under the nest, as TVM's split raised back reads."""
    from dataclasses import replace

    from leir.transforms.rewrite import names_in, substitute

    args = step.args
    if step.id == "split":
        site = ctx.loop_site(args["block"], args["loop"])
        sites, factors = [site], [int(args["factors"][1])]
        if int(args["factors"][0]) != -(-site.loop.extent // factors[0]):
            return None
    else:
        sites = [ctx.loop_site(args["block"], v) for v in args["loops"]]
        factors = [int(f) for f in args["sizes"]]
        if len(sites) != 2 or sites[0].nest is not sites[1].nest or sites[1].position != sites[0].position + 1:
            return None
        if any(s.loop.extent % f for s, f in zip(sites, factors)):
            return None
    nest = sites[0].nest
    taken = ctx.memo("names_in", lambda: names_in(before.program))  # every step explained at one cursor
    mapping, guards, outer, inner = {}, [], [], []
    for site, f in zip(sites, factors):
        loop = site.loop
        if loop.kind != "L" or loop.start != 0 or not 2 <= f < loop.extent:
            return None
        o_name, i_name = f"{loop.var}_0", f"{loop.var}_1"
        if o_name in taken or i_name in taken:
            return None
        n_outer = -(-loop.extent // f)
        outer.append(A.Loop("L", n_outer, o_name, comments=loop.comments))
        inner.append(A.Loop("L", f, i_name))
        value = A.Binary("+", A.Binary("*", A.Var(o_name), A.Num(f, str(f))), A.Var(i_name))
        mapping[loop.var] = value
        if n_outer * f != loop.extent:
            guards.append(A.Binary("<", value, A.Num(loop.extent, str(loop.extent))))
    first = sites[0].position
    loops = nest.loops[:first] + tuple(outer) + tuple(inner) + nest.loops[first + len(sites):]

    def rewrite(item):
        if isinstance(item, A.Nest):
            return replace(item, body=tuple(rewrite(i) for i in item.body))
        lhs = substitute(item.lhs, mapping)
        predicate = substitute(item.predicate, mapping) if item.predicate is not None else None
        if guards:
            if predicate is not None:
                raise _Unpredictable
            predicate = guards[0]
        return replace(item, lhs=lhs, rhs=substitute(item.rhs, mapping), predicate=predicate)

    try:
        new_nest = replace(nest, loops=loops, body=tuple(rewrite(i) for i in nest.body))
    except _Unpredictable:
        return None

    def rebuild(n: A.Nest) -> A.Nest:
        if n is nest:
            return new_nest
        body = tuple(rebuild(i) if isinstance(i, A.Nest) else i for i in n.body)
        return n if all(a is b for a, b in zip(body, n.body)) else replace(n, body=body)

    return _relabelled(before, replace(before.program, units=tuple(rebuild(u) for u in before.program.units)))


def _relabelled(before: Analysis, program: A.Program) -> Analysis:
    """The analysis of a loop rewrite of ``before``'s program: its tensors
    are ``before``'s (a loop transformation keeps every shape and dtype)
    and only the equations are classified again. The full ``analyze``
    would re-run its checks, which enumerate iteration spaces (100 ms on
    a convolution): the step's own preconditions already hold."""
    from leir.semantics import classify

    return Analysis(program, dict(before.tensors), classify(program), [])


class _Unpredictable(Exception):
    pass



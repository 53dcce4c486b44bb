"""Put a transformed program back into the user's text with as little
change as possible.

A transformation done by a TVM schedule primitive comes back as a whole
raised program, in the raiser's spelling (``2.0`` for ``2``, explicit casts,
no comments). Units the primitive did not touch must keep the user's text:
we raise the untransformed function too, match its units against the new
ones (equal syntax trees, in order), and take the user's original unit
wherever a unit is unchanged. Declarations the user wrote stay; a new
tensor (a cache stage) gets a declaration only when inference would not
give it the same dtype, scope, shape and role.
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir.semantics import analyze
from leir.transforms.rewrite import map_equation, map_expr


def splice(original: A.Program, raised_before: A.Program, raised_after: A.Program) -> A.Program:
    units = _splice_units(original, raised_before, raised_after)
    used = _tensor_names(units)
    decls = [_follow(d, raised_before, raised_after) for d in original.decls if d.name in used]
    draft = A.Program(tuple(decls), units, None, original.end_comments)
    known = {d.name for d in decls}
    inferred = analyze(draft).tensors
    for d in raised_after.decls:
        if d.name in known or d.name not in used:
            continue
        t = inferred.get(d.name)
        if t is None or (t.dtype, t.scope, t.shape, t.role) != (d.dtype, d.scope, d.shape, d.role):
            decls.append(replace(d, span=None, name_span=None))
    return A.Program(tuple(decls), units, None, original.end_comments)


def _follow(decl: A.Decl, before: A.Program, after: A.Program) -> A.Decl:
    """The user's declaration, with the shape and scope the step gave the
    tensor when it changed them (a layout transformation reshapes it)."""
    old = next((d for d in before.decls if d.name == decl.name), None)
    new = next((d for d in after.decls if d.name == decl.name), None)
    if old is None or new is None or (old.shape, old.scope) == (new.shape, new.scope):
        return decl
    return replace(decl, shape=new.shape, scope=new.scope)


def _splice_units(original: A.Program, before: A.Program, after: A.Program) -> tuple[A.Nest, ...]:
    new_units = [_tidy_item(u) for u in after.units]
    if len(before.units) != len(original.units):
        # The raised original does not line up with the text unit by unit
        # (should not happen); keep the raised units rather than guess.
        return tuple(new_units)
    matches = _lcs(before.units, after.units)
    for i, j in matches:
        new_units[j] = original.units[i]
    # Between matched units lie the ones the step changed: each gets the
    # comments of the original unit it replaces.
    bounds = [(-1, -1)] + matches + [(len(original.units), len(after.units))]
    for (i0, j0), (i1, j1) in zip(bounds, bounds[1:]):
        olds, news = list(range(i0 + 1, i1)), list(range(j0 + 1, j1))
        for i, j in zip(olds, news):
            new_units[j] = carry_comments(original.units[i], new_units[j])
        if news and len(olds) > len(news):
            for i in olds[len(news):]:
                new_units[news[-1]] = carry_comments(original.units[i], new_units[news[-1]], first_line_only=True)
    return tuple(new_units)


def carry_comments(old: A.Nest, new: A.Nest, first_line_only: bool = False) -> A.Nest:
    """``new`` with the comments of ``old``: those on its first line go to
    the first line of ``new``, a loop's to the loop with the same variable,
    an equation's to the first equation writing the same tensor."""
    old_loops = [n for n in A.walk(old) if isinstance(n, A.Loop)]
    old_eqs = [n for n in A.walk(old) if isinstance(n, A.Equation)]
    first = _first_comments(old)
    loop_comments = {} if first_line_only else {l.var: l.comments for l in old_loops if l.comments != A.NO_COMMENTS}
    eq_comments: dict[str, A.Comments] = {}
    if not first_line_only:
        for eq in old_eqs:
            if eq.comments != A.NO_COMMENTS:
                eq_comments.setdefault(eq.lhs.tensor, eq.comments)
    if old.loops:
        loop_comments.pop(old.loops[0].var, None)

    def merge(a: A.Comments, b: A.Comments) -> A.Comments:
        return A.Comments(a.before + b.before, b.after if b.after is not None else a.after)

    def visit(item, top: bool):
        if isinstance(item, A.Equation):
            c = eq_comments.pop(item.lhs.tensor, None)
            return replace(item, comments=merge(item.comments, c)) if c else item
        loops = tuple(replace(l, comments=merge(l.comments, loop_comments.pop(l.var))) if l.var in loop_comments else l
                      for l in item.loops)
        return replace(item, loops=loops, body=tuple(visit(b, False) for b in item.body))

    out = visit(new, True)
    if first != A.NO_COMMENTS:
        # A unit merged into an earlier one (first_line_only) comes later in
        # the text: its comments follow those already there.
        out = _with_first_comments(out, first, append=first_line_only)
    if not first_line_only and old.end_comments != A.NO_COMMENTS:
        out = replace(out, end_comments=merge(out.end_comments, old.end_comments))
    return out


def _first_comments(unit: A.Nest) -> A.Comments:
    if unit.loops:
        return unit.loops[0].comments
    if unit.bracketed:
        return unit.open_comments
    return unit.body[0].comments if isinstance(unit.body[0], A.Equation) else A.NO_COMMENTS


def _with_first_comments(unit: A.Nest, c: A.Comments, append: bool = False) -> A.Nest:
    def merge(a: A.Comments) -> A.Comments:
        before = a.before + c.before if append else c.before + a.before
        return A.Comments(before, a.after if a.after is not None else c.after)

    if unit.loops:
        first = unit.loops[0]
        return replace(unit, loops=(replace(first, comments=merge(first.comments)),) + unit.loops[1:])
    if unit.bracketed:
        return replace(unit, open_comments=merge(unit.open_comments))
    eq = unit.body[0]
    return replace(unit, body=(replace(eq, comments=merge(eq.comments)),) + unit.body[1:])


def _tidy_item(item):
    """Indices as a person writes them: TVM builds ``jo*8 + (ji_0*5 + ji_1)``
    when it splits ``ji``; integer addition is associative, so the
    parentheses go (``jo*8+ji_0*5+ji_1``)."""
    if isinstance(item, A.Equation):
        return map_equation(item, lambda e: map_expr(e, _tidy_access))
    return replace(item, body=tuple(_tidy_item(b) for b in item.body))


def _tidy_access(e: A.Expr):
    if isinstance(e, A.Access) and e.indices is not None:
        return replace(e, indices=tuple(_left_associate(i) for i in e.indices))
    return None


def _left_associate(e: A.Expr) -> A.Expr:
    if isinstance(e, A.Binary):
        lhs, rhs = _left_associate(e.lhs), _left_associate(e.rhs)
        if e.op in ("+", "-") and isinstance(rhs, A.Binary) and rhs.op in ("+", "-"):
            # a + (b ± c) = (a + b) ± c ;  a - (b ± c) = (a - b) ∓ c
            inner_op = rhs.op if e.op == "+" else ("-" if rhs.op == "+" else "+")
            return _left_associate(A.Binary(inner_op, A.Binary(e.op, lhs, rhs.lhs), rhs.rhs))
        return replace(e, lhs=lhs, rhs=rhs)
    if isinstance(e, A.Unary):
        return replace(e, operand=_left_associate(e.operand))
    return e


def _lcs(a, b) -> list[tuple[int, int]]:
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = table[i + 1][j + 1] + 1 if a[i] == b[j] else max(table[i + 1][j], table[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _tensor_names(units) -> set[str]:
    names = set()
    for unit in units:
        for node in A.walk(unit):
            if isinstance(node, A.Access):
                names.add(node.tensor)
    return names

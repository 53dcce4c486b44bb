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
    decls = [d for d in original.decls if d.name in used]
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


def _splice_units(original: A.Program, before: A.Program, after: A.Program) -> tuple[A.Nest, ...]:
    new_units = [_tidy_item(u) for u in after.units]
    if len(before.units) != len(original.units):
        # The raised original does not line up with the text unit by unit
        # (should not happen); keep the raised units rather than guess.
        return tuple(new_units)
    matches = _lcs(before.units, after.units)
    for i, j in matches:
        new_units[j] = original.units[i]
    return tuple(new_units)


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

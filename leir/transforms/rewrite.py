"""Small tools for transformations that rewrite the syntax tree directly
(those TVM has no schedule primitive for)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from leir import ast as A


def map_expr(e: A.Expr, fn: Callable[[A.Expr], A.Expr | None]) -> A.Expr:
    """Rebuild ``e`` bottom-up; ``fn`` returns a replacement or None."""
    if isinstance(e, A.Access) and e.indices is not None:
        e = replace(e, indices=tuple(map_expr(i, fn) for i in e.indices))
    elif isinstance(e, A.Unary):
        e = replace(e, operand=map_expr(e.operand, fn))
    elif isinstance(e, A.Binary):
        e = replace(e, lhs=map_expr(e.lhs, fn), rhs=map_expr(e.rhs, fn))
    elif isinstance(e, A.Call):
        e = replace(e, args=tuple(map_expr(a, fn) for a in e.args))
    out = fn(e)
    return e if out is None else out


def substitute(e: A.Expr, mapping: dict[str, A.Expr]) -> A.Expr:
    """Replace loop variables by expressions."""
    return map_expr(e, lambda n: mapping.get(n.name) if isinstance(n, A.Var) else None)


def map_equation(eq: A.Equation, fn: Callable[[A.Expr], A.Expr]) -> A.Equation:
    """Apply ``fn`` to the written access, the value and the guard."""
    lhs = fn(eq.lhs)
    assert isinstance(lhs, A.Access)
    return replace(eq, lhs=lhs, rhs=fn(eq.rhs), predicate=None if eq.predicate is None else fn(eq.predicate))


def item_at(program: A.Program, path: tuple[int, ...]) -> A.Item:
    """The unit (path of length 1) or body item at ``path``."""
    node: A.Item = program.units[path[0]]
    for i in path[1:]:
        assert isinstance(node, A.Nest)
        node = node.body[i]
    return node


def replace_at(program: A.Program, path: tuple[int, ...], items: tuple[A.Item, ...]) -> A.Program:
    """The program with the item at ``path`` replaced by ``items`` (none
    deletes it). Replacing a unit needs nests (units are nests)."""

    def inside(nest: A.Nest, rest: tuple[int, ...]) -> A.Nest:
        k = rest[0]
        if len(rest) == 1:
            body = nest.body[:k] + items + nest.body[k + 1:]
        else:
            child = nest.body[k]
            assert isinstance(child, A.Nest)
            body = nest.body[:k] + (inside(child, rest[1:]),) + nest.body[k + 1:]
        return replace(nest, body=body)

    u = path[0]
    if len(path) == 1:
        new_units = tuple(i if isinstance(i, A.Nest) else A.Nest((), (i,), None, bracketed=False) for i in items)
        return replace(program, units=program.units[:u] + new_units + program.units[u + 1:])
    return replace(program, units=program.units[:u] + (inside(program.units[u], path[1:]),) + program.units[u + 1:])


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever is free."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def names_in(program: A.Program) -> set[str]:
    """Every tensor and loop variable name the program uses."""
    names = {d.name for d in program.decls}
    for node in A.walk(program):
        if isinstance(node, A.Access):
            names.add(node.tensor)
        elif isinstance(node, (A.Loop,)):
            names.add(node.var)
    return names

"""Where the nests of a program sit, and the edits operator-level steps
make on them: locating a nest (``nest_places``, ``places_of``, ``sibling``),
the equations under an item, replacing items, renaming loop variables,
building nests from loops and a body; and ``VECTOR_TEMPORARY_BUG``, a TVM
limitation that steps creating temporaries check (``shared_temporary``).

Moved out of ``operator_fusion``, which imports these back; the steps that
share them (fission, concatenation, splits, expression splitting, common
subexpression elimination...) import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.base import Context
from leir.transforms.lib.dependence import _touches_tensor, touches
from leir.transforms.rewrite import map_equation, substitute


@dataclass(frozen=True)
class NestPlace:
    #: The unit index, then body indices: where the nest sits.
    path: tuple[int, ...]
    #: The loops of the nests around it, outermost first.
    outer: tuple[A.Loop, ...]


def places_of(ctx: Context) -> dict[int, NestPlace]:
    """``nest_places`` of the context's program, once per program."""
    return ctx.memo("nest_places", lambda: nest_places(ctx.program))


def nest_places(program: A.Program) -> dict[int, NestPlace]:
    """Where every nest is, keyed by ``id(nest)``."""
    out: dict[int, NestPlace] = {}

    def visit(nest: A.Nest, path: tuple[int, ...], outer: tuple[A.Loop, ...]) -> None:
        out[id(nest)] = NestPlace(path, outer)
        for i, item in enumerate(nest.body):
            if isinstance(item, A.Nest):
                visit(item, path + (i,), outer + nest.loops)

    for u, unit in enumerate(program.units):
        visit(unit, (u,), ())
    return out


def body_at(program: A.Program, path: tuple[int, ...]) -> tuple[A.Item, ...]:
    """The items among which the item at ``path`` sits (the units for a
    path of length 1)."""
    if len(path) == 1:
        return program.units
    node: A.Item = program.units[path[0]]
    for i in path[1:-1]:
        assert isinstance(node, A.Nest)
        node = node.body[i]
    assert isinstance(node, A.Nest)
    return node.body


def sibling(program: A.Program, path: tuple[int, ...], offset: int) -> A.Item | None:
    """The item ``offset`` places after (or before) the one at ``path``."""
    items = body_at(program, path)
    k = path[-1] + offset
    return items[k] if 0 <= k < len(items) else None


def replace_items(program: A.Program, path: tuple[int, ...], count: int, items: tuple[A.Item, ...]) -> A.Program:
    """The program with ``count`` items starting at ``path`` replaced by
    ``items``. Top-level items must be nests (a bare equation is wrapped)."""
    k = path[-1]
    if len(path) == 1:
        units = tuple(i if isinstance(i, A.Nest) else A.Nest((), (i,), None, bracketed=False) for i in items)
        return replace(program, units=program.units[:k] + units + program.units[k + count:])

    def inside(nest: A.Nest, rest: tuple[int, ...]) -> A.Nest:
        if len(rest) == 1:
            return replace(nest, body=nest.body[:k] + items + nest.body[k + count:])
        child = nest.body[rest[0]]
        assert isinstance(child, A.Nest)
        return replace(nest, body=nest.body[:rest[0]] + (inside(child, rest[1:]),) + nest.body[rest[0] + 1:])

    u = path[0]
    return replace(program, units=program.units[:u] + (inside(program.units[u], path[1:]),) + program.units[u + 1:])


def equations_under(ctx: Context, path: tuple[int, ...]) -> list[EquationInfo]:
    """The equations at or under the item at ``path``, in program order."""
    n = len(path)
    return [info for info in ctx.analysis.equations if info.site.path[:n] == path]


def rename_vars(item: A.Item, mapping: dict[str, str]) -> A.Item:
    """``item`` with loop variables renamed (loops and uses, all at once)."""
    if not mapping:
        return item
    values = {old: A.Var(new) for old, new in mapping.items()}
    if isinstance(item, A.Equation):
        return map_equation(item, lambda e: substitute(e, values))
    loops = tuple(replace(l, var=mapping.get(l.var, l.var)) for l in item.loops)
    return replace(item, loops=loops, body=tuple(rename_vars(b, mapping) for b in item.body))


def with_leading_comments(item: A.Item, comments: A.Comments) -> A.Item:
    """``item`` with ``comments.before`` added above its first line."""
    if not comments.before:
        return item

    def merge(c: A.Comments) -> A.Comments:
        return A.Comments(comments.before + c.before, c.after)

    if isinstance(item, A.Equation):
        return replace(item, comments=merge(item.comments))
    if item.loops:
        return replace(item, loops=(replace(item.loops[0], comments=merge(item.loops[0].comments)),) + item.loops[1:])
    return replace(item, open_comments=merge(item.open_comments))


def make_nest(loops: tuple[A.Loop, ...], body: tuple[A.Item, ...], end: A.Comments = A.NO_COMMENTS) -> A.Nest:
    """``loops [ body ]``, written as one nest when the body is a single
    nest (``L i [ L j [...] ]`` is ``L i L j [...]``)."""
    if len(body) == 1 and isinstance(body[0], A.Nest) and body[0].loops and body[0].bracketed:
        inner = body[0]
        moved = inner.loops[0].comments
        inner_loops = (replace(inner.loops[0], comments=A.NO_COMMENTS),) + inner.loops[1:] if loops else inner.loops
        merged_loops = loops + inner_loops
        if loops and moved != A.NO_COMMENTS:
            first = merged_loops[0]
            merged_loops = (replace(first, comments=A.Comments(first.comments.before + moved.before,
                                                               first.comments.after or moved.after)),) + merged_loops[1:]
        after = end.after if end.after is not None else inner.end_comments.after
        return A.Nest(merged_loops, inner.body, None, A.Comments(inner.end_comments.before, after))
    return A.Nest(loops, body, None, end)


def fresh_loops(loops: tuple[A.Loop, ...]) -> tuple[A.Loop, ...]:
    """Copies of loop headers without their source positions and comments."""
    return tuple(A.Loop(l.kind, l.extent, l.var, l.start) for l in loops)


# ------------------------------------------------------- a TVM limitation

#: Measured with TVM 0.27 (llvm): TVM allocates a temporary inside the
#: innermost loop around all its accesses; when that loop is (or is inside)
#: a vectorized loop, the values one equation writes there and another
#: reads come out wrong. Steps that would create that pattern are not
#: offered. (A temporary also used outside the loop is allocated outside
#: and computes correctly.)
VECTOR_TEMPORARY_BUG = ("TVM 0.27 computes wrong values for a temporary written and read inside one vectorized "
                        "loop and used nowhere else (it allocates the temporary inside the loop)")


def shared_temporary(ctx: Context, first: list[EquationInfo], second: list[EquationInfo]) -> str | None:
    """A temporary that one group writes and the other reads, used by no
    other equation, if any."""
    inside = {i.index for i in first} | {i.index for i in second}

    def written(infos):
        return {i.equation.lhs.tensor for i in infos}

    def read(infos):
        return {t.access.tensor for i in infos for t in touches(i) if not t.is_write}

    for a, b in ((first, second), (second, first)):
        for name in sorted(written(a) & read(b)):
            if ctx.analysis.tensors[name].role == "tmp" and all(
                    info.index in inside for info in ctx.analysis.equations if _touches_tensor(info, name)):
                return name
    return None

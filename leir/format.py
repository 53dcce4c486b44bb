"""The canonical form of a program: what ``leir fmt`` prints.

A file says only what cannot be inferred (docs/leir-syntax.md): accesses
carry no superscripts; a tensor is declared when its dtype is not f32, its
scope not global, or when a declaration the user wrote says something
(shape, role) inference would not. Declarations the user wrote are kept
unless ``minimal`` asks to drop the ones that only restate inference.
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir.semantics import Analysis, TensorInfo, analyze

DEFAULT_DTYPE = "f32"
DEFAULT_SCOPE = "g"


def canonical_program(analysis: Analysis, *, minimal: bool = False) -> A.Program:
    """The program with superscripts moved into declarations.

    Requires an analysis without errors (inference must have succeeded)."""
    program = analysis.program
    stripped_units = tuple(_strip_item(u) for u in program.units)
    bare = A.Program((), stripped_units, program.span, program.end_comments)
    inferred = analyze(bare).tensors  # what a reader infers with no declarations

    decls: list[A.Decl] = []
    carried: tuple[str, ...] = ()  # comments of dropped declarations
    for d in program.decls:
        t = analysis.tensors.get(d.name)
        if minimal and t is not None and _restates(t, inferred.get(d.name)):
            carried += d.comments.before + ((d.comments.after,) if d.comments.after else ())
            continue
        decls.append(_with_leading(d, carried))
        carried = ()
    declared = {d.name for d in decls} | {d.name for d in program.decls}
    added = []
    for t in analysis.tensors.values():
        if t.name in declared:
            continue
        if (t.dtype, t.scope) != (DEFAULT_DTYPE, DEFAULT_SCOPE) or not _restates(t, inferred.get(t.name)):
            added.append(t)
    order = {"in": 0, "out": 1, "tmp": 2}
    added.sort(key=lambda t: order[t.role])
    for t in added:
        decls.append(_with_leading(t.as_decl(), carried))
        carried = ()
    units = stripped_units
    if carried:
        units = (_with_unit_comments(units[0], carried),) + units[1:] if units else units
    end = program.end_comments
    if carried and not units:
        end = A.Comments(carried + end.before, end.after)
    return A.Program(tuple(decls), units, program.span, end)


def canonical_text(parsed, analysis: Analysis) -> str | None:
    """What ``leir fmt`` prints for a parsed and analysed file, or None when
    the file has syntax errors (its layout is unknown, so it is not
    formatted). A file that parses but does not check is laid out as
    written: which tensors to declare is unknown."""
    from leir.printer import print_program

    if not parsed.ok:
        return None
    program = canonical_program(analysis) if analysis.ok else parsed.program
    return print_program(program, "canonical")


def _restates(t: TensorInfo, inferred: TensorInfo | None) -> bool:
    """Whether a declaration of ``t`` says nothing inference does not."""
    return (
        inferred is not None
        and (t.dtype, t.scope) == (DEFAULT_DTYPE, DEFAULT_SCOPE)
        and (t.shape, t.role) == (inferred.shape, inferred.role)
    )


def _with_leading(d: A.Decl, comments: tuple[str, ...]) -> A.Decl:
    if not comments:
        return d
    return replace(d, comments=A.Comments(comments + d.comments.before, d.comments.after))


def _with_unit_comments(unit: A.Nest, comments: tuple[str, ...]) -> A.Nest:
    if unit.loops:
        first = unit.loops[0]
        loops = (replace(first, comments=A.Comments(comments + first.comments.before, first.comments.after)),) + unit.loops[1:]
        return replace(unit, loops=loops)
    if unit.bracketed:
        return replace(unit, open_comments=A.Comments(comments + unit.open_comments.before, unit.open_comments.after))
    eq = unit.body[0]
    body = (replace(eq, comments=A.Comments(comments + eq.comments.before, eq.comments.after)),) + unit.body[1:]
    return replace(unit, body=body)


def _strip_item(item: A.Item) -> A.Item:
    if isinstance(item, A.Equation):
        return replace(
            item,
            lhs=_strip_expr(item.lhs),
            rhs=_strip_expr(item.rhs),
            predicate=None if item.predicate is None else _strip_expr(item.predicate),
        )
    return replace(item, body=tuple(_strip_item(b) for b in item.body))


def _strip_expr(e: A.Expr) -> A.Expr:
    if isinstance(e, A.Access):
        indices = None if e.indices is None else tuple(_strip_expr(i) for i in e.indices)
        return replace(e, dtype=None, scope=None, indices=indices)
    if isinstance(e, A.Unary):
        return replace(e, operand=_strip_expr(e.operand))
    if isinstance(e, A.Binary):
        return replace(e, lhs=_strip_expr(e.lhs), rhs=_strip_expr(e.rhs))
    if isinstance(e, A.Call):
        return replace(e, args=tuple(_strip_expr(a) for a in e.args))
    return e

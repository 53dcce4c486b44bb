"""Assertions for transformation tests, in the shape of rust-analyzer's
``check_assist``: a LEIR text with a ``$0`` cursor, the step expected there,
and the exact program expected after it.

    check_action(split, before_with_cursor, after, args={...})
    check_not_applicable(split, before_with_cursor, NotApplicable)
    check_offered_exactly_when_check_passes(split, ctx, every_args)
"""

from __future__ import annotations

from types import ModuleType

from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.semantics import analyze
from leir.transforms import apply, verify
from leir.transforms.base import Context, NotApplicable, Step, TransformError
from leir.transforms.examples import CURSOR


def _load(text_with_cursor: str):
    at = text_with_cursor.find(CURSOR)
    text = text_with_cursor.replace(CURSOR, "")
    doc = load_leir(text)
    assert doc.ok, [f"{doc.source.format_location(d.span)} {d.message}" for d in doc.diagnostics if d.is_error]
    return doc, (at if at >= 0 else None)


def offered_args(module: ModuleType, text_with_cursor: str) -> list[dict]:
    """The arguments of the steps ``module`` offers on a program without
    errors, at its ``$0`` cursor (everywhere when it has none)."""
    doc, at = _load(text_with_cursor)
    return [c.step.args for c in module.candidates(Context(doc.analysis), at)]


def check_action(module: ModuleType, before: str, after: str, args: dict | None = None,
                 *, verify_numerically: bool = True, listed: bool = True) -> str:
    """The step of ``module`` at the cursor (the one with ``args``, or the
    only one offered) rewrites ``before`` to exactly ``after``, and both
    compute the same outputs. Returns the printed result. With ``listed``
    False the step (``args``) is one the listing does not offer, and the
    check is that it is not offered and still applies."""
    doc, at = _load(before)
    offered = module.candidates(Context(doc.analysis), at)
    if args is None:
        assert len(offered) == 1, f"expected one {module.ID} step at the cursor, got {[c.title for c in offered]}"
        step = offered[0].step
    else:
        step = Step(module.ID, args)
        assert (step in [c.step for c in offered]) == listed, (
            f"{module.ID} {args} is {'not ' if listed else ''}offered at the cursor; "
            f"offered: {[c.step.args for c in offered]}")
    result = apply(doc.analysis, step)
    printed = print_program(result)
    assert printed == after, f"after {module.ID}:\n{printed}\nexpected:\n{after}"
    if verify_numerically:
        v = verify(doc.analysis, analyze(result))
        assert v.ok, f"{module.ID} changed the result: {v.summary()}"
    return printed


def check_not_applicable(module: ModuleType, before: str, error: type[TransformError] | str,
                         args: dict | None = None) -> TransformError:
    """No step of ``module`` (or none with ``args``) is offered at the
    cursor, and asking for ``args`` anyway raises ``error`` (a class, or its
    ``code``). Returns the error for further checks on its messages."""
    doc, at = _load(before)
    offered = module.candidates(Context(doc.analysis), at)
    if args is None:
        assert offered == [], f"expected no {module.ID} step, got {[c.title for c in offered]}"
        return None
    assert Step(module.ID, args) not in [c.step for c in offered], f"{module.ID} {args} is offered"
    try:
        apply(doc.analysis, Step(module.ID, args))
    except TransformError as e:
        if isinstance(error, str):
            assert e.code == error, f"expected error {error}, got {e.code}: {e}"
        else:
            assert isinstance(e, error), f"expected {error.__name__}, got {type(e).__name__}: {e}"
        assert e.short, f"{e.code}: no message"
        if isinstance(e, NotApplicable):
            # ``detail`` falls back to ``short``, so a refusal that gave none
            # would pass a check that ``detail`` is there.
            assert e.detail != e.short, f"{e.code}: the refusal says what ({e.short!r}) but not why"
        return e
    raise AssertionError(f"{module.ID} {args} was applied")


def check_offered_exactly_when_check_passes(module: ModuleType, ctx: Context, every_args: list[dict],
                                            refusal: type[TransformError] = TransformError) -> None:
    """``module`` offers a step with each of ``every_args`` exactly when its
    ``check`` passes for it (a ``refusal`` is a fail; any other error
    propagates), and offers nothing outside ``every_args``."""
    offered = [c.step.args for c in module.candidates(ctx, None)]
    for args in every_args:
        try:
            module.check(ctx, args)
            passed = True
        except refusal:
            passed = False
        assert passed == (args in offered), f"{module.ID} {args}: check {'passes' if passed else 'fails'}"
    assert all(args in every_args for args in offered), f"{module.ID}: offered outside {every_args}"


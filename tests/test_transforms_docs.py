"""Every transformation's docstring examples are true (so the docs cannot
rot), and every docstring has the required parts."""

from __future__ import annotations

import importlib
import pkgutil
import textwrap

import pytest

from leir import transforms
from leir.transforms import lib as transforms_lib
from leir.transforms import steps as transforms_steps
from leir.transforms.base import NotApplicable
from leir.transforms.examples import examples
from leir.transforms.testing import check_action, check_not_applicable

CASES = [(t, e) for t in transforms.ALL for e in examples(t)]

#: A precondition is one bullet, not a paragraph.
MAX_BULLET_LINES = 6


def requirement_bullets(doc: str) -> list[str]:
    """The preconditions listed after "It requires:", one string per bullet,
    or an AssertionError saying how the list is malformed. The format (as
    TVM's schedule primitives list their requirements)::

        It requires:

        - a serial (L) loop starting at 0 (split a parallel, vectorized,
          unrolled or thread-bound loop before annotating it: TVM drops the
          annotation);
        - an inner factor between 2 and the extent minus 1.

    "It requires:" alone on its line, a blank line, then bullets up to the
    next blank line: every line either starts a bullet with "- " or
    continues one, indented by exactly two spaces; every bullet but the last
    ends with ";" and the last with "."."""
    first, _, rest = doc.partition("\n")
    lines = (first + "\n" + textwrap.dedent(rest)).splitlines()
    heads = [k for k, line in enumerate(lines) if line.rstrip() == "It requires:"]
    assert len(heads) == 1, "'It requires:' alone on one line (the list follows it), once"
    k = heads[0] + 1
    assert k < len(lines) and not lines[k].strip(), "a blank line after 'It requires:'"
    k += 1
    bullets: list[list[str]] = []
    while k < len(lines) and lines[k].strip():
        line = lines[k].rstrip()
        if line.startswith("- ") and line[2:3].strip():
            bullets.append([line[2:]])
        elif line.startswith("  ") and line[2:3].strip() and bullets:
            bullets[-1].append(line[2:])
        else:
            raise AssertionError(f"not a bullet ('- ') or its continuation (two spaces): {line!r}")
        k += 1
    assert bullets, "at least one bullet after 'It requires:'"
    for b in bullets:
        assert len(b) <= MAX_BULLET_LINES, f"one precondition per bullet, not a paragraph: {b[0]!r}..."
    texts = [" ".join(b) for b in bullets]
    for t in texts[:-1]:
        assert t.endswith(";"), f"every bullet but the last ends with ';': {t!r}"
    assert texts[-1].endswith("."), f"the last bullet ends with '.': {texts[-1]!r}"
    return texts


def _modules(package) -> list:
    return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]


def _error_classes() -> list[type[NotApplicable]]:
    """Every NotApplicable subclass a step module or a shared library module
    defines or exports (factories' classes included), once."""
    found: dict[type, None] = {}
    for module in _modules(transforms_steps) + _modules(transforms_lib):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, NotApplicable) and value is not NotApplicable:
                found.setdefault(value)
    return list(found)


ERROR_CLASSES = _error_classes()


@pytest.mark.parametrize("module", transforms.ALL, ids=lambda t: t.ID)
def test_docstring_has_sentence_requirements_and_an_example(module):
    doc = module.__doc__ or ""
    first = doc.strip().splitlines()[0]
    assert first.endswith("."), f"{module.ID}: the first line is one sentence saying what it does"
    assert "It requires:" in doc, f"{module.ID}: list the preconditions after 'It requires:'"
    try:
        requirement_bullets(doc)
    except AssertionError as e:
        pytest.fail(f"{module.ID}: list the preconditions after 'It requires:' as bullets: {e}")
    assert examples(module), f"{module.ID}: at least one before/after example"
    assert module.__name__.rsplit(".", 1)[1] == module.ID, "one name everywhere: module and id"
    assert callable(getattr(module, module.ID)), f"{module.ID}: the module defines a function {module.ID}"


def test_requirement_bullets_reject_prose():
    prose = "Do it.\n\nIt requires: a serial loop, and a factor.\n"
    with pytest.raises(AssertionError):
        requirement_bullets(prose)
    assert requirement_bullets("Do it.\n\nIt requires:\n\n- a serial\n  loop;\n- a factor.\n\nMore.\n") == [
        "a serial loop;", "a factor."]
    for bad in ("- a serial loop,\n- a factor.", "- a serial loop;\nand a factor.", "- a serial loop;\n- a factor"):
        with pytest.raises(AssertionError):
            requirement_bullets(f"Do it.\n\nIt requires:\n\n{bad}\n")


def test_error_classes_are_found():
    codes = {cls.code for cls in ERROR_CLASSES}
    # a hand-written class, a class made by algebra.refusals and one made by rows.refusals
    assert {"split-loop-not-serial", "factorization-no-change", "online_softmax-no-max"} <= codes


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: f"{c.__module__.rsplit('.', 1)[-1]}.{c.__name__}")
def test_error_class_names_its_precondition(cls):
    doc = cls.__dict__.get("__doc__")
    assert doc and doc.strip(), (f"{cls.__module__}.{cls.__name__} ({cls.code}): a docstring of its own naming the "
                                 f"precondition it reports")
    assert doc.strip().endswith("."), f"{cls.__module__}.{cls.__name__}: the docstring is a sentence"


@pytest.mark.slow
@pytest.mark.parametrize("module,example", CASES, ids=lambda x: getattr(x, "ID", None) or getattr(x, "title", ""))
def test_docstring_example(module, example):
    before = example.before if example.cursor is None else example.before[:example.cursor] + "$0" + example.before[example.cursor:]
    if example.refused:
        check_not_applicable(module, before, example.refused, example.args)
    else:
        check_action(module, before, example.after, example.args, listed=example.listed)

"""Every transformation's docstring examples are true (so the docs cannot
rot), and every docstring has the required parts."""

from __future__ import annotations

import pytest

from leir import transforms
from leir.transforms.examples import examples
from leir.transforms.testing import check_action, check_not_applicable

CASES = [(t, e) for t in transforms.ALL for e in examples(t)]


@pytest.mark.parametrize("module", transforms.ALL, ids=lambda t: t.ID)
def test_docstring_has_sentence_requirements_and_an_example(module):
    doc = module.__doc__ or ""
    first = doc.strip().splitlines()[0]
    assert first.endswith("."), f"{module.ID}: the first line is one sentence saying what it does"
    assert "It requires:" in doc, f"{module.ID}: list the preconditions after 'It requires:'"
    assert examples(module), f"{module.ID}: at least one before/after example"
    assert module.__name__.rsplit(".", 1)[1] == module.ID, "one name everywhere: module and id"
    assert callable(getattr(module, module.ID)), f"{module.ID}: the module defines a function {module.ID}"


@pytest.mark.slow
@pytest.mark.parametrize("module,example", CASES, ids=lambda x: getattr(x, "ID", None) or getattr(x, "title", ""))
def test_docstring_example(module, example):
    before = example.before if example.cursor is None else example.before[:example.cursor] + "$0" + example.before[example.cursor:]
    if example.refused:
        check_not_applicable(module, before, example.refused, example.args)
    else:
        check_action(module, before, example.after, example.args)

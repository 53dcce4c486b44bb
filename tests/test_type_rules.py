"""The checker reports what the typing rules (leir/value_types.py) give no
meaning to, at the offending node, before lowering would refuse it."""

from __future__ import annotations

import pytest

from leir.parser import parse
from leir.semantics import analyze


def type_errors(text: str) -> list[str]:
    result = parse(text)
    assert result.ok
    return [text[d.span.start:d.span.end] for d in analyze(result.program).diagnostics if d.code == "type-rule"]


@pytest.mark.parametrize("text,bad", [
    ("L^{8}_{i} [ Y^{i32}_{i} = exp(X^{i32}_{i}) + 1; ];", ["exp(X^{i32}_{i})"]),
    ("L^{8}_{i} [ Y^{i32}_{i} = X^{i32}_{i}*0.5; ];", ["0.5"]),
    ("L^{8}_{i} [ Y^{i32}_{i} = X^{i32}_{i}**2; ];", ["X^{i32}_{i}**2"]),
    ("L^{8}_{i} [ Y^{bool}_{i} = X^{bool}_{i} + X^{bool}_{i}; ];", ["X^{bool}_{i} + X^{bool}_{i}"]),
    ("L^{8}_{i} [ Y^{i32}_{i} = X^{i32}_{i} + 1 where X^{i32}_{i} > 0.5; ];", ["0.5"]),
])
def test_type_rule_violations_are_reported_at_the_node(text, bad):
    assert type_errors(text) == bad


@pytest.mark.parametrize("text", [
    "L^{8}_{i} [ Y^{i32}_{i} = f32(exp(f32(X^{i32}_{i}))); ];",  # exp computes inside an f32 cast
    "L^{8}_{i} [ Y^{f32}_{i} = exp(X^{i32}_{i})*0.5; ];",  # the i32 read is converted to f32
    "L^{8}_{i} [ Y^{bool}_{i} = X^{f32}_{i} > 0.5 & X^{f32}_{i} < 2.5; ];",
    "L^{8}_{i} [ Y^{i32}_{i} = X^{i32}_{i}*(i % 2) + 2.0; ];",  # 2.0 is an integer value
    "L^{8}_{i} [ Y^{f32}_{i} = if_then_else(i < 4, X^{f32}_{i}**2, 0.5); ];",
])
def test_well_typed_equations_have_no_type_error(text):
    assert type_errors(text) == []

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


def test_guarded_reduction_whose_init_would_be_skipped_is_an_error():
    text = "L^{10}_{i} L^{3}_{r} [T_{i} += X_{i+r} where i + r >= 1;]; L^{10}_{i} [Y_{i} = T_{i};];"
    result = parse(text)
    diags = [d for d in analyze(result.program).diagnostics if d.code == "guarded-reduction-init"]
    assert len(diags) == 1 and "r=0" in diags[0].message and "i=0" in diags[0].message
    assert text[diags[0].span.start:diags[0].span.end] == "i + r >= 1"


def test_guard_true_at_the_first_reduction_iteration_is_fine():
    # An imperfect split of the reduction axis: the guard holds at k_0 = k_1 = 0.
    text = "L^{4}_{i} L^{4}_{k_0} L^{32}_{k_1} [S_{i} += X_{i,k_0*32+k_1} where k_0*32 + k_1 < 100;];"
    assert [d.code for d in analyze(parse(text).program).diagnostics if d.is_error] == []


def test_reduction_writing_one_element_from_several_spatial_iterations_is_an_error():
    text = "L^{4}_{i} L^{4}_{j} [ T_{i+j} += X_{i,j}; ];"
    diags = [d for d in analyze(parse(text).program).diagnostics if d.code == "reduction-not-injective"]
    assert len(diags) == 1 and "loops i, j" in diags[0].message
    explicit = "L^{7}_{t} [ T_{t} = 0.0; ]; L^{4}_{i} L^{4}_{j} [ T_{i+j} += X_{i,j}; ];"
    assert [d.code for d in analyze(parse(explicit).program).diagnostics if d.is_error] == []


@pytest.mark.parametrize("lhs, loops, injective", [
    ("T_{i_o*8+i_i}", "L^{4}_{i_o} L^{8}_{i_i}", True),        # a split: proven without enumerating
    ("T_{i_o*4+i_i}", "L^{4}_{i_o} L^{8}_{i_i}", False),       # digits overlap: i_o=1,i_i=0 and i_o=0,i_i=4
    ("T_{i_i-i_o*8+31}", "L^{4}_{i_o} L^{8}_{i_i}", True),     # a negative coefficient
    ("T_{i+j,j}", "L^{4}_{i} L^{4}_{j}", True),                # j in two indices: enumerated, injective
    ("T_{i+j,i+j}", "L^{4}_{i} L^{4}_{j}", False),             # enumerated, repeats
    ("T_{i//2,i%2,j}", "L^{6}_{i} L^{3}_{j}", True),           # not affine: enumerated
    ("T_{i//2,j}", "L^{6}_{i} L^{3}_{j}", False),
    ("T_{i*3+j}", "L^{3}_{i} L^{3}_{j}", True),                # mixed radix with no gap
    ("T_{i*2+j}", "L^{3}_{i} L^{3}_{j}", False),               # more iterations than... overlapping
])
def test_reduction_injectivity_is_decided_exactly(lhs, loops, injective):
    # The implied init needs each written element to come from one spatial
    # iteration; the checker proves it for mixed-radix indices and
    # enumerates the others.
    text = f"{loops} L^{{5}}_{{r}} [ {lhs} += X_{{r}}; ];"
    codes = [d.code for d in analyze(parse(text).program).diagnostics if d.is_error]
    assert ("reduction-not-injective" not in codes) == injective, codes

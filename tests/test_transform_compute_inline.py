"""compute_inline: an elementwise temporary substituted into its readers
(TVM's ``compute_inline``)."""

from __future__ import annotations

import pytest

from leir.transforms.steps import compute_inline
from leir.transforms.steps.compute_inline import (
    Guarded,
    IndexNotLoops,
    NotComplete,
    NotStagePipeline,
    OutputTensor,
    Reduction,
)
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes
from producer_consumer import (
    F16, HALO, check_steps_verify, context, every_block, programs,
)

#: Elementwise temporaries the examples lack (their temporaries are all
#: reductions, which are not inlined).
MORE = {
    "chain": """\
L^{32}_{i}
  L^{24}_{j} [
    A_{i,j} = X_{i,j}*2.0;
  ];

L^{32}_{i}
  L^{24}_{j} [
    B_{i,j} = exp(A_{i,j}) + b_{j};
  ];

L^{32}_{i}
  L^{24}_{j} [
    Y_{i,j} = max(B_{i,j}, 0.0)*A_{i,j};
  ];
""",
    "halo": HALO,
    "f16": F16,
    "int": """\
in  X: i32[16,8]
tmp T: i32[16,8]
out Y: i32[16]

L^{16}_{i}
  L^{8}_{j} [
    T_{i,j} = X_{i,j}*2;
  ];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i} += T_{i,j} + 3;
  ];
""",
}


def test_a_temporary_read_twice_is_substituted_in_both_reads():
    before = MORE["chain"].replace("    A_{i,j} =", "    $0A_{i,j} =")
    after = """\
L^{32}_{i}
  L^{24}_{j} [
    B_{i,j} = exp(X_{i,j}*2.0) + b_{j};
  ];

L^{32}_{i}
  L^{24}_{j} [
    Y_{i,j} = max(B_{i,j}, 0.0)*(X_{i,j}*2.0);
  ];
"""
    check_action(compute_inline, before, after)


def test_a_window_reads_the_expression_at_each_offset():
    after = """\
L^{8}_{h}
  L^{8}_{w}
    L^{3}_{r}
      L^{3}_{s} [
        Y_{h,w} += X_{h+r,w+s}*0.5*K_{r,s};
      ];
"""
    check_action(compute_inline, MORE["halo"].replace("    P_{h,w}", "    $0P_{h,w}"), after)


def test_an_f16_temporary_keeps_its_rounding_and_its_declaration_goes():
    after = """\
in  X: f16[16,8]

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = f16(X_{i,j}*X_{i,j}) + 1.0;
  ];
"""
    check_action(compute_inline, MORE["f16"].replace("    T_{i,j} =", "    $0T_{i,j} ="), after)


# ---------------------------------------------------------------- refusals


def refused(text: str, error, block: str):
    return check_not_applicable(compute_inline, text, error, {"block": block})


def test_compute_inline_fail_output():
    e = refused("out T: f32[8]\nL^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];",
                OutputTensor, "T")
    assert "T" in e.short


def test_compute_inline_fail_reduction():
    e = refused("L^{64}_{i} L^{32}_{j} [ S_{i} += X_{i,j}; ];\nL^{64}_{i} [ Y_{i} = S_{i}*2.0; ];", Reduction, "S")
    assert "loop j" in e.detail


def test_compute_inline_fail_not_complete():
    e = refused("L^{8}_{i} L^{4}_{j} [ T_{i} = X_{i,j}; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];", NotComplete, "T")
    assert "loop j" in e.detail
    e = refused("L^{8}_{i} [ T_{i} = X_{i}; ];\nL^{8}_{i} [ T_{i} = T_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i}; ];",
                NotComplete, "T")
    assert "T_1" in e.short


def test_compute_inline_fail_guarded():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0 where i < 6; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0 where i < 6; ];",
                Guarded, "T")
    assert "T" in e.short and "where i < 6" in e.detail


def test_compute_inline_fail_index_not_loops():
    e = refused("L^{8}_{i} [ T_{i+1} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i+1} + 1.0; ];", IndexNotLoops, "T")
    assert "T_{i+1}" in e.detail


def test_compute_inline_fail_not_stage_pipeline():
    text = "L^{8}_{i} [ A_{i} = X_{i}; ];\nL^{8}_{i} [ B_{i} = A_{i}*2.0 + X_{i}; ];\n" \
           "L^{8}_{i} [ A_{i} = A_{i} + 1.0; ];\nL^{8}_{i} [ Y_{i} = A_{i} + B_{i}; ];"
    e = refused(text, NotStagePipeline, "B")
    assert "A" in e.short and "write-after-read" in e.detail


# ------------------------------------------------------------ all programs


@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_exactly_when_check_passes(name, text):
    ctx = context(text)
    check_offered_exactly_when_check_passes(compute_inline, ctx, every_block(ctx))


@pytest.mark.slow
@pytest.mark.parametrize("name,text", sorted(MORE.items()), ids=lambda x: x if "\n" not in x else "")
def test_offered_steps_verify(name, text):
    """Every offered step builds, runs and computes what the program
    computed (the examples offer none: their temporaries are reductions)."""
    ctx = context(text)
    offered = compute_inline.candidates(ctx, None)
    assert offered
    check_steps_verify(ctx, offered)

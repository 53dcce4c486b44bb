"""precompute: a subexpression that some loops do not change, computed once
into a new temporary (Step-TP's precompute_indices)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir import ast as A
from leir.bridge.document import load_leir
from leir.printer import print_expr
from leir.semantics import analyze
from leir.transforms import TransformError, apply, verify
from leir.transforms.steps import precompute
from leir.transforms.base import Context, Step
from leir.transforms.steps.precompute import (
    Guarded,
    InCondition,
    NotInvariant,
    NotMaximal,
    OnHost,
    ReadsWritten,
    Trivial,
)
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
LAYERNORM = (Path(__file__).resolve().parent.parent / "examples" / "layernorm.leir").read_text()

MORE = {
    "f16": """\
in  X: f16[16,8]
in  h: f16[16]
out Y: f16[16,8]

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}*exp(h_{i}) + f32(h_{i}*h_{i});
  ];
""",
    "int": """\
in  X: i32[16,8]
in  c: i32[16]
out Y: i32[16]

L^{16}_{i}
  L^{8}_{j} [
    Y_{i} += X_{i,j} + c_{i}*3;
  ];
""",
    "scalar": """\
L^{64}_{i} [
  s += X_{i}*X_{i};
];

L^{64}_{i} [
  Y_{i} = X_{i}*rsqrt(s/64.0 + 1e-05);
];
""",
    "guarded": """\
L^{4}_{io}
  L^{32}_{ii}
    L^{8}_{j} [
      Y_{io*32+ii,j} = X_{io*32+ii,j}*exp(b_{io*32+ii})*W_{j} where io*32 + ii < 100;
    ];
""",
    "repeated": """\
L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}*exp(a_{i}) + exp(a_{i});
  ];
""",
}


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


def test_the_layer_norm_reciprocal_is_computed_once_per_row():
    before = LAYERNORM.replace("*rsqrt(var_{i}", "*$0rsqrt(var_{i}")
    after = LAYERNORM.replace("""\
L^{128}_{i}
  L^{96}_{j} [
    Y_{i,j} = (X_{i,j} - mean_{i})*rsqrt(var_{i} + 1e-05)*gamma_{j} + beta_{j};
  ];
""", """\
L^{128}_{i} [
  r_{i} = rsqrt(var_{i} + 1e-05);
];

L^{128}_{i}
  L^{96}_{j} [
    Y_{i,j} = (X_{i,j} - mean_{i})*r_{i}*gamma_{j} + beta_{j};
  ];
""")
    check_action(precompute, before, after)


def test_every_occurrence_is_replaced():
    after = """\
L^{16}_{i} [
  r_{i} = exp(a_{i});
];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}*r_{i} + r_{i};
  ];
"""
    check_action(precompute, MORE["repeated"].replace("X_{i,j}*exp", "X_{i,j}*$0exp"), after)


def test_the_temporary_takes_the_dtype_the_expression_is_computed_in():
    """exp(h) is computed in f16 (Y's dtype): the temporary is declared f16;
    inside f32(...) the product is computed in f32 and stays so."""
    before = MORE["f16"].replace("*exp(h_{i})", "*$0exp(h_{i})")
    after = """\
in  X: f16[16,8]
in  h: f16[16]
out Y: f16[16,8]
tmp r: f16[16]

L^{16}_{i} [
  r_{i} = exp(h_{i});
];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}*r_{i} + f32(h_{i}*h_{i});
  ];
"""
    check_action(precompute, before, after)


def test_a_guard_over_the_same_loops_is_copied():
    after = """\
L^{4}_{io}
  L^{32}_{ii} [
    r_{io,ii} = exp(b_{io*32+ii}) where io*32 + ii < 100;
  ];

L^{4}_{io}
  L^{32}_{ii}
    L^{8}_{j} [
      Y_{io*32+ii,j} = X_{io*32+ii,j}*r_{io,ii}*W_{j} where io*32 + ii < 100;
    ];
"""
    check_action(precompute, MORE["guarded"].replace("*exp(b", "*$0exp(b"), after)


def test_no_loop_gives_a_bare_equation():
    after = """\
L^{64}_{i} [
  s += X_{i}*X_{i};
];

r = rsqrt(s/64.0 + 1e-05);

L^{64}_{i} [
  Y_{i} = X_{i}*r;
];
"""
    check_action(precompute, MORE["scalar"].replace("*rsqrt", "*$0rsqrt"), after)


def test_the_cursor_on_a_candidate_selects_it():
    text = "L^{16}_{i} L^{8}_{j} [ Y_{i,j} = exp(a_{i})*X_{i,j} + exp(b_{j}); ];"
    ctx = context(text)
    everywhere = [c.step.args["expr"] for c in precompute.candidates(ctx, None)]
    assert everywhere == ["exp(a_{i})", "exp(b_{j})"]
    assert [c.step.args["expr"] for c in precompute.candidates(ctx, text.index("exp(b"))] == ["exp(b_{j})"]
    assert [c.step.args["expr"] for c in precompute.candidates(ctx, text.index("Y_"))] == everywhere


# ---------------------------------------------------------------- refusals


def refused(text: str, error, expr: str, block: str = "Y"):
    return check_not_applicable(precompute, text, error, {"block": block, "expr": expr})


def test_precompute_fail_in_condition():
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = if_then_else(a_{i}*2.0 > 0.0, X_{i,j}, 0.0); ];",
                InCondition, "a_{i}*2.0")
    assert "a_{i}*2.0" in e.detail


def test_precompute_fail_trivial():
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = X_{i,j}*a_{i}; ];", Trivial, "a_{i}")
    assert "a_{i}" in e.short
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = X_{i,j}*(i*2 + 1); ];", Trivial, "i*2 + 1")
    assert "constants and loop variables" in e.detail


def test_precompute_fail_not_invariant():
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = X_{i,j}*2.0 + a_{i}; ];", NotInvariant, "X_{i,j}*2.0")
    assert "i, j" in e.detail


def test_precompute_fail_reads_written():
    """Y reads the running sum: no place before it sees the same value."""
    text = "L^{16}_{i} L^{8}_{j} [ S_{i} += X_{i,j}; Y_{i,j} = X_{i,j}*exp(S_{i}); ];"
    e = refused(text, ReadsWritten, "exp(S_{i})")
    assert "S" in e.short and "S_{i} = S_{i} + X_{i,j}" in e.detail


def test_precompute_fail_not_maximal():
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = X_{i,j}*rsqrt(a_{i} + 1.0); ];", NotMaximal, "a_{i} + 1.0")
    assert "rsqrt(a_{i} + 1.0)" in e.detail


def test_precompute_fail_guarded():
    e = refused("L^{16}_{i} L^{8}_{j} [ Y_{i,j} = X_{i,j}*exp(a_{i}) where j < 5; ];", Guarded, "exp(a_{i})")
    assert "where j < 5" in e.detail


def test_precompute_fail_on_host():
    e = refused("B^{8}_{bx} L^{4}_{j} [ Y_{bx,j} = X_{bx,j}*exp(a_{j}); ];", OnHost, "exp(a_{j})")
    assert "loops j" in e.detail


def test_an_expression_not_in_the_equation_is_stale():
    with pytest.raises(TransformError) as e:
        apply(context(MORE["repeated"]), Step("precompute", {"block": "Y", "expr": "exp(b_{i})"}))
    assert e.value.code == "stale-step"


# ------------------------------------------------------------ all programs


def programs():
    return [(p.stem, p.read_text()) for p in EXAMPLES] + sorted(MORE.items())


@pytest.mark.parametrize("name,text", programs(), ids=lambda x: x if "\n" not in x else "")
def test_offered_exactly_when_check_passes(name, text):
    ctx = context(text)
    declared = frozenset(ctx.analysis.tensors)
    every_args = [{"block": block, "expr": print_expr(node, declared=declared)}
                  for block, info in zip(ctx.block_names, ctx.analysis.equations) for node in A.walk(info.equation.rhs)]
    check_offered_exactly_when_check_passes(precompute, ctx, every_args)


@pytest.mark.slow
@pytest.mark.parametrize("name,text", programs(), ids=lambda x: x if "\n" not in x else "")
def test_offered_steps_verify(name, text):
    """At most two offered steps per program (fixed seed) build, run and
    compute what the program computed; all of them were applied once."""
    ctx = context(text)
    offered = precompute.candidates(ctx, None)
    for candidate in random.Random(name).sample(offered, min(2, len(offered))):
        result = apply(ctx, candidate.step)
        v = verify(ctx.analysis, analyze(result))
        assert v.ok, f"{candidate.step.args}: {v.summary()}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_a_cursor_only_narrows_the_list(path):
    ctx = context(path.read_text())
    everywhere = {c.step for c in precompute.candidates(ctx, None)}
    for at in range(0, len(path.read_text()), 5):
        assert {c.step for c in precompute.candidates(ctx, at)} <= everywhere, at

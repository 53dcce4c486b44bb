"""fuse: two directly nested serial loops of the same role become one loop
over their product, in the same order; one typed error per precondition,
each naming the loop or equation at fault."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.semantics import analyze
from leir.transforms import NotApplicable, Step, apply, verify
from leir.transforms.lib import loop_pairs
from leir.transforms.steps import fuse
from leir.transforms.base import Context
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
#: Steps applied and verified per example; every one on programs offering
#: no more than this.
SAMPLE_PER_EXAMPLE = 3


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


# ----------------------------------------------------------------- actions


@pytest.mark.slow
def test_fuse_two_reduction_loops():
    check_action(fuse, """\
L^{8}_{i}
  L^{6}_{k}$0
    L^{5}_{l} [
      S_{i} += X_{i,k,l};
    ];
""", """\
L^{8}_{i}
  L^{30}_{kl} [
    S_{i} += X_{i,kl//5,kl%5};
  ];
""", args={"block": "S", "loops": ["k", "l"]})


@pytest.mark.slow
def test_fuse_batch_and_channel_of_a_convolution():
    check_action(fuse, """\
# O = conv1d(X, Wt)
L^{2}_{n}$0
  L^{4}_{k}
    L^{10}_{w}
      L^{3}_{r} [
        O_{n,k,w} += X_{n,w+r}*Wt_{k,r};
      ];
""", """\
# O = conv1d(X, Wt)
L^{8}_{nk}
  L^{10}_{w}
    L^{3}_{r} [
      O_{nk//4,nk%4,w} += X_{nk//4,w+r}*Wt_{nk%4,r};
    ];
""", args={"block": "O", "loops": ["n", "k"]})


@pytest.mark.slow
def test_fuse_several_equations_of_one_nest():
    check_action(fuse, """\
L^{4}_{i}$0
  L^{6}_{j} [
    T_{i,j} = X_{i,j}*2.0;
    Y_{j,i} = T_{i,j} + 1.0;
  ];
""", """\
L^{24}_{ij} [
  T_{ij//6,ij%6} = X_{ij//6,ij%6}*2.0;
  Y_{ij%6,ij//6} = T_{ij//6,ij%6} + 1.0;
];
""", args={"block": "T", "loops": ["i", "j"]})


@pytest.mark.slow
def test_fuse_loops_written_as_nested_brackets():
    check_action(fuse, """\
L^{16}_{i}$0 [
  L^{12}_{j} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
];
""", """\
L^{192}_{ij} [
  Y_{ij//12,ij%12} = X_{ij//12,ij%12}*2.0;
];
""")


@pytest.mark.slow
def test_fuse_names_longer_names_with_an_underscore():
    check_action(fuse, """\
L^{4}_{i_0}$0
  L^{8}_{j_0}
    L^{16}_{k} [
      S_{i_0,j_0} += X_{i_0,j_0,k};
    ];
""", """\
L^{32}_{i_0_j_0}
  L^{16}_{k} [
    S_{i_0_j_0//8,i_0_j_0%8} += X_{i_0_j_0//8,i_0_j_0%8,k};
  ];
""", args={"block": "S", "loops": ["i_0", "j_0"]})


@pytest.mark.slow
def test_fuse_name_avoids_tensors_and_reserved_words():
    # "in" is reserved; a tensor is already called "ab".
    check_action(fuse, """\
L^{4}_{i}$0
  L^{8}_{n} [
    Y_{i,n} = X_{i,n}*ab_{i};
  ];

L^{2}_{a}
  L^{3}_{b} [
    Z_{a,b} = X_{a,b};
  ];
""", """\
L^{32}_{in_1} [
  Y_{in_1//8,in_1%8} = X_{in_1//8,in_1%8}*ab_{in_1//8};
];

L^{2}_{a}
  L^{3}_{b} [
    Z_{a,b} = X_{a,b};
  ];
""", args={"block": "Y", "loops": ["i", "n"]})
    ctx = context("L^{2}_{a}\n  L^{3}_{b} [\n    Z_{a,b} = X_{a,b}*ab_{a};\n  ];\n")
    result = apply(ctx, Step("fuse", {"block": "Z", "loops": ["a", "b"]}))
    assert "L^{6}_{ab_1}" in print_program(result)


def test_fuse_names():
    assert fuse.fused_name("i", "j") == "ij"
    assert fuse.fused_name("ij", "k") == "ij_k"
    assert fuse.fused_name("i_0", "j_0") == "i_0_j_0"


def test_fuse_cursor_offers_the_pairs_of_its_loop():
    text = """\
L^{4}_{i}
  L^{8}_{j}$0
    L^{16}_{k}
      L^{2}_{l} [
        S_{i,j,k} += X_{i,j,k,l};
      ];
"""
    at = text.index("$0")
    ctx = context(text.replace("$0", ""))
    assert [c.title for c in fuse.candidates(ctx, at)] == ["Fuse loops i and j", "Fuse loops j and k"]


# ------------------------------------------------------------- refusals


def test_fuse_fail_loops_not_nested():
    e = check_not_applicable(fuse, """\
L^{4}_{i}$0
  L^{8}_{j}
    L^{16}_{k} [
      Y_{i,j,k} = X_{i,j,k};
    ];
""", fuse.LoopsNotNested, {"block": "Y", "loops": ["j", "i"]})
    assert 'name the outer loop first (["i", "j"])' in e.detail


def test_fuse_fail_not_only_child():
    e = check_not_applicable(fuse, """\
L^{8}_{i}$0 [
  L^{8}_{j} [
    Y_{i,j} = X_{i,j};
  ];
  L^{8}_{j} [
    Z_{i,j} = Y_{i,j}*2.0;
  ];
];
""", fuse.NotOnlyChild, {"block": "Y", "loops": ["i", "j"]})
    assert "loop i holds more than loop j" == str(e)


def test_fuse_fail_loop_not_serial():
    for kind, name in (("P", "parallel"), ("V", "vectorized"), ("U", "unrolled")):
        e = check_not_applicable(fuse, f"""\
{kind}^{{16}}_{{i}}$0
  L^{{4}}_{{j}} [
    Y_{{i,j}} = X_{{i,j}};
  ];
""", fuse.LoopNotSerial, {"block": "Y", "loops": ["i", "j"]})
        assert str(e) == f"loop i is {name}"
    check_not_applicable(fuse, """\
B^{16}_{bx}$0
  B^{32}_{tx} [
    Y_{bx,tx} = X_{bx,tx};
  ];
""", fuse.LoopNotSerial, {"block": "Y", "loops": ["bx", "tx"]})


def test_fuse_fail_loop_start_not_zero():
    e = check_not_applicable(fuse, """\
L^{8}_{i}$0
  L^{7}_{j=1} [
    Y_{i,j} = X_{i,j};
  ];
""", fuse.LoopStartNotZero, {"block": "Y", "loops": ["i", "j"]})
    assert str(e) == "loop j starts at 1"


def test_fuse_fail_mixed_axes():
    e = check_not_applicable(fuse, """\
L^{8}_{i}$0
  L^{16}_{k} [
    S_{i} += X_{i,k};
  ];
""", fuse.MixedAxes, {"block": "S", "loops": ["i", "k"]})
    assert str(e) == "i indexes S and k does not"
    assert "reduction axis" in e.detail


def test_fuse_fail_mixed_axes_in_one_equation_of_several():
    e = check_not_applicable(fuse, """\
L^{8}_{i}$0
  L^{16}_{j} [
    Y_{i,j} = X_{i,j};
    M_{i} = max(M_{i}, Y_{i,j});
  ];
""", fuse.MixedAxes, {"block": "Y", "loops": ["i", "j"]})
    assert "indexes M" in str(e)


def test_fuse_fail_extent_too_large():
    e = check_not_applicable(fuse, """\
in  X: f32[2]
L^{65536}_{i}$0
  L^{65536}_{j} [
    S += X_{i%2}*X_{j%2};
  ];
""", fuse.ExtentTooLarge, {"block": "S", "loops": ["i", "j"]})
    assert "4294967296" in str(e)


# ------------------------------------------------- offered iff it checks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_fuse_offered_exactly_when_check_passes(path):
    ctx = context(path.read_text())
    every = [{"block": ctx.block_names[child.equations[0]], "loops": [site.loop.var, child.loop.var]}
             for site in ctx.loop_sites for child in loop_pairs.child_loops(ctx, site)]
    check_offered_exactly_when_check_passes(fuse, ctx, every, NotApplicable)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_fuse_every_sampled_step_verifies_on_the_examples(path):
    doc = load_leir(path.read_text())
    found = fuse.candidates(Context(doc.analysis), None)
    steps = found if len(found) <= SAMPLE_PER_EXAMPLE else random.Random(f"fuse {path.stem}").sample(found, SAMPLE_PER_EXAMPLE)
    for c in steps:
        after = apply(doc.analysis, c.step)
        result = verify(doc.analysis, analyze(after))
        assert result.ok, f"{path.stem} {c.step.args}: {result.summary()}"

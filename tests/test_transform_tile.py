"""tile: split two directly nested loops and run the tiles outside, when
no dependence is reversed and TVM's split and reorder accept them; one
typed error per precondition, each naming the loop, guard or access at
fault."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms import NotApplicable, apply, verify
from leir.transforms.lib import loop_pairs
from leir.transforms.steps import tile
from leir.transforms.base import Context
from leir.transforms.testing import check_action, check_not_applicable

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))
#: Tilings applied and verified per example (each offers many sizes).
SAMPLE_PER_EXAMPLE = 2


def context(text: str) -> Context:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return Context(doc.analysis)


# ----------------------------------------------------------------- sizes


def test_tile_sizes_divide_the_extents_and_stay_near_square():
    assert tile.tile_sizes(128, 96) == [(8, 8), (8, 16), (16, 8), (16, 16), (16, 32), (32, 16), (32, 32), (64, 32)]
    # At most MAX_EXACT exact tilings, square and large ones first.
    assert tile.tile_sizes(256, 256) == [(8, 8), (16, 16), (16, 32), (32, 16), (32, 32), (32, 64), (64, 32), (64, 64)]


def test_tile_sizes_offer_guarded_squares_where_sizes_do_not_divide():
    # No common size divides 100: its largest divisors up to 64, and two
    # guarded squares.
    assert tile.tile_sizes(100, 100) == [(25, 25), (25, 50), (50, 25), (50, 50), (16, 16), (32, 32)]


def test_tile_sizes_for_short_and_prime_extents():
    assert tile.loop_sizes(3) == [(2, False)]
    assert tile.loop_sizes(7) == [(4, False)]
    assert tile.tile_sizes(3, 3) == [(2, 2)]
    assert tile.tile_sizes(16, 3) == [(8, 2)]


def test_tile_titles_name_loops_sizes_and_guards():
    ctx = context("L^{100}_{i}\n  L^{64}_{j} [\n    Y_{i,j} = X_{i,j};\n  ];\n")
    titles = [c.title for c in tile.candidates(ctx, None)]
    assert "Tile loops i, j by 50x16" not in titles  # more than twice as long as wide
    assert "Tile loops i, j by 25x32" in titles
    assert "Tile loops i, j by 32x32 (guarded)" in titles


# ----------------------------------------------------------------- actions


@pytest.mark.slow
def test_tile_a_reduction_loop_with_a_spatial_one():
    check_action(tile, """\
L^{32}_{i}
  L^{24}_{j}$0
    L^{64}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
""", """\
L^{32}_{i}
  L^{3}_{j_0}
    L^{4}_{k_0}
      L^{8}_{j_1}
        L^{16}_{k_1} [
          C_{i,j_0*8+j_1} += X_{i,k_0*16+k_1}*W_{k_0*16+k_1,j_0*8+j_1};
        ];
""", args={"block": "C", "loops": ["j", "k"], "sizes": [8, 16]})


@pytest.mark.slow
def test_tile_keeps_an_existing_guard():
    check_action(tile, """\
L^{24}_{i}$0
  L^{24}_{j} [
    Y_{i,j} = X_{i,j} where i < 20;
  ];
""", """\
L^{3}_{i_0}
  L^{3}_{j_0}
    L^{8}_{i_1}
      L^{8}_{j_1} [
        Y_{i_0*8+i_1,j_0*8+j_1} = X_{i_0*8+i_1,j_0*8+j_1} where i_0*8 + i_1 < 20;
      ];
""", args={"block": "Y", "loops": ["i", "j"], "sizes": [8, 8]})


@pytest.mark.slow
def test_tile_several_equations_of_one_nest():
    check_action(tile, """\
L^{16}_{i}$0
  L^{16}_{j} [
    T_{i,j} = X_{i,j}*2.0;
    Y_{i,j} = T_{i,j} + X_{j,i};
  ];
""", """\
L^{2}_{i_0}
  L^{2}_{j_0}
    L^{8}_{i_1}
      L^{8}_{j_1} [
        T_{i_0*8+i_1,j_0*8+j_1} = X_{i_0*8+i_1,j_0*8+j_1}*2.0;
        Y_{i_0*8+i_1,j_0*8+j_1} = T_{i_0*8+i_1,j_0*8+j_1} + X_{j_0*8+j_1,i_0*8+i_1};
      ];
""", args={"block": "T", "loops": ["i", "j"], "sizes": [8, 8]})


# ------------------------------------------------------------- refusals


def test_tile_fail_loops_not_nested():
    e = check_not_applicable(tile, """\
L^{16}_{i}$0
  L^{16}_{j}
    L^{16}_{k} [
      S_{i,j} += X_{i,j,k};
    ];
""", tile.LoopsNotNested, {"block": "S", "loops": ["i", "k"], "sizes": [4, 4]})
    assert "loop k is not directly inside loop i" == str(e)


def test_tile_fail_not_only_child():
    e = check_not_applicable(tile, """\
L^{16}_{i}$0 [
  T_{i} = X_{i,0};
  L^{16}_{j} [
    Y_{i,j} = X_{i,j} - T_{i};
  ];
];
""", tile.NotOnlyChild, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 4]})
    assert "loop i holds more than loop j" == str(e)


def test_tile_fail_loop_not_serial():
    for kind in "PUV":
        e = check_not_applicable(tile, f"""\
L^{{16}}_{{i}}$0
  {kind}^{{16}}_{{j}} [
    Y_{{i,j}} = X_{{i,j}};
  ];
""", tile.LoopNotSerial, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 4]})
        assert str(e).startswith("loop j is ")


def test_tile_fail_thread_bound():
    check_not_applicable(tile, """\
B^{16}_{bx}$0
  L^{16}_{j} [
    Y_{bx,j} = X_{bx,j};
  ];
""", tile.LoopNotSerial, {"block": "Y", "loops": ["bx", "j"], "sizes": [4, 4]})


def test_tile_fail_loop_start_not_zero():
    e = check_not_applicable(tile, """\
L^{15}_{i=1}$0
  L^{16}_{j} [
    Y_{i,j} = X_{i,j};
  ];
""", tile.LoopStartNotZero, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 4]})
    assert "starts at 1" in str(e)


def test_tile_fail_loop_too_short():
    e = check_not_applicable(tile, """\
L^{16}_{i}$0
  L^{2}_{j} [
    Y_{i,j} = X_{i,j};
  ];
""", tile.LoopTooShort, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 1]})
    assert "loop j has 2 iterations" == str(e)


def test_tile_fail_wrong_sizes():
    text = "L^{16}_{i}$0\n  L^{12}_{j} [\n    Y_{i,j} = X_{i,j};\n  ];\n"
    e = check_not_applicable(tile, text, tile.WrongSizes, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 12]})
    assert "between 2 and 11" in e.detail and "loop j" in e.detail
    check_not_applicable(tile, text, tile.WrongSizes, {"block": "Y", "loops": ["i", "j"], "sizes": [1, 4]})
    check_not_applicable(tile, text, "bad-step", {"block": "Y", "loops": ["i", "j"], "sizes": [4]})


def test_tile_fail_guard():
    e = check_not_applicable(tile, """\
L^{16}_{i}$0
  L^{16}_{j} [
    Y_{i,j} = X_{i,j} where i + j < 20;
  ];
""", tile.GuardNotBound, {"block": "Y", "loops": ["i", "j"], "sizes": [4, 4]})
    assert "i + j < 20" in str(e)


def test_tile_fail_dependence():
    e = check_not_applicable(tile, """\
L^{16}_{j} [
  Y_{0,j} = X_{0,j};
];

L^{15}_{i}$0
  L^{15}_{j} [
    Y_{i+1,j} = Y_{i,j+1} + X_{i+1,j};
  ];
""", tile.DependenceReversed, {"block": "Y_1", "loops": ["i", "j"], "sizes": [4, 4]})
    assert "reverses a dependence on Y" in str(e) and "the read of Y_{i,j+1}" in e.detail


# ------------------------------------------------- offered iff it checks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_tile_offered_exactly_where_check_passes(path):
    ctx = context(path.read_text())
    offered = {}
    for c in tile.candidates(ctx, None):
        offered.setdefault((c.step.args["block"], *c.step.args["loops"]), []).append(c.step)
    for site in ctx.loop_sites:
        for child in loop_pairs.child_loops(ctx, site):
            key = (ctx.block_names[child.equations[0]], site.loop.var, child.loop.var)
            for step in offered.get(key, []):
                tile.check(ctx, step.args)  # every offered size checks
            if key in offered:
                continue
            # A pair offered no size refuses every size.
            for sizes in ([2, 2], [site.loop.extent - 1, child.loop.extent - 1], [8, 8]):
                with pytest.raises(NotApplicable):
                    tile.check(ctx, {"block": key[0], "loops": list(key[1:]), "sizes": sizes})


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_tile_every_sampled_step_verifies_on_the_examples(path):
    doc = load_leir(path.read_text())
    found = tile.candidates(Context(doc.analysis), None)
    steps = found if len(found) <= SAMPLE_PER_EXAMPLE else random.Random(f"tile {path.stem}").sample(found, SAMPLE_PER_EXAMPLE)
    for c in steps:
        after = apply(doc.analysis, c.step)
        result = verify(doc.analysis, analyze(after))
        assert result.ok, f"{path.stem} {c.step.args}: {result.summary()}"

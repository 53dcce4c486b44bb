"""transform_layout: a temporary stored transposed or in tiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, StaleStep, apply
from leir.transforms.steps import transform_layout
from leir.transforms.base import Context, Step
from leir.transforms.testing import check_action, check_not_applicable, offered_args
from leir.transforms.steps.transform_layout import BadTile, NotTemporary, RankTooLow

GEMM_RELU = """\
L^{16}_{i}
  L^{8}_{j}
    L^{32}_{k} [
      C$0_{i,j} += X_{i,k}*W_{k,j};
    ];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = max(C_{i,j}, 0.0);
  ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(transform_layout, text)


def test_a_transpose_and_the_tiles_that_divide_both_dimensions():
    assert offered(GEMM_RELU) == [{"tensor": "C", "layout": "transpose"},
                                  {"tensor": "C", "layout": "tile", "tile": 4}]


def test_higher_rank_temporaries_transform_their_last_two_dimensions():
    doc = load_leir((Path(__file__).resolve().parent.parent / "examples" / "mha_attention.leir").read_text())
    steps = [c.step.args for c in transform_layout.candidates(Context(doc.analysis), None)]
    # S is 2x4x64x64; M is 2x4x64, whose 4 rows make too few 4x4 tiles.
    assert {"tensor": "S", "layout": "tile", "tile": 32} in steps
    assert {"tensor": "M", "layout": "transpose"} in steps
    assert not any(a["tensor"] == "M" and a["layout"] == "tile" for a in steps)


def test_a_declared_temporary_gets_its_new_shape():
    check_action(transform_layout, "tmp C: f32[16,8] @l\n\n" + GEMM_RELU, """\
tmp C: f32[8,16] @l

L^{16}_{i}
  L^{8}_{j}
    L^{32}_{k} [
      C_{j,i} += X_{i,k}*W_{k,j};
    ];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = max(C_{j,i}, 0.0);
  ];
""", args={"tensor": "C", "layout": "transpose"})


def test_tiles_on_a_gpu_simplify_with_the_thread_indices():
    check_action(transform_layout, """\
B^{2}_{by}
  B^{2}_{bx}
    B^{8}_{ty}
      B^{8}_{tx}
        L^{32}_{k} [
          C$0_{by*8+ty,bx*8+tx} += X_{by*8+ty,k}*W_{k,bx*8+tx};
        ];

B^{16}_{bx}
  B^{16}_{tx} [
    Y_{bx,tx} = max(C_{bx,tx}, 0.0);
  ];
""", """\
B^{2}_{by}
  B^{2}_{bx}
    B^{8}_{ty}
      B^{8}_{tx}
        L^{32}_{k} [
          C_{by,bx,ty,tx} += X_{by*8+ty,k}*W_{k,bx*8+tx};
        ];

B^{16}_{bx}
  B^{16}_{tx} [
    Y_{bx,tx} = max(C_{bx//8,tx//8,bx%8,tx%8}, 0.0);
  ];
""", args={"tensor": "C", "layout": "tile", "tile": 8})


def test_transform_layout_fail_not_temporary():
    e = check_not_applicable(transform_layout, GEMM_RELU, NotTemporary, {"tensor": "Y", "layout": "transpose"})
    assert "Y is an output" in e.detail and "caller" in e.detail


def test_transform_layout_fail_rank_too_low():
    e = check_not_applicable(transform_layout, """\
L^{16}_{i}
  L^{10}_{j} [
    M$0_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i} [
  Y_{i} = M_{i}*2.0;
];
""", RankTooLow, {"tensor": "M", "layout": "transpose"})
    assert "M has 1" in e.detail


def test_transform_layout_fail_bad_tile():
    for tile in (3, 8, 16, 1):
        e = check_not_applicable(transform_layout, GEMM_RELU, BadTile, {"tensor": "C", "layout": "tile", "tile": tile})
        assert "16 and 8" in e.detail


def test_stale_and_malformed_steps():
    doc = load_leir(GEMM_RELU.replace("$0", ""))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("transform_layout", {"tensor": "Q", "layout": "transpose"}))
    for args in ({"tensor": "C", "layout": "flip"}, {"tensor": "C", "layout": "tile"},
                 {"tensor": "C", "layout": "transpose", "tile": 4}):
        with pytest.raises(BadStep):
            apply(doc.analysis, Step("transform_layout", args))

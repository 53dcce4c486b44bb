"""cache_write: a block writes a new temporary, and a copy moves it to its tensor."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, StaleStep, apply
from leir.transforms.steps import cache_write
from leir.transforms.base import Context, Step
from leir.transforms.steps.cache_write import (
    GuardedReduction,
    NotWritten,
    SeveralWriters,
    SparseWrite,
    WrongScope,
    written_box,
)
from leir.transforms.testing import check_action, check_not_applicable, offered_args

SOFTMAX = """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z$0_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(cache_write, text)


def box(text: str, block: str):
    doc = load_leir(text)
    assert doc.ok
    return written_box(Context(doc.analysis).equation_of_block(block))


def test_the_written_tensor_is_offered_and_a_read_is_not():
    assert offered(SOFTMAX) == [{"block": "Z", "tensor": "Z", "scope": "l"},
                                {"block": "Z", "tensor": "Z", "scope": "g"}]
    on_a_read = SOFTMAX.replace("Z$0_{i}", "Z_{i}").replace("exp(X_{i,j} - M_{i});", "exp(X$0_{i,j} - M_{i});")
    assert offered(on_a_read) == []


def test_a_temporary_is_copied_back_before_its_readers():
    check_action(cache_write, SOFTMAX, """\
tmp Z_local: f32[16] @l

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_local_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{ax0} [
  Z_{ax0} = Z_local_{ax0};
];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
""", args={"block": "Z", "tensor": "Z", "scope": "l"})


def test_a_shared_stage_on_a_gpu():
    check_action(cache_write, """\
B^{4}_{bx}
  B^{16}_{tx}
    L^{32}_{k} [
      C$0_{bx,tx} += X_{bx,k}*W_{k,tx};
    ];
""", """\
tmp C_shared: f32[4,16] @s

B^{4}_{bx}
  B^{16}_{tx}
    L^{32}_{k} [
      C_shared_{bx,tx} += X_{bx,k}*W_{k,tx};
    ];

L^{4}_{ax0}
  L^{16}_{ax1} [
    C_{ax0,ax1} = C_shared_{ax0,ax1};
  ];
""", args={"block": "C", "tensor": "C", "scope": "s"})


def test_an_imperfect_split_writes_a_trimmed_box():
    check_action(cache_write, """\
L^{4}_{io}
  L^{32}_{ii} [
    Y$0_{io*32+ii} = X_{io*32+ii}*2.0 where io*32 + ii < 100;
  ];
""", """\
tmp Y_local: f32[100] @l

L^{4}_{io}
  L^{32}_{ii} [
    Y_local_{io*32+ii} = X_{io*32+ii}*2.0 where io*32 + ii < 100;
  ];

L^{100}_{ax0} [
  Y_{ax0} = Y_local_{ax0};
];
""", args={"block": "Y", "tensor": "Y", "scope": "l"})


def test_a_lower_bound_guard_shifts_the_cache():
    check_action(cache_write, """\
L^{8}_{i} [
  Y$0_{i} = X_{i}*2.0 where i >= 2;
];
""", """\
tmp Y_local: f32[6] @l

L^{8}_{i} [
  Y_local_{i-2} = X_{i}*2.0 where i >= 2;
];

L^{6}_{ax0} [
  Y_{2+ax0} = Y_local_{ax0};
];
""", args={"block": "Y", "tensor": "Y", "scope": "l"})


def test_fused_indices_are_enumerated():
    check_action(cache_write, """\
L^{32}_{f}
  L^{4}_{k} [
    Y$0_{f//8,f%8} += X_{f//8,f%8,k};
  ];
""", """\
L^{32}_{f}
  L^{4}_{k} [
    Y_global_{f//8,f%8} += X_{f//8,f%8,k};
  ];

L^{4}_{ax0}
  L^{8}_{ax1} [
    Y_{ax0,ax1} = Y_global_{ax0,ax1};
  ];
""", args={"block": "Y", "tensor": "Y", "scope": "g"})


def test_a_scalar_reduction():
    check_action(cache_write, """\
L^{16}_{i} [
  S$0 += X_{i};
];
""", """\
tmp S_local: f32 @l

L^{16}_{i} [
  S_local += X_{i};
];

S = S_local;
""", args={"block": "S", "tensor": "S", "scope": "l"})


@pytest.mark.parametrize("text,block,expected", [
    ("L^{4}_{a}\n  L^{8}_{b} [\n    Y_{a*8+b} = X_{a,b};\n  ];\n", "Y", [(0, 31)]),
    ("L^{4}_{a}\n  L^{8}_{b} [\n    Y_{b,a+1} = X_{a,b};\n  ];\n", "Y", [(0, 7), (1, 4)]),
    ("L^{8}_{i} [\n  Y_{i} = X_{i} where i >= 2;\n];\n", "Y", [(2, 7)]),
])
def test_written_box_of_dense_writes(text, block, expected):
    assert box(text, block) == (expected, "")


@pytest.mark.parametrize("text,reason", [
    ("L^{4}_{a}\n  L^{8}_{b} [\n    Y_{a*9+b} = X_{a,b};\n  ];\n", "skips elements"),
    ("L^{8}_{i} [\n  Y_{i,i} = X_{i};\n];\n", "skip elements of their box"),
    ("L^{8}_{i} [\n  Y_{i} = X_{i} where i != 3;\n];\n", "not made of affine comparisons"),
    ("L^{8}_{i}\n  L^{2}_{j} [\n    Y_{i} = X_{i,j} where j < 1;\n  ];\n", "not one of the written indices"),
])
def test_written_box_refuses_gaps(text, reason):
    found, why = box(text, "Y")
    assert found == [] and reason in why


def test_cache_write_fail_not_written():
    e = check_not_applicable(cache_write, SOFTMAX, NotWritten, {"block": "Z", "tensor": "X", "scope": "l"})
    assert "block Z writes Z" in e.detail


def test_cache_write_fail_several_writers():
    e = check_not_applicable(cache_write, """\
L^{16}_{i} [
  C_{i} = 0.0;
];

L^{16}_{i}
  L^{4}_{k} [
    C$0_{i} += X_{i,k};
  ];
""", SeveralWriters, {"block": "C_1", "tensor": "C", "scope": "l"})
    assert "blocks C, C_1" in e.detail


def test_cache_write_fail_sparse_write():
    e = check_not_applicable(cache_write, """\
L^{8}_{i} [
  Y$0_{i} = X_{i} where i != 3;
];
""", SparseWrite, {"block": "Y", "tensor": "Y", "scope": "l"})
    assert "uninitialised" in e.detail and "Y" in str(e)


def test_cache_write_fail_guarded_reduction():
    # A guard naming the reduction loop is refused even where it holds at
    # r == 0 (the checker already refuses one that does not).
    e = check_not_applicable(cache_write, """\
L^{10}_{i}
  L^{3}_{r} [
    Y$0_{i} += X_{i+r} where i + r < 11;
  ];
""", GuardedReduction, {"block": "Y", "tensor": "Y", "scope": "l"})
    assert "reduction loop r" in str(e)


def test_cache_write_fail_wrong_scope():
    e = check_not_applicable(cache_write, SOFTMAX, WrongScope, {"block": "Z", "tensor": "Z", "scope": "s"})
    assert "B loops" in e.detail


def test_stale_and_malformed_steps():
    doc = load_leir(SOFTMAX.replace("$0", ""))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("cache_write", {"block": "Q", "tensor": "Z", "scope": "l"}))
    with pytest.raises(BadStep):
        apply(doc.analysis, Step("cache_write", {"block": "Z", "tensor": "Z"}))

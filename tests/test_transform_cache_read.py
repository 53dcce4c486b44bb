"""cache_read: a copy of a tensor in another memory, read by one block."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, StaleStep, apply
from leir.transforms.steps import cache_read
from leir.transforms.base import Step
from leir.transforms.steps.cache_read import (
    NotRead,
    OwnOutput,
    ReadInGuard,
    SeveralWriters,
    UnboundedCopy,
    WrongScope,
)
from leir.transforms.testing import check_action, check_not_applicable, offered_args

SOFTMAX = """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z$0_{i};
  ];
"""

GPU_MATMUL = """\
B^{4}_{bx}
  B^{16}_{tx}
    L^{32}_{k} [
      C_{bx,tx} += X_{bx,k}*W_{k,tx}$0;
    ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(cache_read, text)


def test_the_access_under_the_cursor_selects_the_tensor():
    assert offered(SOFTMAX) == [{"block": "Y", "tensor": "Z", "scope": "l"},
                                {"block": "Y", "tensor": "Z", "scope": "g"}]


def test_elsewhere_in_the_equation_every_tensor_it_reads_is_offered():
    text = SOFTMAX.replace("Z$0_{i}", "Z_{i}").replace("Y_{i,j} =", "Y_{i,j} $0=")
    assert [(a["tensor"], a["scope"]) for a in offered(text)] == [
        ("X", "l"), ("X", "g"), ("M", "l"), ("M", "g"), ("Z", "l"), ("Z", "g")]


def test_the_written_tensor_under_the_cursor_is_cache_writes():
    assert offered(SOFTMAX.replace("Z$0_{i}", "Z_{i}").replace("Y_{i,j} =", "Y$0_{i,j} =")) == []


def test_a_gpu_program_gets_shared_and_local_stages():
    assert [a["scope"] for a in offered(GPU_MATMUL)] == ["s", "l"]


def test_cache_a_temporary_after_its_producer():
    check_action(cache_read, SOFTMAX, """\
tmp Z_local: f32[16] @l

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{16}_{ax0} [
  Z_local_{ax0} = Z_{ax0};
];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_local_{i};
  ];
""", args={"block": "Y", "tensor": "Z", "scope": "l"})


def test_a_global_copy_needs_no_declaration():
    check_action(cache_read, """\
L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X$0_{j,i}*2.0;
  ];
""", """\
L^{8}_{ax0}
  L^{16}_{ax1} [
    X_global_{ax0,ax1} = X_{ax0,ax1};
  ];

L^{16}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_global_{j,i}*2.0;
  ];
""", args={"block": "Y", "tensor": "X", "scope": "g"})


def test_other_readers_keep_the_original():
    before = SOFTMAX.replace("Z$0_{i}", "Z_{i}").replace("Z_{i} += exp(X_{i,j}", "Z_{i} += exp(X$0_{i,j}")
    check_action(cache_read, before, """\
tmp X_local: f32[16,10] @l

L^{16}_{ax0}
  L^{10}_{ax1} [
    X_local_{ax0,ax1} = X_{ax0,ax1};
  ];

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_local_{i,j} - M_{i});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
""", args={"block": "Z", "tensor": "X", "scope": "l"})


def test_an_imperfect_split_guard_bounds_the_copy():
    check_action(cache_read, """\
L^{4}_{io}
  L^{32}_{ii} [
    Y_{io*32+ii} = X$0_{io*32+ii}*2.0 where io*32 + ii < 100;
  ];
""", """\
tmp X_local: f32[100] @l

L^{100}_{ax0} [
  X_local_{ax0} = X_{ax0};
];

L^{4}_{io}
  L^{32}_{ii} [
    Y_{io*32+ii} = X_local_{io*32+ii}*2.0 where io*32 + ii < 100;
  ];
""", args={"block": "Y", "tensor": "X", "scope": "l"})


def test_cache_read_fail_not_read():
    e = check_not_applicable(cache_read, SOFTMAX, NotRead, {"block": "M", "tensor": "Z", "scope": "l"})
    assert "block M does not read Z" in str(e) and "X" in e.detail


def test_cache_read_fail_read_in_guard():
    e = check_not_applicable(cache_read, """\
L^{10}_{i} [
  Y_{i} = X_{i}*2.0 where G$0_{i} > 0.0;
];
""", ReadInGuard, {"block": "Y", "tensor": "G", "scope": "l"})
    assert "G" in e.detail and "guard" in e.detail


def test_cache_read_fail_own_output():
    e = check_not_applicable(cache_read, GPU_MATMUL, OwnOutput, {"block": "C", "tensor": "C", "scope": "l"})
    assert "cache_write on block C" in e.detail


def test_cache_read_fail_several_writers():
    e = check_not_applicable(cache_read, """\
L^{16}_{i} [
  C_{i} = 0.0;
];

L^{16}_{i}
  L^{4}_{k} [
    C_{i} += X_{i,k};
  ];

L^{16}_{i} [
  Y_{i} = C$0_{i}*2.0;
];
""", SeveralWriters, {"block": "Y", "tensor": "C", "scope": "l"})
    assert "C, C_1" in e.detail


def test_cache_read_fail_unbounded_copy():
    # The guard keeps X_{i-1} in bounds, but not only with affine bounds:
    # TVM would copy X from index -1.
    e = check_not_applicable(cache_read, """\
L^{10}_{i} [
  Y_{i} = X$0_{i-1}*2.0 where i % 3 != 0 & i >= 1;
];
""", UnboundedCopy, {"block": "Y", "tensor": "X", "scope": "l"})
    assert "index 0 of this read of X" in e.detail


def test_cache_read_fail_wrong_scope():
    e = check_not_applicable(cache_read, SOFTMAX, WrongScope, {"block": "Y", "tensor": "Z", "scope": "s"})
    assert "B loops" in e.detail
    e = check_not_applicable(cache_read, GPU_MATMUL, WrongScope, {"block": "C", "tensor": "W", "scope": "g"})
    assert "shared (s) or local (l)" in e.detail


def test_stale_and_malformed_steps():
    doc = load_leir(SOFTMAX.replace("$0", ""))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("cache_read", {"block": "Q", "tensor": "X", "scope": "l"}))
    with pytest.raises(StaleStep):
        apply(doc.analysis, Step("cache_read", {"block": "Y", "tensor": "Q", "scope": "l"}))
    with pytest.raises(BadStep):
        apply(doc.analysis, Step("cache_read", {"block": "Y", "tensor": "X", "scope": "shared"}))

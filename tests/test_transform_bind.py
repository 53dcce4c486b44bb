"""bind: a serial loop becomes ``B`` on a block or thread axis and takes
the axis's name; CUDA's limits and one extent per axis in a kernel; one
typed error per precondition. Thread-bound programs are verified on the
CPU with their threads run serially."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.transforms import BadStep, apply
from leir.transforms.steps import bind
from leir.transforms.base import Step
from leir.transforms.testing import check_action, check_not_applicable, offered_args

MATMUL = """\
L^{64}_{i}
  L^{32}_{j}
    L^{16}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def offered(text: str) -> set[tuple[str, str]]:
    return {(a["loop"], a["axis"]) for a in offered_args(bind, text)}


@pytest.mark.slow
def test_bind_matmul_rows_to_blocks_then_columns_to_threads():
    after_rows = check_action(bind, MATMUL.replace("L^{64}_{i}", "L^{64}_{i}$0"), """\
B^{64}_{bx}
  L^{32}_{j}
    L^{16}_{k} [
      C_{bx,j} += X_{bx,k}*W_{k,j};
    ];
""", {"block": "C", "loop": "i", "axis": "bx"})
    check_action(bind, after_rows.replace("L^{32}_{j}", "L^{32}_{j}$0"), """\
B^{64}_{bx}
  B^{32}_{tx}
    L^{16}_{k} [
      C_{bx,tx} += X_{bx,k}*W_{k,tx};
    ];
""", {"block": "C", "loop": "j", "axis": "tx"})


def test_bind_offers_spatial_loops_on_every_free_axis():
    found = offered(MATMUL)
    assert {("i", a) for a in bind.AXES} <= found
    assert not any(loop == "k" for loop, _ in found)
    # threadIdx.z is limited to 64: j (32) may take it, i (64) too
    assert ("j", "tz") in found


def test_bind_a_sibling_thread_loop_of_the_same_extent():
    text = """\
B^{8}_{bx} [
  B^{32}_{tx} [
    T_{bx,tx} = X_{bx,tx};
  ];
  L^{32}_{j} [
    Y_{bx,j} = X_{bx,j}*2.0;
  ];
];
"""
    assert ("j", "tx") in offered(text)
    assert ("j", "bx") not in offered(text)


def test_bind_bad_axis_is_a_bad_step():
    doc = load_leir(MATMUL)
    with pytest.raises(BadStep):
        apply(doc.analysis, Step("bind", {"block": "C", "loop": "i", "axis": "threadIdx.x"}))


def test_bind_fail_loop_not_serial():
    e = check_not_applicable(bind, MATMUL.replace("L^{64}_{i}", "P^{64}_{i}"), bind.LoopNotSerial,
                             {"block": "C", "loop": "i", "axis": "bx"})
    assert e.short == "loop i is parallel"


def test_bind_fail_loop_start_not_zero():
    e = check_not_applicable(bind, "L^{4}_{i=2} [\n  Y_{i} = X_{i};\n];\n", bind.LoopStartNotZero,
                             {"block": "Y", "loop": "i", "axis": "tx"})
    assert e.short == "loop i starts at 2"


def test_bind_fail_in_parallel():
    e = check_not_applicable(bind, MATMUL.replace("L^{64}_{i}", "P^{64}_{i}"), bind.InParallel,
                             {"block": "C", "loop": "j", "axis": "tx"})
    assert "parallel loop i" in e.short


def test_bind_fail_wide_vector_inside():
    e = check_not_applicable(bind, "L^{16}_{i}\n  V^{8}_{j} [\n    Y_{i,j} = X_{i,j};\n  ];\n", bind.WideVectorInside,
                             {"block": "Y", "loop": "i", "axis": "bx"})
    assert "8 lanes" in e.short and "loop j" in e.detail


def test_bind_fail_axis_taken():
    text = MATMUL.replace("L^{64}_{i}", "B^{64}_{tx}").replace("_{i,", "_{tx,")
    e = check_not_applicable(bind, text, bind.AxisTaken, {"block": "C", "loop": "j", "axis": "tx"})
    assert e.short == "threadIdx.x is already bound around loop j"


def test_bind_fail_name_taken():
    e = check_not_applicable(bind, "L^{16}_{i} [\n  tx_{i} = X_{i};\n];\n", bind.NameTaken,
                             {"block": "tx", "loop": "i", "axis": "tx"})
    assert e.short == "a tensor is named tx"


def test_bind_fail_axis_order():
    text = MATMUL.replace("L^{64}_{i}", "B^{64}_{tx}").replace("_{i,", "_{tx,")
    e = check_not_applicable(bind, text, bind.AxisOrder, {"block": "C", "loop": "j", "axis": "bx"})
    assert "block axis blockIdx.x inside thread loop tx" == e.short
    text = MATMUL.replace("L^{32}_{j}", "B^{32}_{by}").replace(",j}", ",by}")
    e = check_not_applicable(bind, text, bind.AxisOrder, {"block": "C", "loop": "i", "axis": "tx"})
    assert "thread axis threadIdx.x around block loop by" == e.short


def test_bind_fail_extent_limit():
    e = check_not_applicable(bind, MATMUL.replace("L^{64}_{i}", "L^{128}_{i}"), bind.ExtentLimit,
                             {"block": "C", "loop": "i", "axis": "tz"})
    assert e.short == "threadIdx.z extent 128 exceeds CUDA's limit of 64"
    e = check_not_applicable(bind, "L^{2048}_{i} [\n  Y_{i} = X_{i};\n];\n", bind.ExtentLimit,
                             {"block": "Y", "loop": "i", "axis": "tx"})
    assert e.short == "threadIdx.x extent 2048 exceeds CUDA's limit of 1024"


def test_bind_fail_extent_mismatch():
    text = """\
B^{8}_{bx} [
  B^{32}_{tx} [
    T_{bx,tx} = X_{bx,tx};
  ];
  L^{16}_{j} [
    Y_{bx,j} = X_{bx,j}*2.0;
  ];
];
"""
    e = check_not_applicable(bind, text, bind.ExtentMismatch, {"block": "Y", "loop": "j", "axis": "tx"})
    assert e.short == "threadIdx.x has extent 32 elsewhere in the kernel" and "loop j" in e.detail


def test_bind_fail_threads_per_block():
    e = check_not_applicable(bind, MATMUL.replace("L^{64}_{i}", "B^{64}_{tx}").replace("_{i,", "_{tx,"),
                             bind.ThreadsPerBlock, {"block": "C", "loop": "j", "axis": "ty"})
    assert e.short == "2048 threads per block"


def test_bind_fail_replicated_reduction():
    # Every thread of the block would run the reduction into S at once.
    text = """\
B^{8}_{bx} [
  L^{32}_{j} [
    T_{bx,j} = X_{bx,j};
  ];
  L^{32}_{k} [
    S_{bx} += T_{bx,k};
  ];
];
"""
    e = check_not_applicable(bind, text, bind.ReplicatedReduction, {"block": "T", "loop": "j", "axis": "tx"})
    assert e.short == "every threadIdx.x would accumulate into S"
    # Outside any kernel, the reduction runs once, on the host.
    assert ("j", "tx") in offered(text.replace("B^{8}_{bx}", "L^{8}_{i}").replace("bx", "i"))


def test_bind_fail_reduction_axis():
    e = check_not_applicable(bind, MATMUL, bind.ReductionAxis, {"block": "C", "loop": "k", "axis": "tx"})
    assert e.short == "loop k is a reduction axis of C"


def test_bind_fail_not_compact_dataflow():
    text = "L^{16}_{i} [\n  C_{i} = 0.0;\n];\n\nL^{16}_{i}\n  L^{8}_{k} [\n    C_{i} += X_{i,k};\n  ];\n"
    e = check_not_applicable(bind, text, bind.NotCompactDataflow, {"block": "C_1", "loop": "i", "axis": "bx"})
    assert "updates" in e.short


def test_bind_fail_dependence():
    text = "L^{15}_{i} [\n  T_{i} = X_{i};\n  Y_{i} = T_{i+1};\n];\n"
    e = check_not_applicable(bind, text, bind.Dependence, {"block": "T", "loop": "i", "axis": "tx"})
    assert "T_{i+1}" in e.short

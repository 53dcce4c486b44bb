"""rfactor: a reduction becomes partial results over one of its loops and a
final combination, by TVM's rfactor; one typed error per precondition,
including the ones TVM 0.27 would refuse or get wrong."""

from __future__ import annotations

import pytest

from leir.transforms.steps import rfactor
from leir.transforms.testing import check_action, check_not_applicable, offered_args

SUM = """\
L^{16}_{i}
  L^{32}_{k}$0 [
    S_{i} += X_{i,k};
  ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(rfactor, text)


@pytest.mark.slow
def test_rfactor_matmul_over_k_with_partials_first():
    check_action(rfactor, """\
L^{16}_{i}
  L^{12}_{j}
    L^{32}_{k}$0 [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
""", """\
L^{16}_{i}
  L^{12}_{j}
    L^{32}_{k} [
      C_rf_{k,i,j} = X_{i,k}*W_{k,j};
    ];

L^{16}_{i}
  L^{12}_{j}
    L^{32}_{k} [
      C_{i,j} += C_rf_{k,i,j};
    ];
""", {"block": "C", "loop": "k", "factor_axis": 0})


@pytest.mark.slow
def test_rfactor_integer_max():
    check_action(rfactor, """\
in  X: i32[16,40]
out M: i32[16]

L^{16}_{i}
  L^{4}_{ko}
    L^{10}_{ki}$0 [
      M_{i} = max(M_{i}, X_{i,ko*10+ki});
    ];
""", """\
in  X: i32[16,40]
out M: i32[16]
tmp M_rf: i32[16,10]

L^{16}_{i}
  L^{4}_{ko}
    L^{10}_{ki} [
      M_rf_{i,ki} = max(M_rf_{i,ki}, X_{i,ko*10+ki});
    ];

L^{16}_{i}
  L^{10}_{ki} [
    M_{i} = max(M_{i}, M_rf_{i,ki});
  ];
""", {"block": "M", "loop": "ki", "factor_axis": 1})


def test_rfactor_offers_both_places_of_the_new_dimension():
    assert offered(SUM.replace("$0", "")) == [{"block": "S", "loop": "k", "factor_axis": 0},
                                              {"block": "S", "loop": "k", "factor_axis": 1}]


def test_rfactor_of_a_scalar_puts_the_new_dimension_first():
    assert offered("L^{32}_{k} [\n  S += X_{k};\n];\n") == [{"block": "S", "loop": "k", "factor_axis": 0}]


def test_rfactor_fail_not_reduction():
    e = check_not_applicable(rfactor, "L^{16}_{i}\n  L^{8}_{k}$0 [\n    Y_{i} = X_{i,k};\n  ];\n", rfactor.NotReduction,
                             {"block": "Y", "loop": "k", "factor_axis": 0})
    assert e.short == "Y_{i} is not a reduction with an implied initial value"
    e = check_not_applicable(rfactor, "L^{16}_{i} [\n  S_{i} = 0.0;\n];\n\n" + SUM, rfactor.NotReduction,
                             {"block": "S_1", "loop": "k", "factor_axis": 0})
    assert "updates the value" in e.detail


def test_rfactor_fail_written_elsewhere():
    e = check_not_applicable(rfactor, SUM + "\nL^{16}_{i} [\n  S_{i} *= 2.0;\n];\n", rfactor.WrittenElsewhere,
                             {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "S is also written by another equation"


def test_rfactor_fail_guard():
    # Regression: TVM 0.27 dropped the guard from the combining nest, which
    # then read partial results never written.
    e = check_not_applicable(rfactor, SUM.replace("X_{i,k};", "X_{i,k} where k < 30;"), rfactor.Guard,
                             {"block": "S", "loop": "k", "factor_axis": 0})
    assert "k < 30" in e.short


@pytest.mark.parametrize("rhs,why", [
    ("max(S_{i}, X_{i,k})", "-inf"),  # TVM starts a float max at its lowest finite value
    ("S_{i} - X_{i,k}", "TVM recognises"),
    ("X_{i,k} + S_{i}", "TVM recognises"),
])
def test_rfactor_fail_combiner(rhs, why):
    text = SUM.replace("S_{i} += X_{i,k}", f"S_{{i}} = {rhs}")
    e = check_not_applicable(rfactor, text, rfactor.Combiner, {"block": "S", "loop": "k", "factor_axis": 0})
    assert why in e.detail and "S_{i}" in e.short


def test_rfactor_fail_not_reduction_loop():
    e = check_not_applicable(rfactor, SUM, rfactor.NotReductionLoop, {"block": "S", "loop": "i", "factor_axis": 0})
    assert e.short == "loop i is not a reduction loop of S" and "k" in e.detail


def test_rfactor_fail_loop_not_serial():
    e = check_not_applicable(rfactor, SUM.replace("L^{32}_{k}", "U^{32}_{k}"), rfactor.LoopNotSerial,
                             {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "loop k is unrolled"


def test_rfactor_fail_loop_too_short():
    e = check_not_applicable(rfactor, SUM.replace("L^{32}_{k}", "L^{1}_{k}"), rfactor.LoopTooShort,
                             {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "loop k has 1 iteration"


def test_rfactor_fail_not_alone():
    text = """\
L^{16}_{i}
  L^{32}_{k} [
    S_{i} += X_{i,k};
    Q_{i} += X_{i,k}*X_{i,k};
  ];
"""
    e = check_not_applicable(rfactor, text, rfactor.NotAlone, {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "loop i also holds Q_{i}"
    before = "L^{16}_{i} [\n  T_{i} = X_{i,0};\n  L^{32}_{k} [\n    S_{i} += X_{i,k}*T_{i};\n  ];\n];\n"
    e = check_not_applicable(rfactor, before, rfactor.NotAlone, {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "loop i also holds T_{i}"
    # Regression: TVM 0.27 failed with an internal error (not a schedule
    # error) on an equation after the reduction under its outermost loop.
    after = "L^{16}_{i} [\n  L^{32}_{k} [\n    S_{i} += X_{i,k};\n  ];\n  Y_{i} = X_{i,0};\n];\n"
    e = check_not_applicable(rfactor, after, rfactor.NotAlone, {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "loop i also holds Y_{i}"


def test_rfactor_fail_not_stage_pipeline_write_after_read():
    text = SUM + "\nL^{16}_{i} [\n  Y_{i} = T_{i};\n];\n\nL^{16}_{i} [\n  T_{i} = X_{i,0};\n];\n"
    text = "L^{16}_{i} [\n  T_{i} = X_{i,1};\n];\n\n" + text
    e = check_not_applicable(rfactor, text, rfactor.NotStagePipeline, {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "T is written after T_{i} reads it"


def test_rfactor_fail_not_stage_pipeline_uncovered_read():
    # Under loop a, T1 reads T0_{0,0}, which only iteration a = 0 writes.
    text = """\
L^{2}_{a} [
  L^{4}_{b} [
    T0_{a,b} = X_{a,b};
  ];
  T1_{a} = T0_{0,0};
];

""" + SUM
    e = check_not_applicable(rfactor, text, rfactor.NotStagePipeline, {"block": "S", "loop": "k", "factor_axis": 0})
    assert e.short == "T0_{0,0} may read elements no earlier equation writes"
    # In a nest of its own the read is covered by the whole of T0.
    apart = text.replace("  ];\n  T1_{a} = T0_{0,0};\n];", "  ];\n];\n\nL^{2}_{a} [\n  T1_{a} = T0_{0,0};\n];")
    assert offered(apart.replace("$0", ""))


def test_rfactor_fail_wrong_factor_axis():
    e = check_not_applicable(rfactor, """\
L^{16}_{i}
  L^{8}_{j}
    L^{32}_{k}$0 [
      C_{i,j} += X_{i,k};
    ];
""", rfactor.WrongFactorAxis, {"block": "C", "loop": "k", "factor_axis": 1})
    assert "first (0) or last (2)" in e.detail

"""decompose_reduction: a reduction's implied initial value becomes an
equation of its own before a chosen loop (TVM's decompose_reduction); one
typed error per precondition."""

from __future__ import annotations

import pytest

from leir.bridge.document import load_leir
from leir.semantics import analyze
from leir.transforms.steps import decompose_reduction
from leir.transforms.testing import check_action, check_not_applicable, offered_args

MATMUL = """\
L^{16}_{i}
  L^{12}_{j}
    L^{8}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def offered(text: str) -> list[dict]:
    return offered_args(decompose_reduction, text)


@pytest.mark.slow
def test_decompose_before_the_reduction_loop():
    result = check_action(decompose_reduction, MATMUL.replace("L^{8}_{k}", "L^{8}_{k}$0"), """\
L^{16}_{i}
  L^{12}_{j} [
    C_{i,j} = 0.0;
    L^{8}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
  ];
""", {"block": "C", "loop": "k"})
    # The accumulation is now an update of the value written before it.
    assert [info.kind for info in analyze(load_leir(result).program).equations] == ["assign", "update"]


@pytest.mark.slow
def test_decompose_in_a_nest_of_several_equations_keeps_loop_names():
    check_action(decompose_reduction, """\
P^{8}_{i}$0
  L^{4}_{jo}
    L^{16}_{k}
      V^{4}_{ji} [
        C_{i,jo*4+ji} += X_{i,k}*W_{k,jo*4+ji};
      ];
""", """\
P^{8}_{i}
  L^{4}_{jo}
    V^{4}_{ji} [
      C_{i,jo*4+ji} = 0.0;
    ];

P^{8}_{i}
  L^{4}_{jo}
    L^{16}_{k}
      V^{4}_{ji} [
        C_{i,jo*4+ji} += X_{i,k}*W_{k,jo*4+ji};
      ];
""", {"block": "C", "loop": "i"})


@pytest.mark.slow
def test_decompose_an_integer_min():
    check_action(decompose_reduction, """\
in  X: i32[16,10]
out M: i32[16]

L^{16}_{i}$0
  L^{10}_{j} [
    M_{i} = min(M_{i}, X_{i,j});
  ];
""", """\
in  X: i32[16,10]
out M: i32[16]

L^{16}_{i} [
  M_{i} = 2147483647;
];

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = min(M_{i}, X_{i,j});
  ];
""", {"block": "M", "loop": "i"})


def test_decompose_offers_every_loop_down_to_the_first_reduction_loop():
    assert offered(MATMUL) == [{"block": "C", "loop": loop} for loop in ("i", "j", "k")]
    assert offered(MATMUL.replace("L^{12}_{j}\n    L^{8}_{k}", "L^{8}_{k}\n    L^{12}_{j}")
                   .replace("      C_{i,j}", "      C_{i,j}")) == [{"block": "C", "loop": loop} for loop in ("i", "k")]


def test_decompose_fail_not_reduction():
    e = check_not_applicable(decompose_reduction, "L^{16}_{i}$0 [\n  Y_{i} = X_{i};\n];\n",
                             decompose_reduction.NotReduction, {"block": "Y", "loop": "i"})
    assert e.short == "Y_{i} is not a reduction with an implied initial value"


def test_decompose_fail_written_elsewhere():
    e = check_not_applicable(decompose_reduction, MATMUL + "\nL^{16}_{i} [\n  C_{i,0} = 1.0;\n];\n",
                             decompose_reduction.WrittenElsewhere, {"block": "C", "loop": "i"})
    assert "C is also written" in e.short


def test_decompose_fail_guard_tvm_cannot_match():
    text = MATMUL.replace("X_{i,k}*W_{k,j};", "X_{i,k}*W_{k,j} where i + k < 20;")
    e = check_not_applicable(decompose_reduction, text, decompose_reduction.Guard, {"block": "C", "loop": "i"})
    assert "i + k < 20" in e.short


def test_decompose_fail_guard_skipping_the_first_iteration():
    # TVM runs T.init at k = 0, where this guard fails: the lowered
    # reduction never initialises C, and an explicit value would differ.
    # Such a program no longer checks (guarded-reduction-init), so the step
    # is never asked for; a guard that holds at k = 0 is fine.
    text = MATMUL.replace("X_{i,k}*W_{k,j};", "X_{i,k}*W_{k,j} where k >= 2;")
    from leir.bridge.document import load_leir

    assert [d.code for d in load_leir(text).diagnostics if d.is_error] == ["guarded-reduction-init"]
    assert offered(text.replace("k >= 2", "k < 6"))


def test_decompose_fail_loop_inside_reduction():
    text = MATMUL.replace("L^{12}_{j}\n    L^{8}_{k}", "L^{8}_{k}\n    L^{12}_{j}")
    e = check_not_applicable(decompose_reduction, text, decompose_reduction.LoopInsideReduction,
                             {"block": "C", "loop": "j"})
    assert e.short == "loop j is inside reduction loop k"

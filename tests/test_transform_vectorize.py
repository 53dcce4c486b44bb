"""vectorize: an innermost, data-parallel serial loop of a vector's length
becomes ``V``; one typed error per precondition."""

from __future__ import annotations

import pytest

from leir.transforms.steps import vectorize
from leir.transforms.testing import check_action, check_not_applicable, offered_args

ROW = """\
L^{16}_{i}
  L^{8}_{j}$0 [
    Y_{i,j} = X_{i,j}*2.0;
  ];
"""


def offered(text: str) -> set[str]:
    return {a["loop"] for a in offered_args(vectorize, text)}


@pytest.mark.slow
def test_vectorize_two_equations_in_step():
    check_action(vectorize, """\
L^{16}_{i}
  L^{8}_{j}$0 [
    T_{i,j} = exp(X_{i,j});
    Y_{i,j} = T_{i,j}*2.0;
  ];

L^{16}_{i} [
  Z_{i} = T_{i,0} + T_{i,7};
];
""", """\
L^{16}_{i}
  V^{8}_{j} [
    T_{i,j} = exp(X_{i,j});
    Y_{i,j} = T_{i,j}*2.0;
  ];

L^{16}_{i} [
  Z_{i} = T_{i,0} + T_{i,7};
];
""")


@pytest.mark.slow
def test_vectorize_in_a_gpu_kernel_with_four_lanes():
    check_action(vectorize, """\
B^{64}_{bx}
  B^{32}_{tx}
    L^{4}_{v}$0 [
      Y_{bx*128+tx*4+v} = X_{bx*128+tx*4+v} + 1.0;
    ];
""", """\
B^{64}_{bx}
  B^{32}_{tx}
    V^{4}_{v} [
      Y_{bx*128+tx*4+v} = X_{bx*128+tx*4+v} + 1.0;
    ];
""")


def test_vectorize_offers_innermost_loops_only():
    assert offered(ROW.replace("$0", "").replace("L^{16}_{i}", "L^{4}_{i}")) == {"j"}


def test_vectorize_fail_loop_not_serial():
    e = check_not_applicable(vectorize, ROW.replace("L^{8}_{j}", "U^{8}_{j}"), vectorize.LoopNotSerial,
                             {"block": "Y", "loop": "j"})
    assert "loop j is unrolled" == e.short


def test_vectorize_fail_not_innermost():
    e = check_not_applicable(vectorize, ROW.replace("$0", "").replace("L^{16}_{i}", "L^{16}_{i}$0"),
                             vectorize.NotInnermost, {"block": "Y", "loop": "i"})
    assert e.short == "loop i contains loop j"


def test_vectorize_fail_inside_vector():
    e = check_not_applicable(vectorize, ROW.replace("L^{16}_{i}", "V^{16}_{i}"), vectorize.InsideVector,
                             {"block": "Y", "loop": "j"})
    assert "vectorized loop i" in e.short


@pytest.mark.parametrize("text", [
    ROW.replace("L^{8}_{j}", "L^{128}_{j}"),  # too long for a CPU vector
    ROW.replace("L^{8}_{j}", "L^{1}_{j}"),  # nothing to vectorize
    # eight lanes inside a GPU kernel
    ROW.replace("L^{16}_{i}", "B^{16}_{bx}").replace("_{i,j}", "_{bx,j}"),
])
def test_vectorize_fail_wrong_lanes(text):
    block = "Y"
    e = check_not_applicable(vectorize, text, vectorize.WrongLanes, {"block": block, "loop": "j"})
    assert "lanes" in e.short and "loop j" in e.detail


def test_vectorize_fail_reduction_axis():
    e = check_not_applicable(vectorize, """\
L^{16}_{i}
  L^{8}_{k}$0 [
    S_{i} += X_{i,k};
  ];
""", vectorize.ReductionAxis, {"block": "S", "loop": "k"})
    assert e.short == "loop k is a reduction axis of S"


def test_vectorize_fail_not_compact_dataflow():
    e = check_not_applicable(vectorize, """\
L^{16}_{i} [
  C_{i} = 1.0;
];

L^{2}_{io}
  L^{8}_{ii}$0 [
    C_{io*8+ii} *= X_{io*8+ii};
  ];
""", vectorize.NotCompactDataflow, {"block": "C_1", "loop": "ii"})
    assert "C_{io*8+ii} updates" in e.short


def test_vectorize_fail_dependence():
    e = check_not_applicable(vectorize, """\
L^{4}_{i}
  L^{8}_{j}$0 [
    T_{i,j} = X_{i,j};
    Y_{i,j} = T_{i,7-j};
  ];
""", vectorize.Dependence, {"block": "T", "loop": "j"})
    assert "T_{i,7-j}" in e.short and "loop j" in e.short


def test_vectorize_fail_temporary_inside():
    # Regression: TVM 0.27 allocated T inside the vector loop, one lane
    # wide, and Y came out wrong.
    e = check_not_applicable(vectorize, """\
L^{16}_{i}
  L^{8}_{j}$0 [
    T_{i,j} = exp(X_{i,j});
    Y_{i,j} = T_{i,j}*2.0;
  ];
""", vectorize.TemporaryInside, {"block": "T", "loop": "j"})
    assert e.short == "temporary T is used only inside loop j"

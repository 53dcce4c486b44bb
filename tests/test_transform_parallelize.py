"""parallelize: a serial loop becomes ``P`` when its iterations are
independent and TVM's parallel primitive accepts it; one typed error per
precondition, each naming the loop or access at fault."""

from __future__ import annotations

import pytest

from leir.transforms.steps import parallelize
from leir.transforms.testing import check_action, check_not_applicable, offered_args

ROWS = """\
L^{16}_{i}$0
  L^{12}_{j} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
"""


def offered(text: str) -> set[tuple[str, str]]:
    return {(a["block"], a["loop"]) for a in offered_args(parallelize, text)}


@pytest.mark.slow
def test_parallelize_a_nest_of_several_equations():
    check_action(parallelize, """\
L^{16}_{i}$0 [
  T_{i} = X_{i,0}*2.0;
  L^{12}_{j} [
    Y_{i,j} = X_{i,j} - T_{i};
  ];
];
""", """\
P^{16}_{i} [
  T_{i} = X_{i,0}*2.0;
  L^{12}_{j} [
    Y_{i,j} = X_{i,j} - T_{i};
  ];
];
""")


@pytest.mark.slow
def test_parallelize_a_fused_loop():
    # The written index is not affine; enumeration proves the iterations
    # write distinct elements.
    check_action(parallelize, """\
L^{64}_{f}$0
  L^{10}_{k} [
    S_{f//8,f%8} += X_{f//8,f%8,k};
  ];
""", """\
P^{64}_{f}
  L^{10}_{k} [
    S_{f//8,f%8} += X_{f//8,f%8,k};
  ];
""")


def test_parallelize_offers_only_spatial_loops_of_a_matmul():
    assert offered("""\
L^{16}_{i}
  L^{12}_{j}
    L^{8}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
""") == {("C", "i"), ("C", "j")}


def test_parallelize_reads_of_its_own_iteration_are_independent():
    # Each iteration reads only what it wrote itself (T_{i}), or what no
    # iteration writes (X); a read of T_{i-1} would be another iteration's.
    text = """\
L^{16}_{i} [
  T_{i} = X_{i}*2.0;
  Y_{i} = T_{i} + X_{i+1};
];
"""
    assert offered(text) == {("T", "i")}
    assert offered(text.replace("T_{i} + X", "T_{i+1} + X").replace("L^{16}", "L^{15}")) == set()


def test_parallelize_disjoint_tiles_are_independent():
    # Iteration io writes T_{io*4+ii} and reads T_{io*4+3-ii}: both stay in
    # its own tile of four.
    assert ("T", "io") in offered("""\
L^{8}_{io} [
  L^{4}_{ii} [
    T_{io*4+ii} = X_{io*4+ii};
  ];
  L^{4}_{ii} [
    Y_{io*4+ii} = T_{io*4+3-ii};
  ];
];
""")


def test_parallelize_fail_loop_not_serial():
    e = check_not_applicable(parallelize, ROWS.replace("L^{16}_{i}", "U^{16}_{i}"), parallelize.LoopNotSerial,
                             {"block": "Y", "loop": "i"})
    assert "loop i" in e.short and "unrolled" in e.short


def test_parallelize_fail_loop_too_short():
    e = check_not_applicable(parallelize, ROWS.replace("L^{16}_{i}", "L^{1}_{i}"), parallelize.LoopTooShort,
                             {"block": "Y", "loop": "i"})
    assert "loop i" in e.short


def test_parallelize_fail_nested_parallel():
    e = check_not_applicable(parallelize, ROWS.replace("$0", "").replace("L^{12}_{j}", "P^{12}_{j}"),
                             parallelize.NestedParallel, {"block": "Y", "loop": "i"})
    assert "parallel loop j" in e.short and "loop i" in e.detail
    e = check_not_applicable(parallelize, ROWS.replace("L^{16}_{i}", "P^{16}_{i}").replace("L^{12}_{j}", "L^{12}_{j}$0")
                             .replace("$0\n", "\n", 1), parallelize.NestedParallel, {"block": "Y", "loop": "j"})
    assert "parallel loop i is inside loop j" in e.short


def test_parallelize_fail_inside_vector():
    e = check_not_applicable(parallelize, """\
V^{4}_{v}
  L^{4}_{i}$0 [
    Y_{v,i} = X_{v,i};
  ];
""", parallelize.InsideVector, {"block": "Y", "loop": "i"})
    assert "vectorized loop v" in e.short


def test_parallelize_fail_in_kernel():
    e = check_not_applicable(parallelize, ROWS.replace("L^{16}_{i}", "B^{16}_{bx}").replace("_{i,j}", "_{bx,j}")
                             .replace("L^{12}_{j}", "L^{12}_{j}$0").replace("$0\n", "\n", 1),
                             parallelize.InKernel, {"block": "Y", "loop": "j"})
    assert "loop j" in e.short and "bx" in e.detail


def test_parallelize_fail_reduction_axis():
    e = check_not_applicable(parallelize, """\
L^{16}_{i}
  L^{12}_{j}$0 [
    S_{i} += X_{i,j};
  ];
""", parallelize.ReductionAxis, {"block": "S", "loop": "j"})
    assert e.short == "loop j is a reduction axis of S" and "accumulate" in e.detail


def test_parallelize_fail_reduction_axis_of_a_repeated_write():
    e = check_not_applicable(parallelize, """\
L^{16}_{i}
  L^{12}_{j}$0 [
    Y_{i} = X_{i,j};
  ];
""", parallelize.ReductionAxis, {"block": "Y", "loop": "j"})
    assert "every iteration writes the same element" in e.detail


@pytest.mark.parametrize("text,block,culprit", [
    # an update of a value written before (init hoisted out of the reduction)
    ("L^{16}_{i} [\n  C_{i} = 0.0;\n];\n\nL^{16}_{i}$0\n  L^{8}_{k} [\n    C_{i} += X_{i,k};\n  ];\n", "C_1",
     "C_{i} updates"),
    # a write repeated over another loop under this one
    ("L^{16}_{i}$0\n  L^{8}_{k} [\n    Y_{i} = X_{i,k};\n  ];\n", "Y", "every iteration of loop k"),
    # a reduction guard TVM cannot match to the loops
    ("L^{16}_{i}$0\n  L^{4}_{ko}\n    L^{8}_{ki} [\n      S_{i} += X_{i,ko*8+ki} where ko*8 + ki < 30;\n    ];\n", "S",
     "guard of S_{i}"),
    # two writers of one tensor under the loop
    ("L^{16}_{i}$0 [\n  T_{i} = X_{i};\n  T_{i} = X_{i}*2.0;\n];\n", "T", "T is written twice"),
    # a read under the loop before the write there
    ("L^{16}_{i} [\n  T_{i} = X_{i};\n];\n\nL^{16}_{i}$0 [\n  Y_{i} = T_{i};\n  T_{i} = X_{i}*2.0;\n];\n", "Y",
     "T is read before it is written"),
])
def test_parallelize_fail_not_compact_dataflow(text, block, culprit):
    e = check_not_applicable(parallelize, text, parallelize.NotCompactDataflow, {"block": block, "loop": "i"})
    assert culprit in e.short, (e.short, e.detail)
    assert "loop i" in e.detail


def test_parallelize_fail_dependence_on_a_neighbour():
    e = check_not_applicable(parallelize, """\
L^{15}_{i}$0 [
  T_{i} = X_{i}*2.0;
  Y_{i} = T_{i+1} - T_{i};
];
""", parallelize.Dependence, {"block": "T", "loop": "i"})
    assert e.short == "T_{i+1} may read what another iteration of loop i writes" and "T_{i}" in e.detail


def test_parallelize_fail_dependence_on_a_shared_element():
    e = check_not_applicable(parallelize, """\
L^{16}_{i}$0 [
  Y_{i//2} = X_{i};
];
""", parallelize.Dependence, {"block": "Y", "loop": "i"})
    assert "same element of Y" in e.short


# A fused tile loop too long to enumerate (4096 x 4 x 16 points): issue 14's
# plans fuse the outer tile loops of a matmul and run them in parallel.
FUSED_TILES = """\
tmp C_local: f32[512,512] @l

L^{4096}_{f}$0 [
  L^{64}_{k}
    L^{4}_{i}
      L^{16}_{j} [
        C_local_{f//32*4+i,f%32*16+j} += X_{f//32*4+i,k}*W_{k,f%32*16+j};
      ];
  L^{4}_{a}
    L^{16}_{b} [
      C_{f//32*4+a,f%32*16+b} = C_local_{f//32*4+a,f%32*16+b};
    ];
];
"""


@pytest.mark.slow
def test_parallelize_a_fused_tile_loop_by_its_two_digits():
    check_action(parallelize, FUSED_TILES, FUSED_TILES.replace("L^{4096}_{f}$0", "P^{4096}_{f}"))


@pytest.mark.parametrize("write", [
    "Y_{f//32*4+i,f%32*8+j}",  # the column digit's tiles overlap (stride 8 < tile width 16)
    "Y_{i,f%32*16+j}",  # the row digit is dropped: tiles of different rows write the same rows
])
def test_parallelize_fail_fused_tile_loop_whose_digits_overlap(write):
    e = check_not_applicable(parallelize, f"""\
L^{{4096}}_{{f}}$0
  L^{{4}}_{{i}}
    L^{{16}}_{{j}} [
      {write} = X_{{f,i,j}}*2.0;
    ];
""", parallelize.Dependence, {"block": "Y", "loop": "f"})
    assert "same element of Y" in e.short


def test_parallelize_fail_fused_tile_loop_whose_copy_reads_another_tile():
    # The copy reads the neighbouring column tile ((f+1)%32) that another
    # iteration writes.
    text = FUSED_TILES.replace("= C_local_{f//32*4+a,f%32*16+b}", "= C_local_{f//32*4+a,(f+1)%32*16+b}")
    e = check_not_applicable(parallelize, text, parallelize.Dependence, {"block": "C_local", "loop": "f"})
    assert "may read what another iteration" in e.short

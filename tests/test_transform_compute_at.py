"""compute_at: the computation of a temporary moved under a loop of the
equations that read it (TVM's ``compute_at``)."""

from __future__ import annotations

import pytest

from leir.transforms import TransformError, apply
from leir.transforms.steps import compute_at
from leir.transforms.base import Step
from leir.transforms.steps.compute_at import (
    ConsumerOutside,
    Guarded,
    IndexNotLoops,
    IrregularRead,
    LoopEnclosesBlock,
    NotComplete,
    NotStagePipeline,
    OutputTensor,
    Race,
    ReadInGuard,
    Recomputes,
    ThreadLoop,
    VectorLoop,
)
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes

from programs import SOFTMAX
from producer_consumer import (
    HALO, SPLIT_PRODUCER, check_steps_verify, context, every_block_and_loop,
    programs, step, two_of,
)


#: One thread per element, the temporary in registers.
GPU_LOCAL = """\
tmp T: f32[4,8] @l

B^{4}_{bx}
  B^{8}_{tx}
    L^{6}_{j} [
      T_{bx,tx} += X_{bx,tx,j};
    ];

B^{4}_{bx}
  B^{8}_{tx} [
    Y_{bx,tx} = T_{bx,tx}*2.0;
  ];
"""

#: Programs the examples do not cover, for the sweeps below.
MORE = {
    "halo": HALO,
    "gpu_local": GPU_LOCAL,
    "split_producer": SPLIT_PRODUCER,
    "transpose": """\
L^{16}_{i}
  L^{8}_{j} [
    T_{j,i} = X_{i,j} - m_{i};
  ];

L^{8}_{a}
  L^{16}_{b} [
    Y_{a,b} = T_{a,b}*T_{a,b};
  ];
""",
    "write_after_read": """\
L^{8}_{i} [
  A_{i} = X_{i};
];

L^{8}_{i} [
  B_{i} = A_{i}*2.0;
];

L^{8}_{i} [
  A_{i} = A_{i} + 1.0;
];

L^{8}_{i} [
  Y_{i} = A_{i} + B_{i};
];
""",
}


# ---------------------------------------------------------------- actions


def test_compute_at_moves_the_sum_under_the_row_loop_of_its_reader():
    before = SOFTMAX.replace("    Z_{i} +=", "    $0Z_{i} +=")
    after = """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i} [
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
];
"""
    check_action(compute_at, before, after, args=step("Z", "Y", "i"))


def test_compute_at_then_the_max_joins_both_of_its_readers():
    before = """\
L^{16}_{i}
  L^{10}_{j} [
    $0M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i} [
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
];
"""
    after = """\
L^{16}_{i} [
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
];
"""
    check_action(compute_at, before, after)


def test_a_halo_keeps_tvms_loop_name_where_the_range_is_not_the_producers():
    """At row h the window needs rows h..h+2 of P: the new loop runs over an
    offset range, so it is not P's h; the column loop covers all of w."""
    after = """\
L^{8}_{h} [
  L^{3}_{ax0}
    L^{10}_{w} [
      P_{h+ax0,w} = X_{h+ax0,w}*0.5;
    ];
  L^{8}_{w}
    L^{3}_{r}
      L^{3}_{s} [
        Y_{h,w} += P_{h+r,w+s}*K_{r,s};
      ];
];
"""
    check_action(compute_at, HALO.replace("    P_{h,w}", "    $0P_{h,w}"), after, args=step("P", "Y", "h"))


def test_a_local_temporary_is_computed_by_each_thread():
    after = """\
tmp T: f32[4,8] @l

B^{4}_{bx}
  B^{8}_{tx} [
    L^{6}_{j} [
      T_{bx,tx} += X_{bx,tx,j};
    ];
    Y_{bx,tx} = T_{bx,tx}*2.0;
  ];
"""
    check_action(compute_at, GPU_LOCAL.replace("      T_{bx,tx} +=", "      $0T_{bx,tx} +="), after,
                 args=step("T", "Y", "tx"))


def test_a_split_producer_at_one_element_keeps_its_index_readable():
    """TVM inverts ``io*8+ii`` at element k as ``k//8*8 + k%8``; tidied to k."""
    after = """\
L^{32}_{k} [
  T_{k} = X_{k}*3.0;
  Y_{k} = T_{k} + 1.0;
];
"""
    check_action(compute_at, MORE["split_producer"].replace("    T_{io", "    $0T_{io"), after)


def test_candidates_are_the_loops_of_the_first_reader():
    ctx = context(SOFTMAX)
    at = SOFTMAX.index("Z_{i} +=")
    assert [c.step.args for c in compute_at.candidates(ctx, at)] == [step("Z", "Y", "i")]
    at = SOFTMAX.index("M_{i} =")
    assert compute_at.candidates(ctx, at) == []  # Z and Y read M, in two nests
    assert compute_at.candidates(ctx, SOFTMAX.index("L^{10}_{j}")) == []  # a loop header selects no producer


def test_malformed_loop_argument_is_a_bad_step():
    with pytest.raises(TransformError) as e:
        apply(context(SOFTMAX), Step("compute_at", {"block": "Z", "at": "i"}))
    assert e.value.code == "bad-step"


# ---------------------------------------------------------------- refusals


def refused(text: str, error, args: dict):
    return check_not_applicable(compute_at, text, error, args)


def test_compute_at_fail_output():
    e = refused("out T: f32[8]\nL^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];",
                OutputTensor, step("T", "Y", "i"))
    assert "T" in e.short and "output" in e.detail


def test_compute_at_fail_not_complete():
    e = refused("L^{8}_{i} L^{4}_{j} [ T_{i} = X_{i,j}; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];",
                NotComplete, step("T", "Y", "i"))
    assert "loop j" in e.detail
    e = refused("L^{8}_{i} [ T_{i} = X_{i}; ];\nL^{8}_{i} [ T_{i} = T_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i}; ];",
                NotComplete, step("T", "Y", "i"))
    assert "T_1" in e.short


def test_compute_at_fail_guarded():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0 where i < 6; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0 where i < 6; ];",
                Guarded, step("T", "Y", "i"))
    assert "where i < 6" in e.detail


def test_compute_at_fail_index_not_loops():
    e = refused("L^{8}_{i} L^{4}_{j} [ S_{i+1} += X_{i,j}; ];\nL^{8}_{i} [ Y_{i} = S_{i+1}*2.0; ];",
                IndexNotLoops, step("S", "Y", "i"))
    assert "i+1" in e.detail


def test_compute_at_fail_read_in_guard():
    """TVM does not see a read in a guard and would put T after its reader."""
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = X_{i} + 1.0 where T_{i} > 0.0; ];",
                ReadInGuard, step("T", "Y", "i"))
    assert "T_{i} > 0.0" in e.detail


def test_compute_at_fail_not_stage_pipeline():
    e = refused(MORE["write_after_read"], NotStagePipeline, step("B", "Y", "i"))
    assert "A" in e.short and "write-after-read" in e.detail


def test_compute_at_fail_loop_encloses_block():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; Y_{i} = T_{i} + 1.0; ];", LoopEnclosesBlock, step("T", "Y", "i"))
    assert "loop i" in e.short


def test_compute_at_fail_consumer_outside():
    e = refused(SOFTMAX, ConsumerOutside, step("M", "Z", "i"))
    assert "Y" in e.short and "M" in e.short


def test_compute_at_fail_vector_loop():
    text = "P^{16}_{i} L^{8}_{j} [ T_{i,j} = X_{i,j}*2.0; ];\nP^{16}_{i} V^{8}_{j} [ Y_{i,j} = T_{i,j} + 1.0; ];"
    e = refused(text, VectorLoop, step("T", "Y", "j"))
    assert "loop j" in e.short


def test_compute_at_fail_thread_loop():
    e = refused(GPU_LOCAL, ThreadLoop, step("T", "Y", "bx"))
    assert "tx" in e.detail
    e = refused(GPU_LOCAL.replace("tmp T: f32[4,8] @l\n\n", ""), ThreadLoop, step("T", "Y", "tx"))
    assert "global" in e.detail and "T" in e.short


def test_compute_at_fail_recomputes():
    text = "L^{64}_{i} L^{32}_{j} [ S_{i} += X_{i,j}; ];\nL^{64}_{i} L^{32}_{j} [ Y_{i,j} = X_{i,j}/S_{i}; ];"
    e = refused(text, Recomputes, step("S", "Y", "j"))
    assert "loop j" in e.detail and "S_{i}" in e.detail


def test_compute_at_fail_irregular_read():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{16}_{i} [ Y_{i} = T_{i//2} + 1.0; ];",
                IrregularRead, step("T", "Y", "i"))
    assert "T_{i//2}" in e.detail
    text = "L^{4}_{io} L^{8}_{ii} [ T_{io*8+ii} = X_{io*8+ii}*2.0; ];\nL^{8}_{a} L^{4}_{b} [ Y_{a*4+b} = T_{a*4+b}; ];"
    e = refused(text, IrregularRead, step("T", "Y", "a"))
    assert "loop a" in e.detail and "T_{io*8+ii}" in e.detail


def test_compute_at_fail_race():
    e = refused(HALO.replace("L^{8}_{h}", "P^{8}_{h}"), Race, step("P", "Y", "h"))
    assert "loop h" in e.short


# ------------------------------------------------------------ all programs


@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_exactly_when_check_passes(name, text):
    ctx = context(text)
    check_offered_exactly_when_check_passes(compute_at, ctx, every_block_and_loop(ctx))


@pytest.mark.slow
@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_steps_verify(name, text):
    """Every offered step, at most two per program (chosen with a fixed
    seed), builds, runs and computes what the program computed. Applying
    all of them on the examples and chains of two was done once."""
    ctx = context(text)
    check_steps_verify(ctx, two_of(compute_at.candidates(ctx, None), name))


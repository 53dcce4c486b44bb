"""reverse_compute_at: an equation moved under a loop of the equations that
compute what it reads (TVM's ``reverse_compute_at``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leir.transforms.steps import reverse_compute_at
from leir.transforms.steps.reverse_compute_at import (
    Guarded,
    IndexNotLoops,
    IrregularWrite,
    LoopEnclosesBlock,
    NoProducer,
    NotComplete,
    NotStagePipeline,
    ProducerOutside,
    Race,
    Recomputes,
    ThreadLoop,
    VectorLoop,
)
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes
from producer_consumer import (
    SPLIT_PRODUCER, TRANSPOSED_READ, check_steps_verify, context,
    every_block_and_loop, programs, step, two_of,
)

GEMM_RELU = """\
L^{16}_{i}
  L^{12}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];

L^{16}_{i}
  L^{12}_{j} [
    Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
  ];
"""

#: One thread per element of a matrix product, the epilogue in another kernel.
GPU_GEMM_RELU = """\
B^{2}_{by}
  B^{2}_{bx}
    B^{8}_{ty}
      B^{8}_{tx}
        L^{16}_{k} [
          C_{by*8+ty,bx*8+tx} += X_{by*8+ty,k}*W_{k,bx*8+tx};
        ];

B^{16}_{bx}
  B^{16}_{tx} [
    Y_{bx,tx} = max(C_{bx,tx}, 0.0);
  ];
"""

MORE = {
    "gemm_relu": GEMM_RELU,
    "gpu_gemm_relu": GPU_GEMM_RELU,
    "row_sum_of_products": """\
L^{16}_{i}
  L^{8}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];

L^{16}_{i}
  L^{8}_{j} [
    S_{i} += T_{i,j};
  ];
""",
    "split_producer": SPLIT_PRODUCER,
    "transpose": TRANSPOSED_READ,
}


# ---------------------------------------------------------------- actions


def test_the_epilogue_moves_under_the_row_loop_with_its_loop_names():
    after = """\
L^{16}_{i} [
  L^{12}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
  L^{12}_{j} [
    Y_{i,j} = max(C_{i,j} + b_{j}, 0.0);
  ];
];
"""
    check_action(reverse_compute_at, GEMM_RELU.replace("    Y_{i,j} =", "    $0Y_{i,j} ="), after,
                 args=step("Y", "C", "i"))


def test_a_reduction_consumer_accumulates_as_its_input_is_produced():
    after = """\
L^{16}_{i}
  L^{8}_{j} [
    T_{i,j} = X_{i,j}*2.0;
    S_{i} += T_{i,j};
  ];
"""
    check_action(reverse_compute_at, MORE["row_sum_of_products"].replace("    S_{i}", "    $0S_{i}"), after,
                 args=step("S", "T", "j"))


def test_in_a_kernel_each_thread_applies_the_epilogue_to_its_own_element():
    after = """\
B^{2}_{by}
  B^{2}_{bx}
    B^{8}_{ty}
      B^{8}_{tx} [
        L^{16}_{k} [
          C_{by*8+ty,bx*8+tx} += X_{by*8+ty,k}*W_{k,bx*8+tx};
        ];
        Y_{by*8+ty,bx*8+tx} = max(C_{by*8+ty,bx*8+tx}, 0.0);
      ];
"""
    check_action(reverse_compute_at, GPU_GEMM_RELU.replace("    Y_{bx,tx}", "    $0Y_{bx,tx}"), after)


def test_a_part_of_a_range_keeps_tvms_loop_name():
    after = """\
L^{4}_{io} [
  L^{8}_{ii} [
    T_{io*8+ii} = X_{io*8+ii}*3.0;
  ];
  L^{8}_{ax0} [
    Y_{io*8+ax0} = T_{io*8+ax0} + 1.0;
  ];
];
"""
    check_action(reverse_compute_at, MORE["split_producer"].replace("  Y_{k}", "  $0Y_{k}"), after,
                 args=step("Y", "T", "io"))


def test_candidates_are_the_loops_of_the_last_producer():
    ctx = context(GEMM_RELU)
    at = GEMM_RELU.index("Y_{i,j} =")
    assert [c.step.args for c in reverse_compute_at.candidates(ctx, at)] == [step("Y", "C", "i"), step("Y", "C", "j")]


# ---------------------------------------------------------------- refusals


def refused(text: str, error, args: dict):
    return check_not_applicable(reverse_compute_at, text, error, args)


def test_reverse_compute_at_fail_not_complete():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} L^{4}_{j} [ Y_{i} = T_{i} + W_{i,j}; ];",
                NotComplete, step("Y", "T", "i"))
    assert "loop j" in e.detail


def test_reverse_compute_at_fail_guarded():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0 where i < 6; ];",
                Guarded, step("Y", "T", "i"))
    assert "where i < 6" in e.detail


def test_reverse_compute_at_fail_no_producer():
    text = "L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = X_{i} + 1.0; ];\nL^{8}_{i} [ Z_{i} = T_{i} + Y_{i}; ];"
    e = refused(text, NoProducer, step("Y", "T", "i"))
    assert "Y" in e.short


def test_reverse_compute_at_fail_index_not_loops():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + T_{7-i}; ];",
                IndexNotLoops, step("Y", "T", "i"))
    assert "T_{7-i}" in e.detail


def test_reverse_compute_at_fail_not_stage_pipeline():
    text = "L^{8}_{i} [ A_{i} = X_{i}; ];\nL^{8}_{i} [ B_{i} = A_{i}*2.0; ];\nL^{8}_{i} [ A_{i} = A_{i} + 1.0; ];\n" \
           "L^{8}_{i} [ Y_{i} = A_{i} + B_{i}; ];"
    e = refused(text, NotStagePipeline, step("Y", "A_1", "i"))
    assert "write-after-read" in e.detail


def test_reverse_compute_at_fail_loop_encloses_block():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; Y_{i} = T_{i} + 1.0; ];", LoopEnclosesBlock, step("Y", "T", "i"))
    assert "loop i" in e.short


def test_reverse_compute_at_fail_producer_outside():
    text = (Path(__file__).resolve().parent.parent / "examples" / "layernorm.leir").read_text()
    e = refused(text, ProducerOutside, step("Y", "var", "i"))
    assert "mean" in e.short


def test_reverse_compute_at_fail_vector_loop():
    text = "P^{16}_{i} V^{8}_{j} [ T_{i,j} = X_{i,j}*2.0; ];\nP^{16}_{i} L^{8}_{j} [ Y_{i,j} = T_{i,j} + 1.0; ];"
    e = refused(text, VectorLoop, step("Y", "T", "j"))
    assert "loop j" in e.short


def test_reverse_compute_at_fail_thread_loop():
    e = refused(GPU_GEMM_RELU, ThreadLoop, step("Y", "C", "bx"))
    assert "ty" in e.detail and "tx" in e.detail


def test_reverse_compute_at_fail_recomputes():
    text = "L^{64}_{i} L^{32}_{j} [ S_{i} += X_{i,j}; ];\nL^{64}_{i} L^{32}_{j} [ Y_{i,j} = X_{i,j}/S_{i}; ];"
    e = refused(text, Recomputes, step("Y", "S", "j"))
    assert "loop j" in e.detail and "reduction loop" in e.detail


def test_reverse_compute_at_fail_irregular_write():
    text = "L^{4}_{io} L^{8}_{ii} [ T_{io*8+ii} = X_{io*8+ii}*2.0; ];\nL^{8}_{a} L^{4}_{b} [ Y_{a*4+b} = T_{a*4+b}; ];"
    e = refused(text, IrregularWrite, step("Y", "T", "io"))
    assert "T_{a*4+b}" in e.detail and "loop io" in e.detail


def test_reverse_compute_at_fail_race():
    text = MORE["row_sum_of_products"].replace("L^{16}_{i}\n  L^{8}_{j} [\n    T", "L^{16}_{i}\n  P^{8}_{j} [\n    T")
    e = refused(text, Race, step("S", "T", "j"))
    assert "loop j" in e.short and "S" in e.short


# ------------------------------------------------------------ all programs


@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_exactly_when_check_passes(name, text):
    ctx = context(text)
    check_offered_exactly_when_check_passes(reverse_compute_at, ctx, every_block_and_loop(ctx))


@pytest.mark.slow
@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_steps_verify(name, text):
    """At most two offered steps per program (fixed seed) build, run and
    compute what the program computed; all of them were applied once."""
    ctx = context(text)
    check_steps_verify(ctx, two_of(reverse_compute_at.candidates(ctx, None), name))


def test_a_reduction_tvm_would_run_over_fewer_iterations_is_refused():
    # TVM 0.27's reverse_compute_at gives S's k_1 axis (31 iterations, under a
    # producer written at k_0*16 + k_1) a loop of 2: S would sum 4 of its 62
    # terms. Found by `leir dataset build`, whose verification failed it.
    from leir.parser import parse
    from leir.transforms import Step, TvmRefused, apply

    program = parse("""
    L^{32}_{i} L^{4}_{k_0} L^{16}_{k_1} [ R_{i,k_0*16+k_1} = exp(X_{i,k_0*16+k_1}) where k_0*16 + k_1 < 62; ];
    L^{2}_{i_0} L^{2}_{k_0} L^{16}_{i_1} L^{31}_{k_1} [ S_{i_0*16+i_1} += R_{i_0*16+i_1,k_0*31+k_1}; ];
    """).program
    with pytest.raises(TvmRefused, match="left the reduction of S with 4 of its 62 iterations"):
        apply(program, Step("reverse_compute_at", {"block": "S", "at": {"block": "R", "loop": "i"}}))
    # The same move of a reduction whose axis TVM gets right still applies.
    aligned = parse("""
    L^{32}_{i} L^{64}_{k} [ R_{i,k} = exp(X_{i,k}); ];
    L^{32}_{i} L^{64}_{k} [ S_{i} += R_{i,k}; ];
    """).program
    apply(aligned, Step("reverse_compute_at", {"block": "S", "at": {"block": "R", "loop": "i"}}))

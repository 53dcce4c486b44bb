"""reverse_compute_inline: an elementwise equation folded into the one that
computes what it reads (TVM's ``reverse_compute_inline``)."""

from __future__ import annotations

import pytest

from leir.transforms.steps import reverse_compute_inline
from leir.transforms.steps.reverse_compute_inline import (
    Guarded,
    IndexNotLoops,
    NoProducer,
    NotComplete,
    NotCovered,
    NotStagePipeline,
    OtherReaders,
    OutputTensor,
    ProducerGuarded,
    ProducerNotComplete,
    ReadsSeveral,
    Reduction,
)
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes
from producer_consumer import (
    F16, SPLIT_PRODUCER, TRANSPOSED_READ, check_steps_verify, context,
    every_block, programs,
)

MORE = {
    "scale_shift_relu": """\
L^{32}_{i}
  L^{24}_{j} [
    T_{i,j} = X_{i,j}*s_{j} + b_{j};
  ];

L^{32}_{i}
  L^{24}_{j} [
    Y_{i,j} = max(T_{i,j}, 0.0);
  ];
""",
    "transpose": TRANSPOSED_READ,
    "wider_producer": """\
L^{10}_{i} [
  T_{i} = X_{i}*2.0;
];

L^{8}_{i} [
  Y_{i} = T_{i} + 1.0;
];
""",
    "split_producer": SPLIT_PRODUCER,
    "f16": F16,
}


def test_a_transposed_read_writes_the_transpose_from_the_producers_loops():
    after = """\
L^{16}_{i}
  L^{8}_{j} [
    Y_{j,i} = X_{i,j}*2.0 + 1.0;
  ];
"""
    check_action(reverse_compute_inline, MORE["transpose"].replace("    Y_{a,b}", "    $0Y_{a,b}"), after)


def test_a_producer_wider_than_the_consumer_is_guarded_to_its_range():
    """The guard would shrink X's inferred shape: its declaration keeps it."""
    after = """\
in  X: f32[10]

L^{10}_{i} [
  Y_{i} = X_{i}*2.0 + 1.0 where i < 8;
];
"""
    check_action(reverse_compute_inline, MORE["wider_producer"].replace("  Y_{i}", "  $0Y_{i}"), after)


def test_a_split_producer_writes_the_consumer_through_its_index():
    after = """\
L^{4}_{io}
  L^{8}_{ii} [
    Y_{io*8+ii} = X_{io*8+ii}*3.0 + 1.0;
  ];
"""
    check_action(reverse_compute_inline, MORE["split_producer"].replace("  Y_{k}", "  $0Y_{k}"), after)


# ---------------------------------------------------------------- refusals


def refused(text: str, error, block: str = "Y"):
    return check_not_applicable(reverse_compute_inline, text, error, {"block": block})


def test_reverse_compute_inline_fail_reduction():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} L^{4}_{j} [ S_{i} += T_{i}*W_{i,j}; ];", Reduction, "S")
    assert "loop j" in e.detail


def test_reverse_compute_inline_fail_not_complete():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} L^{4}_{j} [ Y_{i} = T_{i} + W_{i,j}; ];", NotComplete)
    assert "loop j" in e.detail


def test_reverse_compute_inline_fail_guarded():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0 where i < 6; ];", Guarded)
    assert "where i < 6" in e.detail


def test_reverse_compute_inline_fail_no_producer():
    e = refused("L^{8}_{i} [ Y_{i} = X_{i} + 1.0; ];", NoProducer)
    assert "Y" in e.short


def test_reverse_compute_inline_fail_reads_several():
    text = "L^{8}_{i} [ A_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ B_{i} = X_{i}*3.0; ];\nL^{8}_{i} [ Y_{i} = A_{i} + B_{i}; ];"
    e = refused(text, ReadsSeveral)
    assert "A" in e.short and "B" in e.short


def test_reverse_compute_inline_fail_index_not_loops():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{7-i} + 1.0; ];", IndexNotLoops)
    assert "T_{7-i}" in e.detail


def test_reverse_compute_inline_fail_output():
    e = refused("out T: f32[8]\nL^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];", OutputTensor)
    assert "T" in e.short


def test_reverse_compute_inline_fail_other_readers():
    """TVM would inline Y and leave Z reading a tensor nothing writes."""
    text = "L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];\nL^{8}_{i} [ Z_{i} = T_{i} + 2.0; ];"
    e = refused(text, OtherReaders)
    assert "Z" in e.short and "T" in e.short


def test_reverse_compute_inline_fail_producer_not_complete():
    e = refused("L^{8}_{i} L^{4}_{j} [ C_{i} += X_{i,j}; ];\nL^{8}_{i} [ Y_{i} = max(C_{i}, 0.0); ];",
                ProducerNotComplete)
    assert "C" in e.short and "reverse_compute_at" in e.detail
    e = refused("L^{8}_{i} L^{4}_{j} [ T_{i} = X_{i,j}; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];", ProducerNotComplete)
    assert "loop j" in e.detail


def test_reverse_compute_inline_fail_producer_guarded():
    e = refused("L^{8}_{i} [ T_{i} = X_{i}*2.0 where i < 8; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];", ProducerGuarded)
    assert "T" in e.short


def test_reverse_compute_inline_fail_not_covered():
    e = refused("L^{6}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];", NotCovered)
    assert "0..5" in e.detail and "loop i" in e.detail


def test_reverse_compute_inline_fail_not_stage_pipeline():
    text = "L^{8}_{i} [ T_{i} = X_{i}*2.0; ];\nL^{8}_{i} [ Y_{i} = T_{i} + 1.0; ];\nL^{8}_{i} [ A_{i} = X_{i}; ];\n" \
           "L^{8}_{i} [ B_{i} = A_{i}*2.0; ];\nL^{8}_{i} [ A_{i} = A_{i} + 1.0; ];\nL^{8}_{i} [ Z_{i} = A_{i} + B_{i} + Y_{i}; ];"
    e = refused(text, NotStagePipeline)
    assert "A" in e.short


# ------------------------------------------------------------ all programs


@pytest.mark.parametrize("name,text", programs(MORE), ids=lambda x: x if "\n" not in x else "")
def test_offered_exactly_when_check_passes(name, text):
    ctx = context(text)
    check_offered_exactly_when_check_passes(reverse_compute_inline, ctx, every_block(ctx))


@pytest.mark.slow
@pytest.mark.parametrize("name,text", sorted(MORE.items()), ids=lambda x: x if "\n" not in x else "")
def test_offered_steps_verify(name, text):
    """Every offered step builds, runs and computes what the program
    computed (the examples offer none: their temporaries are reductions)."""
    ctx = context(text)
    offered = reverse_compute_inline.candidates(ctx, None)
    assert offered
    check_steps_verify(ctx, offered)

"""Shape variants for the dataset (issue 7): extents change consistently,
tied extents stay, sizes include non-powers of two, and a variant is used
only after it checks, runs and matches its NumPy reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from leir import ast as A
from leir.tools.dataset.variants import (
    MIN_SCALED,
    VariantError,
    check_variant,
    draw_sizes,
    free_extents,
    frozen_extents,
    load_references,
    rescale,
    strip_comments,
    workload_variants,
)
from leir.bridge.document import load_leir, read_text
from leir.semantics import analyze

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _analysis(name: str):
    return load_leir(read_text(EXAMPLES / name)).analysis


def _extents(analysis) -> list[int]:
    return [n.extent for n in A.walk(analysis.program) if isinstance(n, A.Loop)]


def test_split_and_vectorized_extents_are_frozen():
    # C_{i,jo*8+ji}: jo and ji are tied to each other and to C's shape.
    a = _analysis("matmul_cpu.leir")
    assert {12, 8} <= frozen_extents(a)
    assert free_extents(a) == [128, 256]


def test_small_extents_are_kept():
    a = _analysis("conv2d.leir")  # 3x3 window, batch 2
    assert {2, 3} <= frozen_extents(a)
    assert all(v >= MIN_SCALED for v in free_extents(a))


def test_rescale_changes_every_occurrence_and_reinfers_shapes():
    a = strip_comments(_analysis("softmax.leir"))
    b = analyze(rescale(a.program, {100: 75, 128: 112}))
    assert b.ok
    assert sorted(set(_extents(b))) == [75, 112]
    assert b.tensors["X"].shape == (112, 75) and b.tensors["M"].shape == (112,)


def test_rescale_changes_declared_shapes_too():
    a = _analysis("matmul_f16.leir")
    b = analyze(rescale(a.program, {128: 112, 256: 352}))
    assert b.ok
    assert b.tensors["X"].shape == (112, 352) and b.tensors["X"].dtype == "f16"


def test_draws_are_distinct_reproducible_and_include_non_powers_of_two():
    a = strip_comments(_analysis("matmul.leir"))
    sizes = draw_sizes(a, 6, seed=0, workload="matmul.leir")
    assert len(sizes) == 6
    assert len({tuple(sorted(s.items())) for s in sizes}) == 6
    assert draw_sizes(a, 6, seed=0, workload="matmul.leir") == sizes
    assert draw_sizes(a, 6, seed=1, workload="matmul.leir") != sizes
    new = {v for s in sizes for v in s.values()}
    assert any(v & (v - 1) for v in new), new  # some size is not a power of two


def test_strip_comments_drops_the_header():
    a = _analysis("matmul.leir")
    from leir.printer import print_program

    assert "#" in read_text(EXAMPLES / "matmul.leir")
    assert "#" not in print_program(strip_comments(a).program)


@pytest.mark.slow
def test_variants_are_checked_against_the_reference():
    refs = load_references(EXAMPLES)
    found = workload_variants(EXAMPLES / "matmul.leir", 2, 0, refs)
    assert [v.name for v in found] == ["orig", "v1", "v2"]
    for v in found[1:]:
        assert v.sizes and v.analysis.ok
        check_variant(v.analysis, "matmul", refs)  # does not raise


@pytest.mark.slow
def test_a_variant_whose_constant_is_tied_to_a_size_is_dropped():
    # layernorm divides by 96 (the row length) literally: at another row
    # length the program no longer computes a layer norm, and the reference says so.
    refs = load_references(EXAMPLES)
    a = strip_comments(_analysis("layernorm.leir"))
    b = analyze(rescale(a.program, {96: 120}))
    with pytest.raises(VariantError, match="differs from the reference layernorm|fails at these shapes"):
        check_variant(b, "layernorm", refs)
    dropped = []
    found = workload_variants(EXAMPLES / "layernorm.leir", 2, 0, refs, log=dropped.append)
    assert [v.name for v in found] == ["orig"] and dropped

"""leir.explain: loop, access and machine facts, and the reasoning for one
step, on hand-made before/after pairs (written out, so no TVM is needed)
with an explicit machine, so nothing depends on this computer's caches."""

from __future__ import annotations

from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.explain import (
    Machine,
    access_facts,
    describe_access,
    describe_loop,
    describe_step,
    loop_facts,
    step_reasoning,
)
from leir.semantics import Analysis
from leir.transforms import Step

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: A machine with round, made-up figures: every test passes the machine it
#: reasons about.
MACHINE = Machine(l1d=32 * 1024, l2=1024 * 1024, l3=32 * 1024 * 1024, vector_bytes=32, vector_isa="AVX2", cores=8)


def analysis(text: str) -> Analysis:
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return doc.analysis


MATMUL = """\
L^{128}_{i}
  L^{96}_{j}
    L^{256}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""

MATMUL_TILED = """\
L^{16}_{i_0}
  L^{12}_{j_0}
    L^{8}_{i_1}
      L^{8}_{j_1}
        L^{256}_{k} [
          C_{i_0*8+i_1,j_0*8+j_1} += X_{i_0*8+i_1,k}*W_{k,j_0*8+j_1};
        ];
"""

COLUMNS = """\
L^{64}_{j}
  L^{128}_{i} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
"""

ROWS = """\
L^{128}_{i}
  L^{64}_{j} [
    Y_{i,j} = X_{i,j}*2.0;
  ];
"""


# ------------------------------------------------------------------ loop facts


def test_matmul_loop_facts_k_is_the_reduction_with_its_strides():
    a = analysis(MATMUL)
    k = loop_facts(a, block="C", var="k")
    assert (k.kind, k.extent, k.trip_count) == ("L", 256, 128 * 96 * 256)
    assert k.reduction_for == ["C"] and k.spatial_for == []
    strides = {s.text: s.stride for s in k.strides}
    assert strides == {"C_{i,j}": 0, "X_{i,k}": 1, "W_{k,j}": 96}
    assert [v for v, _, _ in k.outer] == ["i", "j"]
    ids = {i for i, _, _ in k.offered}
    assert {"split", "rfactor"} <= ids and "parallelize" not in ids
    refused = {r.transform: r.short for r in k.refused}
    assert "reduction" in refused["parallelize"]
    assert "256 lanes" in refused["vectorize"]


def test_matmul_loop_facts_i_and_j_are_spatial_with_row_major_strides():
    a = analysis(MATMUL)
    i = loop_facts(a, block="C", var="i")
    j = loop_facts(a, block="C", var="j")
    assert i.spatial_for == j.spatial_for == ["C"] and not i.reduction_for
    assert {s.text: s.stride for s in i.strides} == {"C_{i,j}": 96, "X_{i,k}": 256, "W_{k,j}": 0}
    assert {s.text: s.stride for s in j.strides} == {"C_{i,j}": 1, "X_{i,k}": 0, "W_{k,j}": 1}
    assert i.trip_count == 128 and j.trip_count == 128 * 96
    # j and the loop inside it: a reorder is offered, a fusion is not (k is a reduction axis).
    assert ("reorder", "Swap loops j and k", {"block": "C", "loops": ["j", "k"]}) in j.offered
    fuse = next(r for r in j.refused if r.transform == "fuse")
    assert fuse.with_loop == "k" and fuse.short == "j indexes C and k does not"
    # One iteration of i: a row of X (1 KiB), all of W (96 KiB), a row of C (384 B).
    assert i.iteration_working_set == {"C": 384, "X": 1024, "W": 96 * 1024}
    # One iteration of k: one element of each, each in its own 64-byte line.
    k = loop_facts(a, block="C", var="k", legality=False)
    assert k.iteration_working_set == {"C": 64, "X": 64, "W": 64}
    assert loop_facts(a, block="C", var="k", legality=False, line_bytes=128).iteration_working_set["W"] == 128


def test_loop_facts_by_offset_finds_the_header_under_the_cursor():
    a = analysis(MATMUL)
    at = MATMUL.index("L^{96}")
    assert loop_facts(a, at=at + 2).var == "j"
    assert loop_facts(a, at=MATMUL.index("X_{")) is None


def test_stride_through_a_fused_index_is_evaluated():
    a = analysis("""\
L^{12288}_{f} [
  Y_{f//96,f%96} = C_{f//96,f%96} + b_{f%96};
];
""")
    f = loop_facts(a, block="Y", var="f", legality=False)
    strides = {s.text: s.stride for s in f.strides}
    assert strides["Y_{f//96,f%96}"] == 1 and strides["C_{f//96,f%96}"] == 1
    assert strides["b_{f%96}"] is None  # wraps every 96 iterations: not one constant


# ------------------------------------------------------------------ access facts


def test_access_facts_bytes_reuse_and_strides():
    a = analysis(MATMUL)
    w = access_facts(a, at=MATMUL.index("W_{") + 1)
    assert (w.tensor, w.text, w.block, w.written) == ("W", "W_{k,j}", "C", False)
    assert (w.shape, w.dtype, w.scope, w.role) == ((256, 96), "f32", "g", "in")
    assert w.bytes == 256 * 96 * 4
    assert w.reuse == 128 and w.reuse_loops == ["i"]
    assert [(l.var, l.stride, l.indexes) for l in w.loops] == [("i", 0, False), ("j", 1, True), ("k", 96, True)]
    # A full pass of k touches one column of W: 256 elements.
    assert (w.loops[2].footprint, w.loops[2].footprint_bytes) == (256, 1024)
    # ...in 256 cache lines of 64 bytes: its elements are 96 floats apart.
    assert w.loops[2].footprint_line_bytes == 256 * 64
    assert w.reuse_loop == "i" and w.reuse_distance_bytes == 384 + 1024 + 96 * 1024

    c = access_facts(a, block="C", tensor="C")
    assert c.written and c.reuse == 256 and c.reuse_loops == ["k"] and c.reuse_loop == "k"


def test_access_facts_for_an_f16_tensor_count_two_bytes():
    a = analysis("in X: f16[64,32]\n\nL^{64}_{i}\n  L^{32}_{j} [\n    Y_{i,j} = f32(X_{i,j});\n  ];\n")
    x = access_facts(a, block="Y", tensor="X")
    assert (x.dtype, x.element_bytes, x.bytes) == ("f16", 2.0, 64 * 32 * 2)
    assert x.reuse == 1 and x.reuse_loop is None


# ------------------------------------------------------------------ machine


def test_machine_levels_and_assumed_values_are_named():
    m = Machine(l1d=48 * 1024, l2=2 * 1024 * 1024, l3=0, cores=4, assumed=("l3",))
    assert m.level_of(40 * 1024) == ("L1d", 48 * 1024)
    assert m.level_of(1024 * 1024) == ("L2", 2 * 1024 * 1024)
    assert m.level_of(3 * 1024 * 1024) is None
    assert "assumed" in m.cache_text("L3") and "assumed" not in m.cache_text("L1d")


def test_machine_detect_reads_sizes_or_says_they_are_assumed():
    m = Machine.detect()
    assert m.cores >= 1 and m.vector_bytes in (16, 32, 64)
    assert set(m.assumed) <= {"l1d", "l2", "l3", "vector_bytes"}
    cache = Path("/sys/devices/system/cpu/cpu0/cache/index0/size")
    if cache.exists() and "l1d" not in m.assumed:
        assert m.l1d > 0


# ------------------------------------------------------------------ reasoning


def test_reorder_making_an_access_contiguous_names_the_loop_access_and_strides():
    r = step_reasoning(analysis(COLUMNS), analysis(ROWS), Step("reorder", {"block": "Y", "loops": ["j", "i"]}),
                       machine=MACHINE)
    assert "innermost loop of Y becomes j" in r.text
    assert "X_{i,j} (stride 64 before)" in r.text and "contiguous" in r.text
    changes = {c["access"]: (c["stride_before"], c["stride_after"]) for c in r.facts["stride_changes"]}
    assert changes == {"Y_{i,j}": (64, 1), "X_{i,j}": (64, 1)}


def test_reorder_that_breaks_contiguity_says_so_and_why_it_was_slower():
    r = step_reasoning(analysis(ROWS), analysis(COLUMNS), Step("reorder", {"block": "Y", "loops": ["i", "j"]}),
                       measured=(0.2, 0.5), machine=MACHINE)
    assert "no longer contiguous along i" in r.text
    assert "2.50x slower" in r.text
    assert any("lost unit stride" in risk for risk in r.facts["risks"])


def test_tile_brings_the_reuse_of_w_into_l1():
    step = Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]})
    r = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED), step, measured=(10.0, 4.0), machine=MACHINE)
    assert "W is reused across loop i_1" in r.text and "fits in the 32 KiB L1d" in r.text
    assert "only fit in the 1 MiB L2" in r.text
    w = next(c for c in r.facts["reuse_changes"] if c["tensor"] == "W")
    assert w["reuse_loop_before"] == "i" and w["reuse_loop_after"] == "i_1"
    assert w["distance_after"] <= MACHINE.l1d < w["distance_before"]
    assert r.sentences[-1] == "Latency measured on llvm: 10 ms → 4 ms, 2.50x faster."


def test_tile_on_a_machine_with_a_smaller_l1_names_the_level_that_holds_it():
    tiny = Machine(l1d=4 * 1024, l2=64 * 1024, l3=1024 * 1024, cores=2)
    step = Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]})
    r = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED), step, machine=tiny)
    assert "fits in the 64 KiB L2" in r.text and "L1d" not in r.text.split("W is reused")[1].split(".")[0]


def test_parallelizing_the_outer_loop_counts_iterations_against_cores():
    par = ROWS.replace("L^{128}_{i}", "P^{128}_{i}")
    r = step_reasoning(analysis(ROWS), analysis(par), Step("parallelize", {"block": "Y", "loop": "i"}),
                       machine=MACHINE)
    assert "its 128 iterations over 8 cores (16 per core at most)" in r.text
    assert "64 inner iterations (j)" in r.text
    assert (r.facts["parallel_iterations"], r.facts["cores"]) == (128, 8)
    many = Machine(cores=256)
    r = step_reasoning(analysis(ROWS), analysis(par), Step("parallelize", {"block": "Y", "loop": "i"}), machine=many)
    assert "Only 128 iterations for 256 cores" in r.text


def test_parallelizing_a_short_inner_loop_that_measured_slower_gives_the_causes():
    before = "L^{1000}_{i}\n  L^{4}_{j} [\n    Y_{i,j} = X_{i,j} + 1.0;\n  ];\n"
    after = before.replace("L^{4}_{j}", "P^{4}_{j}")
    r = step_reasoning(analysis(before), analysis(after), Step("parallelize", {"block": "Y", "loop": "j"}),
                       measured=(0.01, 0.9), machine=MACHINE)
    assert "Only 4 iterations for 8 cores" in r.text
    assert "the parallel region starts 1000 times" in r.text
    assert "90.00x slower" in r.text
    last = r.sentences[-1]
    assert last.startswith("Facts the analysis finds") and "only 4 iterations" in last and "1000 times" in last


@pytest.mark.parametrize("measured", [(10.0, 4.0), (4.0, 10.0), (1.0, 1.01)])
def test_unmeasured_cuts_a_stored_reasoning_back_to_the_reasoning_before_measuring(measured):
    """The faster, slower (with its costs) and noise endings all go; what is
    left is the text of the same step's reasoning written unmeasured."""
    from leir.explain import unmeasured

    step = Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]})
    before = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED), step, machine=MACHINE)
    after = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED), step, measured=measured, machine=MACHINE)
    assert after.text != before.text and "Latency measured" in after.text
    assert unmeasured(after.text) == before.text
    assert unmeasured(before.text) == before.text
    assert unmeasured("Latency measured on llvm: 1 ms → 2 ms, 2.00x slower.") == ""


def test_vectorize_compares_the_vector_with_the_machines():
    before = "L^{64}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = X_{i,j}*2.0 + B_{i};\n  ];\n"
    after = before.replace("L^{8}_{j}", "V^{8}_{j}")
    step = Step("vectorize", {"block": "Y", "loop": "j"})
    r = step_reasoning(analysis(before), analysis(after), step, machine=MACHINE)
    assert "8 lanes of f32 = 32 bytes per vector operation, exactly the machine's 32-byte vectors (AVX2)" in r.text
    assert "Y_{i,j} and X_{i,j} are contiguous and B_{i} is the same element in every lane" in r.text
    wide = Machine(vector_bytes=64, vector_isa="AVX-512")
    r = step_reasoning(analysis(before), analysis(after), step, machine=wide)
    assert "less than the machine's 64-byte vectors (AVX-512)" in r.text
    assert r.facts["lanes"] == 8 and r.facts["vector_bytes_used"] == 32


def test_vectorize_a_strided_access_says_it_is_not_contiguous():
    before = "L^{64}_{i}\n  L^{4}_{j} [\n    Y_{i,j} = X_{j,i};\n  ];\n"
    after = before.replace("L^{4}_{j}", "V^{4}_{j}")
    r = step_reasoning(analysis(before), analysis(after), Step("vectorize", {"block": "Y", "loop": "j"}),
                       measured=(1.0, 1.2), machine=MACHINE)
    assert "X_{j,i} (stride 64) is not contiguous along j" in r.text
    assert "16 bytes" in r.text and "1.20x slower" in r.text


def test_compute_inline_names_the_removed_temporary():
    before = """\
L^{64}_{i}
  L^{32}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];

L^{64}_{i}
  L^{32}_{j} [
    Y_{i,j} = T_{i,j} + 1.0;
  ];
"""
    after = """\
L^{64}_{i}
  L^{32}_{j} [
    Y_{i,j} = X_{i,j}*2.0 + 1.0;
  ];
"""
    r = step_reasoning(analysis(before), analysis(after), Step("compute_inline", {"block": "T"}), machine=MACHINE)
    assert "Inlines T" in r.text
    assert "Removes the temporary T (f32[64,32], 8 KiB)" in r.text
    assert r.facts["temporaries_removed"] == {"T": 8192}
    assert r.facts["operations_before"] == r.facts["operations_after"] == 2 * 64 * 32


def test_compute_at_says_where_the_temporary_is_read_back():
    before = """\
L^{64}_{i}
  L^{32}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];

L^{64}_{i}
  L^{32}_{j} [
    Y_{i,j} = T_{i,j} + 1.0;
  ];
"""
    after = """\
L^{64}_{i} [
  L^{32}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];
  L^{32}_{j} [
    Y_{i,j} = T_{i,j} + 1.0;
  ];
];
"""
    step = Step("compute_at", {"block": "T", "at": {"block": "Y", "loop": "i"}})
    r = step_reasoning(analysis(before), analysis(after), step, machine=MACHINE)
    assert "each iteration writes 32 elements of T (128 B)" in r.text
    assert "read back within one iteration of i, after 384 B of cache lines" in r.text
    assert "before, all of T (8 KiB) was written before any of it was read back" in r.text


def test_split_that_keeps_the_order_says_so_and_an_imperfect_one_names_its_guard():
    before = "L^{100}_{i} [\n  Y_{i} = X_{i}*2.0;\n];\n"
    after = "L^{4}_{i_0}\n  L^{32}_{i_1} [\n    Y_{i_0*32+i_1} = X_{i_0*32+i_1}*2.0 where i_0*32 + i_1 < 100;\n  ];\n"
    step = Step("split", {"block": "Y", "loop": "i", "factors": [4, 32]})
    r = step_reasoning(analysis(before), analysis(after), step,
                       machine=MACHINE)
    assert "Splits loop i of Y (100 iterations) into i_0 (4) and i_1 (32)" in r.text
    assert "a guard skips 28 of them" in r.text
    assert r.facts["guarded_iterations"] == 28


def test_different_programs_give_different_specific_reasoning():
    step = Step("parallelize", {"block": "Y", "loop": "i"})
    a = step_reasoning(analysis(ROWS), analysis(ROWS.replace("L^{128}_{i}", "P^{128}_{i}")), step, machine=MACHINE)
    other = ROWS.replace("128", "48").replace("64", "500")
    b = step_reasoning(analysis(other), analysis(other.replace("L^{48}_{i}", "P^{48}_{i}")), step, machine=MACHINE)
    assert a.text != b.text
    assert "48 iterations over 8 cores" in b.text and "500 inner iterations" in b.text


def test_measurement_within_noise_is_called_noise():
    step = Step("parallelize", {"block": "Y", "loop": "i"})
    r = step_reasoning(analysis(ROWS), analysis(ROWS.replace("L^{128}_{i}", "P^{128}_{i}")), step,
                       measured=(1.0, 0.99), machine=MACHINE)
    assert "measurement noise" in r.sentences[-1]
    assert r.facts["latency_before_ms"] == 1.0 and r.facts["latency_after_ms"] == 0.99


def test_every_number_in_a_reorder_sentence_is_a_computed_fact():
    r = step_reasoning(analysis(COLUMNS), analysis(ROWS), Step("reorder", {"block": "Y", "loops": ["j", "i"]}),
                       machine=MACHINE)
    import re

    numbers = {int(n) for s in r.sentences for n in re.findall(r"(?<![_{\w])\d+(?![\w}])", s)}
    facts = set()

    def collect(x):
        if isinstance(x, bool):
            return
        if isinstance(x, (int, float)):
            facts.add(int(x))
        elif isinstance(x, dict):
            for v in x.values():
                collect(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)

    collect(r.facts)
    assert numbers and numbers <= facts | {64, 128}, numbers - facts  # 64 and 128 are the loops' extents
    assert r.facts["innermost_after"] == "j"


# ------------------------------------------------------------------ markdown


def test_describe_loop_markdown():
    a = analysis(MATMUL)
    md = describe_loop(a, at=MATMUL.index("L^{256}"), machine=MACHINE)
    assert md.startswith("**loop `k`**: serial (L), 256 iterations")
    assert "**reduction** axis of `C`" in md and "`W_{k,j}` 96" in md
    assert "trip count 3.15M (128 x 96 x 256)" in md
    assert "not offered:" in md and "parallelize (loop k is a reduction axis of C)" in md
    assert describe_loop(a, at=MATMUL.index("C_{")) is None


def test_describe_access_markdown():
    a = analysis(MATMUL)
    md = describe_access(a, at=MATMUL.index("W_{"), machine=MACHINE)
    assert "input `W`: f32[256,96], global memory, 96 KiB" in md
    assert "| k | 256 | 96 | 256 elements, 1 KiB | 16 KiB |" in md  # a column of W: a line per element
    assert "touched 128 times (loops i do not index it)" in md
    assert "reused across `i` after 97.4 KiB of cache lines (fits in the 1 MiB L2)" in md
    assert describe_access(a, at=0) is None


def test_describe_step_with_and_without_the_program_after():
    a = analysis(ROWS)
    step = {"id": "parallelize", "args": {"block": "Y", "loop": "i"}}
    md = describe_step(a, step, after=analysis(ROWS.replace("L^{128}_{i}", "P^{128}_{i}")), measured=(2.0, 1.0),
                       device="test cpu", machine=MACHINE)
    assert "- Runs loop i in parallel: its 128 iterations over 8 cores" in md
    assert "2 ms → 1 ms, 2.00x faster" in md and "device test cpu" in md
    # Without the program after it: a loop-kind change or a split is predicted on the syntax tree...
    md = describe_step(a, step, machine=MACHINE)
    assert "- Runs loop i in parallel: its 128 iterations over 8 cores" in md
    # ...any other step shows the facts of the loop it names.
    md = describe_step(a, {"id": "split", "args": {"block": "Y", "loop": "j", "factors": [8, 8]}}, machine=MACHINE)
    assert "- Splits loop j of Y (64 iterations) into j_0 (8) and j_1 (8)." in md
    # ...any other step shows the facts of the loops it names.
    md = describe_step(a, {"id": "fuse", "args": {"block": "Y", "loops": ["i", "j"]}}, machine=MACHINE)
    assert "**loop `i`**: serial (L), 128 iterations" in md and "**loop `j`**: serial (L), 64 iterations" in md


def test_predicted_after_is_the_program_the_step_makes():
    from leir.explain import predicted_after
    from leir.printer import print_program

    def same(before: str, step: Step, after: str) -> bool:
        predicted = predicted_after(analysis(before), step)
        return print_program(predicted.program) == print_program(analysis(after).program)

    assert same(COLUMNS, Step("reorder", {"block": "Y", "loops": ["j", "i"]}), ROWS)
    assert same(ROWS, Step("vectorize", {"block": "Y", "loop": "j"}), ROWS.replace("L^{64}_{j}", "V^{64}_{j}"))
    split = Step("split", {"block": "Y", "loop": "i", "factors": [4, 32]})
    assert same("L^{100}_{i} [\n  Y_{i} = X_{i}*2.0;\n];\n", split,
                "L^{4}_{i_0}\n  L^{32}_{i_1} [\n"
                "    Y_{i_0*32+i_1} = X_{i_0*32+i_1}*2.0 where i_0*32 + i_1 < 100;\n  ];\n")
    assert same(MATMUL, Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]}), MATMUL_TILED)
    assert predicted_after(analysis(ROWS), Step("fuse", {"block": "Y", "loops": ["i", "j"]})) is None
    assert predicted_after(analysis(ROWS), Step("parallelize", {"block": "Y", "loop": "nope"})) is None


def test_reorder_that_makes_an_access_invariant_does_not_call_it_lost():
    before = "L^{64}_{i}\n  L^{32}_{k} [\n    S_{i} += X_{i,k};\n  ];\n"
    after = "L^{32}_{k}\n  L^{64}_{i} [\n    S_{i} += X_{i,k};\n  ];\n"
    r = step_reasoning(analysis(before), analysis(after), Step("reorder", {"block": "S", "loops": ["i", "k"]}),
                       machine=MACHINE)
    assert "S_{i} (stride 0 before) is now contiguous" in r.text
    assert "But X_{i,k} (stride 32, was 1) is no longer contiguous along i" in r.text
    swapped = MATMUL.replace("L^{96}_{j}", "L^{TMP}").replace("L^{256}_{k}", "L^{96}_{j}")
    swapped = swapped.replace("L^{TMP}", "L^{256}_{k}")
    r = step_reasoning(analysis(MATMUL), analysis(swapped), Step("reorder", {"block": "C", "loops": ["j", "k"]}),
                       machine=MACHINE)
    assert "X_{i,k} stays the same element across j (stride 0, was 1)" in r.text
    assert "no longer contiguous" not in r.text
    assert "C_{i,j} (stride 0 before) and W_{k,j} (stride 96 before) are now contiguous" in r.text


# ------------------------------------------------------------------ real steps


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul", "softmax", "gemm_bias_relu", "conv2d", "layernorm"])
def test_every_offered_step_of_an_example_is_explained(name):
    """Each transformation offered on an example (two steps of each),
    applied with TVM: the reasoning has specific sentences and no failure."""
    from leir import transforms
    from leir.errors import LeirError
    from leir.semantics import analyze

    a = analysis((EXAMPLES / f"{name}.leir").read_text())
    count: dict[str, int] = {}
    for c in transforms.candidates(a):
        if count.get(c.step.id, 0) >= 2:
            continue
        try:
            after = analyze(transforms.apply(a, c.step))
        except LeirError:
            continue
        count[c.step.id] = count.get(c.step.id, 0) + 1
        r = step_reasoning(a, after, c.step, measured=(1.0, 2.0), machine=MACHINE)
        assert "could not explain" not in r.text, (c.step.key, r.text)
        assert len(r.sentences) >= 2 and "2.00x slower" in r.text
    assert count


def test_the_examples_in_docs_reasoning_md_are_what_the_code_says():
    """docs/reasoning.md quotes two reasonings; they must not rot."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "reasoning.md").read_text()
    quotes, current = [], []
    for line in doc.splitlines() + [""]:
        if line.startswith("> "):
            current.append(line[2:])
        elif current:
            quotes.append(" ".join(current))
            current = []
    tile = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED),
                          Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]}), machine=MACHINE)
    before = "L^{1000}_{i}\n  L^{4}_{j} [\n    Y_{i,j} = X_{i,j} + 1.0;\n  ];\n"
    par = step_reasoning(analysis(before), analysis(before.replace("L^{4}_{j}", "P^{4}_{j}")),
                         Step("parallelize", {"block": "Y", "loop": "j"}), measured=(0.01, 0.9), machine=MACHINE)
    assert quotes == [tile.text, par.text]


def test_bind_on_cuda_counts_blocks_and_threads_and_the_warp():
    before = "L^{64}_{i}\n  L^{48}_{j} [\n    Y_{i,j} = X_{i,j}*2.0;\n  ];\n"
    mid = before.replace("L^{64}_{i}", "B^{64}_{bx}").replace("_{i,", "_{bx,")
    after = mid.replace("L^{48}_{j}", "B^{48}_{tx}").replace(",j}", ",tx}")
    r = step_reasoning(analysis(mid), analysis(after), Step("bind", {"block": "Y", "loop": "j", "axis": "tx"}),
                       target="cuda", machine=MACHINE)
    assert "Binds loop j (48 iterations) of Y to threadIdx.x: the kernel now has 64 blocks of 48 threads" in r.text
    assert "48 threads per block is not a multiple of the 32-thread warp" in r.text
    assert "Y_{bx,tx} and X_{bx,tx} are contiguous" in r.text
    assert "machine" not in r.facts and "L1d" not in r.text  # no CPU facts on a GPU target


def test_cache_read_names_the_copy_and_its_size():
    before = MATMUL
    after = """\
tmp X_local: f32[128,256] @l

L^{128}_{ax0}
  L^{256}_{ax1} [
    X_local_{ax0,ax1} = X_{ax0,ax1};
  ];

L^{128}_{i}
  L^{96}_{j}
    L^{256}_{k} [
      C_{i,j} += X_local_{i,k}*W_{k,j};
    ];
"""
    step = Step("cache_read", {"block": "C", "tensor": "X", "scope": "l"})
    r = step_reasoning(analysis(before), analysis(after), step, machine=MACHINE)
    assert "C now reads X through X_local (f32[128,256] in local memory, 128 KiB)" in r.text
    assert "the copy between them moves 32.8K elements" in r.text and r.facts["copy_elements"] == 128 * 256
    assert "outside every loop of C" in r.text
    assert r.text.count("X_local (") == 1  # the temporary is not announced twice


@pytest.mark.parametrize("text", [
    MATMUL,
    "L^{4}_{i} [\n  Y_{i} = X_{j};\n];\n",            # an error: j is not a loop
    "Y = X + 1.0;\n",                                  # no loop at all
    "L^{4}_{i} [\n  Y_{i//0} = X_{i*i};\n];\n",        # division by zero, a product of variables
])
def test_hover_at_every_offset_never_fails(text):
    a = load_leir(text).analysis
    for at in range(len(text) + 1):
        for describe in (describe_loop, describe_access):
            out = describe(a, at=at, machine=MACHINE)
            assert out is None or isinstance(out, str)


def test_a_step_naming_a_missing_block_is_explained_without_failing():
    r = step_reasoning(analysis(ROWS), analysis(ROWS), Step("parallelize", {"block": "nope", "loop": "i"}),
                       measured=(1.0, 1.0), machine=MACHINE)
    assert r.sentences and "measurement noise" in r.text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d", "batchnorm", "mha_attention"])
def test_predicted_after_equals_the_applied_step(name):
    """Where hover predicts a step's result on the syntax tree, it is the
    program ``leir.transforms.apply`` makes (with TVM)."""
    from leir import transforms
    from leir.explain import predicted_after
    from leir.printer import print_program
    from leir.semantics import analyze

    a = analysis((EXAMPLES / f"{name}.leir").read_text())
    compared = 0
    for c in transforms.candidates(a, only=("split", "tile", "reorder", "parallelize", "vectorize", "unroll")):
        predicted = predicted_after(a, c.step)
        if predicted is None:
            continue
        applied = transforms.apply(a, c.step)
        assert print_program(predicted.program) == print_program(applied), c.step.key
        # The light analysis of the prediction reasons exactly as the full one.
        assert step_reasoning(a, predicted, c.step, machine=MACHINE).text == \
            step_reasoning(a, analyze(applied), c.step, machine=MACHINE).text, c.step.key
        compared += 1
    assert compared


def test_fuse_names_the_fused_extent_what_it_offers_and_the_wrapping_access():
    before = "L^{128}_{i}\n  L^{96}_{j} [\n    Y_{i,j} = C_{i,j} + b_{j};\n  ];\n"
    after = "L^{12288}_{ij} [\n  Y_{ij//96,ij%96} = C_{ij//96,ij%96} + b_{ij%96};\n];\n"
    r = step_reasoning(analysis(before), analysis(after), Step("fuse", {"block": "Y", "loops": ["i", "j"]}),
                       machine=MACHINE)
    assert "Fuses loops i and j (128 x 96) of Y into one loop ij of 12288 iterations" in r.text
    assert "parallelize is offered on ij" in r.text and r.facts["offered_on_fused"] == ["parallelize"]
    assert "But b_{ij%96} (stride unknown, was 1) is no longer contiguous along ij" in r.text
    assert "Y_{ij//96,ij%96}" not in r.text.split("But")[1]  # still stride 1: not reported as lost


def test_decompose_reduction_names_the_initial_value_and_its_writes():
    before = "L^{64}_{i}\n  L^{32}_{k} [\n    S_{i} += X_{i,k};\n  ];\n"
    after = "L^{64}_{i} [\n  S_{i} = 0.0;\n];\n\nL^{64}_{i}\n  L^{32}_{k} [\n    S_{i} += X_{i,k};\n  ];\n"
    r = step_reasoning(analysis(before), analysis(after), Step("decompose_reduction", {"block": "S", "loop": "i"}),
                       machine=MACHINE)
    assert "Writes the initial value of S (0.0) in an equation of its own before loop i (64 writes)" in r.text


def test_reasoning_facts_are_plain_json():
    import json
    import math

    step = Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]})
    r = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED), step, measured=(10.0, 4.0), machine=MACHINE)
    data = json.loads(json.dumps(r.to_json()))
    assert data["text"] == r.text and data["facts"]["speedup"] == 2.5
    assert all(math.isfinite(v) for v in data["facts"].values() if isinstance(v, float))
    loop = loop_facts(analysis(MATMUL), block="C", var="k")
    assert json.loads(json.dumps(loop.to_json()))["reduction_for"] == ["C"]
    access = access_facts(analysis(MATMUL), block="C", tensor="W")
    assert json.loads(json.dumps(access.to_json()))["reuse"] == 128


def test_cache_sizes_as_the_kernel_writes_them():
    from leir.explain.machine import _parse_size

    assert _parse_size("32K\n") == 32 * 1024 and _parse_size("1024K") == 1 << 20 and _parse_size("32M") == 32 << 20
    assert _parse_size("lots") is None


def test_footprint_in_cache_lines_dense_strided_and_whole_rows():
    from leir.explain import footprint
    from leir.explain.facts import footprint_lines

    a = analysis("L^{64}_{i}\n  L^{32}_{j} [\n    Y_{i,j} = X_{i,j*2} + Z_{j,i};\n  ];\n")
    info = a.equations[0]
    i, j = info.loops
    eq = info.equation
    x = eq.rhs.lhs   # X_{i,j*2}: every other element of a row
    z = eq.rhs.rhs   # Z_{j,i}: a column
    over_j = [(x, info.loops, [j])]
    assert footprint(a, over_j) == 32
    assert footprint_lines(a, over_j) == 4          # 63 floats of one row span 4 lines
    assert footprint_lines(a, [(z, info.loops, [j])]) == 32   # a column: a line per element
    assert footprint_lines(a, [(eq.lhs, info.loops, [i, j])]) == 64 * 32 * 4 // 64   # all of Y: dense


def test_compute_at_a_deeper_loop_compares_with_the_shared_loop_before():
    before = """\
L^{64}_{i} [
  L^{32}_{j} [
    T_{i,j} = X_{i,j}*2.0;
  ];
  L^{32}_{j} [
    Y_{i,j} = T_{i,j} + 1.0;
  ];
];
"""
    after = """\
L^{64}_{i}
  L^{32}_{j} [
    T_{i,j} = X_{i,j}*2.0;
    Y_{i,j} = T_{i,j} + 1.0;
  ];
"""
    step = Step("compute_at", {"block": "T", "at": {"block": "Y", "loop": "j"}})
    r = step_reasoning(analysis(before), analysis(after), step, machine=MACHINE)
    assert "each iteration writes 1 element of T (4 B), instead of 32 elements (128 B) per iteration of i" in r.text
    assert r.facts["shared_loop_before"] == "i"


def test_a_remote_target_without_a_machine_compares_nothing_with_this_cpu():
    par = ROWS.replace("L^{128}_{i}", "P^{128}_{i}")
    r = step_reasoning(analysis(ROWS), analysis(par), Step("parallelize", {"block": "Y", "loop": "i"}), target="rpc")
    assert r.text.startswith("Runs loop i in parallel: its 128 iterations, each iteration doing 64 inner iterations")
    assert "cores" not in r.text and "machine" not in r.facts
    tiled = step_reasoning(analysis(MATMUL), analysis(MATMUL_TILED),
                           Step("tile", {"block": "C", "loops": ["i", "j"], "sizes": [8, 8]}), target="rpc")
    assert "W is touched again after 17.1 KiB of cache lines in between (across loop i_1); before, after 97.4 KiB " \
        "(across loop i)" in tiled.text
    assert "L1d" not in tiled.text and "L2" not in tiled.text
    # Given the remote machine, the comparisons come back.
    r = step_reasoning(analysis(ROWS), analysis(par), Step("parallelize", {"block": "Y", "loop": "i"}), target="rpc",
                       machine=MACHINE)
    assert "over 8 cores" in r.text
    md = describe_access(analysis(MATMUL), at=MATMUL.index("W_{"), target="rpc")
    assert "reused across `i` after 97.4 KiB of cache lines" in md and "fits" not in md


def test_a_layout_change_names_each_block_whose_access_loses_unit_stride():
    before = "L^{64}_{i}\n  L^{32}_{j} [\n    T_{i,j} = X_{i,j}*2.0;\n  ];\n\n" \
             "L^{64}_{i}\n  L^{32}_{j} [\n    Y_{i,j} = T_{i,j} + 1.0;\n  ];\n"
    after = before.replace("T_{i,j}", "T_{j,i}")
    r = step_reasoning(analysis(before), analysis(after),
                       Step("transform_layout", {"tensor": "T", "layout": "transpose"}), machine=MACHINE)
    assert "In T, T_{j,i} (stride 64, was 1) is no longer contiguous along j." in r.text
    assert "In Y, T_{j,i} (stride 64, was 1) is no longer contiguous along j." in r.text
    assert {c["block"] for c in r.facts["stride_changes"]} == {"T", "Y"}

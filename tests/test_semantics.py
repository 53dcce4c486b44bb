"""The semantic checks: each one at its precise range, with the related
location that explains it, and the tensor table it infers.

Diagnostics are written as ``(code, "line:col", text)``: the code, where
the diagnostic starts (1-based) and the source text it covers. Tests are
named ``test_<code>_...`` after the check they exercise.
"""

from __future__ import annotations

import pytest

from leir.parser import parse
from leir.semantics import COMBINER_INIT, Analysis, analyze

# ------------------------------------------------------------------ fixtures

#: Step-TP's row softmax, three units, no declarations.
SOFTMAX_STEP_TP = (
    "L^{64}_{i=0}L^{100}_{j=0}[M^{f32,g}_{i}=max(M^{f32,g}_{i},X^{f32,g}_{i,j});];"
    "L^{64}_{i=0}L^{100}_{j=0}[S^{f32,g}_{i}=S^{f32,g}_{i}+exp(X^{f32,g}_{i,j}-M^{f32,g}_{i});];"
    "L^{64}_{i=0}L^{100}_{j=0}[Y^{f32,g}_{i,j}=exp(X^{f32,g}_{i,j}-M^{f32,g}_{i})/S^{f32,g}_{i};];"
)

MATMUL_STEP_TP = (
    "B^{512}_{tx=0}L^{256}_{a=0}L^{128}_{k=0}"
    "[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];"
)

#: A 1-D convolution over a declared input one element too short.
CONV1D_SHORT_INPUT = """\
in  I: f32[9]
in  K: f32[3]
out O: f32[8]

L^{8}_{y=0}
  L^{3}_{r=0} [
    O_{y} = O_{y} + I_{y+r}*K_{r};
  ];
"""

#: The same convolution with nothing declared: shapes come from indices.
CONV1D_INFERRED = "L^{8}_{y=0}L^{3}_{r=0}[O^{f32,g}_{y}=O^{f32,g}_{y}+I^{f32,g}_{y+r}*K^{f32,g}_{r};];"

#: An imperfect split: 4*32 iterations cover 100 elements under a guard.
IMPERFECT_SPLIT = """\
in  X: f32[100]
out Y: f32[100]

L^{4}_{io=0}
  L^{32}_{ii=0} [
    Y_{io*32+ii} = X_{io*32+ii}*2 where io*32 + ii < {limit};
  ];
"""


def _analysis(text: str) -> Analysis:
    result = parse(text)
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    return analyze(result.program)


def _located(text: str, diagnostics) -> list[tuple[str, str, str]]:
    source = parse(text).source
    return [(d.code, source.format_location(d.span), text[d.span.start : d.span.end]) for d in diagnostics]


def _diagnostics(text: str) -> list[tuple[str, str, str]]:
    """Parser and analysis diagnostics of ``text`` as (code, line:col, text)."""
    result = parse(text)
    return _located(text, result.diagnostics + analyze(result.program).diagnostics)


def _only(text: str, code: str):
    """The one diagnostic with this code."""
    (diag,) = [d for d in analyze(parse(text).program).diagnostics if d.code == code]
    return diag


def _related(text: str, diag) -> list[tuple[str, str]]:
    return [(r.message, text[r.span.start : r.span.end]) for r in diag.related]


def _severity(text: str, code: str) -> str:
    return _only(text, code).severity


# ------------------------------------------------------------------- clean


@pytest.mark.parametrize("text", [SOFTMAX_STEP_TP, MATMUL_STEP_TP, CONV1D_INFERRED], ids=["softmax", "matmul", "conv1d"])
def test_step_tp_programs_analyse_without_diagnostics(text):
    assert _diagnostics(text) == []


# ------------------------------------------------------------- loops, names


def test_unknown_loop_kind_is_reported_and_the_loop_analysed_as_serial():
    text = "Q^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];"
    assert _diagnostics(text) == [("unknown-loop-kind", "1:1", "Q")]
    assert analyze(parse(text).program).tensors["Y"].shape == (4,)


def test_loop_var_out_of_scope_in_an_index():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];\nL^{4}_{j=0}[Z^{f32}_{j}=X^{f32}_{i};];"
    assert _diagnostics(text) == [("loop-var-out-of-scope", "2:34", "i")]
    assert _related(text, _only(text, "loop-var-out-of-scope")) == [("the loop is here", "L^{4}_{i=0}")]


def test_loop_var_out_of_scope_as_a_bare_name():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];\nL^{4}_{j=0}[Z^{f32}_{j}=X^{f32}_{j}*i;];"
    assert _diagnostics(text) == [("loop-var-out-of-scope", "2:37", "i")]


def test_unknown_loop_var_in_an_index():
    text = "L^{4}_{i=0}[Y^{f32}_{q}=X^{f32}_{i};];"
    assert ("unknown-loop-var", "1:22", "q") in _diagnostics(text)


def test_duplicate_loop_var_shadowing_an_enclosing_loop():
    text = "L^{4}_{i=0}[L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];];"
    assert _diagnostics(text) == [("duplicate-loop-var", "1:20", "i")]
    assert _related(text, _only(text, "duplicate-loop-var")) == [("bound here", "i")]
    assert _only(text, "duplicate-loop-var").related[0].span.start == 7


def test_duplicate_declaration_points_at_the_first():
    text = "in  X: f32[4]\nin  X: f32[4]\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i};\n];\n"
    assert _diagnostics(text) == [("duplicate-declaration", "2:5", "X")]
    assert _only(text, "duplicate-declaration").related[0].span.start == text.index("X")


def test_name_clash_between_tensor_and_loop_variable():
    text = "in  i: f32[4]\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = 1.0;\n];\n"
    assert ("name-clash", "1:5", "i") in _diagnostics(text)


def test_bad_scope_for_an_input():
    text = "in  X: f32[4] @s\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i};\n];\n"
    assert _diagnostics(text) == [("bad-scope", "1:1", "in  X: f32[4] @s")]


# ------------------------------------------------------------------- types


def test_dtype_conflict_between_accesses_points_at_the_first():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f16}_{i}+X^{f32}_{i};];"
    assert _diagnostics(text) == [("dtype-conflict", "1:37", "X^{f32}_{i}")]
    assert _related(text, _only(text, "dtype-conflict")) == [("f16 here", "X^{f16}_{i}")]


def test_dtype_conflict_between_declaration_and_superscript():
    text = "in  X: f16[4]\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X^{f32}_{i};\n];\n"
    assert _diagnostics(text) == [("dtype-conflict", "5:11", "X^{f32}_{i}")]
    assert _related(text, _only(text, "dtype-conflict")) == [("declared f16 here", "X")]


def test_scope_conflict_between_declaration_and_superscript():
    text = "in  X: f32[4]\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X^{f32,s}_{i};\n];\n"
    assert _diagnostics(text) == [("scope-conflict", "5:11", "X^{f32,s}_{i}")]
    assert _related(text, _only(text, "scope-conflict")) == [("declared @g here", "X")]


def test_rank_conflict_points_at_the_first_access():
    text = "L^{4}_{i=0}L^{4}_{j=0}[Y^{f32}_{i,j}=X^{f16}_{i}+X^{f16}_{i,j};];"
    assert _diagnostics(text) == [("rank-conflict", "1:50", "X^{f16}_{i,j}")]
    assert _related(text, _only(text, "rank-conflict")) == [("rank 1 here", "X^{f16}_{i}")]


def test_rank_conflict_with_the_declaration():
    text = "in  X: f32[4,4]\nout Y: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i};\n];\n"
    assert _diagnostics(text) == [("rank-conflict", "5:11", "X_{i}")]
    assert _related(text, _only(text, "rank-conflict")) == [("declared with rank 2 here", "X")]


def test_undeclared_unsuperscripted_tensor_is_f32_in_global_memory_silently():
    # The documented default, which keeps files short: no diagnostic.
    text = "L^{4}_{i}[Y_{i}=X^{f16,s}_{i};];"
    assert _diagnostics(text) == []
    tensors = _analysis(text).tensors
    assert (tensors["Y"].dtype, tensors["Y"].scope, tensors["Y"].declared) == ("f32", "g", False)
    assert (tensors["X"].dtype, tensors["X"].scope) == ("f16", "s")
    # With no superscript anywhere either, inputs too.
    tensors = _analysis("L^{4}_{i}[C_{i} += X_{i};];").tensors
    assert {n: (t.dtype, t.scope, t.role) for n, t in tensors.items()} == {"C": ("f32", "g", "out"), "X": ("f32", "g", "in")}


def test_unused_tensor_is_a_warning_at_its_declaration():
    text = "in  X: f32[4]\nout Y: f32[4]\ntmp U: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i};\n];\n"
    assert _diagnostics(text) == [("unused-tensor", "3:5", "U")]
    assert _severity(text, "unused-tensor") == "warning"


# ----------------------------------------------------------- roles, order


def test_role_inference_of_softmax():
    tensors = _analysis(SOFTMAX_STEP_TP).tensors
    assert {name: t.role for name, t in tensors.items()} == {"M": "tmp", "X": "in", "S": "tmp", "Y": "out"}
    assert {name: t.shape for name, t in tensors.items()} == {"M": (64,), "X": (64, 100), "S": (64,), "Y": (64, 100)}


def test_role_inference_of_matmul():
    tensors = _analysis(MATMUL_STEP_TP).tensors
    assert {name: (t.role, t.shape, t.dtype) for name, t in tensors.items()} == {
        "C": ("out", (512, 256), "f32"),
        "X": ("in", (512, 128), "f32"),
        "W": ("in", (128, 256), "f32"),
    }


def test_role_inference_of_an_initialised_accumulator():
    text = "L^{4}_{i=0}[C^{f32}_{i}=0;];L^{4}_{i=0}L^{8}_{k=0}[C^{f32}_{i}=C^{f32}_{i}+A^{f32}_{i,k};];"
    analysis = _analysis(text)
    assert analysis.tensors["C"].role == "out"
    assert [e.kind for e in analysis.equations] == ["assign", "update"]


def test_write_to_input_points_at_the_write():
    text = "in  X: f32[4]\n\nL^{4}_{i=0} [\n  X_{i} = 1.0;\n];\n"
    assert _diagnostics(text) == [("write-to-input", "4:3", "X_{i}")]
    assert _related(text, _only(text, "write-to-input")) == [("declared as input here", "X")]


def test_never_written_output():
    text = "in  X: f32[4]\nout Y: f32[4]\nout Z: f32[4]\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i} + Z_{i};\n];\n"
    assert ("never-written", "3:5", "Z") in _diagnostics(text)


def test_read_before_write_of_a_temporary():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=T^{f32}_{i};T^{f32}_{i}=X^{f32}_{i};];"
    assert _diagnostics(text) == [("read-before-write", "1:25", "T^{f32}_{i}")]


def test_read_before_write_in_a_guard():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i} where T^{f32}_{i}>0;T^{f32}_{i}=X^{f32}_{i};];"
    assert ("read-before-write", "1:43", "T^{f32}_{i}") in _diagnostics(text)


def test_reduction_init_cannot_be_implied_for_a_scaled_accumulator():
    text = "L^{4}_{i=0}L^{8}_{k=0}[C^{f32}_{i}=C^{f32}_{i}*2+A^{f32}_{i,k};];"
    assert _diagnostics(text) == [("reduction-init", "1:36", "C^{f32}_{i}")]


def test_reduction_init_cannot_be_implied_for_a_function_of_itself():
    text = "L^{4}_{i=0}[C^{f32}_{i}=exp(C^{f32}_{i});];"
    assert _diagnostics(text) == [("reduction-init", "1:29", "C^{f32}_{i}")]


def test_reduction_init_is_not_needed_after_an_earlier_write():
    text = "L^{4}_{i=0}[C^{f32}_{i}=1;];L^{4}_{i=0}[C^{f32}_{i}=exp(C^{f32}_{i});];"
    assert _diagnostics(text) == []


@pytest.mark.parametrize(
    "rhs, combiner",
    [
        ("C^{f32}_{i}+A^{f32}_{i,k}", "sum"),
        ("A^{f32}_{i,k}+C^{f32}_{i}", "sum"),
        ("C^{f32}_{i}-A^{f32}_{i,k}", "sum"),
        ("C^{f32}_{i}*A^{f32}_{i,k}", "prod"),
        ("max(C^{f32}_{i},A^{f32}_{i,k})", "max"),
        ("min(A^{f32}_{i,k},C^{f32}_{i})", "min"),
    ],
)
def test_reduction_shapes_imply_their_init(rhs, combiner):
    (info,) = _analysis(f"L^{{4}}_{{i=0}}L^{{8}}_{{k=0}}[C^{{f32}}_{{i}}={rhs};];").equations
    assert (info.kind, info.combiner, info.init) == ("reduce", combiner, COMBINER_INIT[combiner])
    assert (info.spatial, info.reduce_axes) == (("i",), ("k",))


def test_repeated_write_is_a_warning_at_the_write():
    text = "L^{4}_{i=0}L^{8}_{j=0}[Y^{f32}_{i}=X^{f32}_{i,j};];"
    assert _diagnostics(text) == [("repeated-write", "1:24", "Y^{f32}_{i}")]
    assert _related(text, _only(text, "repeated-write")) == [("loop j", "L^{8}_{j=0}")]


def test_repeated_write_is_not_reported_when_a_guard_picks_one_iteration():
    assert _diagnostics("L^{4}_{i=0}L^{8}_{j=0}[Y^{f32}_{i}=X^{f32}_{i,j} where j==7;];") == []


# ----------------------------------------------------------------- indices


def test_index_out_of_bounds_of_a_declared_shape():
    assert _diagnostics(CONV1D_SHORT_INPUT) == [("index-out-of-bounds", "7:24", "y+r")]
    assert "0..9" in _only(CONV1D_SHORT_INPUT, "index-out-of-bounds").message


def test_compound_assignment_reports_a_problem_of_its_access_once():
    # ``O += e`` reads and writes O at one place: one diagnostic, where the
    # long form has one at each of its two accesses.
    short = CONV1D_SHORT_INPUT.replace("out O: f32[8]", "out O: f32[7]").replace("O_{y} = O_{y} +", "O_{y} +=")
    assert _diagnostics(short) == [("index-out-of-bounds", "7:8", "y"), ("index-out-of-bounds", "7:17", "y+r")]
    long = CONV1D_SHORT_INPUT.replace("out O: f32[8]", "out O: f32[7]")
    assert [code for code, _, _ in _diagnostics(long)] == ["index-out-of-bounds"] * 3
    text = "in  X: f32[4]\nout C: f32[4]\n\nL^{4}_{i} [\n  C^{f16}_{i} += X_{i};\n];\n"
    assert _diagnostics(text) == [("dtype-conflict", "5:3", "C^{f16}_{i}")]


def test_index_out_of_bounds_not_reported_when_the_declared_shape_fits():
    assert _diagnostics(CONV1D_SHORT_INPUT.replace("I: f32[9]", "I: f32[10]")) == []


def test_shape_inference_from_index_bounds():
    tensors = _analysis(CONV1D_INFERRED).tensors
    assert {n: (t.role, t.shape) for n, t in tensors.items()} == {"O": ("out", (8,)), "I": ("in", (10,)), "K": ("in", (3,))}


def test_shape_inference_through_floor_division_and_modulo():
    text = "L^{64}_{f=0}[Y^{f32}_{f//8,f%8}=X^{f32}_{f};];"
    assert _analysis(text).tensors["Y"].shape == (8, 8)


def test_negative_index_of_an_inferred_tensor():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i-1};];"
    assert _diagnostics(text) == [("negative-index", "1:34", "i-1")]


def test_shape_not_inferable_from_a_division():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i/2};];"
    assert _diagnostics(text) == [("shape-not-inferable", "1:34", "i/2")]


def test_index_out_of_bounds_is_checked_only_where_the_guard_holds():
    assert _diagnostics(IMPERFECT_SPLIT.replace("{limit}", "100")) == []


def test_index_out_of_bounds_under_a_guard_that_lets_one_too_many_through():
    text = IMPERFECT_SPLIT.replace("{limit}", "101")
    assert _diagnostics(text) == [("index-out-of-bounds", "6:8", "io*32+ii"), ("index-out-of-bounds", "6:23", "io*32+ii")]
    assert all("0..100 where the guard holds" in d.message for d in analyze(parse(text).program).diagnostics)


def test_index_out_of_bounds_under_a_non_affine_guard():
    text = "in  X: f32[10]\nout Y: f32[10]\n\nL^{16}_{i=0} [\n  Y_{i} = X_{i} where i*i < 100;\n];\n"
    assert _diagnostics(text) == []
    assert _diagnostics(text.replace("i*i < 100", "i*i < 101")) == [
        ("index-out-of-bounds", "5:6", "i"),
        ("index-out-of-bounds", "5:14", "i"),
    ]


def test_index_out_of_bounds_is_not_guessed_when_the_guarded_space_is_too_large():
    text = (
        "in  X: f32[4000000]\nout Y: f32[4000000]\n\n"
        "L^{2048}_{io=0}\n  L^{2048}_{ii=0} [\n    Y_{io*2048+ii} = X_{io*2048+ii} where (io*2048 + ii)%7 < 8;\n  ];\n"
    )
    assert _diagnostics(text) == []


def test_shape_inference_under_a_guard():
    text = IMPERFECT_SPLIT.split("\n\n", 1)[1].replace("{limit}", "100").replace("Y_", "Y^{f32}_").replace("X_", "X^{f32}_")
    assert {n: t.shape for n, t in _analysis(text).tensors.items()} == {"Y": (100,), "X": (100,)}


# ------------------------------------------------------------------- races


def test_race_of_a_reduction_across_a_parallel_loop():
    text = "L^{8}_{i=0}P^{4}_{j=0}[C^{f32}_{i}=C^{f32}_{i}+A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("race", "1:19", "j")]
    assert _related(text, _only(text, "race")) == [("the write", "C^{f32}_{i}")]


def test_race_of_a_reduction_across_a_thread_loop():
    text = "L^{8}_{i=0}B^{32}_{tx=0}[C^{f32}_{i}=C^{f32}_{i}+A^{f32}_{i,tx};];"
    assert _diagnostics(text) == [("race", "1:20", "tx")]


def test_race_of_a_write_that_ignores_the_parallel_loop():
    text = "P^{8}_{i=0}L^{4}_{j=0}[C^{f32}_{j}=A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("race", "1:8", "i")]


def test_race_of_a_write_that_folds_iterations_together():
    text = "P^{8}_{i=0}[C^{f32}_{i//2}=A^{f32}_{i};];"
    assert _diagnostics(text) == [("race", "1:8", "i")]
    assert "i=0 and i=1" in _only(text, "race").message


def test_race_of_overlapping_tiles():
    # Tiles of 5 at a stride of 4: i and i+1 both write element 4*(i+1).
    text = "P^{8}_{i=0}L^{5}_{j=0}[C^{f32}_{i*4+j}=A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("race", "1:8", "i")]
    assert "element (4)" in _only(text, "race").message


@pytest.mark.parametrize(
    "text",
    [
        "P^{8}_{i=0}L^{4}_{j=0}[C^{f32}_{i*4+j}=A^{f32}_{i,j};];",  # exact tiles
        "P^{8}_{i=0}L^{4}_{j=0}[C^{f32}_{i+j,j}=A^{f32}_{i,j};];",  # j pinned by the second index
        "P^{8}_{i=0}[C^{f32}_{i%8}=A^{f32}_{i};];",  # enumerated: no wrap-around
        "P^{8}_{i=0}[C^{f32}_{0}=A^{f32}_{i} where i==3;];",  # one iteration writes
        "L^{8}_{i=0}V^{4}_{j=0}[C^{f32}_{i,j}=A^{f32}_{i,j};];",
        "B^{4}_{bx=0}B^{32}_{tx=0}[C^{f32}_{bx*32+tx}=A^{f32}_{bx*32+tx};];",
        # A fused tile loop, past what enumeration covers (4096x4x64 points):
        # proved through its digits f//32 and f%32 (issue 14's plans).
        "P^{4096}_{f=0}L^{4}_{i=0}V^{64}_{j=0}[C^{f32}_{f//32*4+i,f%32*64+j}=A^{f32}_{f,i,j};];",
    ],
    ids=["tiles", "pinned", "modulo", "guard", "vector", "blocks", "fused-digits"],
)
def test_race_not_reported_when_iterations_write_distinct_elements(text):
    assert _diagnostics(text) == []


def test_race_of_a_fused_loop_whose_column_tiles_overlap():
    # f%32*32 with 64-wide tiles: neighbouring column tiles overlap (found by
    # enumeration, 256x2x64 points).
    text = "P^{256}_{f=0}L^{2}_{i=0}L^{64}_{j=0}[C^{f32}_{f//32*2+i,f%32*32+j}=A^{f32}_{f,i,j};];"
    assert _diagnostics(text) == [("race", "1:10", "f")]


def test_possible_race_when_the_index_cannot_be_decided():
    text = "P^{1024}_{i=0}L^{1024}_{j=0}L^{4}_{k=0}[C^{f32}_{(i*1024+j)%1000000,k}=A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("possible-race", "1:11", "i")]
    assert _severity(text, "possible-race") == "warning"


def test_vectorized_reduction_across_a_vector_loop():
    text = "L^{4}_{i=0}V^{8}_{j=0}[C^{f32}_{i}=C^{f32}_{i}+A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("vectorized-reduction", "1:19", "j")]
    assert _related(text, _only(text, "vectorized-reduction")) == [("the reduction", "C^{f32}_{i}")]


def test_vector_not_innermost_when_a_vector_loop_holds_a_serial_loop():
    text = "V^{8}_{i=0}L^{4}_{j=0}[C^{f32}_{i,j}=A^{f32}_{i,j};];"
    assert _diagnostics(text) == [("vector-not-innermost", "1:8", "i")]
    assert _severity(text, "vector-not-innermost") == "warning"
    assert _related(text, _only(text, "vector-not-innermost")) == [("serial loop j", "L^{4}_{j=0}")]


def test_vector_not_innermost_through_a_nested_nest():
    text = "V^{8}_{i=0}[L^{4}_{j=0}[C^{f32}_{i,j}=A^{f32}_{i,j};];D^{f32}_{i}=A^{f32}_{i,0};];"
    assert _diagnostics(text) == [("vector-not-innermost", "1:8", "i")]


def test_vector_not_innermost_allows_unrolled_loops_inside():
    assert _diagnostics("V^{8}_{i=0}U^{4}_{j=0}[C^{f32}_{i,j}=A^{f32}_{i,j};];") == []


# ------------------------------------------------------------- GPU threads


def test_bad_thread_axis_name():
    text = "B^{32}_{t=0}[Y^{f32}_{t}=X^{f32}_{t};];"
    assert _diagnostics(text) == [("bad-thread-axis", "1:9", "t")]


def test_thread_extent_mismatch_within_one_kernel():
    text = "B^{4}_{bx=0}[B^{64}_{tx=0}[A^{f32}_{bx,tx}=1.0;];B^{128}_{tx=0}[B^{f32}_{bx,tx}=2.0;];];"
    assert _diagnostics(text) == [("thread-extent-mismatch", "1:53", "128")]
    assert _related(text, _only(text, "thread-extent-mismatch")) == [("threadIdx.x with extent 64", "64")]


def test_thread_extent_mismatch_not_reported_across_kernels():
    # Each top-level nest is its own kernel with its own launch extents.
    text = "B^{64}_{tx=0}[A^{f32}_{tx}=1.0;];B^{128}_{tx=0}[B^{f32}_{tx}=2.0;];"
    assert _diagnostics(text) == []


@pytest.mark.parametrize(
    "axis, extent",
    [("tx", 2048), ("ty", 1025), ("tz", 65), ("by", 65536), ("bz", 70000)],
)
def test_thread_extent_limit(axis, extent):
    text = f"B^{{{extent}}}_{{{axis}=0}}[Y^{{f32}}_{{{axis}}}=1.0;];"
    assert _diagnostics(text) == [("thread-extent-limit", "1:4", str(extent))]


def test_thread_extent_limit_of_block_x_is_far_larger():
    assert _diagnostics(f"B^{{{2**31 - 1}}}_{{bx=0}}[Y^{{f32}}_{{bx}}=1.0;];") == []


def test_threads_per_block_over_the_product_limit():
    text = "B^{32}_{tx=0}B^{64}_{ty=0}[A^{f32}_{tx,ty}=1.0;];"
    assert _diagnostics(text) == [("threads-per-block", "1:17", "64")]
    assert "2048 threads per block" in _only(text, "threads-per-block").message
    assert _related(text, _only(text, "threads-per-block")) == [("threadIdx.x extent 32", "32")]


def test_threads_per_block_at_the_limit_is_fine():
    assert _diagnostics("B^{32}_{tx=0}B^{32}_{ty=0}[A^{f32}_{tx,ty}=1.0;];") == []


def test_unbound_on_gpu_for_equations_outside_every_b_loop():
    text = "B^{32}_{tx=0}[A^{f32}_{tx}=1.0;];L^{4}_{i=0}[Q^{f32}_{i}=2.0;];S^{f32}=1.0;"
    assert _diagnostics(text) == [("unbound-on-gpu", "1:46", "Q^{f32}_{i}"), ("unbound-on-gpu", "1:64", "S^{f32}")]
    assert {d.severity for d in analyze(parse(text).program).diagnostics} == {"warning"}


def test_unbound_on_gpu_not_reported_for_cpu_programs():
    assert _diagnostics("P^{4}_{i=0}[A^{f32}_{i}=1.0;];S^{f32}=1.0;") == []


# ------------------------------------------------------------------ spans

ALL_CHECKS = [
    "Q^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];",
    "L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];\nL^{4}_{j=0}[Z^{f32}_{j}=X^{f32}_{i}*i;];",
    "L^{4}_{i=0}[L^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];];",
    "L^{4}_{i=0}L^{4}_{j=0}[Y^{f32}_{i,j}=X^{f16}_{i}+X^{f32}_{i,j};];",
    CONV1D_SHORT_INPUT,
    IMPERFECT_SPLIT.replace("{limit}", "101"),
    "P^{8}_{i=0}[C^{f32}_{i//2}=A^{f32}_{i};];",
    "L^{4}_{i=0}V^{8}_{j=0}[C^{f32}_{i}=C^{f32}_{i}+A^{f32}_{i,j};];",
    "B^{4}_{bx=0}[B^{64}_{tx=0}[A^{f32}_{bx,tx}=1.0;];B^{2048}_{tx=0}[B^{f32}_{bx,tx}=2.0;];];L^{2}_{i=0}[Z_{i}=1;];",
    "in  X: f32[4]\nin  X: f32[4]\ntmp U: f32 @s\n\nL^{4}_{i=0} [\n  X_{i} = T_{i} + exp(C_{i});\n  C_{i} = C_{i}*2;\n];\n",
]


@pytest.mark.parametrize("text", ALL_CHECKS)
def test_every_diagnostic_span_lies_inside_the_document(text):
    result = parse(text)
    analysis = analyze(result.program)
    diagnostics = result.diagnostics + analysis.diagnostics
    assert diagnostics
    for d in diagnostics:
        assert 0 <= d.span.start <= d.span.end <= len(text)
        assert d.span.end > d.span.start  # each covers some text
        for r in d.related:
            assert 0 <= r.span.start < r.span.end <= len(text)


def test_race_found_by_enumeration_names_a_written_element_under_the_guard():
    text = "P^{8}_{i=0}[C^{f32}_{i//2}=A^{f32}_{i} where i>=4;];"
    assert _diagnostics(text) == [("race", "1:8", "i")]
    assert "i=4 and i=5" in _only(text, "race").message
    assert "element (2) of C" in _only(text, "race").message


def test_race_not_reported_when_the_guard_never_holds():
    assert _diagnostics("P^{2}_{i=0}[C^{f32}=1.0 where 0<0;];") == []


def test_race_across_a_vector_loop_that_is_not_a_reduction():
    text = "V^{4}_{j=0}[C^{f32}_{0}=A^{f32}_{j};];"
    assert _diagnostics(text) == [("race", "1:8", "j")]


def test_race_under_a_guard_on_another_loop():
    text = "P^{4}_{i=0}L^{4}_{k=0}[C^{f32}=A^{f32}_{i,k} where k<2;];"
    assert _diagnostics(text) == [("race", "1:8", "i")]


def test_loop_var_out_of_scope_points_at_the_first_loop_of_that_name():
    text = "L^{4}_{i=0}[Y^{f32}_{i}=1.0;];\nL^{8}_{i=0}[Z^{f32}_{i}=2.0;];\nL^{4}_{j=0}[W^{f32}_{j}=X^{f32}_{i};];"
    assert _related(text, _only(text, "loop-var-out-of-scope")) == [("the loop is here", "L^{4}_{i=0}")]
    assert _only(text, "loop-var-out-of-scope").related[0].span.start == 0

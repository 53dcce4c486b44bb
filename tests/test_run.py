"""Running lowered programs with TVM on the CPU, comparing by Step-TP's rule,
and checking against the NumPy evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from leir.inputs import InputError, domain_limited_inputs, random_inputs
from leir.parser import parse
from leir.bridge.run import RunError, BuildError, check, compare, run
from leir.semantics import analyze
from leir.bridge.targets import cuda_target, gpu_problems


def analysed(text: str):
    result = parse(text)
    analysis = analyze(result.program)
    errors = [d.message for d in result.diagnostics + analysis.diagnostics if d.is_error]
    assert errors == [], errors
    return analysis


MATMUL = """
in  X: f32[16,8]
in  W: f32[8,12]
out C: f32[16,12]
L^{16}_{i=0} L^{12}_{j=0} L^{8}_{k=0} [ C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j}; ];
"""


# ------------------------------------------------------------ compare (no TVM)


def test_compare_accepts_equal_values_exactly():
    a = np.array([1.0, -np.inf, np.nan, 0.0], np.float32)
    c = compare(a, a.copy(), "f32")
    assert (c.ok, c.criterion, c.max_abs_err, c.max_rel_err, c.mse) == (True, "elementwise", 0.0, 0.0, 0.0)


def test_compare_accepts_each_element_within_relative_or_absolute_tolerance():
    expected = np.array([1000.0, 1e-4, 0.0], np.float64)
    actual = np.array([1004.0, 9e-4, 1e-7], np.float64)  # rel 4e-3; abs 8e-4 (f32 allows 1e-3); abs 1e-7
    assert compare(actual, expected, "f32").criterion == "elementwise"
    # f64 has only Step-TP's default absolute bound, 1e-7, and the MSE is large.
    c = compare(actual, expected, "f64")
    assert not c.ok and c.mismatched == 1  # 9e-4 vs 1e-4 is outside both bounds


def test_compare_f16_has_a_loose_absolute_bound():
    assert compare(np.array([10.0]), np.array([11.4]), "f16").ok
    assert not compare(np.array([10.0]), np.array([11.6]), "f16").ok


def test_compare_falls_back_to_the_mean_squared_error():
    expected = np.zeros(1000)
    actual = expected.copy()
    actual[0] = 0.05  # far outside the element-wise bounds, MSE 2.5e-6
    c = compare(actual, expected, "f64")
    assert (c.ok, c.criterion, c.mismatched) == (True, "mse", 1)
    actual[0] = 0.5  # MSE 2.5e-4
    assert not compare(actual, expected, "f64").ok


def test_compare_reports_the_errors():
    c = compare(np.array([1.0, 2.2]), np.array([1.0, 2.0]), "f32")
    assert not c.ok
    assert c.max_abs_err == pytest.approx(0.2)
    assert c.max_rel_err == pytest.approx(0.1)
    assert c.mse == pytest.approx(0.02)
    assert "MISMATCH (1 elements)" in c.describe()


def test_compare_nan_against_a_number_fails():
    assert not compare(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), "f32").ok
    assert not compare(np.array([0.0, 1.0]), np.array([np.nan, 1.0]), "f32").ok


def test_compare_integers_exactly():
    assert compare(np.array([1000], np.int32), np.array([1000], np.int32), "i32").criterion == "exact"
    assert not compare(np.array([1001], np.int32), np.array([1000], np.int32), "i32").ok


def test_compare_shape_mismatch_fails():
    assert not compare(np.zeros(3), np.zeros(4), "f32").ok


# ------------------------------------------------------------ random inputs (no TVM)


def test_random_inputs_are_reproducible_and_typed():
    text = "in X: f32[4,5]\nin N: i32[6]\nin U: u8[3]\nin F: f16[2]\nout Y: f32[4,5]\nL^{4}_{i=0} L^{5}_{j=0} [ Y_{i,j} = X_{i,j} + N_{j} + U_{0} + F_{0}; ];"
    analysis = analysed(text)
    first, again, other = random_inputs(analysis, 3), random_inputs(analysis, 3), random_inputs(analysis, 4)
    assert list(first) == ["X", "N", "U", "F"]
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["X"], other["X"])
    assert first["X"].dtype == np.float32 and first["X"].shape == (4, 5)
    assert -1 <= first["X"].min() and first["X"].max() < 1
    assert first["N"].dtype == np.int32 and -8 <= first["N"].min() and first["N"].max() < 8
    assert first["U"].dtype == np.uint8 and first["F"].dtype == np.float16


def test_inputs_read_only_under_a_square_root_are_non_negative():
    text = """
in  X: f32[64]
in  V: f32[64]
out Y: f32[64]
L^{64}_{i=0} [ Y_{i} = X_{i}*rsqrt(V_{i} + 1e-05); ];
"""
    analysis = analysed(text)
    assert domain_limited_inputs(analysis) == {"V"}
    inputs = random_inputs(analysis, 0)
    assert inputs["V"].min() >= 0 and inputs["X"].min() < 0


# ------------------------------------------------------------ running with TVM


def test_run_matmul_on_the_cpu():
    pytest.importorskip("tvm")
    x = np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(np.float32)
    w = np.random.default_rng(1).uniform(-1, 1, (8, 12)).astype(np.float32)
    result = run(analysed(MATMUL), {"X": x, "W": w})
    assert result.target == "llvm" and result.notes == []
    np.testing.assert_allclose(result.outputs["C"], x @ w, rtol=1e-5, atol=1e-6)


def test_run_refuses_a_misshapen_input_before_building():
    with pytest.raises(InputError, match=r"^input W: expected shape \(8, 12\) f32, got \(12, 8\) float32$"):
        run(analysed(MATMUL), {"X": np.zeros((16, 8), np.float32), "W": np.zeros((12, 8), np.float32)})


def test_run_refuses_an_unknown_target():
    with pytest.raises(RunError, match="unknown target 'metal'"):
        run(analysed(MATMUL), random_inputs(analysed(MATMUL)), target="metal")


def test_thread_loops_run_serially_on_the_cpu_and_say_so():
    pytest.importorskip("tvm")
    text = "B^{16}_{tx=0}L^{8}_{a=0}L^{4}_{k=0}[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];"
    analysis = analysed(text)
    inputs = random_inputs(analysis, 0)
    result = run(analysis, inputs)
    assert result.notes == ["thread-bound loops tx were run as serial loops on the CPU"]
    np.testing.assert_allclose(result.outputs["C"], inputs["X"] @ inputs["W"], rtol=1e-5, atol=1e-6)


def test_cuda_without_a_gpu_is_refused():
    pytest.importorskip("tvm")
    if cuda_target() is not None:
        pytest.skip("this machine has a GPU")
    with pytest.raises(RunError, match="no CUDA GPU"):
        run(analysed(MATMUL), random_inputs(analysed(MATMUL)), target="cuda")


def test_gpu_programs_need_every_equation_in_a_thread_loop():
    text = """
in  X: f32[4,32]
out Y: f32[4,32]
out S: f32
B^{4}_{bx=0} B^{32}_{tx=0} [ Y_{bx,tx} = X_{bx,tx}*2.0; ];
L^{4}_{i=0} L^{32}_{j=0} [ S = S + Y_{i,j}; ];
"""
    (problem,) = gpu_problems(analysed(text))
    assert problem.startswith("S = S + Y_{i,j} is not inside a thread-bound (B) loop")


def test_packed_four_bit_tensors_cannot_be_passed_to_tvm():
    analysis = analysed("in X: i4[8]\nout Y: i4[8]\nL^{8}_{i=0} [ Y_{i} = X_{i}; ];")
    with pytest.raises(RunError, match="^X is i4: TVM packs i4 two to a byte"):
        run(analysis, random_inputs(analysis))


def test_build_failure_is_a_build_error():
    pytest.importorskip("tvm")
    from leir.bridge.lower import lower
    from leir.bridge.run import build

    with pytest.raises(BuildError, match="^TVM could not build the program: "):
        build(lower(analysed(MATMUL)), {"kind": "no-such-target"})


# ------------------------------------------------------------ check: TVM against the evaluator

CHECKED = {
    "matmul": MATMUL,
    "softmax": """
in  X: f32[6,10]
out Y: f32[6,10]
tmp M: f32[6]
tmp Z: f32[6]
L^{6}_{i=0} L^{10}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];
L^{6}_{i=0} L^{10}_{j=0} [ Z_{i} = Z_{i} + exp(X_{i,j} - M_{i}); ];
L^{6}_{i=0} L^{10}_{j=0} [ Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i}; ];
""",
    "fused_softmax": """
in  X: f32[6,10]
out Y: f32[6,10]
tmp M: f32[6]
tmp Z: f32[6]
L^{6}_{i=0} [
  L^{10}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];
  L^{10}_{j=0} [ Z_{i} = Z_{i} + exp(X_{i,j} - M_{i}); ];
  L^{10}_{j=0} [ Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i}; ];
];
""",
    "imperfect_split": "in X: f32[100]\nout Y: f32[100]\nL^{4}_{io=0}L^{32}_{ii=0}[Y_{io*32+ii}=X_{io*32+ii}*2 where io*32+ii<100;];",
    "update_after_init": """
in  A: f32[4,3]
in  B: f32[3,5]
out C: f32[4,5]
L^{4}_{i=0} L^{5}_{j=0} [ C_{i,j} = 1.0; ];
L^{4}_{i=0} L^{5}_{j=0} L^{3}_{k=0} [ C_{i,j} = C_{i,j} + A_{i,k}*B_{k,j}; ];
""",
    "f16_into_f32": """
in  X: f16[8,64]
in  W: f16[64,4]
out C: f32[8,4]
L^{8}_{i=0} L^{4}_{j=0} L^{64}_{k=0} [ C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j}; ];
""",
    "i32_sum": "in X: i32[6,50]\nout S: i32[6]\nL^{6}_{i=0} L^{50}_{j=0} [ S_{i} = S_{i} + X_{i,j}*X_{i,j}; ];",
    "i32_max": "in X: i32[6,50]\nout S: i32[6]\nL^{6}_{i=0} L^{50}_{j=0} [ S_{i} = max(S_{i}, X_{i,j} - 20); ];",
    "shared_temporary": "in X: f32[8]\nout Y: f32[8]\ntmp S: f32[8] @s\nL^{8}_{i=0} [ S_{i} = X_{i}*2.0; ];\nL^{8}_{i=0} [ Y_{i} = S_{i} + 1.0; ];",
    "casts": "in X: f32[16]\nout Y: f32[16]\nout H: f16[16]\nL^{16}_{i=0} [ Y_{i} = f16(X_{i}*3.0) + X_{i}; H_{i} = X_{i}*1000.0; ];",
    "if_then_else": "in X: f32[10]\nout Y: f32[10]\nL^{10}_{i=0} [ Y_{i} = if_then_else(X_{i} > 0.0 & i != 3, X_{i}, 0.1*X_{i}); ];",
    "functions": """
in  X: f32[32]
out Y: f32[32]
L^{32}_{i=0} [ Y_{i} = sqrt(abs(X_{i})) + erf(X_{i}) + tanh(X_{i}) + sigmoid(X_{i}) + floor(X_{i}*3.0)
                      + ceil(X_{i}) + abs(X_{i})**1.5 + log(abs(X_{i}) + 1.0) + min(X_{i}, 0.25) + X_{i}%0.3; ];
""",
    "integer_division": "in X: i32[16]\nout Q: i32[16]\nL^{16}_{i=0} [ Q_{i} = X_{i}/3 + X_{i}//3*100 + X_{i}%3*10000; ];",
    "guarded_reduction": "in X: f32[100]\nout S: f32\nL^{4}_{ko=0} L^{32}_{ki=0} [ S = S + X_{ko*32+ki} where ko*32+ki < 100; ];",
    "reduction_over_a_shared_outer_loop": """
in  A: f32[8,16]
out C: f32[16]
out D: f32[16]
L^{8}_{k=0} [
  L^{16}_{i=0} [ C_{i} = C_{i} + A_{k,i}; ];
  L^{16}_{i=0} [ D_{i} = C_{i}*2.0; ];
];
""",
    "data_guard": "in X: f32[10]\nout Y: f32[10]\nL^{10}_{i=0} [ Y_{i} = X_{i} where X_{i} > 0; ];",
    "scan": "in X: f32[8]\nout M: f32[8]\nM_{0} = X_{0};\nL^{7}_{j=1} [ M_{j} = max(M_{j-1}, X_{j}); ];",
    "prefix_sum_through_a_scalar": "in X: f32[8]\nout P: f32[8]\ntmp S: f32\nL^{8}_{j=0} [ S = S + X_{j}; P_{j} = S; ];",
    "nonzero_start": "in X: f32[4]\nout Y: f32[6]\nL^{4}_{i=2} [ Y_{i} = X_{i-2}; ];",
    "parallel_vector_unroll": "in X: f32[8,4,16]\nout Y: f32[8,4,16]\nP^{8}_{i=0} U^{4}_{j=0} V^{16}_{k=0} [ Y_{i,j,k} = X_{i,j,k}*2.0; ];",
    "gpu_style": """
in  X: f32[128,100]
out Y: f32[128,100]
tmp M: f32[128]
B^{4}_{bx=0} B^{32}_{tx=0} L^{100}_{j=0} [ M_{bx*32+tx} = max(M_{bx*32+tx}, X_{bx*32+tx,j}); ];
B^{128}_{bx=0} B^{100}_{tx=0} [ Y_{bx,tx} = X_{bx,tx} - M_{bx}; ];
""",
}


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_tvm_matches_the_evaluator(name):
    pytest.importorskip("tvm")
    result = check(analysed(CHECKED[name]), seed=1)
    assert result.ok, result.summary()


def test_check_reports_every_output_and_the_thread_note():
    pytest.importorskip("tvm")
    result = check(analysed(CHECKED["gpu_style"]))
    assert list(result.comparisons) == ["Y"]
    assert result.notes == ["thread-bound loops bx, tx were run as serial loops on the CPU"]
    assert result.summary().startswith("Y: ok (elementwise)")


def test_a_scalar_input_runs():
    # Regression: scalar inputs were passed as shape (1,) and TVM refused them.
    from leir.bridge.document import load_leir
    from leir.bridge.run import run

    analysis = load_leir("L^{4}_{i} [ Y_{i} = X_{i}*s; ];").analysis
    out = run(analysis, {"X": np.arange(4, dtype="float32"), "s": np.float32(2.0)})
    np.testing.assert_array_equal(out.outputs["Y"], [0, 2, 4, 6])

"""The NumPy evaluator against hand-written NumPy, one semantic rule per test
(docs/leir-syntax.md, "Meaning of an equation"; leir/value_types.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from leir import evaluate as E
from leir.evaluate import EvaluationError, evaluate
from leir.inputs import InputError
from leir.parser import parse
from leir.semantics import analyze


def analysed(text: str):
    result = parse(text)
    analysis = analyze(result.program)
    errors = [d.message for d in result.diagnostics + analysis.diagnostics if d.is_error]
    assert errors == [], errors
    return analysis


def run(text: str, **inputs):
    return evaluate(analysed(text), inputs)


RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.uniform(-1, 1, size=shape).astype(dtype)


MATMUL = """
in  X: f32[16,8]
in  W: f32[8,12]
out C: f32[16,12]

L^{16}_{i=0}
  L^{12}_{j=0}
    L^{8}_{k=0} [
      C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j};
    ];
"""

SOFTMAX = """
in  X: f32[6,10]
out Y: f32[6,10]
tmp M: f32[6]
tmp Z: f32[6]

L^{6}_{i=0} L^{10}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];
L^{6}_{i=0} L^{10}_{j=0} [ Z_{i} = Z_{i} + exp(X_{i,j} - M_{i}); ];
L^{6}_{i=0} L^{10}_{j=0} [ Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i}; ];
"""


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------ reductions


def test_matmul():
    x, w = rand(16, 8), rand(8, 12)
    out = run(MATMUL, X=x, W=w)
    assert out["C"].dtype == np.float32
    np.testing.assert_allclose(out["C"], x.astype(np.float64) @ w, rtol=1e-6, atol=1e-6)


def test_step_tp_one_line_matmul_with_a_thread_loop():
    text = "B^{16}_{tx=0}L^{8}_{a=0}L^{4}_{k=0}[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];"
    x, w = rand(16, 4), rand(4, 8)
    np.testing.assert_allclose(run(text, X=x, W=w)["C"], x @ w, rtol=1e-5, atol=1e-6)


def test_max_reduction_starts_from_minus_infinity():
    text = "in X: f32[4,9]\nout M: f32[4]\nL^{4}_{i=0} L^{9}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];"
    x = -np.abs(rand(4, 9)) - 1  # all negative: an init of 0 would win
    np.testing.assert_array_equal(run(text, X=x)["M"], x.max(axis=1))


def test_min_reduction_starts_from_plus_infinity():
    text = "in X: f32[4,9]\nout M: f32[4]\nL^{4}_{i=0} L^{9}_{j=0} [ M_{i} = min(X_{i,j}, M_{i}); ];"
    x = np.abs(rand(4, 9)) + 1
    np.testing.assert_array_equal(run(text, X=x)["M"], x.min(axis=1))


def test_integer_max_starts_from_the_dtype_minimum():
    text = "in X: i32[3,5]\nout M: i32[3]\nL^{3}_{i=0} L^{5}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];"
    x = -RNG.integers(1, 100, size=(3, 5)).astype(np.int32)
    np.testing.assert_array_equal(run(text, X=x)["M"], x.max(axis=1))


def test_product_reduction_starts_from_one():
    text = "in X: f32[3,4]\nout P: f32[3]\nL^{3}_{i=0} L^{4}_{j=0} [ P_{i} = P_{i}*X_{i,j}; ];"
    x = rand(3, 4)
    np.testing.assert_allclose(run(text, X=x)["P"], x.prod(axis=1), rtol=1e-6)


def test_subtracting_reduction():
    text = "in X: f32[3,4]\nout S: f32[3]\nL^{3}_{i=0} L^{4}_{j=0} [ S_{i} = S_{i} - X_{i,j}; ];"
    x = rand(3, 4)
    np.testing.assert_allclose(run(text, X=x)["S"], -x.sum(axis=1), rtol=1e-6)


def test_integer_sum_wraps_like_32_bit_arithmetic():
    text = "in X: i32[4,6]\nout S: i32[4]\nL^{4}_{i=0} L^{6}_{j=0} [ S_{i} = S_{i} + X_{i,j}; ];"
    x = RNG.integers(2**29, 2**30, size=(4, 6)).astype(np.int32)  # sums overflow int32
    out = run(text, X=x)["S"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x.astype(np.int64).sum(axis=1).astype(np.int32))


def test_update_after_an_explicit_init_accumulates_onto_it():
    text = """
in  A: f32[4,3]
in  B: f32[3,5]
out C: f32[4,5]
L^{4}_{i=0} L^{5}_{j=0} [ C_{i,j} = 1.0; ];
L^{4}_{i=0} L^{5}_{j=0} L^{3}_{k=0} [ C_{i,j} = C_{i,j} + A_{i,k}*B_{k,j}; ];
"""
    a, b = rand(4, 3), rand(3, 5)
    np.testing.assert_allclose(run(text, A=a, B=b)["C"], 1.0 + a @ b, rtol=1e-6)


def test_reduction_into_a_non_injective_index():
    # Y_{i+j} receives X_{i}*W_{j} from every (i, j) with that sum: a convolution.
    # The init is explicit: an implied one would be stored at every (i, j)
    # (the checker's reduction-not-injective).
    text = ("in X: f32[5]\nin W: f32[3]\nout Y: f32[7]\nL^{7}_{t} [ Y_{t} = 0.0; ];\n"
            "L^{5}_{i=0} L^{3}_{j=0} [ Y_{i+j} = Y_{i+j} + X_{i}*W_{j}; ];")
    x, w = rand(5), rand(3)
    np.testing.assert_allclose(run(text, X=x, W=w)["Y"], np.convolve(x, w), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------ program structure


def test_softmax_in_three_units_with_temporaries():
    x = rand(6, 10)
    out = evaluate(analysed(SOFTMAX), {"X": x}, include_temporaries=True)
    np.testing.assert_allclose(out["Y"], softmax(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(out["M"], x.max(axis=1))
    assert sorted(out) == ["M", "Y", "Z"]


def test_fused_nest_runs_its_items_in_order_inside_the_shared_loop():
    text = """
in  X: f32[6,10]
out Y: f32[6,10]
tmp M: f32[6]
tmp Z: f32[6]
L^{6}_{i=0} [
  L^{10}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];
  L^{10}_{j=0} [ Z_{i} = Z_{i} + exp(X_{i,j} - M_{i}); ];
  L^{10}_{j=0} [ Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i}; ];
];
"""
    x = rand(6, 10)
    np.testing.assert_allclose(run(text, X=x)["Y"], softmax(x.astype(np.float64)), rtol=1e-6)


def test_two_equations_sharing_a_loop_nest():
    text = """
in  X: f32[4,5]
out B: f32[4,5]
tmp A: f32[4,5]
L^{4}_{i=0} L^{5}_{j=0} [ A_{i,j} = X_{i,j}*2.0; B_{i,j} = A_{i,j} + X_{i,j}; ];
"""
    x = rand(4, 5)
    np.testing.assert_allclose(run(text, X=x)["B"], 3 * x, rtol=1e-6)


def test_items_that_share_state_run_iteration_by_iteration():
    # P_{j} reads S after the j-th accumulation: a prefix sum, not the total.
    text = "in X: f32[8]\nout P: f32[8]\ntmp S: f32\nL^{8}_{j=0} [ S = S + X_{j}; P_{j} = S; ];"
    x = rand(8)
    np.testing.assert_allclose(run(text, X=x)["P"], np.cumsum(x.astype(np.float64)), rtol=1e-6)


def test_a_scan_reading_the_previous_element_runs_in_order():
    text = "in X: f32[8]\nout M: f32[8]\nM_{0} = X_{0};\nL^{7}_{j=1} [ M_{j} = max(M_{j-1}, X_{j}); ];"
    x = rand(8)
    np.testing.assert_array_equal(run(text, X=x)["M"], np.maximum.accumulate(x))


@pytest.mark.parametrize("axis", [0, 1])
def test_a_scan_along_either_loop_of_a_grid(axis):
    if axis == 1:
        scan = "L^{4}_{i=0} L^{5}_{j=1} [ M_{i,j} = M_{i,j-1} + X_{i,j}; ];"
        init = "L^{4}_{i=0} [ M_{i,0} = X_{i,0}; ];"
    else:
        scan = "L^{3}_{i=1} L^{6}_{j=0} [ M_{i,j} = M_{i-1,j} + X_{i,j}; ];"
        init = "L^{6}_{j=0} [ M_{0,j} = X_{0,j}; ];"
    shape = "[4,6]"
    text = f"in X: f32{shape}\nout M: f32{shape}\n{init}\n{scan}"
    x = rand(4, 6)
    np.testing.assert_allclose(run(text, X=x)["M"], np.cumsum(x.astype(np.float64), axis=axis), rtol=1e-6, atol=1e-6)


def test_a_repeated_write_keeps_the_last_iteration():
    text = "in X: f32[4,8]\nout Y: f32[4]\nL^{4}_{i=0} L^{8}_{j=0} [ Y_{i} = X_{i,j}; ];"
    x = rand(4, 8)
    np.testing.assert_array_equal(run(text, X=x)["Y"], x[:, -1])


def test_nonzero_loop_start():
    text = "in X: f32[4]\nout Y: f32[6]\nL^{4}_{i=2} [ Y_{i} = X_{i-2}; ];"
    x = rand(4)
    np.testing.assert_array_equal(run(text, X=x)["Y"], np.concatenate([[0, 0], x]).astype(np.float32))


def test_bare_equation_on_scalars():
    text = "in X: f32[4]\nout s: f32\ns = X_{0} + X_{3};"
    x = rand(4)
    out = run(text, X=x)["s"]
    assert out.shape == ()
    assert out == np.float32(x[0] + x[3])


def test_large_iteration_spaces_are_cut_into_blocks(monkeypatch):
    x, w = rand(16, 8), rand(8, 12)
    whole = run(MATMUL, X=x, W=w)["C"]
    monkeypatch.setattr(E, "MAX_POINTS", 7)
    np.testing.assert_allclose(run(MATMUL, X=x, W=w)["C"], whole, rtol=1e-6)


# ------------------------------------------------------------ guards


def test_guard_of_an_imperfect_split():
    text = "in X: f32[100]\nout Y: f32[100]\nL^{4}_{io=0}L^{32}_{ii=0}[Y_{io*32+ii}=X_{io*32+ii}*2 where io*32+ii<100;];"
    x = rand(100)
    np.testing.assert_array_equal(run(text, X=x)["Y"], x * 2)


def test_guard_on_data():
    text = "in X: f32[10]\nout Y: f32[10]\nL^{10}_{i=0} [ Y_{i} = X_{i} where X_{i} > 0; ];"
    x = rand(10)
    np.testing.assert_array_equal(run(text, X=x)["Y"], np.where(x > 0, x, 0))


def test_guarded_reduction_only_sums_where_the_guard_holds():
    text = "in X: f32[100]\nout S: f32\nL^{4}_{ko=0} L^{32}_{ki=0} [ S = S + X_{ko*32+ki} where ko*32+ki < 100; ];"
    x = rand(100)
    np.testing.assert_allclose(run(text, X=x)["S"], x.astype(np.float64).sum(), rtol=1e-6)


# ------------------------------------------------------------ types


def test_f16_inputs_accumulate_in_f32():
    text = """
in  X: f16[8,64]
in  W: f16[64,4]
out C: f32[8,4]
L^{8}_{i=0} L^{4}_{j=0} L^{64}_{k=0} [ C_{i,j} = C_{i,j} + f32(X_{i,k})*f32(W_{k,j}); ];
"""
    x, w = rand(8, 64, dtype=np.float16), rand(64, 4, dtype=np.float16)
    out = run(text, X=x, W=w)["C"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_reads_of_another_dtype_are_cast_to_the_written_one():
    text = "in X: f32[6]\nout Y: f16[6]\nL^{6}_{i=0} [ Y_{i} = X_{i}; ];"
    x = rand(6) * 1000
    np.testing.assert_array_equal(run(text, X=x)["Y"], x.astype(np.float16))


def test_a_cast_computes_its_argument_in_its_dtype():
    text = "in X: f32[6]\nout Y: f32[6]\nL^{6}_{i=0} [ Y_{i} = f16(X_{i}*3.0) + X_{i}; ];"
    x = rand(6)
    # Inside f16(...) the read is converted to f16 too, then the product rounded to f16.
    expected = (x.astype(np.float16).astype(np.float64) * 3).astype(np.float16).astype(np.float64) + x
    np.testing.assert_allclose(run(text, X=x)["Y"], expected.astype(np.float32), rtol=1e-7)


def test_reads_into_an_integer_equation_truncate_before_the_arithmetic():
    text = "in X: f32[6]\nout Y: i32[6]\nout Z: i32[6]\nL^{6}_{i=0} [ Y_{i} = X_{i}*10.0; Z_{i} = f32(X_{i}*10.0); ];"
    x = np.array([-2.5, -0.99, 0.0, 0.49, 1.5, 3.99], dtype=np.float32)
    out = run(text, X=x)
    np.testing.assert_array_equal(out["Y"], np.trunc(x).astype(np.int32) * 10)
    np.testing.assert_array_equal(out["Z"], np.trunc(x * np.float32(10)).astype(np.int32))


def test_integer_division_truncates_and_floor_division_floors():
    text = """
in  X: i32[6]
out Q: i32[6]
out F: i32[6]
out R: i32[6]
L^{6}_{i=0} [ Q_{i} = X_{i}/3; F_{i} = X_{i}//3; R_{i} = X_{i}%3; ];
"""
    x = np.array([-7, -6, -1, 0, 5, 7], dtype=np.int32)
    out = run(text, X=x)
    np.testing.assert_array_equal(out["Q"], [-2, -2, 0, 0, 1, 2])
    np.testing.assert_array_equal(out["F"], x // 3)
    np.testing.assert_array_equal(out["R"], x % 3)


def test_float_floor_division_and_modulo():
    text = "in X: f32[5]\nout F: f32[5]\nout R: f32[5]\nL^{5}_{i=0} [ F_{i} = X_{i}//0.5; R_{i} = X_{i}%0.75; ];"
    x = np.array([-1.3, -0.2, 0.0, 0.6, 1.9], dtype=np.float32)
    out = run(text, X=x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out["F"], np.floor(x64 / 0.5))
    np.testing.assert_allclose(out["R"], x64 - np.floor(x64 / 0.75) * 0.75, rtol=1e-6, atol=1e-7)


def test_loop_variables_in_values_are_integer_arithmetic():
    text = "in X: f32[6]\nout Y: f32[6]\nout H: f32[6]\nL^{6}_{i=0} [ Y_{i} = X_{i}*(i % 2); H_{i} = i // 2 + i/4; ];"
    x = rand(6)
    out = run(text, X=x)
    i = np.arange(6)
    np.testing.assert_allclose(out["Y"], x * (i % 2))
    np.testing.assert_allclose(out["H"], i // 2 + i / 4)


def test_if_then_else_and_comparisons():
    text = "in X: f32[10]\nout Y: f32[10]\nL^{10}_{i=0} [ Y_{i} = if_then_else(X_{i} > 0 & i != 3, X_{i}, 0.1*X_{i}); ];"
    x = rand(10)
    expected = np.where((x > 0) & (np.arange(10) != 3), x, np.float32(0.1) * x.astype(np.float64))
    np.testing.assert_allclose(run(text, X=x)["Y"], expected.astype(np.float32), rtol=1e-7)


def test_functions():
    text = """
in  X: f32[7]
out Y: f32[7]
L^{7}_{i=0} [ Y_{i} = sqrt(abs(X_{i})) + rsqrt(abs(X_{i}) + 1.0) + erf(X_{i}) + tanh(X_{i}) + sigmoid(X_{i})
                      + floor(X_{i}*3.0) + ceil(X_{i}) + pow(abs(X_{i}), 1.5) + abs(X_{i})**0.5 + log(abs(X_{i}) + 1.0)
                      + min(X_{i}, 0.25) + exp(-X_{i}); ];
"""
    x = rand(7).astype(np.float64)
    from scipy.special import erf

    a = np.abs(x)
    expected = (np.sqrt(a) + 1 / np.sqrt(a + 1) + erf(x) + np.tanh(x) + 1 / (1 + np.exp(-x)) + np.floor(x * 3)
                + np.ceil(x) + a ** 1.5 + a ** 0.5 + np.log(a + 1) + np.minimum(x, 0.25) + np.exp(-x))
    np.testing.assert_allclose(run(text, X=x.astype(np.float32))["Y"], expected, rtol=2e-6)


def test_bool_output_from_a_comparison():
    text = "in X: f32[6]\nout B: bool[6]\nL^{6}_{i=0} [ B_{i} = X_{i} > 0.5 | !(X_{i} > -0.5); ];"
    x = rand(6)
    np.testing.assert_array_equal(run(text, X=x)["B"], (x > 0.5) | ~(x > -0.5))


def test_shared_scope_temporary_is_ordinary_memory():
    text = "in X: f32[8]\nout Y: f32[8]\ntmp S: f32[8] @s\nL^{8}_{i=0} [ S_{i} = X_{i}*2.0; ];\nL^{8}_{i=0} [ Y_{i} = S_{i} + 1.0; ];"
    x = rand(8)
    np.testing.assert_allclose(run(text, X=x)["Y"], x * 2 + 1)


# ------------------------------------------------------------ errors


def test_missing_input_names_it():
    with pytest.raises(InputError, match=r"^input W: missing \(expected \(8, 12\) f32\)$"):
        run(MATMUL, X=rand(16, 8))


def test_misshapen_input_names_it_with_both_shapes():
    text = "in X: f32[128,64]\nout Y: f32[128,64]\nL^{128}_{i=0} L^{64}_{j=0} [ Y_{i,j} = X_{i,j}; ];"
    with pytest.raises(InputError) as info:
        run(text, X=np.zeros(64))
    assert str(info.value) == "input X: expected shape (128, 64) f32, got (64,) float64"


def test_input_of_the_wrong_kind_is_refused_and_a_wider_float_converted():
    text = "in X: i32[3]\nout Y: i32[3]\nL^{3}_{i=0} [ Y_{i} = X_{i}; ];"
    with pytest.raises(InputError, match="input X: expected .* i32, got .* float64"):
        run(text, X=np.zeros(3))
    text = "in X: f32[3]\nout Y: f32[3]\nL^{3}_{i=0} [ Y_{i} = X_{i}; ];"
    assert run(text, X=np.ones(3))["Y"].dtype == np.float32


def test_unknown_input_and_an_output_given_as_input():
    with pytest.raises(InputError, match="unknown input Q"):
        run(MATMUL, X=rand(16, 8), W=rand(8, 12), Q=rand(1))
    with pytest.raises(InputError, match="C is an output, not an input"):
        run(MATMUL, X=rand(16, 8), W=rand(8, 12), C=rand(16, 12))


def test_program_with_errors_is_refused():
    analysis = analyze(parse("in X: f32[4]\nout Y: f32[4]\nL^{4}_{i=0} [ Y_{i} = X_{i+1}; ];").program)
    assert not analysis.ok
    with pytest.raises(EvaluationError, match="^the program has errors: "):
        evaluate(analysis, {"X": rand(4)})


def test_float_function_in_an_integer_equation_is_refused():
    text = "in X: i32[3]\nout Y: i32[3]\nL^{3}_{i=0} [ Y_{i} = exp(X_{i}); ];"
    analysis = analyze(parse(text).program)
    assert [d.code for d in analysis.diagnostics if d.is_error] == ["type-rule"]
    with pytest.raises(EvaluationError, match="exp computes in floating point.*i32"):
        evaluate(analysis, {"X": np.zeros(3, np.int32)})
    text = "in X: i32[3]\nout Y: i32[3]\nL^{3}_{i=0} [ Y_{i} = f32(exp(X_{i})); ];"
    np.testing.assert_array_equal(run(text, X=np.zeros(3, np.int32))["Y"], [1, 1, 1])


def test_non_integer_literal_in_an_integer_equation_is_refused():
    text = "in X: i32[3]\nout Y: i32[3]\nL^{3}_{i=0} [ Y_{i} = X_{i}*0.5; ];"
    analysis = analyze(parse(text).program)
    [d] = [d for d in analysis.diagnostics if d.is_error]
    assert d.code == "type-rule" and text[d.span.start:d.span.end] == "0.5"
    with pytest.raises(EvaluationError, match="literal 0.5 in an i32 computation"):
        evaluate(analysis, {"X": np.zeros(3, np.int32)})


def test_out_of_bounds_index_behind_a_data_dependent_guard():
    # The analysis cannot know which iterations the guard lets through.
    text = "in X: f32[10]\nout Y: f32[10]\nL^{10}_{i=0} [ Y_{i} = X_{(i+5)%16} where X_{i} > 0; ];"
    x = np.ones(10, np.float32)
    with pytest.raises(EvaluationError, match=r"X_\{\(i\+5\)%16\} goes outside X: index 0 takes the value 14"):
        run(text, X=x)
    x[5:] = -1
    np.testing.assert_array_equal(run(text, X=x)["Y"], [-1] * 5 + [0] * 5)


def test_the_evaluator_does_not_import_tvm():
    code = ("import sys; from leir.evaluate import evaluate; from leir.bridge.run import check; from leir.bridge.lower import lower; "
            "assert 'tvm' not in sys.modules, 'tvm imported'")
    subprocess.run([sys.executable, "-c", code], check=True)

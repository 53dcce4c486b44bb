"""What a measurement is compared with: timing statistics, the cost of a
program and its roofline, the device's peaks, and the vendor reference."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from leir.bridge.document import load_leir
from leir.measure import device as D
from leir.measure import timing as T
from leir.measure import vendor as V


def analysis_of(text: str):
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics]
    return doc.analysis


def example(examples_dir, stem: str):
    return analysis_of((examples_dir / f"{stem}.leir").read_text())


MATMUL = "L^{16}_{i} L^{12}_{j} L^{8}_{k} [ C_{i,j} += X_{i,k}*W_{k,j}; ];"


# ------------------------------------------------------------ timing


def test_summary_of_runs():
    s = T.summarize([0.002, 0.001, 0.003, 0.0011, 0.0012], number=50)
    assert (s.median_ms, s.min_ms, s.max_ms, s.runs, s.number) == (1.2, 1.0, 3.0, 5, 50)
    assert s.spread == pytest.approx((3.0 - 1.0) / 1.2)
    assert s.mean_ms == pytest.approx(1.66)


def test_calls_per_run_make_a_run_last_the_minimum():
    assert T.calls_per_run(0.001, min_run_ms=10) == 10
    assert T.calls_per_run(0.0003, min_run_ms=10) == 34
    assert T.calls_per_run(0.5, min_run_ms=10) == 1
    assert T.calls_per_run(0.0, min_run_ms=10) == T.MAX_CALLS_PER_RUN


class ScriptedModule:
    """A stand-in for a TVM module: each ``time_evaluator`` call hands out the
    next scripted per-call seconds, ``repeat`` of them; records its calls."""

    def __init__(self, seconds):
        self.seconds = list(seconds)
        self.evaluators = []

    def time_evaluator(self, function, device, number, repeat, min_repeat_ms):
        self.evaluators.append((number, repeat))

        def run(*args):
            results, self.seconds = self.seconds[:repeat], self.seconds[repeat:]
            return SimpleNamespace(results=results)

        return run


def test_one_slow_calibration_call_does_not_shorten_the_runs():
    # The first call was interrupted (8 ms); the kernel takes 1 ms.
    module = ScriptedModule([0.008, 0.001, 0.0012] + [0.001] * 3)
    seconds, number = T.time_module(module, None, [], repeat=3, min_run_ms=10)
    assert number == 10 and module.evaluators == [(1, 1), (1, 2), (10, 3)]
    assert seconds == [0.001] * 3


def test_one_interrupted_call_longer_than_a_run_does_not_make_runs_of_one_call():
    # 12 ms for a 1 ms kernel: alone it would give runs of a single call.
    module = ScriptedModule([0.012, 0.001, 0.0011] + [0.001] * 3)
    _, number = T.time_module(module, None, [], repeat=3, min_run_ms=10)
    assert number == 10 and module.evaluators == [(1, 1), (1, 2), (10, 3)]


def test_a_slow_kernel_is_calibrated_once():
    module = ScriptedModule([0.2] + [0.2] * 3)
    _, number = T.time_module(module, None, [], repeat=3, min_run_ms=10)
    assert number == 1 and module.evaluators == [(1, 1), (1, 3)]


def test_time_callable_is_not_fooled_by_one_slow_first_call(monkeypatch):
    clock = {"now": 0.0, "calls": 0}

    def call():  # the first call takes 20 ms (a thread pool starting), later ones 1 ms
        clock["calls"] += 1
        clock["now"] += 0.020 if clock["calls"] == 1 else 0.001

    monkeypatch.setattr(T.time, "perf_counter", lambda: clock["now"])
    seconds, number = T.time_callable(call, repeat=2, min_run_ms=10)
    assert number == 10 and seconds == pytest.approx([0.001, 0.001])


def test_time_callable_times_each_run_for_at_least_the_minimum():
    calls = []
    seconds, number = T.time_callable(lambda: calls.append(1), repeat=3, min_run_ms=1.0)
    # Three calibration calls (each far shorter than a run), then the runs.
    assert len(seconds) == 3 and number >= 1 and len(calls) == 3 + 3 * number


# ------------------------------------------------------------ cost and roofline


def test_cost_of_a_matmul_is_2mnk_and_its_compulsory_bytes():
    cost = D.program_cost(analysis_of(MATMUL))
    assert cost.flops == 2 * 16 * 12 * 8
    assert cost.bytes_moved == 4 * (16 * 8 + 8 * 12 + 16 * 12)


def test_cost_counts_operators_and_functions_but_not_casts_or_indices():
    a = analysis_of("in X: f16[8]\nL^{8}_{i} [ Y_{i} = exp(f32(X_{i})) + Z_{i+0}*2; ];")
    # exp, +, *: the cast and the index arithmetic count nothing.
    assert D.program_cost(a).flops == 8 * 3
    assert D.program_cost(a).bytes_moved == 8 * 2 + 8 * 4 + 8 * 4  # X f16, Z f32, Y f32


def test_cost_ignores_temporaries():
    a = analysis_of("L^{8}_{i} [ M_{i} = X_{i}*2; Y_{i} = M_{i} + 1; ];")
    assert D.program_cost(a).bytes_moved == 2 * 8 * 4


def test_roofline_is_bound_by_compute_or_memory():
    peaks = D.DevicePeaks("cpu0", flops_per_s=1e9, bytes_per_s=1e9, measured_at=0, method="", library="")
    assert D.roofline_ms(D.ProgramCost(flops=2_000_000, bytes_moved=1000), peaks) == pytest.approx(2.0)
    assert D.roofline_ms(D.ProgramCost(flops=10, bytes_moved=3_000_000), peaks) == pytest.approx(3.0)


def test_dtype_bits():
    assert [D.dtype_bits(d) for d in ("f32", "f16", "bf16", "f8e4m3fn", "i4", "u64", "bool")] == [32, 16, 16, 8, 4, 64, 8]


# ------------------------------------------------------------ peaks


def test_peaks_are_saved_per_device_and_read_back(tmp_path):
    a = D.DevicePeaks("cpu A", 1e11, 2e10, 1.0, "m", "numpy")
    b = D.DevicePeaks("gpu B", 1e14, 3e12, 2.0, "m", "torch")
    D.save_peaks(a, tmp_path)
    D.save_peaks(b, tmp_path)
    assert D.load_peaks("cpu A", tmp_path) == a and D.load_peaks("gpu B", tmp_path) == b
    assert D.load_peaks("cpu C", tmp_path) is None


def test_a_damaged_peaks_file_reads_as_unknown(tmp_path):
    (tmp_path / D.PEAKS_FILE).write_text("{not json")
    assert D.load_peaks("cpu A", tmp_path) is None


def test_measuring_the_cpu_peaks_gives_plausible_figures():
    peaks = D.measure_cpu_peaks("cpu0", quick=True)
    assert 1e8 < peaks.flops_per_s < 1e14 and 1e8 < peaks.bytes_per_s < 1e13
    assert "numpy" in peaks.library and "matmul" in peaks.method


def test_the_cpu_name_says_how_many_threads_kernels_run_on(monkeypatch):
    import os

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    cpus = len(os.sched_getaffinity(0))
    assert D.kernel_threads() == cpus
    assert D.cpu_name().endswith(f"({cpus} thread{'' if cpus == 1 else 's'})")
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    assert D.cpu_name().endswith("(1 thread)") and D.kernel_threads() == 1


# ------------------------------------------------------------ vendor references


@pytest.mark.parametrize("text, subscripts", [
    (MATMUL, "ik,kj->ij"),
    ("L^{4}_{b} L^{6}_{i} L^{5}_{j} L^{3}_{k} [ C_{b,i,j} += X_{b,i,k}*Y_{b,k,j}; ];", "bik,bkj->bij"),
    ("L^{6}_{i} L^{3}_{k} [ y_{i} += A_{i,k}*x_{k}; ];", "ik,k->i"),
    ("L^{6}_{ii} L^{3}_{kk} [ y_{ii} += A_{kk,ii}*x_{kk}; ];", "ba,b->a"),
])
def test_contractions_are_recognised(text, subscripts):
    c = V.recognise_contraction(analysis_of(text))
    assert c is not None and c.subscripts == subscripts


@pytest.mark.parametrize("text", [
    "L^{6}_{i} L^{3}_{k} [ y_{i} -= A_{i,k}*x_{k}; ];",  # not a sum of products
    "L^{6}_{i} L^{3}_{k} [ y_{i} += A_{i,k}*x_{k}*2; ];",  # three factors
    "L^{6}_{i} L^{3}_{k} L^{2}_{r} [ y_{i} += A_{i,k}*x_{k}; ];",  # r repeats the accumulation
    "L^{2}_{io} L^{3}_{ii} L^{3}_{k} [ y_{io*3+ii} += A_{io*3+ii,k}*x_{k}; ];",  # a split loop
    "L^{6}_{i} L^{3}_{k} [ y_{i} += A_{i,k}*x_{k} where i < 4; ];",  # guarded
    "L^{6}_{i} [ M_{i} = X_{i}; ]; L^{6}_{i} L^{3}_{k} [ y_{i} += M_{i}*x_{k}; ];",  # more than one equation
    "in A: i32[6,3]\nin x: i32[3]\nL^{6}_{i} L^{3}_{k} [ y_{i} += A_{i,k}*x_{k}; ];",  # integers
])
def test_other_programs_are_not_contractions(text):
    assert V.recognise_contraction(analysis_of(text)) is None


def test_vendor_of_a_contraction_is_blas_through_einsum():
    v = V.vendor_latency(analysis_of(MATMUL), repeat=3, min_run_ms=1.0)
    assert v.kind == "blas-contraction" and v.what.startswith("np.einsum('ik,kj->ij', X, W")
    assert v.runs == 3 and v.min_ms <= v.median_ms <= v.max_ms
    assert v.library.startswith("numpy ")


def test_vendor_of_f16_inputs_converts_them_first(examples_dir):
    v = V.vendor_latency(example(examples_dir, "matmul_f16"), repeat=3, min_run_ms=1.0)
    assert v.kind == "blas-contraction" and v.what.endswith("on inputs converted to f32")


def test_vendor_of_a_bundled_example_is_its_numpy_reference(examples_dir):
    v = V.vendor_latency(example(examples_dir, "softmax"), repeat=3, min_run_ms=1.0)
    assert v.kind == "bundled-reference" and v.what.startswith("examples/references.py:softmax")


def test_a_bundled_example_is_recognised_whatever_its_layout(examples_dir):
    text = (examples_dir / "layernorm.leir").read_text()
    relaid = "# reformatted\n" + text.replace("\n  ", "\n ")
    assert V.bundled_reference(analysis_of(relaid))[0] == "layernorm"


def test_no_vendor_for_other_workloads_or_off_the_cpu():
    assert V.vendor_latency(analysis_of("L^{8}_{i} [ Y_{i} = X_{i}*3 + 1; ];"), repeat=1, min_run_ms=1.0) is None
    assert V.vendor_latency(analysis_of(MATMUL), device="cuda") is None


def test_blas_description_names_the_library_and_its_threads(monkeypatch):
    info = V.blas_info()
    assert info["numpy"] and info["library"]
    text = V.blas_description()
    assert text.startswith(f"numpy {info['numpy']}, ")
    if info["threads"]:
        assert f"{info['threads']} thread" in text
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # reported, not applied: OpenBLAS is already loaded
    assert "OPENBLAS_CORETYPE=Haswell" in V.blas_description()


def test_vendor_fraction_and_roofline_fraction():
    from leir.measure.measurement import Measurement

    m = Measurement(2.0, 1.9, 2.2, 7, 0.15, "llvm", "cpu0", True, {}, False, 0.5, None, roofline_ms=0.1)
    assert m.vendor_fraction == 0.25 and math.isclose(m.roofline_fraction, 0.05)


def test_blas_info_describes_numpys_openblas_even_when_scipy_loaded_its_own():
    import numpy as np

    pytest.importorskip("scipy.linalg")  # loads SciPy's own OpenBLAS
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    if "openblas" not in blas["name"]:
        pytest.skip(f"NumPy uses {blas['name']}")
    info = V.blas_info()
    assert info["library"].startswith("OpenBLAS ") and info["threads"] and info["core"]

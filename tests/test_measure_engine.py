"""The measurement engine: worker processes that build and time, and what
happens when a kernel crashes, hangs, runs out of memory or computes the
wrong thing; cancellation, progress, the queue bound, the cache in front.

Crashes, hangs and wrong results are injected with the worker's test hook
(``MeasurementEngine._submit_with_fault``, see ``leir.measure.worker``); the
out-of-memory case is also a real program too large for the cap.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError

import pytest

from leir.errors import LeirError
from leir.measure import EngineBusy, EngineClosed, MeasurementEngine
from leir.measure.device import gpu_name

pytestmark = pytest.mark.slow

CAP_GIB = 4


def matmul(m: int, n: int = 12, k: int = 8) -> str:
    return f"L^{{{m}}}_{{i}} L^{{{n}}}_{{j}} L^{{{k}}}_{{k}} [ C_{{i,j}} += X_{{i,k}}*W_{{k,j}}; ];"


def scale(n: int) -> str:
    return f"L^{{{n}}}_{{i}} [ Y_{{i}} = X_{{i}}*3 + 1; ];"


def wait_for_phase(future, phase: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while future.phase != phase and not future.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert future.phase == phase, future.phase


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("measurements")


@pytest.fixture(scope="module")
def engine(cache_dir):
    # The memory budget (leir.footprint) would refuse the program the cap is
    # tested with before any worker sees it: these tests are about the cap.
    with MeasurementEngine("llvm", workers=2, cache=cache_dir, repeat=3, min_run_ms=2.0, timeout_s=30,
                           memory_cap_gib=CAP_GIB, memory_budget_mb=10**6) as e:
        yield e


def assert_runs_next_job(engine, n: int) -> None:
    m = engine.measure(scale(n), use_cache=False)
    assert m.error is None and m.verified, m.error


# ------------------------------------------------------------ measuring and caching


def test_measures_verifies_and_compares_with_the_vendor(engine):
    m = engine.measure(matmul(16), label="matmul")
    assert m.error is None, m.error
    assert (m.verified, m.cached, m.target, m.runs, m.label) == (True, False, "llvm", 3, "matmul")
    assert m.min_ms <= m.median_ms <= m.max_ms and m.spread >= 0 and m.number >= 1
    assert m.comparisons["C"].ok
    assert m.vendor.kind == "blas-contraction" and m.vendor_ms == m.vendor.median_ms
    assert m.flops == 2 * 16 * 12 * 8


def test_the_second_request_is_a_cache_hit(engine):
    first = engine.measure(matmul(24))
    future = engine.submit(matmul(24))
    assert future.done()  # answered before any worker is involved
    hit = future.result()
    assert hit.cached and (hit.median_ms, hit.key, hit.vendor_ms) == (first.median_ms, first.key, first.vendor_ms)
    assert not engine.measure(matmul(24), use_cache=False).cached


def test_a_kernel_checked_against_a_reference_program_on_every_seed(engine):
    from leir.bridge.document import load_leir
    from leir.inputs import SEEDS
    from leir.measure.key import reference_key

    # The same values computed another way: checked against the reference's
    # NumPy evaluation on each seed's inputs (drawn for the reference).
    reference = "L^{64}_{i} [ Y_{i} = X_{i}*3 + 1; ];"
    split = "L^{8}_{io} L^{8}_{ii} [ Y_{io*8+ii} = 1 + X_{io*8+ii}*3; ];"
    m = engine.measure(split, reference=reference, use_cache=False)
    assert m.error is None and m.verified, m.error
    assert m.checked_against == reference_key(load_leir(reference).analysis, SEEDS)
    assert m.comparisons["Y"].ok and m.comparisons["Y"].criterion
    assert engine.submit(split).result().checked_against == m.checked_against  # kept in the cache
    # Not the reference's values: a wrong result, whatever the program's own
    # evaluation says; nothing is timed or cached.
    other = "L^{64}_{i} [ Y_{i} = X_{i}*3 + 2; ];"
    wrong = engine.measure(other, reference=reference)
    assert wrong.median_ms is None and not wrong.verified
    assert "wrong result: Y differs from the reference program's NumPy evaluation" in wrong.error
    assert not wrong.comparisons["Y"].ok
    assert engine.measure(other).error is None  # on its own it is a correct kernel
    # A program that cannot be compared with the reference says why.
    renamed = engine.measure("L^{64}_{i} [ Z_{i} = X_{i}*3 + 1; ];", reference=reference, use_cache=False)
    assert "outputs" in renamed.error and renamed.median_ms is None


def test_the_reference_check_runs_every_seed_not_only_the_timing_inputs(engine):
    # Equal to the reference wherever X <= 1.5: on seed 0's inputs (uniform
    # in [-1, 1)), on which it is timed, but not on the last seed's, integers
    # from -3 to 3.
    reference = "L^{64}_{i} [ Y_{i} = X_{i}*3 + 1; ];"
    differs = "L^{64}_{i} [ Y_{i} = X_{i}*3 + 1 + if_then_else(X_{i} > 1.5, 5.0, 0.0); ];"
    assert engine.measure(differs, reference=reference, seeds=(0,), use_cache=False).error is None
    m = engine.measure(differs, reference=reference, use_cache=False)
    assert m.median_ms is None and "wrong result" in m.error, m.error


def test_a_cache_hit_starts_no_worker(engine, cache_dir):
    engine.measure(matmul(28))
    with MeasurementEngine("llvm", cache=cache_dir, repeat=3) as other:
        assert other.measure(matmul(28)).cached
        assert other._thread is None
    with MeasurementEngine("llvm", cache=cache_dir, repeat=10) as other:
        # Fewer runs than asked for is not an answer.
        assert other.submit(matmul(28)).cancel()


def test_the_vendor_reference_is_the_workloads(engine):
    split = ("L^{4}_{io} L^{4}_{ii} L^{12}_{j} L^{8}_{k} [ C_{io*4+ii,j} += X_{io*4+ii,k}*W_{k,j}; ];")
    assert engine.measure(split).vendor is None  # a split program is no longer a plain contraction
    m = engine.measure(split, workload=matmul(16), use_cache=False)
    assert m.error is None and m.vendor.kind == "blas-contraction"


def test_workers_run_kernels_on_the_threads_the_device_name_says(engine):
    # TVM's default would be half the CPUs (one on two vCPUs), pinned to CPU 0.
    from leir.bridge.targets import kernel_threads

    assert engine.wait_ready(120)
    assert engine.device.endswith(f"({kernel_threads()} thread{'' if kernel_threads() == 1 else 's'})")
    assert [w.info["threads"] for w in engine._pool] == [kernel_threads()] * engine.workers


def test_a_program_with_errors_is_refused_at_submit(engine):
    with pytest.raises(LeirError, match="the program has errors"):
        engine.submit("L^{4}_{i} [ Y_{i} = X_{j}; ];")


# ------------------------------------------------------------ paired comparison


def reordered(m: int, n: int = 12, k: int = 8) -> str:
    return f"L^{{{m}}}_{{i}} L^{{{k}}}_{{k}} L^{{{n}}}_{{j}} [ C_{{i,j}} += X_{{i,k}}*W_{{k,j}}; ];"


def test_compare_times_both_programs_turn_about_from_fresh_builds(engine):
    cached = engine.measure(matmul(30))
    p = engine.compare(matmul(30), reordered(30), rounds=2, label="reorder").result(timeout=120)
    assert p.ok, p.error
    assert p.rounds == 2 and len(p.before_rounds_ms) == len(p.after_rounds_ms) == 2
    for side in (p.before, p.after):
        assert side.verified and not side.cached and side.runs == 2 * 3 and side.label == "reorder"
        assert side.min_ms <= side.median_ms <= side.max_ms
        assert min(side.results_ms) == side.min_ms
    assert p.before.key == cached.key and p.before.measured_at > cached.measured_at  # timed again, not looked up
    assert not engine.measure(reordered(30)).cached  # a comparison is not stored


def test_compare_of_a_wrong_or_crashing_kernel_is_a_failure(engine):
    wrong = engine._submit_with_fault(matmul(31), "wrong", paired=(reordered(31), 2)).result(timeout=60)
    assert not wrong.ok and wrong.error.startswith("wrong result: C differs from the reference")
    crash = engine._submit_with_fault(matmul(32), "crash", paired=(reordered(32), 2)).result(timeout=60)
    assert crash.error == "crashed (signal 11, SIGSEGV) while timing"
    assert_runs_next_job(engine, 111)


def test_compare_needs_a_round(engine):
    with pytest.raises(LeirError, match="at least one round"):
        engine.compare(matmul(8), reordered(8), rounds=0)


# ------------------------------------------------------------ isolation


def test_a_crashing_kernel_fails_its_job_and_the_next_job_runs(engine):
    m = engine._submit_with_fault(matmul(17), "crash").result(timeout=60)
    assert m.error == "crashed (signal 11, SIGSEGV) while timing"
    assert (m.median_ms, m.verified) == (None, False)
    assert_runs_next_job(engine, 101)


def test_a_hanging_kernel_times_out_and_the_next_job_runs(engine):
    start = time.monotonic()
    m = engine._submit_with_fault(matmul(18), "hang", timeout_s=2).result(timeout=60)
    assert m.error == "timed out after 2 s while timing"
    assert time.monotonic() - start < 30
    assert_runs_next_job(engine, 102)


def test_a_program_too_large_for_the_memory_cap_fails_clearly(engine):
    # 30,000 x 30,000 f32 inputs: 3.6 GB, 7.2 GB as the float64 draw.
    m = engine.measure("L^{30000}_{i} L^{30000}_{j} [ Y_{i,j} = X_{i,j}*2; ];", use_cache=False)
    assert m.error == f"out of memory (cap {CAP_GIB} GiB) while building"
    assert_runs_next_job(engine, 103)


def test_a_kernel_exhausting_memory_fails_clearly(engine):
    m = engine._submit_with_fault(matmul(19), "oom").result(timeout=60)
    assert m.error == f"out of memory (cap {CAP_GIB} GiB) while timing"
    assert_runs_next_job(engine, 104)


def test_a_wrong_kernel_has_no_latency(engine):
    m = engine._submit_with_fault(matmul(20), "wrong").result(timeout=60)
    assert m.error.startswith("wrong result: C differs from the reference (240 of 240 elements outside tolerance")
    assert (m.median_ms, m.verified, m.comparisons["C"].ok) == (None, False, False)
    assert engine.measure(matmul(20)).error is None  # the failure was not cached


def test_a_program_tvm_cannot_take_fails_with_the_reason(engine):
    m = engine.measure("in X: i4[8]\nL^{8}_{i} [ Y_{i} = i32(X_{i}); ];")
    assert m.error.startswith("cannot run: X is i4"), m.error


@pytest.mark.skipif(gpu_name() is not None, reason="this machine has a GPU")
def test_workers_that_cannot_start_fail_the_jobs_with_the_reason(tmp_path):
    with MeasurementEngine("cuda", cache=tmp_path, workers=1) as e:
        m = e.measure(matmul(8))
    assert m.error == "the measurement worker could not start: no CUDA GPU is available on this machine"


# ------------------------------------------------------------ cancelling, progress, the queue


def test_cancelling_a_queued_and_a_running_job(engine):
    running = engine._submit_with_fault(matmul(21), "hang", timeout_s=60)
    wait_for_phase(running, "timing")
    queued = engine.submit(scale(105))  # no build starts while a timing runs on the CPU
    assert queued.phase == "queued"
    assert queued.cancel() and queued.cancelled()
    assert running.cancel()
    with pytest.raises(CancelledError):
        running.result(timeout=30)
    assert_runs_next_job(engine, 106)


def test_cancel_all(engine):
    futures = [engine._submit_with_fault(matmul(22), "hang", timeout_s=60)]
    futures += [engine.submit(scale(n)) for n in (107, 108)]
    wait_for_phase(futures[0], "timing")
    assert engine.cancel_all() == 3
    for f in futures:
        with pytest.raises(CancelledError):
            f.result(timeout=30)
    assert_runs_next_job(engine, 109)


def test_measure_many_reports_progress(engine):
    events = []
    labels = ["a", "b", "c"]
    results = engine.measure_many([scale(n) for n in (110, 111, 112)], labels=labels, progress=events.append)
    assert [m.label for m in results] == labels and all(m.error is None for m in results)
    assert [e.done for e in events] == sorted(e.done for e in events)
    assert events[-1].done == events[-1].total == 3
    finished = [e for e in events if e.phase == "done"]
    assert sorted(e.current for e in finished) == labels and all(e.measurement.ok for e in finished)
    assert {"building", "timing"} <= {e.phase for e in events}


def test_the_queue_is_bounded(tmp_path):
    with MeasurementEngine("llvm", workers=1, cache=False, max_queued=1) as e:
        e.submit(scale(113))  # waits in the queue while the worker starts
        with pytest.raises(EngineBusy, match="queue is full"):
            e.submit(scale(114), block=False)


def test_a_closed_engine_takes_no_jobs():
    e = MeasurementEngine("llvm", cache=False)
    e.close()
    with pytest.raises(EngineClosed):
        e.submit(scale(115))


def test_closing_without_cancelling_finishes_the_queue(tmp_path):
    e = MeasurementEngine("llvm", workers=1, cache=tmp_path, repeat=3, min_run_ms=2.0)
    futures = [e.submit(scale(n)) for n in (116, 117)]
    e.close(cancel=False)
    assert all(f.result(timeout=0).error is None for f in futures)


def test_a_worker_whose_engine_went_away_exits_quietly():
    # A build killed mid-way (Ctrl-C, kill) closes the engine's end of each
    # worker's pipe: the worker ends without a traceback on the terminal.
    import subprocess
    import sys

    code = ("import multiprocessing as mp\n"
            "from leir.measure import worker\n"
            "engine_end, worker_end = mp.Pipe()\n"
            "engine_end.close()\n"
            "worker.main(worker_end, {'target': 'llvm'})\n"
            "print('ended', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "ended" in done.stderr + done.stdout

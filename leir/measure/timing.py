"""Timing a kernel and summarising the runs.

A measurement is ``repeat`` runs of ``number`` back-to-back calls each (TVM's
``time_evaluator``); a run's value is its duration divided by ``number``.
``number`` is chosen from calibration calls (the fastest of three, unless the
first takes 100 ms or more) so that a run lasts at least ``min_run_ms`` (10 ms by
default): shorter runs are dominated by timer
resolution and call overhead. The latency reported is the median of the runs,
which one preempted run cannot move; min, max and the spread say how noisy
the machine was.

Only ``time_module`` imports TVM (inside the function).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

#: A step is an improvement only when it is at least this much faster:
#: repeated timings of one program on this machine differ by about 1-2%.
MIN_GAIN = 0.03
#: Rounds of a paired confirmation (each times the current program, then the candidate).
CONFIRM_ROUNDS = 3
#: Runs per measurement: enough for a median that one outlier cannot move
#: (5 is the least the issue asks for; 7 tolerates 3 outliers).
DEFAULT_REPEAT = 7
#: A run shorter than this is mostly timer resolution and call overhead.
DEFAULT_MIN_RUN_MS = 10.0
#: Single calls timed to choose the calls per run (the fastest counts), when
#: the first is shorter than ``CALIBRATION_LIMIT_S`` (two more calls of a
#: kernel slower than that cost more than one interruption could distort).
CALIBRATION_CALLS = 3
CALIBRATION_LIMIT_S = 0.1
#: Upper bound on calls per run, so that a kernel the calibration measured as
#: "free" (a few nanoseconds) does not run for minutes.
MAX_CALLS_PER_RUN = 1_000_000


@dataclass(frozen=True)
class TimingSummary:
    """Statistics over ``runs`` per-call latencies, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    stdev_ms: float
    runs: int
    #: Calls per run.
    number: int
    #: (max - min) / median: 0.05 means the runs lie within 5% of the median's size.
    spread: float
    results_ms: tuple[float, ...]


def summarize(run_seconds: Sequence[float], number: int = 1) -> TimingSummary:
    """Statistics of per-call latencies (seconds per call, one per run)."""
    if not run_seconds:
        raise ValueError("no runs to summarise")
    ms = tuple(float(s) * 1e3 for s in run_seconds)
    median = statistics.median(ms)
    spread = (max(ms) - min(ms)) / median if median > 0 else 0.0
    stdev = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return TimingSummary(median, min(ms), max(ms), statistics.fmean(ms), stdev, len(ms), number, spread, ms)


def calls_per_run(call_seconds: float, min_run_ms: float = DEFAULT_MIN_RUN_MS) -> int:
    """How many calls make a run of at least ``min_run_ms``, given one call's duration."""
    if call_seconds <= 0:
        return MAX_CALLS_PER_RUN
    return max(1, min(MAX_CALLS_PER_RUN, math.ceil(min_run_ms / 1e3 / call_seconds)))


def time_module(module, device, args: Sequence, *, repeat: int = DEFAULT_REPEAT,
                min_run_ms: float = DEFAULT_MIN_RUN_MS, function: str = "main") -> tuple[list[float], int]:
    """Time ``module[function](*args)`` on ``device`` (local or remote) with
    TVM's ``time_evaluator``: calibration calls (which also warm caches and
    lazy initialisation), then ``repeat`` runs. Returns the per-call
    seconds of each run and the calls per run."""
    calibrate = module.time_evaluator(function, device, number=1, repeat=1, min_repeat_ms=0)
    single = calibrate(*args).results[0]
    if single < CALIBRATION_LIMIT_S:
        # One call interrupted by the scheduler looks several times slower and
        # would make every run too short, down to one call (on a loaded
        # machine, one call in a few is); the fastest of three is the kernel's.
        again = module.time_evaluator(function, device, number=1, repeat=CALIBRATION_CALLS - 1, min_repeat_ms=0)
        single = min([single, *again(*args).results])
    number = calls_per_run(single, min_run_ms)
    evaluator = module.time_evaluator(function, device, number=number, repeat=repeat, min_repeat_ms=0)
    return [float(r) for r in evaluator(*args).results], number


def time_callable(fn: Callable[[], object], *, repeat: int = DEFAULT_REPEAT,
                  min_run_ms: float = DEFAULT_MIN_RUN_MS, sync: Callable[[], object] | None = None) -> tuple[list[float], int]:
    """The same protocol for a Python callable (a vendor library call):
    per-call seconds of each run, and calls per run. ``sync`` waits for
    asynchronous work (a GPU stream) before the clock is read."""
    def one_run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if sync is not None:
            sync()
        return (time.perf_counter() - start) / n

    single = one_run(1)
    if single < CALIBRATION_LIMIT_S:  # as in ``time_module``: the fastest of three calls
        single = min([single] + [one_run(1) for _ in range(CALIBRATION_CALLS - 1)])
    number = calls_per_run(single, min_run_ms)
    return [one_run(number) for _ in range(repeat)], number

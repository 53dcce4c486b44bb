"""`leir optimize` against TVM MetaSchedule with the same number of measured
trials, on a few bundled workloads, timed in one run with one timer.

For each workload: the naive program (every loop serial), the program
`leir optimize --strategy greedy --steps S --budget B` finds, and the best
schedule `tvm.s_tir.meta_schedule.tune_tir(..., max_trials_global=B)` finds
for the same PrimFunc (the LEIR program lowered). All three are then built
and timed again by the same function (TVM's time_evaluator: one warm-up
call, `--repeat` runs of at least `--min-repeat-ms` each, median), one after
the other in this process, turn about for `--rounds` rounds (median of the
rounds), so the ratio does not mix two moments of the machine's load. The
load average is printed beside each row.

MetaSchedule needs `cloudpickle`, `psutil` and `xgboost` (the `bench` extra:
`pip install -e '.[bench]'`). Its LocalBuilder's default 30 s timeout is too
short on a small machine (starting the worker pool takes 20-40 s), so the
builder and runner timeouts are raised (`--ms-timeout`).

    python bench/metaschedule.py [--workloads matmul,conv2d] [--budget 24] [--steps 4]
                                 [--docs docs/optimize.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's leir, not an installed one

DEFAULT_WORKLOADS = ("matmul", "conv2d")


def timer(module, analysis, repeat: int, min_repeat_ms: int):
    """A function returning the median ms of ``repeat`` runs of the built
    ``main`` on seeded inputs (after one warm-up call, here)."""
    import tvm

    from leir.inputs import random_inputs, zeros

    dev = tvm.cpu(0)
    inputs = random_inputs(analysis, 0)
    args = [tvm.runtime.tensor(inputs[t.name], dev) for t in analysis.inputs()]
    args += [tvm.runtime.tensor(zeros(t), dev) for t in analysis.outputs()]
    module["main"](*args)
    evaluator = module.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return lambda: statistics.median(evaluator(*args).results) * 1e3


def turn_about(timers: list, rounds: int) -> list[float]:
    """Each timer's median over ``rounds`` rounds that run them in turn, so
    that every program sees the same moments of the machine's load."""
    medians = [[] for _ in timers]
    for _ in range(rounds):
        for k, t in enumerate(timers):
            medians[k].append(t())
    return [statistics.median(m) for m in medians]


def build(func):
    import tvm

    from leir.bridge.targets import host_target

    return tvm.compile(tvm.IRModule({"main": func}), target=host_target()).jit()


def tune_metaschedule(func, trials: int, work_dir: str, timeout: float):
    """The best schedule MetaSchedule finds in ``trials`` measured trials."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from leir.bridge.targets import host_target

    cores = os.cpu_count() or 1
    # MetaSchedule reads the core count from the target (its parallel and
    # vectorize rules need it).
    target = tvm.target.Target({**host_target().export(), "num-cores": cores})
    mod = tvm.IRModule({"main": func})
    builder = ms.builder.LocalBuilder(max_workers=cores, timeout_sec=timeout)
    runner = ms.runner.LocalRunner(timeout_sec=timeout,
                                   evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=20))
    database = ms.tune_tir(mod, target, work_dir, max_trials_global=trials,
                           num_trials_per_iter=min(trials, 8), builder=builder, runner=runner,
                           num_tuning_cores=cores, seed=0)
    # The best record directly: compile_tir's lookup by workload returned
    # None here even though 16 records had run (its structural match of the
    # workload module fails on our lowered PrimFunc).
    records = [r for r in database.get_all_tuning_records()
               if r.run_secs and all(float(x) < 1e9 for x in r.run_secs)]
    if not records:
        raise RuntimeError("MetaSchedule found no schedule that built and ran")
    best = min(records, key=lambda r: statistics.fmean(float(x) for x in r.run_secs))
    sch = tvm.s_tir.Schedule(best.workload.mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod["main"], len(records)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument("--budget", type=int, default=24, help="measured trials for both (default 24)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--min-repeat-ms", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the turn-about timing (default 3)")
    parser.add_argument("--ms-timeout", type=float, default=300.0, help="MetaSchedule builder/runner timeout in seconds")
    parser.add_argument("--docs", help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    from leir.bridge.targets import kernel_threads

    # Kernels timed in this process run on the threads the measurement
    # engine's workers use (TVM's default is half the CPUs, pinned).
    os.environ.setdefault("TVM_NUM_THREADS", str(kernel_threads()))

    from leir.bridge.document import load_program
    from leir.bridge.lower import lower
    from leir.tools.optimize import optimize
    from leir.bridge.run import compile_program
    from leir.semantics import analyze

    rows = []
    for name in args.workloads.split(","):
        analysis, _ = load_program(REPO / "examples" / f"{name}.leir")
        print(f"== {name}", flush=True)
        loads = [os.getloadavg()[0]]
        t0 = time.time()
        ours = optimize(analysis, steps=args.steps, budget=args.budget, strategy="greedy")
        ours_s = time.time() - t0
        print(f"leir optimize: {len(ours.steps)} steps, {ours.measurements} measurements, {ours_s:.0f} s", flush=True)
        ms_error, ms_ms, ms_s, ms_records = None, None, None, 0
        t0 = time.time()
        try:
            import cloudpickle  # noqa: F401  (MetaSchedule's builder pickles with it)
            import psutil  # noqa: F401
            import xgboost  # noqa: F401

            with tempfile.TemporaryDirectory(prefix=f"ms-{name}-") as work_dir:
                ms_func, ms_records = tune_metaschedule(lower(analysis), args.budget, work_dir, args.ms_timeout)
                ms_module = build(ms_func)
        except Exception as e:  # report why MetaSchedule did not run, and carry on
            ms_error = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
            traceback.print_exc()
        ms_s = time.time() - t0
        # One timer for all three, turn about.
        loads.append(os.getloadavg()[0])
        final = analyze(ours.final)
        timers = [timer(compile_program(analysis).module, analysis, args.repeat, args.min_repeat_ms),
                  timer(compile_program(final).module, final, args.repeat, args.min_repeat_ms)]
        if ms_error is None:
            timers.append(timer(ms_module, analysis, args.repeat, args.min_repeat_ms))
            print(f"MetaSchedule: {ms_records} records in its database, {ms_s:.0f} s", flush=True)
        naive_ms, ours_ms, *rest = turn_about(timers, args.rounds)
        ms_ms = rest[0] if rest else None
        loads.append(os.getloadavg()[0])
        rows.append((name, naive_ms, ours_ms, len(ours.steps), ours_s, ms_ms, ms_s, f"{min(loads):.1f}-{max(loads):.1f}",
                     ms_error))

    header = ("| workload | naive ms | leir optimize ms (steps) | MetaSchedule ms | leir / MetaSchedule speed "
              "| leir search s | MetaSchedule search s | load average |\n|---|---|---|---|---|---|---|---|")
    lines = [header]
    for name, naive, ours_ms, n_steps, ours_s, ms_ms, ms_s, load, err in rows:
        if err is None:
            lines.append(f"| {name} | {naive:.3f} | {ours_ms:.3f} ({n_steps}) | {ms_ms:.3f} | {ms_ms / ours_ms:.2f} "
                         f"| {ours_s:.0f} | {ms_s:.0f} | {load} |")
        else:
            lines.append(f"| {name} | {naive:.3f} | {ours_ms:.3f} ({n_steps}) | failed: {err} | - | {ours_s:.0f} "
                         f"| {ms_s:.0f} | {load} |")
    table = "\n".join(lines)
    cpu = platform.processor() or platform.machine()
    summary = (f"{args.budget} measured trials each (leir's include its paired confirmations, 2 each), "
               f"{args.steps} steps at most for leir; timed turn about, {args.rounds} rounds; {os.cpu_count()} cores "
               f"({cpu}); load average at the end {os.getloadavg()[0]:.1f}")
    print()
    print(table)
    print(summary)
    if args.docs:
        with open(args.docs, "a", encoding="utf-8") as f:
            f.write(f"\n{table}\n\n{summary}\n")
    return 0 if all(r[-1] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

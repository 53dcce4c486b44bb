"""`leir optimize` on the bundled examples: naive latency, optimized
latency, and how far from NumPy/OpenBLAS the result is.

For each workload, the greedy search (`leir.tools.optimize.optimize`, the library
behind `leir optimize`) runs from the serial program with `--steps` and
`--budget`, measuring through one shared measurement engine
(`leir.measure`; `LEIR_MEASURE=fallback` uses the in-process fallback
measurer). Naive and optimized latencies are measured again after the search
by a paired comparison (`MeasurementEngine.compare`: both built fresh in one
worker, checked, and timed turn about for 3 rounds; median of all runs), so
both figures come from the same moments of the machine's load. The search's
own figures are shown beside them, with the load average. The vendor column is
`leir.measure.vendor_latency` of the naive program: `np.einsum` handed to
OpenBLAS for a contraction (matmul, batched matmul), else the bundled NumPy
reference in `examples/references.py` (which computes in float64, so it is
a slow vendor: the table says which).

    python bench/optimize.py [--workloads matmul,softmax,...] [--steps 4] [--budget 24] [--docs FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's leir, not an installed one

DEFAULT_WORKLOADS = ("matmul", "batched_matmul", "gemm_bias_relu", "conv2d", "softmax", "layernorm",
                     "sum_axis1", "transpose")


def retime(measurer, naive, final, rounds: int = 3) -> tuple[float, float]:
    """The naive and the final program timed turn about (``measure_pair``:
    the engine's paired comparison, or the fallback's)."""
    from leir.tools.measuring import measure_pair

    p = measure_pair(measurer, naive, final, rounds)
    if not p.ok:
        return float("nan"), float("nan")
    return p.before_ms, p.after_ms


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--strategy", default="greedy", choices=["greedy", "beam", "mcts"])
    parser.add_argument("--docs", help="append the table to this Markdown file")
    args = parser.parse_args(argv)

    from leir.bridge.document import load_program
    from leir.measure import vendor_latency
    from leir.tools.measuring import default_measurer
    from leir.tools.optimize import optimize
    from leir.semantics import analyze

    measurer = default_measurer("llvm")
    rows = []
    started = time.time()
    try:
        for name in args.workloads.split(","):
            analysis, _ = load_program(REPO / "examples" / f"{name}.leir")
            loads = [os.getloadavg()[0]]
            t0 = time.time()
            result = optimize(analysis, steps=args.steps, budget=args.budget, strategy=args.strategy,
                              measurer=measurer)
            seconds = time.time() - t0
            # The search's figures are minima over noisy candidates (the
            # fastest-looking one wins, luck included): time the naive and
            # the final program again, alternately, with one timer.
            final = analyze(result.final)
            loads.append(os.getloadavg()[0])
            naive_ms, final_ms = retime(measurer, analysis, final)
            vendor = vendor_latency(analysis)
            loads.append(os.getloadavg()[0])
            ids = " ".join(s.id for s in result.steps) or "-"
            load = f"{min(loads):.1f}-{max(loads):.1f}"
            rows.append((name, naive_ms, final_ms, len(result.steps), ids, vendor, seconds,
                         result.start_ms, result.final_ms, result.confirmations, result.unconfirmed, load))
            print(f"{name}: search {result.start_ms:.3f} ms -> {result.final_ms:.3f} ms in {len(result.steps)} steps "
                  f"({ids}), {result.measurements} measurements ({result.confirmations} paired confirmations, "
                  f"{result.unconfirmed} not confirmed), {seconds:.0f} s; "
                  f"re-timed {naive_ms:.3f} ms -> {final_ms:.3f} ms; load average {load}", flush=True)
    finally:
        if hasattr(measurer, "close"):
            measurer.close()

    lines = ["| workload | naive ms | optimized ms | speedup | steps | vendor ms | % of vendor | vendor | search s "
             "| search's own figures ms | confirmations (not confirmed) | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, naive, final, n, ids, vendor, seconds, search_start, search_final, conf, unconf, load in rows:
        if vendor is None:
            v_ms, pct, kind = "-", "-", "none"
        else:
            v_ms, pct = f"{vendor.median_ms:.3f}", f"{100 * vendor.median_ms / final:.0f}%"
            kind = "OpenBLAS (np.einsum)" if vendor.kind == "blas-contraction" else "NumPy reference (float64)"
        lines.append(f"| {name} | {naive:.3f} | {final:.3f} | {naive / final:.2f}x | {n}: {ids} | {v_ms} | {pct} "
                     f"| {kind} | {seconds:.0f} | {search_start:.3f} -> {search_final:.3f} | {conf} ({unconf}) | {load} |")
    table = "\n".join(lines)
    summary = (f"{args.strategy}, --steps {args.steps} --budget {args.budget}; measurer "
               f"{type(measurer).__name__}; {os.cpu_count()} cores; {time.time() - started:.0f} s in all; "
               f"load average at the end {os.getloadavg()[0]:.1f}")
    print()
    print(table)
    print(summary)
    if args.docs:
        with open(args.docs, "a", encoding="utf-8") as f:
            f.write(f"\n{table}\n\n{summary}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

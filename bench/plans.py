"""Time the plans of one workload directly, without a search: the first N
plans `leir.tools.plans.plans_for` lists for a bench workload (the order
the hand-written prior gives them, before any cost model), each realized,
built and timed turn about in this process; the table is sorted fastest
first. This is how a change to the plan space is judged before a whole
search is run (`bench/suite.py`).

    python bench/plans.py conv2d_resnet [--top 16] [--where "s.pack is not None"] [--rounds 3]

`--where` keeps the plans for which a Python expression over `s` (the
`ContractionTiling` or `Rows`) is true; it is evaluated here, on this
command line's own text, never on a document's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a name in bench/workloads/")
    parser.add_argument("--top", type=int, default=16, help="plans to time (default 16)")
    parser.add_argument("--where", help="keep the plans for which this expression over `s` is true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-repeat-ms", type=int, default=30)
    args = parser.parse_args(argv)

    from leir.bridge.document import load_program
    from leir.bridge.run import compile_program
    from leir.semantics import analyze
    from leir.tools.plans import PlanFailed, plans_for, realize

    from leir.bridge.targets import kernel_threads

    # The threads the measurement engine's workers run kernels on (as bench/suite.py).
    os.environ.setdefault("TVM_NUM_THREADS", str(kernel_threads()))
    ms = _load(BENCH / "metaschedule.py", "bench_metaschedule")
    path = BENCH / "workloads" / f"{args.workload}.leir"
    if not path.exists():
        parser.error(f"no workload {args.workload!r} in bench/workloads/")
    analysis, _ = load_program(path)
    # With --where, from every plan of the grid (the search draws 64).
    specs = plans_for(analysis, limit=10**6 if args.where else max(64, args.top))
    if args.where:
        specs = [s for s in specs if eval(args.where, {}, {"s": s})]  # the user's own command line
    rows, timers = [], []
    for spec in specs[: args.top]:
        try:
            plan = realize(spec, analysis)
        except PlanFailed as e:
            print(f"refused: {spec}: {e}", flush=True)
            continue
        program = analyze(plan.program)
        timers.append(ms.timer(compile_program(program).module, program, args.repeat, args.min_repeat_ms))
        rows.append((spec, len(plan.steps)))
    load_before = os.getloadavg()[0]
    figures = ms.turn_about(timers, args.rounds) if timers else []
    load_after = os.getloadavg()[0]
    print(f"{args.workload}: {len(rows)} plans timed turn about, {args.rounds} rounds, load {load_before:.1f}-{load_after:.1f}")
    for ms_, (spec, n) in sorted(zip(figures, rows), key=lambda r: r[0]):
        params = {k: v for k, v in spec.to_json().items() if k not in ("kind", "block") and v not in (None, False)}
        print(f"{ms_:9.3f} ms  {n:2d} steps  {params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

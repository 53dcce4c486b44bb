"""Measure programs for the cost model: each workload's naive program, the
end states of sampled plans and some of their prefixes (a plan's first k
steps), and the programs one catalogue step away from the start.

Writes JSON lines ``{"program", "target", "ms", "workload", "source"}``
(appending; a program already in the file is not measured again), the
format ``python -m leir_models.cost_model train --data`` reads. Timed by the
measurement engine (worker processes, its SQLite cache, each program also
checked against the NumPy evaluation), so a rerun with a warm cache is
quick.

    python bench/collect_costs.py bench/workloads/*.leir examples/matmul.leir ... \\
        --out bench/data/costs.jsonl [--plans 24] [--prefixes 6] [--singles 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def programs_of(analysis, plans: int, prefixes: int, singles: int, target: str, rng: random.Random):
    """(source, analysis) of each program to measure for one workload."""
    from leir.errors import LeirError
    from leir.semantics import analyze
    from leir.tools.plans import PlanFailed, plans_for, realize
    from leir.tools.ranking import rank

    yield "naive", analysis
    specs = plans_for(analysis, target, seed=rng.randrange(1 << 30), limit=max(plans * 4, 64))
    rng.shuffle(specs)
    made = 0
    for spec in specs:
        if made == plans:
            break
        try:
            plan = realize(spec, analysis)
        except (PlanFailed, LeirError):
            continue
        made += 1
        yield f"plan:{spec.kind}", analyze(plan.program)
        if made <= prefixes and len(plan.programs) > 2:
            k = rng.randrange(1, len(plan.programs) - 1)
            yield f"plan-prefix:{k}/{len(plan.programs)}", analyze(plan.programs[k - 1])
    from leir import transforms

    for r in rank(analysis, target)[:singles]:
        try:
            yield f"single:{r.step.id}", analyze(transforms.apply(analysis, r.step))
        except LeirError:
            continue


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--plans", type=int, default=24)
    parser.add_argument("--prefixes", type=int, default=6)
    parser.add_argument("--singles", type=int, default=8)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from leir.bridge.document import load_program
    from leir.printer import print_program
    from leir.tools.measuring import default_measurer

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["workload"], r["program"]))
    measurer = default_measurer(args.target)
    rng = random.Random(args.seed)
    try:
        for path in args.files:
            workload = Path(path).stem
            analysis, _ = load_program(Path(path))
            batch = []
            for source, a in programs_of(analysis, args.plans, args.prefixes, args.singles, args.target, rng):
                text = print_program(a.program)
                if (workload, text) not in done:
                    done.add((workload, text))
                    batch.append((source, text, a))
            t0 = time.time()
            timings = measurer([a for _, _, a in batch]) if batch else []
            with out.open("a", encoding="utf-8") as f:
                for (source, text, _), t in zip(batch, timings):
                    if t.ms is not None:
                        f.write(json.dumps({"program": text, "target": args.target, "ms": t.ms, "workload": workload,
                                            "source": source}) + "\n")
            ok = sum(t.ms is not None for t in timings)
            print(f"{workload}: {ok}/{len(batch)} measured in {time.time() - t0:.0f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        if hasattr(measurer, "close"):
            measurer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

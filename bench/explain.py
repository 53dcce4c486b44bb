"""Time of leir.explain's hover texts and step reasoning on the examples.

    python bench/explain.py [--repeat 3]

For every example: ``describe_loop`` at every loop header, ``describe_access``
at every tensor access, ``describe_step`` for every offered split, tile,
reorder, parallelize, vectorize and unroll (predicted on the syntax tree, no
TVM), and ``step_reasoning`` on those predicted pairs. Each call is timed
``--repeat`` times (the first call of a process, which imports the
transformation modules, is left out). Prints count, median, 95th percentile
and maximum per kind. No assertion: the figures go into docs/reasoning.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leir import transforms  # noqa: E402
from leir.bridge.document import load_leir  # noqa: E402
from leir.explain import (  # noqa: E402
    Machine, describe_access, describe_loop, describe_step, predicted_after, step_reasoning,
)

PREDICTED = ("split", "tile", "reorder", "parallelize", "vectorize", "unroll")


def timed(fn, repeat: int) -> float:
    best = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t)
    return statistics.median(best) * 1e3


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default=str(Path(__file__).resolve().parent.parent / "examples"))
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    machine = Machine.detect()
    times: dict[str, list[float]] = {"describe_loop": [], "describe_access": [], "describe_step": [],
                                     "step_reasoning": []}
    files = sorted(Path(args.examples).glob("*.leir"))
    # Warm-up: the first listing imports every transformation module.
    warm = load_leir(files[0].read_text()).analysis
    describe_loop(warm, at=files[0].read_text().index("^{") - 1, machine=machine)
    for path in files:
        text = path.read_text()
        a = load_leir(text).analysis
        for m in re.finditer(r"[LPVUB]\^\{", text):
            times["describe_loop"].append(timed(lambda: describe_loop(a, at=m.start(), machine=machine), args.repeat))
        for m in re.finditer(r"[A-Za-z]\w*_\{", text):
            times["describe_access"].append(
                timed(lambda: describe_access(a, at=m.start(), machine=machine), args.repeat))
        for c in transforms.candidates(a, only=PREDICTED):
            times["describe_step"].append(
                timed(lambda: describe_step(a, c.step, machine=machine), args.repeat))
            after = predicted_after(a, c.step)
            if after is not None:
                times["step_reasoning"].append(
                    timed(lambda: step_reasoning(a, after, c.step, machine=machine), args.repeat))
    print(f"{len(files)} examples, median of {args.repeat} calls each, ms")
    print(f"{'kind':<16} {'calls':>6} {'median':>8} {'p95':>8} {'max':>8}")
    for kind, ts in times.items():
        ts.sort()
        p95 = ts[min(len(ts) - 1, int(0.95 * len(ts)))]
        print(f"{kind:<16} {len(ts):>6} {statistics.median(ts):>8.2f} {p95:>8.2f} {ts[-1]:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

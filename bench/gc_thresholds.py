"""How Python's garbage collector thresholds change the time one edit of a
1,000-line LEIR file costs the server: re-parse and check the new version
and rank the steps at a cursor, 40 times, with two versions alive (the
open one and the one a request may still be reading).

    python bench/gc_thresholds.py                  # Python's defaults, then the server's

Prints p50 / p95 / max in ms for each setting; each runs in a fresh process
so one's heap does not shape the other's. server/leir_server/warm_up.py sets the
thresholds this compares (GC_THRESHOLDS), after gc.freeze().
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EDITS = 40

CHILD = r"""
import gc, sys, time
sys.path.insert(0, sys.argv[1])
import server as bench_server
from leir.bridge.document import load_leir
from leir.tools.suggest import suggest
thresholds = tuple(int(x) for x in sys.argv[3:])
if thresholds:
    gc.freeze()
    gc.set_threshold(*thresholds)
text = bench_server.generated_program(1000)
alive, times = [], []
for i in range(int(sys.argv[2])):
    start = time.perf_counter()
    doc = load_leir(text.replace("1.000", f"1.{i:03d}", 1))
    doc.diagnostics
    suggest(doc.text, "leir", 100, document=doc)
    alive.append(doc)
    del alive[:-2]
    times.append((time.perf_counter() - start) * 1000)
times.sort()
n = len(times)
print(f"{times[n // 2]:.0f} {times[min(n - 1, int(n * 0.95))]:.0f} {times[-1]:.0f}")
"""


def run(thresholds: tuple[int, ...]) -> tuple[str, str, str]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(HERE), str(EDITS), *map(str, thresholds)],
                         capture_output=True, text=True, check=True)
    return tuple(out.stdout.split())


def main() -> int:
    from leir_server.warm_up import GC_THRESHOLDS

    print(f"{EDITS} edits of a 1,000-line file (parse, check, rank at a cursor); ms per edit")
    print(f"{'thresholds':<34} {'p50':>6} {'p95':>6} {'max':>6}")
    for label, thresholds in (("Python's defaults (700, 10, 10)", ()), (f"server's {GC_THRESHOLDS}", GC_THRESHOLDS)):
        p50, p95, worst = run(thresholds)
        print(f"{label:<34} {p50:>6} {p95:>6} {worst:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

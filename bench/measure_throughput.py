"""Measurement throughput: candidates measured per minute with a cold cache
and a warm one, and what a cache hit costs.

The candidates are the bundled examples (``examples/*.leir``: 35 programs
of 1-3 equations, from a transpose to attention), measured on this CPU by a
``MeasurementEngine`` with its defaults (2 workers, 7 timed runs of at least
10 ms each, the vendor reference timed once per workload). Cold: a fresh
cache directory, every program built, checked and timed; worker start-up
is reported apart. Warm: the same programs again, all answered by the cache.
Cache hit: ``engine.submit(program).result()`` for a program already
measured, including the structural key (print + SHA-256) and the SQLite
lookup; the key and the lookup are also timed alone.

    python bench/measure_throughput.py [--limit N] [--workers 2] [--no-vendor] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_candidates(limit: int | None):
    from leir.bridge.document import load_leir

    out = []
    for path in sorted(EXAMPLES.glob("*.leir"))[:limit]:
        doc = load_leir(path.read_text(encoding="utf-8"))
        if doc.ok:
            out.append((path.stem, doc.analysis))
    return out


def per_minute(count: int, seconds: float) -> float:
    return 60.0 * count / seconds if seconds > 0 else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N examples")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-vendor", action="store_true", help="do not time the vendor references")
    parser.add_argument("--hits", type=int, default=500, help="cache hits to time")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from leir.measure import MeasurementEngine
    from leir.measure.cache import MeasurementCache
    from leir.measure.key import measurement_key

    candidates = load_candidates(args.limit)
    labels = [name for name, _ in candidates]
    programs = [a for _, a in candidates]
    directory = tempfile.mkdtemp(prefix="leir-bench-cache-")
    figures: dict = {"candidates": len(programs), "workers": args.workers, "vendor": not args.no_vendor}

    with MeasurementEngine("llvm", workers=args.workers, cache=directory, vendor=not args.no_vendor) as engine:
        start = time.perf_counter()
        engine.wait_ready()
        figures["startup_s"] = time.perf_counter() - start
        start = time.perf_counter()
        cold = engine.measure_many(programs, labels=labels)
        figures["cold_s"] = time.perf_counter() - start
        figures["device"] = engine.device
    figures["failures"] = {m.label: m.error for m in cold if m.error}

    with MeasurementEngine("llvm", workers=args.workers, cache=directory, vendor=not args.no_vendor) as engine:
        start = time.perf_counter()
        warm = engine.measure_many(programs, labels=labels)
        figures["warm_s"] = time.perf_counter() - start
        assert all(m.cached for m in warm if m.error is None), "warm run missed the cache"
        hits = []
        for i in range(args.hits):
            program = programs[i % len(programs)]
            if cold[i % len(programs)].error:
                continue
            t = time.perf_counter()
            m = engine.submit(program).result()
            hits.append(time.perf_counter() - t)
            assert m.cached
        key_times, lookup_times = [], []
        cache = MeasurementCache(directory)
        for i in range(args.hits):
            program = programs[i % len(programs)]
            t = time.perf_counter()
            key = measurement_key(program, engine.target_key, engine.device, engine.toolchain)
            key_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            cache.lookup(key)
            lookup_times.append(time.perf_counter() - t)
        cache.close()

    measured = len(programs) - len(figures["failures"])
    figures.update(
        cold_per_min=per_minute(measured, figures["cold_s"]),
        warm_per_min=per_minute(len(programs), figures["warm_s"]),
        hit_median_ms=1e3 * statistics.median(hits),
        hit_p95_ms=1e3 * sorted(hits)[int(0.95 * (len(hits) - 1))],
        hit_max_ms=1e3 * max(hits),
        key_median_ms=1e3 * statistics.median(key_times),
        lookup_median_ms=1e3 * statistics.median(lookup_times),
    )
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{figures['candidates']} candidates on {figures['device']}, {args.workers} workers, "
          f"vendor references {'on' if figures['vendor'] else 'off'}")
    print(f"worker start-up            {figures['startup_s']:.1f} s")
    print(f"cold cache                 {figures['cold_s']:.1f} s, {figures['cold_per_min']:.0f} candidates/min")
    print(f"warm cache                 {figures['warm_s']:.3f} s, {figures['warm_per_min']:.0f} candidates/min")
    print(f"cache hit (submit+result)  median {figures['hit_median_ms']:.2f} ms, p95 {figures['hit_p95_ms']:.2f} ms, "
          f"max {figures['hit_max_ms']:.2f} ms")
    print(f"  of which key             median {figures['key_median_ms']:.3f} ms")
    print(f"  of which SQLite lookup   median {figures['lookup_median_ms']:.3f} ms")
    for label, error in figures["failures"].items():
        print(f"failed: {label}: {error}")


if __name__ == "__main__":  # the workers' forkserver re-imports this module: keep main() behind the guard
    main()

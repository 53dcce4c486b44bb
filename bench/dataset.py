"""Dataset build rate, cold and warm measurement cache.

    python bench/dataset.py --workloads examples --variants 1 --steps 3 --budget 3

Builds twice with the same settings: first with an empty measurement cache
(every candidate is built and timed), then into a second directory with the
cache the first build filled (every measurement is a cache hit; what is left
is listing, applying, verifying and reasoning). Prints samples, verified
samples, seconds and samples per minute for each, and how long 20,000
verified samples would take at those rates (a projection, not a measurement).
No assertion: the figures go into docs/dataset.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leir.tools.dataset.build import BuildConfig, build  # noqa: E402

TARGET_SAMPLES = 20_000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="examples")
    p.add_argument("--variants", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leir-bench-dataset-") as tmp:
        rows = []
        for label, out in (("cold", "a"), ("warm", "b")):
            cfg = BuildConfig(workloads=args.workloads, out=str(Path(tmp) / out), variants=args.variants,
                              steps=args.steps, budget=args.budget, jobs=args.jobs, seed=args.seed,
                              only=list(args.only), cache_dir=str(Path(tmp) / "cache"))
            s = build(cfg, progress=False)
            rate = s.verified / s.seconds * 60
            rows.append((label, s, rate))
            print(f"{label}: {s.samples_written} samples, {s.verified} verified, {s.measurements} measurements "
                  f"({s.cache_hits} cache hits) in {s.seconds:.0f} s: {rate:.0f} verified samples/min", flush=True)
        for label, s, rate in rows:
            if rate > 0:
                print(f"projection ({label} cache): {TARGET_SAMPLES} verified samples in "
                      f"{TARGET_SAMPLES / rate / 60:.1f} h at {rate:.0f}/min")
    return 0


if __name__ == "__main__":
    sys.exit(main())

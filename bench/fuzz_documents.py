"""The long fuzz run (issue 12.3): random and mutated documents through the
server's request handlers, as ``tests/test_document_fuzz.py`` does for a
few hundred (``tests/docfuzz.py`` makes and exercises them).

    python bench/fuzz_documents.py [--documents 100000] [--seed 0] [--timeout 60] [--jobs 2]

Each document runs in a worker process (``--jobs`` of them) with a
per-document timeout (``--timeout``, generous: a hang guard, not a speed
test; a worker that passes it is killed and replaced). Prints, at the end
(and every ``--every`` documents), the counts of documents run, crashes
(an exception other than a typed refusal, or a malformed result), hangs
(past the timeout), internal errors (a worker that died), refusals and
calls stopped at their budget, with the seeds of the failures: document
``k`` is ``docfuzz.generated(random.Random(seed * 1_000_003 + k))``, so
each failure can be replayed with ``--replay K``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def _document(seed: int, k: int):
    import docfuzz

    rng = random.Random(seed * 1_000_003 + k)
    text, language = docfuzz.generated(rng, _bases())
    return text, language, docfuzz.positions(rng, text, 4)


_BASES = None
_SERVER = None


def _bases():
    global _BASES
    if _BASES is None:
        import docfuzz

        _BASES = docfuzz.examples()
    return _BASES


def _run_one(seed: int, k: int) -> dict:
    global _SERVER
    import docfuzz

    if _SERVER is None:
        from leir_server.server import build_server

        _SERVER = build_server()
    text, language, offsets = _document(seed, k)
    started = time.monotonic()
    try:
        counts = docfuzz.exercise(_SERVER, text, language, offsets)
        return {"k": k, "ok": True, "s": time.monotonic() - started, **counts}
    except Exception as e:  # noqa: BLE001 - what the run counts
        return {"k": k, "ok": False, "s": time.monotonic() - started,
                "error": f"{type(e).__name__}: {e}"[:300], "trace": traceback.format_exc()[-2000:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per document before it counts as a hang")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--every", type=int, default=1000, help="print the counts every N documents")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long (the counts so far)")
    parser.add_argument("--replay", type=int, default=None, help="run document K here and show it")
    args = parser.parse_args(argv)
    os.environ.setdefault("LEIR_CACHE_DIR", tempfile.mkdtemp(prefix="leir-fuzz-cache-"))

    if args.replay is not None:
        text, language, offsets = _document(args.seed, args.replay)
        print(f"document {args.replay} ({language}, {len(text)} characters, positions {offsets}):\n{text[:2000]}")
        result = _run_one(args.seed, args.replay)
        print(result.get("trace") or result)
        return 0 if result["ok"] else 1

    import pebble

    load_before = os.getloadavg()
    started = time.monotonic()
    counts = {"documents": 0, "crashes": 0, "hangs": 0, "internal errors": 0, "refused calls": 0,
              "calls over budget": 0}
    failures: list[str] = []
    slowest = (0.0, None)
    deadline = started + args.minutes * 60 if args.minutes else None
    with pebble.ProcessPool(max_workers=args.jobs, context=multiprocessing.get_context("fork")) as pool:
        pending = []
        k = 0

        def drain(block: bool) -> None:
            nonlocal slowest
            while pending and (block or pending[0][1].done()):
                doc, future = pending.pop(0)
                counts["documents"] += 1
                try:
                    r = future.result()
                except TimeoutError:
                    counts["hangs"] += 1
                    failures.append(f"hang: document {doc} (over {args.timeout:g} s)")
                    continue
                except Exception as e:  # noqa: BLE001 - a worker that died
                    counts["internal errors"] += 1
                    failures.append(f"internal error: document {doc}: {type(e).__name__}: {e}")
                    continue
                if not r["ok"]:
                    counts["crashes"] += 1
                    failures.append(f"crash: document {doc}: {r['error']}")
                else:
                    counts["refused calls"] += r.get("refused", 0)
                    counts["calls over budget"] += r.get("over budget", 0)
                if r["s"] > slowest[0]:
                    slowest = (r["s"], doc)
                if counts["documents"] % args.every == 0:
                    report(counts, started, slowest)

        while k < args.documents and (deadline is None or time.monotonic() < deadline):
            pending.append((k, pool.schedule(_run_one, args=(args.seed, k), timeout=args.timeout)))
            k += 1
            if len(pending) >= 4 * args.jobs:
                drain(block=False)
                if len(pending) >= 4 * args.jobs:
                    try:
                        pending[0][1].result()  # wait for the oldest; its outcome is counted in drain
                    except Exception:  # noqa: BLE001
                        pass
                    drain(block=False)
        drain(block=True)
    report(counts, started, slowest)
    print(f"load average before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for line in failures[:50]:
        print(line)
    if len(failures) > 50:
        print(f"... and {len(failures) - 50} more")
    return 1 if failures else 0


def report(counts: dict, started: float, slowest) -> None:
    elapsed = time.monotonic() - started
    print(", ".join(f"{k} {v}" for k, v in counts.items())
          + f"; {elapsed:.0f} s ({counts['documents'] / max(elapsed, 1e-9):.1f} documents/s); "
          f"slowest document {slowest[1]} ({slowest[0]:.1f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())

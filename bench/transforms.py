"""Apply and verify the steps the transformation catalogue offers on every
bundled example, and time how fast the catalogue lists them.

For each ``examples/*.leir``: list every candidate of every registered
transformation (``leir.transforms.candidates``), apply each
(``leir.transforms.apply``) and verify it numerically against the program
before (``leir.transforms.verify``) — all of them, or with ``--sample N`` at
most N per transformation per example, drawn with a fixed seed. A step that
was offered and then fails to apply (TVM refused it, the result does not
check, anything raised) or does not verify is a bug in that
transformation's legality check: each is printed loudly, listed in the
report, and the script exits with status 1.

Then the listing time: the median of 20 runs of ``candidates(analysis)``
(every transformation) on the largest example, against the 50 ms an editor
can spend per request, and the same per transformation so that a slow one
shows.

    python bench/transforms.py [--sample N] [--jobs J] [--docs docs/transforms.md]
                               [--only ID,...] [--examples NAME,...]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's leir, not an installed one

EXAMPLES = REPO / "examples"
LISTING_RUNS = 20
LISTING_TARGET_MS = 50.0
def registry_groups() -> dict[str, str]:
    """Transformation id -> group, as each step module declares it (``GROUP``)."""
    import leir.transforms as T

    return {t.ID: t.GROUP for t in T.ALL}


@dataclass
class StepResult:
    example: str
    id: str
    args: dict
    title: str
    #: "verified", "mismatch" (verification failed), "apply-error",
    #: "verify-error" (building or running failed).
    status: str
    error: str = ""
    apply_ms: float | None = None
    verify_ms: float | None = None


@dataclass
class ExampleResult:
    example: str
    offered: dict[str, int] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    #: (transformation id, error) for candidates() that raised.
    listing_errors: list[tuple[str, str]] = field(default_factory=list)


def sample_rng(example: str, transform_id: str) -> random.Random:
    return random.Random(f"{example}/{transform_id}")


def run_example(task: tuple[str, int | None, tuple[str, ...] | None]) -> ExampleResult:
    """Apply and verify (a sample of) every offered step of one example."""
    name, sample, only = task
    from leir.bridge.document import load_leir
    from leir.semantics import analyze
    from leir import transforms as T
    from leir.transforms.base import Context

    import sympy  # noqa: F401 - imported here so that no step's time includes the import
    import tvm  # noqa: F401

    doc = load_leir((EXAMPLES / f"{name}.leir").read_text())
    out = ExampleResult(name)
    ctx = Context(doc.analysis)
    for t in T.ALL:
        if only is not None and t.ID not in only:
            continue
        try:
            found = t.candidates(ctx, None)
        except Exception as e:  # noqa: BLE001 - any exception here is a bug to report
            out.listing_errors.append((t.ID, f"{type(e).__name__}: {e}"))
            print(f"!!! {name}: {t.ID}.candidates raised {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            continue
        out.offered[t.ID] = len(found)
        chosen = list(found)
        if sample is not None and len(chosen) > sample:
            chosen = sample_rng(name, t.ID).sample(chosen, sample)
        for c in chosen:
            out.steps.append(apply_and_verify(name, doc.analysis, c, T, analyze))
    return out


def apply_and_verify(name: str, before, candidate, T, analyze) -> StepResult:
    step = candidate.step
    result = StepResult(name, step.id, step.args, candidate.title, "verified")
    t0 = time.perf_counter()
    try:
        program = T.apply(before, step, name)
    except Exception as e:  # noqa: BLE001 - an offered step that does not apply is a bug
        result.status = "apply-error"
        result.error = f"{type(e).__name__}: {e}" + (f" — {e.detail}" if getattr(e, "detail", None) not in (None, str(e)) else "")
        if not isinstance(e, T.TransformError):
            result.error += " | " + traceback.format_exc(limit=-3).replace("\n", " ")
        shout(result)
        return result
    result.apply_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    try:
        verification = T.verify(before, analyze(program))
    except Exception as e:  # noqa: BLE001 - building or running the result failed
        result.status = "verify-error"
        result.error = f"{type(e).__name__}: {e}"
        shout(result)
        return result
    result.verify_ms = (time.perf_counter() - t0) * 1000
    if not verification.ok:
        result.status = "mismatch"
        result.error = verification.summary()
        shout(result)
    return result


def shout(r: StepResult) -> None:
    print(f"!!! {r.status.upper()} {r.id} on {r.example}: {json.dumps({'id': r.id, 'args': r.args})}\n    {r.error}",
          file=sys.stderr, flush=True)


# ------------------------------------------------------------ listing time


def listing_times(name: str, runs: int) -> dict:
    """Median time of ``candidates(analysis)`` on one example, in total and
    per transformation (on a context whose shared tables are built)."""
    from leir.bridge.document import load_leir
    from leir import transforms as T
    from leir.transforms.base import Context

    analysis = load_leir((EXAMPLES / f"{name}.leir").read_text()).analysis
    T.candidates(analysis)  # warm up (imports, caches)
    total = []
    for _ in range(runs):
        t0 = time.perf_counter()
        T.candidates(analysis)
        total.append((time.perf_counter() - t0) * 1000)
    per: dict[str, list[float]] = {t.ID: [] for t in T.ALL}
    shared = []
    counts = {}
    for _ in range(runs):
        t0 = time.perf_counter()
        ctx = Context(analysis)
        ctx.block_names, ctx.loop_sites  # noqa: B018 - built once, shared by every transformation
        shared.append((time.perf_counter() - t0) * 1000)
        for t in T.ALL:
            t0 = time.perf_counter()
            counts[t.ID] = len(t.candidates(ctx, None))
            per[t.ID].append((time.perf_counter() - t0) * 1000)
    return {
        "example": name,
        "equations": len(analysis.equations),
        "candidates": sum(counts.values()),
        "total_ms": statistics.median(total),
        "max_ms": max(total),
        "shared_ms": statistics.median(shared),
        "per": {tid: (statistics.median(v), counts[tid]) for tid, v in per.items()},
    }


def largest_example(names: list[str]) -> str:
    """The example with the most equations, then the most candidates."""
    from leir.bridge.document import load_leir
    from leir import transforms as T

    def size(name: str) -> tuple[int, int]:
        analysis = load_leir((EXAMPLES / f"{name}.leir").read_text()).analysis
        return len(analysis.equations), len(T.candidates(analysis))

    return max(names, key=size)


def slowest_listing(names: list[str], runs: int) -> tuple[str, float]:
    """The example whose ``candidates(analysis)`` takes longest (median)."""
    from leir.bridge.document import load_leir
    from leir import transforms as T

    medians = {}
    for name in names:
        analysis = load_leir((EXAMPLES / f"{name}.leir").read_text()).analysis
        T.candidates(analysis)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            T.candidates(analysis)
            times.append((time.perf_counter() - t0) * 1000)
        medians[name] = statistics.median(times)
    name = max(medians, key=medians.get)
    return name, medians[name]


# ------------------------------------------------------------------ report


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_ms(value: float | None) -> str:
    return "–" if value is None else (f"{value:.0f}" if value >= 10 else f"{value:.1f}")


def report(results: list[ExampleResult], listing: dict, args, elapsed: float) -> str:
    from leir import transforms as T

    ids = [t.ID for t in T.ALL if args.only is None or t.ID in args.only]
    groups = registry_groups()
    steptp = {t.ID: getattr(t, "STEPTP", None) for t in T.ALL}
    examples = [r.example for r in results]
    steps = [s for r in results for s in r.steps]
    failures = [s for s in steps if s.status != "verified"]
    listing_errors = [(r.example, tid, err) for r in results for tid, err in r.listing_errors]
    offered_total = sum(sum(r.offered.values()) for r in results)

    lines = [
        "# Transformations: steps offered, verified and timed",
        "",
        "Generated by `python bench/transforms.py"
        + (f" --sample {args.sample}" if args.sample is not None else "")
        + (f" --jobs {args.jobs}" if args.jobs != 1 else "")
        + "`" + f" on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, Python {platform.python_version()}, "
        + f"TVM {tvm_version()}); it took {elapsed / 60:.1f} min, with a load average of "
        + f"{args.load_before:.1f} before and {os.getloadavg()[0]:.1f} after (times are wall-clock: on a shared "
        + "machine they are upper bounds). Rerun it to refresh the figures.",
        "",
        f"Every registered transformation ({len(ids)}) lists its candidates on every bundled example "
        f"({len(examples)}); "
        + ("each offered step is" if args.sample is None else
           f"at most {args.sample} offered step{'s' if args.sample != 1 else ''} per transformation per example "
           f"(drawn with a fixed seed) {'are' if args.sample != 1 else 'is'}")
        + " applied and verified numerically against the program before it (`leir.transforms.verify`: three "
          "seeds, the last with integer-valued inputs; Step-TP's tolerances). "
        + f"{offered_total} steps offered, {len(steps)} applied, {len(steps) - len(failures)} verified, "
          f"{len(failures)} failed"
        + (f", {len(listing_errors)} candidate listings raised" if listing_errors else "") + ".",
        "",
        "A step that is offered and then does not apply, or applies and does not verify, is a bug in that "
        "transformation's legality check (see [Failures](#failures)).",
        "",
        "## Per transformation",
        "",
        "Applied: steps tried (all offered, or the sample). Apply and verify times are medians per step "
        "(verify builds both programs with TVM and runs them on three inputs).",
        "",
        "| transformation | group | Step-TP | offered | applied | verified | pass rate | median apply ms | median verify ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for tid in ids:
        mine = [s for s in steps if s.id == tid]
        ok = sum(s.status == "verified" for s in mine)
        offered = sum(r.offered.get(tid, 0) for r in results)
        rate = f"{100 * ok / len(mine):.0f}%" if mine else "–"
        lines.append(
            f"| {tid} | {groups.get(tid, '')} | {steptp[tid] or '–'} | {offered} | {len(mine)} | {ok} | {rate} | "
            f"{fmt_ms(median_or_none([s.apply_ms for s in mine if s.apply_ms is not None]))} | "
            f"{fmt_ms(median_or_none([s.verify_ms for s in mine if s.verify_ms is not None]))} |")
    ok_all = len(steps) - len(failures)
    lines.append(
        f"| **total** | | | {offered_total} | {len(steps)} | {ok_all} | "
        f"{(f'{100 * ok_all / len(steps):.1f}%' if steps else '–')} | "
        f"{fmt_ms(median_or_none([s.apply_ms for s in steps if s.apply_ms is not None]))} | "
        f"{fmt_ms(median_or_none([s.verify_ms for s in steps if s.verify_ms is not None]))} |")

    never = [tid for tid in ids if not any(r.offered.get(tid) for r in results)]
    if never:
        lines += ["", f"Offered on no bundled example ({len(never)}), so exercised only by their own tests: "
                  + ", ".join(never) + "."]
    lines += [
        "",
        "## Steps offered per workload",
        "",
        "How many steps each transformation offers on each example (all of them, before sampling), one table "
        "per Step-TP group; `·` is none.",
    ]
    for group in dict.fromkeys(groups[t] for t in ids):
        cols = [t for t in ids if groups[t] == group]
        lines += ["", f"### {group.capitalize()}", "",
                  "| workload | " + " | ".join(cols) + " | total |",
                  "|---|" + "---:|" * (len(cols) + 1)]
        for r in results:
            counts = [r.offered.get(t, 0) for t in cols]
            lines.append(f"| {r.example} | " + " | ".join(str(c) if c else "·" for c in counts) + f" | {sum(counts)} |")
        totals = [sum(r.offered.get(t, 0) for r in results) for t in cols]
        lines.append("| **total** | " + " | ".join(f"**{c}**" for c in totals) + f" | **{sum(totals)}** |")

    lines += ["", "## Failures", ""]
    if not failures and not listing_errors:
        lines.append("None: every applied step verified, and every candidate listing returned.")
    for title, kinds in (("Apply failures", ("apply-error",)),
                         ("Verification failures", ("mismatch", "verify-error"))):
        mine = [s for s in failures if s.status in kinds]
        if not mine:
            continue
        lines += [f"### {title}", "", f"{len(mine)} step{'s' if len(mine) != 1 else ''}; each is a bug in the "
                  "transformation named (its check offered a step it cannot do).", ""]
        lines += ["| transformation | workload | step | error |", "|---|---|---|---|"]
        for s in sorted(mine, key=lambda s: (ids.index(s.id), s.example)):
            step = json.dumps({"id": s.id, "args": s.args})
            lines.append(f"| {s.id} | {s.example} | `{step}` | {md_cell(s.error)} |")
        lines.append("")
    if listing_errors:
        lines += ["### Candidate listings that raised", "", "| transformation | workload | error |", "|---|---|---|"]
        for example, tid, err in listing_errors:
            lines.append(f"| {tid} | {example} | {md_cell(err)} |")
        lines.append("")

    lines += [
        "",
        "## Candidate listing time",
        "",
        f"The largest example, {listing['example']} ({listing['equations']} equations, {listing['candidates']} "
        f"candidates): median of {args.listing_runs} runs of `candidates(analysis)` over every transformation. "
        "An editor lists the steps at the cursor on each request, so this must stay cheap: no lowering, no TVM.",
        "",
        "| figure | value | target |",
        "|---|---:|---:|",
        f"| all transformations, median | {listing['total_ms']:.1f} ms | < {LISTING_TARGET_MS:.0f} ms |",
        f"| all transformations, slowest run | {listing['max_ms']:.1f} ms | |",
        f"| slowest example ({listing['slowest'][0]}), median | {listing['slowest'][1]:.1f} ms | < {LISTING_TARGET_MS:.0f} ms |",
        "",
        ("Within the target." if listing["total_ms"] < LISTING_TARGET_MS and listing["slowest"][1] < LISTING_TARGET_MS
         else "Over the target on this run; the slowest transformations come first below."),
        "",
        "Per transformation (median; the context's shared tables — block names, loop sites — are built "
        f"once per run first, {listing['shared_ms']:.2f} ms):",
        "",
        "| transformation | median ms | candidates |",
        "|---|---:|---:|",
    ]
    per = listing["per"]
    for tid in sorted(per, key=lambda t: -per[t][0]):
        ms, count = per[tid]
        lines.append(f"| {tid} | {ms:.2f} | {count} |")
    return "\n".join(lines) + "\n"


def md_cell(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > 400:
        text = text[:400] + " …"
    return text.replace("|", "\\|")


def tvm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:
        return "?"


# -------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None, metavar="N",
                    help="at most N steps per transformation per example (default: every offered step)")
    ap.add_argument("--jobs", type=int, default=1, help="examples run in this many worker processes")
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "transforms.md", help="where to write the report")
    ap.add_argument("--no-docs", action="store_true", help="print the summary only")
    ap.add_argument("--only", type=lambda s: tuple(s.split(",")), default=None, metavar="ID,...",
                    help="only these transformations")
    ap.add_argument("--examples", type=lambda s: s.split(","), default=None, metavar="NAME,...")
    ap.add_argument("--listing-runs", type=int, default=LISTING_RUNS)
    args = ap.parse_args()

    from leir import transforms as T

    args.load_before = os.getloadavg()[0]
    names = args.examples or sorted(p.stem for p in EXAMPLES.glob("*.leir"))
    print(f"{len(T.ALL)} transformations: {', '.join(t.ID for t in T.ALL)}", flush=True)
    start = time.perf_counter()
    tasks = [(name, args.sample, args.only) for name in names]
    results: list[ExampleResult] = []
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            for r in pool.imap_unordered(run_example, tasks):
                results.append(r)
                progress(r, start)
    else:
        for task in tasks:
            r = run_example(task)
            results.append(r)
            progress(r, start)
    results.sort(key=lambda r: names.index(r.example))
    listing = listing_times(largest_example(names), args.listing_runs)
    listing["slowest"] = slowest_listing(names, args.listing_runs)
    elapsed = time.perf_counter() - start

    text = report(results, listing, args, elapsed)
    if not args.no_docs:
        args.docs.write_text(text)
        print(f"wrote {args.docs}")
    steps = [s for r in results for s in r.steps]
    failures = [s for s in steps if s.status != "verified"]
    listing_errors = [e for r in results for e in r.listing_errors]
    print(f"{len(steps)} steps applied, {len(steps) - len(failures)} verified, {len(failures)} failed; "
          f"listing {listing['total_ms']:.1f} ms on {listing['example']}; {elapsed / 60:.1f} min")
    if failures or listing_errors:
        print(f"\n!!! {len(failures)} FAILED STEPS, {len(listing_errors)} CANDIDATE LISTINGS RAISED:", file=sys.stderr)
        for s in failures:
            print(f"!!! {s.status} {s.example} {json.dumps({'id': s.id, 'args': s.args})}: {s.error}", file=sys.stderr)
        for example, tid_err in ((r.example, e) for r in results for e in r.listing_errors):
            print(f"!!! candidates {example} {tid_err[0]}: {tid_err[1]}", file=sys.stderr)
        return 1
    return 0


def progress(r: ExampleResult, start: float) -> None:
    bad = sum(s.status != "verified" for s in r.steps)
    print(f"{time.perf_counter() - start:7.1f}s  {r.example:22s} offered {sum(r.offered.values()):4d}  "
          f"applied {len(r.steps):4d}  failed {bad}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

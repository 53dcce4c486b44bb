"""``leir dataset build|export|stats``: the arguments and what they call.

``leir.tools.cli`` registers this subcommand with ``add_parser(sub)``; the rest of
the command line knows nothing of datasets.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    from leir.tools.dataset.export import DEFAULT_ALGEBRAIC_CAP, DEFAULT_CAP

    p = sub.add_parser("dataset", help="build a step-level dataset of measured, verified steps; export; stats")
    ds = p.add_subparsers(dest="dataset_command", metavar="{build,export,stats}", parser_class=type(p))
    ds.required = True

    b = ds.add_parser("build", help="trajectories of measured, verified steps into OUT/samples.jsonl (resumable)")
    b.add_argument("--workloads", required=True, metavar="DIR", help="directory of .leir workloads (e.g. examples)")
    b.add_argument("--out", required=True, metavar="DIR", help="output directory; run again to resume")
    b.add_argument("--variants", type=int, default=4, metavar="K", help="shape variants per workload (default 4)")
    b.add_argument("--steps", type=int, default=6, metavar="N", help="steps per trajectory at most (default 6)")
    b.add_argument("--budget", type=int, default=6, metavar="M", help="candidates measured per state (default 6)")
    b.add_argument("--trajectories", type=int, default=1, metavar="T", help="trajectories per start program (default 1)")
    b.add_argument("--explore", type=float, default=0.25, metavar="P",
                   help="probability of going on from a random verified candidate, not the fastest (default 0.25)")
    b.add_argument("--teachers", type=int, default=0, metavar="N",
                   help="teacher trajectories per start program that follow the N fastest of the plans of "
                        "leir.tools.plans (policy teacher; default 0); also the most taken from each --teacher-database")
    b.add_argument("--teacher-database", action="append", default=[], metavar="STEM=DIR", dest="teacher_databases",
                   help="teacher trajectories from the MetaSchedule tuning database in DIR, for the workload STEM.leir "
                        "(its records' traces translated into catalogue steps); repeatable")
    b.add_argument("--target", choices=["llvm", "cuda"], default="llvm",
                   help="this CPU or this machine's GPU (with --rpc: what the remote devices are)")
    b.add_argument("--rpc", metavar="HOST:PORT:KEY", help="measure on the devices a TVM RPC tracker pools under KEY")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--ranker", default="heuristic", metavar="NAME",
                   help="what orders each state's candidates before the budget is spent: heuristic (default), "
                        "model (the local model; the build stops if it does not load) or another installed ranker")
    b.add_argument("--jobs", type=int, default=2, metavar="J", help="measurement workers (default 2)")
    b.add_argument("--repeat", type=int, default=3, metavar="R", help="timed runs per measurement (default 3)")
    b.add_argument("--min-run-ms", type=float, default=2.0, metavar="MS", help="least duration of a timed run (default 2)")
    b.add_argument("--verify", choices=["engine", "full"], default="engine",
                   help="engine (default): each kernel checked by the measurement engine against the NumPy evaluation "
                        "of the trajectory's start program on seeds 0, 1, 2; full: leir.transforms.verify")
    b.add_argument("--only", nargs="+", metavar="FILE", default=[], help="only these workload file names")
    b.add_argument("--shard", metavar="I/N", type=_shard,
                   help="build only every N-th workload from the I-th (0-based): N machines, one dataset")
    b.add_argument("--cache-dir", metavar="DIR", help="measurement cache (default: the user's, as for leir measure)")
    b.add_argument("--no-export", action="store_true", help="do not export (chat.jsonl, Parquet, splits) at the end")
    _export_arguments(b, DEFAULT_CAP, DEFAULT_ALGEBRAIC_CAP)
    b.set_defaults(handler=cmd_build)

    e = ds.add_parser("export", help="filter and export OUT/samples.jsonl: records, Parquet, splits, chat.jsonl")
    e.add_argument("dir", metavar="DIR")
    e.add_argument("--seed", type=int, default=0)
    _export_arguments(e, DEFAULT_CAP, DEFAULT_ALGEBRAIC_CAP)
    e.set_defaults(handler=cmd_export)

    s = ds.add_parser("stats", help="counts, pass rate, speedups, trajectory lengths, tokens, plots")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--json", action="store_true", help="print the figures as JSON")
    s.add_argument("--no-plots", action="store_true", help="no PNG plots")
    s.add_argument("--no-tokens", action="store_true", help="no token counts")
    s.add_argument("--plots", metavar="DIR", help="where the plots go (default DIR/plots)")
    s.set_defaults(handler=cmd_stats)


def _export_arguments(p, cap: int, algebraic_cap: int) -> None:
    p.add_argument("--cap", type=int, default=cap, help=f"samples kept per strategy at most (default {cap})")
    p.add_argument("--algebraic-cap", type=int, default=algebraic_cap,
                   help=f"per algebraic strategy (default {algebraic_cap})")
    p.add_argument("--heldout", type=float, default=0.15, metavar="F",
                   help="fraction of workload families held out whole (default 0.15)")
    p.add_argument("--no-parquet", action="store_true", help="JSONL only")
    p.add_argument("--chat-min-speedup", type=float, metavar="X",
                   help="only steps at least X times faster go to chat.jsonl (default: every kept step)")


def _shard(text: str) -> tuple[int, int]:
    index, sep, count = text.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise ValueError(text)
    return int(index), int(count)


def cmd_build(args) -> int:
    from leir.tools.dataset.build import BuildConfig, build

    cfg = BuildConfig(workloads=args.workloads, out=args.out, variants=args.variants, steps=args.steps,
                      budget=args.budget, target=args.target, seed=args.seed, jobs=args.jobs,
                      trajectories=args.trajectories, explore=args.explore, repeat=args.repeat,
                      min_run_ms=args.min_run_ms, verify=args.verify, cache_dir=args.cache_dir, rpc=args.rpc,
                      only=list(args.only), shard=args.shard, teachers=args.teachers,
                      teacher_databases=list(args.teacher_databases), ranker=args.ranker)
    summary = build(cfg)
    print(summary.text(), file=sys.stderr)
    if not args.no_export:
        _export(args.out, args)
    return 0


def _export(directory: str, args) -> None:
    from leir.tools.dataset.export import export

    summary = export(directory, cap=args.cap, algebraic_cap=args.algebraic_cap, seed=args.seed,
                     heldout_fraction=args.heldout, parquet=not args.no_parquet,
                     chat_min_speedup=args.chat_min_speedup)
    print(summary.text(), file=sys.stderr)


def cmd_export(args) -> int:
    _export(args.dir, args)
    return 0


def cmd_stats(args) -> int:
    from leir.tools.dataset.stats import compute, format_stats, plot, write_stats

    stats = compute(args.dir, tokens=not args.no_tokens)
    if not args.no_plots:
        stats["plots"] = [str(p) for p in plot(stats, args.dir, args.plots or Path(args.dir) / "plots")]
    write_stats(stats, Path(args.dir) / "stats.json")
    if args.json:
        print(json.dumps(stats, indent=1))
    else:
        print(format_stats(stats))
        for p in stats.get("plots", []):
            print(f"plot: {p}")
    return 0

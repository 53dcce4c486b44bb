"""``leir dataset stats DIR``: what a build holds.

Counts per strategy, per workload and per policy (``exploit``, ``explore``,
``teacher``; the samples no trajectory went on with under ``none``), what
the teacher sources gave (``OUT/teachers.json``: plans screened and
followed, database records translated, stopped, and the instructions
without a catalogue step), the verification pass rate, the
speedup distribution (verified samples with a latency), trajectory lengths
(steps the trajectory went on with), tokens per sample under the tokenizer
of the LEIR token figure (``leir.tools.token_counts``: SmolLM2's BPE) for the program
before, the program after, the reasoning and the whole chat pair, and two
plots (PNG): speedup per step index, and strategy frequency.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from leir.tools.dataset.build import TEACHERS, DatasetError, read_samples
from leir.tools.dataset.records import POLICIES

#: Below this ratio from 1 a speedup is measurement noise (as in leir.tools.optimize).
NOISE = 0.03


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = sorted(values)

    def q(p: float) -> float:
        return v[min(len(v) - 1, max(0, round(p * (len(v) - 1))))]

    return {"min": v[0], "p10": q(0.1), "p25": q(0.25), "median": q(0.5), "p75": q(0.75), "p90": q(0.9),
            "max": v[-1], "geomean": math.exp(statistics.fmean(math.log(x) for x in v))}


def compute(out: str | Path, tokens: bool = True) -> dict:
    from leir.tools.dataset.export import chat_pair

    samples = list(read_samples(Path(out)))
    if not samples:
        raise DatasetError(f"{out}: no samples")
    verified = [s for s in samples if s["verified"]]
    timed = [s for s in verified if s["speedup"] is not None]
    speedups = [s["speedup"] for s in timed]
    per_strategy: dict[str, dict] = {}
    for name, group in _group(samples, "strategy").items():
        sp = [s["speedup"] for s in group if s["verified"] and s["speedup"] is not None]
        per_strategy[name] = {"samples": len(group), "verified": sum(s["verified"] for s in group),
                              "median_speedup": statistics.median(sp) if sp else None,
                              "faster": sum(x > 1 + NOISE for x in sp)}
    per_workload = {name: {"samples": len(g), "verified": sum(s["verified"] for s in g),
                           "variants": len({s["variant"] for s in g})}
                    for name, g in _group(samples, "workload").items()}
    per_policy = {}
    for name in (*POLICIES, "none"):
        group = [s for s in samples if (s["policy"] or "none") == name]
        if not group and name != "teacher":
            continue
        sp = [s["speedup"] for s in group if s["verified"] and s["speedup"] is not None]
        per_policy[name] = {"samples": len(group), "verified": sum(s["verified"] for s in group),
                            "trajectories": len({s["trajectory"] for s in group}) if name != "none" else None,
                            "median_speedup": statistics.median(sp) if sp else None}
    lengths = Counter()
    for tid, group in _group(samples, "trajectory").items():
        lengths[sum(s["chosen"] for s in group)] += 1
    per_step = defaultdict(list)
    for s in timed:
        per_step[s["step_index"]].append(s["speedup"])
    result = {
        "samples": len(samples),
        "verified": len(verified),
        "verification_pass_rate": len(verified) / len(samples),
        "failures": dict(Counter((s["error"] or s["verification"]["summary"]).split(":")[0]
                                 for s in samples if not s["verified"]).most_common(10)),
        "workloads": len(per_workload),
        "trajectories": sum(lengths.values()),
        "trajectory_lengths": {str(k): v for k, v in sorted(lengths.items())},
        "speedup": _quantiles(speedups),
        "faster": sum(x > 1 + NOISE for x in speedups),
        "slower": sum(x < 1 - NOISE for x in speedups),
        "neutral": sum(abs(x - 1) <= NOISE for x in speedups),
        "speedup_per_step": {str(k): _quantiles(v) for k, v in sorted(per_step.items())},
        "per_strategy": dict(sorted(per_strategy.items(), key=lambda kv: -kv[1]["samples"])),
        "per_workload": dict(sorted(per_workload.items())),
        "per_policy": per_policy,
        "teachers": teacher_sources(Path(out)),
        "targets": dict(Counter(s["target"] for s in samples)),
        "devices": dict(Counter(s["device"] for s in samples)),
    }
    if tokens:
        result["tokens"] = _tokens(samples, chat_pair)
    return result


def teacher_sources(out: Path) -> dict | None:
    """What ``OUT/teachers.json`` says the teacher sources gave, summed over
    the start programs (None without one): the plans screened, verified and
    followed; per database, its records for the start programs, translated
    whole, stopped (and at what), the instructions without a catalogue step
    (``lost``) and what became of the translated ones."""
    path = out / TEACHERS if out.is_dir() else out.parent / TEACHERS
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    plans = Counter()
    databases: dict[str, dict] = {}
    for entry in data.values():
        if "plans" in entry:
            p = entry["plans"]
            plans.update({"start_programs": 1, "screened": p["screened"], "verified": p["verified"],
                          "followed": len(p["followed"])})
        for report in entry.get("databases", []):
            d = databases.setdefault(report["database"], {
                "records": 0, "translated": 0, "stopped": 0, "stopped_at": Counter(), "lost": Counter(),
                "followed": 0, "same_program": 0, "over_limit": 0, "no_step": 0, "errors": []})
            if "error" in report:
                d["errors"].append(report["error"])
                continue
            for k in ("records", "translated", "stopped", "same_program", "over_limit", "no_step"):
                d[k] += report[k]
            d["followed"] += len(report["followed"])
            d["stopped_at"].update(report["stopped_at"])
            d["lost"].update(report["lost"])
    for d in databases.values():
        d["translated_fraction"] = d["translated"] / d["records"] if d["records"] else None
        d["stopped_at"], d["lost"] = dict(d["stopped_at"].most_common()), dict(d["lost"].most_common())
    return {"plans": dict(plans), "databases": dict(sorted(databases.items()))}


def _group(samples, key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        out[s[key]].append(s)
    return out


def _tokens(samples, chat_pair) -> dict:
    """Token counts per sample (SmolLM2's BPE), or why there are none."""
    try:
        from leir.tools.token_counts import count_tokens, tokenizer_name

        count_tokens("L")
    except ImportError as e:  # TokenizerUnavailable is an ImportError too
        return {"unavailable": str(e)}
    fields = {"before": [], "after": [], "reasoning": [], "chat": []}
    for s in samples:
        fields["before"].append(count_tokens(s["before"]))
        fields["after"].append(count_tokens(s["after"]))
        fields["reasoning"].append(count_tokens(s["reasoning"]))
        pair = chat_pair(s)
        fields["chat"].append(sum(count_tokens(m["content"]) for m in pair["messages"]))
    out = {"tokenizer": tokenizer_name()}
    for name, values in fields.items():
        out[name] = {"mean": statistics.fmean(values), "median": statistics.median(values), "max": max(values),
                     "total": sum(values)}
    return out


# ------------------------------------------------------------ plots


def plot(stats: dict, samples_dir: str | Path, plots_dir: str | Path) -> list[Path]:
    """speedup_per_step.png and strategy_frequency.png; returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DatasetError("plots need matplotlib: pip install 'leir-lsp[dataset]' (or pass --no-plots)") from None
    plots_dir = Path(plots_dir)
    plots_dir.mkdir(parents=True, exist_ok=True)
    per_step = defaultdict(list)
    for s in read_samples(Path(samples_dir)):
        if s["verified"] and s["speedup"]:
            per_step[s["step_index"]].append(s["speedup"])
    written = []

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = sorted(per_step)
    if steps:
        ax.boxplot([per_step[k] for k in steps], positions=steps, showfliers=True)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("step index in the trajectory")
    ax.set_ylabel("speedup (latency before / after), log scale")
    ax.set_title("Measured speedup of each step")
    fig.tight_layout()
    path = plots_dir / "speedup_per_step.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(7, max(3, 0.28 * len(stats["per_strategy"]) + 1)))
    names = list(stats["per_strategy"])[::-1]
    ax.barh(names, [stats["per_strategy"][n]["samples"] for n in names], color="#4c72b0", label="samples")
    ax.barh(names, [stats["per_strategy"][n]["verified"] for n in names], color="#55a868", label="verified")
    ax.set_xlabel("samples")
    ax.set_title("Strategy frequency")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = plots_dir / "strategy_frequency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


# ------------------------------------------------------------ text


def format_stats(stats: dict) -> str:
    lines = [f"samples: {stats['samples']}, verified: {stats['verified']} "
             f"({stats['verification_pass_rate']:.1%}), workloads: {stats['workloads']}, "
             f"trajectories: {stats['trajectories']}"]
    if stats["failures"]:
        lines.append("failures: " + "; ".join(f"{n} {why}" for why, n in stats["failures"].items()))
    sp = stats["speedup"]
    if sp:
        lines.append(f"speedup (verified, measured): median {sp['median']:.3g}x, geomean {sp['geomean']:.3g}x, "
                     f"p10 {sp['p10']:.3g}x, p90 {sp['p90']:.3g}x, min {sp['min']:.3g}x, max {sp['max']:.3g}x; "
                     f"{stats['faster']} faster, {stats['slower']} slower, {stats['neutral']} within {NOISE:.0%}")
    lines.append("trajectory lengths: " + ", ".join(f"{k} steps: {v}" for k, v in stats["trajectory_lengths"].items()))
    for k, q in stats["speedup_per_step"].items():
        lines.append(f"  step {k}: median {q['median']:.3g}x, geomean {q['geomean']:.3g}x")
    lines.append("per strategy (samples / verified / median speedup):")
    for name, row in stats["per_strategy"].items():
        med = f"{row['median_speedup']:.3g}x" if row["median_speedup"] is not None else "-"
        lines.append(f"  {name:28s} {row['samples']:6d} {row['verified']:6d} {med:>9s}")
    lines.append("per policy (samples / verified / trajectories / median speedup):")
    for name, row in stats.get("per_policy", {}).items():
        med = f"{row['median_speedup']:.3g}x" if row["median_speedup"] is not None else "-"
        traj = str(row["trajectories"]) if row["trajectories"] is not None else "-"
        lines.append(f"  {name:28s} {row['samples']:6d} {row['verified']:6d} {traj:>6s} {med:>9s}")
    teachers = stats.get("teachers")
    if teachers:
        p = teachers["plans"]
        if p:
            lines.append(f"teacher plans: {p['followed']} followed of {p['verified']} verified of {p['screened']} "
                         f"screened, for {p['start_programs']} start programs")
        for directory, d in teachers["databases"].items():
            line = (f"teacher database {directory}: {d['records']} records of the start programs, "
                    f"{d['translated']} translated whole, {d['stopped']} stopped, {d['followed']} followed "
                    f"({d['same_program']} reach a program already followed, {d['over_limit']} over --teachers)")
            if d["stopped_at"]:
                line += "; stopped at: " + ", ".join(f"{why} {n}" for why, n in d["stopped_at"].items())
            if d["lost"]:
                line += "; without a catalogue step: " + ", ".join(f"{k} {n}" for k, n in d["lost"].items())
            if d["errors"]:
                line += "; errors: " + "; ".join(d["errors"])
            lines.append(line)
    lines.append("per workload (samples / verified / variants):")
    for name, row in stats["per_workload"].items():
        lines.append(f"  {name:28s} {row['samples']:6d} {row['verified']:6d} {row['variants']:4d}")
    tok = stats.get("tokens")
    if tok:
        if "unavailable" in tok:
            lines.append(f"tokens: unavailable ({tok['unavailable']})")
        else:
            lines.append(f"tokens per sample ({tok['tokenizer']}): " + ", ".join(
                f"{k} mean {tok[k]['mean']:.0f} (max {tok[k]['max']})" for k in ("before", "after", "reasoning", "chat")))
    return "\n".join(lines)


def write_stats(stats: dict, path: Path) -> None:
    from leir.files import write_atomic

    write_atomic(path, json.dumps(stats, indent=1) + "\n")

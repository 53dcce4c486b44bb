"""Exports of a build: filtered records (JSONL and Parquet), splits by
workload, and Step-TP's chat form.

``export(OUT)`` reads ``OUT/samples.jsonl`` and writes:

- ``OUT/records.jsonl`` and ``OUT/records.parquet``: the kept samples, every
  field (in Parquet, fields whose keys vary per sample, ``step``,
  ``variant_sizes``, ``verification`` and ``reasoning_facts``, are JSON
  strings; ``step`` is then exactly the text ``leir apply --step`` takes);
- ``OUT/data/{train,validation,test,heldout}.parquet`` and
  ``OUT/chat/{split}.jsonl``: the splits (below);
- ``OUT/chat.jsonl``: every kept sample as a Step-TP chat pair;
- ``OUT/splits.json``: which workload family went to which split, counts
  (per split and per ``policy``: exploit, explore, teacher, none);
- ``OUT/README.md``: a dataset card whose header tells the ``datasets``
  library where the splits are, so ``datasets.load_dataset("OUT")`` loads them.

**Filtering**, as Step-TP's, so that easy strategies do not dominate: only
verified samples with a measured latency; one sample per identical
(``before``, ``step``) pair (the same step from the same program, reached by
two trajectories: the first in file order, or the first ``teacher`` one, so
that a teacher trajectory keeps all its steps); at most ``cap`` samples per strategy (``algebraic_cap``
for the algebraic rewrites, which apply almost everywhere and change no
latency), the kept ones chosen by a seeded shuffle rather than by file order.

**Splits** are by workload *family*: a file, its ``_cpu``/``_gpu``/``_f16``
styles and all their shape variants are one family, so that no program of
one split is a rescheduled copy of another's. ``heldout`` takes whole
families (about ``heldout_fraction`` of them) for measuring generalization
to unseen workloads; the rest are divided into train, validation and test,
again by family. The assignment is a seeded hash of the family name: stable
when workloads are added.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from leir.tools.dataset.build import DatasetError, read_samples
from leir.files import write_atomic

SPLITS = ("train", "validation", "test", "heldout")
#: Step-TP caps each common strategy at 2,000 samples and the algebraic ones far lower.
DEFAULT_CAP = 2000
DEFAULT_ALGEBRAIC_CAP = 200
ALGEBRAIC = frozenset({
    "factorization", "expand_factorization", "cancellation", "expand_cancellation", "together", "apart",
    "powsimp", "expand_powsimp", "logsimp", "expand_log", "collect", "expand_collect",
})
#: Suffixes of a workload's styles and precisions: the same computation.
FAMILY_SUFFIXES = ("_cpu", "_gpu", "_f16")
#: Fields stored as JSON text in Parquet (their keys vary from sample to sample).
JSON_COLUMNS = ("step", "variant_sizes", "verification", "reasoning_facts")


def family(workload: str) -> str:
    """``matmul_cpu.leir`` -> ``matmul``."""
    stem = Path(workload).stem
    for suffix in FAMILY_SUFFIXES:
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def _hash(seed: int, text: str) -> float:
    digest = hashlib.sha256(f"{seed}:{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_splits(families: list[str], seed: int = 0, heldout_fraction: float = 0.15,
                  validation_fraction: float = 0.1, test_fraction: float = 0.1) -> dict[str, str]:
    """family -> split. With four families or more, every split gets at least one."""
    ordered = sorted(set(families), key=lambda f: (_hash(seed, f), f))
    n = len(ordered)
    out: dict[str, str] = {}
    if n == 0:
        return out
    counts = {
        "heldout": math.ceil(n * heldout_fraction) if n >= 4 else 0,
        "test": max(1, round(n * test_fraction)) if n >= 4 else 0,
        "validation": max(1, round(n * validation_fraction)) if n >= 4 else 0,
    }
    i = 0
    for split in ("heldout", "test", "validation"):
        for f in ordered[i: i + counts[split]]:
            out[f] = split
        i += counts[split]
    for f in ordered[i:]:
        out[f] = "train"
    return out


def select(samples, cap: int = DEFAULT_CAP, algebraic_cap: int = DEFAULT_ALGEBRAIC_CAP, seed: int = 0,
           verified_only: bool = True) -> tuple[list[dict], dict[str, int]]:
    """The kept samples (in file order) and how many each filter removed."""
    removed = Counter()
    seen: dict[tuple[str, str], int] = {}
    kept = []
    for s in samples:
        if verified_only and not (s["verified"] and s["latency_after_ms"] is not None):
            removed["not verified"] += 1
            continue
        key = (s["before"], json.dumps(s["step"], sort_keys=True))
        if key in seen:
            removed["duplicate (program, step)"] += 1
            if s["policy"] == "teacher" and kept[seen[key]]["policy"] != "teacher":
                kept[seen[key]] = s  # the step of an expert's trajectory keeps its place in that trajectory
            continue
        seen[key] = len(kept)
        kept.append(s)
    by_strategy: dict[str, list[int]] = {}
    for i, s in enumerate(kept):
        by_strategy.setdefault(s["strategy"], []).append(i)
    drop: set[int] = set()
    for strategy, idx in by_strategy.items():
        limit = algebraic_cap if strategy in ALGEBRAIC else cap
        if len(idx) > limit:
            rng = random.Random(_hash(seed, strategy))
            shuffled = idx[:]
            rng.shuffle(shuffled)
            drop.update(shuffled[limit:])
            removed[f"over the {strategy} cap ({limit})"] += len(idx) - limit
    return [s for i, s in enumerate(kept) if i not in drop], dict(removed)


# ------------------------------------------------------------ chat form


def tensors_text(tensors: list[dict]) -> str:
    roles = {"in": "input", "out": "output", "tmp": "temporary"}
    return "\n".join(f"- {t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}] ({roles.get(t['role'], t['role'])})"
                     for t in tensors)


def chat_pair(sample: dict) -> dict:
    """Step-TP's form: the user gives the program and the known tensors;
    the assistant answers ``<think>REASONING</think><answer>JSON</answer>``
    with ``transformed_IR`` and ``applied_strategies`` (Step-TP's strategy
    name where there is one, else ours), and our exact ``step``."""
    user = (f"Here is a LEIR tensor program for {sample['target']} ({sample['device']}).\n"
            f"Known tensors:\n{tensors_text(sample['tensors'])}\n\n"
            f"Program:\n{sample['before'].rstrip()}\n\n"
            "Apply one transformation step that keeps the program numerically equivalent, explain how it "
            "changes the latency, and return the transformed IR and the strategy applied.")
    answer = {
        "transformed_IR": sample["after"],
        "applied_strategies": [sample["steptp_strategy"] or sample["strategy"]],
        "step": sample["step"],
    }
    assistant = f"<think>{sample['reasoning']}</think><answer>{json.dumps(answer, ensure_ascii=False)}</answer>"
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


# ------------------------------------------------------------ Parquet


def _schema():
    import pyarrow as pa

    tensor = pa.struct([("name", pa.string()), ("role", pa.string()), ("dtype", pa.string()),
                        ("shape", pa.list_(pa.int64()))])
    fields = [
        ("id", pa.string()), ("workload", pa.string()), ("family", pa.string()), ("split", pa.string()),
        ("variant", pa.string()), ("variant_sizes", pa.string()), ("trajectory", pa.string()),
        ("step_index", pa.int32()), ("chosen", pa.bool_()), ("policy", pa.string()), ("before", pa.string()),
        ("step", pa.string()), ("strategy", pa.string()), ("steptp_strategy", pa.string()), ("after", pa.string()),
        ("tensors", pa.list_(tensor)), ("verified", pa.bool_()), ("verification", pa.string()),
        ("latency_before_ms", pa.float64()), ("latency_before_min_ms", pa.float64()),
        ("latency_before_max_ms", pa.float64()), ("latency_before_spread", pa.float64()),
        ("latency_after_ms", pa.float64()), ("latency_after_min_ms", pa.float64()),
        ("latency_after_max_ms", pa.float64()), ("latency_after_spread", pa.float64()), ("runs", pa.int32()),
        ("speedup", pa.float64()), ("target", pa.string()), ("device", pa.string()), ("reasoning", pa.string()),
        ("reasoning_facts", pa.string()), ("error", pa.string()),
    ]
    return pa.schema(fields)


def _row(sample: dict) -> dict:
    row = dict(sample)
    for name in JSON_COLUMNS:
        row[name] = json.dumps(sample[name], sort_keys=True, ensure_ascii=False)
    return row


def write_parquet(path: Path, samples: list[dict]) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError("Parquet export needs pyarrow: pip install 'leir-lsp[dataset]'") from None
    schema = _schema()
    table = pa.Table.from_pylist([_row(s) for s in samples], schema=schema)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def _write_jsonl(path: Path, rows) -> None:
    write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


# ------------------------------------------------------------ export


@dataclass
class ExportSummary:
    out: Path
    read: int
    kept: int
    removed: dict[str, int]
    splits: dict[str, int]
    #: Kept samples per policy (``exploit``, ``explore``, ``teacher``; ``none``: not chosen).
    policies: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        removed = ", ".join(f"{n} {why}" for why, n in sorted(self.removed.items())) or "none"
        splits = ", ".join(f"{k} {self.splits.get(k, 0)}" for k in SPLITS)
        policies = ", ".join(f"{k} {n}" for k, n in self.policies.items())
        return (f"exported {self.kept} of {self.read} samples to {self.out} (removed: {removed}); splits: {splits}"
                + (f"; policies: {policies}" if policies else ""))


def policy_counts(samples) -> dict[str, int]:
    """Samples per policy, in ``records.POLICIES`` order, ``none`` (not chosen) last."""
    from leir.tools.dataset.records import POLICIES

    counts = Counter(s["policy"] or "none" for s in samples)
    return {k: counts[k] for k in (*POLICIES, "none") if counts[k]}


def export(out: str | Path, cap: int = DEFAULT_CAP, algebraic_cap: int = DEFAULT_ALGEBRAIC_CAP, seed: int = 0,
           heldout_fraction: float = 0.15, parquet: bool = True,
           chat_min_speedup: float | None = None) -> ExportSummary:
    """Write the exports (module docstring). ``chat_min_speedup``: only
    steps at least this fast go to the chat files (by default every kept
    sample does, slower ones included: their reasoning says they are slower)."""
    out = Path(out)
    samples = list(read_samples(out))
    kept, removed = select(samples, cap, algebraic_cap, seed)
    families = assign_splits([family(s["workload"]) for s in samples], seed, heldout_fraction)
    by_split: dict[str, list[dict]] = {k: [] for k in SPLITS}
    for s in kept:
        s["family"] = family(s["workload"])
        s["split"] = families[s["family"]]
        by_split[s["split"]].append(s)
    _write_jsonl(out / "records.jsonl", kept)
    def chat(rows):
        return (chat_pair(s) for s in rows if chat_min_speedup is None or s["speedup"] >= chat_min_speedup)

    _write_jsonl(out / "chat.jsonl", chat(kept))
    (out / "chat").mkdir(exist_ok=True)
    for split, rows in by_split.items():
        _write_jsonl(out / "chat" / f"{split}.jsonl", chat(rows))
    if parquet:
        (out / "data").mkdir(exist_ok=True)
        write_parquet(out / "records.parquet", kept)
        for split, rows in by_split.items():
            write_parquet(out / "data" / f"{split}.parquet", rows)
    counts = {k: len(v) for k, v in by_split.items()}
    policies = policy_counts(kept)
    write_atomic(out / "splits.json", json.dumps({"families": dict(sorted(families.items())), "samples": counts,
                                                  "removed": removed, "kept": len(kept), "read": len(samples),
                                                  "policies": policies,
                                                  "policies_per_split": {k: policy_counts(v)
                                                                         for k, v in by_split.items()}},
                                                 indent=1) + "\n")
    if parquet:
        write_atomic(out / "README.md", _card(counts, len(kept), policies))
    return ExportSummary(out, len(samples), len(kept), removed, counts, policies)


def _card(counts: dict[str, int], kept: int, policies: dict[str, int]) -> str:
    """A dataset card whose YAML header lists the split files, which the
    ``datasets`` library reads (``load_dataset(DIR)``)."""
    files = "\n".join(f"  - split: {k}\n    path: data/{k}.parquet" for k in SPLITS if counts.get(k))
    return f"""---
configs:
- config_name: default
  data_files:
{files}
---
# leir-lsp step dataset

{kept} verified, measured transformation steps on LEIR programs, built by
`leir dataset build` (see docs/dataset.md in leir-lsp). Each record is one
step: `before` program, `step` (the JSON `leir apply --step` takes), `after`
program, verification figures, latencies before and after (medians, with
min, max and spread), speedup, and reasoning computed from analysis.

Splits are by workload family; `heldout` holds whole families never seen in
the others. Counts: {", ".join(f"{k} {counts.get(k, 0)}" for k in SPLITS)}.

`policy` says how the trajectory went on from a sample: `exploit` (the
fastest measured candidate), `explore` (a seeded random one), `teacher` (the
next step of a plan toward a known-good kernel or of a MetaSchedule
tuning record's translated trace), null for the candidates not taken.
Counts: {", ".join(f"{k} {n}" for k, n in policies.items()) or "none"}.

    import datasets
    ds = datasets.load_dataset("parquet", data_files={{"train": "data/train.parquet"}})

`chat.jsonl` and `chat/SPLIT.jsonl` hold the same samples in Step-TP's chat
form (`<think>...</think><answer>{{"transformed_IR", "applied_strategies"}}</answer>`).
"""

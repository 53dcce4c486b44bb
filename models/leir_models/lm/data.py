"""The training examples: the dataset builder's export grouped into states.

A **state** is one program before a step (canonical LEIR), on one target
and machine, with every candidate step measured there: the builder records
each candidate of a state as a sample, the slower ones too
(docs/dataset.md). What the model reads, and what it is taught:

- **input** (``prompt_text``): the target, the machine facts the reasoning
  uses (cores, vector width, cache sizes: ``reasoning_facts.machine``, or
  ``Machine.detect()`` at inference), the known tensors (name, dtype, shape,
  role) and the program, then ``<|step|>``;
- **target** (``target_text``): the next step as compact JSON ``{"id",
  "args"}`` (``step_text``: ``id`` first, the arguments' keys sorted), then
  ``<|reason|>`` and, optionally, its reasoning, then ``<|eos|>``;
- **what is good**: a state's *positive* is its teacher step (``policy ==
  "teacher"``: a plan's or a translated MetaSchedule trace's next step,
  issue 10) or else its fastest measured candidate, if that made the program
  at least ``min_speedup`` faster. Only positives are language-model
  targets. The slower candidates are **negatives**: ``pairs`` orders the
  candidates of a state by measured latency, and the ranking loss (train.py)
  makes a faster step more likely than a slower one. A state where every
  step was slower has no positive but still gives pairs.

**Splits** are the export's, by workload family (a family is in one split
only: ``heldout`` families are never seen in training, validation drives the
loss curve and the kept checkpoint).

Sources, in the order ``load_states`` tries them in a dataset directory:

1. ``records.jsonl`` (``leir dataset export``): the kept samples (verified,
   measured, one per (program, step), capped per strategy), each with its
   ``family`` and ``split``. The full export of a build; not committed for
   the committed sample (it repeats ``samples.jsonl``).
2. ``data/{train,validation,test,heldout}.parquet``: the same records, one
   file per split, with ``step``, ``variant_sizes``, ``verification`` and
   ``reasoning_facts`` as JSON text (needs pyarrow). Committed for
   ``tests/data/dataset/`` (540 samples, 180 states, 3 candidates each).
3. ``samples.jsonl`` with ``splits.json``: the raw samples, filtered here as
   the export filters them (``leir.tools.dataset.export.select``) and split
   by ``splits.json``'s families (or the export's seeded assignment).

The 21,000-sample build of docs/dataset.md is not committed (its
``samples.jsonl`` is ~60 MB); ``leir model train --data DIR`` takes it, or
any other build, where it exists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from leir_models.lm.config import SPECIAL_TOKENS

PAD, BOS, EOS, STEP, REASON = SPECIAL_TOKENS
SPLITS = ("train", "validation", "test", "heldout")


class DataError(Exception):
    """A dataset directory without usable samples."""


@dataclass(frozen=True)
class Candidate:
    """One measured step of a state."""

    step: dict[str, Any]
    latency_ms: float
    speedup: float
    reasoning: str
    policy: str | None


@dataclass
class State:
    """A program before a step, on one target and machine, with its measured candidates."""

    before: str
    target: str
    machine: dict[str, Any]
    tensors: list[dict[str, Any]]
    workload: str
    family: str
    split: str
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def best(self) -> Candidate:
        """The fastest measured candidate."""
        return min(self.candidates, key=lambda c: c.latency_ms)

    def positive(self, min_speedup: float) -> Candidate | None:
        """The step to learn to write here: the teacher's, else the fastest
        if it is at least ``min_speedup`` faster; None otherwise."""
        for c in self.candidates:
            if c.policy == "teacher":
                return c
        best = self.best
        return best if best.speedup >= min_speedup else None

    def pairs(self, margin: float) -> list[tuple[int, int]]:
        """(faster, slower) candidate indices whose latencies differ by at least ``margin`` x."""
        out = []
        for i, a in enumerate(self.candidates):
            for j, b in enumerate(self.candidates):
                if a.latency_ms * margin <= b.latency_ms:
                    out.append((i, j))
        return out

    def prompt(self) -> str:
        return prompt_text(self.before, self.tensors, self.target, self.machine)


# ------------------------------------------------------------ the text the model reads and writes


def step_text(step: dict[str, Any]) -> str:
    """``{"id":...,"args":{...}}``: compact, ``id`` first, argument keys sorted."""
    args = step.get("args", {})
    return json.dumps({"id": step["id"], "args": {k: args[k] for k in sorted(args)}},
                      separators=(",", ":"), ensure_ascii=False)


def machine_text(machine: dict[str, Any]) -> str:
    def size(n: int) -> str:
        return f"{n // 1048576}M" if n >= 1048576 and n % 1048576 == 0 else f"{n // 1024}K"

    if not machine:
        return "unknown"
    return (f"{machine.get('cores', '?')} cores, {machine.get('vector_bytes', '?')}-byte vectors "
            f"({machine.get('vector_isa', '?')}), L1d {size(machine.get('l1d', 0))}, L2 {size(machine.get('l2', 0))}, "
            f"L3 {size(machine.get('l3', 0))}")


def tensors_text(tensors: Sequence[dict[str, Any]]) -> str:
    roles = {"in": "input", "out": "output", "tmp": "temporary"}
    return "\n".join(f"{t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}] {roles.get(t['role'], t['role'])}"
                     for t in tensors)


def prompt_text(before: str, tensors: Sequence[dict[str, Any]], target: str, machine: dict[str, Any]) -> str:
    """What the model reads before the step (without ``<|bos|>``, which the
    tokenizer's template adds)."""
    return (f"target: {target}\nmachine: {machine_text(machine)}\ntensors:\n{tensors_text(tensors)}\n"
            f"program:\n{before.rstrip()}\n{STEP}")


def target_text(candidate: Candidate, reasoning: bool = True, measured: bool = True) -> str:
    """What the model writes: the step, ``<|reason|>``, the reasoning
    (optional; without its measured sentences unless ``measured``:
    ``leir.explain.unmeasured``), ``<|eos|>``."""
    text = ""
    if reasoning:
        from leir.explain.reasoning import unmeasured

        text = candidate.reasoning if measured else unmeasured(candidate.reasoning)
    return step_text(candidate.step) + REASON + text + EOS


def candidate_text(step: dict[str, Any]) -> str:
    """What a candidate is scored on: its step and the ``<|reason|>`` that ends it
    (so that a step is never scored as the prefix of a longer one)."""
    return step_text(step) + REASON


def state_of_analysis(analysis, target: str, machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The prompt fields of a program being edited (``leir.semantics.Analysis``)."""
    from leir.explain.machine import Machine
    from leir.printer import print_program

    return {
        "before": print_program(analysis.program),
        "tensors": [{"name": t.name, "role": t.role, "dtype": t.dtype, "shape": list(t.shape)}
                    for t in analysis.tensors.values()],
        "target": target,
        "machine": machine if machine is not None else Machine.detect().to_json(),
    }


# ------------------------------------------------------------ reading a dataset


def _records_jsonl(path: Path) -> list[dict] | None:
    f = path / "records.jsonl"
    if not f.is_file():
        return None
    return [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]


def _records_parquet(path: Path) -> list[dict] | None:
    files = [path / "data" / f"{s}.parquet" for s in SPLITS]
    if not any(f.is_file() for f in files):
        return None
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    out = []
    for f in files:
        if not f.is_file():
            continue
        for row in pq.read_table(f).to_pylist():
            for name in ("step", "variant_sizes", "verification", "reasoning_facts"):
                if isinstance(row.get(name), str):
                    row[name] = json.loads(row[name])
            out.append(row)
    return out


def _records_samples(path: Path) -> list[dict] | None:
    f = path / "samples.jsonl"
    if not f.is_file():
        return None
    from leir.tools.dataset.export import assign_splits, family, select

    samples = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept, _ = select(samples)
    splits_file = path / "splits.json"
    families = (json.loads(splits_file.read_text())["families"] if splits_file.is_file()
                else assign_splits([family(s["workload"]) for s in samples]))
    for s in kept:
        s["family"] = family(s["workload"])
        s["split"] = families.get(s["family"], "train")
    return kept


def load_records(path: str | Path) -> tuple[list[dict], str]:
    """The kept samples of a dataset directory and which source they came from."""
    path = Path(path)
    for name, reader in (("records.jsonl", _records_jsonl), ("data/*.parquet", _records_parquet),
                         ("samples.jsonl", _records_samples)):
        rows = reader(path)
        if rows:
            return rows, name
    raise DataError(f"{path}: no records.jsonl, data/*.parquet or samples.jsonl with samples "
                    "(build one with `leir dataset build`, docs/dataset.md)")


def group_states(records: Iterable[dict]) -> list[State]:
    """States in first-seen order; a state's candidates in record order.
    Records without a measured latency after the step are left out."""
    states: dict[tuple, State] = {}
    for r in records:
        if not r.get("verified", True) or r.get("latency_after_ms") is None:
            continue
        machine = (r.get("reasoning_facts") or {}).get("machine") or {}
        key = (r["before"], r["target"], r.get("device"), r["split"])
        st = states.get(key)
        if st is None:
            st = states[key] = State(r["before"], r["target"], machine, r["tensors"], r["workload"],
                                     r["family"], r["split"])
        st.candidates.append(Candidate(r["step"], r["latency_after_ms"], r["speedup"], r["reasoning"], r.get("policy")))
    return list(states.values())


def load_states(path: str | Path) -> tuple[list[State], str]:
    """Every state of a dataset directory (module docstring) and the source read."""
    records, source = load_records(path)
    return group_states(records), source


def tokenizer_corpus(states: Iterable[State]) -> Iterable[str]:
    """The text a tokenizer is trained on: each state's prompt, and each
    candidate's step and reasoning (train the tokenizer on the training
    split only, so that held-out families are new to it too)."""
    for st in states:
        yield st.prompt()
        for c in st.candidates:
            yield target_text(c)

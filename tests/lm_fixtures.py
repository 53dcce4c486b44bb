"""Shared by tests/test_lm_*.py and the server's model tests: a small dataset
directory cut from the committed sample, and a tiny model trained on it for
a few steps; ``lm_data`` and ``lm_model_dir`` are those, made once per test
session (tests/conftest.py imports them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "tests" / "data" / "dataset"

#: States per split in the small dataset (3 candidates each).
PER_SPLIT = {"train": 8, "validation": 2, "test": 0, "heldout": 3}


def small_dataset(out: Path) -> Path:
    """``out/records.jsonl`` with the first states of each split of the committed sample."""
    from leir_models.lm.data import load_records

    records, _ = load_records(DATASET)
    chosen: dict[str, list[str]] = {k: [] for k in PER_SPLIT}
    rows = []
    for r in records:
        befores = chosen[r["split"]]
        if r["before"] not in befores:
            if len(befores) >= PER_SPLIT[r["split"]]:
                continue
            befores.append(r["before"])
        rows.append(r)
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


def train_tiny(data: Path, out: Path, seed: int = 0, steps: int = 3) -> dict:
    from leir_models.lm.config import TINY_MODEL, TRAIN
    from leir_models.lm.train import train

    cfg = TRAIN.with_(seed=seed, steps=steps, batch_states=2, eval_every=steps, model=TINY_MODEL, threads=1,
                      vocab_size=512)
    return train(cfg, data, out, log=lambda line: None)


@pytest.fixture(scope="session")
def lm_data(tmp_path_factory) -> Path:
    """The small dataset (``small_dataset``)."""
    return small_dataset(tmp_path_factory.mktemp("lm-data"))


@pytest.fixture(scope="session")
def lm_model_dir(lm_data, tmp_path_factory) -> Path:
    """A tiny model trained for 2 steps on ``lm_data`` (seed 0); tests only read it."""
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("lm-model")
    train_tiny(lm_data, out, seed=0, steps=2)
    return out

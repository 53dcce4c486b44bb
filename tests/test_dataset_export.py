"""Dataset exports (issue 7): filtering (dedup, per-strategy caps), splits by
workload family with a held-out split, Step-TP chat form, Parquet loadable
with pyarrow and with ``datasets``, and ``leir dataset stats`` on the
committed sample."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from leir.tools.dataset import records
from leir.tools.dataset.build import SAMPLES, read_samples
from leir.tools.dataset.export import (
    SPLITS,
    assign_splits,
    chat_pair,
    export,
    family,
    select,
)

SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "dataset"


def _sample(**kw) -> dict:
    s = {
        "id": "x", "workload": "matmul.leir", "variant": "orig", "variant_sizes": {}, "trajectory": "matmul.leir/orig/t0",
        "step_index": 0, "chosen": False, "policy": None,
        "before": "L^{4}_{i} [\n  Y_{i} = X_{i};\n];\n", "step": {"id": "split", "args": {"block": "Y", "loop": "i"}},
        "strategy": "split", "steptp_strategy": "loop_split", "after": "after\n",
        "tensors": [{"name": "X", "role": "in", "dtype": "f32", "shape": [4]},
                    {"name": "Y", "role": "out", "dtype": "f32", "shape": [4]}],
        "verified": True,
        "verification": {"method": "engine+evaluate", "seeds": [0, 1, 2], "max_abs_err": 0.0, "max_rel_err": 0.0,
                         "mse": 0.0, "criterion": "exact", "rel_tolerance": 5e-3, "abs_tolerance": {"f32": 1e-3},
                         "mse_tolerance": 1e-5, "summary": "ok"},
        "latency_before_ms": 2.0, "latency_before_min_ms": 1.9, "latency_before_max_ms": 2.1,
        "latency_before_spread": 0.1, "latency_after_ms": 1.0, "latency_after_min_ms": 0.9,
        "latency_after_max_ms": 1.1, "latency_after_spread": 0.2, "runs": 3, "speedup": 2.0, "target": "llvm",
        "device": "cpu", "reasoning": "Because.", "reasoning_facts": {"speedup": 2.0}, "error": None,
    }
    s.update(kw)
    records.validate(s)
    return s


def test_family_groups_styles_and_precisions():
    assert {family(w) for w in ("matmul.leir", "matmul_cpu.leir", "matmul_gpu.leir", "matmul_f16.leir")} == {"matmul"}
    assert family("softmax_matmul.leir") == "softmax_matmul"


def test_select_drops_unverified_and_duplicate_program_step_pairs():
    a = _sample(id="a")
    same = _sample(id="b", trajectory="matmul.leir/orig/t1")  # same (before, step), other trajectory
    other_step = _sample(id="c", step={"id": "split", "args": {"block": "Y", "loop": "j"}})
    failed = _sample(id="d", verified=False, latency_after_ms=None, latency_after_min_ms=None,
                     latency_after_max_ms=None, latency_after_spread=None, speedup=None, error="wrong result")
    kept, removed = select([a, same, other_step, failed])
    assert [s["id"] for s in kept] == ["a", "c"]
    assert removed == {"duplicate (program, step)": 1, "not verified": 1}


def test_a_duplicate_step_keeps_the_teacher_sample_where_there_is_one():
    from leir.tools.dataset.export import policy_counts

    walk = _sample(id="w", chosen=True, policy="exploit")
    teacher = _sample(id="t", trajectory="matmul.leir/orig/plan0", chosen=True, policy="teacher")
    other = _sample(id="o", before="other")
    kept, removed = select([walk, other, teacher])
    assert [s["id"] for s in kept] == ["t", "o"] and removed == {"duplicate (program, step)": 1}
    kept, _ = select([teacher, walk])
    assert [s["id"] for s in kept] == ["t"]
    kept, _ = select([walk, _sample(id="n")])  # without a teacher: the first, as before
    assert [s["id"] for s in kept] == ["w"]
    assert policy_counts([walk, teacher, other, teacher]) == {"exploit": 1, "teacher": 2, "none": 1}


def test_select_caps_each_strategy_and_algebraic_ones_lower():
    many = [_sample(id=f"s{i}", before=f"p{i}") for i in range(10)]
    algebraic = [_sample(id=f"f{i}", before=f"q{i}", strategy="factorization",
                         step={"id": "factorization", "args": {"block": "Y"}}) for i in range(10)]
    kept, removed = select(many + algebraic, cap=4, algebraic_cap=2, seed=3)
    assert sum(s["strategy"] == "split" for s in kept) == 4
    assert sum(s["strategy"] == "factorization" for s in kept) == 2
    assert removed == {"over the split cap (4)": 6, "over the factorization cap (2)": 8}
    # Seeded: the same seed keeps the same samples, another seed others.
    again, _ = select(many + algebraic, cap=4, algebraic_cap=2, seed=3)
    assert [s["id"] for s in again] == [s["id"] for s in kept]
    assert any([s["id"] for s in select(many + algebraic, cap=4, algebraic_cap=2, seed=s)[0]] != [s["id"] for s in kept]
               for s in range(4, 10))


def test_splits_keep_each_family_in_one_split_and_hold_out_whole_families():
    families = [f"w{i}" for i in range(20)]
    splits = assign_splits(families, seed=0, heldout_fraction=0.15)
    assert set(splits) == set(families)
    counts = {k: sum(v == k for v in splits.values()) for k in SPLITS}
    assert counts["heldout"] == 3 and counts["test"] == 2 and counts["validation"] == 2 and counts["train"] == 13
    assert assign_splits(families + ["new"], seed=0)["w0"] in SPLITS
    assert assign_splits(families, seed=0) == splits  # stable
    assert assign_splits(families, seed=1) != splits


def test_chat_pair_is_step_tp_form():
    s = _sample()
    pair = chat_pair(s)
    assert [m["role"] for m in pair["messages"]] == ["user", "assistant"]
    user, assistant = (m["content"] for m in pair["messages"])
    assert s["before"].rstrip() in user
    assert "- X: f32[4] (input)" in user and "- Y: f32[4] (output)" in user
    m = re.fullmatch(r"<think>(.*)</think><answer>(.*)</answer>", assistant, re.S)
    assert m and m.group(1) == s["reasoning"]
    answer = json.loads(m.group(2))
    assert answer["transformed_IR"] == s["after"]
    assert answer["applied_strategies"] == ["loop_split"]
    assert answer["step"] == s["step"]
    no_name = chat_pair(_sample(steptp_strategy=None))
    assert json.loads(re.search(r"<answer>(.*)</answer>", no_name["messages"][1]["content"], re.S).group(1))[
        "applied_strategies"] == ["split"]


# ------------------------------------------------------------ the committed sample


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    shutil.copy(SAMPLE_DIR / SAMPLES, out / SAMPLES)
    summary = export(out)
    return out, summary


def test_committed_sample_has_a_few_hundred_valid_records():
    samples = list(read_samples(SAMPLE_DIR))
    assert 200 <= len(samples) <= 2000
    for s in samples:
        records.validate(s)
    assert len({s["workload"] for s in samples}) >= 20
    assert sum(s["verified"] for s in samples) >= 0.8 * len(samples)


def test_export_writes_records_chat_and_splits(exported):
    out, summary = exported
    samples = list(read_samples(out))
    kept, _ = select(samples)
    assert summary.kept == len(kept) and summary.read == len(samples)
    chat = [json.loads(l) for l in (out / "chat.jsonl").read_text().splitlines()]
    assert len(chat) == len(kept)
    rows = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [s["id"] for s in kept]
    split_of = {}
    for split in SPLITS:
        for line in (out / "chat" / f"{split}.jsonl").read_text().splitlines():
            assert json.loads(line)["messages"][0]["role"] == "user"
    for r in rows:
        assert split_of.setdefault(r["family"], r["split"]) == r["split"]  # a family in one split only
    assert sum(summary.splits.values()) == len(kept)
    assert summary.splits["heldout"] > 0 and summary.splits["train"] > summary.splits["heldout"]


def test_parquet_reads_back_with_pyarrow(exported):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the test extra")
    out, summary = exported
    table = pq.read_table(out / "records.parquet")
    assert table.num_rows == summary.kept
    rows = table.to_pylist()
    first = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert json.loads(rows[0]["step"]) == first["step"]
    assert rows[0]["tensors"] == first["tensors"]
    assert rows[0]["speedup"] == first["speedup"]
    for split in SPLITS:
        assert pq.read_table(out / "data" / f"{split}.parquet").num_rows == summary.splits[split]


def test_export_loads_with_the_datasets_library(exported, tmp_path):
    datasets = pytest.importorskip("datasets", reason="datasets is in the test extra")
    out, summary = exported
    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf"))
    assert {k: ds[k].num_rows for k in ds} == {k: n for k, n in summary.splits.items() if n}
    row = ds["train"][0]
    assert json.loads(row["step"])["id"] == row["strategy"]


def test_stats_of_the_committed_sample(tmp_path):
    from leir.tools.dataset.stats import compute, format_stats, plot

    stats = compute(SAMPLE_DIR, tokens=False)
    samples = list(read_samples(SAMPLE_DIR))
    assert stats["samples"] == len(samples)
    assert stats["verified"] == sum(s["verified"] for s in samples)
    assert sum(r["samples"] for r in stats["per_strategy"].values()) == len(samples)
    assert sum(r["samples"] for r in stats["per_workload"].values()) == len(samples)
    assert sum(stats["trajectory_lengths"].values()) == len({s["trajectory"] for s in samples})
    sp = stats["speedup"]
    assert sp["min"] <= sp["p10"] <= sp["median"] <= sp["p90"] <= sp["max"]
    assert stats["faster"] + stats["slower"] + stats["neutral"] == sum(
        1 for s in samples if s["verified"] and s["speedup"] is not None)
    text = format_stats(stats)
    assert f"samples: {len(samples)}" in text
    pytest.importorskip("matplotlib", reason="matplotlib is in the test extra")
    paths = plot(stats, SAMPLE_DIR, tmp_path)
    assert {p.name for p in paths} == {"speedup_per_step.png", "strategy_frequency.png"}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stats_counts_tokens_with_the_token_figure_tokenizer():
    tokens = pytest.importorskip("leir.tools.token_counts")
    try:
        tokens.count_tokens("L")
    except ImportError as e:
        pytest.skip(f"the tokenizer is optional ({e})")
    from leir.tools.dataset.stats import compute

    stats = compute(SAMPLE_DIR, tokens=True)
    first = next(read_samples(SAMPLE_DIR))
    assert stats["tokens"]["tokenizer"] == tokens.tokenizer_name()
    assert stats["tokens"]["before"]["max"] >= tokens.count_tokens(first["before"]) > 0


def test_cli_stats_and_errors_are_one_line(tmp_path, capsys):
    from leir.tools.cli import main

    shutil.copy(SAMPLE_DIR / SAMPLES, tmp_path / SAMPLES)
    assert main(["dataset", "stats", str(tmp_path), "--no-plots", "--no-tokens", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["samples"] == len(list(read_samples(tmp_path)))
    assert (tmp_path / "stats.json").exists()
    assert main(["dataset", "stats", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such file" in err
    assert main(["dataset", "build", "--workloads", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["dataset", "build", "--workloads", str(tmp_path), "--out", str(tmp_path / "o"), "--steps", "0"]) == 2
    assert "--steps must be at least 1" in capsys.readouterr().err


def test_chat_can_keep_only_steps_that_made_the_program_faster(tmp_path):
    shutil.copy(SAMPLE_DIR / SAMPLES, tmp_path / SAMPLES)
    export(tmp_path, chat_min_speedup=1.05, parquet=False)
    chat = [json.loads(l) for l in (tmp_path / "chat.jsonl").read_text().splitlines()]
    kept, _ = select(read_samples(tmp_path))
    faster = [s for s in kept if s["speedup"] >= 1.05]
    assert 0 < len(chat) == len(faster) < len(kept)
    for pair, s in zip(chat, faster):
        assert s["after"] in pair["messages"][1]["content"] or json.dumps(s["after"]) in pair["messages"][1]["content"]

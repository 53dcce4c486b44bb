"""The model as a ranker (``leir_models.lm.ranker``) and the seam that
finds it (``leir.tools.ranking.load_ranker``): every legal candidate gets a
score, on programs the model never saw; the heuristic is what you get when
no model is installed or its files are missing, with the reason logged."""

from __future__ import annotations

import logging
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir.bridge.document import load_leir  # noqa: E402
from leir.printer import print_program  # noqa: E402
from leir.tools import ranking  # noqa: E402
from leir.tools.ranking import HEURISTIC, Ranker, load_ranker, rank  # noqa: E402
from leir.tools.suggest import suggest  # noqa: E402
from leir_models.lm import tokenizer as tk  # noqa: E402
from leir_models.lm.data import candidate_text, load_states  # noqa: E402
from leir_models.lm.ranker import ModelRanker, logprobs, logprobs_full  # noqa: E402
from lm_fixtures import DATASET, ROOT  # noqa: E402
from programs import SOFTMAX  # noqa: E402

UNSEEN = {"softmax 16x10 (tests/programs.py)": SOFTMAX,
          "sum_axis2 (a held-out family)": (ROOT / "examples" / "sum_axis2.leir").read_text()}


@pytest.fixture(scope="module")
def ranker(lm_model_dir) -> ModelRanker:
    return ModelRanker.load(lm_model_dir)


def test_the_unseen_programs_are_not_in_the_sample():
    seen = {s.before for s in load_states(DATASET)[0]}  # every split of the committed sample
    for text in UNSEEN.values():
        assert print_program(load_leir(text).analysis.program) not in seen


@pytest.mark.parametrize("name", sorted(UNSEEN))
def test_every_legal_candidate_gets_one_finite_score(ranker, name):
    analysis = load_leir(UNSEEN[name]).analysis
    legal = rank(analysis)  # the heuristic's listing: every searched candidate
    ranked = rank(analysis, ranker=ranker)
    assert isinstance(ranker, Ranker)
    assert sorted(r.step.key for r in ranked) == sorted(r.step.key for r in legal)
    assert len({r.step.key for r in ranked}) == len(ranked)
    scores = [r.score for r in ranked]
    assert all(math.isfinite(s) and s >= 0 for s in scores) and scores == sorted(scores, reverse=True)
    assert sum(scores) == pytest.approx(100)
    assert all(r.facts and "probability" in r.facts[0] for r in ranked)
    assert ranker.score(None, [], "llvm") == []


class Backwards(ModelRanker):
    """The real model's class with its likelihoods replaced: the later a step
    is in the list it is given, the likelier; records what it was asked."""

    def __init__(self, shortlist):
        super().__init__(None, None, shortlist=shortlist)
        self.asked = []

    def logprobs_of(self, analysis, steps, target):
        self.asked.append(list(steps))
        return [float(n) for n in range(len(steps))]


def test_the_shortlist_lets_the_model_order_the_heuristics_first_steps_only():
    from leir.transforms.base import Context

    analysis = load_leir(UNSEEN["softmax 16x10 (tests/programs.py)"]).analysis
    heuristic = rank(analysis)
    steps = [r.step for r in heuristic]
    backwards = Backwards(shortlist=3)
    scores = [s for s, _ in backwards.score(Context.of(analysis), steps, "llvm")]
    (asked,) = backwards.asked
    assert asked == steps[:3]  # the model read the heuristic's first three only
    order = sorted(range(len(steps)), key=lambda i: -scores[i])
    assert order[:3] == [2, 1, 0]  # in the model's order, above all others
    assert order[3:] == sorted(range(3, len(steps)), key=lambda i: -heuristic[i].score)  # the heuristic's below
    assert all(scores[i] == heuristic[i].score for i in range(3, len(steps)))
    facts = backwards.score(Context.of(analysis), steps, "llvm")[2][1]
    assert "heuristic's first 3" in facts[0]
    # Without a shortlist the model orders every step.
    alone = Backwards(shortlist=None)
    alone_scores = [s for s, _ in alone.score(Context.of(analysis), steps, "llvm")]
    assert alone.asked == [steps] and max(range(len(steps)), key=lambda i: alone_scores[i]) == len(steps) - 1


def test_the_installed_rankers_use_the_shortlist(lm_model_dir, monkeypatch, caplog):
    from leir_models.lm.ranker import SHORTLIST

    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    assert load_ranker("model").shortlist == SHORTLIST
    monkeypatch.setenv("LEIR_MODEL_SHORTLIST", "5")
    assert load_ranker("model").shortlist == 5
    monkeypatch.setenv("LEIR_MODEL_SHORTLIST", "0")
    assert load_ranker("model").shortlist is None  # the model orders every step
    monkeypatch.setenv("LEIR_MODEL_SHORTLIST", "three")
    with caplog.at_level(logging.WARNING):
        assert load_ranker("model") is HEURISTIC
    assert "LEIR_MODEL_SHORTLIST" in caplog.text


def test_the_batched_scores_are_the_whole_sequences_likelihoods(ranker):
    analysis = load_leir(UNSEEN["softmax 16x10 (tests/programs.py)"]).analysis
    steps = [r.step for r in rank(analysis)][:7]
    prompt = ranker.prompt_ids(analysis, "llvm")
    conts = [tk.encode(ranker.tokenizer, candidate_text(s.to_json())) for s in steps]
    batched = logprobs(ranker.model, prompt, conts)  # one tree
    chunked = logprobs(ranker.model, prompt, conts, chunk=40)  # subtrees of whole candidates
    whole = logprobs_full(ranker.model, prompt, conts)
    assert len(set(map(len, conts))) > 1
    assert batched == pytest.approx(whole, abs=1e-3) and chunked == pytest.approx(whole, abs=1e-3)


def test_the_prompt_cache_reads_only_what_follows_the_common_prefix(ranker):
    from leir.transforms import apply
    from leir_models.lm.ranker import PromptCache

    analysis = load_leir(UNSEEN["softmax 16x10 (tests/programs.py)"]).analysis
    steps = [r.step for r in rank(analysis)]
    after = None
    for step in steps:  # the first step that changes the program after its first lines
        changed = load_leir(print_program(apply(analysis.program, step))).analysis
        a, b = ranker.prompt_ids(analysis, "llvm"), ranker.prompt_ids(changed, "llvm")
        common = next(i for i in range(min(len(a), len(b)) + 1) if i == min(len(a), len(b)) or a[i] != b[i])
        if 20 < common < len(b) - 1:
            after = changed
            break
    assert after is not None, "no step of the softmax changes only the end of the program"
    other = load_leir(UNSEEN["sum_axis2 (a held-out family)"]).analysis
    cache = PromptCache()
    conts = [tk.encode(ranker.tokenizer, candidate_text(s.to_json())) for s in steps[:5]]
    for analysis_now, expect_read in ((analysis, "all"), (after, len(b) - common), (after, 1), (other, None),
                                      (analysis, None)):
        prompt = ranker.prompt_ids(analysis_now, "llvm")
        cached = logprobs(ranker.model, prompt, conts, prompt_cache=cache)
        assert cached == pytest.approx(logprobs(ranker.model, prompt, conts), abs=1e-3)
        assert cache.ids == prompt and cache.cache.get_seq_length() == len(prompt)  # the tree cropped off
        if expect_read == "all":
            assert cache.read_last == len(prompt)  # nothing to reuse yet
        elif expect_read is not None:
            assert cache.read_last == expect_read  # the common head was not read again
        else:
            assert 1 <= cache.read_last < len(prompt)  # "target: llvm ..." is shared by every prompt
    # a tree larger than one chunk (deep copies of the cache) leaves the cache as it was
    prompt = ranker.prompt_ids(after, "llvm")
    chunked = logprobs(ranker.model, prompt, conts, chunk=40, prompt_cache=cache)
    assert chunked == pytest.approx(logprobs(ranker.model, prompt, conts), abs=1e-3)
    assert cache.read_last == len(prompt) - common


def test_suggest_ranks_with_the_model(ranker):
    found = suggest(SOFTMAX, "leir", None, ranker=ranker)
    assert found and all("probability" in s.facts[0] for s in found if s.score)


def test_load_ranker_finds_the_installed_model(lm_model_dir, monkeypatch):
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    found = load_ranker("model")
    assert isinstance(found, ModelRanker) and found.name == "model"
    assert load_ranker("heuristic") is HEURISTIC and load_ranker(None) is HEURISTIC


def test_a_missing_model_file_gives_the_heuristic_and_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("LEIR_MODEL_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="leir.tools.ranking"):
        assert load_ranker("model") is HEURISTIC
    assert "config.json is missing" in caplog.text and "using the heuristic" in caplog.text


def test_no_model_installed_gives_the_heuristic(monkeypatch, caplog):
    from importlib import metadata

    real = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points",
                        lambda **kw: [] if kw.get("group") == ranking.RANKER_GROUP else real(**kw))
    with caplog.at_level(logging.WARNING, logger="leir.tools.ranking"):
        assert load_ranker("model") is HEURISTIC
    assert "nothing is installed under leir.rankers" in caplog.text


def test_a_model_that_cannot_load_gives_the_heuristic(monkeypatch, caplog):
    import leir_models.lm.ranker as lm_ranker

    def broken():
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(lm_ranker, "load_default", broken)
    with caplog.at_level(logging.WARNING, logger="leir.tools.ranking"):
        assert load_ranker("model") is HEURISTIC
    assert "ImportError" in caplog.text


def test_the_evaluation_scores_both_rankers(lm_data, lm_model_dir):
    from leir_models.lm.evaluate import HeuristicAll, evaluate

    states = [s for s in load_states(lm_data)[0] if s.split == "heldout"]
    figures = evaluate({"model": ModelRanker.load(lm_model_dir), "heuristic": HeuristicAll()}, states)
    assert figures["states"] == len(states) == 3
    for r in figures["rankers"].values():
        assert 0 <= r["top1_legal"] <= r["top3_legal"] <= 1 and 0 <= r["top1_measured"] <= 1
        assert r["speedup_top1"] <= figures["speedup_best"] + 1e-9


def test_leir_suggest_ranks_with_the_model_or_says_why_not(lm_model_dir, tmp_path, monkeypatch, capsys):
    import json

    from leir.tools.cli import main

    program = tmp_path / "softmax.leir"
    program.write_text(SOFTMAX)
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    assert main(["suggest", str(program), "--ranker", "model", "--top", "5", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and all(r["source"] == "model" for r in rows)
    # The model orders the heuristic's first three (ranker.SHORTLIST); the rest keep the heuristic's reasons.
    assert all("probability of the heuristic's first 3" in r["reasoning"] for r in rows[:3])
    assert not any("probability" in r["reasoning"] for r in rows[3:])
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert set(rows[0]) == {"id", "args", "title", "score", "source", "reasoning"}

    monkeypatch.setenv("LEIR_MODEL_DIR", str(tmp_path / "none"))
    assert main(["suggest", str(program), "--ranker", "model", "--top", "3", "--json"]) == 0
    captured = capsys.readouterr()
    assert [r["source"] for r in json.loads(captured.out)] == ["heuristic"] * 3
    assert "using the heuristic" in captured.err


def test_tvm_is_imported_without_torch_and_torch_still_imports_after():
    """With the lm extra installed, TVM would import torch itself (+2-3 s a
    process); leir/__init__.py hides it during TVM's import only."""
    import subprocess
    import sys

    code = ("import sys, leir, tvm; assert 'torch' not in sys.modules, 'tvm imported torch'; "
            "import torch; torch.zeros(1); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_ranker_missing_says_why_without_loading_anything(lm_model_dir, tmp_path, monkeypatch):
    from leir.tools.ranking import ranker_missing

    monkeypatch.setenv("LEIR_MODEL_DIR", str(tmp_path))
    assert ranker_missing("model") == f"no model in {tmp_path} (missing config.json, model.safetensors, tokenizer.json)"
    assert "nothing is installed" in ranker_missing("no-such-ranker")
    assert ranker_missing("heuristic") is None
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    assert ranker_missing("model") is None
    assert isinstance(load_ranker("model"), ModelRanker)


def test_a_shipped_model_is_float16_and_ranks_as_the_trained_one(lm_model_dir, tmp_path):
    from safetensors import safe_open

    from leir_models.lm.store import ship

    out = ship(lm_model_dir, tmp_path / "shipped")
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}
        assert f.metadata()["dtype"] == "float16"
    assert dtypes == {"torch.float16"}
    assert (out / "model.safetensors").stat().st_size < 0.6 * (lm_model_dir / "model.safetensors").stat().st_size
    assert not list(out.glob(".*.part"))
    analysis = load_leir(SOFTMAX).analysis
    trained = {r.step.key: r.score for r in rank(analysis, ranker=ModelRanker.load(lm_model_dir))}
    shipped = {r.step.key: r.score for r in rank(analysis, ranker=ModelRanker.load(out))}
    assert trained.keys() == shipped.keys()
    assert max(abs(trained[k] - shipped[k]) for k in trained) < 0.05  # float16 weights, float32 arithmetic
    import torch

    assert {p.dtype for p in ModelRanker.load(out).model.parameters()} == {torch.float32}  # computed in float32


def test_leir_model_ship_copies_the_model_or_says_what_is_missing(lm_model_dir, tmp_path, capsys):
    from leir.tools.cli import main

    assert main(["model", "ship", "--model", str(lm_model_dir), "--out", str(tmp_path / "s")]) == 0
    assert "float16" in capsys.readouterr().out
    assert isinstance(ModelRanker.load(tmp_path / "s"), ModelRanker)
    assert main(["model", "ship", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "config.json is missing" in err and "Traceback" not in err and not (tmp_path / "t").exists()

"""Training the language model (``leir_models.lm.train``): a tiny model, a
few steps, on states cut from the committed sample. What a model directory
holds is safetensors and JSON, never pickle; the same seed gives the same
weights; loading reads no pickle."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir_models.lm.ranker import load_model  # noqa: E402
from leir_models.lm.train import FILES, learning_rate  # noqa: E402
from lm_fixtures import train_tiny  # noqa: E402


@pytest.fixture(scope="module")
def trained(lm_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lm-model")
    train_tiny(lm_data, out, seed=0)
    return out


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_a_model_directory_holds_safetensors_and_json_only(trained: Path):
    names = {p.name for p in trained.iterdir()}
    assert set(FILES) <= names and names <= set(FILES) | {"val_loss.png"}
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"))]
    for name in ("config.json", "tokenizer.json", "training.json"):
        json.loads((trained / name).read_text())
    assert (trained / "val_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (trained / "model.safetensors").read_bytes()[8:9] == b"{"  # safetensors: a length, then a JSON header


def test_loading_reads_no_pickle(trained: Path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used while loading the model")

    for module, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(module, name, refuse)
    model, tok = load_model(trained)
    weights = _weights(trained)
    state = model.state_dict()
    for name, tensor in weights.items():
        assert torch.equal(state[name], tensor)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied, stored once
    assert tok.get_vocab_size() == model.config.vocab_size


def test_the_same_seed_gives_the_same_weights(lm_data, trained: Path, tmp_path: Path):
    train_tiny(lm_data, tmp_path / "again", seed=0)
    train_tiny(lm_data, tmp_path / "other", seed=1)
    first, again, other = _weights(trained), _weights(tmp_path / "again"), _weights(tmp_path / "other")
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first if first[k].shape == other[k].shape)


def test_training_records_its_figures(trained: Path):
    facts = json.loads((trained / "training.json").read_text())
    assert facts["settings"]["steps"] == 3 and facts["best_step"] == 3 and facts["tokens_seen"] > 0
    assert facts["data"]["source"] == "records.jsonl" and facts["data"]["train_states"] == 8
    (point,) = facts["curve"]
    assert point["step"] == 3 and point["val_lm"] > 0 and point["val_rank"] >= 0
    assert point["tokens"] == facts["tokens_seen"]


def test_the_schedule_warms_up_then_decays_to_a_tenth():
    from leir_models.lm.config import TRAIN

    cfg = TRAIN.with_(steps=100, learning_rate=1.0)
    lrs = [learning_rate(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(0.2) and lrs[4] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:])) and lrs[-1] == pytest.approx(0.1, abs=0.01)


def test_leir_model_train_goes_through_the_entry_point(lm_data, tmp_path: Path, capsys):
    from leir.tools.cli import main

    assert main(["model", "train", "--tiny", "--steps", "2", "--batch", "2", "--threads", "1",
                 "--data", str(lm_data), "--out", str(tmp_path / "m")]) == 0
    assert set(FILES) <= {p.name for p in (tmp_path / "m").iterdir()}
    assert "kept step 2 (best validation rank;" in capsys.readouterr().out
    assert main(["model", "train", "--data", str(tmp_path / "nothing"), "--out", str(tmp_path / "n")]) == 2
    assert "no records.jsonl" in capsys.readouterr().err
    assert main(["model", "train", "--reasoning-branches", "-1", "--data", str(lm_data),
                 "--out", str(tmp_path / "r")]) == 2
    assert "--reasoning-branches -1: expected 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_leir_model_without_a_model_package_says_how_to_install(monkeypatch, capsys):
    from importlib import metadata

    from leir.tools.cli import main

    real = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points", lambda **kw: [] if kw.get("group") == "leir.models" else real(**kw))
    assert main(["model", "train"]) == 2
    assert "pip install 'leir-lsp[lm]'" in capsys.readouterr().err


def test_training_reads_each_candidate_as_the_ranker_does(lm_data, trained: Path):
    """A state is packed as one sequence, candidates as branches after the
    prompt: each step's log-likelihood there is the whole sequence's."""
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.config import TRAIN
    from leir_models.lm.data import candidate_text, load_states
    from leir_models.lm.ranker import logprobs_full
    from leir_models.lm.train import step_logprobs

    model, tok = load_model(trained)
    states = [s for s in load_states(lm_data)[0] if s.split == "train"][:3]
    assert any(s.positive(TRAIN.min_speedup) for s in states)  # a branch with reasoning after its step
    for st in states:
        packed = step_logprobs(model, st, tok, TRAIN)
        whole = logprobs_full(model, tk.encode_prompt(tok, st.prompt()),
                              [tk.encode(tok, candidate_text(c.step)) for c in st.candidates])
        assert packed == pytest.approx(whole, abs=1e-3)


@pytest.mark.parametrize("select, key", [("loss", "val_loss"), ("rank", "val_rank")])
def test_the_kept_step_is_the_best_of_the_chosen_validation_figure(lm_data, tmp_path: Path, select, key):
    from leir_models.lm.config import TINY_MODEL, TRAIN
    from leir_models.lm.train import train

    cfg = TRAIN.with_(seed=0, steps=6, batch_states=2, eval_every=1, model=TINY_MODEL, threads=1, vocab_size=512,
                      select=select)
    summary = train(cfg, lm_data, tmp_path / select, log=lambda line: None)
    curve = summary["curve"]
    assert len(curve) == 6 and len({p["val_loss"] for p in curve}) > 1
    best = min(curve, key=lambda p: p[key])
    assert summary["best_step"] == best["step"]
    card = (tmp_path / select / "README.md").read_text()
    assert ("best validation ranking loss" in card) == (select == "rank")
    with pytest.raises(ValueError, match="select 'nope'"):
        train(cfg.with_(select="nope"), lm_data, tmp_path / "nope", log=lambda line: None)


def test_other_candidates_reasoning_is_a_target_but_never_their_step(lm_data, trained: Path):
    """``reasoning_branches``: the reasoning of that many other candidates
    of a state becomes a language-model target after their step, their step
    tokens never do; the ranking reads the same step tokens as without; the
    choice is the same on every call; ``reasoning_measured=False`` writes
    the reasoning without its measured sentences."""
    from leir.explain import unmeasured
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.config import TRAIN
    from leir_models.lm.data import load_states
    from leir_models.lm.train import reasoning_branches, state_sequence

    _, tok = load_model(trained)
    states = [s for s in load_states(lm_data)[0] if s.split == "train"]
    st = next(s for s in states if s.positive(TRAIN.min_speedup) is not None
              and sum(c is not s.positive(TRAIN.min_speedup) and "Latency measured" in c.reasoning
                      for c in s.candidates) >= 2)
    positive = st.positive(TRAIN.min_speedup)
    cfg = TRAIN.with_(reasoning_branches=1, reasoning_measured=False)
    chosen = reasoning_branches(st, positive, cfg)
    assert len(chosen) == 1 and st.candidates.index(positive) not in chosen
    assert chosen == reasoning_branches(st, positive, cfg)  # the same state, the same branch
    assert reasoning_branches(st, positive, cfg.with_(reasoning_branches=99)) == frozenset(
        k for k, c in enumerate(st.candidates) if c is not positive)
    assert reasoning_branches(st, positive, TRAIN) == frozenset()

    plain, more = state_sequence(st, tok, TRAIN), state_sequence(st, tok, cfg)
    # Ranking targets: the same step tokens of the same candidates.
    step_targets = lambda seq: sorted((k, token) for _, token, _, k in seq["targets"] if k >= 0)  # noqa: E731
    assert step_targets(plain) == step_targets(more)
    (k,) = chosen
    branch = [(lm, token, cand) for (_, token, lm, cand), b in zip(more["targets"][more["prompt"] - 1:],
                                                                 more["branch"][more["prompt"]:]) if b == k]
    assert all(not lm for lm, _, cand in branch if cand == k)  # its step: never an LM target
    written = [token for lm, token, cand in branch if lm]
    assert written and all(cand == -1 for lm, _, cand in branch if lm)
    c = st.candidates[k]
    assert tk.decode(tok, written[:-1]) == unmeasured(c.reasoning) != c.reasoning
    assert written[-1] == tk.EOS_ID
    assert not any(lm for (_, _, lm, _), b in zip(plain["targets"][plain["prompt"] - 1:],
                                                   plain["branch"][plain["prompt"]:]) if b == k)

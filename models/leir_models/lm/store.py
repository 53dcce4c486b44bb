"""Where a trained model lives and how it loads: ``DATA_DIR`` (the shipped
model's directory, ``leir_models/lm/data/``), ``default_dir`` (that, or
``$LEIR_MODEL_DIR``) and ``load_model`` (a directory ``train`` wrote: JSON
and safetensors only, no pickle). The ranker and the reasoning both read a
model through it.

The larger tier (``pretrained.py``, docs/model.md) lives outside the
package, its float32 weights being about 540 MB: ``smollm2_dir`` (SmolLM2
as imported from the GGUF, what fine-tuning starts from) and
``smollm2_model_dir`` (the fine-tuned model the ``smollm2`` ranker loads),
both in the same format, so ``load_model`` reads either."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from leir_models.lm import tokenizer as tk

__all__ = ["DATA_DIR", "MODEL_FILES", "SHIPPED_FILES", "default_dir", "load_model", "missing_files", "replace_into",
           "ship", "smollm2_dir", "smollm2_model_dir"]

#: The shipped model's directory.
DATA_DIR = Path(__file__).resolve().parent / "data"

#: What ``load_model`` reads from a model directory.
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def missing_files(path: str | Path) -> list[str]:
    """The files of ``MODEL_FILES`` that directory ``path`` lacks (none: ``load_model`` can read it)."""
    return [name for name in MODEL_FILES if not (Path(path) / name).is_file()]


def load_model(path: str | Path):
    """(model, tokenizer) from a directory ``train`` wrote; raises FileNotFoundError naming a missing file."""
    path = Path(path)
    for name in missing_files(path)[:1]:
        raise FileNotFoundError(f"{path / name} is missing (train one with `leir model train --out {path}`)")
    from safetensors.torch import load_model as load_weights
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    config = LlamaConfig.from_json_file(str(path / "config.json"))
    model = LlamaForCausalLM(config)
    load_weights(model, str(path / "model.safetensors"), strict=True)
    model.eval()
    return model, tk.load(path / "tokenizer.json")


def default_dir() -> Path:
    """``$LEIR_MODEL_DIR`` when set, else the shipped model's directory."""
    return Path(os.environ["LEIR_MODEL_DIR"]) if os.environ.get("LEIR_MODEL_DIR") else DATA_DIR


def _user_cache() -> Path:
    """``$XDG_CACHE_HOME/leir``, or ``~/.cache/leir``."""
    from leir.files import user_cache_home

    return user_cache_home() / "leir"


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct imported from the GGUF (``leir model
    import-smollm2``): ``$LEIR_SMOLLM2_DIR``, else ``~/.cache/leir/smollm2``."""
    found = os.environ.get("LEIR_SMOLLM2_DIR")
    return Path(found) if found else _user_cache() / "smollm2"


def smollm2_model_dir() -> Path:
    """The fine-tuned SmolLM2 the ``smollm2`` ranker loads, and where ``leir
    model train --init DIR`` writes when no ``--out`` is given:
    ``$LEIR_SMOLLM2_MODEL_DIR``, else ``~/.cache/leir/smollm2-ft``."""
    found = os.environ.get("LEIR_SMOLLM2_MODEL_DIR")
    return Path(found) if found else _user_cache() / "smollm2-ft"


def replace_into(out: Path, name: str, write: Callable[[str], None]) -> None:
    """Write ``out/name`` beside it (``write(staged path)``), readable by all
    (a package file; safetensors writes its files private), then rename it
    into place: a reader never sees half a file."""
    staged = out / f".{name}.{os.getpid()}.part"
    try:
        write(str(staged))
        os.chmod(staged, 0o644)
        os.replace(staged, out / name)
    finally:
        staged.unlink(missing_ok=True)


#: What a shipped model directory holds (``ship`` copies them).
SHIPPED_FILES = ("model.safetensors", "config.json", "tokenizer.json", "training.json", "README.md")


def ship(model_dir: str | Path, out_dir: str | Path = DATA_DIR) -> Path:
    """Copy a trained model (``leir model train``'s directory) to ``out_dir``
    (the package's shipped model by default) with its weights stored as
    float16: half the size of float32 (a 5M-parameter model's 20 MB would
    not fit the repository's 16 MiB a file), and loaded back into the
    float32 model by ``load_model`` (``load_state_dict`` casts). Raises
    ``ValueError`` when a weight does not fit float16 (it would become
    infinite). Each file is written beside its destination and renamed over
    it, so a reader never sees half a model file."""
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    src, out = Path(model_dir), Path(out_dir)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (src / name).is_file():
            raise FileNotFoundError(f"{src / name} is missing (train one with `leir model train --out {src}`)")
    tensors = load_file(str(src / "model.safetensors"))
    half = {}
    for key, t in tensors.items():
        h = t.to(torch.float16).contiguous() if t.is_floating_point() else t.contiguous()
        if h.is_floating_point() and not torch.isfinite(h).all():
            raise ValueError(f"{src / 'model.safetensors'}: {key} does not fit float16")
        half[key] = h
    out.mkdir(parents=True, exist_ok=True)
    replace_into(out, "model.safetensors", lambda p: save_file(half, p, metadata={
        "format": "pt", "dtype": "float16", "from": json.dumps({"dir": str(src), "dtype": "float32"})}))
    for name in SHIPPED_FILES[1:]:
        if (src / name).is_file():
            replace_into(out, name, lambda p, name=name: shutil.copyfile(src / name, p))
    return out

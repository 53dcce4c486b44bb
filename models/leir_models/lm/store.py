"""Where a trained model lives and how it loads: ``DATA_DIR`` (the shipped
model's directory, ``leir_models/lm/data/``), ``default_dir`` (that, or
``$LEIR_MODEL_DIR``) and ``load_model`` (a directory ``train`` wrote: JSON
and safetensors only, no pickle). The ranker and the reasoning both read a
model through it."""

from __future__ import annotations

import os
from pathlib import Path

from leir_models.lm import tokenizer as tk

__all__ = ["DATA_DIR", "default_dir", "load_model"]

#: The shipped model's directory.
DATA_DIR = Path(__file__).resolve().parent / "data"


def load_model(path: str | Path):
    """(model, tokenizer) from a directory ``train`` wrote; raises FileNotFoundError naming a missing file."""
    path = Path(path)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
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

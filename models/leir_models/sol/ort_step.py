"""The whole single-token pass on ONNX Runtime: one graph per MLP keep level
(docs/sol.md, "The whole step on ONNX Runtime").

``ort_runtime`` puts only the MLPs on ONNX Runtime; a dense token of the
shipped 256-wide model then still took 4.9 ms of eager torch, of which the
MLPs were 0.82 ms: attention, norms, RoPE, the head and transformers'
per-module overhead are the rest, which no MLP knob touches (docs/sol.md).
Here the *whole* pass of one decoded token is one graph (all but the
embedding lookup, done outside: below): every layer's norm, q/k/v projections, RoPE, attention over the
key/value cache and the new token, output projection, norm and MLP (the
layer's first ``n = keep_width(I, keep)`` channels, as ``knobs.truncated_mlp``
exports them: physically smaller matrices), the final norm and the head.

- ``DecodeStep``: that pass written as a torch module over the weights of a
  ``decode.prepare``\\ d Llama (its channel order), in plain operations (no
  cache object, no attention dispatch), so the dynamo exporter traces it into
  one graph. Inputs the token's input embedding ``[1, D]`` (looked up
  outside the graph: the embedding is also the output head's weight in a
  tied model, and ONNX Runtime's quantizer breaks a weight that a lookup
  and a product share), ``position`` ``[1]`` (int64) and the past keys and
  values, ``[P, layers, kv_heads, head_dim]`` each (P >= 1, the
  positions before this token: position-major, so that the first P rows of a
  buffer are a contiguous prefix); outputs the logits ``[1, V]``, the final
  hidden state ``[1, D]`` (what the SOL policy reads) and this token's keys
  and values ``[1, layers, kv_heads, head_dim]``. It computes what the
  transformers model computes for that token (tested against it at every
  keep level).
- ``export_steps``: one fp32 graph per keep level and its int8 quantization
  (``onnx_blocks.quantize_int8``), written once into the cache directory
  ``ort_runtime`` uses (``onnx_blocks.default_cache_dir``) under a fingerprint of *all* the weights; each file written
  under a temporary name and renamed.
- ``OrtSteps`` (``load``): the sessions of one precision, one per level, and
  the providers really in use (``onnx_blocks.provider_report``).
- ``OrtPasses``: what ``decode.generate`` runs its passes with when given
  (``passes=``): the prompt is read by the torch model (dense, once: a
  prefill of many tokens is one batch of products, where eager torch's
  per-module overhead is paid once), its key/value cache copied into a
  position-major numpy buffer, and every decoded token is one session run
  at that token's keep level, its new keys and values written into the
  buffer's next row (the buffer doubles when full).

The attention keep knob (``attention.AttentionKeep``) is not in these graphs:
it never engages on the shipped model (its ``min_context`` is above the
model's context), and ``decode.generate`` refuses both together.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from leir_models.sol import knobs, onnx_blocks
from leir_models.sol.knobs import MLP_LEVELS, keep_width

#: Bumped when the graphs change (part of the cache key).
CACHE_FORMAT = "leir-sol-onnx-step/1"
INPUTS = ("embedded", "position", "past_keys", "past_values")
OUTPUTS = ("logits", "hidden", "keys", "values")
#: Rows the key/value buffer gets beyond the prompt at first (it doubles when full).
BUFFER_SLACK = 256


def _mlp(module: nn.Module) -> nn.Module:
    """The gated MLP itself, inside a ``SlicedMLP`` wrapper or not."""
    return module.mlp if isinstance(module, knobs.SlicedMLP) else module


class _Layer(nn.Module):
    def __init__(self, layer, keep: float):
        super().__init__()
        attn = layer.self_attn
        self.q, self.k, self.v, self.o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.norm_in, self.norm_post = layer.input_layernorm, layer.post_attention_layernorm
        self.mlp = knobs.truncated_mlp(_mlp(layer.mlp), keep)


class DecodeStep(nn.Module):
    """One decoded token's pass through ``model`` (a ``LlamaForCausalLM``,
    ``decode.prepare``\\ d or not) with every MLP at ``keep`` (module doc).
    Shares the attention, norm, embedding and head weights with ``model``;
    the MLPs are ``keep``-wide copies."""

    def __init__(self, model, keep: float = 1.0):
        super().__init__()
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        inner = model.model
        self.layers = nn.ModuleList(_Layer(layer, keep) for layer in inner.layers)
        self.norm = inner.norm
        self.head = model.lm_head
        rotary = inner.rotary_emb
        self.register_buffer("inv_freq", rotary.inv_freq.detach().float().clone(), persistent=False)
        self.rope_scaling = float(getattr(rotary, "attention_scaling", 1.0))

    def _rms(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(self, embedded: torch.Tensor, position: torch.Tensor, past_keys: torch.Tensor,
                past_values: torch.Tensor):
        heads, kv_heads, hd = self.heads, self.kv_heads, self.head_dim
        group = heads // kv_heads
        x = embedded  # [1, D]
        freqs = position.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [1, hd/2]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.rope_scaling, angles.sin() * self.rope_scaling  # [1, hd]
        scale = hd ** -0.5
        new_keys, new_values = [], []
        for i, layer in enumerate(self.layers):
            h = self._rms(layer.norm_in, x)
            q = self._rotate(layer.q(h).reshape(heads, hd), cos, sin)  # [H, hd]
            k = self._rotate(layer.k(h).reshape(kv_heads, hd), cos, sin)  # [Hkv, hd]
            v = layer.v(h).reshape(kv_heads, hd)
            keys = torch.cat((past_keys[:, i], k[None]), dim=0)  # [P+1, Hkv, hd]
            values = torch.cat((past_values[:, i], v[None]), dim=0)
            qg = q.reshape(kv_heads, group, hd)  # the query heads that share a key/value head
            scores = torch.matmul(qg, keys.permute(1, 2, 0)) * scale  # [Hkv, group, P+1]
            probs = torch.softmax(scores, dim=-1)
            out = torch.matmul(probs, values.permute(1, 0, 2))  # [Hkv, group, hd]
            x = x + layer.o(out.reshape(1, heads * hd))
            x = x + layer.mlp(self._rms(layer.norm_post, x))
            new_keys.append(k)
            new_values.append(v)
        hidden = self._rms(self.norm, x)
        logits = self.head(hidden)
        return logits, hidden, torch.stack(new_keys)[None], torch.stack(new_values)[None]


# ------------------------------------------------------------ export


@torch.no_grad()
def fingerprint(model, keeps: Sequence[float] = MLP_LEVELS) -> str:
    """A hash of every weight of ``model`` (MLP channels in their current
    order), its configuration's shape, the keep levels and ``CACHE_FORMAT``."""
    config = model.config
    shape = {k: getattr(config, k, None) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                  "num_key_value_heads", "head_dim", "intermediate_size",
                                                  "vocab_size", "rms_norm_eps", "hidden_act")}
    h = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "keeps": list(keeps), "config": shape},
                                  sort_keys=True, default=str).encode())
    h.update(model.model.rotary_emb.inv_freq.detach().float().cpu().numpy().tobytes())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:24]


@torch.no_grad()
def export_step(model, path: str | Path, keep: float = 1.0) -> Path:
    """``DecodeStep(model, keep)`` as an ONNX graph at ``path`` (weights
    inside the file); the past's length is dynamic (>= 1)."""
    path = Path(path)
    step = DecodeStep(model, keep).float().eval()
    layers, kv, hd = len(step.layers), step.kv_heads, step.head_dim
    past = torch.zeros(3, layers, kv, hd)
    example = (torch.zeros(1, model.config.hidden_size), torch.tensor([3]), past, past.clone())
    p = torch.export.Dim("past", min=1)
    torch.onnx.export(step, example, str(path), dynamo=True, input_names=list(INPUTS), output_names=list(OUTPUTS),
                      dynamic_shapes=(None, None, {0: p}, {0: p}), external_data=False, verbose=False)
    return path


def graph_path(directory: Path, n: int, precision: str) -> Path:
    return directory / f"step_k{n}_{precision}.onnx"


def export_steps(model, cache_dir: str | Path | None = None, keeps: Sequence[float] = MLP_LEVELS,
                 precisions: Sequence[str] = onnx_blocks.PRECISIONS) -> dict[tuple[float, str], Path]:
    """Every keep level's graph at each of ``precisions`` under
    ``cache_dir/<fingerprint>/`` (default ``onnx_blocks.default_cache_dir()``);
    graphs already there are reused. (keep, precision) -> path."""
    unknown = set(precisions) - set(onnx_blocks.PRECISIONS)
    if unknown:
        raise ValueError(f"unknown precision(s) {sorted(unknown)}; known: {onnx_blocks.PRECISIONS}")
    directory = Path(cache_dir or onnx_blocks.default_cache_dir()) / fingerprint(model, keeps)
    directory.mkdir(parents=True, exist_ok=True)
    inter = int(model.config.intermediate_size)
    paths: dict[tuple[float, str], Path] = {}
    with onnx_blocks.quiet_export():
        for keep in keeps:
            n = keep_width(inter, keep)
            fp32 = onnx_blocks.write_graph(graph_path(directory, n, "fp32"),
                                           lambda tmp, keep=keep: export_step(model, tmp, keep))
            if "fp32" in precisions:
                paths[(keep, "fp32")] = fp32
            if "int8" in precisions:
                paths[(keep, "int8")] = onnx_blocks.write_graph(
                    graph_path(directory, n, "int8"), lambda tmp, fp32=fp32: onnx_blocks.quantize_int8(fp32, tmp))
    return paths


# ------------------------------------------------------------ running


@dataclass
class OrtSteps:
    """The step graphs of one precision, one session per keep level."""

    precision: str
    directory: Path
    sessions: dict[float, object]
    reports: list[onnx_blocks.ProviderReport]
    #: Session runs per keep level (what the tests check).
    calls: dict[float, int]

    @property
    def providers(self) -> list[str]:
        """The providers the sessions really use, in ORT's order, each once."""
        return onnx_blocks.providers_in_use(self.reports)

    @property
    def cuda_missing(self) -> bool:
        return any(r.cuda_missing for r in self.reports)


def load(model, precision: str = "fp32", cache_dir: str | Path | None = None, threads: int | None = 1,
         providers: Sequence[str] = onnx_blocks.PROVIDERS, keeps: Sequence[float] = MLP_LEVELS,
         quiet: bool = True) -> OrtSteps:
    """The sessions of ``model``'s step graphs at ``precision`` (exported
    into the cache first where missing). ``model`` must be prepared with the
    channel order it will decode with (``decode.prepare``): the graphs are of
    the weights as they are now."""
    import logging

    if precision not in onnx_blocks.PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {onnx_blocks.PRECISIONS}")
    paths = export_steps(model, cache_dir, keeps, (precision,))
    sessions, reports = {}, []
    with onnx_blocks.quiet_sessions(quiet):
        for keep in keeps:
            sessions[keep], report = onnx_blocks.ort_session(paths[(keep, precision)], providers, threads)
            reports.append(report)
    steps = OrtSteps(precision, next(iter(paths.values())).parent, sessions, reports, {k: 0 for k in keeps})
    if quiet and steps.cuda_missing:
        logging.getLogger(__name__).warning("CUDAExecutionProvider was requested but is not in use; running on %s",
                                            ", ".join(steps.providers) or "nothing")
    return steps


def cache_rows(cache) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformers key/value cache (each layer's ``[1, kv_heads, P,
    head_dim]``) as the step's position-major past: keys and values
    ``[P, layers, kv_heads, head_dim]``, float32."""
    keys = torch.stack([layer.keys[0].permute(1, 0, 2) for layer in cache.layers], dim=1)
    values = torch.stack([layer.values[0].permute(1, 0, 2) for layer in cache.layers], dim=1)
    return keys.float(), values.float()


class OrtPasses:
    """``decode.generate``'s passes on ``steps`` (module doc): the prompt
    read densely by the torch ``model``, each decoded token one session run."""

    def __init__(self, model, steps: OrtSteps):
        self.model, self.steps = model, steps
        self.embedding = model.get_input_embeddings().weight.detach().float().numpy()
        self.length = 0
        self.keys = self.values = None

    def prefill(self, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Read ``ids`` with the torch model (dense); the key/value buffer
        holds their keys and values. (hidden ``(D,)``, logits ``(V,)``) of the last."""
        from leir_models.sol import decode

        state = decode.prefill(self.model, ids)
        keys, values = cache_rows(state.cache)
        rows = len(ids)
        shape = (rows + BUFFER_SLACK, *keys.shape[1:])
        self.keys, self.values = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        self.keys[:rows], self.values[:rows] = keys.numpy(), values.numpy()
        self.length = rows
        return state.hidden, state.logits

    def step(self, token: int, keep: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ``token`` at the next position, every MLP at ``keep``:
        (hidden ``(D,)``, logits ``(V,)``)."""
        session = self.steps.sessions.get(keep)
        if session is None:
            raise ValueError(f"no step graph at keep {keep} (exported: {sorted(self.steps.sessions)})")
        if self.length >= len(self.keys):
            self.keys = np.concatenate([self.keys, np.zeros_like(self.keys)])
            self.values = np.concatenate([self.values, np.zeros_like(self.values)])
        n = self.length
        embedded = self.embedding[token:token + 1]
        logits, hidden, k, v = session.run(list(OUTPUTS), {
            "embedded": embedded, "position": np.array([n], np.int64),
            "past_keys": self.keys[:n], "past_values": self.values[:n]})
        self.keys[n], self.values[n] = k[0], v[0]
        self.length = n + 1
        self.steps.calls[keep] += 1
        return torch.from_numpy(hidden[0]), torch.from_numpy(logits[0])


__all__ = ["DecodeStep", "OrtPasses", "OrtSteps", "cache_rows", "export_step", "export_steps", "fingerprint", "load"]

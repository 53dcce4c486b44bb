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
  and a product share), ``position`` ``[1]`` (int64: the number of past
  positions) and each layer's key and value buffers, keys ``[kv_heads,
  head_dim, C]`` (transposed, as the score product reads them) and values
  ``[kv_heads, C, head_dim]``, ``C`` >= position, the rows from
  ``position`` on masked out; outputs the logits ``[1, V]``, the final
  hidden state ``[1, D]`` (what the SOL policy reads) and this token's keys
  and values ``[layers, kv_heads, head_dim]``. The token's own key and
  value are attended beside the past, not concatenated to it, so the graph
  copies nothing of the past (the first version took the past as one
  position-major input, sliced it per layer and concatenated the new key:
  three copies of the whole cache per token, which cost more than the MLPs
  at 700 positions: docs/sol.md). It computes what the transformers model
  computes for that token (tested against it at every keep level).
- ``export_steps``: one fp32 graph per keep level and its int8 quantization
  (``onnx_blocks.quantize_int8``: the weights' products; the attention's
  products of two activations stay fp32), written once into the cache
  directory ``ort_runtime`` uses (``onnx_blocks.default_cache_dir``) under a
  fingerprint of *all* the weights; each file written under a temporary
  name and renamed.
- ``OrtSteps`` (``load``): the sessions of one precision, one per level, and
  the providers really in use (``onnx_blocks.provider_report``).
- ``OrtPasses``: what ``decode.generate`` runs its passes with when given
  (``passes=``): the prompt is read by the torch model (dense, once: a
  prefill of many tokens is one batch of products, where eager torch's
  per-module overhead is paid once), its key/value cache copied into the
  buffers (``buffers``: capacity rounded up to a multiple of
  ``BUFFER_CHUNK`` positions, grown by a chunk when full, up to the model's
  context), and every decoded token is one session run at that
  token's keep level through I/O bindings made once (no input or output is
  allocated or copied per token but the token's own keys and values,
  written into the buffers' next position).
- With a policy (``load(..., policy=)``), each graph also picks the next
  token (the argmax of the logits, a ``never`` mask added) and runs the SOL
  policy on this token's hidden state and the next token's embedding: the
  next token's choice comes out of this token's run, no run of its own
  (``DecodeStep``). The policy's part stays fp32 in the int8 graphs
  (``policy_nodes``), so it chooses as the torch policy does.
- ``OrtPolicy``: the SOL policy's forward as one small graph, for the
  choices no step graph made (the first decoded token's, after the torch
  prefill; ``decode.generate``'s ``policy_logits``).

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
import onnx
import torch
from torch import nn

from leir_models.sol import knobs, onnx_blocks
from leir_models.sol.knobs import MLP_LEVELS, keep_width

#: Bumped when the graphs change (part of the cache key).
CACHE_FORMAT = "leir-sol-onnx-step/2"
OUTPUTS = ("logits", "hidden", "keys", "values")
#: What a step graph with the policy reads and writes besides (``DecodeStep``).
FUSED_INPUTS = ("policy_state", "never")
FUSED_OUTPUTS = ("next_token", "policy_logits")
#: The policy graph's cache key's format (``export_policy``, ``policy_fingerprint``).
POLICY_FORMAT = "leir-sol-onnx-policy/1"
#: The key/value buffers' capacity is a multiple of this many positions,
#: grown by one chunk when full. Every pass reads the whole capacity (the
#: spare positions masked), so spare rows cost as much as past ones: a first
#: version with 256 spare rows, doubled when full, ran a pass at 128 past
#: positions 5-23% slower than copying the past did (docs/sol.md); growing
#: copies the buffers, about 12 MB at the shipped model's 1,024 positions,
#: once per chunk.
BUFFER_CHUNK = 64


def chunked(positions: int, limit: int) -> int:
    """The capacity that holds ``positions`` + 1 (the next token's row is
    written after its pass): a multiple of ``BUFFER_CHUNK``, at most ``limit``
    (and at least ``positions``)."""
    return max(positions, min(-(-(positions + 1) // BUFFER_CHUNK) * BUFFER_CHUNK, limit))


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
    the MLPs are ``keep``-wide copies.

    ``forward(embedded, position, keys_0, ..., keys_{L-1}, values_0, ...,
    values_{L-1})``: layer ``i``'s past keys ``[kv_heads, head_dim, C]``
    (transposed: the score product reads them as they lie) and values
    ``[kv_heads, C, head_dim]``, ``C >= position`` positions of which the
    first ``position`` are this token's past and the rest are masked out
    (a buffer's spare rows). The new token's own key and value are attended
    separately and returned, never concatenated to the past.

    With ``policy`` the inputs after ``position`` are ``policy_state`` ``[1,
    3 + A]`` (the policy's scalar inputs and previous action for the next
    token's choice: ``decode.Chooser.state``) and ``never`` ``[1, V]`` (0, or
    -inf for a token never to be chosen), and two outputs follow: the next
    token, ``argmax(logits + never)`` ``[1]``, and the policy's logits for
    it ``[1, A]`` (``SolPolicy.features`` of this token's final hidden state
    and the next token's embedding). A SOL token then costs no run of its
    own: the choice for token t + 1 comes out of token t's run."""

    def __init__(self, model, keep: float = 1.0, policy: nn.Module | None = None):
        super().__init__()
        config = model.config
        #: With a policy (``SolPolicy``) the step also chooses the next token
        #: and computes the policy's logits for it (``forward``).
        self.policy = policy
        if policy is not None:
            # The next token's embedding for the policy's features: a copy of
            # the embedding, named for the policy (never quantized; a weight
            # shared with the head would break the quantizer: module doc).
            # (A parameter, not a buffer: the exporter keeps a parameter's name.)
            self.policy_embedding = nn.Parameter(model.get_input_embeddings().weight.detach().float().clone(),
                                                 requires_grad=False)
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

    def forward(self, embedded: torch.Tensor, position: torch.Tensor, *inputs: torch.Tensor):
        heads, kv_heads, hd = self.heads, self.kv_heads, self.head_dim
        group, n_layers = heads // kv_heads, len(self.layers)
        caches = inputs if self.policy is None else inputs[2:]
        past_keys, past_values = caches[:n_layers], caches[n_layers:]
        x = embedded  # [1, D]
        freqs = position.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [1, hd/2]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.rope_scaling, angles.sin() * self.rope_scaling  # [1, hd]
        capacity = past_keys[0].shape[-1]
        masked = torch.arange(capacity) >= position  # [C]: the buffer's spare rows
        scale = hd ** -0.5
        new_keys, new_values = [], []
        for i, layer in enumerate(self.layers):
            h = self._rms(layer.norm_in, x)
            q = self._rotate(layer.q(h).reshape(heads, hd), cos, sin)  # [H, hd]
            k = self._rotate(layer.k(h).reshape(kv_heads, hd), cos, sin)  # [Hkv, hd]
            v = layer.v(h).reshape(kv_heads, hd)
            qg = q.reshape(kv_heads, group, hd) * scale  # the query heads that share a key/value head
            past = torch.matmul(qg, past_keys[i]).masked_fill(masked, float("-inf"))  # [Hkv, group, C]
            own = (qg * k[:, None, :]).sum(-1, keepdim=True)  # [Hkv, group, 1]: the token's own key
            probs = torch.softmax(torch.cat((past, own), dim=-1), dim=-1)
            out = torch.matmul(probs[..., :-1], past_values[i]) + probs[..., -1:] * v[:, None, :]  # [Hkv, group, hd]
            x = x + layer.o(out.reshape(1, heads * hd))
            x = x + layer.mlp(self._rms(layer.norm_post, x))
            new_keys.append(k)
            new_values.append(v)
        hidden = self._rms(self.norm, x)
        logits = self.head(hidden)
        if self.policy is None:
            return logits, hidden, torch.stack(new_keys), torch.stack(new_values)
        policy_state, never = inputs[0], inputs[1]
        next_token = torch.argmax(logits + never, dim=-1)  # [1]
        features = torch.cat((hidden, nn.functional.embedding(next_token, self.policy_embedding), policy_state), dim=-1)
        return logits, hidden, torch.stack(new_keys), torch.stack(new_values), next_token, self.policy(features)


def input_names(layers: int, fused: bool = False) -> list[str]:
    """The step graph's inputs, in ``DecodeStep.forward``'s order (``fused``:
    the graph with the policy)."""
    return ["embedded", "position", *(FUSED_INPUTS if fused else ()), *(f"keys_{i}" for i in range(layers)),
            *(f"values_{i}" for i in range(layers))]


def output_names(fused: bool = False) -> list[str]:
    return list(OUTPUTS + FUSED_OUTPUTS) if fused else list(OUTPUTS)


def buffers(cache, capacity: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A transformers key/value cache (each layer's ``[1, kv_heads, P,
    head_dim]``) as the step's buffers: keys ``[layers, kv_heads, head_dim,
    capacity]`` and values ``[layers, kv_heads, capacity, head_dim]``,
    float32, zero beyond the ``P`` positions (``capacity`` >= P, default P)."""
    keys = torch.stack([layer.keys[0] for layer in cache.layers]).float()  # [L, Hkv, P, hd]
    values = torch.stack([layer.values[0] for layer in cache.layers]).float()
    rows = keys.shape[2]
    capacity = rows if capacity is None else capacity
    if capacity < rows:
        raise ValueError(f"capacity {capacity} is below the cache's {rows} positions")
    return resized(keys.transpose(-1, -2).numpy(), values.numpy(), capacity)


def resized(keys: np.ndarray, values: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """New buffers of ``capacity`` (>= the positions ``keys`` and ``values``
    hold, in ``buffers``' layout) holding them first, zero after."""
    layers, kv, hd, rows = keys.shape
    k_buf = np.zeros((layers, kv, hd, capacity), np.float32)
    v_buf = np.zeros((layers, kv, capacity, hd), np.float32)
    k_buf[..., :rows], v_buf[:, :, :rows] = keys, values
    return k_buf, v_buf


def feed(embedded: np.ndarray, position: int, keys: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """The step graph's inputs by name, from ``buffers``' two arrays."""
    layers = keys.shape[0]
    return dict(zip(input_names(layers), [np.asarray(embedded, np.float32).reshape(1, -1),
                                          np.array([position], np.int64), *keys, *values]))


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
    _hash_weights(h, model)
    return h.hexdigest()[:24]


def _hash_weights(h, module: nn.Module) -> None:
    """Every tensor of ``module``'s state, with its name and shape, into ``h``."""
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())


@torch.no_grad()
def export_step(model, path: str | Path, keep: float = 1.0, policy: nn.Module | None = None) -> Path:
    """``DecodeStep(model, keep, policy)`` as an ONNX graph at ``path``
    (weights inside the file); the buffers' capacity is dynamic (>= 1)."""
    path = Path(path)
    step = DecodeStep(model, keep, policy).float().eval()
    layers, kv, hd = len(step.layers), step.kv_heads, step.head_dim
    capacity = 7  # a size no other axis has, so that the exporter keeps it symbolic
    keys = [torch.zeros(kv, hd, capacity) for _ in range(layers)]
    values = [torch.zeros(kv, capacity, hd) for _ in range(layers)]
    fused = policy is not None
    extra = (torch.zeros(1, policy_state_size(policy)), torch.zeros(1, model.config.vocab_size)) if fused else ()
    example = (torch.zeros(1, model.config.hidden_size), torch.tensor([3]), *extra, *keys, *values)
    c = torch.export.Dim("capacity", min=1)
    # forward's *inputs: one entry, a shape per input in it
    dynamic = (None, None, (*(None for _ in extra), *({2: c} for _ in keys), *({1: c} for _ in values)))
    torch.onnx.export(step, example, str(path), dynamo=True, input_names=input_names(layers, fused),
                      output_names=output_names(fused), dynamic_shapes=dynamic, external_data=False, verbose=False)
    return path


def policy_state_size(policy) -> int:
    """The policy's inputs besides the hidden state and the embedding: its
    scalars and the previous action's one-hot (``SolPolicy.features``)."""
    return policy.in_features - 2 * policy.config.hidden_size


def policy_fingerprint(policy) -> str:
    """A hash of ``policy``'s configuration and weights."""
    h = hashlib.sha256(json.dumps({"format": POLICY_FORMAT, "config": policy.config.to_json()},
                                  sort_keys=True).encode())
    _hash_weights(h, policy)
    return h.hexdigest()[:24]


def graph_path(directory: Path, n: int, precision: str, policy: str | None = None) -> Path:
    """A step graph's file; ``policy``: the fingerprint of the policy it holds."""
    return directory / (f"step_k{n}_{precision}.onnx" if policy is None else
                        f"step_k{n}_{precision}_policy-{policy}.onnx")


def policy_nodes(path: str | Path) -> list[str]:
    """The nodes of the graph at ``path`` that read the policy's weights or
    its embedding copy (initializers named ``policy...``): what the int8
    graph keeps in fp32, so that the policy chooses as it does in torch."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer if i.name.startswith("policy")}
    nodes = [n for n in graph.node if weights.intersection(n.input)]
    # The quantizer first rewrites each Gemm into a MatMul named after it
    # (and an Add, and a Transpose where the weight is not an initializer):
    # those are the names it then checks.
    return [name for n in nodes for name in (n.name, *(
        (f"{n.name}_MatMul", f"{n.name}_Transpose") if n.op_type == "Gemm" else ()))]


def export_steps(model, cache_dir: str | Path | None = None, keeps: Sequence[float] = MLP_LEVELS,
                 precisions: Sequence[str] = onnx_blocks.PRECISIONS,
                 policy: nn.Module | None = None) -> dict[tuple[float, str], Path]:
    """Every keep level's graph at each of ``precisions`` under
    ``cache_dir/<fingerprint>/`` (default ``onnx_blocks.default_cache_dir()``),
    with ``policy`` inside if given (``DecodeStep``; its nodes stay fp32 in
    the int8 graph); graphs already there are reused. (keep, precision) -> path."""
    unknown = set(precisions) - set(onnx_blocks.PRECISIONS)
    if unknown:
        raise ValueError(f"unknown precision(s) {sorted(unknown)}; known: {onnx_blocks.PRECISIONS}")
    directory = Path(cache_dir or onnx_blocks.default_cache_dir()) / fingerprint(model, keeps)
    directory.mkdir(parents=True, exist_ok=True)
    inter = int(model.config.intermediate_size)
    tag = policy_fingerprint(policy) if policy is not None else None
    if policy is not None:
        policy = policy.float().eval()
    paths: dict[tuple[float, str], Path] = {}
    with onnx_blocks.quiet_export():
        for keep in keeps:
            n = keep_width(inter, keep)
            fp32 = onnx_blocks.write_graph(graph_path(directory, n, "fp32", tag),
                                           lambda tmp, keep=keep: export_step(model, tmp, keep, policy))
            if "fp32" in precisions:
                paths[(keep, "fp32")] = fp32
            if "int8" in precisions:
                paths[(keep, "int8")] = onnx_blocks.write_graph(
                    graph_path(directory, n, "int8", tag),
                    lambda tmp, fp32=fp32: onnx_blocks.quantize_int8(fp32, tmp, exclude=policy_nodes(fp32)))
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
    #: The graphs hold the policy (``DecodeStep``'s fused form).
    fused: bool = False

    @property
    def providers(self) -> list[str]:
        """The providers the sessions really use, in ORT's order, each once."""
        return onnx_blocks.providers_in_use(self.reports)

    @property
    def cuda_missing(self) -> bool:
        return any(r.cuda_missing for r in self.reports)


def load(model, precision: str = "fp32", cache_dir: str | Path | None = None, threads: int | None = 1,
         providers: Sequence[str] = onnx_blocks.PROVIDERS, keeps: Sequence[float] = MLP_LEVELS,
         quiet: bool = True, policy: nn.Module | None = None) -> OrtSteps:
    """The sessions of ``model``'s step graphs at ``precision`` (exported
    into the cache first where missing), with ``policy`` inside if given.
    ``model`` must be prepared with the channel order it will decode with
    (``decode.prepare``): the graphs are of the weights as they are now."""
    import logging

    if precision not in onnx_blocks.PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {onnx_blocks.PRECISIONS}")
    paths = export_steps(model, cache_dir, keeps, (precision,), policy)
    sessions, reports = {}, []
    with onnx_blocks.quiet_sessions(quiet):
        for keep in keeps:
            sessions[keep], report = onnx_blocks.ort_session(paths[(keep, precision)], providers, threads)
            reports.append(report)
    steps = OrtSteps(precision, next(iter(paths.values())).parent, sessions, reports, {k: 0 for k in keeps},
                     policy is not None)
    if quiet and steps.cuda_missing:
        logging.getLogger(__name__).warning("CUDAExecutionProvider was requested but is not in use; running on %s",
                                            ", ".join(steps.providers) or "nothing")
    return steps


class OrtPasses:
    """``decode.generate``'s passes on ``steps`` (module doc): the prompt
    read densely by the torch ``model``, each decoded token one session run.

    Nothing of the past is copied per token: the key/value buffers
    (``buffers``' layout) and the per-token inputs and outputs are numpy
    arrays bound to every session once (ONNX Runtime's I/O binding, by
    address), rebound only when the buffers grow; a token writes its inputs
    in place, runs, and its new keys and values are written into the
    buffers' next position. (A CUDA session reads the bound host memory
    through a copy ONNX Runtime makes; device-resident buffers are the next
    step there.)"""

    def __init__(self, model, steps: OrtSteps):
        self.model, self.steps = model, steps
        config = model.config
        self.embedding = model.get_input_embeddings().weight.detach().float().numpy()
        self.limit = int(config.max_position_embeddings)
        self.length = 0
        self.keys = self.values = None
        self.embedded = np.zeros((1, self.embedding.shape[1]), np.float32)
        self.position = np.zeros(1, np.int64)
        self.bindings: dict[float, object] = {}
        #: Times the buffers were (re)bound: once per prefill, once per growth.
        self.binds = 0
        #: With fused steps (``steps.fused``): the policy's inputs for the
        #: next token's choice, the tokens never to choose, and what the last
        #: run chose and the policy's logits for it (``policy_logits_for``).
        self.fused = steps.fused
        if self.fused:
            session = next(iter(steps.sessions.values()))
            shapes = {i.name: i.shape for i in session.get_inputs()}
            self.policy_state = np.zeros((1, int(shapes["policy_state"][1])), np.float32)
            self.never = np.zeros((1, int(shapes["never"][1])), np.float32)
            self.next_token = np.full(1, -1, np.int64)
            actions = next(o.shape for o in session.get_outputs() if o.name == "policy_logits")[1]
            self.policy_logits = np.zeros((1, int(actions)), np.float32)

    @property
    def capacity(self) -> int:
        """Positions the buffers hold (the past and spare rows)."""
        return 0 if self.keys is None else self.keys.shape[-1]

    def _bind(self) -> None:
        layers, kv, hd = self.keys.shape[:3]
        self.logits = np.zeros((1, self.model.get_output_embeddings().weight.shape[0]), np.float32)
        self.hidden = np.zeros_like(self.embedded)
        self.new_keys, self.new_values = np.zeros((layers, kv, hd), np.float32), np.zeros((layers, kv, hd), np.float32)
        extra_in = [self.policy_state, self.never] if self.fused else []
        extra_out = [self.next_token, self.policy_logits] if self.fused else []
        # each layer's buffer: a contiguous view
        inputs = [self.embedded, self.position, *extra_in, *self.keys, *self.values]
        outputs = [self.logits, self.hidden, self.new_keys, self.new_values, *extra_out]
        self.bindings = {}
        for keep, session in self.steps.sessions.items():
            binding = session.io_binding()
            for name, array in zip(input_names(layers, self.fused), inputs):
                binding.bind_input(name, "cpu", 0, array.dtype.type, list(array.shape), array.ctypes.data)
            for name, array in zip(output_names(self.fused), outputs):
                binding.bind_output(name, "cpu", 0, array.dtype.type, list(array.shape), array.ctypes.data)
            self.bindings[keep] = binding
        self.binds += 1

    def prefill(self, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Read ``ids`` with the torch model (dense); the buffers hold their
        keys and values. (hidden ``(D,)``, logits ``(V,)``) of the last."""
        from leir_models.sol import decode

        state = decode.prefill(self.model, ids)
        rows = len(ids)
        if self.fused:
            self.next_token[0] = -1  # no choice made for the prompt's next token
        self.keys, self.values = buffers(state.cache, chunked(rows, self.limit))
        self.length = rows
        self._bind()
        return state.hidden, state.logits

    def _grow(self) -> None:
        capacity = self.capacity
        if capacity >= self.limit:
            raise ValueError(f"the context is full ({self.limit} positions)")
        self.keys, self.values = resized(self.keys, self.values, chunked(capacity, self.limit))
        self._bind()

    def step(self, token: int, keep: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ``token`` at the next position, every MLP at ``keep``:
        (hidden ``(D,)``, logits ``(V,)``)."""
        session = self.steps.sessions.get(keep)
        if session is None:
            raise ValueError(f"no step graph at keep {keep} (exported: {sorted(self.steps.sessions)})")
        if self.keys is None:
            raise ValueError("prefill first: the buffers hold no past")
        n = self.length
        if n >= self.capacity:
            self._grow()
        self.embedded[0] = self.embedding[token]
        self.position[0] = n
        session.run_with_iobinding(self.bindings[keep])
        self.keys[..., n], self.values[:, :, n] = self.new_keys, self.new_values
        self.length = n + 1
        self.steps.calls[keep] += 1
        return torch.from_numpy(self.hidden[0].copy()), torch.from_numpy(self.logits[0].copy())

    # -------------------------------------------------------- the fused policy

    def set_never(self, ids: Sequence[int]) -> None:
        """The tokens the step's own choice of the next token never takes
        (``decode.generate``'s ``never_ids``)."""
        self._require_fused()
        self.never[:] = 0.0
        self.never[0, list(ids)] = -np.inf

    def set_policy_state(self, state: np.ndarray) -> None:
        """The policy's inputs for the next token's choice besides the
        hidden state and embedding (``decode.Chooser.state``), read by the
        next ``step``."""
        self._require_fused()
        self.policy_state[0] = state

    def policy_logits_for(self, token: int) -> torch.Tensor | None:
        """The policy's logits ``(A,)`` the last run computed for ``token``,
        or None when it chose another token (or none ran since the prefill):
        the caller then runs the policy itself."""
        if not self.fused or int(self.next_token[0]) != token:
            return None
        return torch.from_numpy(self.policy_logits[0].copy())

    def _require_fused(self) -> None:
        if not self.fused:
            raise ValueError("these step graphs hold no policy (ort_step.load(..., policy=))")


# ------------------------------------------------------------ the policy


@torch.no_grad()
def export_policy(policy, cache_dir: str | Path | None = None) -> Path:
    """``policy``'s forward (features ``[1, F]`` -> logits ``[1, A]``) as an
    fp32 ONNX graph in ``cache_dir/policy-<hash of its weights>/``
    (default ``onnx_blocks.default_cache_dir()``); reused when there."""
    directory = Path(cache_dir or onnx_blocks.default_cache_dir()) / f"policy-{policy_fingerprint(policy)}"
    directory.mkdir(parents=True, exist_ok=True)

    def write(tmp):
        module = policy.float().eval()
        torch.onnx.export(module, (torch.zeros(1, module.in_features),), str(tmp), dynamo=True,
                          input_names=["features"], output_names=["logits"], external_data=False, verbose=False)

    with onnx_blocks.quiet_export():
        return onnx_blocks.write_graph(directory / "policy.onnx", write)


class OrtPolicy:
    """``policy`` on ONNX Runtime: called with one step's features
    ``(F,)`` (``SolPolicy.features``), returns its logits ``(A,)`` as the
    torch module does; what ``decode.generate``'s ``policy_logits`` takes."""

    def __init__(self, policy, cache_dir: str | Path | None = None, threads: int | None = 1,
                 providers: Sequence[str] = onnx_blocks.PROVIDERS, quiet: bool = True):
        path = export_policy(policy, cache_dir)
        with onnx_blocks.quiet_sessions(quiet):
            self.session, self.report = onnx_blocks.ort_session(path, providers, threads)
        self.path = path
        #: Session runs (what the tests check).
        self.calls = 0

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        (logits,) = self.session.run(["logits"], {"features": features.detach().float().reshape(1, -1).numpy()})
        self.calls += 1
        return torch.from_numpy(logits[0])


__all__ = ["DecodeStep", "OrtPasses", "OrtPolicy", "OrtSteps", "buffers", "export_policy", "export_step",
           "export_steps", "feed", "fingerprint", "input_names", "load", "resized"]

"""The SOL decode loop: a dense prefill, then one token at a time, each run
at the MLP keep fraction an action picks (docs/sol.md).

The model is ``prepare``\\ d once: its MLP channels put in the order the
policy was trained with (``knobs.reorder_channels``; the logits do not
change) and its MLPs replaced by ``knobs.SlicedMLP``, so ``knobs.set_keep``
before a token makes that token's MLP products physically smaller (``n =
keep_width(I, keep)`` channels, not a mask; the tests record the ``aten.mm``
shapes). The key/value cache is carried from token to token as in
``leir_models.lm.reasoning.decode_greedy``.

- ``generate``: greedy decoding of a prompt in one of three modes:
  ``"dense"`` (keep 1 everywhere, no policy), ``"static"`` (one fixed
  action for every token) and ``"sol"`` (the policy picks each token's
  action, greedily or sampled). Returns the tokens, the actions, the net keep
  realized, the FLOPs per token (model and policy) and wall tokens/s.
- ``teacher_forced``: the log-probabilities of the true next tokens of an
  episode under a schedule of actions (given, or picked by the policy as it
  goes), after a ``Prefill``; the cache is cropped back to the prefill's
  length afterwards, so every rollout of a group starts from the same clean
  cache. ``replay_dense`` then extends the cache with the episode's tokens
  run densely: SOL's fix for KV pollution (tokens decoded cheaply leave
  degraded keys and values behind), so the next episode sees a clean cache.

``python -m leir_models.sol.decode --model DIR --policy DIR`` (``measure``)
prints tokens/s, FLOPs per token and net keep of every mode on held-out
prompts.

**FLOPs** (``flops_per_token``) are counted from the shapes, 2 per
multiply-add, for one token attending to ``L`` positions (itself included):
per layer the q/k/v/o projections (``2 D (H + 2 Hkv + H) hd``), the attention
scores and weighted sum (``4 H hd L``) and the MLP (``6 D n``), then the
output head (``2 D V``). Not counted: the embedding lookup (a gather, no
arithmetic), the norms, RoPE, softmax, SiLU and residual additions
(elementwise, under 1% here). The net keep of a token is the MLP share only
(``policy.net_keep``); its total FLOPs include attention and the head.

**Attention keep** (``attention.AttentionKeep``, optional in ``generate`` and
``teacher_forced``): a static fraction of the KV pages each single-token
pass reads, chosen per token and layer by Quest's bound (``attention``
module doc), combined with whatever MLP keep the mode gives. Its FLOPs count
the positions each layer really read (``4 H hd`` per position) plus the
bound of every candidate page (``4 H hd`` per page: one product of the
query against the page's ``[max | min]``), from what the pass recorded.
It is not a policy action: the shipped policy was trained for the MLP keep
only.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from leir_models.sol import attention, knobs
from leir_models.sol.policy import ACTIONS, SolPolicy, net_keep

MODES = ("dense", "static", "sol")


# ------------------------------------------------------------ the model, prepared


def order_importance(order: torch.Tensor) -> torch.Tensor:
    """An importance vector whose stable descending sort is ``order``: what
    makes ``knobs.reorder_channels`` apply a stored permutation."""
    imp = torch.empty(len(order), dtype=torch.float32)
    imp[order.to(torch.int64)] = torch.arange(len(order), 0, -1, dtype=torch.float32)
    return imp


def prepare(model, channel_orders: Sequence[torch.Tensor] | None = None):
    """``model`` (in place) with its MLP channels in ``channel_orders`` (a
    trained policy's: ``policy.load_policy``) and its MLPs sliceable; a model
    already prepared only has its orders applied. Returns ``model``."""
    if channel_orders:
        knobs.reorder_channels(model, [order_importance(o) for o in channel_orders])
    if not any(isinstance(m, knobs.SlicedMLP) for m in model.modules()):
        knobs.install_sliced_mlps(model)
    return model.eval()


def intermediate_size(model) -> int:
    return int(model.config.intermediate_size)


def flops_per_token(config, context: int, keep: float = 1.0, attended: int | None = None,
                    pages_scored: int = 0) -> int:
    """FLOPs of one decoded token attending to ``context`` positions at MLP
    keep ``keep`` (module doc: embedding, norms and elementwise work excluded).
    ``attended``: the positions the layers' attention really read, summed
    over the layers (default: every layer read all ``context``);
    ``pages_scored``: KV pages whose bound was computed, summed over the layers."""
    d, layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hd = getattr(config, "head_dim", None) or d // heads
    n = knobs.keep_width(inter, keep)
    projections = 2 * d * hd * (2 * heads + 2 * kv_heads)
    mlp = 6 * d * n
    attended = layers * context if attended is None else attended
    return layers * (projections + mlp) + 4 * heads * hd * (attended + pages_scored) + 2 * d * config.vocab_size


@dataclass
class Prefill:
    """The state after reading ``length`` tokens densely: the cache, and the
    last position's final hidden state ``(D,)`` and logits ``(V,)`` (which
    predict token ``length``)."""

    cache: object
    length: int
    hidden: torch.Tensor
    logits: torch.Tensor


@torch.no_grad()
def run_tokens(model, ids: Sequence[int], start: int, cache=None, keep: float = 1.0,
               pages: attention.KVPages | None = None):
    """Run ``ids`` at positions ``start..`` on ``cache`` at MLP keep ``keep``,
    with the attention keep state ``pages`` of that cache if given (the model
    ``attention.install``\\ ed; a single token then reads only the kept KV
    pages, and ``pages.reads`` says how many positions each layer read):
    (final hidden states ``(T, D)``, logits ``(T, V)``, the cache)."""
    knobs.set_keep(model, keep)
    positions = torch.arange(start, start + len(ids))[None]  # (1, T)
    extra = {}
    if pages is not None:
        pages.start_pass()
        extra["kv_pages"] = pages
    out = model.model(input_ids=torch.tensor([list(ids)]), position_ids=positions, cache=cache, use_cache=True,
                      **extra)
    hidden = out.last_hidden_state[0]  # (T, D), after the final norm
    return hidden, model.lm_head(hidden).float(), out.cache


def prefill(model, ids: Sequence[int]) -> Prefill:
    """Read ``ids`` densely (keep 1)."""
    hidden, logits, cache = run_tokens(model, ids, 0, None, 1.0)
    return Prefill(cache, len(ids), hidden[-1], logits[-1])


def restore(state: Prefill) -> None:
    """Crop ``state.cache`` back to ``state.length`` tokens (what a rollout added goes)."""
    extra = state.cache.get_seq_length() - state.length
    if extra > 0:
        state.cache.crop(-extra)


def replay_dense(model, state: Prefill, tokens: Sequence[int]) -> Prefill:
    """``state`` extended by ``tokens`` run densely (in place on its cache,
    after ``restore``): SOL's replay after an episode."""
    restore(state)
    hidden, logits, cache = run_tokens(model, tokens, state.length, state.cache, 1.0)
    return Prefill(cache, state.length + len(tokens), hidden[-1], logits[-1])


class TorchPasses:
    """``generate``'s passes on the torch model itself: the prompt read at
    once, then one ``run_tokens`` per token on the key/value cache (with the
    attention keep state ``pages``, if any). ``ort_step.OrtPasses`` does the
    same on ONNX Runtime."""

    def __init__(self, model, pages: attention.KVPages | None = None):
        self.model, self.pages = model, pages
        self.cache, self.length = None, 0

    def prefill(self, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden ``(D,)``, logits ``(V,)``) of the prompt's last token, read densely."""
        state = prefill(self.model, ids)
        self.cache, self.length = state.cache, state.length
        return state.hidden, state.logits

    def step(self, token: int, keep: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, logits) of ``token`` at the next position, MLPs at ``keep``."""
        h, lg, self.cache = run_tokens(self.model, [token], self.length, self.cache, keep, self.pages)
        self.length += 1
        return h[-1], lg[-1]


def embed(model, token: int) -> torch.Tensor:
    """The input embedding of ``token``, ``(D,)``."""
    return model.get_input_embeddings().weight[token]


# ------------------------------------------------------------ choosing actions


class Chooser:
    """The per-episode bookkeeping of the policy's inputs (``policy``
    module doc): the position, the running deviation of the realized net
    keep from the target, the previous action; reset every ``episode`` steps."""

    def __init__(self, policy: SolPolicy, target: float, intermediate: int | None = None, logits_of=None):
        self.policy, self.target, self.intermediate = policy, float(target), intermediate
        #: What computes the policy's logits from one step's features: the
        #: policy itself, or the same network elsewhere (``ort_step.OrtPolicy``).
        self.logits_of = logits_of if logits_of is not None else policy
        self.episode = policy.config.episode
        self.reset()

    def reset(self) -> None:
        self.step, self.kept, self.previous = 0, 0.0, None

    def _deviation(self) -> float:
        return self.kept / self.step - self.target if self.step else 0.0

    def features(self, hidden: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.policy.features(hidden, token_embedding, self.target, self._deviation(), self.step / self.episode,
                                    self.previous)

    def state(self) -> np.ndarray:
        """The features' entries besides the hidden state and the embedding,
        as they are now (``SolPolicy.state_features``): what a step graph
        with the policy inside reads for the next choice (``ort_step``)."""
        return self.policy.state_features(self.target, self._deviation(), self.step / self.episode, self.previous)

    def choose(self, feats: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> tuple[int, float]:
        """(action, its log-probability under the policy)."""
        with torch.no_grad():
            return self.pick(self.logits_of(feats), greedy, generator)

    @staticmethod
    def pick(logits: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> tuple[int, float]:
        """(action, its log-probability) from the policy's ``logits`` ``(A,)``:
        the first most likely, or sampled by inverting the cumulative
        distribution at one uniform draw from ``generator``. In plain Python
        over the A (three) values: torch's log_softmax and multinomial took
        0.066 ms a token here, a third of what a SOL token saves."""
        values = [float(v) for v in logits.tolist()]
        top = max(values)
        log_total = top + math.log(sum(math.exp(v - top) for v in values))
        if greedy:
            action = values.index(top)
        else:
            u, action = float(torch.rand((), generator=generator)), len(values) - 1
            cumulative = 0.0
            for i, v in enumerate(values):
                cumulative += math.exp(v - log_total)
                if u < cumulative:
                    action = i
                    break
        return action, values[action] - log_total

    def advance(self, action: int) -> None:
        self.kept += net_keep(action, self.intermediate)
        self.previous = action
        self.step += 1
        if self.step >= self.episode:
            self.reset()


# ------------------------------------------------------------ the decode loop


@dataclass
class Decoded:
    """One generation."""

    mode: str
    #: Generated token ids (the stop token not included).
    tokens: list[int]
    #: The action of each single-token forward pass (indices into ``ACTIONS``).
    actions: list[int]
    #: Mean net keep (MLP FLOPs share) over those passes; 1.0 when none ran.
    net_keep: float
    #: Mean FLOPs of one pass: the model's and the policy's (``flops_policy``).
    flops_per_token: float
    flops_policy: int
    #: Mean FLOPs of a dense pass at the same positions (for the ratio).
    flops_dense: float
    #: Passes per second of the decode loop (the prefill's time excluded).
    tokens_per_s: float
    seconds: float
    prefill_seconds: float
    stopped: str
    #: The static attention keep fraction (1.0: dense attention) and the
    #: share of the cache's positions the passes' attention really read
    #: (over layers and passes; 1.0 where the knob did not engage).
    attention_keep: float = 1.0
    keys_read: float = 1.0

    def to_json(self) -> dict:
        return {"mode": self.mode, "tokens": len(self.tokens), "net_keep": round(self.net_keep, 4),
                "flops_per_token": round(self.flops_per_token), "flops_dense": round(self.flops_dense),
                "flops_policy": self.flops_policy, "tokens_per_s": round(self.tokens_per_s, 1),
                "seconds": round(self.seconds, 4), "prefill_seconds": round(self.prefill_seconds, 4),
                "stopped": self.stopped, "actions": [ACTIONS[a] for a in self.actions],
                "attention_keep": self.attention_keep, "keys_read": round(self.keys_read, 4)}


def generate(model, prompt_ids: Sequence[int], max_tokens: int, mode: str = "dense", *, policy: SolPolicy | None = None,
             action: int = 0, target: float = 1.0, greedy_policy: bool = True, generator: torch.Generator | None = None,
             stop_ids: Sequence[int] | None = None, attention_keep: attention.AttentionKeep | None = None,
             never_ids: Sequence[int] = (), passes=None, policy_logits=None) -> Decoded:
    """Greedy decoding of ``prompt_ids`` for at most ``max_tokens`` tokens on a
    ``prepare``\\ d model. ``mode``: ``"dense"``, ``"static"`` (``action`` for
    every pass) or ``"sol"`` (``policy`` at budget ``target``; its own action
    greedy unless ``greedy_policy`` is False): the MLP keep. ``attention_keep``
    (any mode): the attention keep of every single-token pass (the model is
    ``attention.install``\\ ed; the prefill stays dense). Stops at a token of
    ``stop_ids`` (default: the model's eos) or at the context's end. The
    tokens of ``never_ids`` are never chosen (reasoning's: the special
    tokens it never contains, as ``lm.reasoning.decode_greedy`` masks them).
    ``passes``: what runs the prefill and each token's pass (default
    ``TorchPasses(model)``; ``ort_step.OrtPasses`` runs them on ONNX
    Runtime, without the attention keep). ``policy_logits``: what computes
    the policy's logits from its features in ``"sol"`` mode (default the
    ``policy`` module; ``ort_step.OrtPolicy(policy)`` on ONNX Runtime).
    Passes whose step graphs hold the policy (``ort_step.load(...,
    policy=)``) compute each next token's policy logits in the token's own
    run; ``policy_logits`` then serves the first token only."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    if mode == "sol" and policy is None:
        raise ValueError("mode 'sol' needs a policy")
    stops = set(stop_ids if stop_ids is not None else [model.config.eos_token_id])
    limit = model.config.max_position_embeddings
    inter = intermediate_size(model)
    chooser = Chooser(policy, target, inter, policy_logits) if mode == "sol" else None
    pages = None
    if attention_keep is not None and attention_keep.keep < 1.0:
        if passes is not None:
            raise ValueError("the attention keep runs on the torch passes only (ort_step module doc)")
        attention.install(model)
        pages = attention.KVPages(attention_keep)
    runner = passes if passes is not None else TorchPasses(model, pages)
    fused_policy = chooser is not None and getattr(runner, "fused", False)
    out: list[int] = []
    actions: list[int] = []
    flops = dense_flops = 0.0
    read = readable = 0
    start = time.perf_counter()
    hidden, logits = runner.prefill(prompt_ids)
    prefill_seconds = time.perf_counter() - start
    length = len(prompt_ids)
    stopped = "max_tokens"
    never = list(never_ids)
    if fused_policy:
        runner.set_never(never)
    while len(out) < max_tokens:
        if never:
            logits = logits.clone()
            logits[..., never] = -float("inf")
        token = int(logits.argmax())
        if token in stops:
            stopped = "eos"
            break
        out.append(token)
        if len(out) == max_tokens:
            break
        if length >= limit:
            stopped = "context"
            break
        if chooser is not None:
            # A step graph with the policy inside chose this token and ran the
            # policy for it; otherwise (the first token, or torch passes) the
            # policy runs here.
            fused = runner.policy_logits_for(token) if fused_policy else None
            if fused is not None:
                a, _ = chooser.pick(fused, greedy_policy, generator)
            else:
                a, _ = chooser.choose(chooser.features(hidden, embed(model, token)), greedy_policy, generator)
            chooser.advance(a)
            if fused_policy:
                runner.set_policy_state(chooser.state())
        else:
            a = action if mode == "static" else 0
        hidden, logits = runner.step(token, ACTIONS[a])
        length += 1
        actions.append(a)
        if pages is None:
            flops += flops_per_token(model.config, length, ACTIONS[a])
        else:
            attended = sum(pages.reads.values())
            flops += flops_per_token(model.config, length, ACTIONS[a], attended, sum(pages.scored.values()))
            read, readable = read + attended, readable + length * len(pages.reads)
        dense_flops += flops_per_token(model.config, length, 1.0)
    seconds = time.perf_counter() - start
    knobs.set_keep(model, 1.0)
    passes = len(actions)
    policy_flops = policy.policy_flops() if chooser is not None else 0
    decode_seconds = seconds - prefill_seconds
    return Decoded(mode, out, actions,
                   sum(net_keep(a, inter) for a in actions) / passes if passes else 1.0,
                   flops / passes + policy_flops if passes else 0.0, policy_flops,
                   dense_flops / passes if passes else 0.0,
                   passes / decode_seconds if passes and decode_seconds > 0 else 0.0,
                   seconds, prefill_seconds, stopped, attention_keep.keep if attention_keep else 1.0,
                   read / readable if readable else 1.0)


# ------------------------------------------------------------ teacher-forced scoring


@dataclass
class Rollout:
    """One schedule over an episode's true tokens."""

    #: Actions, one per step.
    actions: list[int]
    #: log p(true next token) per step under the compressed model, ``(E,)``.
    token_logprobs: torch.Tensor
    #: The policy's inputs per step ``(E, F)`` and its log-probability of the
    #: action taken ``(E,)`` (None for a given schedule).
    features: torch.Tensor | None = None
    action_logprobs: torch.Tensor | None = None
    net_keep: float = 1.0
    extra: dict = field(default_factory=dict)


def teacher_forced(model, state: Prefill, tokens: Sequence[int], schedule: Sequence[int] | None = None, *,
                   policy: SolPolicy | None = None, target: float = 1.0, greedy: bool = False,
                   generator: torch.Generator | None = None,
                   attention_keep: attention.AttentionKeep | None = None) -> Rollout:
    """Run ``tokens[:-1]`` after ``state`` one at a time and score ``tokens[1:]``:
    step ``i`` runs ``tokens[i]`` at the keep of its action and yields log p(
    ``tokens[i + 1]``). ``tokens[0]`` is the token ``state.logits`` predicts
    (scored by the dense prefill, not here). The actions are ``schedule``, or
    the ``policy``'s (sampled, or ``greedy``) at budget ``target``, from the
    compressed model's hidden states as they come; every step at
    ``attention_keep`` if given (its page bounds built on the first step;
    ``extra["keys_read"]``: the share of the cache's positions read). The
    cache is restored to ``state.length`` before and after."""
    steps = len(tokens) - 1
    if schedule is not None and len(schedule) != steps:
        raise ValueError(f"a schedule of {len(schedule)} actions for {steps} steps")
    if schedule is None and policy is None:
        raise ValueError("teacher_forced needs a schedule or a policy")
    inter = intermediate_size(model)
    chooser = Chooser(policy, target, inter) if schedule is None else None
    pages = None
    if attention_keep is not None and attention_keep.keep < 1.0:
        attention.install(model)
        pages = attention.KVPages(attention_keep)
    read = readable = 0
    restore(state)
    hidden, cache = state.hidden, state.cache
    actions, lps, feats, alps = [], [], [], []
    for i in range(steps):
        if chooser is not None:
            f = chooser.features(hidden, embed(model, tokens[i]))
            a, alp = chooser.choose(f, greedy, generator)
            chooser.advance(a)
            feats.append(f)
            alps.append(alp)
        else:
            a = int(schedule[i])
        h, logits, cache = run_tokens(model, [tokens[i]], state.length + i, cache, ACTIONS[a], pages)
        if pages is not None:
            read += sum(pages.reads.values())
            readable += (state.length + i + 1) * len(pages.reads)
        hidden = h[-1]
        lps.append(torch.log_softmax(logits[-1], -1)[tokens[i + 1]])
        actions.append(a)
    knobs.set_keep(model, 1.0)
    restore(state)
    return Rollout(actions, torch.stack(lps) if lps else torch.zeros(0),
                   torch.stack(feats) if feats else None, torch.tensor(alps) if alps else None,
                   sum(net_keep(a, inter) for a in actions) / steps if steps else 1.0,
                   {"keys_read": read / readable if readable else 1.0})


def dense_logprobs(model, ids: Sequence[int]) -> torch.Tensor:
    """log p(ids[t + 1] | ids[:t + 1]) for every t, one dense forward pass
    of the whole sequence (the reference the scoring is tested against)."""
    with torch.no_grad():
        knobs.set_keep(model, 1.0)
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1)
        return logp.gather(-1, torch.tensor(list(ids[1:]))[:, None])[:, 0]


def perplexity(mean_logprob: float) -> float:
    return math.exp(-mean_logprob)


# ------------------------------------------------------------ the measurement


def measure(model_dir, policy_dir, data_dir, prompts: int = 6, max_tokens: int = 64, targets=(0.5, 0.7),
            split: str = "heldout") -> dict:
    """Dense, static (each level) and SOL (each target) decoding of the
    reasoning after the step of the first ``prompts`` records of ``split``:
    mean tokens/s (decode loop only), FLOPs per token and net keep (SOL:
    the policy's actions sampled as in training, seeded; and greedy). Every
    mode decodes the same prompts greedily for ``max_tokens`` tokens (no
    early stop, so each mode runs as many passes)."""
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.data import candidate_text, load_records, prompt_text
    from leir_models.lm.store import load_model
    from leir_models.sol.policy import load_policy

    model, tok = load_model(model_dir)
    policy, orders = load_policy(policy_dir)
    prepare(model, orders)
    records = [r for r in load_records(data_dir)[0] if r.get("split") == split][:prompts]
    ids = [tk.encode_prompt(tok, prompt_text(r["before"], r["tensors"], r["target"],
                                             (r.get("reasoning_facts") or {}).get("machine") or {}))
           + tk.encode(tok, candidate_text(r["step"])) for r in records]
    runs = [("dense", {}), *((f"static {k:g}", {"mode": "static", "action": a}) for a, k in enumerate(ACTIONS)),
            *((f"sol {t:g}", {"mode": "sol", "policy": policy, "target": t, "greedy_policy": False,
                              "generator": torch.Generator().manual_seed(0)}) for t in targets),
            *((f"sol greedy {t:g}", {"mode": "sol", "policy": policy, "target": t}) for t in targets)]
    out = {}
    generate(model, ids[0], 4, "dense", stop_ids=[])  # warm-up
    for name, kw in runs:
        kw = {"mode": "dense", **kw}
        done = [generate(model, p, max_tokens, stop_ids=[], **kw) for p in ids]
        passes = sum(len(d.actions) for d in done)
        seconds = sum(d.seconds - d.prefill_seconds for d in done)
        out[name] = {"tokens_per_s": round(passes / seconds, 1),
                     "flops_per_token": round(sum(d.flops_per_token * len(d.actions) for d in done) / passes),
                     "flops_dense": round(sum(d.flops_dense * len(d.actions) for d in done) / passes),
                     "net_keep": round(sum(d.net_keep * len(d.actions) for d in done) / passes, 4)}
    return {"prompts": len(ids), "max_tokens": max_tokens, "policy_flops": policy.policy_flops(), "runs": out}


def main(argv=None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m leir_models.sol.decode",
                                description="tokens/s and FLOPs per token: dense, static and SOL decoding")
    p.add_argument("--model", required=True, metavar="DIR")
    p.add_argument("--policy", required=True, metavar="DIR", help="what `leir model train-sol --out` wrote")
    p.add_argument("--data", default="tests/data/dataset", metavar="DIR")
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.model, args.policy, args.data, args.prompts, args.max_tokens), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

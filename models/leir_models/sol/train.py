"""``train_sol``: SOL's counterfactual-group training of the policy on the
frozen model, then the evaluation at matched budgets (docs/sol.md).

Reads top to bottom:

1. **Text.** Every record of the dataset gives one sequence: ``<|bos|>``,
   ``data.prompt_text`` of its state and ``data.candidate_text`` of its step
   (what the ranker scores), cut from the left to the model's context.
   Records of the ``train`` split train the policy; ``heldout`` families
   (never seen by the model or the policy) evaluate it.
2. **The model, prepared once.** Channel importance over the first
   ``calibration_sequences`` training sequences, channels reordered
   (``knobs.reorder_channels``: the dense logits do not change), sliced
   MLPs installed. The permutation ships with the policy.
3. **Episodes.** Per training sequence: a target drawn (``targets``, or
   uniform on [0.5, 1]), a dense prefill of a random prefix, then
   ``episodes_per_sequence`` episodes of ``episode`` tokens. Per episode a
   group of ``group`` schedules is sampled from the policy over the same
   teacher-forced tokens (``decode.teacher_forced``, the cache restored
   between rollouts); then the episode is replayed densely into the cache
   (``decode.replay_dense``: SOL's fix for KV pollution).
4. **Reward and update.** Reward of a rollout: the sum of log p(true next
   token) under the compressed model, minus ``budget_weight * episode *
   max(0, |net keep - target| - tolerance)`` (SOL's soft budget penalty, per
   token). Advantages are group-relative (reward minus the group's mean,
   over its standard deviation), one per episode, given to each of its
   steps (SOL discounts per-step returns with gamma 0.85; a whole-episode
   reward is the plain GRPO form, chosen here for 16 steps of 3 actions).
   PPO-style clipped objective (``clip``) with an entropy bonus
   (``entropy``), ``ppo_epochs`` passes over the step's rollouts, Adam.
5. **Evaluation** (``evaluate``), at each of ``eval_targets``, on the last
   ``eval_episodes`` episodes of each held-out sequence (the end of the
   program and the step), every episode after a dense prefill: mean log
   likelihood per token and perplexity of dense, the SOL policy (sampled,
   as trained; greedy beside it), the best static mix meeting the budget (searched over every maximal mix
   of the three levels in an episode, evenly interleaved: single levels
   and pairs included; chosen on the held-out text itself, which favours
   static; once at the target, once at the net keep the policy reached)
   and random schedules matched on net keep (the policy's own actions of
   each episode, shuffled).

Seeded: ``torch.manual_seed(seed)`` before the policy is built, one
``torch.Generator`` for the sampled actions and one ``random.Random`` for
targets, sequence order and prefix lengths: the same seed, data, model and
thread count give the same policy weights, bit for bit (tested).
Writes ``policy.safetensors``, ``policy.json`` and ``train_log.json``.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path
from typing import Callable, Sequence

import torch

from leir_models.sol import decode, knobs
from leir_models.sol.policy import ACTIONS, PolicyConfig, SolPolicy, net_keep

LOG_FILE = "train_log.json"


@dataclass(frozen=True)
class SolTrainConfig:
    """``train_sol``'s settings; the reasons beside each."""

    seed: int = 0
    #: Optimizer updates, one per batch of sequences. 300 updates of 2 x 2
    #: episodes (4,800 rollouts) took 442 s on one core with our 6-layer
    #: model, and the evaluation 3 minutes more (docs/sol.md has the run).
    steps: int = 300
    sequences_per_step: int = 2
    episodes_per_sequence: int = 2
    #: Tokens per episode: SOL's 16.
    episode: int = 16
    #: Schedules per counterfactual group. SOL's 16; 4 here (each rollout
    #: is 16 forward passes of the frozen model on this CPU).
    group: int = 4
    #: Budgets drawn per sequence (empty: uniform on [0.5, 1]).
    targets: tuple[float, ...] = (0.5, 0.7, 0.85, 1.0)
    #: Soft budget penalty: nats per token per unit of net keep past the
    #: tolerance. 50 makes one token at a level too high (1/64 of net keep
    #: over a 16-token episode) cost more than the ~0.1-0.5 nats the extra
    #: compute could buy. SOL's tolerance 0.02.
    budget_weight: float = 50.0
    tolerance: float = 0.02
    #: PPO: SOL's clip 0.2 and entropy bonus 0.05; lr 1e-3 (SOL's 1e-4 is
    #: for a 6-9 M-parameter policy; ours has ~40 k).
    clip: float = 0.2
    entropy: float = 0.05
    learning_rate: float = 1e-3
    ppo_epochs: int = 2
    grad_clip: float = 1.0
    #: The policy's hidden width (``policy.PolicyConfig``).
    width: int = 64
    #: Tokens read densely at least before the first episode.
    prefill_min: int = 32
    #: Training sequences for the channel importance.
    calibration_sequences: int = 16
    #: Evaluation: budgets, held-out sequences (0: all), episodes each,
    #: random shuffles per episode.
    eval_targets: tuple[float, ...] = (0.5, 0.7)
    eval_sequences: int = 48
    eval_episodes: int = 2
    eval_random: int = 2
    #: torch threads (None: leave torch's setting).
    threads: int | None = 1

    def to_json(self) -> dict:
        d = asdict(self)
        d["targets"], d["eval_targets"] = list(self.targets), list(self.eval_targets)
        return d

    def with_(self, **changes) -> "SolTrainConfig":
        from dataclasses import replace

        return replace(self, **changes)


SOL_TRAIN = SolTrainConfig()


# ------------------------------------------------------------ 1. text


def sequences(records: Sequence[dict], tokenizer, split: str, max_len: int) -> list[list[int]]:
    """Token ids of ``prompt_text + candidate_text`` of each record of
    ``split`` (distinct texts, first-seen order), cut from the left to
    ``max_len`` (``<|bos|>`` kept)."""
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.data import candidate_text, prompt_text

    seen, out = set(), []
    for r in records:
        if r.get("split") != split:
            continue
        machine = (r.get("reasoning_facts") or {}).get("machine") or {}
        text = prompt_text(r["before"], r["tensors"], r["target"], machine)
        cont = candidate_text(r["step"])
        if (text, cont) in seen:
            continue
        seen.add((text, cont))
        ids = tk.encode_prompt(tokenizer, text) + tk.encode(tokenizer, cont)
        if len(ids) > max_len:
            ids = ids[:1] + ids[len(ids) - max_len + 1:]
        out.append(ids)
    return out


#: ``text_sequences``: tokens per sequence (``<|bos|>`` included), and every
#: how many-th sequence is held out.
TEXT_SEQUENCE = 256
TEXT_HELDOUT_EVERY = 5


def text_sequences(text: str, tokenizer, split: str, max_len: int) -> list[list[int]]:
    """Sequences of a plain text (general text, not the dataset: the
    comparison with SOL's own setting): the text's ids cut into consecutive
    pieces of ``min(TEXT_SEQUENCE, max_len)`` tokens, each after ``<|bos|>``;
    every ``TEXT_HELDOUT_EVERY``-th piece is "heldout", the others "train"
    (a short last piece is dropped)."""
    from leir_models.lm import tokenizer as tk

    if split not in ("train", "heldout"):
        raise ValueError(f"split {split!r}: a text has 'train' and 'heldout'")
    length = min(TEXT_SEQUENCE, max_len) - 1
    ids = tk.encode(tokenizer, text)
    pieces = [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)]
    return [[tk.BOS_ID] + p for i, p in enumerate(pieces)
            if (i % TEXT_HELDOUT_EVERY == TEXT_HELDOUT_EVERY - 1) == (split == "heldout")]


# ------------------------------------------------------------ 4. reward and update


def budget_penalty(cfg: SolTrainConfig, realized: float, target: float) -> float:
    return cfg.budget_weight * cfg.episode * max(0.0, abs(realized - target) - cfg.tolerance)


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """(reward - group mean) / (group std + 1e-3): zero when the group agrees."""
    return (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-3)


def ppo_loss(policy: SolPolicy, feats: torch.Tensor, actions: torch.Tensor, old_logp: torch.Tensor,
             advantages: torch.Tensor, clip: float, entropy_weight: float) -> tuple[torch.Tensor, float]:
    """Clipped surrogate over steps ``feats (N, F)``, ``actions (N,)``, minus
    the entropy bonus; (loss, mean entropy)."""
    logp_all = torch.log_softmax(policy(feats), -1)  # (N, A)
    logp = logp_all.gather(-1, actions[:, None])[:, 0]  # (N,)
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    return -surrogate.mean() - entropy_weight * entropy, float(entropy.detach())


# ------------------------------------------------------------ 5. static mixes and the evaluation


def mix_net_keep(counts: Sequence[int], intermediate: int) -> float:
    return sum(c * net_keep(a, intermediate) for a, c in enumerate(counts)) / sum(counts)


def interleave(counts: Sequence[int]) -> list[int]:
    """A schedule with ``counts[a]`` steps of action ``a``, spread evenly
    (each step goes to the action furthest behind its share)."""
    total = sum(counts)
    used = [0] * len(counts)
    out = []
    for i in range(total):
        a = max(range(len(counts)), key=lambda a: (counts[a] * (i + 1) / total - used[a], -a))
        used[a] += 1
        out.append(a)
    return out


def static_mixes(episode: int, budget: float, intermediate: int) -> list[tuple[int, ...]]:
    """Every mix (steps per action) of an episode meeting ``budget`` that no
    single upgrade of one step to the next larger level keeps within it
    (the maximal mixes, pairs of levels among them), and every single level
    meeting it."""
    eps = 1e-9
    mixes = []
    for counts in product(range(episode + 1), repeat=len(ACTIONS)):
        if sum(counts) != episode or mix_net_keep(counts, intermediate) > budget + eps:
            continue
        maximal = True
        if max(counts) == episode:
            mixes.append(counts)
            continue
        for a in range(1, len(ACTIONS)):  # ACTIONS go from the largest keep down
            if counts[a]:
                up = list(counts)
                up[a] -= 1
                up[a - 1] += 1
                if mix_net_keep(up, intermediate) <= budget + eps:
                    maximal = False
        if maximal:
            mixes.append(counts)
    return mixes


def mix_name(counts: Sequence[int]) -> str:
    return " + ".join(f"{c}x{ACTIONS[a]:g}" for a, c in enumerate(counts) if c)


def _episode_states(model, ids: list[int], episodes: int, episode: int):
    """(dense state, the episode's tokens) for the last ``episodes`` episodes
    of ``ids``, each after a dense prefill of everything before it."""
    start = len(ids) - episodes * episode - 1
    state = decode.prefill(model, ids[:start])
    for j in range(episodes):
        tokens = ids[start + j * episode: start + (j + 1) * episode + 1]
        yield state, tokens
        state = decode.replay_dense(model, state, tokens[:-1])


@torch.no_grad()
def evaluate(model, policy: SolPolicy, seqs: Sequence[list[int]], cfg: SolTrainConfig,
             log: Callable[[str], None] = print) -> dict:
    """The figures of the module doc, per target of ``cfg.eval_targets``.

    "sol" is the policy as trained: its actions sampled (seeded). Its
    realized net keep is not exactly the target, so static is searched
    twice: at the target ("static_best": the best mix meeting the budget)
    and at the policy's realized net keep ("static_matched"); the random
    schedules are the policy's own actions of each episode, shuffled (the
    same net keep exactly). "sol_greedy" (each step's most likely action) is
    reported beside it, with its own net keep."""
    inter = decode.intermediate_size(model)
    e = cfg.episode
    seqs = [s for s in seqs if len(s) >= cfg.prefill_min + cfg.eval_episodes * e + 1]
    if cfg.eval_sequences:
        seqs = seqs[:cfg.eval_sequences]
    generator = torch.Generator().manual_seed(cfg.seed + 1)
    dense_sum, tokens = 0.0, 0
    per_target = {t: {"sol": 0.0, "sol_keep": 0.0, "greedy": 0.0, "greedy_keep": 0.0, "random": 0.0,
                      "actions": [0] * len(ACTIONS)} for t in cfg.eval_targets}
    start = time.perf_counter()
    for ids in seqs:
        for state, toks in _episode_states(model, ids, cfg.eval_episodes, e):
            dense = decode.teacher_forced(model, state, toks, [0] * e)
            dense_sum += float(dense.token_logprobs.sum())
            tokens += e
            for t in cfg.eval_targets:
                row = per_target[t]
                sol = decode.teacher_forced(model, state, toks, policy=policy, target=t, generator=generator)
                row["sol"] += float(sol.token_logprobs.sum())
                row["sol_keep"] += sol.net_keep * e
                for a in sol.actions:
                    row["actions"][a] += 1
                greedy = decode.teacher_forced(model, state, toks, policy=policy, target=t, greedy=True)
                row["greedy"] += float(greedy.token_logprobs.sum())
                row["greedy_keep"] += greedy.net_keep * e
                for _ in range(cfg.eval_random):
                    perm = torch.randperm(e, generator=generator).tolist()
                    shuffled = [sol.actions[i] for i in perm]
                    row["random"] += float(decode.teacher_forced(model, state, toks, shuffled).token_logprobs.sum()) \
                        / cfg.eval_random
    for row in per_target.values():
        row["sol_keep"] /= max(tokens, 1)
        row["greedy_keep"] /= max(tokens, 1)
    # The static search replays the same episodes once the budgets are known.
    budgets = {(t, kind): b for t in cfg.eval_targets
               for kind, b in (("target", t), ("matched", per_target[t]["sol_keep"] + 1e-6))}
    all_mixes = sorted({m for b in budgets.values() for m in static_mixes(e, b, inter)})
    static_sum = {m: 0.0 for m in all_mixes}
    schedules = {m: interleave(m) for m in all_mixes}
    for ids in seqs:
        for state, toks in _episode_states(model, ids, cfg.eval_episodes, e):
            for m in all_mixes:
                static_sum[m] += float(decode.teacher_forced(model, state, toks, schedules[m]).token_logprobs.sum())
    seconds = time.perf_counter() - start
    out = {"sequences": len(seqs), "episodes": len(seqs) * cfg.eval_episodes, "tokens": tokens,
           "seconds": round(seconds, 1), "dense": _quality(dense_sum, tokens), "targets": {}}
    for t in cfg.eval_targets:
        row = per_target[t]
        found = {}
        for kind in ("target", "matched"):
            mixes = static_mixes(e, budgets[t, kind], inter)
            best_sum, best = max((static_sum[m], m) for m in mixes)
            found[kind] = {**_quality(best_sum, tokens), "mix": mix_name(best),
                           "net_keep": round(mix_net_keep(best, inter), 4),
                           "searched_at": round(budgets[t, kind], 4), "mixes_searched": len(mixes)}
        mixes = static_mixes(e, t, inter)
        sol_q, static_q = _quality(row["sol"], tokens), found["target"]
        out["targets"][f"{t:g}"] = {
            "sol": {**sol_q, "net_keep": round(row["sol_keep"], 4),
                    "action_share": {f"{ACTIONS[a]:g}": round(c / max(tokens, 1), 3)
                                     for a, c in enumerate(row["actions"])}},
            "sol_greedy": {**_quality(row["greedy"], tokens), "net_keep": round(row["greedy_keep"], 4)},
            "static_best": found["target"],
            "static_matched": found["matched"],
            "static_single_levels": {f"{ACTIONS[a]:g}": _quality(static_sum[m], tokens)
                                     for m in mixes for a in range(len(ACTIONS)) if m[a] == e},
            "random_matched": _quality(row["random"], tokens),
            "sol_minus_static_logprob": round(sol_q["mean_logprob"] - static_q["mean_logprob"], 5),
            "sol_vs_static_ppl_relative": round(static_q["perplexity"] / sol_q["perplexity"] - 1, 5),
            "sol_vs_static_matched_ppl_relative": round(found["matched"]["perplexity"] / sol_q["perplexity"] - 1, 5),
        }
        r = out["targets"][f"{t:g}"]
        log(f"eval target {t:g}: dense ppl {out['dense']['perplexity']:.3f}, SOL {sol_q['perplexity']:.3f} "
            f"(net keep {row['sol_keep']:.3f}; greedy {r['sol_greedy']['perplexity']:.3f} at "
            f"{row['greedy_keep']:.3f}), best static {static_q['perplexity']:.3f} ({static_q['mix']}; at the "
            f"policy's net keep {found['matched']['perplexity']:.3f}, {found['matched']['mix']}), "
            f"random matched {r['random_matched']['perplexity']:.3f}")
    return out


def _quality(total: float, tokens: int) -> dict:
    mean = total / max(tokens, 1)
    return {"mean_logprob": round(mean, 5), "perplexity": round(math.exp(-mean), 4)}


# ------------------------------------------------------------ the whole run


def train_sol(model_dir: str | Path, data_dir: str | Path, out_dir: str | Path, cfg: SolTrainConfig = SOL_TRAIN,
              log: Callable[[str], None] = print, evaluate_after: bool = True, text: str | Path | None = None) -> dict:
    """Train a policy on the model of ``model_dir`` (``store.load_model``)
    with the dataset of ``data_dir``, or with the plain text file ``text``
    (``text_sequences``); write it to ``out_dir``; return the log."""
    from leir_models.lm.data import DataError, load_records
    from leir_models.lm.store import load_model

    for name, path in (("model", model_dir), *((("data", data_dir),) if text is None else ())):
        if not Path(path).is_dir():
            raise FileNotFoundError(f"the {name} directory {path} does not exist")
    if text is not None and not Path(text).is_file():
        raise FileNotFoundError(f"the text file {text} does not exist")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started = time.perf_counter()
    model, tok = load_model(model_dir)
    limit = model.config.max_position_embeddings
    need = cfg.prefill_min + cfg.episodes_per_sequence * cfg.episode + 1
    if text is None:
        records, source = load_records(data_dir)
        train_seqs = [s for s in sequences(records, tok, "train", limit) if len(s) >= need]
        heldout_seqs = sequences(records, tok, "heldout", limit)
    else:
        content, source, data_dir = Path(text).read_text(encoding="utf-8"), "text", text
        train_seqs = [s for s in text_sequences(content, tok, "train", limit) if len(s) >= need]
        heldout_seqs = text_sequences(content, tok, "heldout", limit)
    if not train_seqs:
        raise DataError(f"{data_dir}: no training sequence of {need} tokens or more")
    log(f"data: {source} of {data_dir}: {len(train_seqs)} training sequences, {len(heldout_seqs)} held-out")

    # 2. the model, prepared once
    importance = knobs.channel_importance(model, [torch.tensor([s]) for s in train_seqs[:cfg.calibration_sequences]])
    orders = knobs.reorder_channels(model, importance)
    decode.prepare(model)
    inter = decode.intermediate_size(model)

    torch.manual_seed(cfg.seed)
    policy = SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size, width=cfg.width, episode=cfg.episode))
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    generator = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    log(f"policy: {policy.parameter_count()} parameters, {policy.policy_flops()} FLOPs per token; "
        f"model {decode.flops_per_token(model.config, 256)} FLOPs per token at context 256")

    history = []
    order = list(range(len(train_seqs)))
    cursor = len(order)
    for step in range(cfg.steps):
        policy.eval()
        batch_feats, batch_actions, batch_logp, batch_adv = [], [], [], []
        rewards_seen, keeps_by_target, penalties = [], {}, []
        for _ in range(cfg.sequences_per_step):
            if cursor >= len(order):
                rng.shuffle(order)
                cursor = 0
            ids = train_seqs[order[cursor]]
            cursor += 1
            target = rng.choice(cfg.targets) if cfg.targets else rng.uniform(0.5, 1.0)
            span = cfg.episodes_per_sequence * cfg.episode + 1
            start = rng.randint(cfg.prefill_min, len(ids) - span)
            state = decode.prefill(model, ids[:start])
            for j in range(cfg.episodes_per_sequence):
                tokens = ids[start + j * cfg.episode: start + (j + 1) * cfg.episode + 1]
                group = [decode.teacher_forced(model, state, tokens, policy=policy, target=target, generator=generator)
                         for _ in range(cfg.group)]
                pens = [budget_penalty(cfg, r.net_keep, target) for r in group]
                rewards = torch.tensor([float(r.token_logprobs.sum()) - p for r, p in zip(group, pens)])
                adv = group_advantages(rewards)
                for r, a in zip(group, adv):
                    batch_feats.append(r.features)
                    batch_actions.append(torch.tensor(r.actions))
                    batch_logp.append(r.action_logprobs)
                    batch_adv.append(a.expand(len(r.actions)))
                rewards_seen.extend(rewards.tolist())
                penalties.extend(pens)
                keeps_by_target.setdefault(f"{target:g}", []).extend(r.net_keep for r in group)
                state = decode.replay_dense(model, state, tokens[:-1])
        feats, actions = torch.cat(batch_feats), torch.cat(batch_actions)
        old_logp, adv = torch.cat(batch_logp), torch.cat(batch_adv)
        policy.train()
        for _ in range(cfg.ppo_epochs):
            loss, entropy = ppo_loss(policy, feats, actions, old_logp, adv, cfg.clip, cfg.entropy)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
            optimizer.step()
        entry = {"step": step + 1, "reward": round(sum(rewards_seen) / len(rewards_seen), 4),
                 "penalty": round(sum(penalties) / len(penalties), 4), "entropy": round(entropy, 4),
                 "net_keep": {t: round(sum(v) / len(v), 4) for t, v in sorted(keeps_by_target.items())}}
        history.append(entry)
        if (step + 1) % max(1, cfg.steps // 10) == 0 or step + 1 == cfg.steps:
            log(f"step {step + 1}/{cfg.steps}: reward {entry['reward']:.3f}, penalty {entry['penalty']:.3f}, "
                f"entropy {entry['entropy']:.3f}, net keep by target {json.dumps(entry['net_keep'])}")
    policy.eval()
    train_seconds = time.perf_counter() - started

    out = Path(out_dir)
    policy.save(out, orders)
    result = {"config": cfg.to_json(), "model": str(model_dir), "data": str(data_dir), "source": source,
              "train_sequences": len(train_seqs), "heldout_sequences": len(heldout_seqs),
              "policy_parameters": policy.parameter_count(), "policy_flops": policy.policy_flops(),
              "model_flops_dense_at_256": decode.flops_per_token(model.config, 256),
              "intermediate_size": inter, "train_seconds": round(train_seconds, 1), "history": history,
              "evaluation": None}
    if evaluate_after and heldout_seqs:
        result["evaluation"] = evaluate(model, policy, heldout_seqs, cfg, log)
    (out / LOG_FILE).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {out / 'policy.safetensors'}, {out / 'policy.json'}, {out / LOG_FILE} "
        f"({train_seconds:.0f} s of training)")
    return result


__all__ = ["SOL_TRAIN", "SolTrainConfig", "evaluate", "interleave", "static_mixes", "text_sequences", "train_sol"]

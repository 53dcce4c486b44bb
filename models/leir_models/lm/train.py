"""Train the model from scratch, or fine-tune one: ``leir model train [--steps N] [--seed S] [--out DIR]
[--data DIR] [--init DIR [--lora R]]``.

Reads top to bottom, as nanoGPT's train.py does:

1. seed everything (``TrainConfig.seed``) and read the states (``data.py``);
2. train the tokenizer on the training split's text (``tokenizer.py``), or,
   fine-tuning (``TrainConfig.init``), take the initial model's;
3. build the Llama of ``config.py`` (random initialisation), or load the
   initial model (SmolLM2 for the larger tier: ``pretrained.py``), with
   LoRA adapters when ``TrainConfig.lora_rank`` > 0 (peft: the attention and
   MLP projections and the special tokens' embedding rows train, the rest
   is frozen);
4. AdamW (over the weights that train) with a linear warm-up and a cosine decay;
5. each step: a batch of states, each one sequence: the prompt, then every
   measured candidate as a branch after it (``state_sequence``); the loss is
   the language-model loss (the prompt, and the positive's step and
   reasoning: ``data.State.positive``; and the reasoning of
   ``TrainConfig.reasoning_branches`` other candidates) plus the ranking loss
   (``softplus(-(logp(faster) - logp(slower)))`` over each state's pairs,
   ``data.State.pairs``: slower steps are negatives, never targets);
6. every ``eval_every`` steps, the same losses on the validation split, and
   the pairwise accuracy there; the weights of the best validation loss
   (or ranking loss alone: ``TrainConfig.select``) are the ones kept;
   LoRA adapters are then merged into the weights they adapt;
7. write ``OUT/model.safetensors`` (``safetensors.torch.save_model``: tied
   embeddings stored once), ``OUT/config.json`` (the ``LlamaConfig``),
   ``OUT/tokenizer.json``, ``OUT/training.json`` (settings, figures, the
   curve), ``OUT/README.md`` (the model card) and ``OUT/val_loss.png``. No pickle anywhere (``torch.save`` is
   not used; ``ranker.load_model`` reads these files back).

Same seed, same data, same torch thread count: the same weights, bit for
bit (tests/test_lm_train.py trains twice for 3 steps; tests/test_lm_pretrained.py
fine-tunes SmolLM2 twice with LoRA).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import warnings
import zlib
from pathlib import Path
from typing import Callable

from leir_models.lm import tokenizer as tk
from leir_models.lm.config import TRAIN, TrainConfig, llama_config, parameter_count
from leir_models.lm.data import State, candidate_text, load_states, target_text, tokenizer_corpus

#: The committed data the shipped model was trained on (``leir dataset build``
#: of 2026-12-04: 8,500 samples, 850 states; docs/model.md "The shipped model").
DEFAULT_DATA = "models/data/dataset-20261204"
DEFAULT_OUT = "build/lm"

#: Files a trained model directory holds (and ``val_loss.png``, with matplotlib).
FILES = ("model.safetensors", "config.json", "tokenizer.json", "training.json", "README.md")


# ------------------------------------------------------------ sequences and losses


def state_sequence(st: State, tok, cfg: TrainConfig) -> dict:
    """A state as one sequence: the prompt, then each candidate as a branch
    (its step, and for the positive and the ``reasoning_branches`` its
    reasoning), every branch attending to
    the prompt and to itself only, at positions that continue the prompt's
    (as ``ranker.logprobs`` reads candidates). The prompt is read once per
    state, not once per candidate. Returns the ids, positions, which earlier
    tokens each token may attend to (``parent``: the previous token of its
    branch, -1 for a branch's first), and the targets: ``(predicting
    position, token, is an LM target, candidate or -1)``."""
    prompt = tk.encode_prompt(tok, st.prompt())
    positive = st.positive(cfg.min_speedup)
    explained = reasoning_branches(st, positive, cfg)
    conts, steps = [], []
    for k, c in enumerate(st.candidates):
        step_ids = tk.encode(tok, candidate_text(c.step))
        if c is positive or k in explained:
            cont = tk.encode(tok, target_text(c, cfg.reasoning, cfg.reasoning_measured))
        else:
            cont = step_ids
        assert cont[:len(step_ids)] == step_ids, "the special <|reason|> token ends the step in both"
        conts.append(cont)
        steps.append(len(step_ids))
    room = cfg.max_tokens - max(len(c) for c in conts)
    if len(prompt) > room:
        prompt = prompt[:1] + prompt[len(prompt) - room + 1:]  # cut from the left, keep <|bos|>
    n = len(prompt)
    ids, positions, branch = list(prompt), list(range(n)), [-1] * n
    targets = [(t - 1, prompt[t], True, -1) for t in range(1, n)]  # the prompt: an LM target once per state
    for k, (c, cont) in enumerate(zip(st.candidates, conts)):
        start = len(ids)
        for d, token in enumerate(cont):
            # The positive's step and reasoning are LM targets; another
            # explained candidate's reasoning only, never its step.
            lm = c is positive or (k in explained and d >= steps[k])
            targets.append((n - 1 if d == 0 else start + d - 1, token, lm, k if d < steps[k] else -1))
            ids.append(token)
            positions.append(n + d)
            branch.append(k)
    return {"ids": ids, "positions": positions, "branch": branch, "prompt": n, "targets": targets}


def reasoning_branches(st: State, positive, cfg: TrainConfig) -> frozenset[int]:
    """The indices of the candidates of ``st`` other than ``positive`` whose
    reasoning is a language-model target (``TrainConfig.reasoning_branches``
    of them, or all there are): the same ones at every epoch and run of a
    seed, drawn by a generator seeded with ``cfg.seed`` and the state's
    program and target."""
    if not cfg.reasoning or cfg.reasoning_branches <= 0:
        return frozenset()
    others = [k for k, c in enumerate(st.candidates) if c is not positive and c.reasoning]
    if len(others) <= cfg.reasoning_branches:
        return frozenset(others)
    seed = zlib.crc32(f"{cfg.seed}\0{st.target}\0{st.before}".encode("utf-8"))
    return frozenset(random.Random(seed).sample(others, cfg.reasoning_branches))


def collate(seqs: list[dict], dtype):
    """Padded ids, positions and the (batch, 1, L, L) additive attention mask."""
    import torch

    b, width = len(seqs), max(len(s["ids"]) for s in seqs)
    ids = torch.full((b, width), tk.PAD_ID, dtype=torch.long)
    positions = torch.zeros((b, width), dtype=torch.long)
    allowed = torch.zeros((b, width, width), dtype=torch.bool)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    for i, s in enumerate(seqs):
        k, n = len(s["ids"]), s["prompt"]
        ids[i, :k] = torch.tensor(s["ids"])
        positions[i, :k] = torch.tensor(s["positions"])
        branch = torch.tensor(s["branch"])
        same = (branch[:, None] == branch[None, :]) | (branch[None, :] == -1)  # own branch, or the prompt
        allowed[i, :k, :k] = same & causal[:k, :k]
        allowed[i, n:k, :n] = True
        allowed[i, k:, :] = causal[k:, :]  # padding: causal, never attended to by a real token
    mask = torch.zeros((b, 1, width, width), dtype=dtype).masked_fill(~allowed[:, None], torch.finfo(dtype).min)
    return ids, positions, mask


def losses(model, batch: list[State], tok, cfg: TrainConfig):
    """(LM loss, ranking loss, pairs right, pairs, tokens) of ``batch``."""
    import torch
    import torch.nn.functional as F

    seqs = [state_sequence(st, tok, cfg) for st in batch]
    weight = next(model.parameters())
    ids, positions, mask = (t.to(weight.device) for t in collate(seqs, weight.dtype))
    logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float(), -1)
    rows, cols, tokens, is_lm, cand = [], [], [], [], []
    pairs = []
    base = 0
    for b, (st, s) in enumerate(zip(batch, seqs)):
        for pos, token, lm_target, k in s["targets"]:
            rows.append(b)
            cols.append(pos)
            tokens.append(token)
            is_lm.append(lm_target)
            cand.append(base + k if k >= 0 else -1)
        pairs.extend((base + i, base + j) for i, j in st.pairs(cfg.pair_margin))
        base += len(st.candidates)
    on = logp.device
    picked = logp[torch.tensor(rows, device=on), torch.tensor(cols, device=on), torch.tensor(tokens, device=on)]
    is_lm_t = torch.tensor(is_lm, device=on)
    lm = -picked[is_lm_t].mean()
    cand_t = torch.tensor(cand, device=on)
    step_lp = torch.zeros(base, dtype=picked.dtype, device=on).index_add(0, cand_t.clamp(min=0),
                                                                         picked * (cand_t >= 0))
    if pairs:
        better = torch.tensor([i for i, _ in pairs], device=on)
        worse = torch.tensor([j for _, j in pairs], device=on)
        margin = step_lp[better] - step_lp[worse]
        rank = F.softplus(-margin).mean()
        right = int((margin > 0).sum())
    else:
        rank, right = lm.new_zeros(()), 0
    return lm, rank, right, len(pairs), sum(len(s["ids"]) for s in seqs)


def step_logprobs(model, st: State, tok, cfg: TrainConfig) -> list[float]:
    """Each candidate's step log-likelihood as training computes it (tests
    compare it with ``ranker.logprobs_full``)."""
    import torch

    s = state_sequence(st, tok, cfg)
    weight = next(model.parameters())
    ids, positions, mask = (t.to(weight.device) for t in collate([s], weight.dtype))
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float(), -1)
    out = [0.0] * len(st.candidates)
    for pos, token, _, k in s["targets"]:
        if k >= 0:
            out[k] += float(logp[0, pos, token])
    return out


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak."""
    warmup = max(1, round(cfg.steps * cfg.warmup_fraction))
    if step < warmup:
        return cfg.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.learning_rate * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.learning_rate - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def evaluate_loss(model, states: list[State], tok, cfg: TrainConfig) -> dict:
    import torch

    model.eval()
    lm_sum = rank_sum = 0.0
    right = pairs = 0
    with torch.no_grad():
        for k in range(0, len(states), cfg.batch_states):
            lm, rank, r, p, _ = losses(model, states[k:k + cfg.batch_states], tok, cfg)
            lm_sum += float(lm)
            rank_sum += float(rank) * p
            right += r
            pairs += p
    model.train()
    batches = max(1, math.ceil(len(states) / cfg.batch_states))
    lm_mean = lm_sum / batches
    rank_mean = rank_sum / pairs if pairs else 0.0
    return {"lm": lm_mean, "rank": rank_mean, "loss": lm_mean + cfg.rank_weight * rank_mean,
            "pair_accuracy": right / pairs if pairs else None, "pairs": pairs}


def _criterion(v: dict, cfg: TrainConfig) -> float:
    """The validation figure that picks the kept weights (``TrainConfig.select``)."""
    if cfg.select == "rank":
        return v["rank"] if v["pairs"] else math.inf
    return v["loss"]


# ------------------------------------------------------------ the run


def train(cfg: TrainConfig = TRAIN, data: str | Path = DEFAULT_DATA, out: str | Path = DEFAULT_OUT,
          log: Callable[[str], None] = print) -> dict:
    """Train (module docstring) and return the figures ``training.json`` holds.
    torch's thread count and deterministic mode are restored afterwards."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        return _train(cfg, data, out, log)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _train(cfg: TrainConfig, data: str | Path, out: str | Path, log: Callable[[str], None]) -> dict:
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    t0 = time.perf_counter()
    out = Path(out)
    device = _device(cfg)
    init = _check_init(cfg, out)
    if cfg.select not in ("loss", "rank"):
        raise ValueError(f"select {cfg.select!r}: expected loss or rank")
    out.mkdir(parents=True, exist_ok=True)

    # 1. seeds and data
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if device.type == "cuda":  # cuBLAS is deterministic only with a fixed workspace, set before its first use
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # On a GPU, an operation without a deterministic kernel warns instead of stopping the run.
    torch.use_deterministic_algorithms(True, warn_only=device.type != "cpu")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    states, source = load_states(data)
    train_states = [s for s in states if s.split == "train"]
    val_states = [s for s in states if s.split == "validation"] or train_states[:cfg.batch_states]
    if not train_states:
        raise ValueError(f"{data}: no state in the train split")
    log(f"data: {source} of {data}: {len(states)} states; train {len(train_states)}, "
        f"validation {len(val_states)}; positives in train: "
        f"{sum(s.positive(cfg.min_speedup) is not None for s in train_states)}")

    # 2-3. the tokenizer (on the training split only) and the model; or the initial model's
    if init is None:
        tok = tk.train_tokenizer(tokenizer_corpus(train_states), cfg.vocab_size)
        config = llama_config(cfg.model, vocab_size=tok.get_vocab_size())
        model = LlamaForCausalLM(config)
        start = "from scratch"
    else:
        from leir_models.lm.store import load_model

        model, tok = load_model(init["dir"])
        config = model.config
        start = f"fine-tuned from {init['name']}, " + (f"LoRA r={cfg.lora_rank}" if cfg.lora_rank else "every weight")
    tk.save(tok, out / "tokenizer.json")
    params = sum(p.numel() for p in model.parameters())
    assert params == parameter_count(config.to_dict()), (params, parameter_count(config.to_dict()))
    if cfg.lora_rank:
        model = _with_lora(model, cfg.lora_rank)
    model.to(device)
    model.train()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    log(f"model: Llama {config.hidden_size} wide, {config.num_hidden_layers} layers, vocabulary "
        f"{config.vocab_size}: {params / 1e6:.2f}M parameters, {sum(p.numel() for _, p in trained) / 1e6:.2f}M "
        f"trained ({start}); {cfg.steps} steps of {cfg.batch_states} states on {device}")

    # 4. AdamW (decay on matrices only) and the schedule
    decay = [p for _, p in trained if p.dim() >= 2]
    no_decay = [p for _, p in trained if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2))

    # 5-6. the loop
    rng = random.Random(cfg.seed)
    order: list[State] = []
    curve, tokens_seen = [], 0
    # The kept weights are those that train (frozen ones never change): all of
    # them from scratch, the adapters alone with LoRA.
    best = {"criterion": math.inf, "loss": math.inf, "step": -1, "weights": None}
    for step in range(cfg.steps):
        if len(order) < cfg.batch_states:
            epoch = train_states[:]
            rng.shuffle(epoch)
            order.extend(epoch)
        batch, order = order[:cfg.batch_states], order[cfg.batch_states:]
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg)
        lm, rank, _, _, ntok = losses(model, batch, tok, cfg)
        loss = lm + cfg.rank_weight * rank
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trained], cfg.grad_clip)
        opt.step()
        tokens_seen += ntok
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            v = evaluate_loss(model, val_states, tok, cfg)
            point = {"step": step + 1, "train_lm": float(lm.detach()), "train_rank": float(rank.detach()),
                     "val_lm": v["lm"], "val_rank": v["rank"], "val_loss": v["loss"],
                     "val_pair_accuracy": v["pair_accuracy"], "tokens": tokens_seen,
                     "seconds": round(time.perf_counter() - t0, 1)}
            curve.append(point)
            acc = "-" if v["pair_accuracy"] is None else f"{v['pair_accuracy']:.2f}"
            log(f"step {step + 1}: train lm {point['train_lm']:.3f} rank {point['train_rank']:.3f}; "
                f"validation lm {v['lm']:.3f} rank {v['rank']:.3f} pairs right {acc}; {tokens_seen} tokens, "
                f"{point['seconds']:.0f} s")
            if _criterion(v, cfg) < best["criterion"]:
                best = {"criterion": _criterion(v, cfg), "loss": v["loss"], "step": step + 1,
                        "weights": {n: p.detach().clone() for n, p in trained}}
    if best["weights"] is not None:
        with torch.no_grad():
            for n, p in trained:
                p.copy_(best["weights"][n])
    if cfg.lora_rank:
        model = model.merge_and_unload()  # a plain LlamaForCausalLM again, the adapters inside its weights

    # 7. the files
    from safetensors.torch import save_model

    model.to("cpu")
    model.eval()
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.to_json_file(str(out / "config.json"))
    seconds = time.perf_counter() - t0
    summary = {
        "format": "leir-lm/1",
        "data": {"dir": str(data), "source": source, "train_states": len(train_states),
                 "validation_states": len(val_states)},
        "init": init,
        "parameters": params, "trained_parameters": sum(p.numel() for _, p in trained),
        "vocab_size": config.vocab_size, "settings": cfg.to_json(), "device": str(device),
        "tokens_seen": tokens_seen, "seconds": round(seconds, 1), "torch_threads": torch.get_num_threads(),
        "best_step": best["step"], "best_val_loss": best["loss"], "curve": curve,
    }
    (out / "training.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(model_card(summary, config.to_dict()), encoding="utf-8")
    if len(curve) >= 1:
        plot_curve(curve, out / "val_loss.png")
    log(f"saved {out}: kept step {best['step']} (best validation {cfg.select}; loss {best['loss']:.3f}); "
        f"{tokens_seen} tokens in {seconds:.0f} s")
    return summary


def _device(cfg: TrainConfig):
    """``cfg.device`` as a torch device; ``ValueError`` when torch cannot use it here."""
    import torch

    try:
        device = torch.device(cfg.device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {cfg.device!r}: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {cfg.device!r}: torch {torch.__version__} sees no CUDA GPU here "
                         "(train on the CPU with --device cpu, or on a machine with a GPU and a CUDA build of torch)")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {cfg.device!r}: expected cpu or cuda")
    return device


def _check_init(cfg: TrainConfig, out: Path) -> dict | None:
    """The initial model (``cfg.init``): its directory, name and ``source.json``
    (a SmolLM2 import's), checked before anything is read or written."""
    from leir_models.lm.store import MODEL_FILES

    if cfg.init is None:
        if cfg.lora_rank:
            raise ValueError("LoRA adapts a trained model: give the model to start from (--init DIR)")
        return None
    if cfg.lora_rank < 0:
        raise ValueError(f"LoRA rank {cfg.lora_rank}: expected 0 (every weight trains) or more")
    if cfg.model:
        raise ValueError("a fine-tune keeps its initial model's shape: --tiny (a model shape) and --init exclude "
                         "each other")
    init = Path(cfg.init)
    absent = [n for n in MODEL_FILES if not (init / n).is_file()]
    if absent:
        raise FileNotFoundError(f"{init} is no model directory (missing {', '.join(absent)}); "
                                "`leir model import-smollm2` writes SmolLM2's")
    if out.resolve() == init.resolve():
        raise ValueError(f"{out}: the fine-tuned model would overwrite the one it starts from; give another --out")
    if cfg.lora_rank:
        import importlib.util

        if importlib.util.find_spec("peft") is None:
            from leir_models.lm.pretrained import INSTALL_LM, PretrainedUnavailable

            raise PretrainedUnavailable(f"LoRA (--lora) needs the peft package; install it with: {INSTALL_LM}")
    try:
        source = json.loads((init / "source.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        source = None
    name = source.get("model") if isinstance(source, dict) and source.get("model") else f"the model in {init}"
    return {"dir": str(init), "name": name, "source": source}


def _with_lora(model, rank: int):
    """``model`` with rank-``rank`` LoRA adapters on ``config.LORA_TARGETS``
    and trainable embedding rows for the special tokens (peft); every other
    weight frozen. The adapters' initialisation draws from torch's seeded
    generator, so the same seed gives the same adapters."""
    from peft import LoraConfig, get_peft_model

    from leir_models.lm.config import LORA_TARGETS, SPECIAL_TOKENS

    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, bias="none", target_modules=list(LORA_TARGETS),
                      trainable_token_indices={"embed_tokens": list(range(len(SPECIAL_TOKENS)))})
    with warnings.catch_warnings():
        # peft 0.21 asks transformers 5.24 for is_gradient_checkpointing, which warns that it is renamed.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora)


def model_card(summary: dict, llama: dict) -> str:
    """``OUT/README.md``: what the model is, what it was trained on, how, and its figures."""
    cfg = summary["settings"]
    last = summary["curve"][-1] if summary["curve"] else {}
    best = next((p for p in summary["curve"] if p["step"] == summary["best_step"]), {})
    acc = best.get("val_pair_accuracy")
    init = summary.get("init")
    if init is None:
        how = f"""A Llama (transformers `LlamaForCausalLM`) trained from scratch with
`leir model train --steps {cfg['steps']} --seed {cfg['seed']}` (models/leir_models/lm/; docs/model.md)."""
    else:
        source = init.get("source") or {}
        origin = (f" (imported from `{source['file']}` of {source.get('wheel')}, sha256 "
                  f"{source.get('gguf_sha256', '?')[:12]}...)" if source.get("file") else "")
        what = (f"with LoRA r={cfg['lora_rank']} (alpha {2 * cfg['lora_rank']}) on every attention and MLP "
                "projection and the special tokens' embedding rows, merged into the weights"
                if cfg.get("lora_rank") else "with every weight trained (a full fine-tune)")
        lora = f" --lora {cfg['lora_rank']}" if cfg.get("lora_rank") else ""
        how = f"""A Llama (transformers `LlamaForCausalLM`) fine-tuned from {init['name']}{origin}
{what}, with `leir model train --init {init['dir']}{lora} --steps {cfg['steps']} --seed {cfg['seed']}`
(models/leir_models/lm/; docs/model.md, "The larger tier")."""
    return f"""# leir-lm: the local model that ranks schedule steps

{how}
It scores every legal candidate step of a LEIR program by its
log-likelihood after a prompt of the program, its tensors, the target and
the machine; it never generates a step.

- Architecture: {llama['hidden_size']} wide, {llama['num_hidden_layers']} layers, {llama['num_attention_heads']} heads,
  MLP {llama['intermediate_size']}, vocabulary {llama['vocab_size']} (byte-level BPE, `tokenizer.json`),
  context {llama['max_position_embeddings']}, tied embeddings: {summary['parameters']:,} parameters.
- Data: {summary['data']['source']} of `{summary['data']['dir']}`: {summary['data']['train_states']} training
  states, {summary['data']['validation_states']} validation states (splits by workload family; held-out
  families never seen).
- Objective: language-model loss on the prompt and on the positive step and its reasoning, plus a pairwise
  ranking loss (weight {cfg['rank_weight']}) making a faster measured step more likely than a slower one
  (pairs {cfg['pair_margin']}x apart or more).
- Training: {cfg['steps']} AdamW steps of {cfg['batch_states']} states, peak learning rate {cfg['learning_rate']},
  cosine to {cfg['min_lr_ratio']}x; {summary['tokens_seen']:,} tokens in {summary['seconds']:.0f} s on
  {summary.get('device', 'cpu')}, {summary['torch_threads']} torch threads.
- Kept: the step of the best validation {'ranking loss' if cfg.get('select') == 'rank' else 'loss'}, {summary['best_step']} ({summary['best_val_loss']:.3f}; LM
  {best.get('val_lm', float('nan')):.3f}, ranking {best.get('val_rank', float('nan')):.3f}, validation pairs
  ordered right {'-' if acc is None else f'{acc:.2f}'}); at the last step the validation loss was
  {last.get('val_loss', float('nan')):.3f}. Curve: `val_loss.png`.

Files: `model.safetensors`, `config.json` (the `LlamaConfig`), `tokenizer.json`, `training.json`; no pickle.
"""


def plot_curve(curve: list[dict], path: Path) -> None:
    """The validation (and training) losses against steps, as a PNG (matplotlib, if installed)."""
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p["step"] for p in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, [p["val_lm"] for p in curve], label="validation LM loss")
    ax.plot(steps, [p["val_rank"] for p in curve], label="validation ranking loss")
    ax.plot(steps, [p["train_lm"] for p in curve], label="training LM loss (one batch)", alpha=0.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)

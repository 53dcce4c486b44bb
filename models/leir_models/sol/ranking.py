"""Ranking under SOL: issue 11's ranking figures with every candidate step
read at the keep the policy gives each of its tokens.

The ranker (``leir_models.lm.ranker``) scores a step by the log-likelihood
of its text after the prompt, all candidates in one pass. Under SOL each
token of that text is decoded at the MLP keep the policy chooses from the
compressed model's own hidden state, one after the other, so here each
measured candidate of a state is read token by token after one dense
prefill of the prompt: ``decode.teacher_forced``, the loop SOL is trained
and evaluated in (its first token is scored by the dense prefill, as a
decoded step's first token is). Its score is the sum of its tokens'
log-probabilities under that schedule.

Modes, per budget target ``t`` (``TARGETS``):

- ``dense``: every token at keep 1 (the reference; it equals
  ``ranker.logprobs``, tested);
- ``static L``: every token at level ``L``, for each level of ``ACTIONS``;
- ``sol t``: the policy's actions, sampled from one seeded generator, as it
  was trained; ``sol greedy t``: its most likely action each token;
- ``static matched t``: per candidate, SOL's own action counts spread
  evenly (``train.interleave``): the same net keep, placed without a policy;
- ``random t``: SOL's own actions of that candidate, shuffled.

Figures per mode, over the states whose measured steps are all still legal
(as ``lm.evaluate`` counts them; ties count as a random order):
``top1_measured`` and ``speedup_top1`` as in ``lm.evaluate``;
``same_top1_as_dense``: the share of states where the mode's best measured
candidate is dense's (the ranking agreement SOL must keep: the issue allows
a 2% loss); ``net_keep``: the MLP FLOPs share over every token read;
``mean_abs_delta``: the mean |score - dense score| per candidate, in nats.

    leir model evaluate-sol [--model DIR] [--policy DIR] [--data DIR] [--split test] [--json]
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

#: The budgets evaluated, as in ``train.SOL_TRAIN.eval_targets``.
TARGETS: tuple[float, ...] = (0.5, 0.7)


def mode_names(targets: Sequence[float] = TARGETS) -> list[str]:
    from leir_models.sol.policy import ACTIONS

    names = ["dense", *(f"static {level:g}" for level in ACTIONS[1:])]
    for t in targets:
        names += [f"sol {t:g}", f"sol greedy {t:g}", f"static matched {t:g}", f"random {t:g}"]
    return names


def candidate_scores(model, policy, prompt: list[int], conts: Sequence[list[int]], targets: Sequence[float],
                     generator) -> dict[str, list[tuple[float, float]]]:
    """Mode name -> (score, net keep) of each continuation in ``conts``
    after ``prompt`` (module doc). ``model`` is prepared (``decode.prepare``)
    with the policy's channel orders; ``policy`` a ``SolPolicy``;
    ``generator`` the ``torch.Generator`` of the sampled actions and shuffles."""
    import torch

    from leir_models.sol import decode
    from leir_models.sol.policy import ACTIONS
    from leir_models.sol.train import interleave

    state = decode.prefill(model, prompt)
    first = torch.log_softmax(state.logits.float(), -1)
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in mode_names(targets)}

    def read(tokens: list[int], schedule=None, **kw) -> tuple[float, float, list[int]]:
        head = float(first[tokens[0]])
        if len(tokens) == 1:
            return head, 1.0, []
        r = decode.teacher_forced(model, state, tokens, schedule, **kw)
        return head + float(r.token_logprobs.sum()), r.net_keep, r.actions

    for tokens in conts:
        tokens = list(tokens)
        steps = len(tokens) - 1
        score, _, _ = read(tokens, [0] * steps)
        out["dense"].append((score, 1.0))
        for a in range(1, len(ACTIONS)):
            out[f"static {ACTIONS[a]:g}"].append(read(tokens, [a] * steps)[:2])
        for t in targets:
            score, keep, actions = read(tokens, policy=policy, target=t, generator=generator)
            out[f"sol {t:g}"].append((score, keep))
            out[f"sol greedy {t:g}"].append(read(tokens, policy=policy, target=t, greedy=True)[:2])
            # (a one-token candidate has no actions: every schedule is empty and reads it as dense)
            spread = interleave([actions.count(a) for a in range(len(ACTIONS))])
            out[f"static matched {t:g}"].append(read(tokens, spread)[:2])
            shuffled = [actions[i] for i in torch.randperm(len(actions), generator=generator).tolist()]
            out[f"random {t:g}"].append(read(tokens, shuffled)[:2])
    return out


def evaluate(model, tokenizer, policy, states: Sequence, targets: Sequence[float] = TARGETS,
             seed: int = 0, log: Callable[[str], None] = lambda line: None) -> dict:
    """The module doc's figures for each mode over ``states``
    (``lm.data.State``s; those with fewer than two measured candidates, or a
    measured step no longer legal, are skipped as ``lm.evaluate`` skips them)."""
    import time

    import torch

    from leir_models.lm import tokenizer as tk
    from leir_models.lm.data import candidate_text
    from leir_models.lm.evaluate import _in_top, _top_speedup, measured_state
    from leir_models.lm.ranker import ModelRanker

    names = mode_names(targets)
    generator = torch.Generator().manual_seed(seed)
    acc = {n: {"top1_measured": 0.0, "log_speedup_top1": 0.0, "same_top1_as_dense": 0.0, "keep_tokens": 0.0,
               "abs_delta": 0.0} for n in names}
    used = skipped = candidates = tokens_read = 0
    log_best = 0.0
    start = time.perf_counter()
    for st in states:
        if len(st.candidates) < 2:
            continue
        found = measured_state(st)
        if found is None:
            skipped += 1
            continue
        analysis, _, _, best = found
        used += 1
        ranker = ModelRanker(model, tokenizer, machine=st.machine or None)
        prompt = ranker.prompt_ids(analysis, st.target)
        conts = [tk.encode(tokenizer, candidate_text(c.step)) for c in st.candidates]
        scored = candidate_scores(model, policy, prompt, conts, targets, generator)
        speedups = [c.speedup for c in st.candidates]
        log_best += math.log(speedups[best])
        dense = [s for s, _ in scored["dense"]]
        dense_top = max(range(len(dense)), key=lambda i: dense[i])
        lengths = [max(len(c) - 1, 0) for c in conts]
        candidates += len(conts)
        tokens_read += sum(lengths)
        for name in names:
            scores = [s for s, _ in scored[name]]
            a = acc[name]
            a["top1_measured"] += _in_top(scores, best, 1)
            a["log_speedup_top1"] += math.log(_top_speedup(scores, speedups))
            a["same_top1_as_dense"] += _in_top(scores, dense_top, 1)
            a["keep_tokens"] += sum(k * n for (_, k), n in zip(scored[name], lengths))
            a["abs_delta"] += sum(abs(s - d) for s, d in zip(scores, dense))
        log(f"{used} states")
    out = {"states": used, "skipped": skipped, "candidates": candidates, "tokens_read": tokens_read,
           "seconds": round(time.perf_counter() - start, 1),
           "speedup_best": round(math.exp(log_best / used), 4) if used else None, "modes": {}}
    for name in names:
        a = acc[name]
        out["modes"][name] = {
            "top1_measured": round(a["top1_measured"] / used, 4) if used else None,
            "speedup_top1": round(math.exp(a["log_speedup_top1"] / used), 4) if used else None,
            "same_top1_as_dense": round(a["same_top1_as_dense"] / used, 4) if used else None,
            "net_keep": round(a["keep_tokens"] / tokens_read, 4) if tokens_read else 1.0,
            "mean_abs_delta": round(a["abs_delta"] / candidates, 4) if candidates else 0.0,
        }
    return out


def report(figures: dict) -> str:
    lines = [f"{figures['states']} states ({figures['skipped']} skipped), {figures['candidates']} measured "
             f"candidates, {figures['tokens_read']} tokens read per mode, {figures['seconds']} s; the measured-best "
             f"step's speedup {figures['speedup_best']}x (geometric mean)",
             "| mode | net keep | top-1 among measured | speedup of its top-1 | same top-1 as dense | "
             "mean abs. score change (nats) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in figures["modes"].items():
        lines.append(f"| {name} | {r['net_keep']:.3f} | {r['top1_measured']:.3f} | {r['speedup_top1']:.3f}x | "
                     f"{r['same_top1_as_dense']:.3f} | {r['mean_abs_delta']:.3f} |")
    return "\n".join(lines)


def run(args) -> int:
    """``leir model evaluate-sol``: load, evaluate, print (``--json``: the figures)."""
    import json
    from pathlib import Path

    import torch

    from leir_models.lm.data import load_states
    from leir_models.lm.ranker import default_dir
    from leir_models.lm.store import load_model
    from leir_models.sol import decode
    from leir_models.sol.policy import load_policy

    if args.states < 0:
        raise ValueError(f"--states {args.states}: expected 0 (all) or more")
    targets = tuple(float(t) for t in args.targets.split(","))
    if not all(0.0 < t <= 1.0 for t in targets):
        raise ValueError(f"--targets {args.targets}: each budget is a net keep in (0, 1]")
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model) if args.model else default_dir()
    policy_dir = Path(args.policy) if args.policy else model_dir / "sol"
    for what, path in (("model", model_dir), ("policy", policy_dir)):
        if not path.is_dir():
            raise FileNotFoundError(f"no {what} directory {path}")
    model, tok = load_model(model_dir)
    policy, orders = load_policy(policy_dir)
    decode.prepare(model, orders)
    states, _ = load_states(args.data)
    if args.split != "all":
        states = [s for s in states if s.split == args.split]
    if args.states:
        states = states[:args.states]
    figures = evaluate(model, tok, policy, states, targets, seed=args.seed)
    figures.update(model=str(model_dir), policy=str(policy_dir), split=args.split, targets=list(targets),
                   seed=args.seed, threads=args.threads)
    print(json.dumps(figures, indent=1) if args.json else report(figures))
    return 0


def add_arguments(p) -> None:
    from leir_models.lm.train import DEFAULT_DATA

    p.add_argument("--model", metavar="DIR", help="a trained model directory (default: the shipped one)")
    p.add_argument("--policy", metavar="DIR", help="its SOL policy (default: MODEL/sol)")
    p.add_argument("--data", default=DEFAULT_DATA, metavar="DIR")
    p.add_argument("--split", default="test", choices=["train", "validation", "test", "heldout", "all"])
    p.add_argument("--states", type=int, default=0, metavar="N", help="the first N states only (0: all)")
    p.add_argument("--targets", default=",".join(f"{t:g}" for t in TARGETS), help="budgets, comma-separated")
    p.add_argument("--seed", type=int, default=0, help="the generator of SOL's sampled actions and the shuffles")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")

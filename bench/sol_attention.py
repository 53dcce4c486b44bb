"""Does the attention keep fraction (Quest's KV pages, gathered) really save
time, from what context length, and what does it cost in quality?
Batch 1, one thread, single-token decoding (docs/sol.md, "Attention: KV
pages (Quest)").

``attention``: per-token attention time summed over the layers, for the
shipped model's attention shape (6 layers, 4 heads, 4 kv heads, head dim
64) and SmolLM2-135M's (30 layers, 9 heads, 3 kv heads, head dim 64), at
each context length, random keys and values: transformers' SDPA as the
model runs it ("dense"), one SDPA per kv head over the whole cache with its
query heads as rows ("dense packed": what the gathered path runs, on
everything), and ``kv_pages_attention`` at keep 0.5 and 0.25 (bound,
selection, gather, attention over the kept positions). The upkeep of the
page extremes (one page every 8 tokens) is timed apart and added,
amortized, to the kept rows.

``decode``: whole decode steps (``decode.run_tokens``, the model's every
layer, the head) at each context, dense and at keep 0.5 / 0.25: the shipped
model (its weights; contexts up to its 1,024 positions) and a SmolLM2-135M-
shaped model with random weights, its cache filled with random keys and
values (a 4,096-token prefill of 135M parameters would take minutes here).

``quality``: held-out perplexity of the shipped model, as ``train.evaluate``
computes it (the last 2 episodes of 16 tokens of the first 48 held-out
sequences, each after a dense prefill; teacher-forced), dense against
attention keep 0.5 and 0.25 (engaged wherever a page can be dropped,
``min_context`` 0), keep 0.5 with random pages and with the most recent
pages instead of Quest's (controls: the same number of positions read),
and the shipped SOL policy (MLP actions, sampled, target 0.5) without and
with attention keep 0.5; once on those sequences and once on the 48
longest held-out ones.

``breakdown``: the kept path at keep 0.5 (SmolLM2's shape) in its parts.

    python bench/sol_attention.py [--parts attention,breakdown,decode,quality] [--repeats N]
                                  [--lengths 128,256,...] [--json FILE]

Medians; the load average is printed before and after each part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import torch

from leir_models.sol import attention as at
from leir_models.sol import decode

SHAPES = {"shipped": {"layers": 6, "heads": 4, "kv_heads": 4, "head_dim": 64},
          "smollm2-135m": {"layers": 30, "heads": 9, "kv_heads": 3, "head_dim": 64}}
LENGTHS = (128, 256, 512, 1024, 2048, 4096)
KEEPS = (0.5, 0.25)
SHIPPED = "models/leir_models/lm/data"


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(runs: dict, repeats: int) -> dict:
    """Median seconds of each of ``runs`` (name -> callable), the runs
    taking turns so that a change of load touches them alike."""
    for fn in runs.values():
        fn()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


class Layer:
    """What transformers' attention functions read of an attention module."""

    is_causal, training = True, False

    def __init__(self, index: int, groups: int):
        self.layer_idx, self.num_key_value_groups = index, groups


# ------------------------------------------------------------ attention alone


@torch.no_grad()
def attention_times(shape: dict, length: int, repeats: int) -> dict:
    g = torch.Generator().manual_seed(length)
    layers, heads, kv_heads, hd = shape["layers"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    modules = [Layer(i, heads // kv_heads) for i in range(layers)]
    keys = [torch.randn(1, kv_heads, length, hd, generator=g) for _ in range(layers)]
    values = [torch.randn(1, kv_heads, length, hd, generator=g) for _ in range(layers)]
    query = torch.randn(1, heads, 1, hd, generator=g)
    scale = hd ** -0.5
    pages = {keep: at.KVPages(at.AttentionKeep(keep, min_context=0)) for keep in KEEPS}

    def dense():
        for m, k, v in zip(modules, keys, values):
            at.kv_pages_attention(m, query, k, v, None, scaling=scale)

    def packed():
        for k, v in zip(keys, values):
            at.attend(query, k, v, scale)

    def kept(p):
        def run():
            for m, k, v in zip(modules, keys, values):
                at.kv_pages_attention(m, query, k, v, None, scaling=scale, kv_pages=p)
        return run

    runs = {"dense": dense, "dense packed": packed, **{f"keep {keep:g}": kept(p) for keep, p in pages.items()}}
    out = interleaved(runs, repeats)
    # upkeep: one page's extremes in every layer, once per PAGE_SIZE tokens
    p = pages[KEEPS[0]]

    def one_page():
        for i, k in enumerate(keys):
            bounds = p.layer(i)
            bounds.extremes = bounds.extremes[:, :, :-1]
            bounds.observe(k, 1)

    upkeep = statistics.median(timed(one_page) for _ in range(repeats)) / at.PAGE_SIZE
    for keep, pk in pages.items():
        out[f"keep {keep:g}"] += upkeep
        out[f"keys read {keep:g}"] = sum(pk.reads.values()) / (length * layers)
    out["upkeep"] = upkeep
    return out


def attention_part(lengths, repeats: int) -> dict:
    result = {}
    for name, shape in SHAPES.items():
        print(f"\n{name} attention shape: {shape['layers']} layers, {shape['heads']} heads, {shape['kv_heads']} kv "
              f"heads, head dim {shape['head_dim']}; per token, all layers, median of {repeats} (load {load()})")
        print(f"{'context':>8} {'dense':>9} {'packed':>15} " + " ".join(f"{'keep ' + format(k, 'g'):>22}" for k in KEEPS)
              + f" {'upkeep':>9}")
        rows = result[name] = {}
        for length in lengths:
            r = rows[length] = attention_times(shape, length, repeats)
            cells = [f"{r['dense'] * 1e3:7.3f}ms", f"{r['dense packed'] * 1e3:7.3f}ms ({r['dense'] / r['dense packed']:4.2f}x)"]
            cells += [f"{r[f'keep {k:g}'] * 1e3:7.3f}ms ({r['dense'] / r[f'keep {k:g}']:4.2f}x, {r[f'keys read {k:g}']:.2f})"
                      for k in KEEPS]
            print(f"{length:>8} {cells[0]:>9} {cells[1]:>15} " + " ".join(f"{c:>22}" for c in cells[2:])
                  + f" {r['upkeep'] * 1e3:7.3f}ms")
        print(f"(load {load()}; keep cells: time (dense / time, share of keys read))")
    return result


@torch.no_grad()
def breakdown_part(lengths, repeats: int, keep: float = 0.5, shape: str = "smollm2-135m") -> dict:
    """Where the kept path's time goes, per token over all layers: the bound
    and selection, the rows, the gather, the attention over the gathered
    positions, against the attention over the whole cache (packed)."""
    s = SHAPES[shape]
    layers, heads, kv_heads, hd = s["layers"], s["heads"], s["kv_heads"], s["head_dim"]
    print(f"\n{shape}, keep {keep:g}: the kept path in parts, per token, all layers, median of {repeats} "
          f"(load {load()})")
    print(f"{'context':>8} {'bound+select':>13} {'rows':>8} {'gather':>9} {'attend kept':>12} {'sum':>9} "
          f"{'attend all':>11}")
    result = {}
    for length in lengths:
        g = torch.Generator().manual_seed(length)
        keys = [torch.randn(1, kv_heads, length, hd, generator=g) for _ in range(layers)]
        values = [torch.randn(1, kv_heads, length, hd, generator=g) for _ in range(layers)]
        query = torch.randn(1, heads, 1, hd, generator=g)
        pages = at.KVPages(at.AttentionKeep(keep, min_context=0))
        extremes = [pages.layer(i).observe(k, length) for i, k in enumerate(keys)]
        layout = pages.layout(keys[0])
        n = layout.candidates
        chosen = [at.select_pages(at.page_scores(query, e.narrow(2, 0, n)), keep) for e in extremes]
        rows = [layout.rows(c) for c in chosen]
        scratch = pages.scratch_for(rows[0].numel(), keys[0])
        gathered = [at.gather_kv(k, v, r) for k, v, r in zip(keys, values, rows)]
        runs = {"bound+select": lambda: [at.select_pages(at.page_scores(query, e.narrow(2, 0, n)), keep)
                                         for e in extremes],
                "rows": lambda: [layout.rows(c) for c in chosen],
                "gather": lambda: [at.gather_kv(k, v, r, scratch) for k, v, r in zip(keys, values, rows)],
                "attend kept": lambda: [at.attend(query, k, v, hd ** -0.5) for k, v in gathered],
                "attend all": lambda: [at.attend(query, k, v, hd ** -0.5) for k, v in zip(keys, values)]}
        r = result[length] = interleaved(runs, repeats)
        parts = ("bound+select", "rows", "gather", "attend kept")
        r["sum"] = sum(r[p] for p in parts)
        print(f"{length:>8} " + " ".join(f"{r[p] * 1e3:{w}.3f}ms" for p, w in
                                          zip((*parts, "sum", "attend all"), (11, 6, 7, 10, 7, 9))))
    print(f"(load {load()})")
    return result


# ------------------------------------------------------------ whole decode steps


def smollm2_config():
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                       num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                       rope_theta=100000.0, tie_word_embeddings=True, attn_implementation="sdpa")


@torch.no_grad()
def step_times(model, length: int, repeats: int, cache_from_prefill: bool) -> dict:
    """One decode step at context ``length``: median seconds dense and at each keep."""
    from transformers import DynamicCache

    cfg = model.config
    g = torch.Generator().manual_seed(length)
    if cache_from_prefill:
        ids = torch.randint(3, cfg.vocab_size, (length,), generator=g).tolist()
        cache = decode.prefill(model, ids).cache
    else:
        cache = DynamicCache(config=cfg)
        hd = cfg.head_dim
        for i in range(cfg.num_hidden_layers):
            cache.update(torch.randn(1, cfg.num_key_value_heads, length, hd, generator=g),
                         torch.randn(1, cfg.num_key_value_heads, length, hd, generator=g), i)
    pages = {keep: at.KVPages(at.AttentionKeep(keep, min_context=0)) for keep in KEEPS}

    def step(p):
        def run():
            decode.run_tokens(model, [5], length, cache, 1.0, p)
            cache.crop(-1)
        return run

    out = interleaved({"dense": step(None), **{f"keep {k:g}": step(p) for k, p in pages.items()}}, repeats)
    for k, p in pages.items():
        out[f"keys read {k:g}"] = sum(p.reads.values()) / ((length + 1) * len(p.reads))
    return out


def decode_part(lengths, repeats: int) -> dict:
    from transformers import LlamaForCausalLM

    from leir_models.lm.store import load_model

    shipped, _ = load_model(SHIPPED)
    torch.manual_seed(0)
    smol = LlamaForCausalLM(smollm2_config()).eval()
    result = {}
    for name, model, ctx, prefilled in (("shipped", shipped, [n for n in lengths if n < 1024] + [1000], True),
                                        ("smollm2-135m (random weights, random cache)", smol, lengths, False)):
        decode.prepare(model)
        at.install(model)
        print(f"\n{name}: one decode step (all layers and the head), median of {repeats} (load {load()})")
        print(f"{'context':>8} {'dense':>10} " + " ".join(f"{'keep ' + format(k, 'g'):>24}" for k in KEEPS))
        rows = result[name] = {}
        for length in ctx:
            r = rows[length] = step_times(model, length, repeats, prefilled)
            cells = [f"{r[f'keep {k:g}'] * 1e3:8.2f}ms ({r['dense'] / r[f'keep {k:g}']:4.2f}x, {r[f'keys read {k:g}']:.2f})"
                     for k in KEEPS]
            print(f"{length:>8} {r['dense'] * 1e3:8.2f}ms " + " ".join(f"{c:>24}" for c in cells))
        print(f"(load {load()})")
    return result


# ------------------------------------------------------------ quality


class Selection:
    """Controls for Quest's choice at the same keep: while active,
    ``attention.select_pages`` keeps random candidate pages (seeded) or the
    most recent ones (a sliding window after the sinks) instead of those of
    highest bound; the count kept is the same."""

    def __init__(self, kind: str):
        self.kind, self.generator = kind, torch.Generator().manual_seed(0)

    def select(self, scores, keep):
        k = at.kept_pages(scores.shape[-1], keep)
        if self.kind == "recent":
            n = scores.shape[-1]
            return torch.arange(n - k, n).expand(*scores.shape[:-1], k)
        return torch.rand(scores.shape, generator=self.generator).topk(k, dim=-1).indices

    def __enter__(self):
        self.saved, at.select_pages = at.select_pages, self.select
        return self

    def __exit__(self, *exc):
        at.select_pages = self.saved


@torch.no_grad()
def quality_part(sequences: int = 48, episodes: int = 2, episode: int = 16) -> dict:
    from leir_models.lm.data import load_records
    from leir_models.lm.store import load_model
    from leir_models.lm.train import DEFAULT_DATA
    from leir_models.sol.policy import load_policy
    from leir_models.sol.train import _episode_states, sequences as texts

    model, tok = load_model(SHIPPED)
    policy, orders = load_policy(f"{SHIPPED}/sol")
    decode.prepare(model, orders)  # the policy's channel order: the dense logits do not change
    at.install(model)
    records, _ = load_records(DEFAULT_DATA)
    held = [s for s in texts(records, tok, "heldout", model.config.max_position_embeddings)
            if len(s) >= 32 + episodes * episode + 1]
    subsets = {"first 48 (train.evaluate's)": held[:sequences],
               "48 longest": sorted(held, key=len, reverse=True)[:sequences]}
    half = at.AttentionKeep(0.5, min_context=0)
    configs = {"dense": {}, "attention 0.5": {"attention_keep": half},
               "attention 0.5, random pages": {"attention_keep": half, "selection": "random"},
               "attention 0.5, most recent pages": {"attention_keep": half, "selection": "recent"},
               "attention 0.25": {"attention_keep": at.AttentionKeep(0.25, min_context=0)},
               "SOL 0.5 (MLP)": {"policy": policy, "target": 0.5},
               "SOL 0.5 (MLP) + attention 0.5": {"policy": policy, "target": 0.5,
                                                 "attention_keep": at.AttentionKeep(0.5, min_context=0)}}
    result = {}
    for name, seqs in subsets.items():
        started = time.perf_counter()
        contexts = []
        total = {c: 0.0 for c in configs}
        read = {c: 0.0 for c in configs}
        tokens = 0
        generator = torch.Generator().manual_seed(1)
        for ids in seqs:
            for state, toks in _episode_states(model, ids, episodes, episode):
                contexts.append(state.length)
                for c, kw in configs.items():
                    kw = dict(kw)
                    selection = kw.pop("selection", None)
                    if "policy" in kw:
                        kw["generator"] = generator
                    else:
                        kw["schedule"] = [0] * episode
                    if selection:
                        with Selection(selection):
                            r = decode.teacher_forced(model, state, toks, **kw)
                    else:
                        r = decode.teacher_forced(model, state, toks, **kw)
                    total[c] += float(r.token_logprobs.sum())
                    read[c] += r.extra["keys_read"] * episode
                tokens += episode
        rows = {c: {"perplexity": math.exp(-total[c] / tokens), "keys_read": read[c] / tokens} for c in configs}
        lengths = sorted(contexts)
        result[name] = {"sequences": len(seqs), "tokens": tokens, "seconds": round(time.perf_counter() - started, 1),
                        "context": {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1] + episode},
                        "rows": rows}
        dense = rows["dense"]["perplexity"]
        print(f"\nheld-out perplexity, {name}: {len(seqs)} sequences, {tokens} tokens scored, context at the "
              f"episodes' start {lengths[0]}..{lengths[-1]} (median {lengths[len(lengths) // 2]}) (load {load()})")
        for c, row in rows.items():
            print(f"  {c:<32} {row['perplexity']:8.3f} ({row['perplexity'] / dense - 1:+.2%})  keys read "
                  f"{row['keys_read']:.3f}")
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="attention,breakdown,decode,quality")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    lengths = [int(n) for n in args.lengths.split(",")]
    parts = args.parts.split(",")
    out = {"load_before": os.getloadavg()}
    if "attention" in parts:
        out["attention"] = attention_part(lengths, args.repeats)
    if "breakdown" in parts:
        out["breakdown"] = breakdown_part([n for n in lengths if n >= 1024] or lengths, args.repeats)
    if "decode" in parts:
        out["decode"] = decode_part(lengths, max(3, args.repeats // 3))
    if "quality" in parts:
        out["quality"] = quality_part()
    out["load_after"] = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): {load()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The local model's latency on this machine (docs/model.md, "Latency on this
machine"): the time to load the installed ranker, and the time to the first
ranked suggestion of each bundled example after that.

For every ``examples/*.leir``, after one warm-up call, the median of
``--repeats`` calls of

- ``suggest``: ``leir.tools.suggest.suggest(text, "leir", ranker=R,
  explain_top=0)``, what ``leir suggest FILE --ranker model`` computes
  (parse, check, list and rank every step of the program; no reasoning);
- ``rank``: ``leir.tools.ranking.rank(analysis, ranker=R)`` on the analysis
  already made (the ranking alone);

for ``R`` the installed model ranker (``load_ranker("model")``: the model
on the heuristic's first ``ranker.SHORTLIST`` steps), the same model
ordering every step (``shortlist=None``, as before the shortlist) and the
heuristic; each model call with an empty ``PromptCache`` (a cold prompt).
Then, for the installed ranker, ``rank`` of the program after the
heuristic's first step and of the program before it, alternately, the
prompt cache kept (``after_a_step_ms``: what a search's next state, or an
edit near the program's end, costs; ``common_prefix``: the prompt tokens
the two share). Prints one JSON object: the load time, the peak resident memory,
per example the candidates, the prompt's tokens and the medians in ms, the
load average read before each example.

    python bench/model_latency.py [--examples gqa_attention,matmul] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class Cold:
    """A model ranker whose prompt cache is emptied before every ranking."""

    def __init__(self, ranker):
        self.ranker = ranker

    def score(self, ctx, steps, target):
        from leir_models.lm.ranker import PromptCache

        self.ranker.prompt_cache = PromptCache()
        return self.ranker.score(ctx, steps, target)

    def __getattr__(self, name):
        return getattr(self.ranker, name)


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", help="comma-separated names in examples/ (default: every .leir file)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    start = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    from leir.tools.ranking import HEURISTIC, load_ranker_telling

    said: list[str] = []
    ranker = load_ranker_telling("model", said.append)
    load_s = time.perf_counter() - start
    if ranker is HEURISTIC:
        raise SystemExit(f"the model ranker did not load: {'; '.join(said) or 'no reason given'}")
    from leir.bridge.document import load_leir
    from leir.printer import print_program
    from leir.tools.ranking import rank
    from leir.transforms import apply
    from leir.tools.suggest import suggest
    from leir_models.lm.ranker import ModelRanker, common_prefix

    whole = ModelRanker(ranker.model, ranker.tokenizer, shortlist=None)
    rankers = {f"model (shortlist {ranker.shortlist})": ranker, "model (every step)": whole,
               "heuristic": HEURISTIC}
    names = args.examples.split(",") if args.examples else sorted(p.stem for p in (ROOT / "examples").glob("*.leir"))
    rows = []
    for name in names:
        text = (ROOT / "examples" / f"{name}.leir").read_text(encoding="utf-8")
        analysis = load_leir(text).analysis
        target = "cuda" if name.endswith("_gpu") else "llvm"
        row = {"example": name, "target": target, "loadavg": loadavg(),
               "candidates": len(rank(analysis, target)),
               "prompt_tokens": len(ranker.prompt_ids(analysis, target))}
        for label, r in rankers.items():
            if hasattr(r, "prompt_cache"):
                r = Cold(r)
            row[label] = {
                "suggest_ms": round(median_ms(lambda r=r: suggest(text, "leir", target=target, ranker=r,
                                                                   explain_top=0), args.repeats), 1),
                "rank_ms": round(median_ms(lambda r=r: rank(analysis, target, r), args.repeats), 1)}
        changed = load_leir(print_program(apply(analysis.program, rank(analysis, target)[0].step))).analysis
        a, b = ranker.prompt_ids(analysis, target), ranker.prompt_ids(changed, target)
        row["common_prefix"] = common_prefix(a, b)
        states, flip = [analysis, changed], [0]

        def next_state():
            flip[0] ^= 1
            return states[flip[0]]

        row["after_a_step_ms"] = round(median_ms(lambda: rank(next_state(), target, ranker), args.repeats), 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    out = {"threads": args.threads, "repeats": args.repeats, "load_s": round(load_s, 2),
           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "examples": rows}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Ranking quality: agreement with the measured-best step, per state of a split.

For each state (a program with two or more measured candidates) of the split
(``heldout`` by default: families never seen in training), every legal
candidate is listed (``leir.transforms.candidates``, every transformation but
``bind`` off CUDA, as ``leir.tools.ranking.rank`` lists them for the search)
and scored by each ranker. Figures, per ranker:

- ``top1_measured``: the ranker's best among the *measured* candidates is the
  measured-fastest (chance: 1 / candidates measured, 1/3 in the committed
  sample);
- ``top1_legal``, ``top3_legal``: the measured-fastest is the ranker's first,
  or among its first three, of *all* legal candidates;
- ``speedup_top1``: geometric mean of the measured speedup of the ranker's
  best measured candidate (``speedup_best``: of the measured-fastest).

Ties count as a random order among the tied (a heuristic scores many steps
alike): a tie of ``e`` steps at the best's score behind ``g`` better ones
puts the best in the first ``k`` with probability ``clip((k - g) / e, 0, 1)``.
The heuristic scores the steps it does not rank (operator, algebraic and
algorithmic rewrites) 0, as ``leir.tools.suggest`` does. The model reads
the machine facts of the state (the machine it was measured on).

    leir model evaluate [--model DIR] [--data DIR] [--split heldout] [--json]
"""

from __future__ import annotations

import math
from typing import Sequence

from leir_models.lm.data import State


class HeuristicAll:
    """``leir.tools.ranking.HEURISTIC`` on the searched steps, 0 on the others."""

    name = "heuristic"

    def score(self, ctx, steps: Sequence, target: str):
        from leir.tools.ranking import HEURISTIC, SEARCHED

        searched = [s for s in steps if s.id in SEARCHED]
        scored = iter(HEURISTIC.score(ctx, searched, target))
        return [next(scored) if s.id in SEARCHED else (0.0, ()) for s in steps]


def _in_top(scores: list[float], best: int, k: int) -> float:
    s = scores[best]
    better = sum(x > s for x in scores)
    equal = sum(x == s for x in scores)
    return min(1.0, max(0.0, (k - better) / equal))


def _top_speedup(scores: list[float], speedups: list[float]) -> float:
    top = max(scores)
    tied = [sp for sc, sp in zip(scores, speedups) if sc == top]
    return math.exp(sum(math.log(sp) for sp in tied) / len(tied))


def legal_steps(analysis, target: str) -> list:
    from leir import transforms
    from leir.transforms.base import Context

    only = tuple(t.ID for t in transforms.ALL if target == "cuda" or t.ID != "bind")
    return [c.step for c in transforms.candidates(Context.of(analysis), None, only=only)]


def measured_state(st: State):
    """(analysis, legal steps, measured steps, index of the measured-fastest)
    of a state, or None when one of its measured steps is not among the
    legal ones (the catalogue no longer offers it there). The caller skips
    states with fewer than two measured candidates first."""
    from leir.bridge.document import load_leir
    from leir.transforms.base import Step

    analysis = load_leir(st.before).analysis
    legal = legal_steps(analysis, st.target)
    offered = set(legal)
    measured = [Step(c.step["id"], c.step["args"]) for c in st.candidates]
    if any(m not in offered for m in measured):
        return None
    best = min(range(len(st.candidates)), key=lambda i: st.candidates[i].latency_ms)
    return analysis, legal, measured, best


def evaluate(rankers: dict, states: list[State], log=lambda line: None) -> dict:
    """The figures of the module docstring for each ranker (name -> Ranker)."""
    from leir.transforms.base import Context

    acc = {name: {"top1_measured": 0.0, "top1_legal": 0.0, "top3_legal": 0.0, "log_speedup_top1": 0.0}
           for name in rankers}
    used = skipped = 0
    log_best = 0.0
    legal_counts = []
    for st in states:
        if len(st.candidates) < 2:
            continue
        found = measured_state(st)
        if found is None:
            skipped += 1  # a measured step the catalogue no longer offers here
            continue
        analysis, legal, measured, best = found
        ctx = Context.of(analysis)
        index = {s: i for i, s in enumerate(legal)}
        used += 1
        legal_counts.append(len(legal))
        speedups = [c.speedup for c in st.candidates]
        log_best += math.log(speedups[best])
        for name, ranker in rankers.items():
            if hasattr(ranker, "machine"):
                ranker.machine = st.machine or None  # the machine the state was measured on
            scores = [s for s, _ in ranker.score(ctx, legal, st.target)]
            mine = [scores[index[m]] for m in measured]
            a = acc[name]
            a["top1_measured"] += _in_top(mine, best, 1)
            a["top1_legal"] += _in_top(scores, index[measured[best]], 1)
            a["top3_legal"] += _in_top(scores, index[measured[best]], 3)
            a["log_speedup_top1"] += math.log(_top_speedup(mine, speedups))
        log(f"{used} states")
    out = {"states": used, "skipped": skipped,
           "measured_per_state": (sum(len(s.candidates) for s in states if len(s.candidates) >= 2) / used
                                  if used else 0),
           "legal_per_state": sum(legal_counts) / used if used else 0,
           "speedup_best": math.exp(log_best / used) if used else None, "rankers": {}}
    for name, a in acc.items():
        out["rankers"][name] = {
            "top1_measured": a["top1_measured"] / used if used else None,
            "top1_legal": a["top1_legal"] / used if used else None,
            "top3_legal": a["top3_legal"] / used if used else None,
            "speedup_top1": math.exp(a["log_speedup_top1"] / used) if used else None,
        }
    return out


def report(figures: dict) -> str:
    lines = [f"{figures['states']} states ({figures['skipped']} skipped), "
             f"{figures['measured_per_state']:.1f} measured and {figures['legal_per_state']:.0f} legal candidates "
             f"per state; the measured-best step's speedup: {figures['speedup_best']:.3f}x (geometric mean)"]
    for name, r in figures["rankers"].items():
        lines.append(f"  {name:10} top-1 among measured {r['top1_measured']:.3f}, top-1 of legal "
                     f"{r['top1_legal']:.3f}, top-3 of legal {r['top3_legal']:.3f}, "
                     f"speedup of its top-1 measured {r['speedup_top1']:.3f}x")
    return "\n".join(lines)

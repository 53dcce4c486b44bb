"""Reasoning the model writes for one step, kept only where it checks.

The model was trained on the prompt, the step, ``<|reason|>``, the
reasoning ``leir.explain`` wrote for it and ``<|eos|>`` (``data.target_text``).
``generate`` reads the prompt and the chosen step up to ``<|reason|>`` and
decodes greedily, one token at a time on the key/value cache, until
``<|eos|>``, ``max_tokens`` or the context's end. What it wrote is then held
against the facts of that step on that program
(``leir.explain.grounding.check``): each sentence whose numbers, names or
claims the facts do not bear out is dropped and counted. Nothing generated
is ever run or evaluated.

The facts are those of the step *before* it is measured (``measured=None``):
a sentence about the step's measured latency is dropped, since the latency
was not measured when the reasoning was written. The editor shows what is
kept as "predicted" until the step is measured.

    leir model reasoning --model DIR [--data DIR] [--split heldout] [--max-tokens N] [--json]
    = python -m leir_models.lm.reasoning evaluate --model DIR ...

generates the reasoning of each state's positive step of a split and
reports the share of the sentences that check, and tokens per second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leir.explain.grounding import GroundingResult, StepFacts, check, step_facts
from leir_models.lm import tokenizer as tk
from leir_models.lm.data import candidate_text, prompt_text, state_of_analysis

#: Tokens generated at most: the committed sample's longest reasoning is
#: 285 tokens, its mean 124 (docs/model.md).
MAX_TOKENS = 320

#: Special tokens reasoning never contains (never chosen when it is decoded,
#: here and by ``leir_models.sol``).
NEVER = (tk.PAD_ID, tk.BOS_ID, tk.STEP_ID, tk.REASON_ID)


@dataclass
class Generated:
    """One generation and what of it checked."""

    #: The sentences that check, joined.
    text: str
    #: What the model wrote, whole.
    raw: str
    grounding: GroundingResult
    #: Tokens generated (``<|eos|>`` not counted).
    tokens: int
    #: Why decoding stopped: "eos", "max_tokens" or "context".
    stopped: str
    #: Wall time of the generation (the prompt's forward pass and the decoding).
    seconds: float
    #: Of which reading the prompt.
    prompt_seconds: float = 0.0

    @property
    def dropped(self) -> int:
        return len(self.grounding.dropped)

    @property
    def total(self) -> int:
        return self.grounding.total

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of the whole generation (prompt included)."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "raw": self.raw, "dropped": self.dropped, "total": self.total,
                "tokens": self.tokens, "stopped": self.stopped, "seconds": round(self.seconds, 4),
                "tokens_per_s": round(self.tokens_per_s, 1), "grounding": self.grounding.to_json()}


def decode_greedy(model, prompt_ids: list[int], max_tokens: int = MAX_TOKENS) -> tuple[list[int], str, float, float]:
    """(generated ids, why it stopped, seconds, of which the prompt's):
    the most likely token each time, after the prompt's key/value cache,
    until ``<|eos|>``, ``max_tokens`` or the model's context is full. The
    special tokens other than ``<|eos|>`` never occur in reasoning and are
    never chosen."""
    import torch

    limit = model.config.max_position_embeddings
    out: list[int] = []
    start = time.perf_counter()
    with torch.no_grad():
        step = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        prompt_seconds = time.perf_counter() - start
        stopped = "max_tokens"
        while len(out) < max_tokens:
            logits = step.logits[0, -1].float()
            logits[list(NEVER)] = -math.inf
            nxt = int(logits.argmax())
            if nxt == tk.EOS_ID:
                stopped = "eos"
                break
            out.append(nxt)
            if len(prompt_ids) + len(out) >= limit:
                stopped = "context"
                break
            if len(out) == max_tokens:
                break
            step = model(input_ids=torch.tensor([[nxt]]), cache=step.cache, use_cache=True,
                         position_ids=torch.tensor([[len(prompt_ids) + len(out) - 1]]))
    return out, stopped, time.perf_counter() - start, prompt_seconds


def prompt_ids(tokenizer, model, fields: dict[str, Any], step: dict[str, Any], max_tokens: int) -> list[int]:
    """``<|bos|>``, the prompt (cut from the left when long, as the ranker
    cuts it), the step and ``<|reason|>``."""
    prompt = tk.encode_prompt(tokenizer, prompt_text(**fields))
    cont = tk.encode(tokenizer, candidate_text(step))
    room = model.config.max_position_embeddings - len(cont) - min(max_tokens, 64)
    if len(prompt) > room:
        prompt = prompt[:1] + prompt[len(prompt) - room + 1:]
    return prompt + cont


def generate(model, tokenizer, fields: dict[str, Any], step: dict[str, Any], facts: StepFacts,
             max_tokens: int = MAX_TOKENS) -> Generated:
    """The model's reasoning for ``step`` after the prompt of ``fields``
    (``data.state_of_analysis``'s: program, tensors, target, machine),
    checked against ``facts``."""
    return decode_checked(model, tokenizer, prompt_ids(tokenizer, model, fields, step, max_tokens), facts, max_tokens)


def decode_checked(model, tokenizer, ids: list[int], facts: StepFacts, max_tokens: int = MAX_TOKENS) -> Generated:
    """``decode_greedy`` after ``ids``, what it wrote checked against ``facts``."""
    out, stopped, seconds, prompt_seconds = decode_greedy(model, ids, max_tokens)
    raw = tk.decode(tokenizer, out)
    grounding = check(raw, facts)
    return Generated(grounding.text, raw, grounding, len(out), stopped, seconds, prompt_seconds)


def _step_json(step) -> dict[str, Any]:
    return step.to_json() if hasattr(step, "to_json") else {"id": step["id"], "args": step.get("args", {})}


def prompt_and_facts(tokenizer, model, analysis, step, target: str, machine: dict[str, Any] | None = None,
                     max_tokens: int = MAX_TOKENS) -> tuple[list[int], StepFacts]:
    """What decoding ``step``'s reasoning on the program of ``analysis``
    starts from and is checked against: the ids up to ``<|reason|>``
    (``prompt_ids``) and the step's facts before it is measured, on
    ``machine`` (this one by default; none on "cuda"). Raises
    ``TransformError``/``ValueError`` when the step's facts cannot be
    computed. Shared by ``explain`` and the SOL decoding of the same
    reasoning (``leir_models.sol.reasoning``)."""
    fields = state_of_analysis(analysis, target, machine)
    facts = step_facts(analysis, None, step, target=target, machine=fields["machine"] if target != "cuda" else None)
    return prompt_ids(tokenizer, model, fields, _step_json(step), max_tokens), facts


def explain(model, tokenizer, analysis, step, target: str, machine: dict[str, Any] | None = None,
            max_tokens: int = MAX_TOKENS) -> Generated:
    """Reasoning for ``step`` on the program of ``analysis`` (a
    ``leir.semantics.Analysis``), checked against the facts
    ``leir.explain`` computes for it on ``machine`` (this one by default)."""
    ids, facts = prompt_and_facts(tokenizer, model, analysis, step, target, machine, max_tokens)
    return decode_checked(model, tokenizer, ids, facts, max_tokens)


# ------------------------------------------------------------ the figure


@dataclass
class Figures:
    """Sentences generated and checked over a split, and the decoding speed."""

    states: int = 0
    sentences: int = 0
    checked: int = 0
    tokens: int = 0
    seconds: float = 0.0
    stopped: dict[str, int] = field(default_factory=dict)
    #: Why sentences were dropped: the reason's kind ("number", "name", "claim", "arithmetic") -> count.
    dropped_by: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, g: Generated) -> None:
        self.states += 1
        self.sentences += g.total
        self.checked += len(g.grounding.kept)
        self.tokens += g.tokens
        self.seconds += g.seconds
        self.stopped[g.stopped] = self.stopped.get(g.stopped, 0) + 1
        for d in g.grounding.dropped:
            kind = d.reason.split(":", 1)[0]
            self.dropped_by[kind] = self.dropped_by.get(kind, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"states": self.states, "sentences": self.sentences, "checked": self.checked,
                "share_checked": None if not self.sentences else self.checked / self.sentences,
                "tokens": self.tokens, "seconds": round(self.seconds, 3),
                "tokens_per_s": None if self.seconds <= 0 else self.tokens / self.seconds,
                "stopped": self.stopped, "dropped_by": self.dropped_by, "examples": self.examples}


def evaluate(model, tokenizer, records: list[dict], split: str = "heldout", max_tokens: int = MAX_TOKENS,
             min_speedup: float = 1.03, examples: int = 3) -> Figures:
    """Generate the reasoning of the positive step of every state of
    ``split`` (``data.State.positive``) and check it against that step's
    facts on that program and machine (the sample's ``reasoning_facts``
    machine), unmeasured."""
    from leir.bridge.document import load_leir
    from leir_models.lm.data import group_states, step_text

    rows = [r for r in records if split == "all" or r.get("split") == split]
    by_step = {(r["before"], r["target"], r.get("device"), step_text(r["step"])): r for r in rows}
    figures = Figures()
    for st in group_states(rows):
        positive = st.positive(min_speedup)
        if positive is None:
            continue
        record = next((r for (b, t, _, s), r in by_step.items()
                       if b == st.before and t == st.target and s == step_text(positive.step)), None)
        if record is None or not record.get("after"):
            continue
        before, after = load_leir(st.before), load_leir(record["after"])
        if not (before.ok and after.ok):
            continue
        facts = step_facts(before.analysis, after.analysis, positive.step, target=st.target,
                           machine=st.machine or None)
        fields = {"before": st.before, "tensors": st.tensors, "target": st.target, "machine": st.machine}
        g = generate(model, tokenizer, fields, positive.step, facts, max_tokens)
        figures.add(g)
        if len(figures.examples) < examples:
            figures.examples.append({"workload": st.workload, "step": positive.step, **g.to_json()})
    return figures


def report(figures: Figures) -> str:
    f = figures.to_json()
    share = "n/a" if f["share_checked"] is None else f"{f['share_checked']:.3f}"
    speed = "n/a" if f["tokens_per_s"] is None else f"{f['tokens_per_s']:.1f}"
    lines = [f"states {f['states']}, sentences {f['sentences']}, checked {f['checked']} (share {share})",
             f"tokens {f['tokens']} in {f['seconds']:.2f} s: {speed} tokens/s (prompt included)",
             f"stopped: {json.dumps(f['stopped'], sort_keys=True)}; dropped by: "
             f"{json.dumps(f['dropped_by'], sort_keys=True)}"]
    return "\n".join(lines)


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from leir_models.lm.train import DEFAULT_DATA

    p = p or argparse.ArgumentParser(prog="python -m leir_models.lm.reasoning evaluate",
                                     description="generated reasoning: the share of sentences that check")
    p.add_argument("--model", metavar="DIR", help="a trained model directory (default: the shipped one)")
    p.add_argument("--data", default=DEFAULT_DATA, metavar="DIR")
    p.add_argument("--split", default="heldout", choices=["train", "validation", "test", "heldout", "all"])
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    p.add_argument("--threads", type=int, help="torch threads")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    """``evaluate`` with parsed arguments; prints the figures."""
    from leir_models.lm.data import load_records
    from leir_models.lm.store import default_dir, load_model

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model, tok = load_model(Path(args.model) if args.model else default_dir())
    records, _ = load_records(args.data)
    figures = evaluate(model, tok, records, args.split, args.max_tokens)
    print(json.dumps(figures.to_json(), indent=1, ensure_ascii=False) if args.json else report(figures))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["evaluate"]:
        argv = argv[1:]
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

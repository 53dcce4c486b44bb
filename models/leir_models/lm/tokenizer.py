"""The model's tokenizer: a byte-level BPE trained on LEIR and its reasoning
text with Hugging Face ``tokenizers``, saved as a ``tokenizers`` JSON file.

The pipeline is SmolLM2's (``leir.tools.token_counts``): every digit on its
own, then GPT-2's byte-level word split, then BPE merges. Single digits keep
sizes the model never saw (a variant's 75 or 138) spelt from the same ten
tokens. Byte-level means every text encodes, and decodes back exactly
(tested on LEIR text). No normalizer: LEIR is case- and space-sensitive.

Special tokens (``config.SPECIAL_TOKENS``) take ids 0-4: ``<|pad|>``,
``<|bos|>`` (added in front of every encoded prompt by the template),
``<|eos|>``, ``<|step|>`` (ends the prompt) and ``<|reason|>`` (ends the step).

Against SmolLM2's 49,152-token BPE, on the same texts: ``compare`` (the
command below; the figures are in docs/model.md)::

    python -m leir_models.lm.tokenizer compare [--data tests/data/dataset] [--vocab 4096]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from leir_models.lm.config import SPECIAL_TOKENS

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PAD_ID, BOS_ID, EOS_ID, STEP_ID, REASON_ID = range(len(SPECIAL_TOKENS))


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2) -> "Tokenizer":
    """A byte-level BPE of at most ``vocab_size`` tokens trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL_TOKENS[1]} $A", special_tokens=[(SPECIAL_TOKENS[1], BOS_ID)])
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    return tok


def save(tok: "Tokenizer", path: str | Path) -> None:
    tok.save(str(path))


def load(path: str | Path) -> "Tokenizer":
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def encode_prompt(tok: "Tokenizer", text: str) -> list[int]:
    """``<|bos|>`` and the prompt's ids."""
    return tok.encode(text, add_special_tokens=True).ids


def encode(tok: "Tokenizer", text: str) -> list[int]:
    """The ids of a continuation (a step, a target), without ``<|bos|>``."""
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok: "Tokenizer", ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


# ------------------------------------------------------------ the measurement


def compare(data: str | Path, vocab_size: int = 4096) -> dict:
    """Tokens per sample, our BPE (trained on the training split) against
    SmolLM2's, on the held-out split and on every split: the prompt
    (program, tensors, machine facts), the step, the reasoning, the whole."""
    from leir.tools.token_counts import count_tokens
    from leir_models.lm.data import load_states, prompt_text, step_text

    states, source = load_states(data)
    tok = train_tokenizer(_corpus([s for s in states if s.split == "train"]), vocab_size)

    def ours(text: str) -> int:
        return len(encode(tok, text))

    def smol(text: str) -> int:
        # SmolLM2 has no <|step|> token: count the prompt without it (ours with).
        return count_tokens(text.replace(SPECIAL_TOKENS[3], "\n"))

    rows = {}
    for name, subset in (("heldout", [s for s in states if s.split == "heldout"]), ("all", states)):
        parts: dict[str, dict[str, list[int]]] = {p: {"ours": [], "smollm2": []}
                                                  for p in ("prompt", "step", "reasoning", "whole")}
        for st in subset:
            prompt = prompt_text(st.before, st.tensors, st.target, st.machine)
            for c in st.candidates:
                texts = {"prompt": prompt, "step": step_text(c.step), "reasoning": c.reasoning}
                texts["whole"] = prompt + texts["step"] + texts["reasoning"]
                for p, t in texts.items():
                    parts[p]["ours"].append(ours(t))
                    parts[p]["smollm2"].append(smol(t))
        rows[name] = {
            "samples": len(parts["whole"]["ours"]),
            **{p: {k: {"mean": round(statistics.fmean(v), 1), "max": max(v)} for k, v in d.items()}
               for p, d in parts.items() if d["ours"]},
        }
    return {"source": source, "vocab_size": tok.get_vocab_size(), "trained_on": "train split", "splits": rows}


def _corpus(states) -> list[str]:
    from leir_models.lm.data import tokenizer_corpus

    return list(tokenizer_corpus(states))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leir_models.lm.tokenizer")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="tokens per sample: our BPE against SmolLM2's")
    c.add_argument("--data", default="tests/data/dataset", metavar="DIR")
    c.add_argument("--vocab", type=int, default=4096)
    c.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    figures = compare(args.data, args.vocab)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"{figures['source']} of {args.data}; our BPE: {figures['vocab_size']} tokens, trained on the train split")
    for split, row in figures["splits"].items():
        print(f"{split} ({row['samples']} samples): mean (max) tokens per sample, ours vs SmolLM2")
        for part in ("prompt", "step", "reasoning", "whole"):
            o, s = row[part]["ours"], row[part]["smollm2"]
            print(f"  {part:9} {o['mean']:7.1f} ({o['max']:5}) vs {s['mean']:7.1f} ({s['max']:5})"
                  f"  ratio {o['mean'] / s['mean']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

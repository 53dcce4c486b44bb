"""``leir model generate FILE``: the step the model proposes for a ``.leir``
file, and its reasoning decoded under the SOL policy (docs/sol.md).

    leir model generate FILE [--at LINE:COL] [--budget B | --dense] [--runtime torch|onnx]
                        [--precision fp32|int8] [--model DIR] [--policy DIR] [--json]

1. The step: the first of ``leir.tools.suggest.suggest(text, "leir", offset,
   ranker=ModelRanker.load(model_dir))``, the legal candidates at the
   position (everywhere without ``--at``) ranked by the model's
   log-likelihood (``leir_models.lm.ranker``): constrained by construction.
   The ranking runs on the dense torch model (SOL is about the decoding).
2. Its reasoning: the prompt and the step as ``leir_models.lm.reasoning``
   builds them (``prompt_and_facts``: the facts of the step before it is
   measured), decoded by ``leir_models.sol.reasoning.Decoder`` (which the
   server's model worker uses too) with ``leir_models.sol.decode.generate``:
   dense (``--dense``), or the policy's action per token at budget ``B``
   (sampled from the policy with ``--seed``, as it was trained: its greedy
   choice collapses to the cheapest level, docs/sol.md). The model is
   ``decode.prepare``\\ d with the policy's channel order (the logits do not
   change). ``--runtime onnx`` runs each decoded token's whole pass on ONNX
   Runtime (``ort_step``: one graph per keep level, ``--precision fp32`` or
   ``int8``) with the policy inside them (each token's run makes the next
   token's choice; ``ort_step.OrtPolicy`` makes the first); the prompt is
   read on torch.
3. What it wrote is checked with ``leir.explain.grounding.check`` as
   ``reasoning.generate`` does: only the sentences the facts bear out are
   kept.

Printed: the step, the reasoning kept, the decode loop's tokens/s (the
prompt's dense prefill excluded, ``decode.Decoded``), the FLOPs per token
(model and policy), the net keep reached, the runtime and the providers
really in use (``torch`` on the CPU, or the ORT sessions'
``get_providers()``). ``--json``: ``{"id", "args", "reasoning",
"tokens_per_s", "flops_per_token", "net_keep", "runtime", "providers"}``,
plus ``precision``, ``budget``, ``tokens`` and ``dropped``/``total`` sentences.

A missing model or policy, a file that does not load or has errors, or a
bad ``--at`` raise ``ValueError``/``FileNotFoundError`` with one line, which
``leir model`` prints on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leir_models.lm.reasoning import MAX_TOKENS
from leir_models.sol.reasoning import POLICY_SUBDIR

__all__ = ["DEFAULT_BUDGET", "POLICY_SUBDIR", "Proposal", "propose"]

#: The budget when neither ``--budget`` nor ``--dense`` is given.
DEFAULT_BUDGET = 0.7


@dataclass
class Proposal:
    """The proposed step and its reasoning, with the decoding's figures."""

    id: str
    args: dict[str, Any]
    title: str
    #: The sentences that check, joined ("" when none does).
    reasoning: str
    #: What the model wrote, whole.
    raw: str
    dropped: int
    total: int
    tokens: int
    tokens_per_s: float
    flops_per_token: float
    flops_dense: float
    net_keep: float
    #: None: dense.
    budget: float | None
    runtime: str
    precision: str
    providers: list[str]
    stopped: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "args": self.args, "reasoning": self.reasoning,
                "tokens_per_s": round(self.tokens_per_s, 1), "flops_per_token": round(self.flops_per_token),
                "net_keep": round(self.net_keep, 4), "runtime": self.runtime, "providers": self.providers,
                "precision": self.precision, "budget": self.budget, "tokens": self.tokens,
                "dropped": self.dropped, "total": self.total}


def position(doc, at: str) -> int:
    """The character offset of a 1-based ``LINE:COL`` (as ``leir suggest --at``)."""
    try:
        line_text, col_text = at.split(":")
        line, col = int(line_text), int(col_text)
    except ValueError:
        raise ValueError(f"--at {at}: expected LINE:COL, e.g. 12:5") from None
    if not (1 <= line <= doc.source.line_count):
        raise ValueError(f"--at {at}: the file has {doc.source.line_count} lines")
    if col < 1:
        raise ValueError(f"--at {at}: columns start at 1")
    return doc.source.offset(line - 1, col - 1)


def load_document(path: str | Path):
    """The ``LeirDocument`` of a ``.leir`` file; ValueError naming the first error."""
    from leir.bridge.document import language_of, load_leir, read_text
    from leir.errors import LeirError

    if language_of(str(path)) != "leir":
        raise ValueError(f"{path}: not a .leir file (generate reads LEIR programs, not Python kernels)")
    try:
        text = read_text(path)
    except LeirError as e:
        raise ValueError(str(e)) from None
    doc = load_leir(text)
    for d in doc.diagnostics:
        if d.is_error:
            raise ValueError(f"{path}:{doc.source.format_location(d.span)}: error: {d.message}")
    if not doc.ok:
        raise ValueError(f"{path}: the program does not check")
    return doc


def propose(path: str | Path, at: str | None = None, *, model_dir: str | Path, policy_dir: str | Path | None = None,
            budget: float | None = DEFAULT_BUDGET, runtime: str = "torch", precision: str = "fp32",
            target: str = "llvm", max_tokens: int = MAX_TOKENS, seed: int = 0, cache_dir: str | Path | None = None,
            threads: int | None = 1) -> Proposal:
    """The model's step at ``at`` of the ``.leir`` file ``path`` and its
    reasoning decoded at ``budget`` (None: dense) on ``runtime`` (module doc)."""
    import torch

    from leir.explain.grounding import check
    from leir.tools.suggest import suggest
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.ranker import ModelRanker
    from leir_models.lm.reasoning import prompt_and_facts
    from leir_models.sol import ort_runtime
    from leir_models.sol.onnx_blocks import PRECISIONS
    from leir_models.sol.reasoning import Decoder, fitting_policy

    if runtime not in ort_runtime.RUNTIMES:
        raise ValueError(f"--runtime {runtime}: expected one of {', '.join(ort_runtime.RUNTIMES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision}: expected one of {', '.join(PRECISIONS)}")
    if runtime == "torch" and precision != "fp32":
        raise ValueError(f"--precision {precision} needs --runtime onnx (the torch runtime is fp32)")
    if budget is not None and not 0.0 < budget <= 1.0:
        raise ValueError(f"--budget {budget:g}: expected a net keep in (0, 1], e.g. 0.5")
    if max_tokens < 1:
        raise ValueError(f"--max-tokens {max_tokens}: expected at least 1")
    if threads:
        torch.set_num_threads(threads)
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory (train one with `leir model train`)")
    if budget is not None:
        policy_dir = Path(policy_dir) if policy_dir is not None else model_dir / POLICY_SUBDIR
        if not policy_dir.is_dir():
            raise FileNotFoundError(f"{policy_dir}: no such policy directory (train one with `leir model train-sol "
                                    f"--model {model_dir} --out {policy_dir}`, or pass --dense)")

    doc = load_document(path)
    offset = position(doc, at) if at else None
    ranker = ModelRanker.load(model_dir)
    model, tok = ranker.model, ranker.tokenizer
    policy, orders = fitting_policy(model, policy_dir) if budget is not None else (None, None)
    found = suggest(doc.source.text, "leir", offset, target=target, document=doc, ranker=ranker, explain_top=0)
    if not found:
        raise ValueError(f"{path}: no step applies" + (f" at {at}" if at else ""))
    top = found[0]

    # Ranked on the dense model above; only now are its channels reordered and its MLPs made sliceable.
    decoder = Decoder.prepare(model, policy, orders, budget, runtime, precision, cache_dir, threads)
    kind = "cuda" if "cuda" in target else "llvm"
    ids, facts = prompt_and_facts(tok, model, doc.analysis, top.step, kind, None, max_tokens)
    out = decoder.decode(ids, max_tokens, seed)
    raw = tk.decode(tok, out.tokens)
    grounding = check(raw, facts)
    return Proposal(top.step.id, dict(top.step.args), top.label, grounding.text, raw, len(grounding.dropped),
                    grounding.total, len(out.tokens), out.tokens_per_s, out.flops_per_token, out.flops_dense,
                    out.net_keep, budget, runtime, precision, decoder.providers, out.stopped)


def report(p: Proposal) -> str:
    mode = "dense" if p.budget is None else f"SOL at budget {p.budget:g}"
    runtime = p.runtime if p.runtime == "torch" else f"{p.runtime} ({p.precision})"
    lines = [f"step: {p.title}  {json.dumps({'id': p.id, 'args': p.args}, sort_keys=True)}",
             f"reasoning: {p.reasoning or '(no sentence checks against the step’s facts)'}",
             f"  {p.total - p.dropped} of {p.total} sentences kept; {p.tokens} tokens, stopped at {p.stopped}",
             f"decoding: {mode}, {p.tokens_per_s:.1f} tokens/s, {p.flops_per_token / 1e6:.2f} MFLOPs/token "
             f"(dense {p.flops_dense / 1e6:.2f}), net keep {p.net_keep:.3f}",
             f"runtime: {runtime} on {', '.join(p.providers)}"]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("file", metavar="FILE", help="a .leir program")
    p.add_argument("--at", metavar="LINE:COL", help="only steps that apply at this position (1-based)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--budget", type=float, metavar="B",
                     help=f"the SOL policy's net keep target (default {DEFAULT_BUDGET:g})")
    how.add_argument("--dense", action="store_true", help="decode densely, no policy")
    p.add_argument("--runtime", choices=["torch", "onnx"], default="torch",
                   help="where each decoded token's pass runs: torch, or ONNX Runtime (one graph per keep "
                        "level; CUDA provider first, CPU fallback)")
    p.add_argument("--precision", choices=["fp32", "int8"], default="fp32", help="the ONNX graphs' precision")
    p.add_argument("--model", metavar="DIR", help="a trained model directory (default: the shipped one)")
    p.add_argument("--policy", metavar="DIR",
                   help=f"what `leir model train-sol --out` wrote (default: MODEL/{POLICY_SUBDIR})")
    p.add_argument("--target", choices=["llvm", "cuda"], default="llvm")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS, metavar="N")
    p.add_argument("--seed", type=int, default=0, help="the policy's sampling seed")
    p.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime intra-op threads (default 1)")
    p.add_argument("--cache-dir", metavar="DIR", help="the exported ONNX graphs (default $LEIR_SOL_CACHE, "
                                                      "$XDG_CACHE_HOME/leir-lsp/sol-onnx)")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    from leir_models.lm.store import default_dir

    p = propose(args.file, args.at, model_dir=args.model or default_dir(), policy_dir=args.policy,
                budget=None if args.dense else (args.budget if args.budget is not None else DEFAULT_BUDGET),
                runtime=args.runtime, precision=args.precision, target=args.target, max_tokens=args.max_tokens,
                seed=args.seed, cache_dir=args.cache_dir, threads=args.threads)
    print(json.dumps(p.to_json(), indent=1, ensure_ascii=False) if args.json else report(p))
    return 0

"""Reasoning decoded under the SOL policy: what ``leir model generate``
(``generate.propose``) and the server's model worker share (docs/sol.md,
"In the server").

- ``fitting_policy(model, policy_dir)``: the policy and the channel orders
  saved in ``policy_dir`` (``policy.load_policy``), checked to fit ``model``.
- ``Decoder``: a model ``decode.prepare``\\ d with the policy's channel
  order (the logits do not change), its decoded tokens' passes on torch or
  on ONNX Runtime (``ort_step``: one graph per keep level), that decodes
  after a prompt with
  ``decode.generate``: densely without a policy, otherwise with the
  policy's action per token at the budget, *sampled* from a generator
  seeded per call, as the policy was trained (its greedy choice collapses
  to the cheapest level, docs/sol.md).
- ``SolRanker``: a ``leir_models.lm.ranker.ModelRanker`` whose ranking is
  the ranker's own, on its dense model, untouched (SOL is about decoding;
  the ranker reads every candidate in one pass, where a per-token policy
  does not apply), and whose ``explain`` decodes the same reasoning
  ``ModelRanker.explain`` writes, from the same prompt, on a ``Decoder``
  over a copy of the model, and keeps only the sentences that check
  (``leir.explain.grounding``). It counts the net keep its decodes reached.
- ``with_sol(ranker, budget, ...)``: that ranker (the server's model
  worker calls it, by name: ``leir_server.model_worker.SOL_DECODING``), or,
  when no policy lies beside the model (``POLICY_SUBDIR``), the policy does
  not load or fit, or ONNX Runtime does not load, the ranker itself decoding
  densely, with the reason logged and in its ``decoding()``: asking for SOL
  never loses the reasoning. ``ModelRanker`` cannot offer it as a method:
  ``leir_models.lm`` is below ``leir_models.sol`` (``ort_runtime`` imports
  the ranker), and the project has no import cycle (tests/test_layers.py).

Nothing here imports torch at module level (``leir model --help`` stays light).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leir_models.lm.reasoning import MAX_TOKENS

log = logging.getLogger(__name__)

#: Where the policy is looked for beside the model (``MODEL/sol``).
POLICY_SUBDIR = "sol"


def fitting_policy(model, policy_dir: str | Path):
    """(policy, channel orders) saved in ``policy_dir``; FileNotFoundError
    naming a missing file, ValueError when it was trained for a model of
    another shape than ``model``."""
    from leir_models.sol.policy import load_policy

    policy, orders = load_policy(policy_dir)
    layers = int(model.config.num_hidden_layers)
    if policy.config.hidden_size != model.config.hidden_size or len(orders) != layers:
        raise ValueError(f"the policy in {policy_dir} was trained for another model (hidden size "
                         f"{policy.config.hidden_size}, {len(orders)} layers; this one: "
                         f"{model.config.hidden_size}, {layers})")
    return policy, orders


@dataclass
class Decoder:
    """A prepared model and how it decodes (module doc)."""

    model: Any
    #: None: dense decoding.
    policy: Any
    #: The net keep target the policy is given; None with no policy.
    budget: float | None
    #: "torch", or "onnx": each decoded token's whole pass on ONNX Runtime
    #: (``ort_step``; the prompt is read on torch, the policy on ONNX Runtime).
    runtime: str
    #: "fp32" or "int8" (int8 only on "onnx").
    precision: str
    #: What the passes really run on: "torch (cpu)", or the ORT sessions' providers.
    providers: list[str]
    #: The step graphs' sessions (``ort_step.OrtSteps``, the policy inside
    #: when there is one) on "onnx"; None on torch.
    steps: Any = None
    #: The policy on ONNX Runtime (``ort_step.OrtPolicy``) on "onnx" with a policy; None otherwise.
    policy_logits: Any = None

    @classmethod
    def prepare(cls, model, policy=None, orders=None, budget: float | None = None, runtime: str = "torch",
                precision: str = "fp32", cache_dir: str | Path | None = None, threads: int | None = 1) -> "Decoder":
        """``model`` (in place) put in ``orders``, its MLPs sliceable, on
        ``runtime``; ``policy`` decodes at ``budget`` (both or neither).
        Raises what ``ort_step.load`` raises when ONNX Runtime cannot run
        the step graphs."""
        from leir_models.sol import decode, ort_runtime, ort_step

        if runtime not in ort_runtime.RUNTIMES:
            raise ValueError(f"runtime {runtime!r} is not one of {ort_runtime.RUNTIMES}")
        if runtime == "torch" and precision != "fp32":
            raise ValueError(f"precision {precision} needs the onnx runtime (the torch runtime is fp32)")
        if (policy is None) != (budget is None):
            raise ValueError("a policy needs a budget, and a budget a policy")
        decode.prepare(model, orders)
        providers = [f"torch ({next(model.parameters()).device.type})"]
        steps = policy_logits = None
        if runtime == "onnx":
            # With a policy, the step graphs hold it: each token's run makes the
            # next token's choice; its own graph serves the first token only.
            steps = ort_step.load(model, precision, cache_dir, threads=threads or None, policy=policy)
            providers = steps.providers
            if policy is not None:
                policy_logits = ort_step.OrtPolicy(policy, cache_dir, threads=threads or None)
        return cls(model, policy, budget, runtime, precision, providers, steps, policy_logits)

    def decode(self, ids: list[int], max_tokens: int = MAX_TOKENS, seed: int = 0):
        """``decode.generate`` after ``ids`` until ``<|eos|>``: densely, or
        with the policy sampled from a generator seeded with ``seed`` (the
        same ids and seed give the same actions and text)."""
        import torch

        from leir_models.lm import tokenizer as tk
        from leir_models.lm.reasoning import NEVER
        from leir_models.sol import decode
        from leir_models.sol.ort_step import OrtPasses

        passes = OrtPasses(self.model, self.steps) if self.steps is not None else None
        if self.policy is None:
            return decode.generate(self.model, ids, max_tokens, "dense", stop_ids=[tk.EOS_ID], never_ids=NEVER,
                                   passes=passes)
        return decode.generate(self.model, ids, max_tokens, "sol", policy=self.policy, target=self.budget,
                               greedy_policy=False, generator=torch.Generator().manual_seed(seed),
                               stop_ids=[tk.EOS_ID], never_ids=NEVER, passes=passes,
                               policy_logits=self.policy_logits)

    @property
    def where(self) -> str:
        """"torch (cpu)", or "ONNX Runtime int8 on CPUExecutionProvider"."""
        if self.runtime == "torch":
            return ", ".join(self.providers)
        return f"ONNX Runtime {self.precision} on {', '.join(self.providers)}"


class SolRanker:
    """A ``ModelRanker``'s ranking, with its reasoning decoded under SOL
    (module doc). ``seed`` seeds every ``explain``'s policy sampling, so a
    step of a program always gets the same reasoning."""

    def __init__(self, ranker, decoder: Decoder, seed: int = 0, max_tokens: int = MAX_TOKENS):
        self.ranker, self.decoder, self.seed, self.max_tokens = ranker, decoder, seed, max_tokens
        self.name = ranker.name
        #: Single-token passes decoded so far, and the sum of their net keeps.
        self.passes, self.kept = 0, 0.0
        #: The last ``decode.Decoded`` (its tokens, actions, net keep, FLOPs).
        self.last = None

    def score(self, ctx, steps, target: str):
        return self.ranker.score(ctx, steps, target)

    def explain(self, ctx, step, target: str) -> str | None:
        """As ``ModelRanker.explain``, decoded by ``decoder``."""
        from leir.explain.grounding import check
        from leir.transforms import TransformError
        from leir_models.lm import tokenizer as tk
        from leir_models.lm.reasoning import prompt_and_facts

        try:
            ids, facts = prompt_and_facts(self.ranker.tokenizer, self.decoder.model, ctx.analysis, step, target,
                                          self.ranker.machine, self.max_tokens)
        except (TransformError, ValueError):
            return None
        out = self.decoder.decode(ids, self.max_tokens, self.seed)
        self.last = out
        self.passes += len(out.actions)
        self.kept += out.net_keep * len(out.actions)
        return check(tk.decode(self.ranker.tokenizer, out.tokens), facts).text or None

    @property
    def net_keep(self) -> float | None:
        """The mean net keep (MLP FLOPs share) of every pass decoded so far; None before any."""
        return self.kept / self.passes if self.passes else None

    @property
    def reasoning_note(self) -> str:
        """What hover says beside the reasoning (``leir.tools.ranking.Ranker``)."""
        return f"decoded under SOL at budget {self.decoder.budget:g}"

    def decoding(self) -> dict[str, Any]:
        """How ``explain`` decodes, as plain data (the server sends it on):
        ``text`` says it in one clause."""
        keep = self.net_keep
        detail = (f"net keep {keep:.2f}, " if keep is not None else "") + self.decoder.where
        return {"mode": "sol", "budget": self.decoder.budget, "runtime": self.decoder.runtime,
                "precision": self.decoder.precision, "providers": list(self.decoder.providers),
                "net_keep": None if keep is None else round(keep, 4), "passes": self.passes,
                "text": f"reasoning decoded with SOL at budget {self.decoder.budget:g} ({detail})"}


def with_sol(ranker, budget: float, runtime: str = "torch", precision: str = "fp32", *,
             policy_dir: str | Path | None = None, cache_dir: str | Path | None = None, threads: int | None = 1):
    """``ranker`` (a ``ModelRanker``) with its reasoning decoded under the
    SOL policy of ``policy_dir`` (default: ``POLICY_SUBDIR`` beside the
    model) at ``budget``, on ``runtime`` at ``precision``; or, where that
    cannot be (module doc), ``ranker.dense_because(reason)``. Any other
    ranker is returned as it is (it has no model to decode with)."""
    from leir_models.lm.ranker import ModelRanker

    if not 0.0 < budget <= 1.0:
        raise ValueError(f"budget {budget:g}: expected a net keep in (0, 1]")
    if not isinstance(ranker, ModelRanker):
        log.warning("%s is not the local language model: its reasoning is not decoded under SOL", ranker.name)
        return ranker
    if policy_dir is None:
        if ranker.path is None:
            return _dense(ranker, "the model's directory is unknown, so no SOL policy was looked for")
        policy_dir = Path(ranker.path) / POLICY_SUBDIR
    policy_dir = Path(policy_dir)
    if not policy_dir.is_dir():
        return _dense(ranker, f"no SOL policy in {policy_dir}")
    model = copy.deepcopy(ranker.model)  # the ranking keeps the dense model, untouched
    try:
        policy, orders = fitting_policy(model, policy_dir)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        return _dense(ranker, f"the SOL policy in {policy_dir} did not load: {type(e).__name__}: {e}")
    try:
        decoder = Decoder.prepare(model, policy, orders, budget, runtime, precision, cache_dir, threads)
    except Exception as e:  # noqa: BLE001 - ORT's failures are of many kinds; the reasoning must not be lost
        where = "ONNX Runtime" if runtime == "onnx" else "the SOL decoder"
        return _dense(ranker, f"{where} did not load: {type(e).__name__}: {e}")
    found = SolRanker(ranker, decoder)
    log.info("%s: %s", ranker.name, found.decoding()["text"])
    return found


def _dense(ranker, reason: str):
    log.warning("%s: reasoning decoded densely: %s", ranker.name, reason)
    return ranker.dense_because(reason)


# ------------------------------------------------------------ the figure


def measure_explain(path: str | Path, budget: float, runtime: str = "torch", precision: str = "fp32",
                    repeats: int = 5, top: int | None = None, threads: int = 1) -> dict[str, Any]:
    """What the server's model worker spends writing a document's reasoning:
    the ``explain`` of the first ``top`` suggestions (the worker's
    ``leir.tools.suggest.EXPLAIN_TOP``) of the ``.leir`` file ``path``, by
    the shipped (or ``$LEIR_MODEL_DIR``) model decoding densely and under
    SOL at ``budget`` (``with_sol``), the two timed in turn ``repeats``
    times; seconds per run, the runs' median, tokens decoded, the sentences
    kept, the net keep reached, and the load average before and after."""
    import statistics
    import time

    import torch

    from leir.bridge.document import load_leir
    from leir.tools.suggest import EXPLAIN_TOP, suggest
    from leir.transforms.base import Context
    from leir_models.lm.ranker import ModelRanker
    from leir_models.lm.store import default_dir
    from leir_models.sol.ort_runtime import loadavg

    torch.set_num_threads(threads)
    dense = ModelRanker.load(default_dir())
    sol = with_sol(dense, budget, runtime, precision)
    if not isinstance(sol, SolRanker):
        raise ValueError(f"SOL did not load: {sol.decoding()['text']}")
    doc = load_leir(Path(path).read_text(encoding="utf-8"))
    steps = [s.step for s in suggest(doc.source.text, "leir", None, document=doc, ranker=dense, explain_top=0)]
    steps = steps[:top or EXPLAIN_TOP]
    ctx = Context.of(doc.analysis)
    figures: dict[str, Any] = {"file": str(path), "steps": [s.key for s in steps], "budget": budget,
                               "where": sol.decoder.where, "load_before": loadavg()}
    seconds: dict[str, list[float]] = {"dense": [], "sol": []}
    kept: dict[str, list[str | None]] = {}
    for _ in range(repeats):
        for name, ranker in (("dense", dense), ("sol", sol)):
            start = time.perf_counter()
            kept[name] = [ranker.explain(ctx, step, "llvm") for step in steps]
            seconds[name].append(time.perf_counter() - start)
    figures["load_after"] = loadavg()
    for name in seconds:
        figures[name] = {"seconds": [round(s, 2) for s in seconds[name]],
                         "median_s": round(statistics.median(seconds[name]), 2),
                         "kept": sum(text is not None for text in kept[name])}
    figures["sol"]["net_keep"] = round(sol.net_keep, 4) if sol.net_keep is not None else None
    figures["sol"]["tokens_per_explain"] = len(sol.last.tokens) if sol.last is not None else 0
    return figures


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m leir_models.sol.reasoning",
                                description="time the model worker's explain, dense against SOL (measure_explain)")
    p.add_argument("file", metavar="FILE", help="a .leir program")
    p.add_argument("--budget", type=float, default=0.5)
    p.add_argument("--runtime", choices=["torch", "onnx"], default="torch")
    p.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    print(json.dumps(measure_explain(args.file, args.budget, args.runtime, args.precision, args.repeats,
                                     threads=args.threads), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``ModelRanker``: the legal candidate steps of a program, scored by their
log-likelihood under the model given the prompt (``data.prompt_text``).

Constrained by construction: the model never generates a step. The
candidates are the ones the caller passes (``leir.tools.ranking.rank`` lists
them with ``leir.transforms.candidates``), and each is scored as the text
``data.candidate_text`` (the step's JSON and the ``<|reason|>`` that ends
it), so every proposal is legal and a step never scores as the prefix of a
longer one. One forward pass reads the prompt (only what follows its
common prefix with the last prompt the ranker read: ``PromptCache``); a
second reads every candidate at once, as a prefix tree after the prompt's
key/value cache (``logprobs``; ``logprobs_full`` reads every sequence whole, and the tests
check that both agree).

Loading reads ``config.json`` (a ``LlamaConfig``), ``model.safetensors``
(``safetensors.torch.load_model``) and ``tokenizer.json``; no pickle is
involved (``torch.load`` is never called). ``load_default`` is the
``model`` entry point of ``leir.rankers``: the shipped model in
``leir_models/lm/data/`` (or ``$LEIR_MODEL_DIR``); it raises when there is
none, and ``leir.tools.ranking.load_ranker`` then falls back to the
heuristic with the reason logged. ``load_smollm2`` is the ``smollm2`` entry
point, the larger tier: SmolLM2-135M fine-tuned on the dataset, in
``store.smollm2_model_dir()`` (``$LEIR_SMOLLM2_MODEL_DIR`` or
``~/.cache/leir/smollm2-ft``; docs/model.md, "The larger tier").

**Shortlist.** Both entry points give a ranker that orders only the
heuristic's first ``SHORTLIST`` steps (``ModelRanker.shortlist``): the
model chooses among those, above every other step, and the others keep the
heuristic's order below them. Measured (docs/model.md, "Effect on
search"): the model alone, ordering every legal step, made a 16-measurement
greedy search keep nothing on three of four realistic workloads (its
kernels 0.12x the heuristic's, geomean), while among the steps the
heuristic ranks first (those the dataset measured) it picks the faster one
more often than the heuristic. ``ModelRanker.load`` without ``shortlist``
is the model alone (what ``leir model evaluate`` scores as "model").
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Sequence

from leir_models.lm import tokenizer as tk
from leir_models.lm.data import candidate_text, prompt_text, state_of_analysis
from leir_models.lm.store import default_dir, load_model, missing_files, smollm2_dir, smollm2_model_dir

#: Tree nodes (candidate tokens, shared prefixes once) per forward pass after the prompt's.
CHUNK_NODES = 2048
#: How many of the heuristic's first steps the shipped rankers let the model
#: order (module docstring, "Shortlist"); ``$LEIR_MODEL_SHORTLIST`` overrides
#: it, 0 letting the model order every step.
SHORTLIST = 3


def shortlist() -> int | None:
    """The installed rankers' shortlist: ``$LEIR_MODEL_SHORTLIST`` or
    ``SHORTLIST``; None (the model orders everything) for 0."""
    import os

    raw = os.environ.get("LEIR_MODEL_SHORTLIST", "").strip()
    if not raw:
        return SHORTLIST
    if not raw.isdigit():
        raise ValueError(f"LEIR_MODEL_SHORTLIST is a count of steps (0: the model orders them all), not {raw!r}")
    return int(raw) or None


def logprobs_full(model, prompt_ids: list[int], conts: Sequence[list[int]]) -> list[float]:
    """Sum of log p(continuation | prompt) for each continuation, each
    sequence read whole (the reference for ``logprobs``)."""
    import torch

    out = []
    with torch.no_grad():
        for c in conts:
            ids = torch.tensor([prompt_ids + list(c)])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            lp = logp.gather(-1, targets[:, None])[:, 0]
            out.append(float(lp[len(prompt_ids) - 1:].sum()))
    return out


class PromptCache:
    """The key/value cache of the last prompt a ranker read, kept so that
    the next prompt reads only what follows their longest common prefix.

    A prompt is the target, the machine, the tensors, then the program
    (``data.prompt_text``); the states of one search, or the versions of a
    document being edited, differ from some line of the program on, so the
    head of the prompt is read once. Reading the prompt is most of a
    ranking (a 556-token prompt is 250 ms of the 300 ms that ranking
    examples/gqa_attention.leir takes on one thread: docs/model.md,
    "Latency on this machine"). The cache is cropped back to the common
    prefix before reading the rest (``DynamicCache.crop``; ``logprobs``
    crops its candidates' tree off after scoring: ``trim``); the last prompt
    token is always read again, for its logits."""

    def __init__(self):
        import threading

        self.ids: list[int] = []
        self.cache = None
        #: Prompt tokens the model read at the last ``read`` (what the tests check).
        self.read_last = 0
        #: Held while the cache is read and extended (``logprobs``).
        self.lock = threading.Lock()

    def _crop(self, length: int) -> None:
        extra = self.cache.get_seq_length() - length
        if extra > 0:
            self.cache.crop(-extra)

    def read(self, model, prompt_ids: list[int]):
        """(the model's output for ``prompt_ids``' last position onwards,
        with ``.cache`` holding the whole prompt). Not reentrant: hold
        ``lock`` while the cache is used."""
        import torch

        same = 0
        if self.cache is not None:  # never more than the cache holds (a read that failed midway cropped it)
            same = min(common_prefix(self.ids, prompt_ids[:-1]), self.cache.get_seq_length())
        if same == 0:
            self.cache = None
        else:
            self._crop(same)
        rest = prompt_ids[same:]
        out = model(input_ids=torch.tensor([rest]), position_ids=torch.arange(same, len(prompt_ids))[None],
                    cache=self.cache, use_cache=True)
        self.cache, self.ids = out.cache, list(prompt_ids)
        self.read_last = len(rest)
        return out

    def trim(self) -> None:
        """Crop off what was appended after the prompt (a candidates'
        tree: no one's prefix)."""
        if self.cache is not None:
            self._crop(len(self.ids))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def logprobs(model, prompt_ids: list[int], conts: Sequence[list[int]], chunk: int = CHUNK_NODES,
             prompt_cache: PromptCache | None = None) -> list[float]:
    """Sum of log p(continuation | prompt) for each continuation, in two
    forward passes or a few: the prompt once, then the continuations as a
    prefix tree flattened into one sequence, each token attending to the
    prompt and to its own ancestors only (a 4D attention mask; its position
    is the prompt's length plus its depth). Candidates share long prefixes
    (``{"id":"split","args":{"block":"``...): the 208 candidates of
    examples/gqa_attention.leir are 4,818 tokens, their tree 1,703 nodes.
    A tree larger than ``chunk`` nodes is cut into subtrees of whole
    candidates, each read after the prompt's cache. With ``prompt_cache``
    the prompt is read after the previous one's common prefix (``PromptCache``)."""
    import contextlib

    import torch

    if not conts:
        return []
    conts = [list(c) for c in conts]
    with torch.no_grad(), (prompt_cache.lock if prompt_cache is not None else contextlib.nullcontext()):
        if prompt_cache is not None:
            first = prompt_cache.read(model, prompt_ids)
        else:
            first = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        past, last = first.cache, torch.log_softmax(first.logits[0, -1].float(), -1)
        out: list[float] = [0.0] * len(conts)
        groups, size, nodes_seen = [[]], 0, set()
        for i in sorted(range(len(conts)), key=lambda i: conts[i]):  # neighbours share prefixes
            new = sum(tuple(conts[i][:d + 1]) not in nodes_seen for d in range(len(conts[i])))
            if groups[-1] and size + new > chunk:
                groups.append([])
                size, nodes_seen = 0, set()
                new = len(conts[i])
            nodes_seen.update(tuple(conts[i][:d + 1]) for d in range(len(conts[i])))
            groups[-1].append(i)
            size += new
        for group in groups:
            cache = copy.deepcopy(past) if len(groups) > 1 else past
            for i, lp in zip(group, _tree_logprobs(model, len(prompt_ids), cache, last, [conts[i] for i in group])):
                out[i] = lp
        if prompt_cache is not None:
            prompt_cache.trim()
    return out


def _tree_logprobs(model, prompt_len: int, cache, last, conts: list[list[int]]) -> list[float]:
    import torch

    index: dict[tuple, int] = {}
    tokens, parents, depths, paths = [], [], [], []
    for c in conts:
        path = []
        for d in range(len(c)):
            key = tuple(c[:d + 1])
            if key not in index:
                index[key] = len(tokens)
                tokens.append(c[d])
                parents.append(path[-1] if path else -1)
                depths.append(d)
            path.append(index[key])
        paths.append(path)
    n = len(tokens)
    allowed = torch.zeros((n, prompt_len + n), dtype=torch.bool)
    allowed[:, :prompt_len] = True
    for i in range(n):  # parents come before their children
        allowed[i, prompt_len + i] = True
        if parents[i] >= 0:
            allowed[i, prompt_len:] |= allowed[parents[i], prompt_len:]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros((1, 1, n, prompt_len + n), dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    positions = torch.tensor([[prompt_len + d for d in depths]])
    logits = model(input_ids=torch.tensor([tokens]), attention_mask=mask, position_ids=positions, cache=cache,
                   use_cache=True).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    out = []
    for c, path in zip(conts, paths):
        total = float(last[c[0]])
        for d in range(1, len(c)):
            total += float(logp[path[d - 1], c[d]])
        out.append(total)
    return out


class ModelRanker:
    """A ``leir.tools.ranking.Ranker``. A step's score is its share of the
    candidates' probability, times 100 (the order of the log-likelihoods;
    positive, and on the heuristic's 0-100 scale, so that ``leir.tools.suggest``
    still puts the steps no ranker scores, at 0, last)."""

    #: Nothing to say beside the reasoning: it is decoded densely (``leir.tools.ranking.Ranker``).
    reasoning_note = None

    def __init__(self, model, tokenizer, name: str = "model", machine: dict[str, Any] | None = None,
                 path: str | Path | None = None, shortlist: int | None = None):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.machine = machine
        #: None: the model orders every step. k: it orders the heuristic's
        #: first k, above the others, which keep the heuristic's order.
        self.shortlist = shortlist
        #: The directory the model was loaded from (where its SOL policy is looked for); None: not known.
        self.path = Path(path) if path is not None else None
        #: Why the reasoning is decoded densely although SOL was asked for
        #: (``dense_because``, from ``leir_models.sol.reasoning.with_sol``); None: not asked.
        self.dense_why: str | None = None
        #: The last prompt's key/value cache, reused for the next prompt's common prefix.
        self.prompt_cache = PromptCache()

    @classmethod
    def load(cls, path: str | Path, name: str = "model", shortlist: int | None = None) -> "ModelRanker":
        model, tok = load_model(path)
        return cls(model, tok, name, path=path, shortlist=shortlist)

    def prompt_ids(self, analysis, target: str) -> list[int]:
        fields = state_of_analysis(analysis, target, self.machine)
        ids = tk.encode_prompt(self.tokenizer, prompt_text(**fields))
        limit = self.model.config.max_position_embeddings - 96  # room for the longest step
        return ids if len(ids) <= limit else ids[:1] + ids[len(ids) - limit + 1:]

    def logprobs_of(self, analysis, steps: Sequence, target: str) -> list[float]:
        prompt = self.prompt_ids(analysis, target)
        conts = [tk.encode(self.tokenizer, candidate_text(s.to_json() if hasattr(s, "to_json") else s))
                 for s in steps]
        return logprobs(self.model, prompt, conts, prompt_cache=self.prompt_cache)

    def score(self, ctx, steps: Sequence, target: str) -> list[tuple[float, tuple[str, ...]]]:
        from leir.cancel import checkpoint

        checkpoint()
        if not steps:
            return []
        if self.shortlist:
            return self._shortlisted(ctx, steps, target)
        return [(100 * p, (f"the model gives it {p:.0%} of the candidates' probability (log-likelihood {lp:.1f})",))
                for p, lp in self._shares(ctx, steps, target)]

    def _shares(self, ctx, steps: Sequence, target: str) -> list[tuple[float, float]]:
        """(share of the candidates' probability, log-likelihood) of each step."""
        lps = self.logprobs_of(ctx.analysis, steps, target)
        top = max(lps)
        norm = top + math.log(sum(math.exp(lp - top) for lp in lps))
        return [(math.exp(lp - norm), lp) for lp in lps]

    def _shortlisted(self, ctx, steps: Sequence, target: str) -> list[tuple[float, tuple[str, ...]]]:
        """The heuristic's scores, except its first ``shortlist`` steps (ties
        in the listing's order), which score above all of them in the order
        the model gives them."""
        from leir.tools.ranking import HEURISTIC

        heuristic = HEURISTIC.score(ctx, steps, target)
        first = sorted(range(len(steps)), key=lambda i: -heuristic[i][0])[:self.shortlist]
        base = max(score for score, _ in heuristic) + 1.0
        out = list(heuristic)
        k = len(first)
        for i, (p, lp) in zip(first, self._shares(ctx, [steps[i] for i in first], target)):
            out[i] = (base + 100 * p, (f"the model gives it {p:.0%} of the probability of the heuristic's first {k} "
                                       f"steps (log-likelihood {lp:.1f})",) + tuple(heuristic[i][1]))
        return out

    def explain(self, ctx, step, target: str) -> str | None:
        """The model's reasoning for ``step``: only its sentences that check
        against the step's facts (``leir_models.lm.reasoning``); None when
        none does, or when the step's facts cannot be computed (the step no
        longer applies, or the program it makes does not check)."""
        from leir.transforms import TransformError
        from leir_models.lm.reasoning import explain

        try:
            return explain(self.model, self.tokenizer, ctx.analysis, step, target, self.machine).text or None
        except (TransformError, ValueError):
            return None

    def dense_because(self, reason: str) -> "ModelRanker":
        """A copy of this ranker (the same model) that says, in ``decoding()``,
        why its reasoning is decoded densely."""
        found = copy.copy(self)
        found.dense_why = reason
        return found

    def decoding(self) -> dict[str, Any]:
        """How ``explain`` decodes, as plain data (the server sends it on)."""
        text = "reasoning decoded densely" + (f" ({self.dense_why})" if self.dense_why else "")
        return {"mode": "dense", "why": self.dense_why, "text": text}


def load_default() -> ModelRanker:
    """The shipped model (``$LEIR_MODEL_DIR`` overrides), ordering the
    heuristic's first ``shortlist()`` steps; raises when it is missing."""
    return ModelRanker.load(default_dir(), shortlist=shortlist())


def _missing() -> str | None:
    """What ``load_default`` would miss, checked without loading anything
    (``leir.tools.ranking.ranker_missing``)."""
    path = default_dir()
    absent = missing_files(path)
    return f"no model in {path} (missing {', '.join(absent)})" if absent else None


load_default.missing = _missing


def load_smollm2() -> ModelRanker:
    """The larger tier: the fine-tuned SmolLM2 in ``store.smollm2_model_dir()``,
    named "smollm2"; raises when it is missing."""
    return ModelRanker.load(smollm2_model_dir(), name="smollm2", shortlist=shortlist())


def _smollm2_missing() -> str | None:
    """What ``load_smollm2`` would miss, and the commands that make it."""
    path = smollm2_model_dir()
    absent = missing_files(path)
    if not absent:
        return None
    return (f"no fine-tuned SmolLM2 in {path} (missing {', '.join(absent)}; make one with `leir model "
            f"import-smollm2`, then `leir model train --init {smollm2_dir()} --lora 8`)")


load_smollm2.missing = _smollm2_missing

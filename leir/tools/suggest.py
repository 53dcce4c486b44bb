"""Ranked suggestions for a document at a cursor: the steps that apply
there, best first, with the facts behind each rank and the latencies the
measurement cache already holds.

    >>> found = suggest(text, "leir", at=offset, measured=MeasuredLookup.for_target("llvm"))
    >>> found[0].label
    'Vectorize loop j (measured 2.1x)'

Nothing here builds or runs a kernel. A ``.leir`` document is parsed and
analysed in pure Python; a Python file's kernel is parsed by TVM and raised
to LEIR (``leir.transforms.python_kernels.load_kernel``), which imports TVM but
compiles nothing.

**Rank.** A step's score is ``leir.tools.ranking.rank``'s heuristic (loop
extents, reduction axes, access strides, the share of the program's
iterations the step touches); steps the search never takes (operator,
algebraic, algorithmic rewrites) score 0 and keep the catalogue's order.
Steps whose latency before and after are both in the cache come first,
fastest after first: a measured 2x beats any guess.

**Measured.** A step's "after" latency needs the program the step
produces, which only applying it can tell (for most steps that means a TVM
schedule). Applying every candidate to look a latency up would be the slow
work listing must not do, so the program a verified step produced is
remembered when it is first computed (``StepOutcomes``: a code action
resolved, an optimize search) and looked up by (program, step). A latency
is shown only when the cache holds a measurement of exactly that program on
this target and device (``leir.measure.key``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leir.ast import Span
from leir.tools.measuring import MeasuredLookup, program_digest, tvmscript_namespace
from leir.transforms.base import Step

if TYPE_CHECKING:
    from leir.measure import Measurement
    from leir.tools.measuring import PlanAhead

__all__ = ["Suggestion", "suggest"]

#: How many of the first suggestions a ranker that writes reasoning explains
#: (a model generating a hundred tokens a step: only the ones looked at first).
EXPLAIN_TOP = 3


@dataclass(frozen=True)
class Suggestion:
    """One step that applies at the cursor."""

    step: Step
    #: The transformation's own title: "Split loop k by 32".
    title: str
    #: What the step acts on, in the document (None when it acts on no one place).
    span: Span | None
    #: The Python kernel the step belongs to; None in a ``.leir`` document.
    kernel: str | None
    #: ``leir.tools.ranking.rank``'s heuristic score (0 for steps it does not rank).
    score: float
    #: The computed facts behind the score, one short clause each.
    facts: tuple[str, ...]
    #: Cached measurements of the program before and after the step.
    before: "Measurement | None" = None
    after: "Measurement | None" = None
    #: The plan this step continues (``StepOutcomes.record_plan``) and the
    #: cached measurement of the plan's end program (None: not measured).
    plan: "PlanAhead | None" = None
    plan_end: "Measurement | None" = None
    #: Reasoning the ranker wrote for the step (``Ranker.explain``), only the
    #: sentences that check against the step's facts; None when it writes none.
    reasoning: str | None = None
    #: How the ranker wrote it, said beside it (``Ranker.reasoning_note``:
    #: "decoded under SOL at budget 0.5"); None: nothing to say.
    reasoning_note: str | None = None

    @property
    def reasoning_status(self) -> str | None:
        """"predicted" until the step is measured here, then "measured"."""
        if self.reasoning is None:
            return None
        return "predicted" if self.speedup is None else "measured"

    @property
    def plan_end_ms(self) -> tuple[float, str] | None:
        """The plan's end latency and whether it was "measured" or "predicted"."""
        if self.plan is None:
            return None
        if self.plan_end is not None and self.plan_end.median_ms:
            return self.plan_end.median_ms, "measured"
        if self.plan.predicted_ms is not None:
            return self.plan.predicted_ms, "predicted"
        return None

    @property
    def plan_text(self) -> str | None:
        """"step 1 of 7 toward a tiled contraction measured at 0.41 ms (now 13 ms)"."""
        if self.plan is None:
            return None
        text = f"step {self.plan.index} of {self.plan.of} toward {self.plan.goal}"
        end = self.plan_end_ms
        if end is not None:
            text += f" {end[1]} at {end[0]:.3g} ms"
            if self.before is not None and self.before.median_ms:
                text += f" (now {self.before.median_ms:.3g} ms)"
        return text

    @property
    def speedup(self) -> float | None:
        if self.before is None or self.after is None or not self.before.median_ms or not self.after.median_ms:
            return None
        return self.before.median_ms / self.after.median_ms

    @property
    def label(self) -> str:
        """The title an editor shows: "Split loop k by 32 (measured 2.1x)",
        or for a plan's next step "Split loop k by 32 (plan step 1 of 7)"."""
        if self.plan is not None:
            return f"{self.title} (plan step {self.plan.index} of {self.plan.of})"
        speedup = self.speedup
        return self.title if speedup is None else f"{self.title} (measured {speedup:.1f}x)"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.step.id, "args": self.step.args, "title": self.title,
                               "label": self.label, "kernel": self.kernel, "score": round(self.score, 3),
                               "facts": list(self.facts)}
        if self.before is not None:
            out["latency_before_ms"] = self.before.median_ms
        if self.after is not None:
            out["latency_after_ms"] = self.after.median_ms
        if self.speedup is not None:
            out["speedup"] = round(self.speedup, 3)
        if self.plan is not None:
            end = self.plan_end_ms
            out["plan"] = {"goal": self.plan.goal, "step": self.plan.index, "of": self.plan.of,
                           "end_ms": None if end is None else round(end[0], 4),
                           "end_figure": None if end is None else end[1], "text": self.plan_text}
        if self.reasoning is not None:
            out["generated_reasoning"] = {"text": self.reasoning, "status": self.reasoning_status}
        return out


# ------------------------------------------------------------ suggesting


def suggest(text: str, language: str, at: int | None = None, *, kernel: str | None = None, target: str = "llvm",
            measured: MeasuredLookup | None = None, limit: int | None = None, document=None,
            only: tuple[str, ...] | None = None, ranker=None, explain_top: int = EXPLAIN_TOP) -> list[Suggestion]:
    """The steps that apply at character offset ``at`` of a document
    (everywhere when None), best first (see the module docstring), scored
    by ``ranker`` (a ``leir.tools.ranking.Ranker``; the heuristic by default).
    ``language`` is "leir" or "tvmscript"; ``document``, the
    ``leir.bridge.document.LeirDocument`` of ``text`` when the caller has it;
    ``only``, the transformation ids to consider (all by default). A
    document with errors, or a Python file without a kernel that loads, has
    no suggestions. A ranker that writes reasoning (an ``explain`` method,
    ``leir.tools.ranking.Ranker``) is asked for that of the first
    ``explain_top`` suggestions of a ``.leir`` document."""
    from leir.transforms import TransformError

    try:
        if language == "leir":
            doc = document if document is not None else _document(text)
            found = _leir_suggestions(doc, at, target, measured, only, ranker)
        else:
            found = _tvmscript_suggestions(text, at, kernel, target, measured, only, ranker)
    except TransformError:
        return []
    found = order(found)
    found = found if limit is None else found[:limit]
    if language == "leir" and explain_top > 0 and callable(getattr(ranker, "explain", None)):
        found = _explained(found, ranker, doc, target, explain_top)
    return found


def _explained(found: list[Suggestion], ranker, doc, target: str, top: int) -> list[Suggestion]:
    """The first ``top`` of ``found`` with ``ranker.explain``'s reasoning."""
    from dataclasses import replace

    from leir.transforms.base import Context

    if not found or not doc.ok:
        return found
    ctx = Context.of(doc.analysis)
    kind = "cuda" if "cuda" in target else "llvm"
    explained = [replace(s, reasoning=ranker.explain(ctx, s.step, kind)) if k < top else s
                 for k, s in enumerate(found)]
    note = getattr(ranker, "reasoning_note", None)
    return [replace(s, reasoning_note=note) if s.reasoning and note else s for s in explained]


def order(found: list[Suggestion]) -> list[Suggestion]:
    """The next step of a recorded plan first, then measured steps (greatest
    speedup first), then by score."""
    planned = [s for s in found if s.plan is not None]
    measured = sorted((s for s in found if s.plan is None and s.speedup is not None), key=lambda s: -s.speedup)
    rest = sorted((s for s in found if s.plan is None and s.speedup is None),
                  key=lambda s: -s.score)  # stable: catalogue order
    return planned + measured + rest


# Hover and code actions ask again and again about one version of a
# document: its analysis and the ranking of all its steps are computed once
# per text (and target kind), the steps at the cursor each time.


@functools.lru_cache(maxsize=8)
def _document(text: str):
    from leir.bridge.document import load_leir

    return load_leir(text)


@functools.lru_cache(maxsize=8)
def _kernel(text: str, kernel: str | None, at: int | None):
    from leir.transforms.python_kernels import load_kernel

    return load_kernel(text, kernel, at)


def kernel_at(text: str, kernel: str | None = None, at: int | None = None):
    """``leir.transforms.python_kernels.load_kernel``, remembered for the last few
    texts: the kernel named, else the only one, else the one holding ``at``."""
    from leir.transforms.python_kernels import KernelError

    if kernel is not None or at is None:
        return _kernel(text, kernel, None)
    try:
        return _kernel(text, None, None)
    except KernelError:  # several kernels: the cursor chooses
        return _kernel(text, None, at)


def _scores(ctx, steps, target: str, ranker=None) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The score and facts ``ranker`` (``leir.tools.ranking``, the heuristic by
    default) gives each of ``steps`` (the ones at the cursor: ranking every
    step of a large program would take seconds); steps the search never
    takes score 0."""
    from leir.tools.ranking import HEURISTIC, SEARCHED

    # The ranking knows "llvm" and "cuda"; an RPC device runs one of them.
    kind = "cuda" if "cuda" in target else "llvm"
    searched = {i for i in SEARCHED if kind == "cuda" or i != "bind"}
    ranked = [step for step in steps if step.id in searched]
    scores = dict(zip((step.key for step in ranked), (ranker or HEURISTIC).score(ctx, ranked, kind)))
    return {step.key: scores.get(step.key, (0.0, ())) for step in steps}


def _leir_suggestions(doc, at: int | None, target: str, measured: MeasuredLookup | None,
                      only: tuple[str, ...] | None = None, ranker=None) -> list[Suggestion]:
    from leir import transforms
    from leir.transforms.base import Context

    if not doc.ok:
        return []
    analysis = doc.analysis
    ctx = Context.of(analysis)
    candidates = transforms.candidates(ctx, at, only=only)
    if not candidates:
        return []
    scores = _scores(ctx, [c.step for c in candidates], target, ranker)
    before = measured.measured(analysis) if measured is not None else None
    digest = program_digest(analysis) if measured is not None else None
    ahead = measured.plan_ahead(digest) if measured is not None else None
    out = []
    for c in candidates:
        score, facts = scores.get(c.step.key, (0.0, ()))
        after = measured.after(digest, c.step) if before is not None else None
        plan, plan_end = (ahead if ahead is not None and ahead[0].next_step == c.step else (None, None))
        out.append(Suggestion(c.step, c.title, c.span, None, score, facts, before, after, plan, plan_end))
    if ahead is not None and not any(s.plan is not None for s in out):
        unlisted = _unlisted_plan_step(ctx, at, ahead[0].next_step, only)
        if unlisted is not None:
            title, span = unlisted
            after = measured.after(digest, ahead[0].next_step) if before is not None else None
            out.append(Suggestion(ahead[0].next_step, title, span, None, 0.0, (), before, after, *ahead))
    return out


def _unlisted_plan_step(ctx, at: int | None, step, only: tuple[str, ...] | None):
    """(title, span) of a plan's next step that the listing does not offer
    (a reorder of a whole run of loops, ``"order"``) when it applies here:
    its block's loops or equation are at the cursor and its own check
    passes; None otherwise."""
    from leir import transforms
    from leir.transforms import TransformError

    if only is not None and step.id not in only:
        return None
    block = step.args.get("block") if isinstance(step.args, dict) else None
    try:
        module = transforms.get(step.id)
        info = ctx.equation_of_block(block) if isinstance(block, str) else None
    except TransformError:
        return None
    if info is None:
        return None
    here = {id(site.loop) for site in ctx.loops_at(at)}
    if at is not None and not (any(id(loop) in here for loop in info.loops)
                               or any(e.index == info.index for e in ctx.equations_at(at))):
        return None
    try:
        module.check(ctx, step.args)
    except TransformError:
        return None
    title = module.title(step.args) if callable(getattr(module, "title", None)) else f"{module.TITLE} ({block})"
    span = info.loops[0].span if info.loops and info.loops[0].span is not None else info.equation.span
    return title, span


def _tvmscript_suggestions(text: str, at: int | None, kernel: str | None, target: str,
                           measured: MeasuredLookup | None, only: tuple[str, ...] | None = None,
                           ranker=None) -> list[Suggestion]:
    from leir import transforms
    from leir.transforms.python_kernels import retitle

    k = kernel_at(text, kernel, at)
    ctx = k.ctx
    if at is None:
        found = transforms.candidates(ctx, None, only=only)
    else:
        seen: dict[str, Any] = {}
        for offset in k.leir_offsets(at):
            for c in transforms.candidates(ctx, offset, only=only):
                seen.setdefault(c.step.key, c)
        order = {t.ID: i for i, t in enumerate(transforms.ALL)}
        found = sorted(seen.values(), key=lambda c: order[c.step.id])
    if not found:
        return []
    scores = _scores(ctx, [c.step for c in found], target, ranker)
    before = measured.measured(ctx.analysis) if measured is not None else None
    digest = program_digest(ctx.analysis) if before is not None else None
    out = []
    for c in found:
        # Steps name the kernel's blocks and loops, as tvmscript_candidates does.
        tir_args = k.to_tir(c.step.args, hasattr(transforms.get(c.step.id), "schedule"))
        if tir_args is None:
            continue
        step = Step(c.step.id, tir_args)
        score, facts = scores.get(c.step.key, (0.0, ()))
        after = measured.after(digest, step, tvmscript_namespace(k.name)) if digest is not None else None
        out.append(Suggestion(step, retitle(c.title, c.step.args, tir_args), k.python_span(c.span), k.name,
                              score, facts, before, after))
    return out

"""``textDocument/hover``: what the analysis knows about the loop or tensor
access under the cursor, and why the steps offered there should help, with
their measured latencies when the cache has them.

Facts and reasoning come from ``leir.explain`` (computed from the syntax
tree and the analysis); latencies from the measurement cache. Hover never
builds, runs or measures anything. In a Python file the kernel is parsed by
TVM and raised to LEIR (in a thread), and the facts are those of its LEIR
form.
"""

from __future__ import annotations

import time

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import suggestions, trajectory
from leir_server.requests import BUDGET_S, off_loop

#: Steps explained in one hover (the best-ranked at the cursor).
MAX_STEPS = 3
#: After this long, steps past the first are named, not explained: each
#: explanation analyses the whole program the step would produce (under a
#: millisecond on the examples, 6-10 ms on a 1,000-line file), and a hover
#: should answer within 50 ms. The code-action menu lists them all.
EXPLAIN_BUDGET_S = 0.025


def _leir_offsets(snapshot, offset: int):
    """(analysis, LEIR offsets) for a cursor: the document's own program and
    offset, or a Python kernel's LEIR form and the offsets the cursor
    selects there."""
    if snapshot.language == "leir":
        doc = snapshot.leir
        if doc is None or not doc.ok:
            return None, []
        return doc.analysis, [offset]
    from leir.tools.suggest import kernel_at
    from leir.transforms import TransformError

    try:
        k = kernel_at(snapshot.text, None, offset)
    except TransformError:
        return None, []
    return k.ctx.analysis, k.leir_offsets(offset)


def _step_text(server, analysis, s, language: str, lookup) -> str:
    from leir.explain import describe_step

    target = server.session.settings.target
    measured = None
    if s.before is not None and s.after is not None and s.before.median_ms and s.after.median_ms:
        measured = (s.before.median_ms, s.after.median_ms)
    after = None
    if language == "leir" and lookup is not None and lookup.outcomes is not None:
        after = lookup.outcomes.after(analysis, s.step)
    if language == "leir":
        text = describe_step(analysis, s.step, after=after, measured=measured, target=target,
                             device=s.before.device if s.before is not None else None)
    else:  # the step names the kernel's TIR blocks: say what the ranking computed
        text = f"**{s.step.id}**"
        if s.facts:
            text += "\n" + "\n".join(f"- {fact}" for fact in s.facts)
        if measured is not None:
            text += (f"\n- measured {suggestions.latency_text(measured[0])} -> {suggestions.latency_text(measured[1])}"
                     f" ({measured[0] / measured[1]:.2f}x) on {s.before.target}, {s.before.device}")
    return f"### {s.label}\n{text}"


def hover_markdown(server, snapshot, offset: int) -> str | None:
    """The hover text at ``offset`` (blocking; in a thread)."""
    from leir import explain

    started = time.perf_counter()
    analysis, offsets = _leir_offsets(snapshot, offset)
    if analysis is None:
        return None
    target = server.session.settings.target
    parts: list[str] = []
    for at in offsets[:1]:
        for describe in (explain.describe_access, explain.describe_loop):
            text = describe(analysis, at=at, target=target)
            if text:
                parts.append(text)
                break
    from leir.tools.ranking import SEARCHED

    # Hover explains the loop and memory steps that act on what is under the
    # cursor (the ones that change latency; the menu offers the rest too).
    from leir.cancel import Cancelled

    try:
        found = suggestions.compute(server, snapshot, offset, None, only=SEARCHED)
    except Cancelled as e:  # over budget: answer with the facts
        if e.reason != "over budget" or not parts:
            raise
        found = []
    on_target = [s for s in found if s.span is not None and s.span.contains(offset)][:MAX_STEPS]
    if on_target:
        lookup = suggestions.workers_of(server).lookup()
        explained, named = [], []
        for s in on_target:
            if explained and time.perf_counter() - started > EXPLAIN_BUDGET_S:
                named.append(s.label)
            else:
                explained.append(_step_text(server, analysis, s, snapshot.language, lookup))
        if named:
            explained.append("Also offered here: " + "; ".join(f"**{label}**" for label in named)
                             + " (the code-action menu applies them)")
        parts.append("\n\n".join(explained))
    before = on_target[0].before if on_target else None
    if before is not None and before.median_ms:
        parts.append(f"current program: {suggestions.latency_text(before.median_ms)} on {before.target} "
                     f"({before.device}), measured {before.runs} runs")
    return "\n\n---\n\n".join(parts) if parts else None


async def handle(server: LanguageServer, params: types.HoverParams) -> types.Hover | None:
    snapshot = server.session.snapshot(params.text_document.uri)
    if snapshot is None or snapshot.too_large:
        return None
    trajectory.confirm(server, snapshot.uri)
    offset = snapshot.offset(params.position)
    # Past its budget a hover answers with the facts it has, or nothing.
    text = await off_loop(snapshot, hover_markdown, server, snapshot, offset, budget_s=BUDGET_S["hover"],
                          what="hover", on_budget=lambda: None)
    if text is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

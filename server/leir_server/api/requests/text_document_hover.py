"""``textDocument/hover``: what the analysis knows about the loop or tensor
access under the cursor, and why the steps offered there should help, with
their measured latencies when the cache has them.

Facts and reasoning come from ``leir.explain`` (computed from the syntax
tree and the analysis), put into words by ``leir.explain.editor``;
latencies from the measurement cache. Hover never builds, runs or measures
anything. In a Python file the kernel is parsed by TVM and raised to LEIR
(in a thread), and the facts are those of its LEIR form.
"""

from __future__ import annotations

import time

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import suggestions
from leir_server.schedule import Background

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


def hover_markdown(server, snapshot, offset: int) -> str | None:
    """The hover text at ``offset`` (blocking; in a thread)."""
    from leir.explain import editor  # leir.explain: the first request pays for it, not the start-up

    started = time.perf_counter()
    analysis, offsets = _leir_offsets(snapshot, offset)
    if analysis is None:
        return None
    target = server.session.settings.target
    facts = editor.cursor_facts(analysis, offsets, target)
    from leir.tools.ranking import SEARCHED

    # Hover explains the loop and memory steps that act on what is under the
    # cursor (the ones that change latency; the menu offers the rest too).
    from leir.cancel import Cancelled

    try:
        found = suggestions.compute(server, snapshot, offset, None, only=SEARCHED)
    except Cancelled as e:  # over budget: answer with the facts
        if e.reason != "over budget" or not facts:
            raise
        found = []
    on_target = [s for s in found if s.span is not None and s.span.contains(offset)][:MAX_STEPS]
    lookup = server.session.workers.lookup() if on_target else None
    return editor.hover_text(facts, analysis, on_target, snapshot.language, target, lookup,
                              started=started, budget_s=EXPLAIN_BUDGET_S)


async def handle(server: LanguageServer, params: types.HoverParams, request: Background) -> types.Hover | None:
    snapshot = request.snapshot
    if snapshot is None or snapshot.too_large:
        return None
    offset = snapshot.offset(params.position)
    # Past its budget a hover answers with the facts it has, or nothing.
    text = await request.run(hover_markdown, server, snapshot, offset, what="hover", on_budget=lambda: None)
    if text is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

"""``textDocument/didSave``: with ``autoMeasure`` on, measure the program
and its top suggestions in the background (``auto_measure``); with
``suggestionsOnSave`` on, publish the top suggestions of the saved document
as Hint diagnostics, for editors without a code-action menu. The hints sit
in ``Session.hints`` and go out with the document's own diagnostics
(``diagnostics.republish``) until the next change drops them.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import auto_measure, diagnostics, suggestions

OPTIONS = types.SaveOptions(include_text=False)

#: Hints published per save.
MAX_HINTS = 3


def hint(snapshot, s) -> types.Diagnostic:
    from leir.ast import Span

    message = f"leir suggests: {s.label}"
    if s.facts:
        message += f" ({'; '.join(s.facts)})"
    return types.Diagnostic(
        range=snapshot.range(s.span if s.span is not None else Span(0, 0)),
        message=message,
        severity=types.DiagnosticSeverity.Hint,
        source="leir",
        code=s.step.id,
        data={"uri": snapshot.uri, "version": snapshot.version, "kernel": s.kernel, "step": s.step.to_json()},
    )


def _top(server, snapshot) -> list:
    """The best suggestions of the whole document (each kernel of a Python file)."""
    from leir.tools.suggest import order

    if snapshot.language == "leir":
        return suggestions.compute(server, snapshot, None, MAX_HINTS)
    found = []
    for kernel, _ in suggestions.kernel_names(snapshot):
        found.extend(suggestions.compute(server, snapshot, None, MAX_HINTS, kernel=kernel))
    return order(found)[:MAX_HINTS]


async def handle(server: LanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    uri = params.text_document.uri
    snapshot = server.session.snapshot(uri)  # records a resolved step whose edit the saved text shows
    auto_measure.schedule(server, uri)
    if not server.session.settings.suggestions_on_save:
        return
    if snapshot is None:
        return
    found = await asyncio.to_thread(_top, server, snapshot)
    if not server.session.is_current(uri, snapshot.version):
        return  # changed meanwhile: these suggestions are for an old text
    server.session.hints[uri] = [hint(snapshot, s) for s in found]
    diagnostics.republish(server, uri)

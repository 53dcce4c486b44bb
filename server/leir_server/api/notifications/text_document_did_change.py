"""``textDocument/didChange``: pygls has applied the edits (incremental
sync) to its copy of the text; what is left is to drop the hints published
for the previous version, record a resolved step whose edit the new text
shows (``Session.change``), and check the new version once typing pauses."""

from __future__ import annotations

from lsprotocol import types

from leir_server import diagnostics, suggestions


def handle(server, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    if uri not in server.session.languages:
        return
    server.session.change(uri)  # the old text's hints go; a resolved step's edit, now in the text, is recorded
    diagnostics.schedule(server, uri)
    suggestions.queue_ranking(server, uri)  # the model ranks the new version in the background, when enabled

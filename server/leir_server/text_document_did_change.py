"""``textDocument/didChange``: pygls has applied the edits (incremental
sync) to its copy of the text; what is left is to drop the hints published
for the previous version and check the new one once typing pauses."""

from __future__ import annotations

from lsprotocol import types

from leir_server import diagnostics, trajectory


def handle(server, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    if uri not in server.session.languages:
        return
    server.session.hints.pop(uri, None)  # they were computed on the old text
    trajectory.confirm(server, uri)  # a resolved step's edit, now in the text: record the step
    diagnostics.schedule(server, uri)

"""``textDocument/didClose``: forget the document and clear its
diagnostics in the editor."""

from __future__ import annotations

from lsprotocol import types

from leir_server import diagnostics


def handle(server, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    if uri not in server.session.languages:
        return
    server.session.close(uri)
    model = server.session.workers.model
    if model is not None:
        model.forget(uri)
    diagnostics.clear(server, uri)

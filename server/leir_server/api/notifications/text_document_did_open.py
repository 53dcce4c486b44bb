"""``textDocument/didOpen``: serve a ``.leir`` or Python document and check
it. pygls has already put the text in its workspace; documents in any
other language are left alone."""

from __future__ import annotations

from lsprotocol import types

from leir_server import diagnostics, suggestions


def handle(server, params: types.DidOpenTextDocumentParams) -> None:
    document = params.text_document
    server.session.open(document.uri, document.language_id)
    if document.uri in server.session.languages:
        diagnostics.schedule(server, document.uri)
        suggestions.queue_ranking(server, document.uri)  # the model ranks it in the background, when enabled

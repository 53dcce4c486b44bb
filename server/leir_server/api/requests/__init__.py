"""The LSP requests the server answers, one module per method, named after
it (``textDocument/hover``: ``text_document_hover.py``). Where each runs is
in ``leir_server.api.HANDLERS``."""

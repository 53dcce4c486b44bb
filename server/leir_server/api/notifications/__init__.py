"""The LSP notifications the server handles, one module per method, named
after it (``textDocument/didOpen``: ``text_document_did_open.py``). Where
each runs is in ``leir_server.api.HANDLERS``."""

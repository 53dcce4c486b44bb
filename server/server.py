"""The leir-lsp language server object and the table of what it answers.

pygls itself answers the lifecycle requests: ``initialize`` (with the
capabilities implied by the handlers registered here, and ``serverInfo``),
``shutdown`` and ``exit``; it also applies document-sync edits to its
workspace before our sync handlers run. Every other LSP method gets one
module in this package with a ``handle(server, params)`` function and, where
the method has registration options, an ``OPTIONS`` value; ``HANDLERS``
lists them all, in one place.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import initialized
from leir_server.session import Session

SERVER_NAME = "leir-lsp"

#: LSP method -> the module that handles it, in the order they are registered.
HANDLERS: dict[str, ModuleType] = {
    types.INITIALIZED: initialized,
}


class LeirServer(LanguageServer):
    """A pygls server with the leir session attached."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.session = Session(self)


def server_version() -> str:
    """The installed distribution's version, as ``serverInfo.version`` reports it."""
    try:
        return version(SERVER_NAME)
    except PackageNotFoundError:
        # Imported from a source tree that was never installed.
        return "0+unknown"


def build_server() -> LeirServer:
    """A server with every handler in ``HANDLERS`` registered, not yet started."""
    server = LeirServer(SERVER_NAME, server_version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
    for method, module in HANDLERS.items():
        server.feature(method, getattr(module, "OPTIONS", None))(module.handle)
    return server

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

import functools
import inspect
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

from leir_server import (
    code_action_resolve,
    initialize,
    initialized,
    shutdown,
    text_document_code_action,
    text_document_code_lens,
    text_document_did_change,
    text_document_did_close,
    text_document_did_open,
    text_document_did_save,
    text_document_document_symbol,
    text_document_folding_range,
    text_document_formatting,
    text_document_hover,
    text_document_semantic_tokens_full,
    workspace_did_change_configuration,
    workspace_execute_command,
)
from leir_server.protocol import LeirProtocol, report_unreadable_body
from leir_server.session import Session

SERVER_NAME = "leir-lsp"

#: LSP method -> the module that handles it, in the order they are registered.
HANDLERS: dict[str, ModuleType] = {
    types.INITIALIZE: initialize,
    types.INITIALIZED: initialized,
    types.SHUTDOWN: shutdown,
    types.WORKSPACE_DID_CHANGE_CONFIGURATION: workspace_did_change_configuration,
    types.TEXT_DOCUMENT_DID_OPEN: text_document_did_open,
    types.TEXT_DOCUMENT_DID_CHANGE: text_document_did_change,
    types.TEXT_DOCUMENT_DID_CLOSE: text_document_did_close,
    types.TEXT_DOCUMENT_DOCUMENT_SYMBOL: text_document_document_symbol,
    types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL: text_document_semantic_tokens_full,
    types.TEXT_DOCUMENT_FORMATTING: text_document_formatting,
    types.TEXT_DOCUMENT_FOLDING_RANGE: text_document_folding_range,
    types.TEXT_DOCUMENT_DID_SAVE: text_document_did_save,
    types.TEXT_DOCUMENT_HOVER: text_document_hover,
    types.TEXT_DOCUMENT_CODE_ACTION: text_document_code_action,
    types.CODE_ACTION_RESOLVE: code_action_resolve,
    types.TEXT_DOCUMENT_CODE_LENS: text_document_code_lens,
}


class LeirServer(LanguageServer):
    """A pygls server with the leir session attached."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("protocol_cls", LeirProtocol)  # answers what it cannot read
        super().__init__(*args, **kwargs)
        self.session = Session(self)

    def report_server_error(self, error: Exception, source) -> None:
        # A body that is not UTF-8 or not JSON is the client's mistake: a
        # warning in its log (and an error answer when it was a request),
        # not an "Error in server" pop-up.
        if source is JsonRpcException and report_unreadable_body(self, error):
            return
        super().report_server_error(error, source)


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
        server.feature(method, getattr(module, "OPTIONS", None))(_bound(module.handle, server))
    # workspace/executeCommand is answered by pygls, which calls one handler per command.
    workspace_execute_command.register(server)
    return server


def _bound(handle, server: LeirServer):
    """``handle(server, params)`` as the one-argument handler pygls calls.
    (pygls passes the server itself only to a first parameter named ``ls``
    or annotated with the server's class; binding it here lets every handler
    name it ``server`` without an annotation.)"""
    if inspect.iscoroutinefunction(handle):
        async def bound_async(params):
            return await handle(server, params)

        return functools.update_wrapper(bound_async, handle, assigned=("__module__", "__name__", "__doc__"))

    def bound(params):
        return handle(server, params)

    return functools.update_wrapper(bound, handle, assigned=("__module__", "__name__", "__doc__"))

"""What the server answers, one module per LSP method, and where each
handler runs.

Requests are in ``requests/``, notifications in ``notifications/``, the
``workspace/executeCommand`` commands in ``commands/``. ``HANDLERS`` maps
each method to its module and its ``Schedule`` (``leir_server.schedule``);
``register`` is the one place that turns a schedule into how pygls calls
the handler:

- ``SYNC``: ``handle(server, params)``, called on the protocol loop as the
  message is read (pygls calls a plain function inline);
- ``LOOP``: ``async def handle(server, params)``, a task on the protocol
  loop;
- ``BACKGROUND``: ``async def handle(server, params, request)``, a task on
  the protocol loop that has been given ``request``, a
  ``schedule.Background``: the snapshot of ``params.text_document``
  (``Session.snapshot``, taken here) and ``request.run``, which runs the
  handler's blocking work in a request thread under the method's budget
  (``schedule.BUDGET_S[budget]``).

A module has, where the method has registration options, an ``OPTIONS``
value. pygls itself answers ``initialize`` (with the capabilities implied by
the handlers registered here, and ``serverInfo``, after our handler) and
``shutdown``; it also applies document-sync edits to its workspace before
our sync handlers run. Every command of ``workspace/executeCommand`` runs on
the loop, as a ``LOOP`` handler does (``requests.workspace_execute_command``).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from lsprotocol import types

from leir_server.api.notifications import (
    initialized,
    text_document_did_change,
    text_document_did_close,
    text_document_did_open,
    text_document_did_save,
    workspace_did_change_configuration,
)
from leir_server.api.requests import (
    code_action_resolve,
    initialize,
    shutdown,
    text_document_code_action,
    text_document_code_lens,
    text_document_document_symbol,
    text_document_folding_range,
    text_document_formatting,
    text_document_hover,
    text_document_semantic_tokens_full,
    workspace_execute_command,
)
from leir_server.schedule import BUDGET_S, Background, Schedule

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

SYNC, LOOP, BACKGROUND = Schedule.SYNC, Schedule.LOOP, Schedule.BACKGROUND


@dataclass(frozen=True)
class Handler:
    """An LSP method's module and where its handler runs; ``budget``: the
    key of a ``BACKGROUND`` request's budget in ``schedule.BUDGET_S``."""

    module: ModuleType
    schedule: Schedule
    budget: str | None = None


#: LSP method -> its handler, in the order they are registered.
HANDLERS: dict[str, Handler] = {
    types.INITIALIZE: Handler(initialize, SYNC),
    types.INITIALIZED: Handler(initialized, LOOP),
    types.SHUTDOWN: Handler(shutdown, LOOP),
    types.WORKSPACE_DID_CHANGE_CONFIGURATION: Handler(workspace_did_change_configuration, LOOP),
    types.TEXT_DOCUMENT_DID_OPEN: Handler(text_document_did_open, SYNC),
    types.TEXT_DOCUMENT_DID_CHANGE: Handler(text_document_did_change, SYNC),
    types.TEXT_DOCUMENT_DID_CLOSE: Handler(text_document_did_close, SYNC),
    types.TEXT_DOCUMENT_DOCUMENT_SYMBOL: Handler(text_document_document_symbol, BACKGROUND, "documentSymbol"),
    types.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL: Handler(text_document_semantic_tokens_full, BACKGROUND, "semanticTokens"),
    types.TEXT_DOCUMENT_FORMATTING: Handler(text_document_formatting, BACKGROUND, "formatting"),
    types.TEXT_DOCUMENT_FOLDING_RANGE: Handler(text_document_folding_range, BACKGROUND, "foldingRange"),
    types.TEXT_DOCUMENT_DID_SAVE: Handler(text_document_did_save, LOOP),
    types.TEXT_DOCUMENT_HOVER: Handler(text_document_hover, BACKGROUND, "hover"),
    types.TEXT_DOCUMENT_CODE_ACTION: Handler(text_document_code_action, BACKGROUND, "codeAction"),
    types.CODE_ACTION_RESOLVE: Handler(code_action_resolve, LOOP),
    types.TEXT_DOCUMENT_CODE_LENS: Handler(text_document_code_lens, BACKGROUND, "codeLens"),
}


def register(server: "LanguageServer") -> None:
    """Register every handler of ``HANDLERS`` and every command with ``server``."""
    for method, handler in HANDLERS.items():
        server.feature(method, getattr(handler.module, "OPTIONS", None))(_scheduled(handler, server))
    # workspace/executeCommand is answered by pygls, which calls one handler per command.
    workspace_execute_command.register(server)


def _scheduled(handler: Handler, server: "LanguageServer"):
    """The module's ``handle`` as the one-argument function pygls calls,
    run where ``handler.schedule`` says. (pygls passes the server itself
    only to a first parameter named ``ls`` or annotated with the server's
    class; binding it here lets every handler name it ``server`` without an
    annotation.)"""
    handle = handler.module.handle
    if inspect.iscoroutinefunction(handle) != (handler.schedule is not SYNC):
        raise TypeError(f"{handler.module.__name__}.handle: a {handler.schedule.value} handler must "
                        f"{'not ' if handler.schedule is SYNC else ''}be a coroutine function")

    if handler.schedule is SYNC:
        def run_now(params):
            return handle(server, params)

        bound = run_now
    elif handler.schedule is LOOP:
        async def run_on_loop(params):
            return await handle(server, params)

        bound = run_on_loop
    else:
        budget_s = BUDGET_S[handler.budget]

        async def run_in_background(params):
            session = server.session
            request = Background(session.snapshot(params.text_document.uri), budget_s, session.request_threads)
            return await handle(server, params, request)

        bound = run_in_background
    return functools.update_wrapper(bound, handle, assigned=("__module__", "__name__", "__doc__"))

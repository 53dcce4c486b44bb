"""Where a handler runs, and every background request's work off the
protocol loop, with a time budget, stopped when it is no longer wanted.

``Schedule`` names the three places; the handler table
(``leir_server.api.HANDLERS``) gives each LSP method one, and
``leir_server.api.register`` is the one place that acts on it:

- ``SYNC``: called on the protocol loop as its message is read, before the
  next one (the document-sync notifications change the session in the
  order they arrive). Never blocks.
- ``LOOP``: a task on the protocol loop that awaits the client, the worker
  processes (``leir_server.workers``) or a thread; it never blocks the loop.
- ``BACKGROUND``: a request that reads one document. Its snapshot is taken
  on the loop, and its work runs with ``await request.run(function, ...)``
  (``Background``) in a request thread, under the method's budget
  (``BUDGET_S``).

``await off_loop(snapshot, function, *args, budget_s=..., what=...,
threads=...)`` runs ``function`` in a thread of ``threads`` (the session's
``request_threads``) under a ``leir.cancel.Token`` that stops it
(``leir.cancel.checkpoint`` in the long loops of the parser, the analysis,
the listing and explaining of steps) when

- the client cancels the request (``$/cancelRequest``: pygls cancels the
  handler's asyncio task; the token is cancelled with it, and pygls answers
  RequestCancelled, -32800);
- a newer version of the document arrives (the snapshot's own token, which
  ``Session`` cancels when it hands out a newer snapshot, and which polls
  ``Session.is_current``): the answer is ContentModified, -32801;
- the budget passes: RequestFailed, -32803, "... took longer than N s".
  A caller that can answer with less passes ``on_budget`` (hover answers
  what it computed so far, or nothing).

The protocol loop never waits on the thread: past the budget (plus
``GRACE_S`` for code that does not reach a checkpoint, such as a wait for
the snapshot's shared parse) the request is answered and the thread's
result, when it comes, is dropped.

The parse and analysis a snapshot shares between requests
(``leir_server.session.snapshot.computed_once``) run under the snapshot's
token, not the request's: one cancelled request does not throw away work
the next request on the same version needs, but a newer version stops it.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pygls.exceptions import JsonRpcException

from leir.cancel import Cancelled, Token, running

if TYPE_CHECKING:
    from leir_server.session.snapshot import DocumentSnapshot

logger = logging.getLogger(__name__)

class Schedule(enum.Enum):
    """Where a handler runs (see the module docstring)."""

    SYNC = "sync"
    LOOP = "loop"
    BACKGROUND = "background"


REQUEST_CANCELLED = -32800
CONTENT_MODIFIED = -32801
REQUEST_FAILED = -32803

_CODES = {"cancelled": REQUEST_CANCELLED, "overtaken": CONTENT_MODIFIED, "over budget": REQUEST_FAILED}
_MESSAGES = {
    "cancelled": "the request was cancelled",
    "overtaken": "the document changed while the request was computed",
    "over budget": "the request took too long and was stopped",
}

#: Budgets, in seconds, per kind of request. Generous: the usual answer
#: takes milliseconds (docs/server.md); these bound a pathological document
#: (100,000 lines, a 200-term equation) so that no request holds a thread
#: for ever.
BUDGET_S = {
    "hover": 2.0,
    "codeAction": 5.0,
    "codeLens": 5.0,
    # Whole-document answers, built once per version (``DocumentSnapshot.once``):
    # past the budget the request fails but the thread finishes the answer
    # for the next request on the same version (a newer version stops it).
    "documentSymbol": 20.0,
    "semanticTokens": 20.0,
    "foldingRange": 20.0,
    "formatting": 20.0,
}
#: The least budget of any request on a Python file: its kernel is parsed by
#: TVM in the parse worker (itself limited to 20 s, leir.bridge.tvmscript.isolated)
#: and raised to LEIR here, which imports TVM the first time (seconds, more
#: on a loaded machine). Still a bound on a hang, not on a slow answer.
TVMSCRIPT_BUDGET_S = 60.0
#: Past the budget, how long the loop still waits for a thread that has not
#: reached a checkpoint before it answers without it.
GRACE_S = 0.25
#: Threads for requests (the session's ``request_threads``): apart from the
#: checks' threads (diagnostics.py) and asyncio's default pool, so that
#: requests stuck behind a slow shared parse never hold up either.
THREADS = 4


class Stopped(JsonRpcException, Cancelled):
    """A request stopped by its token: the LSP error for the reason."""

    def __init__(self, reason: str, message: str | None = None):
        JsonRpcException.__init__(self, message or _MESSAGES.get(reason, reason), code=_CODES.get(reason, REQUEST_FAILED))
        self.reason = reason


def snapshot_token(overtaken: Callable[[], bool] | None) -> Token:
    """The token of one document version: stopped when it is overtaken."""
    return Token(overtaken=overtaken, exception=Stopped)


@dataclass(frozen=True)
class Background:
    """What a ``BACKGROUND`` handler is given besides its params: the
    snapshot of its document (None: not open, or not a document this server
    serves), and ``run``, which runs blocking work in a request thread under
    the method's budget."""

    snapshot: "DocumentSnapshot | None"
    budget_s: float
    threads: Executor

    async def run(self, function: Callable, *args, what: str, on_budget: Callable[[], Any] | None = None) -> Any:
        """``function(*args)`` off the loop (``off_loop``); ``what`` names
        the work in the error past the budget."""
        return await off_loop(self.snapshot, function, *args, budget_s=self.budget_s, what=what,
                              on_budget=on_budget, threads=self.threads)


async def off_loop(snapshot, function: Callable, *args, budget_s: float, what: str,
                   on_budget: Callable[[], Any] | None = None, threads: Executor) -> Any:
    """``function(*args)`` in a thread of ``threads`` under a token with
    this budget, child of the snapshot's token (see the module docstring)."""
    if getattr(snapshot, "language", None) == "tvmscript":
        budget_s = max(budget_s, TVMSCRIPT_BUDGET_S)
    token = Token(deadline=time.monotonic() + budget_s, parent=getattr(snapshot, "cancel_token", None),
                  exception=Stopped)

    def work():
        with running(token):
            token.check()  # overtaken or over budget while queued: do not start
            return function(*args)

    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(threads, context.run, work)
    try:
        return await asyncio.wait_for(asyncio.shield(future), budget_s + GRACE_S)
    except asyncio.CancelledError:
        token.cancel("cancelled")
        raise
    except (asyncio.TimeoutError, TimeoutError):
        token.cancel("over budget")
        future.add_done_callback(_drop)
        if on_budget is not None:
            return on_budget()
        raise Stopped("over budget", f"{what} took longer than {budget_s:g} s and was stopped") from None
    except Stopped as e:
        if e.reason == "over budget" and on_budget is not None:
            return on_budget()
        if e.reason == "over budget":
            raise Stopped("over budget", f"{what} took longer than {budget_s:g} s and was stopped") from None
        raise


def _drop(future) -> None:
    """Read the result of a thread answered without (so that asyncio does
    not log an exception nobody retrieved)."""
    if not future.cancelled():
        error = future.exception()
        if error is not None and not isinstance(error, Cancelled):
            logger.warning("a request stopped past its budget failed afterwards: %r", error)

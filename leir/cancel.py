"""Cooperative cancellation: stop long work from outside the thread doing it.

Work that may take long on a big program (parsing, the analysis, listing
and explaining the steps at a position) calls ``checkpoint()`` in its
loops. Outside a ``running(token)`` block that costs one context-variable
read and does nothing (the command line and the library are unaffected);
inside one, it raises the token's exception once the token is cancelled,
its deadline has passed, or the predicate it watches says the work is no
longer wanted (the document changed).

``asyncio.to_thread`` copies the caller's context into the thread, so a
token set around the call is seen by the code running there.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

#: How often a token asks its ``overtaken`` predicate, at most (seconds).
POLL_S = 0.005


class Cancelled(Exception):
    """Raised by ``checkpoint()``. ``reason`` is "cancelled" (asked to
    stop), "overtaken" (the input changed) or "over budget" (the deadline
    passed)."""

    def __init__(self, reason: str, message: str | None = None):
        super().__init__(message or reason)
        self.reason = reason


class Token:
    """Why work should stop, checked by ``checkpoint()``.

    - ``cancel(reason)`` stops it from any thread;
    - ``deadline``: a ``time.monotonic()`` past which it stops ("over budget");
    - ``overtaken``: a predicate (polled every ``POLL_S`` at most) that says
      the work's input is out of date ("overtaken");
    - ``parent``: another token whose stop stops this one too;
    - ``exception``: what ``check`` raises: a ``Cancelled`` subclass, called
      with the reason.
    """

    def __init__(self, *, deadline: float | None = None, overtaken: Callable[[], bool] | None = None,
                 parent: "Token | None" = None, exception: Callable[[str], BaseException] = Cancelled):
        self.deadline = deadline
        self.overtaken = overtaken
        self.parent = parent
        self.exception = exception
        self._reason: str | None = None
        self._polled = 0.0

    def cancel(self, reason: str = "cancelled") -> None:
        if self._reason is None:
            self._reason = reason

    def reason(self) -> str | None:
        """Why the work should stop, or None while it may go on."""
        if self._reason is not None:
            return self._reason
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline:
            return "over budget"
        if self.overtaken is not None and now - self._polled >= POLL_S:
            self._polled = now
            try:
                gone = self.overtaken()
            except Exception:  # noqa: BLE001 - a broken predicate never stops work
                gone = False
            if gone:
                self._reason = "overtaken"
                return self._reason
        if self.parent is not None:
            return self.parent.reason()
        return None

    def stopping(self) -> "Token":
        """The token whose ``exception`` describes the stop: this one, or the
        parent that stopped."""
        if self._reason is None and self.parent is not None and self.parent.reason() is not None:
            return self.parent.stopping()
        return self

    @property
    def stopped(self) -> bool:
        return self.reason() is not None

    def check(self) -> None:
        reason = self.reason()
        if reason is not None:
            raise self.stopping().exception(reason)


_current: ContextVar[Token | None] = ContextVar("leir_cancel_token", default=None)


def checkpoint() -> None:
    """Raise if the current token says stop; nothing outside ``running``."""
    token = _current.get()
    if token is not None:
        token.check()


def current() -> Token | None:
    return _current.get()


@contextmanager
def running(token: Token | None) -> Iterator[Token | None]:
    """Run the block under ``token`` (None: under no token at all, for work
    shared by several requests that none of them may stop alone)."""
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)

"""``DocumentSnapshot``: one version of one document, immutable, and what is
computed from it.

Requests (hover, code actions, commands) take a snapshot from the session
(``Session.snapshot``) and work on that alone, possibly in the background:
an edit computed on version N is never applied to version N+1
(``Session.is_current`` is the check).

A snapshot computes what a request needs (the parse, the checks, the LEIR
analysis) once, on first use, and keeps it: every request on one version of
a document shares that work. ``Session.snapshot`` hands out the same object
for the same (uri, version).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlparse

from lsprotocol import types

if TYPE_CHECKING:  # imported lazily: the server must answer initialize fast
    from leir.diagnostics import SourceText
    from leir.bridge.document import CheckedFile, LeirDocument
    from leir.bridge.tvmscript.discovery import KernelSource


def language_of(uri: str, language_id: str | None = None) -> str | None:
    """"leir", "tvmscript" or None (a document this server does not serve)."""
    if language_id == "leir" or uri.endswith(".leir"):
        return "leir"
    if language_id == "python" or uri.endswith((".py", ".pyi")):
        return "tvmscript"
    return None


def uri_to_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path)


class computed_once:
    """``functools.cached_property`` with one lock per snapshot and
    attribute. (Python 3.11's has one lock per attribute for every instance:
    one Python document's check, seconds of TVM, would hold up the checks
    and requests of every other document.)

    The value is computed under the snapshot's cancellation token
    (``DocumentSnapshot.cancel_token``), not the token of the request that
    happened to ask first: every request on the version shares it, so only
    a newer version stops it. A request waiting for another thread's
    computation still checks its own token meanwhile (``leir.cancel``), so
    a cancelled or over-budget request stops waiting."""

    #: How often a waiting request checks its own token, in seconds.
    WAIT_POLL_S = 0.02

    def __init__(self, func):
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        values = instance.__dict__  # once set, found there before this descriptor
        if self.name in values:
            return values[self.name]
        from leir import cancel

        locks = values.setdefault("_computing", {})  # dict.setdefault is atomic
        lock = locks.setdefault(self.name, threading.Lock())
        while not lock.acquire(timeout=self.WAIT_POLL_S):
            cancel.checkpoint()  # the waiting request's own token
        try:
            if self.name not in values:
                with cancel.running(getattr(instance, "cancel_token", None)):
                    values[self.name] = self.func(instance)
        finally:
            lock.release()
        return values[self.name]


@dataclass(frozen=True, eq=False)
class DocumentSnapshot:
    """One version of one document, and what is computed from it (lazily,
    once). Never changes: requests may read it from any thread."""

    uri: str
    version: int | None
    text: str
    language: str  # "leir" or "tvmscript"
    #: Whether this version is no longer the document's current one
    #: (``Session`` sets it; None: never overtaken, as in tests).
    overtaken: Callable[[], bool] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        from leir_server.schedule import snapshot_token

        #: Stops the work on this version once it is overtaken (a newer
        #: version, or the document closed): ``leir.cancel.checkpoint`` then
        #: raises ContentModified (``leir_server.schedule.Stopped``).
        object.__setattr__(self, "cancel_token", snapshot_token(self.overtaken))

    @computed_once
    def source(self) -> "SourceText":
        from leir.diagnostics import SourceText

        return SourceText(self.text)

    @computed_once
    def too_large(self) -> bool:
        from leir.bridge.document import MAX_DOCUMENT_BYTES

        return len(self.text) > MAX_DOCUMENT_BYTES

    @computed_once
    def checked(self) -> "CheckedFile":
        """Parse and checks of the whole document (either language). For a
        Python file this imports TVM (seconds, the first time) and parses the
        kernels only after screening them: nothing in the file runs."""
        from leir.diagnostics import error
        from leir.bridge.document import CheckedFile, MAX_DOCUMENT_BYTES, check_text

        if self.too_large:
            return CheckedFile(self.text, self.source, [error(
                _whole(self.text), "document-too-large",
                f"{len(self.text)} characters is more than the {MAX_DOCUMENT_BYTES} leir checks; not checked")])
        if self.language == "leir":  # what check_text does, sharing the parse with ``leir``
            doc = self.leir
            return CheckedFile(self.text, doc.source, doc.diagnostics)
        return check_text(self.text, self.language)

    @computed_once
    def kernels(self) -> "list[KernelSource]":
        """The TVMScript kernels of a Python document, read from its syntax
        tree (no TVM import, nothing runs); [] for a ``.leir`` document."""
        if self.language != "tvmscript" or self.too_large:
            return []
        from leir.bridge.tvmscript.discovery import find_kernels

        return find_kernels(self.text)[0]

    @computed_once
    def leir(self) -> "LeirDocument | None":
        """The parsed and analysed LEIR program of a ``.leir`` document."""
        if self.language != "leir" or self.too_large:
            return None
        from leir.bridge.document import load_leir

        return load_leir(self.text)

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per snapshot and ``key``, shared by every
        request on this version (an outline or the semantic tokens of a
        100,000-line file take seconds to build), computed under the
        snapshot's token as ``computed_once`` values are."""
        from leir import cancel

        values = self.__dict__.setdefault("_once", {})
        if key in values:
            return values[key]
        locks = self.__dict__.setdefault("_once_locks", {})
        lock = locks.setdefault(key, threading.Lock())
        while not lock.acquire(timeout=computed_once.WAIT_POLL_S):
            cancel.checkpoint()
        try:
            if key not in values:
                with cancel.running(self.cancel_token):
                    values[key] = compute()
        finally:
            lock.release()
        return values[key]

    # ---- positions: LSP speaks UTF-16 code units, leir character offsets

    def offset(self, position: types.Position) -> int:
        """Character offset of an LSP position, clamped into the text (a
        position past the end is the end)."""
        return self.source.offset_utf16(max(0, position.line), max(0, position.character))

    def position(self, offset: int) -> types.Position:
        line, character = self.source.position_utf16(offset)
        return types.Position(line=line, character=character)

    def range(self, span) -> types.Range:
        """The LSP range of a leir ``Span``."""
        return types.Range(start=self.position(span.start), end=self.position(span.end))

    def whole_range(self) -> types.Range:
        return types.Range(start=self.position(0), end=self.position(len(self.text)))


def _whole(text: str):
    from leir.ast import Span

    return Span(0, min(len(text), 1))

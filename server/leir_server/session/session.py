"""The server's state: one mutable ``Session``, read through immutable
``DocumentSnapshot``s.

Document-sync notifications (``didOpen``/``didChange``/``didClose``) change
the session, in the order they arrive; pygls applies the text edits to its
workspace before our handlers run. Requests take a snapshot of one version
of one document (``Session.snapshot``) and work on that alone.

Everything the server changes while it runs is a field of ``Session``: the
settings, the documents it serves, their diagnostics and hints, the checks
and background measurements under way, the thread pools and worker
processes, and the steps applied to each kernel.

The steps applied through this server (``Session.trajectory``) are recorded
when their edit is seen in the document. ``codeAction/resolve`` (and
``leir.optimize`` with ``apply``) only hands the client an edit; the client
may apply it or not. So a resolved step is *expected* (``Session.expect``):
it is recorded once the document's text is seen to equal the edited text
(the client applied it). The server looks whenever it takes a snapshot of
the document (``Session.snapshot``: for a check, a request, a save, a
command) and on each ``didChange`` that comes while a step is expected (the
edit arrives as one; ``Session.change``). Text equal to the edit's result
that the user typed by hand would count too; the record never has a step
whose edit the document did not show.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from leir_server.schedule import THREADS
from leir_server.session.settings import Settings
from leir_server.session.snapshot import DocumentSnapshot, language_of
from leir_server.workers import Workers

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

#: Resolved-but-unseen edits kept per document (older ones are dropped).
MAX_EXPECTED = 16


@dataclass(frozen=True)
class Expected:
    """Steps to record for ``(uri, kernel)`` once the document reads ``text``."""

    text: str
    kernel: str | None
    entries: tuple[dict, ...]


@dataclass
class Session:
    """What the server knows beyond the documents' text (which pygls's
    workspace holds): settings, the steps applied per kernel, the snapshot
    of each open document's current version, and the work under way."""

    server: "LanguageServer"
    settings: Settings = field(default_factory=Settings)
    #: False when the client says the workspace is not trusted
    #: (``initializationOptions.trusted``): then nothing is compiled or run
    #: (no verification, measurement or search); parsing, checks, hover and
    #: conversion still work.
    trusted: bool = True
    #: True while the client's settings are being read after ``initialized``:
    #: the defaults are not the user's yet, so nothing they decide (the
    #: model worker) starts until they are known.
    settings_pending: bool = False
    #: Language of each open document, from didOpen's languageId.
    languages: dict[str, str] = field(default_factory=dict)
    #: (uri, kernel or "") -> the steps applied through this server, in
    #: order, each a JSON object (id, args, title, latency_before_ms,
    #: latency_after_ms, speedup, reasoning).
    trajectories: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    #: uri -> the steps resolved for it but not yet seen in its text
    #: (``expect``; recorded by ``snapshot``).
    expected: dict[str, list[Expected]] = field(default_factory=dict)
    #: uri -> Hint diagnostics (the top suggestions, filled on save when
    #: ``suggestions_on_save`` is set); published after the document's own
    #: diagnostics until the next change clears them.
    hints: dict[str, list[types.Diagnostic]] = field(default_factory=dict)
    #: uri -> (version, diagnostics) last published from the checks, so that
    #: new hints can be published without checking again.
    published: dict[str, tuple[int | None, list[types.Diagnostic]]] = field(default_factory=dict)
    #: uri -> the pending (debounced) check and publish of that document.
    checks: dict[str, Any] = field(default_factory=dict)
    #: language -> the one thread that checks documents of that language
    #: (``leir_server.diagnostics``), created on first use.
    check_threads: dict[str, ThreadPoolExecutor] = field(default_factory=dict)
    #: The threads that run requests' work (``leir_server.schedule``): apart
    #: from the checks' threads and asyncio's default pool, so that requests
    #: stuck behind a slow shared parse never hold up either. (A pool starts
    #: its threads on first use.)
    request_threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="leir-request"))
    #: uri -> the running ``autoMeasure`` task of that document
    #: (``leir_server.auto_measure``).
    auto_measures: dict[str, Any] = field(default_factory=dict)
    #: The job processes, the measurement engine and the running optimize
    #: searches (``leir_server.workers``); each starts on first use.
    workers: Workers = field(init=False)
    _snapshots: dict[str, DocumentSnapshot] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.workers = Workers(self.server)

    # ---- document sync

    def open(self, uri: str, language_id: str | None) -> None:
        language = language_of(uri, language_id)
        if language is not None:
            self.languages[uri] = language

    def change(self, uri: str) -> None:
        """A new version of ``uri`` arrived: the hints computed on the old
        text go, and a step whose edit the new text shows is recorded."""
        self.hints.pop(uri, None)
        if self.expected.get(uri):
            self.snapshot(uri)  # records it; with nothing expected, the first reader takes the snapshot

    def close(self, uri: str) -> None:
        self.languages.pop(uri, None)
        self.hints.pop(uri, None)
        self.published.pop(uri, None)
        with self._lock:
            old = self._snapshots.pop(uri, None)
        if old is not None:
            old.cancel_token.cancel("overtaken")

    # ---- snapshots

    def snapshot(self, uri: str) -> DocumentSnapshot | None:
        """The current version of an open document this server serves, or
        None (not open, or not a LEIR/TVMScript document). Records the
        expected steps whose edit this version shows (``expect``)."""
        snap = self._current(uri)
        self._confirm(uri, snap)
        return snap

    def _current(self, uri: str) -> DocumentSnapshot | None:
        language = self.languages.get(uri)
        if language is None:
            return None
        doc = self.server.workspace.get_text_document(uri)
        version, text = doc.version, doc.source
        old = None
        with self._lock:
            snap = self._snapshots.get(uri)
            if snap is None or snap.version != version or snap.text is not text and snap.text != text:
                old = snap
                snap = DocumentSnapshot(uri, version, text, language,
                                        overtaken=lambda: not self.is_current(uri, version))
                self._snapshots[uri] = snap
        if old is not None:
            old.cancel_token.cancel("overtaken")  # its checks and requests stop at their next checkpoint
        return snap

    def is_current(self, uri: str, version: int | None) -> bool:
        """Whether ``version`` is still the open version of ``uri``."""
        if uri not in self.languages:
            return False
        return self.server.workspace.get_text_document(uri).version == version

    # ---- the steps applied through this server

    def trajectory(self, uri: str, kernel: str | None) -> list[dict]:
        return self.trajectories.setdefault((uri, kernel or ""), [])

    def expect(self, uri: str, text: str, kernel: str | None, entries: list[dict]) -> None:
        """Record ``entries`` for ``(uri, kernel)`` when ``uri`` reads ``text``."""
        pending = self.expected.setdefault(uri, [])
        pending.append(Expected(text, kernel, tuple(entries)))
        del pending[:-MAX_EXPECTED]

    def _confirm(self, uri: str, snapshot: DocumentSnapshot | None) -> None:
        """Record the expected steps whose edit ``snapshot``, the document's
        current version, shows; forget them when the document is closed."""
        pending = self.expected.get(uri)
        if not pending:
            return
        if snapshot is None:
            self.expected.pop(uri, None)
            return
        for k, e in enumerate(pending):
            if e.text == snapshot.text:
                self.trajectory(uri, e.kernel).extend(e.entries)
                # Edits resolved before this one can no longer be applied cleanly.
                del pending[: k + 1]
                return

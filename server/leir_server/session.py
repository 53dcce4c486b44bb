"""The server's state: one mutable ``Session``, read through immutable
``DocumentSnapshot``s.

Document-sync notifications (``didOpen``/``didChange``/``didClose``) change
the session, in the order they arrive; pygls applies the text edits to its
workspace before our handlers run. Requests (hover, code actions, commands)
take a ``DocumentSnapshot`` of one version of one document and work on that
alone, possibly in the background: an edit computed on version N is never
applied to version N+1 (``Session.is_current`` is the check).

A snapshot computes what a request needs (the parse, the checks, the LEIR
analysis) once, on first use, and keeps it: every request on one version of
a document shares that work. ``Session.snapshot`` hands out the same object
for the same (uri, version).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlparse

from lsprotocol import types

from leir.bridge.targets import TARGETS as BUILD_TARGETS

if TYPE_CHECKING:  # imported lazily: the server must answer initialize fast
    from pygls.lsp.server import LanguageServer

    from leir.diagnostics import SourceText
    from leir.bridge.document import CheckedFile, LeirDocument
    from leir.bridge.tvmscript.discovery import KernelSource

logger = logging.getLogger(__name__)

#: The ``workspace/configuration`` section the server reads.
CONFIG_SECTION = "leir"

#: The targets a program is built for, and "rpc": a device behind a TVM RPC tracker.
TARGETS = (*BUILD_TARGETS, "rpc")


@dataclass(frozen=True)
class Settings:
    """The ``leir`` configuration section, with the defaults an editor gets
    when it sends none."""

    #: Where kernels are measured: this CPU, this machine's NVIDIA GPU, or
    #: devices behind an RPC tracker (``rpc_tracker`` and ``rpc_key``).
    target: str = "llvm"
    rpc_tracker: str = ""  # HOST:PORT
    rpc_key: str = ""
    #: Measure the top suggestions in the background after a change. Off by
    #: default: measuring keeps a core busy, which a laptop user notices.
    auto_measure: bool = False
    #: Most measurements one "optimize" command may spend.
    measurement_budget: int = 24
    #: Rank suggestions with the local model (when one is installed).
    model_enabled: bool = True
    #: Publish the top suggestions on save as Hint diagnostics, for editors
    #: without a code-action menu.
    suggestions_on_save: bool = False
    #: Programs whose memory exceeds it (MB) are refused before anything is
    #: built (``leir.footprint``); None: the default (1000 MB).
    memory_budget_mb: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> tuple["Settings", list[str]]:
        """Settings from a client's section (camelCase keys as VS Code sends
        them), and one message per value that was ignored and why. Unknown
        keys are ignored silently: a newer client may send more."""
        problems: list[str] = []
        if data is None:
            return cls(), problems
        if not isinstance(data, dict):
            return cls(), [f"the '{CONFIG_SECTION}' settings should be an object, got {type(data).__name__}"]
        values: dict[str, Any] = {}

        def take(key: str, attr: str, kind: type, check=None, why: str = "") -> None:
            if key not in data or data[key] is None:
                return
            value = data[key]
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if ok and check is not None:
                ok = check(value)
            if ok:
                values[attr] = value
            else:
                problems.append(f"{CONFIG_SECTION}.{key}: ignored {value!r} ({why or f'expected {kind.__name__}'})")

        take("target", "target", str, lambda v: v in TARGETS, f"expected one of {', '.join(TARGETS)}")
        rpc = data.get("rpc")
        if isinstance(rpc, dict):  # nested form {"rpc": {"tracker": ..., "key": ...}}
            data = {**data, "rpcTracker": rpc.get("tracker"), "rpcKey": rpc.get("key")}
        take("rpcTracker", "rpc_tracker", str, _is_host_port, "expected HOST:PORT")
        take("rpcKey", "rpc_key", str)
        take("autoMeasure", "auto_measure", bool)
        from leir.tools.optimize import MIN_BUDGET  # no TVM or NumPy; read after the initialize reply

        take("measurementBudget", "measurement_budget", int, lambda v: MIN_BUDGET <= v <= 10_000,
             f"expected a whole number from {MIN_BUDGET} to 10000: the start, a candidate and its paired confirmation")
        model = data.get("model")
        if isinstance(model, dict) and "enabled" in model:
            data = {**data, "modelEnabled": model.get("enabled")}
        take("modelEnabled", "model_enabled", bool)
        take("suggestionsOnSave", "suggestions_on_save", bool)
        take("memoryBudgetMB", "memory_budget_mb", (int, float), lambda v: not isinstance(v, bool) and 1 <= v <= 10**7,
             "expected a number of megabytes from 1 to 10000000")
        settings = cls(**values)
        if settings.target == "rpc" and not (settings.rpc_tracker and settings.rpc_key):
            problems.append(f"{CONFIG_SECTION}.target is rpc but rpcTracker and rpcKey are not both set; using llvm")
            settings = cls(**{**values, "target": "llvm"})
        return settings, problems

    @property
    def measure_target(self):
        """What ``leir.measure.MeasurementEngine`` takes: "llvm", "cuda" or
        an ``RPC``."""
        if self.target != "rpc":
            return self.target
        from leir.measure.rpc import RPC

        host, _, port = self.rpc_tracker.rpartition(":")
        return RPC(host, int(port), self.rpc_key)


def _is_host_port(text: str) -> bool:
    host, colon, port = text.rpartition(":")
    return bool(colon and host and port.isdigit() and 1 <= int(port) <= 65535)


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
        from leir_server.requests import snapshot_token

        #: Stops the work on this version once it is overtaken (a newer
        #: version, or the document closed): ``leir.cancel.checkpoint`` then
        #: raises ContentModified (``leir_server.requests.Stopped``).
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


@dataclass
class Session:
    """What the server knows beyond the documents' text (which pygls's
    workspace holds): settings, the steps applied per kernel, and the
    snapshot of each open document's current version."""

    server: "LanguageServer"
    settings: Settings = field(default_factory=Settings)
    #: False when the client says the workspace is not trusted
    #: (``initializationOptions.trusted``): then nothing is compiled or run
    #: (no verification, measurement or search); parsing, checks, hover and
    #: conversion still work.
    trusted: bool = True
    #: Language of each open document, from didOpen's languageId.
    languages: dict[str, str] = field(default_factory=dict)
    #: (uri, kernel or "") -> the steps applied through this server, in
    #: order, each a JSON object (id, args, title, latency_before_ms,
    #: latency_after_ms, speedup, reasoning).
    trajectories: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
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
    check_threads: dict[str, Any] = field(default_factory=dict)
    #: uri -> the running ``autoMeasure`` task of that document
    #: (``leir_server.auto_measure``).
    auto_measures: dict[str, Any] = field(default_factory=dict)
    #: uri -> trajectory entries waiting for the document to read a given
    #: text (``leir_server.trajectory.expect``).
    expected: dict[str, list] = field(default_factory=dict)
    #: The job processes and the measurement engine
    #: (``leir_server.workers.Workers``), created on first use.
    workers: Any = None
    _snapshots: dict[str, DocumentSnapshot] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, uri: str, language_id: str | None) -> None:
        language = language_of(uri, language_id)
        if language is not None:
            self.languages[uri] = language

    def close(self, uri: str) -> None:
        self.languages.pop(uri, None)
        self.hints.pop(uri, None)
        self.published.pop(uri, None)
        with self._lock:
            old = self._snapshots.pop(uri, None)
        if old is not None:
            old.cancel_token.cancel("overtaken")

    def snapshot(self, uri: str) -> DocumentSnapshot | None:
        """The current version of an open document this server serves, or
        None (not open, or not a LEIR/TVMScript document)."""
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

    def trajectory(self, uri: str, kernel: str | None) -> list[dict]:
        return self.trajectories.setdefault((uri, kernel or ""), [])

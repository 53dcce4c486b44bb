"""Publishing a document's diagnostics: debounced, off the protocol loop,
never for an outdated version.

Each change (re)starts one asyncio task per document: it waits
``DEBOUNCE_S`` (a new change cancels it meanwhile, so typing costs no
checks), takes a snapshot of the document, checks it in a worker thread
(parse and semantic checks of a ``.leir`` file take milliseconds; a Python
file's kernels go through TVM's parser, which takes seconds to import), and
publishes the result with the snapshot's version only if that version is
still the document's current one.

One thread per language runs the checks, so a slow TVMScript check never
delays a ``.leir`` one, and a check that is overtaken by a newer change
either never starts (its queued job is cancelled) or finishes unseen.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from leir.diagnostics import Diagnostic

    from leir_server.server import LeirServer
    from leir_server.session.snapshot import DocumentSnapshot

logger = logging.getLogger(__name__)

#: Quiet time after the last change before a document is checked: long
#: enough to make one check of a burst (a paste, a multi-cursor edit, an
#: editor's change storm), short enough that the diagnostics of a pause in
#: typing arrive within the 100 ms an edit should take to show its errors.
#: Checks that keep up with fast typing need no longer wait: they run in
#: their own thread, and a check overtaken by a newer change is dropped.
DEBOUNCE_S = 0.025
#: Most diagnostics published for one document. Past this (a binary file
#: opened by mistake has one per stray byte) an editor only slows down; the
#: last published diagnostic says how many were left out.
MAX_DIAGNOSTICS = 500

SOURCE = "leir"

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}

def _executor(server: "LeirServer", language: str) -> ThreadPoolExecutor:
    threads = server.session.check_threads
    if language not in threads:
        threads[language] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"leir-check-{language}")
    return threads[language]


def schedule(server: "LeirServer", uri: str, delay: float = DEBOUNCE_S) -> None:
    """Check ``uri`` and publish its diagnostics after ``delay`` seconds,
    replacing any check of it still pending."""
    session = server.session
    pending = session.checks.pop(uri, None)
    if pending is not None:
        pending.cancel()
    if uri not in session.languages:
        return
    session.checks[uri] = asyncio.get_running_loop().create_task(_check_and_publish(server, uri, delay))


def clear(server: "LeirServer", uri: str) -> None:
    """Drop the pending check of a closed document and clear its diagnostics
    in the editor."""
    pending = server.session.checks.pop(uri, None)
    if pending is not None:
        pending.cancel()
    server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def republish(server: "LeirServer", uri: str) -> None:
    """Publish the last checked diagnostics of ``uri`` again with its current
    hints (``Session.hints``), when they are still for the current version."""
    version, diagnostics = server.session.published.get(uri, (None, None))
    if diagnostics is None or not server.session.is_current(uri, version):
        return
    _publish(server, uri, version, diagnostics)


async def _check_and_publish(server: "LeirServer", uri: str, delay: float) -> None:
    session = server.session
    try:
        await asyncio.sleep(delay)
        snapshot = session.snapshot(uri)
        if snapshot is None:
            return
        loop = asyncio.get_running_loop()
        diagnostics = await loop.run_in_executor(_executor(server, snapshot.language), _checked, server, snapshot)
        if diagnostics is None or not session.is_current(uri, snapshot.version):
            return  # a newer version is on its way
        session.published[uri] = (snapshot.version, diagnostics)
        _publish(server, uri, snapshot.version, diagnostics)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - a bug in a check must not stop the next ones
        logger.exception("checking %s failed", uri)
        server.window_log_message(types.LogMessageParams(
            type=types.MessageType.Error, message=f"leir could not check {uri}: {type(e).__name__}: {e}"))
    finally:
        if session.checks.get(uri) is asyncio.current_task():
            del session.checks[uri]


def _checked(server: "LeirServer", snapshot: "DocumentSnapshot") -> list[types.Diagnostic] | None:
    """The LSP diagnostics of a snapshot (in a worker thread); None when the
    snapshot was overtaken before its check started."""
    if not server.session.is_current(snapshot.uri, snapshot.version):
        return None
    from leir.cancel import Cancelled

    try:
        return to_lsp(snapshot, document_diagnostics(snapshot) + budget_warnings(server, snapshot))
    except Cancelled:  # a newer version stopped this check (the snapshot's token)
        return None


def budget_warnings(server: "LeirServer", snapshot: "DocumentSnapshot") -> list["Diagnostic"]:
    """A warning when a ``.leir`` program exceeds the memory budget
    (``leir.footprint``, setting ``memoryBudgetMB``): leir will refuse to
    verify, run or measure it."""
    if snapshot.language != "leir" or snapshot.too_large:
        return []
    from leir.footprint import budget_diagnostics

    doc = snapshot.leir
    if doc is None or not doc.ok:
        return []
    return budget_diagnostics(doc.analysis, getattr(server.session.settings, "memory_budget_mb", None))


def document_diagnostics(snapshot: "DocumentSnapshot") -> list["Diagnostic"]:
    """What leir reports for a document. A Python file with no TVMScript
    kernel is none of leir's business: nothing is reported and TVM is not
    imported, unless it does not parse and mentions a kernel decorator (a
    kernel file in the middle of an edit)."""
    if snapshot.language == "tvmscript" and not snapshot.too_large and not snapshot.kernels:
        if "prim_func" not in snapshot.text and "ir_module" not in snapshot.text:
            return []
        from leir.bridge.tvmscript.discovery import parse_python

        return parse_python(snapshot.text)[1]
    return snapshot.checked.diagnostics


def to_lsp(snapshot: "DocumentSnapshot", diagnostics: list["Diagnostic"]) -> list[types.Diagnostic]:
    """LSP diagnostics, ranges in the editor's UTF-16 units, with a related
    location for every second place that explains a diagnostic."""
    out = []
    for d in diagnostics[:MAX_DIAGNOSTICS]:
        related = [
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=snapshot.uri, range=snapshot.range(r.span)), message=r.message)
            for r in d.related
        ]
        out.append(types.Diagnostic(
            range=snapshot.range(d.span),
            message=d.message,
            severity=_SEVERITY.get(d.severity, types.DiagnosticSeverity.Error),
            code=d.code,
            source=SOURCE,
            related_information=related or None,
        ))
    if len(diagnostics) > MAX_DIAGNOSTICS:
        last = diagnostics[MAX_DIAGNOSTICS]
        out.append(types.Diagnostic(
            range=snapshot.range(last.span),
            message=f"{len(diagnostics) - MAX_DIAGNOSTICS} more problems not shown",
            severity=types.DiagnosticSeverity.Information,
            code="too-many-diagnostics",
            source=SOURCE,
        ))
    return out


def _publish(server: "LeirServer", uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
    hints = server.session.hints.get(uri, [])
    server.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics + hints))

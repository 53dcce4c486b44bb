"""The diagnostics publisher in process (no stdio): hints ride along with a
document's diagnostics until the next change, checks run off the event
loop, an overtaken version is never published, a failing check is
reported and does not stop the next."""

from __future__ import annotations

import asyncio
import threading

from lsprotocol import types
from pygls.workspace import Workspace

from leir_server import diagnostics
from leir_server.api.notifications import text_document_did_change, text_document_did_close, text_document_did_open
from leir_server.session.session import Session

URI = "file:///t/add.leir"
GOOD = "L^{4}_{i} [ Y_{i} = X_{i} + 1; ];\n"
BAD = "L^{4}_{i} [ Y_{i} = X_{i} $ + 1; ];\n"


class FakeServer:
    """What the handlers use of a LeirServer: a workspace, a session, and
    the two notifications they send, recorded."""

    def __init__(self):
        self.workspace = Workspace(None, sync_kind=types.TextDocumentSyncKind.Incremental)
        self.session = Session(self)
        self.published: list[types.PublishDiagnosticsParams] = []
        self.logged: list[types.LogMessageParams] = []

    def text_document_publish_diagnostics(self, params):
        self.published.append(params)

    def window_log_message(self, params):
        self.logged.append(params)

    # what pygls does before calling our sync handlers
    def open(self, text, version=1, uri=URI):
        item = types.TextDocumentItem(uri=uri, language_id="leir", version=version, text=text)
        self.workspace.put_text_document(item)
        text_document_did_open.handle(self, types.DidOpenTextDocumentParams(text_document=item))

    def change(self, text, version):
        doc = types.VersionedTextDocumentIdentifier(uri=URI, version=version)
        change = types.TextDocumentContentChangeWholeDocument(text=text)
        self.workspace.update_text_document(doc, change)
        text_document_did_change.handle(self, types.DidChangeTextDocumentParams(text_document=doc, content_changes=[change]))

    async def settle(self):
        """Wait until no check is pending."""
        while self.session.checks:
            await asyncio.gather(*self.session.checks.values(), return_exceptions=True)


HINT = types.Diagnostic(range=types.Range(start=types.Position(line=0, character=0),
                                          end=types.Position(line=0, character=1)),
                        message="Split loop i by 2", severity=types.DiagnosticSeverity.Hint, source="leir")


async def test_hints_are_published_after_the_diagnostics_until_the_next_change():
    server = FakeServer()
    server.open(BAD)
    await server.settle()
    [first] = server.published
    assert [d.code for d in first.diagnostics] == ["unexpected-character"]

    server.session.hints[URI] = [HINT]
    diagnostics.republish(server, URI)
    assert server.published[-1].version == 1
    assert [d.message for d in server.published[-1].diagnostics] == [first.diagnostics[0].message, HINT.message]

    server.change(GOOD, version=2)
    await server.settle()
    assert server.published[-1].version == 2
    assert server.published[-1].diagnostics == []
    assert URI not in server.session.hints


async def test_republish_does_nothing_for_an_outdated_check():
    server = FakeServer()
    server.open(BAD)
    await server.settle()
    count = len(server.published)

    server.change(GOOD, version=2)  # the check of version 2 is pending
    server.session.hints[URI] = [HINT]
    diagnostics.republish(server, URI)

    assert len(server.published) == count
    await server.settle()


async def test_checks_run_off_the_event_loop(monkeypatch):
    threads = []
    real = diagnostics.document_diagnostics

    def record(snapshot):
        threads.append(threading.current_thread())
        return real(snapshot)

    monkeypatch.setattr(diagnostics, "document_diagnostics", record)
    server = FakeServer()
    server.open(GOOD)
    await server.settle()

    assert threads and threads[0] is not threading.main_thread()
    assert threads[0].name.startswith("leir-check-leir")


async def test_a_version_overtaken_during_its_check_is_not_published(monkeypatch):
    started, release = threading.Event(), threading.Event()
    real = diagnostics.document_diagnostics

    def slow(snapshot):
        if snapshot.version == 1:
            started.set()
            release.wait(30)
        return real(snapshot)

    monkeypatch.setattr(diagnostics, "document_diagnostics", slow)
    server = FakeServer()
    server.open(BAD)
    await asyncio.to_thread(started.wait, 30)  # version 1 is being checked

    server.change(GOOD, version=2)
    release.set()
    await server.settle()

    assert [p.version for p in server.published] == [2]


async def test_a_failing_check_is_logged_and_the_next_one_runs(monkeypatch):
    real = diagnostics.document_diagnostics
    calls = []

    def flaky(snapshot):
        calls.append(snapshot.version)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(snapshot)

    monkeypatch.setattr(diagnostics, "document_diagnostics", flaky)
    server = FakeServer()
    server.open(GOOD)
    await server.settle()
    assert server.published == []
    assert server.logged[-1].type == types.MessageType.Error
    assert "RuntimeError: boom" in server.logged[-1].message

    server.change(BAD, version=2)
    await server.settle()
    assert server.published[-1].version == 2


async def test_close_cancels_the_pending_check_and_clears():
    server = FakeServer()
    server.open(BAD)
    server.workspace.remove_text_document(URI)
    text_document_did_close.handle(server, types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=URI)))
    await asyncio.sleep(diagnostics.DEBOUNCE_S * 2)
    await server.settle()

    assert [(p.version, list(p.diagnostics)) for p in server.published] == [(None, [])]


def test_a_slow_check_of_one_document_does_not_hold_up_another(monkeypatch):
    import leir.bridge.document
    from leir_server.session.snapshot import DocumentSnapshot

    started, release = threading.Event(), threading.Event()
    real = leir.bridge.document.check_text

    def slow_python(text, language):
        if language == "tvmscript":
            started.set()
            release.wait(60)
        return real(text, language)

    monkeypatch.setattr(leir.bridge.document, "check_text", slow_python)
    python = DocumentSnapshot("file:///t/k.py", 1, "x = 1\n", "tvmscript")
    leir_doc = DocumentSnapshot(URI, 1, BAD, "leir")
    worker = threading.Thread(target=lambda: python.checked)
    worker.start()
    try:
        assert started.wait(30)
        # The Python check is still running; the .leir one is not queued behind it.
        assert [d.code for d in leir_doc.checked.diagnostics] == ["unexpected-character"]
        assert not release.is_set() and worker.is_alive()
    finally:
        release.set()
        worker.join()


def test_python_syntax_errors_are_reported_only_in_kernel_files():
    from leir_server.session.snapshot import DocumentSnapshot

    plain = DocumentSnapshot("file:///t/a.py", 1, "def f(:\n", "tvmscript")
    kernel_file = DocumentSnapshot("file:///t/k.py", 1, "@T.prim_func\ndef f(:\n", "tvmscript")

    assert diagnostics.document_diagnostics(plain) == []
    [d] = diagnostics.document_diagnostics(kernel_file)
    assert d.code == "python-syntax"
    assert kernel_file.range(d.span).start.line == 1

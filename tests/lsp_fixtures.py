"""End-to-end fixtures: the real ``leir-lsp`` process over stdio, driven by
pytest-lsp, with helpers that keep tests readable.

    async def test_something(leir_lsp: LeirClient):
        text, cursor = marked("L^{4}_{i} [ Y_{i} = X_{$0i}; ];")
        uri = await leir_lsp.open("demo.leir", text)
        published = await leir_lsp.wait_for_diagnostics(uri, version=1)

Positions are written as an editor's status bar shows them: ``"3:4"`` is
line 3, column 4, both 1-based; ``"3:4-3:9"`` a range (``pos``, ``rng``);
or as a ``$0`` marker in the text (``marked``).

``leir_lsp`` is a started and initialized client whose ``leir`` settings
section is ``LEIR_SETTINGS`` (change it with ``set_configuration`` and a
``workspace/didChangeConfiguration``). Tests that need another
initialization use ``bare_lsp`` and call ``initialize`` themselves.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features
from pygls.protocol import default_converter

SERVER_COMMAND = [sys.executable, "-m", "leir_server"]
#: Generous: the first check of a Python kernel imports TVM (seconds, more
#: on a loaded machine). Not a speed assertion: only a bound on a hang.
WAIT_S = 120.0

LEIR_SETTINGS: dict[str, Any] = {"target": "llvm", "autoMeasure": False}

#: Server -> client notifications of the leir protocol extension.
LEIR_NOTIFICATIONS = ("leir/status", "leir/trajectory", "leir/ranker")


class LeirClient(LanguageClient):
    """pytest-lsp's client, keeping every ``publishDiagnostics`` (with its
    version) and every ``leir/*`` notification in order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.published: list[types.PublishDiagnosticsParams] = []
        self.leir_notifications: list[tuple[str, Any]] = []
        self._versions: dict[str, int] = {}
        #: What the server answered to ``initialize`` (set by ``initialize``).
        self.server_capabilities: types.ServerCapabilities | None = None

    # ---- documents

    async def open(self, name_or_uri: str, text: str, language_id: str | None = None, version: int = 1) -> str:
        """Open a document (``name_or_uri`` is a URI, or a file name put
        under /leir-tests/); returns its URI."""
        uri = name_or_uri if ":" in name_or_uri else Path("/leir-tests", name_or_uri).as_uri()
        if language_id is None:
            language_id = "python" if uri.endswith(".py") else "leir" if uri.endswith(".leir") else "plaintext"
        self.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=version, text=text)))
        self._versions[uri] = version
        return uri

    def edit(self, uri: str, range_: types.Range | str, new_text: str) -> int:
        """Send one incremental change; returns the new version."""
        if isinstance(range_, str):
            range_ = rng(range_)
        version = self._versions[uri] = self._versions.get(uri, 0) + 1
        self.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=range_, text=new_text)]))
        return version

    def replace_all(self, uri: str, text: str) -> int:
        """Send the whole new text (a full-document change); returns the new version."""
        version = self._versions[uri] = self._versions.get(uri, 0) + 1
        self.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
        return version

    def close(self, uri: str) -> None:
        self.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))

    # ---- waiting for what the server sends

    async def wait_for_diagnostics(self, uri: str, version: int | None = None, *, after: int = 0,
                                   timeout: float = WAIT_S) -> types.PublishDiagnosticsParams:
        """The first diagnostics published for ``uri`` (for ``version``, when
        given) among those published from index ``after`` on."""
        async def wait():
            while True:
                for p in self.published[after:]:
                    if p.uri == uri and (version is None or p.version == version):
                        return p
                await self.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

        return await asyncio.wait_for(wait(), timeout)

    async def wait_for_message(self, containing: str, timeout: float = WAIT_S) -> types.ShowMessageParams:
        async def wait():
            while True:
                for m in self.messages:
                    if containing in m.message:
                        return m
                await self.wait_for_notification(types.WINDOW_SHOW_MESSAGE)

        return await asyncio.wait_for(wait(), timeout)

    def publications(self, uri: str) -> list[types.PublishDiagnosticsParams]:
        return [p for p in self.published if p.uri == uri]


def _record_diagnostics(client: LeirClient, params: types.PublishDiagnosticsParams):
    client.published.append(params)
    client.diagnostics[params.uri] = params.diagnostics


def make_leir_client() -> LeirClient:
    client = LeirClient(converter_factory=default_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = _record_diagnostics
    register_lsp_features(client, features)
    for method in LEIR_NOTIFICATIONS:
        client.feature(method)(lambda ls, params, method=method: ls.leir_notifications.append((method, params)))
    return client


CONFIG = ClientServerConfig(server_command=SERVER_COMMAND, client_factory=make_leir_client)

#: What a typical editor announces: pulled configuration, hierarchical
#: symbols, work-done progress, UTF-16 positions.
CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        did_change_configuration=types.DidChangeConfigurationClientCapabilities(dynamic_registration=False),
        apply_edit=True,
    ),
    text_document=types.TextDocumentClientCapabilities(
        document_symbol=types.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True, version_support=True),
    ),
    window=types.WindowClientCapabilities(work_done_progress=True),
)


async def initialize(client: LeirClient, capabilities: types.ClientCapabilities = CAPABILITIES,
                     settings: dict | None = None) -> types.InitializeResult:
    client.set_configuration(dict(LEIR_SETTINGS if settings is None else settings), section="leir")
    result = await client.initialize_session(types.InitializeParams(capabilities=capabilities))
    client.server_capabilities = result.capabilities
    return result


@pytest_lsp.fixture(config=CONFIG)
async def leir_lsp(lsp_client: LeirClient):
    """A started ``leir-lsp`` with an initialized session."""
    await initialize(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def bare_lsp(lsp_client: LeirClient):
    """A started ``leir-lsp``, not yet initialized (call ``initialize``)."""
    yield
    await lsp_client.shutdown_session()


# ---------------------------------------------------------------- positions


def pos(text: str) -> types.Position:
    """``"3:4"`` (1-based line and column) as an LSP position."""
    line, column = text.split(":")
    return types.Position(line=int(line) - 1, character=int(column) - 1)


def rng(text: str) -> types.Range:
    """``"3:4-3:9"`` (1-based) as an LSP range."""
    start, end = text.split("-")
    return types.Range(start=pos(start), end=pos(end))


def marked(text: str, marker: str = "$0") -> tuple[str, types.Position]:
    """The text without its one ``marker``, and the LSP position it marked
    (columns count characters: keep marked lines ASCII before the marker)."""
    at = text.index(marker)
    before = text[:at]
    line = before.count("\n")
    column = len(before) - (before.rfind("\n") + 1)
    return text[:at] + text[at + len(marker):], types.Position(line=line, character=column)


def show(r: types.Range) -> str:
    """An LSP range the way ``rng`` reads it (1-based), for readable asserts."""
    return f"{r.start.line + 1}:{r.start.character + 1}-{r.end.line + 1}:{r.end.character + 1}"

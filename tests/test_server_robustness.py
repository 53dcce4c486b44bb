"""Bad input never crashes the server (issue 5): binary content, a body that
is not UTF-8, a 10 MB document, positions past the end, malformed params, a
storm of 1,000 changes; and opening a Python file runs none of it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_fixtures import LeirClient, show
from lsp_raw import RawLsp

GOOD = """\
# Y = X + 1, row by row
L^{4}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j} + 1;
  ];
"""


def _doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


async def _symbols(client: LeirClient, uri: str):
    return await client.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=_doc(uri)))


async def _format(client: LeirClient, uri: str):
    return await client.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=_doc(uri), options=types.FormattingOptions(tab_size=2, insert_spaces=True)))


def _tvm_loaded(client: LeirClient) -> bool:
    """Whether the server process has TVM's library mapped (Linux)."""
    maps = Path(f"/proc/{client._server.pid}/maps").read_text()
    return "libtvm" in maps


# ------------------------------------------------------------------ content


async def test_binary_content_gets_bounded_diagnostics_and_answers(leir_lsp: LeirClient):
    rand = random.Random(5)
    noise = bytes(rand.randrange(256) for _ in range(20_000)).decode("latin-1")
    uri = await leir_lsp.open("noise.leir", noise)

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    assert 1 < len(published.diagnostics) <= 501
    assert published.diagnostics[-1].code == "too-many-diagnostics"
    assert "more problems not shown" in published.diagnostics[-1].message
    # Every request on it still answers.
    assert await _symbols(leir_lsp, uri) is not None
    assert await _format(leir_lsp, uri) is None
    tokens = await leir_lsp.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=_doc(uri)))
    assert len(tokens.data) % 5 == 0


async def test_a_10_mb_document_gets_one_clear_diagnostic(leir_lsp: LeirClient):
    text = GOOD + "# " + "x" * (10 * 1024 * 1024) + "\n"
    uri = await leir_lsp.open("huge.leir", text)

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    [d] = published.diagnostics
    assert d.code == "document-too-large"
    assert "not checked" in d.message
    assert await _symbols(leir_lsp, uri) is None
    assert await _format(leir_lsp, uri) is None
    await leir_lsp.wait_for_message("too large")


async def test_positions_past_the_end_are_clamped(leir_lsp: LeirClient):
    uri = await leir_lsp.open("short.leir", GOOD)
    await leir_lsp.wait_for_diagnostics(uri, version=1)

    leir_lsp.edit(uri, "4:60-4:70", "")  # past the end of line 4
    version = leir_lsp.edit(uri, "99:1-120:5", "\n# appended\n")  # past the last line

    published = await leir_lsp.wait_for_diagnostics(uri, version=version)
    assert list(published.diagnostics) == []
    [kernel] = await _symbols(leir_lsp, uri)
    assert kernel.name == "short"
    # Both edits were clamped to the end of what they pointed past: the
    # first deleted nothing, the second appended. (The result is canonical,
    # so formatting has nothing to change exactly when the server has it.)
    expected = GOOD + "\n# appended\n"
    assert _canonical(expected) == expected
    edits = await _format(leir_lsp, uri)
    assert edits is not None and list(edits) == []


async def test_edits_after_characters_python_breaks_lines_at_land_where_sent(leir_lsp: LeirClient):
    # LSP counts lines at \n, \r\n and \r only; the form feed and U+2028 are
    # ordinary characters of lines 1 and 2.
    text = "# a\x0cb\n# c\u2028d\n" + GOOD
    uri = await leir_lsp.open("ff.leir", text)

    leir_lsp.edit(uri, "3:3-3:3", "Z")  # line 3 is GOOD's first comment line
    edits = await _format(leir_lsp, uri)

    # The text is canonical, so the formatter has nothing to change exactly
    # when the server's text is the one the client has.
    assert _canonical(text.replace("# Y", "# ZY")) == text.replace("# Y", "# ZY")
    assert edits is not None and list(edits) == []


def _canonical(text: str) -> str:
    from leir.bridge.document import load_leir
    from leir.format import canonical_text

    doc = load_leir(text)
    return canonical_text(doc.parsed, doc.analysis)


# ---------------------------------------------------------------- transport


async def test_a_body_that_is_not_utf8_is_answered_and_the_server_goes_on():
    server = await RawLsp.start()
    try:
        await server.initialize()
        body = (b'{"jsonrpc": "2.0", "id": 41, "method": "textDocument/documentSymbol", '
                b'"params": {"textDocument": {"uri": "file:///\xff\xfe.leir"}}}')
        server.send_bytes(body)
        answer = await server.response(41)
        assert answer["error"]["code"] == -32700
        offset = body.index(b"\xff")
        assert answer["error"]["message"] == f"the message body is not UTF-8 (byte 0xff at offset {offset})"

        next_answer = await server.request("textDocument/documentSymbol", {"textDocument": {"uri": "file:///a.leir"}})
        assert next_answer["result"] is None  # answered: the document is not open
        shown = [m for m in server.received if m.get("method") == "window/showMessage"]
        assert shown == []  # a warning in the log, no pop-up
    finally:
        assert await server.close() == 0


async def test_a_body_that_is_not_json_does_not_stop_the_server():
    server = await RawLsp.start()
    try:
        await server.initialize()
        server.send_bytes(b'{"jsonrpc": "2.0", "id": 7, "method": ')
        answer = await server.request("textDocument/foldingRange", {"textDocument": {"uri": "file:///a.leir"}})
        assert answer["result"] is None
    finally:
        assert await server.close() == 0


MALFORMED_REQUESTS = [
    ("textDocument/documentSymbol", {"textDocument": 5}, "$.params.text_document"),
    ("textDocument/documentSymbol", None, "$.params"),
    ("textDocument/semanticTokens/full", {"textDocument": "file:///a.leir"}, "$.params.text_document"),
    ("textDocument/formatting", {"textDocument": {"uri": "file:///a.leir"}}, "$.params.options"),
    ("textDocument/formatting", {"textDocument": {"uri": "file:///a.leir"}, "options": {"tabSize": "two",
                                 "insertSpaces": True}}, "$.params.options.tab_size"),
    ("textDocument/foldingRange", {"text_document": {}}, "$.params"),
]


@pytest.mark.parametrize("method, params, where", MALFORMED_REQUESTS)
async def test_a_malformed_request_gets_an_invalid_params_answer(method, params, where):
    server = await RawLsp.start()
    try:
        await server.initialize()
        answer = await server.request(method, params)
        assert answer["error"]["code"] == -32602
        assert answer["error"]["message"].startswith(f"invalid params for {method}: ")
        assert where in answer["error"]["message"]
    finally:
        assert await server.close() == 0


MALFORMED_NOTIFICATIONS = [
    ("textDocument/didOpen", {"textDocument": {"uri": "file:///a.leir"}}),
    ("textDocument/didOpen", {"textDocument": {"uri": "file:///a.leir", "languageId": "leir", "version": "one",
                                               "text": "x"}}),
    ("textDocument/didChange", {"textDocument": {"uri": "file:///a.leir"}, "contentChanges": 7}),
    ("textDocument/didChange", {"textDocument": {"uri": "file:///a.leir", "version": 2},
                                "contentChanges": [{"range": {"start": {"line": -1}}, "text": "x"}]}),
    ("textDocument/didClose", {}),
    ("workspace/didChangeConfiguration", None),
]


@pytest.mark.parametrize("method, params", MALFORMED_NOTIFICATIONS)
async def test_a_malformed_notification_is_ignored(method, params):
    server = await RawLsp.start()
    try:
        await server.initialize()
        uri = "file:///a.leir"
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "leir", "version": 1, "text": GOOD}})
        server.notify(method, params)

        answer = await server.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        [kernel] = answer["result"]
        assert kernel["name"] == "a"
        warning = await server.wait_for(lambda m: m.get("method") == "window/logMessage"
                                        and m["params"]["message"].startswith(f"ignored a malformed {method}"))
        assert warning["params"]["type"] == 2
    finally:
        assert await server.close() == 0


async def _log_containing(server: RawLsp, text: str) -> dict:
    return await server.wait_for(lambda m: m.get("method") == "window/logMessage" and text in m["params"]["message"])


async def test_a_client_that_fails_the_configuration_request_leaves_the_defaults():
    server = await RawLsp.start()
    try:
        server.fail_requests.add("workspace/configuration")
        await server.initialize({"workspace": {"configuration": True}})

        warning = await _log_containing(server, "could not read the 'leir' settings")
        assert "the client failed" in warning["params"]["message"]
        server.notify("workspace/didChangeConfiguration", {"settings": None})  # asked again, fails again
        assert (await server.request("textDocument/foldingRange", {"textDocument": {"uri": "file:///a.leir"}}))[
            "result"] is None
    finally:
        assert await server.close() == 0


async def test_a_client_that_only_pushes_settings_is_heard():
    server = await RawLsp.start()
    try:
        await server.initialize({})  # no workspace/configuration support

        server.notify("workspace/didChangeConfiguration", {"settings": {"leir": {"target": "tpu"}}})

        warning = await _log_containing(server, "leir.target")
        assert warning["params"]["message"] == "leir.target: ignored 'tpu' (expected one of llvm, cuda, rpc)"
        assert not any(m.get("method") == "workspace/configuration" for m in server.received)
    finally:
        assert await server.close() == 0


async def test_requests_on_documents_that_are_not_open_answer_null(leir_lsp: LeirClient):
    uri = "file:///leir-tests/never-opened.leir"

    assert await _symbols(leir_lsp, uri) is None
    assert await _format(leir_lsp, uri) is None
    folds = await leir_lsp.text_document_folding_range_async(types.FoldingRangeParams(text_document=_doc(uri)))
    assert folds is None
    tokens = await leir_lsp.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=_doc(uri)))
    assert list(tokens.data) == []


# ---------------------------------------------------------------- the storm


def _utf16_position(text: str, offset: int) -> types.Position:
    line_start = text.rfind("\n", 0, offset) + 1
    column = len(text[line_start:offset].encode("utf-16-le")) // 2
    return types.Position(line=text.count("\n", 0, offset), character=column)


async def test_a_storm_of_1000_changes_ends_on_the_last_text_sent(leir_lsp: LeirClient):
    """Incremental edits inside comments (so the program stays valid and the
    formatter, which keeps comments, echoes the server's text back),
    including line breaks, characters outside the BMP (two UTF-16 units) and
    characters Python but not LSP breaks lines at (form feed, U+2028, NEL)."""
    rand = random.Random(1000)
    text = "# head\n" + GOOD.replace("  ];", "  # inner\n  ];")
    uri = await leir_lsp.open("storm.leir", text)
    await leir_lsp.wait_for_diagnostics(uri, version=1)
    before = len(leir_lsp.published)

    for _ in range(1000):
        comment_starts = [i for i, ch in enumerate(text) if ch == "#"]
        start = rand.choice(comment_starts) + 1
        line_end = text.find("\n", start)
        if rand.random() < 0.6 or line_end == start:
            at = rand.randint(start, line_end)
            insert = rand.choice(["a", "bc", " ", "é", "😀", "\n# ", "∑x", "\x0c", "\u2028", "\x85"])
            edit_start = edit_end = at
        else:
            edit_start = rand.randint(start, line_end - 1)
            edit_end = rand.randint(edit_start + 1, line_end)
            insert = ""
        # Never split a surrogate pair: offsets are characters, so they can't.
        change = types.Range(start=_utf16_position(text, edit_start), end=_utf16_position(text, edit_end))
        last = leir_lsp.edit(uri, change, insert)
        text = text[:edit_start] + insert + text[edit_end:]

    published = await leir_lsp.wait_for_diagnostics(uri, version=last, after=before)
    assert list(published.diagnostics) == []
    versions = [p.version for p in leir_lsp.publications(uri)[1:]]
    assert versions == sorted(versions) and versions[-1] == last  # never an outdated version after a newer one

    expected = _canonical(text)
    edits = await _format(leir_lsp, uri)
    assert edits is not None
    formatted = edits[0].new_text if edits else text
    assert formatted == expected
    if edits:
        assert show(edits[0].range) == show(types.Range(start=types.Position(line=0, character=0),
                                                        end=_utf16_position(text, len(text))))


# ------------------------------------------------------------ nothing runs


KERNEL_RUNNING_CODE = '''\
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def kernel(A: T.Buffer((4,), "float32")):
    for i in range(4):
        with T.sblock("A"):
            vi = T.axis.spatial(4, i)
            A[vi] = T.float32(__import__("os").system("touch {sentinel}"))
'''

SIGNATURE_RUNNING_CODE = '''\
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def kernel(A: T.Buffer((__import__("os").system("touch {sentinel}"),), "float32")):
    T.evaluate(0)
'''


@pytest.mark.parametrize("template", [KERNEL_RUNNING_CODE, SIGNATURE_RUNNING_CODE], ids=["body", "signature"])
async def test_opening_a_python_kernel_runs_none_of_it(leir_lsp: LeirClient, tmp_path, template):
    sentinel = tmp_path / "SENTINEL"
    uri = await leir_lsp.open((tmp_path / "evil.py").as_uri(), template.format(sentinel=sentinel))

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    # The call and its string argument (not a name, dtype or scope) are both refused.
    assert {d.code for d in published.diagnostics} == {"untrusted-code"}
    assert "__import__" in published.diagnostics[0].message
    assert not sentinel.exists()


async def test_a_python_file_without_kernels_never_loads_tvm(leir_lsp: LeirClient):
    uri = await leir_lsp.open("script.py", "import numpy as np\nprint(np.zeros(3))\n")
    leir = await leir_lsp.open("add.leir", GOOD)

    assert list((await leir_lsp.wait_for_diagnostics(uri, version=1)).diagnostics) == []
    assert list((await leir_lsp.wait_for_diagnostics(leir, version=1)).diagnostics) == []
    assert await _symbols(leir_lsp, uri) == []
    assert not _tvm_loaded(leir_lsp)


async def test_a_tvmscript_error_is_published_at_its_range(leir_lsp: LeirClient):
    text = (
        "from tvm.script import tirx as T\n"
        "\n"
        "@T.prim_func(s_tir=True)\n"
        'def fill(A: T.Buffer((128,), "float32")):\n'
        "    for i in range(128):\n"
        '        with T.sblock("A"):\n'
        "            vi = T.axis.spatial(128, i)\n"
        "            A[vi] = B[vi]\n"
    )
    uri = await leir_lsp.open("fill.py", text)

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    assert published.diagnostics, "an undefined buffer B must be reported"
    assert all(show(d.range).startswith("8:") for d in published.diagnostics), [show(d.range) for d in published.diagnostics]


async def test_a_client_without_hierarchical_symbols_gets_a_flat_list():
    server = await RawLsp.start()
    try:
        await server.initialize({"textDocument": {"documentSymbol": {"hierarchicalDocumentSymbolSupport": False}}})
        uri = "file:///t/add.leir"
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "leir", "version": 1, "text": GOOD}})

        answer = await server.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})

        assert [(s["name"], s.get("containerName")) for s in answer["result"]] == [
            ("add", None), ("Y", "add"), ("X", "add"), ("loop nest i, j", "add"),
            ("serial i", "loop nest i, j"), ("serial j", "serial i"),
        ]
        assert all(s["location"]["uri"] == uri for s in answer["result"])
    finally:
        assert await server.close() == 0

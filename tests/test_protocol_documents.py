"""Incremental edits land where the editor puts them (issue 12): the
server's document class against a reference written here from the LSP
rule, on random texts and ranges (past the end of a line or of the text,
CRLF and CR, characters outside the BMP, lone surrogates); and end to end,
through the server."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st
from lsprotocol import types

from leir_server.protocol import LspLinesDocument
from lsp_fixtures import LeirClient

# ------------------------------------------------------------- reference


def _canonical(text: str) -> str:
    """The text as a JSON string decodes to: UTF-16 units, with each high
    surrogate followed by a low one as one character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "little") for i in range(0, len(data), 2)]


def _text(units: list[int]) -> str:
    return b"".join(u.to_bytes(2, "little") for u in units).decode("utf-16-le", "surrogatepass")


CR, LF = 0x0D, 0x0A


def _line_bounds(units: list[int]) -> list[tuple[int, int]]:
    """(start, end before the line break) of each LSP line, in UTF-16 units."""
    bounds, start, i = [], 0, 0
    while i < len(units):
        if units[i] in (CR, LF):
            bounds.append((start, i))
            i += 2 if units[i] == CR and i + 1 < len(units) and units[i + 1] == LF else 1
            start = i
        else:
            i += 1
    bounds.append((start, len(units)))
    return bounds


def reference_edit(text: str, start: tuple[int, int], end: tuple[int, int], new_text: str) -> str:
    """What an editor that holds its text in UTF-16 (VS Code) does: a
    character past the end of the line is the end of the line; a line past
    the last is the end of the text."""
    units = _units(text)
    bounds = _line_bounds(units)

    def at(line: int, character: int) -> int:
        if line >= len(bounds):
            return len(units)
        first, last = bounds[line]
        return min(first + character, last)

    a, b = sorted((at(*start), at(*end)))
    return _text(units[:a] + _units(new_text) + units[b:])


# ------------------------------------------------------------- property

PIECES = ["a", "bc", " ", "\n", "\r\n", "\r", "é", "😀", "𝄞", "\ud800", "\udbff", "\udc00", "\udfff",
          "\x0c", "\u2028", "\x85"]
texts = st.lists(st.sampled_from(PIECES), max_size=20).map(lambda parts: _canonical("".join(parts)))


@st.composite
def edits(draw):
    line = draw(st.integers(0, 8))
    character = draw(st.integers(0, 12))
    if draw(st.booleans()):
        end = (line + draw(st.integers(0, 2)), draw(st.integers(0, 12)))
    else:
        end = (line, character + draw(st.integers(0, 4)))
    return (line, character), end, draw(texts)


def _change(start, end, new_text) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(*start), end=types.Position(*end)), text=new_text)


@settings(max_examples=600, deadline=None)
@given(texts, st.lists(edits(), min_size=1, max_size=8))
def test_incremental_edits_agree_with_the_lsp_rule(text, changes):
    doc = LspLinesDocument("file:///t.leir", source=text, version=1)
    expected = text
    for start, end, new_text in changes:
        doc.apply_change(_change(start, end, new_text))
        expected = reference_edit(expected, start, end, new_text)
        assert doc.source == expected, (start, end, new_text)
        assert "".join(doc.lines) == doc.source


def test_a_character_past_the_end_of_a_line_is_its_end():
    for text in ("ab\ncd", "ab\r\ncd", "ab\rcd"):
        doc = LspLinesDocument("file:///t.leir", source=text, version=1)
        doc.apply_change(_change((0, 3), (0, 3), "X"))  # "ab" has 2 characters: 3 is past its end
        assert doc.source == text.replace("ab", "abX"), text
        doc = LspLinesDocument("file:///t.leir", source=text, version=1)
        doc.apply_change(_change((0, 1), (0, 99), ""))
        assert doc.source == text.replace("ab", "a"), text
        doc = LspLinesDocument("file:///t.leir", source=text, version=1)
        doc.apply_change(_change((5, 0), (9, 9), "!"))  # a line past the last: the end of the text
        assert doc.source == text + "!", text


def test_a_character_outside_the_bmp_counts_two_units_and_a_lone_surrogate_one():
    doc = LspLinesDocument("file:///t.leir", source="😀x\ud800y", version=1)
    doc.apply_change(_change((0, 2), (0, 3), "_"))  # the x
    assert doc.source == "😀_\ud800y"
    doc.apply_change(_change((0, 4), (0, 5), "Y"))  # the y, after the lone surrogate
    assert doc.source == "😀_\ud800Y"


# ------------------------------------------------------------ end to end


GOOD = """\
# head
L^{4}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j} + 1;
  ];
"""


def _canonical_leir(text: str) -> str | None:
    from leir.bridge.document import load_leir
    from leir.format import canonical_text

    doc = load_leir(text)
    return canonical_text(doc.parsed, doc.analysis)


def _end(text: str) -> types.Position:
    bounds = _line_bounds(_units(text))
    first, last = bounds[-1]
    return types.Position(line=len(bounds) - 1, character=last - first)


async def test_the_servers_text_is_the_editors_after_edits_past_the_ends(leir_lsp: LeirClient):
    """Edits at characters past the end of the first (comment) line, in a
    document with CRLF line ends, a lone surrogate and emoji: formatting
    answers the canonical form of exactly the reference text (pygls's own
    rule put these edits after the line break: a syntax error, so no edit)."""
    text = GOOD.replace("\n", "\r\n")
    uri = await leir_lsp.open("past.leir", text)
    await leir_lsp.wait_for_diagnostics(uri, version=1)
    for start, end, new_text in [((0, 7), (0, 7), " 😀"),  # "# head" is 6 units: 7 is past its end
                                 ((0, 50), (0, 60), " \ud800"),
                                 ((0, 2), (0, 6), "HEAD"),
                                 ((99, 0), (99, 9), "# tail\r\n")]:
        leir_lsp.edit(uri, types.Range(start=types.Position(*start), end=types.Position(*end)), new_text)
        text = reference_edit(text, start, end, new_text)
    assert text.startswith("# HEAD 😀 \ud800\r\nL^{4}") and text.endswith("];\r\n# tail\r\n")

    edits = await leir_lsp.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        options=types.FormattingOptions(tab_size=2, insert_spaces=True)))

    expected = _canonical_leir(text)
    assert expected is not None and expected != text  # CRLF becomes LF: there is one edit
    [edit] = edits
    assert edit.new_text == expected
    assert (edit.range.end.line, edit.range.end.character) == (_end(text).line, _end(text).character)


async def test_every_request_answers_on_a_document_with_lone_surrogates(leir_lsp: LeirClient):
    text = "# a \ud800 here\nL^{4}_{i} [ # \udc00\n  Y_{i} = X_{i} + 1; # \ud800\n];\n"
    uri = await leir_lsp.open("surrogate.leir", text)
    doc = types.TextDocumentIdentifier(uri=uri)

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)
    assert list(published.diagnostics) == []
    tokens = await leir_lsp.text_document_semantic_tokens_full_async(types.SemanticTokensParams(text_document=doc))
    assert tokens.data and len(tokens.data) % 5 == 0
    [kernel] = await leir_lsp.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=doc))
    # The kernel's range ends after line 4's last character: each lone surrogate is one unit.
    assert kernel.range.end.line in (3, 4)
    lenses = await leir_lsp.text_document_code_lens_async(types.CodeLensParams(text_document=doc))
    assert lenses
    hover = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=doc, position=types.Position(line=2, character=2)))
    assert hover is not None


async def test_positions_are_utf16_whatever_encodings_the_client_offers():
    from lsp_raw import RawLsp

    server = await RawLsp.start()
    try:
        answer = await server.initialize({"general": {"positionEncodings": ["utf-8", "utf-32"]}})
        # leir counts UTF-16 units (leir.diagnostics.SourceText); LSP's default, which every client supports.
        assert answer["result"]["capabilities"]["positionEncoding"] == "utf-16"
        uri = "file:///enc.leir"
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "leir", "version": 1, "text": "# 😀\n" + GOOD}})
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 4}}, "text": "!"}]})
        edits = await server.request("textDocument/formatting", {
            "textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": True}})
        assert edits["result"] == []  # "# 😀!" + GOOD is canonical: the "!" landed after the emoji
    finally:
        assert await server.close() == 0

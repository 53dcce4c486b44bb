"""Document lifecycle over stdio: diagnostics on open and change (debounced,
versioned, with related locations), cleared on close; settings pulled from
the client; outline, folding, semantic tokens and formatting."""

from __future__ import annotations

from lsprotocol import types

from lsp_fixtures import LeirClient, initialize, marked, pos, rng, show

GOOD = """\
# Y = X + 1, row by row
L^{4}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j} + 1;
  ];
"""


async def test_open_publishes_diagnostics_with_the_version(leir_lsp: LeirClient):
    uri = await leir_lsp.open("good.leir", GOOD, version=7)

    published = await leir_lsp.wait_for_diagnostics(uri)

    assert published.version == 7
    assert list(published.diagnostics) == []


async def test_a_syntax_error_is_published_at_its_range(leir_lsp: LeirClient):
    uri = await leir_lsp.open("bad.leir", "L^{4}_{i} [\n  Y_{i} = X_{i} $ + 1;\n];\n")

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    [d] = published.diagnostics
    assert show(d.range) == "2:17-2:18"
    assert d.severity == types.DiagnosticSeverity.Error
    assert d.code == "unexpected-character"
    assert d.source == "leir"


async def test_related_information_points_at_the_second_location(leir_lsp: LeirClient):
    text = "in X: f32[4]\nin X: f32[4]\nL^{4}_{i} [ Y_{i} = X_{i}; ];\n"
    uri = await leir_lsp.open("twice.leir", text)

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    with_related = [d for d in published.diagnostics if d.related_information]
    assert with_related, published.diagnostics
    related = with_related[0].related_information[0]
    assert related.location.uri == uri
    assert show(with_related[0].range).startswith("2:")
    assert show(related.location.range).startswith("1:")


async def test_a_change_is_checked_and_published_with_its_version(leir_lsp: LeirClient):
    uri = await leir_lsp.open("change.leir", GOOD)
    await leir_lsp.wait_for_diagnostics(uri, version=1)

    version = leir_lsp.edit(uri, "4:22-4:23", "$")  # the "1" of "+ 1"
    published = await leir_lsp.wait_for_diagnostics(uri, version=version)

    assert [show(d.range) for d in published.diagnostics if d.code == "unexpected-character"] == ["4:22-4:23"]


async def test_a_burst_of_changes_is_checked_once_for_the_last_version(leir_lsp: LeirClient):
    uri = await leir_lsp.open("burst.leir", GOOD)
    await leir_lsp.wait_for_diagnostics(uri, version=1)
    before = len(leir_lsp.published)

    for _ in range(20):
        last = leir_lsp.edit(uri, "1:1-1:1", "#")
    await leir_lsp.wait_for_diagnostics(uri, version=last, after=before)

    # Debounced: the 19 overtaken versions were never published.
    assert [p.version for p in leir_lsp.published[before:]] == [last]


async def test_close_clears_the_diagnostics(leir_lsp: LeirClient):
    uri = await leir_lsp.open("close.leir", "L^{4}_{i} [ Y_{i} = $; ];\n")
    published = await leir_lsp.wait_for_diagnostics(uri, version=1)
    assert published.diagnostics
    after = len(leir_lsp.published)

    leir_lsp.close(uri)
    cleared = await leir_lsp.wait_for_diagnostics(uri, after=after)

    assert list(cleared.diagnostics) == []


async def test_documents_in_other_languages_are_ignored(leir_lsp: LeirClient):
    other = await leir_lsp.open("notes.txt", "L^{4}_{i} [ $ ];")
    uri = await leir_lsp.open("good.leir", GOOD)
    await leir_lsp.wait_for_diagnostics(uri, version=1)

    symbols = await leir_lsp.text_document_document_symbol_async(
        types.DocumentSymbolParams(text_document=types.TextDocumentIdentifier(uri=other)))

    assert leir_lsp.publications(other) == []
    assert symbols is None


async def test_a_python_file_without_kernels_gets_no_diagnostics(leir_lsp: LeirClient):
    uri = await leir_lsp.open("plain.py", "import os\nprint(os.getcwd(\n")  # not even valid Python

    published = await leir_lsp.wait_for_diagnostics(uri, version=1)

    assert list(published.diagnostics) == []


# ------------------------------------------------------------ configuration


async def test_settings_are_pulled_on_initialized_and_bad_values_logged(bare_lsp: LeirClient):
    await initialize(bare_lsp, settings={"target": "tpu", "measurementBudget": 5})

    await _wait_for_log(bare_lsp, "leir.target")

    warnings = [m.message for m in bare_lsp.log_messages if m.type == types.MessageType.Warning]
    assert any("leir.target: ignored 'tpu'" in w for w in warnings), warnings


async def test_did_change_configuration_pulls_again(leir_lsp: LeirClient):
    leir_lsp.set_configuration({"measurementBudget": 0}, section="leir")

    leir_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    message = await _wait_for_log(leir_lsp, "leir.measurementBudget")
    assert "ignored 0" in message


async def _wait_for_log(client: LeirClient, containing: str) -> str:
    import asyncio

    async def wait():
        while True:
            for m in client.log_messages:
                if containing in m.message:
                    return m.message
            await client.wait_for_notification(types.WINDOW_LOG_MESSAGE)

    return await asyncio.wait_for(wait(), 60)


# --------------------------------------------------- outline and formatting


def _doc(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


async def test_document_symbols_are_kernel_nests_loops_and_tensors(leir_lsp: LeirClient):
    uri = await leir_lsp.open("add_one.leir", GOOD)

    [kernel] = await leir_lsp.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=_doc(uri)))

    assert (kernel.name, kernel.kind) == ("add_one", types.SymbolKind.Function)
    outline = {c.name: c for c in kernel.children}
    assert outline["X"].kind == types.SymbolKind.Variable
    assert outline["X"].detail == "in f32[4,8] (inferred)"
    assert outline["Y"].detail == "out f32[4,8] (inferred)"
    nest = outline["loop nest i, j"]
    [outer] = nest.children
    [inner] = outer.children
    assert (outer.name, show(outer.selection_range)) == ("serial i", "2:1-2:10")
    assert (inner.name, inner.detail, show(inner.selection_range)) == ("serial j", "8 iterations", "3:3-3:12")


async def test_folding_ranges_cover_loop_bodies_and_comment_blocks(leir_lsp: LeirClient):
    text = "# one\n# two\n" + GOOD
    uri = await leir_lsp.open("fold.leir", text)

    folds = await leir_lsp.text_document_folding_range_async(types.FoldingRangeParams(text_document=_doc(uri)))

    assert [(f.start_line + 1, f.end_line + 1, f.kind) for f in folds] == [
        (1, 3, types.FoldingRangeKind.Comment),
        (4, 6, types.FoldingRangeKind.Region),  # L^{4}_{i} down to the line before "];"
        (5, 6, types.FoldingRangeKind.Region),
    ]


async def test_semantic_tokens_classify_loops_tensors_and_functions(leir_lsp: LeirClient):
    text = "L^{4}_{i} [ Y_{i} = exp(X_{i}) * 2; ];  # note\n"
    uri = await leir_lsp.open("tokens.leir", text)
    legend = leir_lsp.server_capabilities.semantic_tokens_provider.legend

    result = await leir_lsp.text_document_semantic_tokens_full_async(
        types.SemanticTokensParams(text_document=_doc(uri)))

    decoded = _decode(text, result.data, legend)
    assert decoded == [
        ("L", "keyword", []), ("4", "number", []), ("i", "parameter", ["declaration"]),
        ("Y", "variable", []), ("i", "parameter", []), ("=", "operator", []),
        ("exp", "function", []), ("X", "variable", ["readonly"]), ("i", "parameter", []),
        ("*", "operator", []), ("2", "number", []), ("# note", "comment", []),
    ]


def _decode(text: str, data: list[int], legend: types.SemanticTokensLegend):
    lines = text.split("\n")
    out, line, col = [], 0, 0
    for i in range(0, len(data), 5):
        dl, dc, length, kind, bits = data[i:i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        mods = [m for b, m in enumerate(legend.token_modifiers) if bits & (1 << b)]
        units = lines[line].encode("utf-16-le")  # LSP columns count UTF-16 units
        word = units[2 * col:2 * (col + length)].decode("utf-16-le")
        out.append((word, legend.token_types[kind], mods))
    return out


async def test_semantic_token_columns_count_utf16_units(leir_lsp: LeirClient):
    text = "L^{4}_{i} [ Y_{i} = \U0001F600 X_{i}; ];\n"  # an emoji is two UTF-16 units
    uri = await leir_lsp.open("emoji.leir", text)
    legend = leir_lsp.server_capabilities.semantic_tokens_provider.legend

    result = await leir_lsp.text_document_semantic_tokens_full_async(
        types.SemanticTokensParams(text_document=_doc(uri)))

    decoded = _decode(text, result.data, legend)
    assert decoded[-2:] == [("X", "variable", ["readonly"]), ("i", "parameter", [])]


async def test_formatting_returns_the_canonical_text(leir_lsp: LeirClient):
    uri = await leir_lsp.open("fmt.leir", "L^{4}_{i}   [Y_{i}=X_{i}+1;];")

    edits = await leir_lsp.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=_doc(uri), options=types.FormattingOptions(tab_size=2, insert_spaces=True)))

    [edit] = edits
    assert show(edit.range) == "1:1-1:30"
    assert edit.new_text == "L^{4}_{i} [\n  Y_{i} = X_{i} + 1;\n];\n"


async def test_formatting_refuses_a_document_with_syntax_errors(leir_lsp: LeirClient):
    uri = await leir_lsp.open("broken.leir", "L^{4}_{i} [ Y_{i} = X_{i} $ 1; ];\n")

    edits = await leir_lsp.text_document_formatting_async(types.DocumentFormattingParams(
        text_document=_doc(uri), options=types.FormattingOptions(tab_size=2, insert_spaces=True)))

    assert edits is None
    message = await leir_lsp.wait_for_message("not formatted")
    assert "syntax error at 1:27" in message.message


async def test_python_kernels_appear_in_the_outline(leir_lsp: LeirClient):
    text = (
        "from tvm.script import tirx as T\n"
        "\n"
        "@T.prim_func(s_tir=True)\n"
        'def fill(A: T.Buffer((128,), "float32")):\n'
        "    for i in range(128):\n"
        '        with T.sblock("A"):\n'
        "            vi = T.axis.spatial(128, i)\n"
        "            A[vi] = T.float32(1)\n"
    )
    uri = await leir_lsp.open("fill.py", text)

    [kernel] = await leir_lsp.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=_doc(uri)))

    assert (kernel.name, show(kernel.selection_range)) == ("fill", "4:5-4:9")
    assert [(c.name, c.kind) for c in kernel.children] == [
        ("A", types.SymbolKind.Variable), ("i", types.SymbolKind.Operator)]


async def test_formatting_agrees_with_leir_fmt_on_the_examples(leir_lsp: LeirClient, examples_dir, tmp_path):
    import subprocess
    import sys

    for path in sorted(examples_dir.glob("*.leir"))[:6]:
        # Each example in a non-canonical layout: everything on one line.
        text = " ".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        uri = await leir_lsp.open(path.name, text)
        edits = await leir_lsp.text_document_formatting_async(types.DocumentFormattingParams(
            text_document=_doc(uri), options=types.FormattingOptions(tab_size=2, insert_spaces=True)))
        one_line = tmp_path / path.name
        one_line.write_text(text)
        fmt = subprocess.run([sys.executable, "-m", "leir.tools.cli", "fmt", str(one_line)],
                             capture_output=True, text=True, timeout=120)

        assert fmt.returncode == 0, fmt.stderr
        [edit] = edits
        assert edit.new_text == fmt.stdout, path.name

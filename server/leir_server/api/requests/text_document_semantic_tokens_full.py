"""``textDocument/semanticTokens/full``: a class for every loop kind, loop
variable, tensor, function, dtype and scope, number, operator and comment of
a ``.leir`` document (``leir.bridge.outline.semantic_tokens``).

Only ``.leir`` documents: a Python file's colours are its Python language
server's business, and an editor uses one provider's tokens per document.
"""

from __future__ import annotations

from lsprotocol import types

from leir_server.schedule import Background

# The legend is spelled out here, not imported from leir.bridge.outline, so that
# registering the handler imports nothing of leir; a test checks that the two
# lists agree.
TOKEN_TYPES = ["keyword", "parameter", "variable", "function", "number", "operator", "comment", "type"]
TOKEN_MODIFIERS = ["declaration", "readonly"]

OPTIONS = types.SemanticTokensRegistrationOptions(
    legend=types.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=TOKEN_MODIFIERS),
    full=True,
    document_selector=[
        types.TextDocumentFilterLanguage(language="leir"),
        types.TextDocumentFilterPattern(pattern="**/*.leir"),
    ],
)


async def handle(server, params: types.SemanticTokensParams, request: Background) -> types.SemanticTokens:
    snapshot = request.snapshot
    if snapshot is None or snapshot.language != "leir" or snapshot.too_large:
        return types.SemanticTokens(data=[])
    data = await request.run(snapshot.once, "semanticTokens", lambda: tokens(snapshot),
                             what="semantic tokens")  # parses: off the loop
    return types.SemanticTokens(data=data)


def tokens(snapshot) -> list[int]:
    from leir.bridge import outline

    doc = snapshot.leir
    return encode(snapshot, outline.semantic_tokens(snapshot.text, doc.program, doc.analysis))


#: Most tokens coloured in one document (the first ones): 100,000 lines
#: have about two million, whose serialisation alone held the protocol loop
#: for seconds.
MAX_TOKENS = 50_000


def encode(snapshot, tokens) -> list[int]:
    """LSP's relative encoding: per token, line delta, start delta (from the
    previous token on the same line), length, type index, modifier bits."""
    types_index = {name: i for i, name in enumerate(TOKEN_TYPES)}
    modifier_bit = {name: 1 << i for i, name in enumerate(TOKEN_MODIFIERS)}
    data: list[int] = []
    prev_line = prev_char = 0
    position = snapshot.source.position_utf16  # (line, UTF-16 column)
    for token in tokens:
        if len(data) >= 5 * MAX_TOKENS:
            break
        line, char = position(token.start)
        end_line, end_char = position(token.end)
        if end_line != line or end_char <= char:
            continue  # tokens never span lines; skip rather than mislead
        delta_line = line - prev_line
        delta_char = char - prev_char if delta_line == 0 else char
        bits = 0
        for m in token.modifiers:
            bits |= modifier_bit[m]
        data += [delta_line, delta_char, end_char - char, types_index[token.type], bits]
        prev_line, prev_char = line, char
    return data

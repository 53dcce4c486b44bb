"""``textDocument/formatting``: the canonical text ``leir fmt`` prints, as
one edit. A document with syntax errors is not formatted (its layout is
unknown): the editor gets no edit and a message saying why. Python files
are left to Python formatters."""

from __future__ import annotations

from lsprotocol import types

from leir_server.schedule import Background


async def handle(server, params: types.DocumentFormattingParams, request: Background) -> list[types.TextEdit] | None:
    snapshot = request.snapshot
    if snapshot is None or snapshot.language != "leir":
        return None
    edits, refusal = await request.run(formatting, snapshot, what="formatting")  # parses: off the protocol loop
    if refusal is not None:
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=refusal))
    return edits


def formatting(snapshot) -> tuple[list[types.TextEdit] | None, str | None]:
    """The edits, or None and why the document is not formatted."""
    if snapshot.too_large:
        return None, "leir: not formatted: the document is too large to check"
    from leir.format import canonical_text

    doc = snapshot.leir
    text = canonical_text(doc.parsed, doc.analysis)
    if text is None:
        errors = [d for d in doc.parsed.diagnostics if d.is_error]
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        where = doc.source.format_location(first.span)
        return None, f"leir: not formatted: syntax error at {where}: {first.message}{more}"
    if text == snapshot.text:
        return [], None
    return [types.TextEdit(range=snapshot.whole_range(), new_text=text)], None

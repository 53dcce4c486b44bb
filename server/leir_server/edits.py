"""The edits the server hands the client: the smallest edit that turns a
snapshot's text into a new one, for the version it was computed on
(``codeAction/resolve``, ``leir.optimize`` with ``apply``)."""

from __future__ import annotations

from lsprotocol import types


def minimal_edit(snapshot, new_text: str) -> types.TextEdit:
    """One edit replacing the smallest range of ``snapshot`` that differs
    from ``new_text``."""
    old = snapshot.text
    start, limit = 0, min(len(old), len(new_text))
    while start < limit and old[start] == new_text[start]:
        start += 1
    end_old, end_new = len(old), len(new_text)
    while end_old > start and end_new > start and old[end_old - 1] == new_text[end_new - 1]:
        end_old -= 1
        end_new -= 1
    # Whole lines: a readable edit, and never half of a CRLF. (The suffix is
    # common to both texts, so both ends move together.)
    while start > 0 and old[start - 1] != "\n":
        start -= 1
    while 0 < end_old < len(old) and old[end_old - 1] != "\n":
        end_old += 1
        end_new += 1
    rng = types.Range(start=snapshot.position(start), end=snapshot.position(end_old))
    return types.TextEdit(range=rng, new_text=new_text[start:end_new])


def versioned_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits)])

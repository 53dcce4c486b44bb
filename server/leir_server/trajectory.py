"""The steps applied to each kernel through this server
(``Session.trajectory``), recorded when the edit is seen in the document.

``codeAction/resolve`` only hands the client an edit; the client may apply
it or not. So a resolved step is *expected*: it is recorded once the
document's text is seen to equal the edited text (the client applied it).
The server looks on each ``didChange`` (the edit arrives as one), and again
when it reads the document for a code action, code lens, hover, save or
``leir.showTrajectory``. Text equal to the edit's result that the user typed
by hand would count too; the record never has a step whose edit the
document did not show.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Resolved-but-unseen edits kept per document (older ones are dropped).
MAX_EXPECTED = 16


@dataclass(frozen=True)
class Expected:
    text: str
    kernel: str | None
    entries: tuple[dict, ...]


def _expected(server) -> dict[str, list[Expected]]:
    return server.session.expected


def expect(server, uri: str, text: str, kernel: str | None, entries: list[dict]) -> None:
    """Record ``entries`` for ``(uri, kernel)`` when ``uri`` reads ``text``."""
    pending = _expected(server).setdefault(uri, [])
    pending.append(Expected(text, kernel, tuple(entries)))
    del pending[:-MAX_EXPECTED]


def confirm(server, uri: str) -> None:
    """Record the expected steps whose edit the document now shows."""
    pending = _expected(server).get(uri)
    if not pending:
        return
    snapshot = server.session.snapshot(uri)
    if snapshot is None:
        _expected(server).pop(uri, None)
        return
    for k, e in enumerate(pending):
        if e.text == snapshot.text:
            server.session.trajectory(uri, e.kernel).extend(e.entries)
            # Edits resolved before this one can no longer be applied cleanly.
            del pending[: k + 1]
            return

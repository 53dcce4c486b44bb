"""``textDocument/codeAction``: the steps that apply at the cursor, best
first, as ``refactor.rewrite`` actions without an edit.

Listing builds nothing: it parses and analyses (``leir.tools.suggest``), and reads
cached latencies; the edit is computed when the user picks an action
(``codeAction/resolve``), against the version the action was listed for,
which ``data`` carries: ``{uri, version, kernel, step: {id, args}}``.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import suggestions
from leir_server.schedule import Background

OPTIONS = types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite], resolve_provider=True)

#: Most actions offered at one position (a loop of extent 1024 has dozens of
#: split factors; the menu shows the best).
MAX_ACTIONS = 40


def _wanted(only: list[str] | None) -> bool:
    """Whether the client's ``only`` filter admits ``refactor.rewrite``."""
    if not only:
        return True
    kind = types.CodeActionKind.RefactorRewrite.value
    return any(kind == k or kind.startswith(f"{k}.") for k in only)


async def handle(server: LanguageServer, params: types.CodeActionParams,
                 request: Background) -> list[types.CodeAction] | None:
    snapshot = request.snapshot
    if snapshot is None or not _wanted(params.context.only if params.context else None):
        return None
    if not server.session.trusted:
        return []  # every step is verified by running it, which an untrusted workspace forbids
    offset = snapshot.offset(params.range.start)
    found = await request.run(suggestions.compute, server, snapshot, offset, MAX_ACTIONS,
                              what="listing the steps at the cursor")
    return [
        types.CodeAction(
            title=s.label,
            kind=types.CodeActionKind.RefactorRewrite,
            data={"uri": snapshot.uri, "version": snapshot.version, "kernel": s.kernel, "step": s.step.to_json()},
        )
        for s in found
    ]

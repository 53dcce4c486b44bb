"""``codeAction/resolve``: compute, verify and return the edit of one step.

Refused, with an error and no edit, when the document is no longer at the
version the action was listed for (``data.version``), or changes while the
step is verified, or when the program exceeds the memory budget
(``leir.memoryBudgetMB``; said before any job starts). Otherwise the step
is applied and verified numerically in a worker process
(``leir.tools.jobs.apply_step``); a step that fails verification, or that
TVM or the checks refuse, is an error, never an edit.
The edit is a ``TextDocumentEdit`` for that version, replacing the smallest
range that changed (``leir_server.edits``); the step is expected in the
trajectory (``Session.expect``, with the record ``leir.explain.editor``
builds) until the document shows the edit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server.edits import minimal_edit, versioned_edit
from leir_server.workers import InvalidParams, RequestFailed, require_budget, require_trust


def parse_data(data: Any) -> tuple[str, int | None, str | None, dict]:
    """(uri, version, kernel, step) of an action's ``data``."""
    if not isinstance(data, dict) or not isinstance(data.get("uri"), str) or not isinstance(data.get("step"), dict):
        raise InvalidParams("this code action has no leir data {uri, version, kernel, step}: list the actions again")
    version = data.get("version")
    kernel = data.get("kernel")
    step = data["step"]
    if (version is not None and (not isinstance(version, int) or isinstance(version, bool))) \
            or (kernel is not None and not isinstance(kernel, str)) \
            or not isinstance(step.get("id"), str) or not isinstance(step.get("args", {}), dict):
        raise InvalidParams("malformed leir code action data: expected {uri, version: int, kernel: str|null, "
                            "step: {id: str, args: object}}")
    return data["uri"], version, kernel, {"id": step["id"], "args": step.get("args", {})}


def _stale(server, uri: str, version: int | None) -> RequestFailed:
    current = None
    if uri in server.session.languages:
        current = server.workspace.get_text_document(uri).version
    now = "is closed" if current is None else f"is now at version {current}"
    return RequestFailed(f"not applied: the document changed since this action was offered (it was listed for "
                         f"version {version}, the document {now}); ask for code actions again")


async def handle(server: LanguageServer, action: types.CodeAction) -> types.CodeAction:
    from leir.explain.editor import trajectory_entry  # leir.explain: the first request pays for it, not the start-up

    from leir.tools.jobs import Failure, apply_step

    uri, version, kernel, step = parse_data(action.data)
    require_trust(server, "applying a step (it is verified by running it)")
    session = server.session
    snapshot = session.snapshot(uri)
    if not session.is_current(uri, version):
        raise _stale(server, uri, version)
    if snapshot is None:
        raise _stale(server, uri, version)
    if snapshot.language == "leir":  # a Python kernel's size is known once it is loaded, in the job
        doc = await asyncio.to_thread(lambda: snapshot.leir)
        if doc is not None and doc.ok:
            require_budget(server, doc.analysis, "verify", f"{step['id']} not applied")
    result = await session.workers.run(apply_step, snapshot.text, snapshot.language, step, kernel,
                                       what=f"applying {step['id']}")
    if isinstance(result, Failure):
        message = f"{step['id']} not applied: {result.message}"
        if result.detail and result.detail != result.message:
            message += f" ({result.detail})"
        raise RequestFailed(message)
    if not session.is_current(uri, version):  # it changed while the step was verified
        raise _stale(server, uri, version)
    action.edit = versioned_edit(uri, version, [minimal_edit(snapshot, result.text)])
    own = snapshot.leir.analysis if snapshot.language == "leir" and snapshot.leir is not None else None
    entry = await asyncio.to_thread(trajectory_entry, step, action.title, result, snapshot.language,
                                    target=session.settings.target, lookup=session.workers.lookup,
                                    before_analysis=own)
    session.expect(uri, result.text, kernel, [entry])
    return action

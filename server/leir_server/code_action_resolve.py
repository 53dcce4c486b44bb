"""``codeAction/resolve``: compute, verify and return the edit of one step.

Refused, with an error and no edit, when the document is no longer at the
version the action was listed for (``data.version``), or changes while the
step is verified, or when the program exceeds the memory budget
(``leir.memoryBudgetMB``; said before any job starts). Otherwise the step is applied and verified numerically in
a worker process (``leir.tools.jobs.apply_step``); a step that fails
verification, or that TVM or the checks refuse, is an error, never an edit.
The edit is a ``TextDocumentEdit`` for that version, replacing the smallest
range that changed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import trajectory
from leir_server.workers import InvalidParams, RequestFailed, require_budget, require_trust, workers_of


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


def trajectory_entry(server, step: dict, title: str, applied, language: str, before_analysis=None) -> dict:
    """The trajectory record of an applied step: its latencies before and
    after when the cache has them, and the reasoning from both programs.
    ``before_analysis``: the document's own analysis, when it is the
    program the step was applied to (a ``.leir`` document), which saves
    parsing it again (a third of a second on a 1,000-line file)."""
    from types import SimpleNamespace

    from leir.bridge.document import load_leir

    entry: dict[str, Any] = {"id": step["id"], "args": step["args"], "title": title,
                             "latency_before_ms": None, "latency_after_ms": None, "speedup": None,
                             "reasoning": "", "verified": applied.verification}
    if before_analysis is not None and before_analysis.ok:
        before = SimpleNamespace(ok=True, analysis=before_analysis)
    else:
        before = load_leir(applied.before_program)
    after = load_leir(applied.after_program)
    if not (before.ok and after.ok):
        return entry
    lookup = workers_of(server).lookup()
    if lookup is not None:
        mb, ma = lookup.measured(before.analysis), lookup.measured(after.analysis)
        if mb is not None and ma is not None and mb.median_ms and ma.median_ms:
            entry.update(latency_before_ms=mb.median_ms, latency_after_ms=ma.median_ms,
                         speedup=round(mb.median_ms / ma.median_ms, 3))
    try:
        from leir.explain import step_reasoning
        from leir.transforms import Step
    except ImportError:
        return entry
    measured = None
    if entry["latency_before_ms"] is not None:
        measured = (entry["latency_before_ms"], entry["latency_after_ms"])
    if language == "leir":  # a Python kernel's step names TIR blocks, which the LEIR form does not have
        reasoning = step_reasoning(before.analysis, after.analysis, Step(step["id"], step["args"]), measured=measured,
                                   target=server.session.settings.target)
        entry["reasoning"] = reasoning.text
    return entry


async def handle(server: LanguageServer, action: types.CodeAction) -> types.CodeAction:
    from leir.tools.jobs import Failure, apply_step

    uri, version, kernel, step = parse_data(action.data)
    require_trust(server, "applying a step (it is verified by running it)")
    session = server.session
    trajectory.confirm(server, uri)
    if not session.is_current(uri, version):
        raise _stale(server, uri, version)
    snapshot = session.snapshot(uri)
    if snapshot is None:
        raise _stale(server, uri, version)
    if snapshot.language == "leir":  # a Python kernel's size is known once it is loaded, in the job
        doc = await asyncio.to_thread(lambda: snapshot.leir)
        if doc is not None and doc.ok:
            require_budget(server, doc.analysis, "verify", f"{step['id']} not applied")
    result = await workers_of(server).run(apply_step, snapshot.text, snapshot.language, step, kernel,
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
    entry = await asyncio.to_thread(trajectory_entry, server, step, action.title, result, snapshot.language, own)
    trajectory.expect(server, uri, result.text, kernel, [entry])
    return action

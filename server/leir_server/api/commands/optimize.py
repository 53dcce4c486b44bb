"""``leir.optimize`` {uri, kernel?, steps?, budget?, strategy?, apply?}:
search for verified steps that make the program faster
(``leir.tools.optimize.optimize``), measured through the server's measurement
engine.

- Progress: ``window/workDoneProgress`` (cancellable) when the client
  supports it, on a token the server creates (pygls does not hand a
  command its ``workDoneToken``; a client may pass one as the argument
  ``workDoneToken``).
- Each kept step is sent at once as ``leir/trajectory`` {uri, kernel,
  steps, done: false}; the last notification has done: true and ``final``.
- Cancelling (``$/cancelRequest`` or the progress's cancel button) cancels
  the search's queued and running measurements and kills the search
  process; nothing more is measured for it.
- Returns {start_ms, steps: [{id, args, latency_before_ms,
  latency_after_ms, speedup, reasoning}], final, applied, ...} (``final``
  is LEIR text; for a Python kernel, the optimized kernel's LEIR form).
  With ``apply: true`` a ``.leir`` document gets the final program through
  ``workspace/applyEdit``, only if its version is still the one searched.
"""

from __future__ import annotations

import asyncio
import uuid

from lsprotocol import types

from leir.tools import optimize_messages as messages
from leir_server.api.commands.measure import status
from leir_server.edits import minimal_edit, versioned_edit
from leir_server.workers import Measuring, OptimizeRun, RequestFailed, ToCommand, require_budget, require_trust

#: Most steps one call may ask for.
MAX_STEPS = 50


def _client_has_progress(server) -> bool:
    caps = server.client_capabilities
    return bool(caps and caps.window and caps.window.work_done_progress)


async def _progress_token(server, call):
    token = call.args.get("workDoneToken")
    if isinstance(token, (str, int)) and not isinstance(token, bool):
        return token
    if not _client_has_progress(server):
        return None
    token = f"leir-optimize-{uuid.uuid4()}"
    try:
        await server.work_done_progress.create_async(token)
    except Exception:  # noqa: BLE001 - a client that refuses gets no progress, not an error
        return None
    return token


async def run(server, call) -> dict:
    from leir.tools.jobs import Failure
    from leir.tools.optimize import MIN_BUDGET, STRATEGIES

    require_trust(server, "optimizing")
    snapshot = call.snapshot(server)
    kernel = call.string("kernel")
    if snapshot.language == "leir" and kernel is not None:
        raise RequestFailed(f"{call.name}: 'kernel' chooses a kernel of a Python file; a .leir file is one program")
    settings = server.session.settings
    steps = call.integer("steps", 3, 1, MAX_STEPS)
    budget = call.integer("budget", settings.measurement_budget, MIN_BUDGET, 10_000)
    strategy = call.choice("strategy", "plans", STRATEGIES)
    apply = call.boolean("apply", False)
    if settings.target == "rpc":
        # The search ranks for a kind of device; the engine measures on the tracker's.
        target = "cuda" if "cuda" in (settings.rpc_key or "") else "llvm"
    else:
        target = settings.target
    if snapshot.language == "leir":  # said before the search starts; a Python kernel is checked by the search
        doc = await asyncio.to_thread(lambda: snapshot.leir)
        if doc is not None and doc.ok:
            require_budget(server, doc.analysis, "verify", f"{call.name} refused")
    workers = server.session.workers
    engine = await asyncio.to_thread(workers.engine)
    options = {"steps": steps, "budget": budget, "strategy": strategy, "target": target,
               "paired": hasattr(engine, "compare"), "memory_budget_mb": workers.budget_mb()}

    token = await _progress_token(server, call)
    uri, version = snapshot.uri, snapshot.version
    found: list[dict] = []

    def notify_trajectory(done: bool, final: str | None = None) -> None:
        params = {"uri": uri, "kernel": kernel, "steps": list(found), "done": done}
        if final is not None:
            params["final"] = final
        server.protocol.notify("leir/trajectory", params)

    def on_message(message: ToCommand) -> None:
        if isinstance(message, messages.StepKept):
            found.append(message.step)
            notify_trajectory(False)
            if token is not None:
                server.work_done_progress.report(token, types.WorkDoneProgressReport(
                    message=f"step {len(found)}/{steps}: {message.step['id']}",
                    percentage=int(100 * len(found) / steps)))
        elif isinstance(message, messages.Progress) and token is not None:
            server.work_done_progress.report(token, types.WorkDoneProgressReport(message=message.text))
        elif isinstance(message, Measuring):
            status(server, True, uri, device=engine.device)

    if token is not None:
        server.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title="leir optimize", message=f"{strategy}, {steps} steps, budget {budget}", cancellable=True,
            percentage=0))
    search = OptimizeRun(workers, snapshot.text, snapshot.language, kernel, options, on_message)
    progress_cancel = server.work_done_progress.tokens.get(token) if token is not None else None
    if progress_cancel is not None:
        progress_cancel.add_done_callback(lambda f: f.cancelled() and call.cancelled.set())
    waiting = asyncio.ensure_future(search.result())
    cancelled = asyncio.ensure_future(call.cancelled.wait())
    try:
        await asyncio.wait({waiting, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            search.cancel()
        outcome = await waiting
    except asyncio.CancelledError:
        search.cancel()
        raise
    finally:
        cancelled.cancel()
        status(server, False, uri, device=engine.device)
        if token is not None:
            server.work_done_progress.end(token, types.WorkDoneProgressEnd(
                message="cancelled" if search.cancelled else f"{len(found)} steps"))
            server.work_done_progress.tokens.pop(token, None)

    if isinstance(outcome, Failure):
        notify_trajectory(True)
        if outcome.code == "cancelled" or search.cancelled:
            return {"start_ms": None, "steps": found, "final": None, "applied": False, "cancelled": True,
                    "measurements_submitted": search.submitted}
        raise RequestFailed(f"{call.name}: {outcome.message}")
    result = dict(outcome.result)
    notify_trajectory(True, result.get("final"))
    result["applied"] = False
    result["measurements_submitted"] = search.submitted
    if apply:
        result["applied"], result["apply_note"] = await _apply(server, snapshot, version, kernel, result)
    return result


async def _apply(server, snapshot, version, kernel, result: dict) -> tuple[bool, str]:
    from leir.explain.editor import search_entries  # leir.explain: the first request pays for it, not the start-up

    if snapshot.language != "leir":
        return False, "apply works on .leir documents; the optimized kernel is in 'final' as LEIR"
    if not result["steps"]:
        return False, "no step was kept"
    if not server.session.is_current(snapshot.uri, version):
        return False, "the document changed during the search; not applied"
    final = result["final"]
    edit = versioned_edit(snapshot.uri, version, [minimal_edit(snapshot, final)])
    server.session.expect(snapshot.uri, final, kernel, search_entries(result["steps"]))
    try:
        response = await server.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=edit, label="leir optimize"))
    except Exception as e:  # noqa: BLE001 - a client without applyEdit: the result is still returned
        return False, f"the editor could not apply the edit ({type(e).__name__}: {e})"
    if not response.applied:
        return False, f"the editor did not apply the edit ({response.failure_reason or 'no reason given'})"
    return True, "applied"

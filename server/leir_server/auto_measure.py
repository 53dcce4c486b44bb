"""``autoMeasure``: measure a document's program and its top suggestions in
the background, so that the next code-action menu and hover show measured
speedups.

Started on save (and by ``schedule`` from anywhere else). For the saved
version: the program is measured, and each of the top ``TOP`` suggestions
not yet measured is applied and verified in a job process (which records
what it produced, ``leir.suggest.StepOutcomes``) and the result measured.
Everything goes through the measurement engine at a priority below the
user's own commands. Saving again stops the run for the older version
(its queued measurements cancelled, its job killed); after a change no
further step is applied for the old version, and what was already queued
is measured (each result is a true measurement of its program, kept in the
cache).
"""

from __future__ import annotations

import asyncio
import logging

from leir_server import suggestions
from leir_server.workers import RequestFailed, workers_of

logger = logging.getLogger(__name__)

#: Suggestions measured per save.
TOP = 3
#: Below the default priority (0) of ``leir.measure`` and ``leir.optimize``.
PRIORITY = -10


def _tasks(server) -> dict[str, asyncio.Task]:
    return server.session.auto_measures


def cancel(server, uri: str) -> None:
    task = _tasks(server).pop(uri, None)
    if task is not None:
        task.cancel()


def schedule(server, uri: str) -> None:
    """Measure ``uri``'s current version and its top suggestions (replacing
    any run for an older version)."""
    cancel(server, uri)
    if not server.session.settings.auto_measure or not server.session.trusted:
        return
    _tasks(server)[uri] = asyncio.get_running_loop().create_task(_run(server, uri))


async def _run(server, uri: str) -> None:
    from leir_server.commands.measure import status

    session = server.session
    snapshot = session.snapshot(uri)
    if snapshot is None or snapshot.too_large:
        return
    futures = []
    workers = workers_of(server)
    try:
        program = await asyncio.to_thread(suggestions.kernel_analysis, snapshot, None)
        if program is None:  # errors, or a Python file whose kernel needs choosing
            return
        from leir.footprint import check_budget

        if not isinstance(program, str) and check_budget(program, "measure", budget_mb=workers.budget_mb()):
            return  # over the memory budget: its warning diagnostic says so, nothing is measured
        found = await suggestions.at(server, snapshot, None, TOP)
        engine = await asyncio.to_thread(workers.engine)
        status(server, True, uri, device=engine.device)
        futures.append(await asyncio.to_thread(engine.submit, program, priority=PRIORITY, label=f"{uri} (auto)"))
        for s in found:
            if s.after is not None or not session.is_current(uri, snapshot.version):
                continue
            after = await _after_program(server, snapshot, s)
            if after is not None:
                futures.append(await asyncio.to_thread(engine.submit, after, priority=PRIORITY,
                                                       label=f"{uri}: {s.title} (auto)"))
        done = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
        first = done[0]
        latency = getattr(first, "median_ms", None)
        status(server, False, uri, device=engine.device, latency_ms=latency)
    except asyncio.CancelledError:
        for f in futures:
            f.cancel()
        raise
    except RequestFailed as e:  # a job that failed or timed out: nothing to show, nothing to break
        logger.info("auto-measure of %s stopped: %s", uri, e)
    except Exception:  # noqa: BLE001 - background work must never take the server down
        logger.exception("auto-measure of %s failed", uri)
    finally:
        if _tasks(server).get(uri) is asyncio.current_task():
            del _tasks(server)[uri]


async def _after_program(server, snapshot, s) -> str | None:
    """The verified program after suggestion ``s`` (LEIR text), or None."""
    from leir.jobs import Applied, apply_step

    result = await workers_of(server).run(apply_step, snapshot.text, snapshot.language, s.step.to_json(), s.kernel,
                                          what=f"applying {s.step.id}")
    return result.after_program if isinstance(result, Applied) else None

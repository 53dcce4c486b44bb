"""``autoMeasure``: measure a document's program and its top suggestions in
the background, so that the next code-action menu and hover show measured
speedups.

Started on save (and by ``schedule`` from anywhere else). For the saved
version, ``leir.tools.measuring.TopStepsPlan`` (the plan watch mode follows too)
measures the program, then applies and verifies each of the top ``TOP``
suggestions not yet measured in a job process (which records what it
produced, ``leir.tools.measuring.StepOutcomes``) and measures the result.
Everything goes through the measurement engine at a priority below the
user's own commands. Saving again stops the run for the older version
(its queued measurements cancelled, its job killed); after a change no
further step is applied for the old version, and what was already queued
is measured (each result is a true measurement of its program, kept in the
cache).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

from leir.tools.measuring import TopStepsPlan

from leir_server import suggestions
from leir_server.workers import RequestFailed

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


class _SavedPlan(TopStepsPlan):
    """The plan for one saved version, run in a thread: each step is applied
    and verified by a job (on the server's event loop), every measurement
    goes to the engine; ``stop`` cancels what is queued and the job that
    runs."""

    def __init__(self, server, uri: str, snapshot, measurer, loop: asyncio.AbstractEventLoop):
        super().__init__(measurer)
        self.server, self.uri, self.snapshot, self.loop = server, uri, snapshot, loop
        self.futures: list[concurrent.futures.Future] = []
        #: What is known of the program itself: (status, latency_ms).
        self.program_status: tuple[str, float | None] = ("not measured", None)
        self._lock = threading.Lock()
        self._job: concurrent.futures.Future | None = None
        self._stopped = False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for f in [*self.futures, *([self._job] if self._job is not None else [])]:
                f.cancel()

    def current(self) -> bool:
        return not self._stopped and self.server.session.is_current(self.uri, self.snapshot.version)

    def known(self, s) -> bool:
        return s.after is not None  # measured before: leir.tools.suggest found its program in the cache

    def apply(self, s):
        """The verified program after ``s``, analysed, or None."""
        with self._lock:
            if self._stopped:
                return None
            self._job = asyncio.run_coroutine_threadsafe(_after_program(self.server, self.snapshot, s), self.loop)
        try:
            text = self._job.result()
        except concurrent.futures.CancelledError:
            return None
        if text is None:
            return None
        from leir.bridge.document import load_leir

        doc = load_leir(text)
        return doc.analysis if doc.ok else None

    def label(self, s) -> str:
        return f"{self.uri} (auto)" if s is None else f"{self.uri}: {s.title} (auto)"

    def submitted(self, target, future) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self.futures.append(future)
            return True

    def status(self, target, status: str, latency_ms: float | None = None) -> None:
        if target is None:
            self.program_status = (status, latency_ms)


async def _run(server, uri: str) -> None:
    from leir.tools.measuring import EngineMeasurer

    from leir_server.api.commands.measure import status

    session = server.session
    snapshot = session.snapshot(uri)
    if snapshot is None or snapshot.too_large:
        return
    plan = None
    workers = session.workers
    try:
        program = await asyncio.to_thread(suggestions.kernel_analysis, snapshot, None)
        if program is None:  # errors, or a Python file whose kernel needs choosing
            return
        from leir.footprint import check_budget

        if check_budget(program, "measure", budget_mb=workers.budget_mb()):
            return  # over the memory budget: its warning diagnostic says so, nothing is measured
        found = await suggestions.at(server, snapshot, None, TOP)
        engine = await asyncio.to_thread(workers.engine)
        measurer = EngineMeasurer(engine, measured=workers.lookup(), priority=PRIORITY)
        plan = _SavedPlan(server, uri, snapshot, measurer, asyncio.get_running_loop())
        status(server, True, uri, device=engine.device)
        await asyncio.to_thread(plan.run, program, found)
        await asyncio.gather(*(asyncio.wrap_future(f) for f in plan.futures), return_exceptions=True)
        state, latency = plan.program_status
        status(server, False, uri, device=engine.device,
               latency_ms=latency if state in ("cached", "measured") else None)
    except asyncio.CancelledError:
        if plan is not None:
            plan.stop()
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
    from leir.tools.jobs import Applied, apply_step

    result = await server.session.workers.run(apply_step, snapshot.text, snapshot.language, s.step.to_json(),
                                              s.kernel, what=f"applying {s.step.id}")
    return result.after_program if isinstance(result, Applied) else None

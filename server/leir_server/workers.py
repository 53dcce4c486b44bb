"""Where the server's slow work runs: never on the protocol loop.

- **Jobs** (apply a step and verify it, convert, raise a Python kernel):
  a ``pebble.ProcessPool`` of ``POOL_WORKERS`` processes, forked from a
  ``forkserver`` that has imported TVM once. Each job has a time limit; a
  job past it, or cancelled, has its worker killed; a worker that crashes
  (a segfault in TVM) fails its job with the reason and is replaced.
  ``pebble`` does those three things, which ``concurrent.futures``'
  ``ProcessPoolExecutor`` does not (it cannot stop a running job, and one
  crash breaks the whole pool). Each job process is capped
  (``leir.tools.jobs.job_worker_initializer``: ``leir.sandbox`` memory cap of
  ``leir.footprint.worker_cap`` of the ``memoryBudgetMB`` setting, 4.2 GB
  with the default budget, and marked isolated); a job that runs out of it
  fails with a ``RequestFailed`` that says so, and the pool goes on with a
  fresh process where the old one died.
- **Measurements**: the measurement engine (``leir.measure``), which has
  its own worker processes and the on-disk cache. Created on first use with
  the settings' target, recreated when the target changes, closed on
  shutdown and ``leir.restart``.
- **Optimize searches** (``OptimizeRun``): a process of its own running
  ``leir.tools.jobs.optimize_child``; it asks this process to measure each batch
  of candidates through the engine, so cancelling the run cancels its
  queued and running measurements and kills the search. The messages
  between the two are typed in ``leir.tools.optimize_messages``.

One ``Workers`` per server, a field of its session (``Session.workers``);
async handlers ``await server.session.workers.run(function, ...)``; callers
from threads use ``workers.engine()`` directly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Union

from pygls.exceptions import JsonRpcException

from leir.sandbox import exit_text

from leir.tools import optimize_messages as messages

if TYPE_CHECKING:
    from leir.measure import MeasurementEngine
    from leir.tools.measuring import MeasuredLookup
    from leir_server.model_worker import ModelWorker

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measuring:
    """The server has submitted ``count`` of a search's programs to the
    measurement engine (posted by ``OptimizeRun``, not sent by the search)."""

    count: int


#: What ``OptimizeRun.on_message`` is called with, on the event loop.
ToCommand = Union[messages.Progress, messages.StepKept, Measuring]

#: Job processes: two let a convert run while a step is verified; more
#: would only compete with the measurement engine for the cores.
POOL_WORKERS = 2
#: Apply + verify builds two kernels and runs them on three inputs: seconds
#: for an example, about two minutes for a 1,000-line file on a loaded
#: 2-core machine (bench/server.py). The limit is for hangs, not slowness.
JOB_TIMEOUT_S = 600.0
#: Imported once in the forkserver, so that each job process starts with them.
PRELOAD_EXTRA = ["leir.tools.jobs", "leir.transforms", "leir.transforms.python_kernels", "leir.tools.suggest"]

#: LSP's RequestFailed: the request was valid but could not be done.
REQUEST_FAILED = -32803
INVALID_PARAMS = -32602


class RequestFailed(JsonRpcException):
    """An error response with a one-line message (no traceback)."""

    CODE = REQUEST_FAILED


class InvalidParams(JsonRpcException):
    CODE = INVALID_PARAMS


def _context():
    """The forkserver context the measurement engine uses (one forkserver
    per process), with the job modules preloaded too when this starts it."""
    from leir import sandbox

    return sandbox.worker_context(sandbox.MEASUREMENT_PRELOAD + PRELOAD_EXTRA)


class Workers:
    """The job pool, the measurement engine and the running optimize searches
    of one server."""

    def __init__(self, server):
        self.server = server
        self._lock = threading.Lock()
        self._pool = None
        #: (memory cap, budget MB) the pool's processes were started with.
        self._pool_limits: tuple | None = None
        self._engine: "MeasurementEngine | None" = None
        self._engine_settings: tuple | None = None
        self._lookups: dict[str, "MeasuredLookup | None"] = {}
        #: The optimize searches running (each ``OptimizeRun`` adds itself
        #: and leaves when its process is gone), stopped with the workers.
        self.runs: set["OptimizeRun"] = set()
        #: The model's ranking process (``leir_server.model_worker``), started
        #: on the first ranking asked for while ``model_enabled`` is set.
        self.model: "ModelWorker | None" = None
        self.closed = False

    # ------------------------------------------------------------ jobs

    def budget_mb(self) -> float | None:
        """The ``memoryBudgetMB`` setting (None: the default)."""
        return getattr(self.server.session.settings, "memory_budget_mb", None)

    def memory_cap(self) -> int:
        """The memory cap of each job process, from the budget."""
        from leir.footprint import worker_cap

        return worker_cap(self.budget_mb())

    def _pool_now(self):
        import pebble

        from leir.tools.jobs import job_worker_initializer

        limits = (self.memory_cap(), self.budget_mb())
        old = None
        with self._lock:
            if self.closed:
                raise RequestFailed("the server is shutting down")
            if self._pool is not None and self._pool_limits != limits:
                old, self._pool = self._pool, None  # the budget changed: new jobs get new processes
            if self._pool is None:
                self._pool = pebble.ProcessPool(max_workers=POOL_WORKERS, context=_context(),
                                                initializer=job_worker_initializer, initargs=limits)
                self._pool_limits = limits
            pool = self._pool
        if old is not None:
            old.close()  # running jobs finish; their processes then exit
        return pool

    async def run(self, function: Callable, *args, timeout: float = JOB_TIMEOUT_S, what: str = "the job", **kwargs):
        """``function(*args, **kwargs)`` in a job process. Raises
        ``RequestFailed`` when it times out or its process dies; cancelling
        the awaiting task kills the job."""
        from pebble import ProcessExpired

        from leir.footprint import format_bytes

        pool = self._pool_now()
        cap = self._pool_limits[0] if self._pool_limits else self.memory_cap()
        future = pool.schedule(function, args=args, kwargs=kwargs, timeout=timeout)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except TimeoutError:
            raise RequestFailed(f"{what} took longer than {timeout:.0f} s and was stopped") from None
        except MemoryError:
            raise RequestFailed(f"{what} ran out of memory: a job may use {format_bytes(cap)} (the memory budget "
                                f"plus TVM's own; setting leir.memoryBudgetMB)") from None
        except ProcessExpired as e:
            raise RequestFailed(f"{what} stopped: its worker process died ({e}; a job may use {format_bytes(cap)} "
                                f"of memory, setting leir.memoryBudgetMB)") from None
        except CancelledError:
            raise RequestFailed(f"{what} was cancelled (the workers restarted)") from None

    # ------------------------------------------------------------ measuring

    def _settings_key(self) -> tuple:
        s = self.server.session.settings
        return (s.target, s.rpc_tracker, s.rpc_key, getattr(s, "memory_budget_mb", None))

    def engine(self) -> "MeasurementEngine":
        """The measurement engine for the current target (created, or
        recreated after a change of target, here). Blocking: call it from a
        thread (an RPC target asks its tracker for devices)."""
        from leir.measure import MeasurementEngine

        key = self._settings_key()
        with self._lock:
            if self.closed:
                raise RequestFailed("the server is shutting down")
            if self._engine is not None and self._engine_settings == key:
                return self._engine
            old, self._engine = self._engine, None
        if old is not None:
            old.close()
        engine = MeasurementEngine(self.server.session.settings.measure_target, memory_budget_mb=self.budget_mb())
        with self._lock:
            self._engine, self._engine_settings = engine, key
        return engine

    def engine_if_started(self) -> "MeasurementEngine | None":
        with self._lock:
            if self._engine is not None and self._engine_settings == self._settings_key():
                return self._engine
        return None

    def lookup(self) -> "MeasuredLookup | None":
        """Cached latencies on the current target (read only). Blocking the
        first time per target (it names the device): call from a thread."""
        from leir.errors import LeirError
        from leir.tools.measuring import MeasuredLookup

        engine = self.engine_if_started()
        if engine is not None:
            return MeasuredLookup.for_engine(engine)
        target = self.server.session.settings.target
        with self._lock:
            if target in self._lookups:
                return self._lookups[target]
        try:
            found = MeasuredLookup.for_target(target)
        except LeirError as e:  # an unusable cache: no latencies, said once in the log
            logger.warning("no cached latencies: %s", e)
            found = None
        with self._lock:
            self._lookups[target] = found
        return found

    def device(self) -> str | None:
        engine = self.engine_if_started()
        if engine is not None:
            return engine.device
        found = self._lookups.get(self.server.session.settings.target)
        return found.device if found is not None else None

    # ------------------------------------------------------------ the model

    def model_worker(self, on_active=None, ranker: str = "model", sol: tuple[float, str, str] | None = None,
                     on_update=None) -> "ModelWorker":
        """The model worker for the ranker ``ranker`` (the ``model.tier``
        setting's) decoding its reasoning as ``sol`` says (the ``model.sol``
        settings'), created (not yet started: its process starts with the
        first ranking) here; one for another ranker or decoding is stopped
        first."""
        from leir_server.model_worker import ModelWorker

        with self._lock:
            if self.closed:
                raise RequestFailed("the server is shutting down")
            old = None
            if self.model is not None and (self.model.ranker, self.model.sol) != (ranker, sol):
                old, self.model = self.model, None
            if self.model is None:
                self.model = ModelWorker(on_active=on_active, context=_context, ranker=ranker, sol=sol,
                                         on_update=on_update)
            found = self.model
        if old is not None:
            old.close()
        return found

    def stop_model(self) -> None:
        """Stop the model worker, if one was created (``model_enabled`` turned
        off, or ``model.tier`` or the ``model.sol`` settings changed)."""
        with self._lock:
            model, self.model = self.model, None
        if model is not None:
            model.close()

    # ------------------------------------------------------------ stopping

    def _stop(self) -> None:
        for run in list(self.runs):
            run.cancel()
        with self._lock:
            pool, self._pool = self._pool, None
            self._pool_limits = None
            engine, self._engine = self._engine, None
            self._engine_settings = None
            self._lookups.clear()
            model, self.model = self.model, None
        if model is not None:
            model.close()
        if pool is not None:
            pool.stop()
            pool.join(timeout=10)
        if engine is not None:
            engine.close()

    def restart(self) -> None:
        """Stop every job, search and measurement; new ones start on demand."""
        self._stop()

    def close(self) -> None:
        self._stop()
        with self._lock:
            self.closed = True


def require_trust(server, what: str) -> None:
    """Refuse work that compiles and runs kernels in an untrusted workspace."""
    if not server.session.trusted:
        raise RequestFailed(f"{what} is off in an untrusted workspace: it compiles and runs the kernel; "
                            f"trust the workspace to enable it")


def require_budget(server, analysis, what: str, refusal: str) -> None:
    """Refuse (``RequestFailed``: "REFUSAL: the tensors of this program
    take ...") work on a program whose memory exceeds the
    ``memoryBudgetMB`` budget, before any job is started. ``what``: "verify",
    "measure" or "run" (``leir.footprint.check_budget``)."""
    from leir.footprint import check_budget

    message = check_budget(analysis, what, budget_mb=server.session.workers.budget_mb())
    if message is not None:
        raise RequestFailed(f"{refusal}: {message}")


# ------------------------------------------------------------ optimize


class OptimizeRun:
    """One ``leir.optimize`` search in a process of its own (see the module
    docstring). ``on_message(message)`` is called on the event loop for each
    ``Progress`` and ``StepKept`` the search sends, and a ``Measuring`` for
    each batch of its programs submitted to the engine
    (``leir.tools.optimize_messages``); ``await run.result()`` gives a
    ``Done`` or a ``Failure``."""

    def __init__(self, workers: Workers, text: str, language: str, kernel: str | None, options: dict,
                 on_message: Callable[["ToCommand"], None]):
        self.workers = workers
        self.loop = asyncio.get_running_loop()
        self.on_message = on_message
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._futures: list[Future] = []
        self._done: Future = Future()
        self._outcome = None
        #: Measurements submitted to the engine (for the tests' "none after cancel").
        self.submitted = 0
        ctx = _context()
        self._conn, child = ctx.Pipe()
        from leir.tools.jobs import optimize_child

        self.process = ctx.Process(target=optimize_child, args=(child, text, language, kernel, options),
                                   name="leir-optimize", daemon=True)
        self.process.start()
        child.close()
        workers.runs.add(self)
        self._thread = threading.Thread(target=self._drive, name="leir-optimize-driver", daemon=True)
        self._thread.start()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop the search now: its measurements are cancelled (queued ones
        never run, a running one has its worker killed) and its process is
        killed."""
        with self._lock:
            self._cancelled.set()
            futures = list(self._futures)
        for f in futures:
            f.cancel()
        if self.process.is_alive():
            self.process.kill()

    async def result(self):
        return await asyncio.wrap_future(self._done)

    def _post(self, message: "ToCommand") -> None:
        try:
            self.loop.call_soon_threadsafe(self.on_message, message)
        except RuntimeError:  # the loop is closed: the server is gone
            pass

    def _finish(self, value) -> None:
        """The run's outcome (the first one said); given out once the search
        process is gone."""
        if self._outcome is None:
            self._outcome = value

    def _drive(self) -> None:
        from leir.tools.jobs import Failure

        try:
            while not self.cancelled:
                if not self._conn.poll(0.1):
                    if not self.process.is_alive() and not self._conn.poll(0):
                        code = self.process.exitcode
                        self._finish(Failure("crashed", f"the optimize process stopped ({exit_text(code)})"))
                        return
                    continue
                try:
                    message = self._conn.recv()
                    if isinstance(message, messages.MeasureRequest):
                        timings = self._measure(message.programs)
                        if timings is None:
                            break
                        self._conn.send(messages.Timings(timings))
                    elif isinstance(message, messages.PairedRequest):
                        paired = self._paired(message.before, message.after, message.rounds)
                        if paired is None:
                            break
                        self._conn.send(paired)
                except (EOFError, OSError):  # the search process is gone
                    self.process.join(5)
                    if self.cancelled:
                        break
                    code = self.process.exitcode
                    self._finish(Failure("crashed", f"the optimize process stopped ({exit_text(code)})"))
                    return
                if isinstance(message, (messages.Progress, messages.StepKept)):
                    self._post(message)
                elif isinstance(message, messages.Done):
                    self._finish(message)
                    return
                elif isinstance(message, messages.Failed):
                    self._finish(message.failure)
                    return
            self._finish(Failure("cancelled", "optimize was cancelled"))
        except Exception as e:  # noqa: BLE001 - reported to the client as the command's failure
            logger.exception("optimize driver")
            self._finish(Failure("error", f"optimize failed: {type(e).__name__}: {e}"))
        finally:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
            self._conn.close()
            self.workers.runs.discard(self)
            self._done.set_result(self._outcome)

    def _wait(self, futures: list[Future]) -> bool:
        """Wait for every future; False (and the rest cancelled) on cancel."""
        from concurrent.futures import FIRST_COMPLETED, wait

        pending = set(futures)
        while pending:
            if self.cancelled:
                for f in pending:
                    f.cancel()
                return False
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        return True

    def _paired(self, before: str, after: str, rounds: int) -> "messages.PairedTimes | None":
        """The engine's paired comparison (``compare``), as the child's
        ``paired`` reads it; None when cancelled."""
        engine = self.workers.engine()
        with self._lock:
            if self.cancelled:
                return None
            future = engine.compare(before, after, rounds=rounds)
            self._futures = [future]
            self.submitted += 2
        if not self._wait([future]):
            return None
        if future.cancelled():
            return messages.PairedTimes(error="cancelled")
        if future.exception() is not None:
            return messages.PairedTimes(error=str(future.exception()))
        p = future.result()
        if not p.ok:
            return messages.PairedTimes(error=str(p.error))
        return messages.PairedTimes(tuple(p.before.results_ms), tuple(p.after.results_ms), tuple(p.before_rounds_ms),
                                    tuple(p.after_rounds_ms))

    def _measure(self, programs: list[str]) -> list[tuple] | None:
        """Each program measured by the engine; None when cancelled."""
        from leir.tools.jobs import timing_json

        engine = self.workers.engine()
        with self._lock:
            if self.cancelled:
                return None
            self._futures = []
            for n, text in enumerate(programs):
                try:
                    self._futures.append(engine.submit(text, label=f"optimize candidate {self.submitted + 1}"))
                except Exception as e:  # noqa: BLE001 - a program the engine refuses is one failed timing
                    failed: Future = Future()
                    failed.set_exception(e)
                    self._futures.append(failed)
                self.submitted += 1
            futures = list(self._futures)
        self._post(Measuring(len(futures)))
        if not self._wait(futures):
            return None
        out = []
        for f in futures:
            if f.cancelled():
                out.append((None, "cancelled", False))
            elif f.exception() is not None:
                out.append((None, str(f.exception()), False))
            else:
                out.append(timing_json(f.result()))
        return out

"""The measurement engine: a queue of programs to measure, a pool of worker
processes that build and time them, and a cache in front.

    engine = MeasurementEngine("llvm")                  # or "cuda", or RPC(host, port, key)
    future = engine.submit(analysis, label="matmul")    # a Future[Measurement]
    m = future.result()                                 # m.median_ms, m.verified, m.error...
    engine.measure_many(programs, progress=print)       # several, with progress
    engine.compare(before, after, rounds=3).result()    # a PairedMeasurement: timed turn about, fresh
    future.cancel(); engine.cancel_all(); engine.close()

**Isolation.** Builds and runs happen in worker processes
(``leir.measure.worker``). A job whose worker dies (a segfault in a kernel)
or passes its time limit (a hang) fails with the reason; the worker is
replaced and the next job runs. Each worker's memory is capped (see
``worker``). Workers live between jobs, since importing TVM takes seconds:
they are forked from a ``forkserver`` process that has imported TVM once, so
replacing one costs a fraction of a second. Nothing in this process imports
TVM.

**Concurrency.** Several workers build candidates at once; timing takes the
device alone. On the local CPU the timing also has the machine alone: no
build starts while a job waits for the device or is timed, and a job is
timed only when no build is running, since a compiler on the next core
disturbs the timing (``exclusive_timing``). On a GPU, builds (on the CPU)
overlap the timing of another job. Through an RPC tracker, the tracker
hands each job a free device, so jobs are timed in parallel on different
devices. The queue is bounded (``max_queued``): ``submit`` waits for room,
or raises ``EngineBusy`` when asked not to wait. Higher ``priority`` jobs
leave the queue first.

**Time limit.** ``timeout_s`` bounds each phase of a job on its own: the
build (lowering, compiling, loading, the reference evaluation) and the
timing (the check run, the timed runs, the vendor reference). Waiting in the
queue or for the device does not count.

**Cache.** ``submit`` looks the program up first (``key.measurement_key``,
``cache.MeasurementCache``): a hit is a finished future at once, and no
worker starts. Successful measurements are stored.

**Callbacks** (future callbacks, phase callbacks, ``measure_many``'s
progress) run on the engine's scheduler thread: they must be quick and must
not wait for another measurement.
"""

from __future__ import annotations

import heapq
import itertools
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for
from typing import Callable, Iterable, Sequence

from leir import ast as A
from leir import sandbox
from leir.bridge.comparison import Comparison
from leir.errors import LeirError
from leir.measure import worker as worker_module
from leir.measure.cache import MeasurementCache
from leir.measure.device import (DevicePeaks, ProgramCost, cpu_name, gpu_name, load_peaks, program_cost,
                                 roofline_ms)
from leir.measure.key import default_toolchain, measurement_key, reference_key, workload_key
from leir.measure.measurement import Measurement, PairedMeasurement, VendorResult, failure
from leir.measure.rpc import RPC, RPCError, servers_for, tracker_summary
from leir.measure.timing import DEFAULT_MIN_RUN_MS, DEFAULT_REPEAT, summarize
from leir.semantics import Analysis
from leir.bridge.targets import TARGETS, kernel_threads

__all__ = ["EngineBusy", "EngineClosed", "MeasurementEngine", "MeasurementFuture", "Progress"]

#: A worker that has not said it is ready after this long is replaced
#: (importing TVM takes 1-10 s; a loaded machine can take longer).
STARTUP_LIMIT_S = 180.0
#: After this many workers in a row die before they are ready, the engine
#: gives up and fails its jobs with the reason.
MAX_STARTUP_FAILURES = 3
#: Modules the forkserver imports once, so that each worker starts with them.
PRELOAD = sandbox.MEASUREMENT_PRELOAD


class EngineClosed(LeirError):
    """The engine was closed; it takes no more jobs."""


class EngineBusy(LeirError):
    """The queue is full and the caller asked not to wait."""


@dataclass(frozen=True)
class Progress:
    """Where a batch stands: ``done`` of ``total`` jobs finished;
    ``current`` is the label of the job this update is about, ``phase``
    what it is doing ("building", "waiting for the device", "timing",
    "done"), ``measurement`` its result when done."""

    done: int
    total: int
    current: str | None
    phase: str | None
    measurement: Measurement | None = None


class MeasurementFuture(Future):
    """A ``Future[Measurement]`` whose ``cancel()`` also stops a running
    job (its worker is killed and replaced); ``result()`` then raises
    ``CancelledError`` as for a queued job. A running job that finishes
    before its worker is killed keeps its result."""

    def __init__(self, engine: "MeasurementEngine | None", label: str | None, key: str):
        super().__init__()
        self._engine = engine
        self.label = label
        self.key = key
        self._phase = "queued"
        self._phase_callbacks: list[Callable[["MeasurementFuture", str], None]] = []

    @property
    def phase(self) -> str:
        """"queued", "building", "waiting for the device", "timing", "done"."""
        return self._phase

    def add_phase_callback(self, fn: Callable[["MeasurementFuture", str], None]) -> None:
        """Call ``fn(future, phase)`` on each change of phase (on the engine's thread)."""
        self._phase_callbacks.append(fn)

    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        for fn in list(self._phase_callbacks):
            try:
                fn(self, phase)
            except Exception:  # noqa: BLE001 - a caller's callback must not stop the engine
                pass

    def cancel(self) -> bool:
        if super().cancel():
            self._phase = "done"
            return True
        engine = self._engine
        return engine._cancel_running(self) if engine is not None else False


@dataclass
class _Job:
    id: int
    priority: int
    analysis: Analysis
    key: str
    future: MeasurementFuture
    spec: dict
    cost: ProgramCost
    trace: list | None
    timeout_s: float
    #: The vendor reference's workload key, when it was not looked for yet.
    vendor_key: str | None
    cached_vendor: VendorResult | None = None
    #: The second program of a paired comparison (``compare``).
    paired: Analysis | None = None


@dataclass
class _Worker:
    process: multiprocessing.Process
    conn: object
    state: str = "starting"  # starting | idle | building | built | timing
    job: _Job | None = None
    phase: str = "starting"
    deadline: float | None = None
    #: Why the engine killed it (a time limit, a cancellation), if it did.
    killed_for: str | None = None
    ready_at: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    #: What it said when ready: pid, TVM version, TVM's thread count.
    info: dict = field(default_factory=dict)


class MeasurementEngine:
    """Measure programs on ``target``: "llvm" (this CPU), "cuda" (this
    machine's GPU) or an ``RPC`` tracker's devices.

    ``workers``: processes building (and timing) at once (default: 2 on a
    local target, one per server on the tracker). ``cache``: True for the
    user's cache directory, a directory, a ``MeasurementCache``, or False.
    ``repeat``, ``min_run_ms``: timed runs per measurement, and the least
    duration of each (``timing``). ``timeout_s``: the limit of each phase of
    a job. ``memory_cap_gib``: each worker's memory cap (None: none).
    ``memory_budget_mb``: programs whose memory (``leir.footprint``) exceeds
    it are refused when submitted, before anything is built (None: the
    default, or ``$LEIR_MEMORY_BUDGET_MB``).
    ``vendor``: time the vendor reference too (local CPU only).
    ``exclusive_timing``: no build overlaps a timing (default: on the local
    CPU only).
    """

    def __init__(self, target: str | RPC = "llvm", *, workers: int | None = None, cache=True,
                 repeat: int = DEFAULT_REPEAT, min_run_ms: float = DEFAULT_MIN_RUN_MS, timeout_s: float = 60.0,
                 memory_cap_gib: float | None = 8.0, max_queued: int = 1024, seed: int = 0, vendor: bool = True,
                 exclusive_timing: bool | None = None, memory_budget_mb: float | None = None):
        self.memory_budget_mb = memory_budget_mb
        if repeat < 1:
            raise LeirError(f"repeat {repeat}: at least one timed run is needed")
        if timeout_s <= 0:
            raise LeirError(f"timeout {timeout_s}: must be positive")
        self.rpc = target if isinstance(target, RPC) else None
        if self.rpc is None and target not in TARGETS:
            raise LeirError(f"unknown target {target!r}: expected llvm, cuda or an RPC tracker")
        if self.rpc is not None:
            servers = servers_for(tracker_summary(self.rpc.host, self.rpc.port), self.rpc.key)
            if not servers:
                raise RPCError(f"no RPC server is registered under key {self.rpc.key!r} "
                               f"at the tracker {self.rpc.host}:{self.rpc.port}")
            self.target = self.rpc.target_name
            self.device = self.rpc.device
            default_workers = len(servers)
        else:
            self.target = target
            self.device = cpu_name() if target == "llvm" else (gpu_name() or "cuda")
            default_workers = max(1, min(2, os.cpu_count() or 1))
        self.workers = workers if workers is not None else default_workers
        if self.workers < 1:
            raise LeirError(f"workers {self.workers}: at least one is needed")
        self.toolchain = default_toolchain()
        #: The target as measurement keys name it: with the RPC device's
        #: ``mcpu``/``arch`` when they are given.
        self.target_key = self.target
        if self.rpc is not None:
            self.target_key += "".join(f" {k}={v}" for k, v in (("mcpu", self.rpc.mcpu), ("arch", self.rpc.arch)) if v)
        if cache is True:
            self.cache: MeasurementCache | None = MeasurementCache()
        elif cache is False or cache is None:
            self.cache = None
        elif isinstance(cache, MeasurementCache):
            self.cache = cache
        else:
            self.cache = MeasurementCache(cache)
        self.repeat = repeat
        self.min_run_ms = min_run_ms
        self.timeout_s = timeout_s
        self.memory_cap = int(memory_cap_gib * 2**30) if memory_cap_gib else None
        self.max_queued = max_queued
        self.seed = seed
        self.vendor = vendor and self.rpc is None and self.target == "llvm"
        self.exclusive_timing = (self.rpc is None and self.target == "llvm") if exclusive_timing is None else exclusive_timing

        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # signalled when the queue shrinks
        self._queue: list[tuple[int, int, _Job]] = []
        self._ids = itertools.count(1)
        self._to_cancel: list[MeasurementFuture] = []
        self._closing = False
        self._cancel_on_close = True
        self._broken: str | None = None
        self._thread: threading.Thread | None = None
        # A self-pipe wakes the scheduler from its wait on the workers; both
        # ends non-blocking, so that wake-ups nobody reads never block a caller.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._library_dir = tempfile.mkdtemp(prefix="leir-measure-") if self.rpc is not None else None
        self._peaks: DevicePeaks | None | bool = False  # False: not read yet
        # Scheduler-thread state.
        self._pool: list[_Worker] = []
        self._waiting: list[_Worker] = []  # built, waiting for the device
        self._holder: _Worker | None = None  # timing on the (local) device
        self._startup_failures = 0
        self._last_startup_error = ""

    # ------------------------------------------------------------ submitting

    def submit(self, program: Analysis | A.Program | str, *, trace: list | None = None,
               workload: Analysis | A.Program | str | None = None, priority: int = 0, label: str | None = None,
               repeat: int | None = None, timeout_s: float | None = None, use_cache: bool = True,
               block: bool = True, wait_s: float | None = None,
               on_phase: Callable[[MeasurementFuture, str], None] | None = None,
               reference: Analysis | A.Program | str | None = None,
               seeds: tuple[int, ...] | None = None) -> MeasurementFuture:
        """Queue ``program`` for measurement (a cache hit returns a finished
        future). ``trace``: the steps that produced it (kept in the cache
        record). ``workload``: the program it was derived from, whose vendor
        reference is reported (default: itself). ``block=False`` raises
        ``EngineBusy`` instead of waiting (at most ``wait_s``) for room in
        the queue. ``on_phase(future, phase)`` is called at each change of
        phase, from the first. Raises ``LeirError`` for a program with errors.

        ``reference``: a program equivalent to this one (the one it was
        derived from) whose NumPy evaluation the kernel is checked against,
        on the inputs of each of ``seeds`` (default ``leir.inputs.SEEDS``),
        instead of this program's own evaluation on the engine's seed (see
        ``worker``). The measurement's ``checked_against`` names that check
        (``key.reference_key``). A cache hit is returned whatever check its
        measurement passed: compare its ``checked_against``."""
        return self._submit(program, trace=trace, workload=workload, priority=priority, label=label, repeat=repeat,
                            timeout_s=timeout_s, use_cache=use_cache, block=block, wait_s=wait_s, on_phase=on_phase,
                            fault=None, reference=reference, seeds=seeds)

    def compare(self, before: Analysis | A.Program | str, after: Analysis | A.Program | str, *, rounds: int = 3,
                repeat: int | None = None, priority: int = 0, label: str | None = None,
                timeout_s: float | None = None, block: bool = True,
                wait_s: float | None = None) -> MeasurementFuture:
        """Time two programs turn about in one worker: both are built and
        checked, then ``rounds`` rounds each time ``before`` and then
        ``after`` (``repeat`` runs each). The future's result is a
        ``PairedMeasurement``. Never answered from the cache nor stored in
        it: a comparison is worth something only if both sides are timed
        now, under the same load. ``timeout_s`` bounds each phase, as for
        ``submit``; by default it is the engine's limit times ``max(2,
        rounds)``, since a phase does two programs' work, ``rounds`` times."""
        if rounds < 1:
            raise LeirError(f"rounds {rounds}: at least one round is needed")
        timeout_s = timeout_s or self.timeout_s * max(2, rounds)
        return self._submit(before, trace=None, workload=None, priority=priority, label=label, repeat=repeat,
                            timeout_s=timeout_s, use_cache=False, block=block, wait_s=wait_s, on_phase=None,
                            fault=None, paired=(after, rounds))

    def _submit_with_fault(self, program, fault: str, **kwargs) -> MeasurementFuture:
        """For the isolation tests only: the job's timing step misbehaves
        (``worker.FAULTS``). Never reachable from a program or a command."""
        if fault not in worker_module.FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        kwargs.setdefault("use_cache", False)
        return self._submit(program, fault=fault, **{"trace": None, "workload": None, "priority": 0, "label": None,
                                                     "repeat": None, "timeout_s": None, "block": True,
                                                     "wait_s": None, "on_phase": None, **kwargs})

    def measure(self, program, **kwargs) -> Measurement:
        """``submit(program, ...).result()``."""
        return self.submit(program, **kwargs).result()

    def measure_many(self, programs: Iterable[Analysis | A.Program | str], *, labels: Sequence[str] | None = None,
                     progress: Callable[[Progress], None] | None = None, **kwargs) -> list[Measurement]:
        """Measure every program (in parallel where the target allows) and
        return their measurements in order. ``progress(Progress)`` is called
        as each job changes phase and when it finishes. A job cancelled
        meanwhile (``cancel_all``) comes back as a failure "cancelled"."""
        programs = list(programs)
        total = len(programs)
        counter = {"done": 0}
        lock = threading.Lock()

        def on_phase(future: MeasurementFuture, phase: str) -> None:
            if progress is not None and phase != "done":
                with lock:
                    done = counter["done"]
                progress(Progress(done, total, future.label, phase))

        def on_done(future: MeasurementFuture) -> None:
            with lock:
                counter["done"] += 1
                done = counter["done"]
            if progress is not None:
                result = None if future.cancelled() or future.exception() else future.result()
                progress(Progress(done, total, future.label, "done", result))

        futures = []
        for i, program in enumerate(programs):
            label = labels[i] if labels is not None else f"#{i + 1}"
            future = self.submit(program, label=label, on_phase=on_phase, **kwargs)
            future.add_done_callback(on_done)
            futures.append(future)
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except CancelledError:
                results.append(failure("cancelled", target=self.target, device=self.device, key=future.key,
                                       label=future.label))
        return results

    def _submit(self, program, *, trace, workload, priority, label, repeat, timeout_s, use_cache, block, wait_s,
                on_phase, fault, paired=None, reference=None, seeds=None) -> MeasurementFuture:
        analysis = _as_analysis(program)
        from leir.footprint import require_within_budget

        # Refused here, in one line, rather than by a worker's memory cap.
        require_within_budget(analysis, "measure", budget_mb=self.memory_budget_mb)
        check = None
        if reference is not None:
            from leir.inputs import SEEDS
            from leir.printer import print_program

            ref = _as_analysis(reference)
            seeds = tuple(seeds or SEEDS)
            check = {"program": print_program(ref.complete_program()), "key": reference_key(ref, seeds),
                     "seeds": list(seeds)}
        second, rounds = (_as_analysis(paired[0]), paired[1]) if paired is not None else (None, 1)
        if self._closing:
            raise EngineClosed("the measurement engine is closed")
        repeat = repeat or self.repeat
        key = measurement_key(analysis, self.target_key, self.device, self.toolchain)
        cost = program_cost(analysis)
        future = MeasurementFuture(self, label, key)
        if on_phase is not None:
            future.add_phase_callback(on_phase)
        if use_cache and self.cache is not None:
            hit = self._cached(lambda: self.cache.lookup(key, min_runs=repeat), None)
            if hit is not None:
                future._phase = "done"
                future.set_result(self._complete(hit, cost, label))
                return future
        work = _as_analysis(workload) if workload is not None else analysis
        vendor_key, cached_vendor = None, None
        if self.vendor and second is None:
            vendor_key = workload_key(work, self.device)
            if self.cache is not None:
                known, cached_vendor = self._cached(lambda: self.cache.vendor_lookup(vendor_key), (False, None))
                if known:
                    vendor_key = None
        from leir.printer import print_program

        job = _Job(
            id=next(self._ids), priority=priority, analysis=analysis, key=key, future=future, cost=cost, trace=trace,
            timeout_s=timeout_s or self.timeout_s, vendor_key=vendor_key, cached_vendor=cached_vendor, paired=second,
            spec={
                "program": print_program(analysis.complete_program()),
                "workload": print_program(work.complete_program()) if workload is not None else None,
                "seed": self.seed, "repeat": repeat, "min_run_ms": self.min_run_ms, "vendor": vendor_key is not None,
                "timeout_s": timeout_s or self.timeout_s, "fault": fault,
                "paired": print_program(second.complete_program()) if second is not None else None, "rounds": rounds,
                "reference": check,
            },
        )
        job.spec["id"] = job.id
        with self._room:
            deadline = None if wait_s is None else time.monotonic() + wait_s
            while self._queued_count() >= self.max_queued:
                if not block:
                    raise EngineBusy(f"the measurement queue is full ({self.max_queued} jobs)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise EngineBusy(f"the measurement queue stayed full ({self.max_queued} jobs) for {wait_s} s")
                self._room.wait(left)
                if self._closing:
                    raise EngineClosed("the measurement engine is closed")
            heapq.heappush(self._queue, (-priority, job.id, job))
            broken = self._broken
        if broken is not None:
            self._fail_queued(broken)
        self._start()
        self._wake()
        return future

    def _queued_count(self) -> int:
        if len(self._queue) >= self.max_queued:  # cancelled jobs leave room
            self._queue = [entry for entry in self._queue if not entry[2].future.cancelled()]
            heapq.heapify(self._queue)
        return len(self._queue)

    # ------------------------------------------------------------ cancelling and closing

    def cancel_all(self) -> int:
        """Cancel every queued and running job; returns how many."""
        with self._lock:
            futures = [entry[2].future for entry in self._queue]
        futures += [w.job.future for w in list(self._pool) if w.job is not None]
        return sum(1 for f in futures if f.cancel())

    def _cancel_running(self, future: MeasurementFuture) -> bool:
        with self._lock:
            if future.done():
                return False
            self._to_cancel.append(future)
        self._wake()
        return True

    def start(self) -> None:
        """Start the workers now rather than at the first job that needs one."""
        self._start()
        self._wake()

    def wait_ready(self, timeout_s: float = STARTUP_LIMIT_S) -> bool:
        """Start the workers and wait until all are ready (for benchmarks)."""
        self.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._broken is None:
            pool = list(self._pool)
            if len(pool) >= self.workers and all(w.state != "starting" for w in pool):
                return True
            time.sleep(0.05)
        return False

    def close(self, *, cancel: bool = True, timeout_s: float = 30.0) -> None:
        """Stop the engine: cancel what is queued and running (or, with
        ``cancel=False``, finish it first), stop the workers."""
        with self._room:
            if self._closing and self._thread is None and self._wake_w is None:
                return
            self._closing = True
            self._cancel_on_close = cancel
            self._room.notify_all()
        if cancel:
            self.cancel_all()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._thread = None
        for w in list(self._pool):  # if the scheduler could not stop them in time
            _kill(w)
        if self._library_dir:
            shutil.rmtree(self._library_dir, ignore_errors=True)
        if self._thread is None:
            with self._wake_lock:
                for fd in (self._wake_r, self._wake_w):
                    if fd is not None:
                        os.close(fd)
                self._wake_r = self._wake_w = None

    def __enter__(self) -> "MeasurementEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ the scheduler thread

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, name="leir-measure", daemon=True)
                self._thread.start()

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_w is None:
                return
            try:
                os.write(self._wake_w, b"!")
            except (BlockingIOError, OSError):
                pass  # a full pipe wakes the scheduler all the same

    def _run(self) -> None:
        try:
            while not (self._closing and self._idle_for_close()):
                self._step()
        except Exception as exc:  # noqa: BLE001 - a bug here must fail the jobs, not leave them waiting
            self._broken = f"internal error in the measurement engine: {type(exc).__name__}: {exc}"
            for w in self._pool:
                if w.job is not None:
                    self._finish(w.job, {"error": self._broken})
            self._fail_queued(self._broken)
        finally:
            self._stop_workers()
            with self._room:  # submitted while the engine was closing
                left, self._queue = self._queue, []
            for _, _, job in left:
                job.future.cancel()

    def _step(self) -> None:
        self._ensure_workers()
        self._dispatch()
        ready = wait_for([self._wake_r] + [w.conn for w in self._pool] + [w.process.sentinel for w in self._pool],
                         self._next_timeout())
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        for w in list(self._pool):
            if w.conn in ready:
                self._drain(w)
            if w.process.sentinel in ready or not w.process.is_alive():
                self._drain(w)  # what it said before it died (a result, a fatal error)
                self._on_death(w)
        self._handle_cancellations()
        self._check_deadlines()

    def _idle_for_close(self) -> bool:
        if self._cancel_on_close:
            return not any(w.job is not None for w in self._pool)
        with self._lock:
            queued = any(not entry[2].future.cancelled() for entry in self._queue)
        return not queued and not any(w.job is not None for w in self._pool)

    def _next_timeout(self) -> float:
        deadlines = [w.deadline for w in self._pool if w.deadline is not None]
        if not deadlines:
            return 1.0
        return max(0.0, min(1.0, min(deadlines) - time.monotonic()))

    # ------------------------------------------------------------ workers

    def _ensure_workers(self) -> None:
        if self._broken is not None or (self._closing and self._cancel_on_close):
            return
        while len(self._pool) < self.workers:
            self._pool.append(self._spawn())

    def _spawn(self) -> _Worker:
        ctx = _context()
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        config = {
            "target": self.rpc.target if self.rpc else self.target,
            "rpc": None if self.rpc is None else {f: getattr(self.rpc, f) for f in self.rpc.__dataclass_fields__},
            "memory_cap": self.memory_cap,
            # The budget the worker's own checks (leir.footprint) use: the engine's.
            "memory_budget_mb": self.memory_budget_mb,
            "library_dir": self._library_dir,
            # The threads the device name promises (local CPU only).
            "threads": kernel_threads() if self.rpc is None and self.target == "llvm" else None,
        }
        process = ctx.Process(target=worker_module.main, args=(child_conn, config), name="leir-measure-worker",
                              daemon=True)
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn, deadline=time.monotonic() + STARTUP_LIMIT_S)

    def _send(self, w: _Worker, message) -> bool:
        try:
            w.conn.send(message)
            return True
        except (OSError, ValueError):  # it died; its sentinel will say how
            return False

    def _drain(self, w: _Worker) -> None:
        while True:
            try:
                if not w.conn.poll():
                    return
                message = w.conn.recv()
            except (EOFError, OSError):
                return
            self._on_message(w, message)

    def _on_message(self, w: _Worker, message) -> None:
        kind = message[0]
        if kind == "ready":
            w.state, w.phase, w.deadline, w.ready_at = "idle", "idle", None, time.monotonic()
            w.info = message[1]
            self._startup_failures = 0
        elif kind == "fatal":
            self._last_startup_error = message[1]
        elif kind == "built" and w.job is not None and w.job.id == message[1]:
            w.state, w.phase, w.deadline = "built", "waiting for the device", None
            self._waiting.append(w)
            w.job.future._set_phase("waiting for the device")
        elif kind == "phase" and w.job is not None and w.job.id == message[1]:
            w.phase = message[2]
            w.job.future._set_phase(message[2])
        elif kind == "result" and w.job is not None and w.job.id == message[1]:
            job = w.job
            self._release(w)
            if message[2].get("exiting"):
                w.state, w.phase = "exiting", "exiting"  # it restarts itself: no new job for it
            self._finish(job, message[2])

    def _release(self, w: _Worker) -> None:
        """The worker is done with its job: it may take another."""
        if self._holder is w:
            self._holder = None
        if w in self._waiting:
            self._waiting.remove(w)
        w.job, w.deadline = None, None
        if w.killed_for:  # its answer beat the kill: the process is going all the same
            w.state, w.phase = "exiting", "exiting"
        elif w.state != "starting":
            w.state, w.phase = "idle", "idle"

    def _on_death(self, w: _Worker) -> None:
        self._pool.remove(w)
        if self._holder is w:
            self._holder = None
        if w in self._waiting:
            self._waiting.remove(w)
        code = w.process.exitcode
        w.process.join(0)
        w.conn.close()
        job = w.job
        if w.state == "starting":
            self._startup_failures += 1
            reason = self._last_startup_error or sandbox.exit_text(code)
            if self._startup_failures >= MAX_STARTUP_FAILURES:
                self._broken = f"the measurement worker could not start: {reason}"
                self._fail_queued(self._broken)
        if job is None:
            return
        if w.killed_for == "cancelled":
            if not job.future.done():
                job.future._phase = "done"
                job.future.set_exception(CancelledError("cancelled while running"))
            return
        if w.killed_for:
            reason = w.killed_for
        elif code is not None and code < 0:
            reason = f"crashed ({sandbox.exit_text(code)}) while {w.phase}"
            if -code == signal.SIGKILL:
                reason += f"; the system kills processes it runs out of memory for (worker {_cap_text(self.memory_cap)})"
        else:
            reason = f"the measurement worker exited ({sandbox.exit_text(code)}) while {w.phase}"
        self._finish(job, {"error": reason})

    def _stop_workers(self) -> None:
        for w in self._pool:
            self._send(w, ("stop",))
        deadline = time.monotonic() + 5.0
        for w in self._pool:
            w.process.join(max(0.0, deadline - time.monotonic()))
            _kill(w)
        self._pool.clear()

    # ------------------------------------------------------------ dispatching

    def _dispatch(self) -> None:
        building = any(w.state == "building" for w in self._pool)
        if self.rpc is not None:  # the tracker gives each job its own device
            for w in list(self._waiting):
                self._grant(w)
        elif self._holder is None and self._waiting and not (self.exclusive_timing and building):
            self._waiting.sort(key=lambda w: (-w.job.priority, w.job.id))
            self._grant(self._waiting[0])
        for w in self._pool:
            if w.state != "idle":
                continue
            if self.exclusive_timing and (self._holder is not None or self._waiting):
                break  # the device is the machine: let the timing run alone
            job = self._pop_job()
            if job is None:
                break
            if not self._send(w, ("build", job.spec)):
                self._finish(job, {"error": "the measurement worker died before the job started"})
                continue
            w.state, w.phase, w.job = "building", "building", job
            w.deadline = time.monotonic() + job.timeout_s
            job.future._set_phase("building")

    def _grant(self, w: _Worker) -> None:
        self._waiting.remove(w)
        if not self._send(w, ("time", w.job.id)):
            return
        if self.rpc is None:
            self._holder = w
        w.state, w.phase = "timing", "timing"
        w.deadline = time.monotonic() + w.job.timeout_s
        w.job.future._set_phase("timing" if self.rpc is None else "waiting for a device")

    def _pop_job(self) -> _Job | None:
        with self._room:
            while self._queue:
                _, _, job = heapq.heappop(self._queue)
                self._room.notify()
                if job.future.set_running_or_notify_cancel():
                    return job
        return None

    def _fail_queued(self, reason: str) -> None:
        while True:
            job = self._pop_job()
            if job is None:
                return
            self._finish(job, {"error": reason})

    def _handle_cancellations(self) -> None:
        with self._lock:
            futures, self._to_cancel = self._to_cancel, []
        for future in futures:
            for w in self._pool:
                if w.job is None or w.job.future is not future:
                    continue
                if w.state == "built":  # waiting for the device: nothing runs yet
                    self._send(w, ("drop", w.job.id))
                    job = w.job
                    self._release(w)
                    future._phase = "done"
                    if not job.future.done():
                        job.future.set_exception(CancelledError("cancelled while waiting for the device"))
                else:
                    w.killed_for = "cancelled"
                    _kill(w, wait=False)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for w in self._pool:
            if w.deadline is None or now < w.deadline or w.killed_for:
                continue
            if w.state == "starting":
                self._last_startup_error = f"not ready after {STARTUP_LIMIT_S:g} s"
                w.killed_for = "startup"
            else:
                limit = w.job.timeout_s if w.job is not None else 0
                w.killed_for = f"timed out after {limit:g} s while {w.phase}"
            _kill(w, wait=False)

    # ------------------------------------------------------------ results

    def _finish(self, job: _Job, payload: dict) -> None:
        future = job.future
        if future.done():
            return
        if payload.get("error"):
            comparisons = {name: Comparison(**c) for name, c in (payload.get("comparisons") or {}).items()}
            m = failure(payload["error"], target=self.target, device=self.device, key=job.key,
                        label=future.label, comparisons=comparisons)
            m = replace(m, flops=job.cost.flops, bytes_moved=job.cost.bytes_moved)
            if job.paired is not None:
                m = PairedMeasurement(m, m, job.spec["rounds"])
        elif job.paired is not None:
            m = self._paired(job, payload)
        else:
            m = self._measurement(job, payload)
        try:
            future.set_result(m)
        except Exception:  # noqa: BLE001 - cancelled in the meantime
            return
        future._set_phase("done")

    def _measurement(self, job: _Job, payload: dict) -> Measurement:
        s = summarize(payload["seconds"], payload["number"])
        if job.vendor_key is not None:
            vendor = VendorResult.from_json(payload["vendor"]) if payload.get("vendor") else None
            if self.cache is not None:
                self._store(lambda: self.cache.vendor_store(job.vendor_key, vendor))
        else:
            vendor = job.cached_vendor
        notes = tuple(payload.get("notes") or ())
        if payload.get("server"):
            notes += (f"timed on the RPC server at {payload['server']}",)
        m = Measurement(
            s.median_ms, s.min_ms, s.max_ms, s.runs, s.spread, self.target, self.device, True,
            {name: Comparison(**c) for name, c in payload["comparisons"].items()}, False,
            vendor.median_ms if vendor else None, None,
            mean_ms=s.mean_ms, number=s.number, results_ms=s.results_ms, vendor=vendor,
            measured_at=payload.get("measured_at"), key=job.key, label=job.future.label, notes=notes,
            checked_against=payload.get("checked_against"),
        )
        if self.cache is not None:
            self._store(lambda: self.cache.store(m, program=_canonical_text(job.analysis), toolchain=self.toolchain,
                                                 shapes={t.name: (t.dtype, t.shape) for t in job.analysis.tensors.values()},
                                                 trace=job.trace))
        return self._complete(m, job.cost, job.future.label)

    def _paired(self, job: _Job, payload: dict) -> PairedMeasurement:
        """A comparison's two measurements (not cached: see ``compare``)."""
        sides = []
        for analysis, data in ((job.analysis, payload), (job.paired, payload["paired"])):
            s = summarize(data["seconds"], data["number"])
            notes = tuple(data.get("notes") or ())
            if data.get("server"):
                notes += (f"timed on the RPC server at {data['server']}",)
            m = Measurement(
                s.median_ms, s.min_ms, s.max_ms, s.runs, s.spread, self.target, self.device, True,
                {name: Comparison(**c) for name, c in data["comparisons"].items()}, False, None, None,
                mean_ms=s.mean_ms, number=s.number, results_ms=s.results_ms, measured_at=data.get("measured_at"),
                key=measurement_key(analysis, self.target_key, self.device, self.toolchain), notes=notes,
            )
            sides.append((self._complete(m, program_cost(analysis), job.future.label),
                          tuple(summarize(r).median_ms for r in data["rounds_seconds"])))
        (before, before_rounds), (after, after_rounds) = sides
        return PairedMeasurement(before, after, job.spec["rounds"], before_rounds, after_rounds)

    def _store(self, write: Callable[[], None]) -> None:
        self._cached(write, None)

    @staticmethod
    def _cached(operation, fallback):
        """A cache read or write; a cache that cannot be used (locked for
        longer than its busy timeout, a full disk) costs a measurement, not
        the result."""
        try:
            return operation()
        except LeirError:
            return fallback

    def _complete(self, m: Measurement, cost: ProgramCost, label: str | None) -> Measurement:
        """Add what is computed here, not stored: cost, roofline, label."""
        peaks = self.peaks()
        return replace(m, label=label, flops=cost.flops, bytes_moved=cost.bytes_moved,
                       roofline_ms=roofline_ms(cost, peaks) if peaks is not None else None)

    def peaks(self) -> DevicePeaks | None:
        """The device's peak figures from the cache directory (``leir
        bench-device``), or None when they were never measured."""
        if self._peaks is False:
            directory = self.cache.directory if self.cache is not None else None
            self._peaks = load_peaks(self.device, directory) if self.rpc is None else None
        return self._peaks


# ------------------------------------------------------------------ helpers


def _as_analysis(program) -> Analysis:
    from leir.bridge.lower import LoweringError

    if isinstance(program, Analysis):
        analysis = program
    elif isinstance(program, A.Program):
        from leir.semantics import analyze

        analysis = analyze(program)
    elif isinstance(program, str):
        from leir.bridge.document import load_leir

        doc = load_leir(program)
        errors = [d for d in doc.diagnostics if d.is_error]
        if errors:
            raise LoweringError(f"the program has errors: {errors[0].message}")
        analysis = doc.analysis
    else:
        raise TypeError(f"expected an Analysis, a Program or LEIR text, not {type(program).__name__}")
    if not analysis.ok:
        first = next(d for d in analysis.diagnostics if d.is_error)
        raise LoweringError(f"the program has errors: {first.message}")
    return analysis


def _canonical_text(analysis: Analysis) -> str:
    from leir.format import canonical_program
    from leir.printer import print_program

    return print_program(canonical_program(analysis))


def _context():
    """Workers are forked from a forkserver that has imported TVM (fast
    restarts; the forkserver never runs TVM, so no TVM thread is forked);
    on platforms without fork, they are spawned."""
    return sandbox.worker_context(PRELOAD)


def _kill(w: _Worker, wait: bool = True) -> None:
    if w.process.is_alive():
        try:
            w.process.kill()
        except OSError:
            pass
    if wait:
        w.process.join(5.0)


def _cap_text(cap: int | None) -> str:
    return worker_module.memory_text(cap)

"""What runs in a measurement worker process.

A worker is a long-lived process (TVM takes seconds to import) that the
engine (``leir.measure.engine``) drives over a pipe, one job at a time:

1. ``("build", job)``: parse and analyse the program, lower and build it
   for the target (and load it, or export it for an RPC device), draw the
   random inputs and evaluate the program with NumPy for the expected
   outputs; answer ``("built", id)`` or a failure ``("result", id, {...})``.
2. ``("time", id)``, when the engine grants this worker the device: run the
   kernel once and compare every output with the expected one (a wrong
   kernel gets no latency), time it (``timing.time_module``), time the
   vendor reference if asked, and answer ``("result", id, {...})``.

On the local CPU the check runs of step 2 happen at the end of step 1
instead: they need the kernel, not the device alone, so they run while the
other worker builds, and the device's exclusive time is the timing alone
(about 40% of a dataset candidate's worker time was check runs). On a GPU or an
RPC device the kernel runs on the device, so its checks stay in step 2.

**Checked against a reference** (``job["reference"]``: a program, its key
and seeds; ``MeasurementEngine.submit(reference=...)``): the expected
outputs are the NumPy evaluation of the *reference* program, not of the
program measured, on each seed's inputs (``leir.inputs.seed_inputs``, drawn
for the reference and passed by name), and the kernel is run and compared
on every seed before it is timed (on seed 0's inputs). This is how a step is
verified without evaluating the program after it: the kernel of every
program a dataset trajectory reaches is compared with the start program of
its trajectory, whose evaluations this process keeps
(``REFERENCES_KEPT``), so each is computed once. The result says which
reference it was checked against (``checked_against``).

A paired comparison (``MeasurementEngine.compare``) is one job with two
programs (``job["paired"]``): both are built in step 1, both checked in
step 2, then timed turn about for ``job["rounds"]`` rounds.

Failures that raise (a build error, a wrong result, a ``MemoryError`` at the
memory cap) come back as a result with a reason. Failures that kill the
process (a segfault) or never end (a hang) are the engine's to notice: it
watches the process and a deadline, and restarts the worker.

The memory cap is ``RLIMIT_AS`` (address space) on CPU targets: allocations
beyond it fail with ``MemoryError``/``bad_alloc`` instead of taking the
machine's memory. CUDA reserves far more address space than it uses, so on
CUDA the cap is ``RLIMIT_DATA`` (writable private memory) instead.

**Test hook.** ``job["fault"]`` makes the timing step misbehave on purpose:
"crash" dereferences a null pointer (SIGSEGV in native code), "hang" sleeps
(up to 10 minutes), "oom" allocates until the cap, "wrong" corrupts an
output after the kernel ran. Only ``MeasurementEngine._submit_with_fault``
sets it, for the tests of isolation; nothing a user writes (a program, a
command-line argument, an LSP request) reaches it.

Importing this module is cheap; TVM is imported by ``main``.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time
from dataclasses import dataclass, field

FAULTS = ("crash", "hang", "oom", "wrong")
#: Reference programs whose evaluations a worker keeps (the most recent).
REFERENCES_KEPT = 8
#: A hang injected by the test hook ends by itself after this long.
HANG_LIMIT_S = 600.0

_OOM_PATTERN = re.compile(r"bad_alloc|out of memory|cannot allocate memory|failed to allocate", re.IGNORECASE)


class JobFailure(Exception):
    """A job failed for a reason the user should read as it is."""

    def __init__(self, reason: str, *, comparisons: dict | None = None, restart: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.comparisons = comparisons or {}
        self.restart = restart


@dataclass
class _Built:
    analysis: object
    inputs: dict
    expected: dict
    job: dict
    module: object = None  # the loaded module (local targets)
    library: str | None = None  # the exported library (RPC)
    notes: list = field(default_factory=list)
    #: The second program of a paired comparison (``job["paired"]``).
    paired: "_Built | None" = None
    #: Further (inputs, expected) pairs checked before timing (the other
    #: seeds of a reference check).
    checks: list = field(default_factory=list)
    #: (timing arguments, comparisons) once the checks ran (local CPU: at
    #: the end of the build; see the module docstring).
    checked: tuple | None = None


class _EngineGone(Exception):
    """The engine's end of the pipe is closed: it exited or was killed."""


def main(conn, config: dict) -> None:
    """The worker's process (the target of the engine's ``Process``): the
    loop, ended quietly when the engine goes away (no traceback on a closed
    pipe when a build is interrupted)."""
    try:
        _loop(_Pipe(conn), config)
    except _EngineGone:
        return


class _Pipe:
    """The worker's end of the pipe; a send or receive on a pipe the engine
    closed raises ``_EngineGone``."""

    def __init__(self, conn):
        self.conn = conn

    def send(self, message) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError) as e:
            raise _EngineGone from e

    def recv(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError) as e:
            raise _EngineGone from e


def _loop(conn: _Pipe, config: dict) -> None:
    os.dup2(2, 1)  # stdout may be the language server's protocol stream: TVM's prints go to stderr
    if config.get("threads"):
        # Before TVM starts its thread pool (at the first kernel): its default
        # is half the CPUs, pinned (see ``leir.bridge.targets.kernel_threads``).
        os.environ["TVM_NUM_THREADS"] = str(config["threads"])
    _limit_memory(config)
    if config.get("memory_budget_mb") is not None:
        from leir.footprint import BUDGET_ENV

        os.environ[BUDGET_ENV] = repr(float(config["memory_budget_mb"]))
    try:
        runner = _Runner(config)
    except BaseException as exc:  # noqa: BLE001 - any start-up failure is reported, then the worker exits
        conn.send(("fatal", _describe(exc, config)))
        return
    conn.send(("ready", runner.describe()))
    built: dict[int, _Built] = {}
    while True:
        message = conn.recv()
        kind = message[0]
        if kind == "stop":
            return
        if kind == "drop":
            built.pop(message[1], None)
            continue
        job_id = message[1]["id"] if kind == "build" else message[1]
        try:
            if kind == "build":
                built[job_id] = runner.build(message[1])
                conn.send(("built", job_id))
            elif kind == "time":
                job = built.pop(job_id)
                conn.send(("result", job_id, runner.time(job, lambda phase: conn.send(("phase", job_id, phase)))))
        except JobFailure as failure:
            built.pop(job_id, None)
            conn.send(("result", job_id, {"error": failure.reason, "comparisons": failure.comparisons,
                                          "exiting": failure.restart}))
            if failure.restart:
                return  # the engine starts a fresh worker
        except _EngineGone:
            raise
        except BaseException as exc:  # noqa: BLE001 - the job fails with the reason, the worker lives on
            built.pop(job_id, None)
            reason = _describe(exc, config, "building" if kind == "build" else "timing")
            oom = reason.startswith("out of memory")
            del exc
            gc.collect()
            conn.send(("result", job_id, {"error": reason, "exiting": oom}))
            if oom:
                return  # memory state after a failed allocation in native code is not to be trusted


def _limit_memory(config: dict) -> None:
    cap = config.get("memory_cap")
    if not cap:
        return
    import resource

    kind = resource.RLIMIT_DATA if config.get("target") == "cuda" else resource.RLIMIT_AS
    _, hard = resource.getrlimit(kind)
    soft = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
    resource.setrlimit(kind, (soft, hard))


def memory_text(cap: int | None) -> str:
    if not cap:
        return "no cap"
    return f"cap {cap / 2**30:g} GiB"


def _describe(exc: BaseException, config: dict, phase: str = "starting") -> str:
    """A one-line reason for an exception raised while ``phase``."""
    from leir.errors import LeirError

    if isinstance(exc, JobFailure):
        return exc.reason
    message = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, MemoryError) or _OOM_PATTERN.search(str(exc)):
        return f"out of memory ({memory_text(config.get('memory_cap'))}) while {phase}"
    if isinstance(exc, LeirError):
        from leir.evaluate import EvaluationError
        from leir.bridge.lower import LoweringError
        from leir.bridge.run import BuildError

        if isinstance(exc, (BuildError, LoweringError)):
            return f"build failed: {message}"
        if isinstance(exc, EvaluationError):
            return f"the reference evaluation failed: {message}"
        return f"cannot run: {message}" if phase != "timing" else f"run failed: {message}"
    if phase == "timing":
        from leir.bridge.lower import tvm_error_message

        return f"run failed: {tvm_error_message(exc)}"
    if phase == "building":
        from leir.bridge.lower import tvm_error_message

        return f"build failed: {type(exc).__name__}: {tvm_error_message(exc)}"
    return f"{type(exc).__name__}: {message}"


class _Runner:
    def __init__(self, config: dict):
        import tvm  # noqa: F401 - the seconds of start-up belong here, not to the first job

        from leir.measure.rpc import RPC

        self.config = config
        #: reference key -> [(seed, inputs, expected outputs)], oldest first.
        self._references: dict[str, list] = {}
        self.rpc = RPC(**config["rpc"]) if config.get("rpc") else None
        self.target = self.rpc.target if self.rpc else config["target"]
        self.library_dir = config.get("library_dir")
        if self.rpc is None:
            self._tvm_target = None
            if self.target == "cuda":
                from leir.bridge.targets import cuda_target

                if cuda_target() is None:
                    raise JobFailure("no CUDA GPU is available on this machine")
        else:
            self._tvm_target = None  # built on first use (a GPU's arch may need a session)

    def describe(self) -> dict:
        import tvm

        threads = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
        return {"pid": os.getpid(), "tvm": tvm.__version__, "threads": threads() if threads else None}

    # ------------------------------------------------------------ build

    def build(self, job: dict) -> _Built:
        from leir.bridge.document import load_leir
        from leir.evaluate import evaluate
        from leir.inputs import random_inputs

        doc = load_leir(job["program"])
        if not doc.ok:
            first = next(d for d in doc.diagnostics if d.is_error)
            raise JobFailure(f"the program does not check: {first.message}")
        analysis = doc.analysis
        built = _Built(analysis, {}, {}, job)
        if self.rpc is None:
            from leir.bridge.run import compile_program

            compiled = compile_program(analysis, self.target)
            built.module, built.notes = compiled, list(compiled.notes)
        else:
            built.library, built.notes = self._export(analysis, job.get("library_tag", job["id"]))
        if job.get("reference"):
            checks = self._reference_checks(analysis, job["reference"])
            (built.inputs, built.expected), built.checks = checks[0], checks[1:]
        else:
            built.inputs = random_inputs(analysis, job.get("seed", 0))
            built.expected = evaluate(analysis, built.inputs)
        if self.rpc is None and self.target == "llvm":
            built.checked = self._verify(built, built.module.module, built.module.device)
        if job.get("paired"):
            # The second program of a comparison: built, checked and timed
            # like the first, in this same process.
            built.paired = self.build({**job, "program": job["paired"], "paired": None, "second_of_pair": True,
                                       "library_tag": f"{job['id']}_paired"})
        return built

    def _reference_checks(self, analysis, reference: dict) -> list[tuple[dict, dict]]:
        """(inputs, expected outputs) for each seed of the reference check
        (see the module docstring), inputs in ``analysis``' order."""
        from leir.bridge.document import load_leir
        from leir.evaluate import evaluate
        from leir.inputs import check_inputs, seed_inputs

        key, seeds = reference["key"], tuple(reference["seeds"])
        runs = self._references.pop(key, None)
        if runs is None:
            doc = load_leir(reference["program"])
            if not doc.ok:
                first = next(d for d in doc.diagnostics if d.is_error)
                raise JobFailure(f"the reference program does not check: {first.message}")
            runs = []
            for seed in seeds:
                inputs = seed_inputs(doc.analysis, seed, seeds)
                values = evaluate(doc.analysis, inputs)
                runs.append((seed, inputs, {t.name: values[t.name] for t in doc.analysis.outputs()}))
        self._references[key] = runs  # the most recent last
        while len(self._references) > REFERENCES_KEPT:
            del self._references[next(iter(self._references))]
        outputs = sorted(t.name for t in analysis.outputs())
        if outputs != sorted(runs[0][2]):
            raise JobFailure(f"cannot check against the reference: its outputs are {sorted(runs[0][2])}, "
                             f"this program's {outputs}")
        missing = [t.name for t in analysis.inputs() if t.name not in runs[0][1]]
        if missing:
            raise JobFailure(f"cannot check against the reference: it has no input {missing[0]}")
        # check_inputs: the shapes and dtypes must be this program's.
        return [(check_inputs(analysis, {t.name: inputs[t.name] for t in analysis.inputs()}), expected)
                for _, inputs, expected in runs]

    def _export(self, analysis, job_id: int) -> tuple[str, list[str]]:
        """Cross-compile for the RPC device and export a shared library."""
        from leir.bridge.lower import lower, thread_loops
        from leir.bridge.run import PACKED_DTYPES, RunError, build
        from leir.bridge.targets import gpu_problems

        for t in analysis.tensors.values():
            if t.role != "tmp" and t.dtype in PACKED_DTYPES:
                raise RunError(f"{t.name} is {t.dtype}: TVM packs {t.dtype} two to a byte and cannot take it from NumPy")
        notes = []
        if self.target == "llvm":
            threads = thread_loops(analysis)
            if threads:
                notes.append(f"thread-bound loops {', '.join(threads)} were run as serial loops on the CPU")
            func = lower(analysis, threads_as_serial=bool(threads))
        else:
            problems = gpu_problems(analysis)
            if problems:
                from leir.bridge.run import BuildError

                raise BuildError(problems[0])
            func = lower(analysis)
        executable = build(func, self._rpc_target())
        path = os.path.join(self.library_dir, f"leir_{os.getpid()}_{job_id}.so")
        executable.export_library(path)
        return path, notes

    def _rpc_target(self):
        if self._tvm_target is None:
            import tvm

            from leir.bridge.targets import cuda_build_target, host_target

            if self.target == "llvm":
                self._tvm_target = (host_target() if self.rpc.mcpu is None
                                    else tvm.target.Target({"kind": "llvm", "mcpu": self.rpc.mcpu}))
            else:
                arch = self.rpc.arch or self._remote_arch()
                self._tvm_target = cuda_build_target(arch)
        return self._tvm_target

    def _remote_arch(self) -> str:
        from leir.measure.rpc import request_session

        session, _ = request_session(self.rpc, session_timeout=60)
        return "sm_" + session.cuda(0).compute_version.replace(".", "")

    # ------------------------------------------------------------ verify and time

    def time(self, built: _Built, phase) -> dict:
        job = built.job
        if job.get("fault"):
            _inject(job["fault"], self.config)
        programs = [built] + ([built.paired] if built.paired is not None else [])
        if self.rpc is None:
            device, server = built.module.device, None
            return self._verify_and_time(programs, [b.module.module for b in programs], device, server)
        from leir.measure.rpc import request_session

        phase("waiting for a device")
        session, server = request_session(self.rpc, session_timeout=job.get("timeout_s") or 60)
        phase("timing")
        try:
            modules = []
            for b in programs:
                session.upload(b.library)
                modules.append(session.load_module(os.path.basename(b.library)))
            device = session.cpu(0) if self.target == "llvm" else session.cuda(0)
            return self._verify_and_time(programs, modules, device, server)
        finally:
            for b in programs:
                try:
                    os.unlink(b.library)
                except OSError:
                    pass

    def _verify_and_time(self, programs: list[_Built], modules: list, device, server: str | None) -> dict:
        """Check each program's outputs, then time it; two programs (a
        paired comparison) are timed turn about, ``job["rounds"]`` rounds."""
        from leir.measure.timing import time_module

        job = programs[0].job
        checked = [b.checked if b.checked is not None else self._verify(b, m, device)
                   for b, m in zip(programs, modules)]
        rounds = int(job.get("rounds") or 1) if len(programs) > 1 else 1
        timed: list[list[tuple[list[float], int]]] = [[] for _ in programs]
        for _ in range(rounds):
            for k, (module, (args, _)) in enumerate(zip(modules, checked)):
                timed[k].append(time_module(module, device, args, repeat=job["repeat"], min_run_ms=job["min_run_ms"]))
        payloads = []
        for b, (_, comparisons), runs in zip(programs, checked, timed):
            payloads.append({"seconds": [s for seconds, _ in runs for s in seconds], "number": runs[-1][1],
                             "rounds_seconds": [seconds for seconds, _ in runs],
                             "comparisons": _comparisons_json(comparisons), "notes": list(b.notes), "server": server,
                             "measured_at": time.time(),
                             "checked_against": (b.job.get("reference") or {}).get("key")})
        payload = payloads[0]
        if len(payloads) > 1:
            payload["paired"] = payloads[1]
        if job.get("vendor"):
            payload["vendor"] = self._vendor(programs[0])
        return payload

    def _verify(self, built: _Built, module, device) -> tuple[list, dict]:
        """Run the kernel and compare every output with the expected one (a
        wrong kernel gets no latency), on the timing inputs and then on each
        further check's; the timing inputs' arguments, and per output the
        worst comparison (``leir.bridge.comparison.merge_comparisons``)."""
        from leir.bridge.comparison import merge_comparisons

        job = built.job
        args, comparisons = self._run_and_compare(built, module, device, built.inputs, built.expected,
                                                  corrupt=job.get("fault") == "wrong")
        per_output = {name: [c] for name, c in comparisons.items()}
        for inputs, expected in built.checks:
            _, more = self._run_and_compare(built, module, device, inputs, expected, corrupt=False)
            for name, c in more.items():
                per_output[name].append(c)
        return args, {name: merge_comparisons(cs) for name, cs in per_output.items()}

    def _run_and_compare(self, built: _Built, module, device, inputs: dict, expected: dict, *,
                         corrupt: bool) -> tuple[list, dict]:
        import numpy as np
        import tvm

        from leir.inputs import zeros
        from leir.bridge.comparison import compare

        analysis, job = built.analysis, built.job
        params = [tvm.runtime.tensor(inputs[t.name], device) for t in analysis.inputs()]
        results = {t.name: tvm.runtime.tensor(zeros(t), device) for t in analysis.outputs()}
        args = params + list(results.values())
        module["main"](*args)
        device.sync()
        outputs = {name: value.numpy() for name, value in results.items()}
        if corrupt and outputs:
            first = next(iter(outputs))
            outputs[first] = (outputs[first] + np.ones_like(outputs[first])).astype(outputs[first].dtype)
        comparisons = {t.name: compare(outputs[t.name], expected[t.name], t.dtype) for t in analysis.outputs()}
        wrong = [name for name, c in comparisons.items() if not c.ok]
        if wrong:
            c = comparisons[wrong[0]]
            total = analysis.tensors[wrong[0]].size
            which = "the second program's " if job.get("second_of_pair") else ""
            against = "the reference program's NumPy evaluation" if job.get("reference") else "the reference"
            raise JobFailure(f"wrong result: {which}{wrong[0]} differs from {against} ({c.mismatched} "
                             f"of {total} elements outside tolerance; max abs err {c.max_abs_err:.3g}, "
                             f"max rel err {c.max_rel_err:.3g})", comparisons=_comparisons_json(comparisons))
        return args, comparisons

    def _vendor(self, built: _Built) -> dict | None:
        from leir.measure.vendor import vendor_latency

        job = built.job
        kwargs = {"repeat": job["repeat"], "min_run_ms": job["min_run_ms"], "seed": job.get("seed", 0),
                  "device": "cpu" if self.target == "llvm" and self.rpc is None else self.target}
        if job.get("workload"):
            from leir.bridge.document import load_leir

            doc = load_leir(job["workload"])
            if not doc.ok:
                return None
            result = vendor_latency(doc.analysis, **kwargs)
        else:
            result = vendor_latency(built.analysis, inputs=built.inputs, expected=built.expected, **kwargs)
        return None if result is None else result.to_json()


def _comparisons_json(comparisons: dict) -> dict:
    from leir.measure.cache import _comparison_json

    return {name: _comparison_json(c) for name, c in comparisons.items()}


def _inject(fault: str, config: dict) -> None:
    """The test hook (see the module docstring)."""
    if fault == "crash":
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a kernel writing out of bounds would get
    elif fault == "hang":
        deadline = time.monotonic() + HANG_LIMIT_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
    elif fault == "oom":
        import numpy as np

        hoard = []
        for _ in range(1 << 14):  # 16,384 x 64 MiB = 1 TiB: past any cap
            # np.empty reserves address space without touching it: the cap
            # is reached without taking the machine's memory.
            hoard.append(np.empty(64 << 20, dtype=np.uint8))
        del hoard
    elif fault != "wrong":
        sys.stderr.write(f"leir measure worker: unknown fault {fault!r}\n")

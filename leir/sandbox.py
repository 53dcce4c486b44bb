"""Limits for the processes that handle a document's content.

Work whose cost a document chooses (TVM's parser folding a kernel's
constants, building and running a kernel, verifying a step) runs in a
worker process that has a memory cap and a time limit, never in the
process that serves an editor or a command line. This module holds what
those workers share:

- ``limit_memory(cap)`` caps the calling process's memory: ``RLIMIT_AS``
  (address space), so that an allocation beyond it fails with
  ``MemoryError``/``bad_alloc`` instead of taking the machine's memory;
  ``RLIMIT_DATA`` on CUDA, which reserves far more address space than it
  uses.
- ``mark_isolated()`` / ``isolated()``: a worker that already runs under
  such limits says so, and code that would otherwise hand work to a worker
  of its own (``leir.bridge.tvmscript`` parsing) does it in place.
- ``worker_initializer(cap)``: both at once, as a pool's ``initializer``.

Importing this module is cheap (no TVM, no NumPy).
"""

from __future__ import annotations

import os
import threading

#: Memory a worker that parses or transforms a document may use.
DEFAULT_MEMORY_CAP = 4 * 1024**3

_ISOLATED_ENV = "LEIR_ISOLATED_WORKER"
_isolated = False
_cap: int | None = None


def limit_memory(cap: int | None, *, cuda: bool = False) -> None:
    """Cap this process's memory at ``cap`` bytes (no cap when falsy).
    Never raises the hard limit a parent set."""
    global _cap
    if not cap:
        return
    import resource

    kind = resource.RLIMIT_DATA if cuda else resource.RLIMIT_AS
    soft, hard = resource.getrlimit(kind)
    new = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        new = min(new, soft)
    resource.setrlimit(kind, (new, hard))
    _cap = new


def memory_cap() -> int | None:
    """The cap ``limit_memory`` set in this process, if any."""
    return _cap


def mark_isolated() -> None:
    """Say that this process is a worker running under limits: work that
    would be sent to an isolated worker is done here instead."""
    global _isolated
    _isolated = True
    os.environ[_ISOLATED_ENV] = "1"  # inherited by anything this worker starts


def isolated() -> bool:
    return _isolated or os.environ.get(_ISOLATED_ENV) == "1"


def worker_initializer(cap: int | None = DEFAULT_MEMORY_CAP) -> None:
    """A pool ``initializer``: cap the worker's memory and mark it isolated."""
    limit_memory(cap)
    mark_isolated()


#: What a measurement worker imports (``leir.measure``): the forkserver
#: imports them once when a measurement engine starts it.
MEASUREMENT_PRELOAD = ["numpy", "tvm", "leir.bridge.run", "leir.evaluate", "leir.bridge.document", "leir.measure.worker"]

#: Modules the process's forkserver imports once, for every worker forked
#: from it: what every caller of ``worker_context`` (and ``want_preloaded``)
#: asked for before the forkserver started.
_preload: list[str] = []
_context_lock = threading.Lock()


def want_preloaded(modules) -> None:
    """Ask the forkserver, when it starts, to import ``modules`` once for all
    workers. A program that will fork several kinds of worker (the server)
    says so before the first one starts: the forkserver is one per process,
    and modules asked for after it started are imported by each worker."""
    _preload.extend(m for m in modules if m not in _preload)


def worker_context(preload=()):
    """The multiprocessing context for document-handling workers: forked
    from a forkserver that has imported ``preload`` and what else was asked
    for (fast restarts after a worker is killed; the forkserver runs none of
    the work, so no TVM thread is ever forked), or spawned where there is no
    fork."""
    import multiprocessing

    with _context_lock:
        want_preloaded(preload)
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(list(_preload))
            return ctx
        return multiprocessing.get_context("spawn")


def exit_text(code: int | None) -> str:
    """How a child process ended, from its exit code (``Process.exitcode``):
    "exit status 3", "signal 9, SIGKILL", or "still running" (None)."""
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"

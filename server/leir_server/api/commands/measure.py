"""``leir.measure`` {uri, kernel?, repeat?}: build, check against the NumPy
evaluation and time the document's program (or one Python kernel) on the
current target, through the measurement engine (answered from its cache
when it has the program). Returns the ``leir measure --json`` object.

``repeat`` (timed runs, default the engine's) lets a client ask for a quick,
rougher figure. Sends ``leir/status`` with ``measuring`` true, then false
with ``lastLatencyMs``. Cancelling the request cancels the measurement.
"""

from __future__ import annotations

import asyncio

from leir_server.workers import RequestFailed, require_budget, require_trust


async def program_of(server, call, snapshot, kernel: str | None):
    """The analysis (a ``.leir`` document) or complete LEIR text (a Python
    kernel, raised in a job process) to measure."""
    from leir.tools.jobs import Failure, kernel_program

    if snapshot.language == "leir":
        doc = await asyncio.to_thread(lambda: snapshot.leir)
        if doc is None or not doc.ok:
            raise RequestFailed(f"{call.name}: the document has errors; fix them before measuring it")
        return doc.analysis
    result = await server.session.workers.run(kernel_program, snapshot.text, kernel, what="reading the kernel")
    if isinstance(result, Failure):
        raise RequestFailed(f"{call.name}: {result.message}")
    return result


def status(server, measuring: bool, uri: str | None = None, latency_ms: float | None = None,
           device: str | None = None) -> None:
    """A ``leir/status`` notification."""
    params = {"target": server.session.settings.target, "device": device or server.session.workers.device(),
              "measuring": measuring}
    if latency_ms is not None:
        params["lastLatencyMs"] = latency_ms
    if uri is not None:
        params["uri"] = uri
    server.protocol.notify("leir/status", params)


async def run(server, call) -> dict:
    from leir.footprint import MemoryBudgetExceeded

    require_trust(server, "measuring")
    snapshot = call.snapshot(server)
    kernel = call.string("kernel")
    if snapshot.language == "leir" and kernel is not None:
        raise RequestFailed(f"{call.name}: 'kernel' chooses a kernel of a Python file; a .leir file is one program")
    repeat = call.integer("repeat", 0, 1, 1000) or None
    program = await program_of(server, call, snapshot, kernel)
    if not isinstance(program, str):  # a kernel's LEIR text: the engine refuses it when it is submitted
        require_budget(server, program, "measure", f"{call.name} refused")
    workers = server.session.workers
    engine = await asyncio.to_thread(workers.engine)
    status(server, True, snapshot.uri, device=engine.device)
    try:
        future = await asyncio.to_thread(engine.submit, program, label=snapshot.uri, repeat=repeat)
    except MemoryBudgetExceeded as e:
        status(server, False, snapshot.uri, device=engine.device)
        raise RequestFailed(f"{call.name} refused: {e}") from None
    waiting = asyncio.ensure_future(asyncio.wrap_future(future))
    cancelled = asyncio.ensure_future(call.cancelled.wait())
    try:
        await asyncio.wait({waiting, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            future.cancel()
            raise RequestFailed(f"{call.name} was cancelled")
        m = waiting.result()
    except asyncio.CancelledError:
        future.cancel()
        raise
    finally:
        cancelled.cancel()
        status(server, False, snapshot.uri, device=engine.device,
               latency_ms=None if not future.done() or future.cancelled() or future.exception()
               else future.result().median_ms)
    return m.to_json()

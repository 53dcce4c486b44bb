"""The server's worker processes (``leir_server.workers``): a job past its
time limit is stopped, a crashed worker fails its job and is replaced, a
cancelled job is killed; the measurement engine follows the target."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from leir_server.session.settings import Settings
from leir_server.workers import RequestFailed

pytestmark = pytest.mark.slow  # the job processes start from a forkserver that imports TVM


async def test_a_job_runs_in_another_process(workers):
    assert await workers.run(os.getpid) != os.getpid()


async def test_a_crashed_worker_fails_its_job_and_is_replaced(workers):
    with pytest.raises(RequestFailed, match="stopped: its worker process died"):
        await workers.run(os.abort, what="the crash")

    assert await workers.run(pow, 2, 10) == 1024


async def test_a_job_past_its_time_limit_is_stopped(workers):
    with pytest.raises(RequestFailed, match="the nap took longer than 1 s and was stopped"):
        await workers.run(time.sleep, 600, timeout=1, what="the nap")

    assert await workers.run(pow, 3, 3) == 27


async def test_cancelling_the_awaiting_task_kills_the_job(workers, tmp_path):
    marker = tmp_path / "worker.pid"
    # The job's shell writes its parent's pid (the worker's), then sleeps.
    task = asyncio.ensure_future(workers.run(os.system, f"echo $PPID > {marker}; sleep 60"))
    while not marker.exists() or not marker.read_text().strip():
        await asyncio.sleep(0.1)
    worker = int(marker.read_text())

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    deadline = time.monotonic() + 60  # a bound on a hang, not a speed requirement
    while _alive(worker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not _alive(worker)
    assert await workers.run(pow, 2, 3) == 8


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


async def test_after_close_no_job_is_taken(workers):
    workers.close()

    with pytest.raises(RequestFailed, match="shutting down"):
        await workers.run(pow, 2, 2)


def test_the_engine_follows_the_target(workers):
    first = workers.engine()
    assert workers.engine() is first and first.target == "llvm"

    workers.server.session.settings = Settings(target="cuda")
    second = workers.engine()

    assert second is not first and second.target == "cuda"
    assert first._closing  # the old engine was closed
    assert workers.engine_if_started() is second


def test_restart_closes_the_engine_and_the_next_one_is_new(workers):
    first = workers.engine()

    workers.restart()

    assert first._closing
    assert workers.engine() is not first


async def test_an_optimize_process_that_dies_fails_its_run(workers):
    from leir.tools.jobs import Failure
    from leir_server.workers import OptimizeRun

    run = OptimizeRun(workers, "L^{8}_{i} [ Y_{i} = X_{i} + 1; ];\n", "leir", None, {"steps": 1, "budget": 4},
                      lambda message: None)
    run.process.kill()
    result = await asyncio.wait_for(run.result(), 120)  # a bound on a hang

    assert isinstance(result, Failure) and result.code == "crashed"
    assert "SIGKILL" in result.message
    assert run not in workers.runs

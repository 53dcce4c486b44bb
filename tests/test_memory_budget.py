"""The memory budget (``leir.footprint``) and the job workers' memory cap:
a program just over the budget is refused before anything is built, one
under it verifies; the command line says so in one line; a job that runs
out of its worker's cap fails with a clear message and the next job runs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.footprint import (MemoryBudgetExceeded, budget_diagnostics, check_budget, footprint, format_bytes,
                            worker_cap)
from leir.semantics import analyze

ADD = """in A: f32[{n},{n}]
in B: f32[{n},{n}]
out C: f32[{n},{n}]
L^{{{n}}}_{{i}}
  L^{{{n}}}_{{j}} [
    C_{{i,j}} = A_{{i,j}} + B_{{i,j}};
  ];
"""
SPLIT = transforms.step_from_json({"id": "split", "args": {"block": "C", "loop": "j", "factors": [8, 8]}})


def _analysis(n: int):
    doc = load_leir(ADD.format(n=n))
    assert doc.ok
    return doc.analysis


def test_the_footprint_counts_every_tensor_and_the_verification_copies():
    fp = footprint(_analysis(64))
    assert (fp.inputs, fp.outputs, fp.temporaries) == (2 * 64 * 64 * 4, 64 * 64 * 4, 0)
    assert fp.tensors == 3 * 16384
    # inputs host+device, four copies of each output, float64 work arrays of the comparison
    assert fp.verify_bytes() == 2 * 32768 + 4 * 16384 + 4 * 8 * 4096
    assert format_bytes(1_728_000_000) == "1.7 GB" and format_bytes(576_000_000) == "576 MB"


def test_the_message_names_the_figures_and_the_setting():
    big = _analysis(12000)
    message = check_budget(big, "verify", budget_mb=1000)
    assert message.startswith("the tensors of this program take 1.7 GB")
    assert "leir builds and runs programs up to 1 GB (setting leir.memoryBudgetMB" in message
    assert check_budget(_analysis(64), "verify", budget_mb=1000) is None
    (d,) = budget_diagnostics(big, 1000)
    assert d.severity == "warning" and d.code == "memory-budget" and "1.7 GB" in d.message
    assert budget_diagnostics(_analysis(64), 1000) == []


def test_a_program_just_over_the_budget_is_refused_before_any_build(monkeypatch):
    before = _analysis(64)
    after = analyze(transforms.apply(before, SPLIT))
    needed = footprint(before).verify_bytes(footprint(after))
    import leir.bridge.run

    built = []
    real_build = leir.bridge.run.build
    monkeypatch.setattr(leir.bridge.run, "build", lambda *a, **k: built.append(1) or real_build(*a, **k))

    monkeypatch.setenv("LEIR_MEMORY_BUDGET_MB", repr((needed - 1) / 1e6))  # one byte short
    with pytest.raises(MemoryBudgetExceeded, match="the tensors of this program take 49 kB"):
        transforms.verify(before, after)
    assert built == []

    monkeypatch.setenv("LEIR_MEMORY_BUDGET_MB", repr(needed / 1e6))  # exactly enough
    result = transforms.verify(before, after)
    assert result.ok and built  # it was built and run


def test_a_job_refuses_an_oversized_program_with_the_message(monkeypatch):
    from leir.tools.jobs import Failure, apply_step

    monkeypatch.setenv("LEIR_MEMORY_BUDGET_MB", "0.01")
    result = apply_step(ADD.format(n=64), "leir", {"id": "split", "args": SPLIT.args})
    assert isinstance(result, Failure) and result.code == "memory-budget"
    assert "the tensors of this program take 49 kB" in result.message


@pytest.mark.parametrize("command", [
    ["run", "{file}", "--random-inputs", "0"],
    ["apply", "{file}", "--step", '{{"id": "split", "args": {{"block": "C", "loop": "j", "factors": [8, 8]}}}}',
     "--verify"],
    ["measure", "{file}", "--no-cache"],
    ["optimize", "{file}", "--steps", "1"],
])
def test_the_command_line_refuses_in_one_line(tmp_path, command):
    path = tmp_path / "add.leir"
    path.write_text(ADD.format(n=64))
    env = {**os.environ, "LEIR_MEMORY_BUDGET_MB": "0.01", "LEIR_CACHE_DIR": str(tmp_path / "cache")}
    args = [a.format(file=path) for a in command]
    done = subprocess.run([sys.executable, "-m", "leir.tools.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the tensors of this program take 49 kB" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_worker_cap_follows_the_budget():
    assert worker_cap(1000) == 3 * 1024**3 + 1000 * 10**6
    assert worker_cap(8000) > worker_cap(1000)


# ------------------------------------------------------------ the job pool's cap


@pytest.mark.slow
async def test_job_workers_are_capped_and_isolated(workers):
    import leir.sandbox

    soft, _ = await workers.run(resource.getrlimit, resource.RLIMIT_AS)
    assert soft == workers.memory_cap() == worker_cap(None)
    assert await workers.run(leir.sandbox.isolated) is True


@pytest.mark.slow
async def test_a_job_over_the_cap_fails_clearly_and_the_next_one_runs(workers):
    from leir_server.workers import RequestFailed

    with pytest.raises(RequestFailed, match=r"the big job ran out of memory: a job may use 4.2 GB"):
        await workers.run(bytearray, 6 * 1024**3, what="the big job")
    assert await workers.run(pow, 2, 10) == 1024
    assert len(await workers.run(bytearray, 10**6)) == 10**6


@pytest.mark.slow
async def test_a_new_budget_restarts_the_pool_with_its_cap(workers):
    workers.server.session.settings = type(workers.server.session.settings)(memory_budget_mb=2000)
    soft, _ = await workers.run(resource.getrlimit, resource.RLIMIT_AS)
    assert soft == worker_cap(2000)
    from leir.footprint import budget_bytes

    assert await workers.run(budget_bytes) == 2000 * 10**6  # what its jobs check programs against


def test_the_setting_is_read_and_checked():
    from leir_server.session.settings import Settings

    settings, problems = Settings.from_json({"memoryBudgetMB": 2500})
    assert settings.memory_budget_mb == 2500 and problems == []
    settings, problems = Settings.from_json({"memoryBudgetMB": True})
    assert settings.memory_budget_mb is None and "memoryBudgetMB" in problems[0]
    settings, problems = Settings.from_json({"memoryBudgetMB": 0})
    assert settings.memory_budget_mb is None and problems


def test_the_measurement_engine_refuses_over_its_budget(tmp_path):
    from leir.measure import MeasurementEngine

    engine = MeasurementEngine("llvm", cache=tmp_path / "cache", memory_budget_mb=0.01, vendor=False)
    try:
        with pytest.raises(MemoryBudgetExceeded, match="the tensors of this program take 49 kB"):
            engine.submit(_analysis(64))
    finally:
        engine.close()

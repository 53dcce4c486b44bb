"""leir.tools.jobs: what the server's worker processes run. Called here in the
test process (they are plain functions of plain arguments)."""

from __future__ import annotations

import pickle
import threading
from multiprocessing import Pipe

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.tools.jobs import Applied, Converted, Failure, apply_step, convert, kernel_program, optimize_child
from leir.printer import print_program
from leir.tools.measuring import StepOutcomes, program_digest, tvmscript_namespace
from leir.transforms import Step
from leir.transforms.verify import Verification
from leir.tools import optimize_messages as messages
from programs import SPLIT_I, TRANSPOSE

pytestmark = pytest.mark.slow  # applying a step builds and runs both programs


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_apply_step_returns_the_verified_text_that_transforms_apply_prints(own_cache):
    result = apply_step(TRANSPOSE, "leir", SPLIT_I)

    expected = print_program(transforms.apply(load_leir(TRANSPOSE).analysis, Step(**SPLIT_I)))
    assert isinstance(result, Applied)
    assert result.text == expected
    assert result.verification.startswith("Y: ok")
    assert pickle.loads(pickle.dumps(result)) == result


def test_a_verified_step_is_remembered_for_suggestions(own_cache):
    result = apply_step(TRANSPOSE, "leir", SPLIT_I)

    after = StepOutcomes(own_cache).after(load_leir(TRANSPOSE).analysis, Step(**SPLIT_I))
    assert program_digest(after) == program_digest(load_leir(result.text).analysis)


@pytest.mark.parametrize("step, code, message", [
    ({"id": "split", "args": {"block": "Z", "loop": "i", "factors": [4, 8]}}, "stale-step", "no block Z"),
    ({"id": "split", "args": {"block": "Y", "loop": "i", "factors": [5, 8]}}, "split-wrong-factors",
     "factors [5, 8] do not split 32 iterations"),
    ({"id": "no_such_step", "args": {}}, "unknown-transform", "unknown transformation 'no_such_step'"),
    ({"args": {}}, "bad-step", "a step is a JSON object"),
])
def test_a_refused_step_is_a_typed_failure(step, code, message):
    result = apply_step(TRANSPOSE, "leir", step)

    assert isinstance(result, Failure)
    assert result.code == code
    assert message in result.message


def test_a_document_with_errors_is_a_failure():
    result = apply_step("L^{4}_{i} [ Y_{i} = X_{i} $ 1; ];\n", "leir", SPLIT_I)

    assert isinstance(result, Failure) and result.code == "document"
    assert "1:27" in result.message


def test_a_step_that_fails_verification_is_not_applied(monkeypatch, own_cache):
    monkeypatch.setattr(transforms, "verify", lambda before, after: Verification(False, notes=["outputs differ"]))

    result = apply_step(TRANSPOSE, "leir", SPLIT_I)

    assert isinstance(result, Failure) and result.code == "verification-failed"
    assert "outputs differ" in result.message
    assert StepOutcomes(own_cache).after(load_leir(TRANSPOSE).analysis, Step(**SPLIT_I)) is None


def test_convert_both_ways_and_tvmscript_apply():
    python = convert(TRANSPOSE, "leir", None, "my-transpose")
    assert isinstance(python, Converted) and python.title == "my_transpose.py"

    back = convert(python.text, "tvmscript")
    assert isinstance(back, Converted) and back.language == "leir" and back.title == "my_transpose.leir"
    assert program_digest(load_leir(back.text).analysis) == program_digest(load_leir(TRANSPOSE).analysis)

    applied = apply_step(python.text, "tvmscript", SPLIT_I, "my_transpose")
    assert isinstance(applied, Applied), applied
    assert "i_0" in applied.text and "def my_transpose(" in applied.text
    assert applied.verification.startswith("Y: ok")
    assert kernel_program(applied.text) == applied.after_program


def test_a_python_kernel_outcome_is_recorded_under_its_kernel(own_cache):
    python = convert(TRANSPOSE, "leir", None, "transpose").text
    applied = apply_step(python, "tvmscript", SPLIT_I)

    before = load_leir(kernel_program(python)).analysis
    outcomes = StepOutcomes(own_cache)
    assert outcomes.after(before, Step(**SPLIT_I)) is None  # not a LEIR-named step
    found = outcomes.after(before, Step(**SPLIT_I), tvmscript_namespace("transpose"))
    assert program_digest(found) == program_digest(load_leir(applied.after_program).analysis)


def test_convert_of_a_file_without_kernels_is_a_failure():
    result = convert("x = 1\n", "tvmscript")

    assert isinstance(result, Failure) and "no @T.prim_func kernel" in result.message


def _parent(conn, start_text: str, log: list, cancel_after: int | None = None):
    """Answer the child's measurements: the start program takes 10 ms and
    every other 5 ms (a stand-in for the engine; this test checks the
    protocol, not latencies)."""
    start = program_digest(load_leir(start_text).analysis)
    asked = 0
    while True:
        message = conn.recv()
        log.append(message)
        if isinstance(message, messages.MeasureRequest):
            asked += 1
            if cancel_after is not None and asked > cancel_after:
                conn.send(messages.Cancel())
                continue
            conn.send(messages.Timings([(10.0 if program_digest(load_leir(t).analysis) == start else 5.0, None, False)
                                        for t in message.programs]))
        elif isinstance(message, (messages.Done, messages.Failed)):
            return


def test_optimize_child_streams_each_kept_step_then_the_result():
    parent, child = Pipe()
    log: list = []
    thread = threading.Thread(target=_parent, args=(parent, TRANSPOSE, log))
    thread.start()

    optimize_child(child, TRANSPOSE, "leir", None, {"steps": 1, "budget": 6, "target": "llvm"})
    thread.join(60)

    assert isinstance(log[0], messages.MeasureRequest) and isinstance(log[-1], messages.Done)
    [step] = [m for m in log if isinstance(m, messages.StepKept)]
    result = log[-1].result
    assert result["steps"] == [step.step]
    assert step.step["latency_before_ms"] == 10.0 and step.step["latency_after_ms"] == 5.0
    assert result["final"] == step.program
    assert result["measurements"] <= 6


def test_optimize_child_stops_when_the_parent_cancels():
    parent, child = Pipe()
    log: list = []
    thread = threading.Thread(target=_parent, args=(parent, TRANSPOSE, log, 1))
    thread.start()

    optimize_child(child, TRANSPOSE, "leir", None, {"steps": 2, "budget": 20, "target": "llvm"})
    thread.join(60)

    assert log[-1] == messages.Failed(Failure("cancelled", "optimize was cancelled"))
    assert sum(isinstance(m, messages.MeasureRequest) for m in log) == 2  # the start, then the batch it cancelled


def test_optimize_child_searches_a_python_kernel_in_its_leir_form():
    python = convert(TRANSPOSE, "leir", None, "transpose").text
    parent, child = Pipe()
    log: list = []
    thread = threading.Thread(target=_parent, args=(parent, kernel_program(python), log))
    thread.start()

    optimize_child(child, python, "tvmscript", "transpose", {"steps": 1, "budget": 6, "target": "llvm"})
    thread.join(60)

    assert isinstance(log[-1], messages.Done)
    result = log[-1].result
    assert len(result["steps"]) == 1
    assert load_leir(result["final"]).ok  # the final program is LEIR text

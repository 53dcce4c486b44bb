"""TVM parses a document's kernels in a worker process with a time limit
and a memory cap (leir.bridge.tvmscript.isolated): a kernel that asks for more
gets a diagnostic, the worker is replaced, and the caller carries on."""

from __future__ import annotations

import pytest

from leir import sandbox
from leir.bridge.tvmscript import isolated, load_document
from programs import SCALE_TVMSCRIPT

pytestmark = pytest.mark.slow


def _long_kernel(statements: int) -> str:
    body = "\n".join(f"    B[{i % 4}] = A[{i % 4}] + T.float32({i})" for i in range(statements))
    return ('from tvm.script import tirx as T\n\n\n@T.prim_func(s_tir=True)\n'
            f'def long(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):\n{body}\n')


@pytest.fixture
def fresh_pool():
    """A parse worker started under this test's settings, and one started
    anew (with the defaults) for the tests after it."""
    if isolated._workers is not None:
        isolated._discard(isolated._workers)
    yield
    if isolated._workers is not None:
        isolated._discard(isolated._workers)


def test_tvms_parser_never_runs_in_the_calling_process(monkeypatch):
    import tvm.script

    def refuse(*args, **kwargs):
        raise AssertionError("TVM's parser ran in the caller's process")

    monkeypatch.setattr(tvm.script, "from_source", refuse)
    doc = load_document(SCALE_TVMSCRIPT)

    assert doc.diagnostics == ()
    assert doc.kernels[0].func is not None and "scale" in doc.kernels[0].module.script()


def test_an_isolated_worker_parses_in_place(monkeypatch):
    import tvm.script

    calls = []
    original = tvm.script.from_source
    monkeypatch.setattr(tvm.script, "from_source", lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(sandbox, "_isolated", True)

    doc = load_document(SCALE_TVMSCRIPT)

    assert calls == [1] and doc.kernels[0].func is not None


def test_a_parse_past_the_time_limit_is_a_diagnostic_and_the_next_parse_works(monkeypatch, fresh_pool):
    load_document(SCALE_TVMSCRIPT)  # the worker is up: the limit counts the parse alone
    monkeypatch.setattr(isolated, "PARSE_TIMEOUT_S", 0.05)

    doc = load_document(_long_kernel(2000))

    [diagnostic] = doc.diagnostics
    assert diagnostic.code == "tvmscript-limit" and "longer than" in diagnostic.message
    assert doc.kernels[0].func is None
    monkeypatch.setattr(isolated, "PARSE_TIMEOUT_S", 20.0)
    assert load_document(SCALE_TVMSCRIPT).kernels[0].func is not None


def test_a_parse_past_the_memory_cap_is_a_diagnostic_and_the_caller_carries_on(monkeypatch, fresh_pool):
    # Below what TVM itself has mapped: the parse's allocations fail.
    monkeypatch.setattr(isolated, "MEMORY_CAP", 64 * 1024**2)

    doc = load_document(_long_kernel(200))

    [diagnostic] = doc.diagnostics
    # Either TVM's allocation fails (MemoryError, reported with the cap) or,
    # on a loaded machine, the worker cannot even start under the cap.
    assert diagnostic.code == "tvmscript-limit"
    assert "64 MiB" in diagnostic.message or "workers expired" in diagnostic.message or "died" in diagnostic.message
    assert doc.kernels[0].func is None
    monkeypatch.setattr(isolated, "MEMORY_CAP", 2 * 1024**3)
    isolated._discard(isolated._workers)
    assert load_document(SCALE_TVMSCRIPT).kernels[0].func is not None


def test_a_kernel_parses_the_same_through_the_worker():
    """What comes back through TVM's JSON is the module TVM parsed."""
    import tvm

    from leir.bridge.tvmscript import find_kernels
    from leir.bridge.tvmscript.loading import _TVMSource

    doc = load_document(SCALE_TVMSCRIPT)
    [kernel] = find_kernels(SCALE_TVMSCRIPT)[0]
    direct = isolated._parse(_TVMSource.of(kernel).text, dict(kernel.scope.aliases), {})

    tvm.ir.assert_structural_equal(doc.kernels[0].func, direct)

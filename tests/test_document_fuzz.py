"""Random and mutated documents through the server's request handlers
(issue 12.3): diagnostics, hover, code actions, code lenses, symbols,
semantic tokens, folding and formatting, at random positions, on a
``DocumentSnapshot`` as the handlers see it (``tests/docfuzz.py``).

No exception other than a typed refusal (``JsonRpcException``) may escape,
every range must lie inside the document, and every call must finish:
hypothesis' deadline is a generous hang guard here (a document the checker
accepts is bounded in time, ``leir.limits``), not a speed test.

Then the limits themselves: each is reported at its token with the limit
in the message, and the cancellation machinery: a request stops when its
snapshot is overtaken, when cancelled, or past its budget.

LEIR_FUZZ_EXAMPLES sets the number of documents (default 60 per property);
``bench/fuzz_documents.py`` is the long run.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import docfuzz
from leir import cancel, limits
from leir.bridge.document import load_leir
from leir_server import schedule
from leir_server.server import build_server
from leir_server.session.snapshot import DocumentSnapshot

BASES = docfuzz.examples()

FUZZ = settings(
    max_examples=int(os.environ.get("LEIR_FUZZ_EXAMPLES", "60")),
    deadline=timedelta(seconds=60),  # a hang guard: a document takes milliseconds to a second or two
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    derandomize=True,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    old = os.environ.get("LEIR_CACHE_DIR")
    os.environ["LEIR_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield build_server()
    finally:
        if old is None:
            os.environ.pop("LEIR_CACHE_DIR", None)
        else:
            os.environ["LEIR_CACHE_DIR"] = old


@FUZZ
@given(seed=st.integers(0, 2**32 - 1))
def test_random_documents_through_every_handler(server, seed):
    rng = random.Random(seed)
    text, language = docfuzz.generated(rng, BASES)
    docfuzz.exercise(server, text, language, docfuzz.positions(rng, text, 4))


@FUZZ
@given(text=st.lists(st.sampled_from(docfuzz.LEIR_PIECES), max_size=80).map("".join), data=st.data())
def test_token_soup_through_every_handler(server, text, data):
    offsets = data.draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=3))
    docfuzz.exercise(server, text, "leir", offsets)


@settings(max_examples=40, deadline=timedelta(seconds=60), derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_python_looking_text_through_the_pure_python_handlers(server, text):
    docfuzz.exercise(server, "from tvm.script import tirx as T\n@T.prim_func\n" + text, "tvmscript", [0])


@pytest.mark.parametrize("base", range(len(BASES)))
def test_every_example_answers_everywhere(server, base):
    text = BASES[base]
    docfuzz.exercise(server, text, "leir", list(range(0, len(text) + 1, max(1, len(text) // 12))))


# ------------------------------------------------------------------ the limits


def _only_error(text: str):
    doc = load_leir(text)
    errors = [d for d in doc.diagnostics if d.is_error]
    assert errors, text[:100]
    return errors[0], text[errors[0].span.start:errors[0].span.end]


def test_a_loop_extent_past_2_31_is_reported_at_the_extent():
    text = "L^{1000000000000000000000000000000}_{i} [\n  Y_{i} = X_{i} + 1;\n];\n"
    d, at = _only_error(text)
    assert (d.code, at) == ("extent-too-large", "1000000000000000000000000000000")
    assert "2147483647" in d.message and "2^31-1" in d.message
    d, at = _only_error(f"L^{{{2**31}}}_{{i}} [ Y_{{i}} = 1; ];")  # one composite token
    assert (d.code, at) == ("extent-too-large", str(2**31))
    assert load_leir(f"L^{{{2**31 - 1}}}_{{i}} [ Y_{{i}} = 1; ];").ok


def test_a_loop_whose_last_value_overflows_is_reported_at_its_start():
    d, at = _only_error(f"L^{{{2**31 - 1}}}_{{i=2}} [ Y_{{i}} = 1; ];")
    assert (d.code, at) == ("extent-too-large", "2")


def test_too_many_loops_is_one_error_at_the_first_loop_past_the_limit():
    loops = [f"L^{{2}}_{{i{k}}}" for k in range(20_000)]
    text = "\n".join(loops) + "\n[ Y_{i0} = 1; ];\nL^{4}_{j} [ Z_{j} = 2; ];\n"
    doc = load_leir(text)
    errors = [d for d in doc.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["too-many-loops"]
    assert text[errors[0].span.start:errors[0].span.end] == loops[limits.MAX_LOOP_DEPTH]
    assert str(limits.MAX_LOOP_DEPTH) in errors[0].message
    assert [e.equation.lhs.tensor for e in doc.analysis.equations] == ["Z"]  # the next nest is checked


def test_too_many_indices_is_reported_at_the_first_index_past_the_limit():
    for text in ("L^{2}_{i} [ Y_{" + ",".join(["i"] * 20_000) + "} = 1; ];",
                 "L^{2}_{i} [ Y_{i} = X_{" + ",".join(["i+0"] * 20_000) + "}; ];"):
        d, at = _only_error(text)
        assert d.code == "rank-too-large" and str(limits.MAX_RANK) in d.message
        assert at in ("i", "i+0")
        assert text[:d.span.start].count(",") == limits.MAX_RANK  # the 33rd index
    d, _ = _only_error("in X: f32[" + ",".join(["2"] * 33) + "]\n")
    assert d.code == "rank-too-large"


def test_too_many_iterations_and_too_large_tensors_are_errors():
    text = "L^{65536}_{i}L^{65536}_{j}L^{65536}_{k}L^{65536}_{l}[Y_{i,j,k,l}=1;];"
    doc = load_leir(text)
    codes = {d.code: text[d.span.start:d.span.end] for d in doc.diagnostics if d.is_error}
    assert codes["too-many-iterations"] == "65536"
    assert codes["tensor-too-large"] == "Y"


def test_an_index_integer_past_2_31_is_reported():
    d, at = _only_error("L^{4}_{i} [ Y_{i*1000000000000} = 1; ];")
    assert (d.code, at) == ("index-too-large", "1000000000000")


def test_a_huge_integer_exponent_is_reported():
    # Found by bench/fuzz_documents.py: SymPy never finished 0.7071**67811865476.
    for text in ("L^{4}_{i} [ Y_{i} = X_{i}*0.7071**067811865476; ];", "L^{4}_{i} [ Y_{i} = pow(X_{i}, 5000); ];"):
        d, at = _only_error(text)
        assert d.code == "exponent-too-large" and at in ("067811865476", "5000")
    assert load_leir("L^{4}_{i} [ Y_{i} = X_{i}**3 + pow(X_{i}, -2) + X_{i}**2.5; ];").ok


def test_deep_expressions_are_refused_not_recursed():
    for text in ("L^{4}_{i} [ Y_{i} = " + "(" * 20_000 + "X_{i}" + ")" * 20_000 + "; ];",
                 "L^{4}_{i} [ Y_{i} = " + "-" * 20_000 + "X_{i}; ];",
                 "L^{4}_{i} [ Y_{i} = " + "**".join(["X_{i}"] * 20_000) + "; ];",
                 "L^{4}_{i} [ Y_{i} = " + "+".join(["X_{i}"] * 20_000) + "; ];",
                 "L^{4}_{i} " + "[ " * 20_000 + "Y_{i} = 1;" + " ];" * 20_000):
        d, _ = _only_error(text)
        assert d.code == "too-deep"


def test_divisors_are_bounded_for_any_n():
    from leir.transforms.base import divisors
    from leir.transforms.steps.split import inner_factors

    assert divisors(360) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 20, 24, 30, 36, 40, 45, 60, 72, 90, 120, 180, 360]
    assert divisors(2**31 - 1) == [1, 2**31 - 1]  # a prime at the limit: 46,341 trials
    big = divisors(10**30)  # only the small divisors and their cofactors, and at once
    assert big[:4] == [1, 2, 4, 5] and big[-1] == 10**30
    assert inner_factors(10**30)[:3] == [(2, True), (4, True), (8, True)]


# ------------------------------------------------------------------ cancellation


def _slow(seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cancel.checkpoint()
        time.sleep(0.001)
    return "done"


def test_a_checkpoint_outside_a_token_does_nothing():
    cancel.checkpoint()
    with cancel.running(None):
        cancel.checkpoint()


def test_a_token_stops_work_when_cancelled_overtaken_or_over_budget():
    token = cancel.Token()
    threading.Timer(0.05, token.cancel).start()
    with cancel.running(token), pytest.raises(cancel.Cancelled) as stopped:
        _slow(30)
    assert stopped.value.reason == "cancelled"

    gone = threading.Event()
    threading.Timer(0.05, gone.set).start()
    with cancel.running(cancel.Token(parent=cancel.Token(overtaken=gone.is_set))), \
            pytest.raises(cancel.Cancelled) as stopped:
        _slow(30)
    assert stopped.value.reason == "overtaken"

    with cancel.running(cancel.Token(deadline=time.monotonic() + 0.05)), pytest.raises(cancel.Cancelled) as stopped:
        _slow(30)
    assert stopped.value.reason == "over budget"


def _big_text(nests: int = 3000) -> str:
    return "\n".join(f"L^{{64}}_{{i}}\n  L^{{32}}_{{j}} [\n    Y{n}_{{i,j}} = X{n}_{{i,j}}*2 + X{n}_{{i,0}};\n  ];"
                     for n in range(nests))


def test_a_newer_version_stops_the_parse_of_an_older_one():
    overtaken = threading.Event()
    snapshot = DocumentSnapshot("file:///fuzz/big.leir", 1, _big_text(), "leir", overtaken=overtaken.is_set)
    threading.Timer(0.05, overtaken.set).start()
    started = time.monotonic()
    with pytest.raises(schedule.Stopped) as stopped:
        snapshot.leir
    assert stopped.value.code == schedule.CONTENT_MODIFIED
    assert time.monotonic() - started < 30  # a hang guard: the full parse takes seconds


def test_a_request_answers_content_modified_when_overtaken_and_cancelled_when_cancelled():
    threads = ThreadPoolExecutor(max_workers=schedule.THREADS)  # what a session's request_threads are

    async def scenario():
        overtaken = threading.Event()
        snapshot = DocumentSnapshot("file:///fuzz/a.leir", 1, "", "leir", overtaken=overtaken.is_set)
        task = asyncio.ensure_future(schedule.off_loop(snapshot, _slow, 30, budget_s=60, what="x", threads=threads))
        await asyncio.sleep(0.05)
        overtaken.set()
        with pytest.raises(schedule.Stopped) as stopped:
            await task
        assert stopped.value.code == schedule.CONTENT_MODIFIED

        fresh = DocumentSnapshot("file:///fuzz/a.leir", 2, "", "leir")
        task = asyncio.ensure_future(schedule.off_loop(fresh, _slow, 30, budget_s=60, what="x", threads=threads))
        await asyncio.sleep(0.05)
        task.cancel()  # what pygls does on $/cancelRequest
        with pytest.raises(asyncio.CancelledError):
            await task

        with pytest.raises(schedule.Stopped) as stopped:
            await schedule.off_loop(fresh, _slow, 30, budget_s=0.05, what="the thing", threads=threads)
        assert stopped.value.code == schedule.REQUEST_FAILED
        assert "the thing took longer than 0.05 s" in stopped.value.message
        assert await schedule.off_loop(fresh, _slow, 30, budget_s=0.05, what="x", on_budget=lambda: "partial",
                                      threads=threads) \
            == "partial"
        assert await schedule.off_loop(fresh, _slow, 0.01, budget_s=10, what="x", threads=threads) == "done"

    try:
        asyncio.run(scenario())
    finally:
        threads.shutdown(wait=False, cancel_futures=True)


def test_a_waiting_request_gives_up_while_another_thread_parses():
    snapshot = DocumentSnapshot("file:///fuzz/big.leir", 1, _big_text(), "leir")
    parsing = threading.Thread(target=lambda: snapshot.leir)
    parsing.start()
    time.sleep(0.02)
    with cancel.running(cancel.Token(deadline=time.monotonic() + 0.05)), pytest.raises(cancel.Cancelled):
        snapshot.leir  # waits on the other thread's parse, then gives up at its deadline
    parsing.join()
    assert snapshot.leir.ok  # the shared parse was not thrown away

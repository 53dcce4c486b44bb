"""The leir commands over stdio (``workspace/executeCommand``): measure,
optimize with progress, streaming and cancellation, convert both ways,
show the trajectory, restart; and the errors a client's mistakes get."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_fixtures import LeirClient

pytestmark = pytest.mark.slow  # measures and builds kernels

TRANSPOSE = """\
# Y = X.T
L^{32}_{i}
  L^{16}_{j} [
    Y_{i,j} = X_{j,i};
  ];
"""

# Large enough that one search has many candidates to measure.
MATMUL = """\
L^{64}_{i}
  L^{48}_{j}
    L^{128}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The server (started after this fixture) measures into a fresh cache."""
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def stored_measurements(cache_dir) -> int:
    path = cache_dir / "measurements.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]


async def command(client: LeirClient, name: str, *arguments):
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=name, arguments=list(arguments)))


def plain(value):
    """A notification's params as JSON values (pygls gives namedtuples for
    methods it has no type for)."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def notifications(client: LeirClient, method: str) -> list:
    return [plain(params) for m, params in client.leir_notifications if m == method]


# ------------------------------------------------------------ errors


async def test_an_unknown_command_is_an_error_naming_it(leir_lsp: LeirClient):
    with pytest.raises(JsonRpcException) as raised:
        await command(leir_lsp, "leir.noSuchCommand", {})

    assert "leir.noSuchCommand" in str(raised.value)


@pytest.mark.parametrize("arguments, message", [
    (["file:///a.leir"], "takes one JSON object argument"),
    ([{"uri": "file:///a.leir"}, {}], "takes one JSON object argument"),
    ([{}], "missing argument 'uri'"),
    ([{"uri": 7}], "argument 'uri' must be a non-empty string"),
    ([{"uri": "file:///not-open.leir"}], "is not an open LEIR or Python document"),
])
async def test_malformed_arguments_are_one_line_errors(leir_lsp: LeirClient, arguments, message):
    with pytest.raises(JsonRpcException) as raised:
        await command(leir_lsp, "leir.measure", *arguments)

    assert message in str(raised.value)
    assert "Traceback" not in str(raised.value)


@pytest.mark.parametrize("options, message", [
    ({"steps": "three"}, "'steps' must be a whole number from 1 to 50"),
    ({"steps": 0}, "'steps' must be a whole number from 1 to 50"),
    ({"budget": 3}, "'budget' must be a whole number from 4 to 10000"),
    ({"strategy": "random"}, "'strategy' must be one of plans, greedy, beam, mcts"),
    ({"apply": "yes"}, "'apply' must be true or false"),
    ({"kernel": "main"}, "a .leir file is one program"),
])
async def test_bad_optimize_options_are_refused_before_any_work(leir_lsp: LeirClient, options, message):
    uri = await leir_lsp.open("bad-options.leir", TRANSPOSE)

    with pytest.raises(JsonRpcException) as raised:
        await command(leir_lsp, "leir.optimize", {"uri": uri, **options})

    assert message in str(raised.value)


async def test_a_document_with_errors_is_not_measured(leir_lsp: LeirClient):
    uri = await leir_lsp.open("broken.leir", "L^{4}_{i} [ Y_{i} = X_{i} $ 1; ];\n")

    with pytest.raises(JsonRpcException) as raised:
        await command(leir_lsp, "leir.measure", {"uri": uri})

    assert "the document has errors" in str(raised.value)


# ------------------------------------------------------------ measure, convert, trajectory, restart


async def test_measure_returns_the_leir_measure_json_and_reports_status(leir_lsp: LeirClient, own_cache):
    uri = await leir_lsp.open("measure.leir", TRANSPOSE)

    m = await command(leir_lsp, "leir.measure", {"uri": uri, "repeat": 1})
    again = await command(leir_lsp, "leir.measure", {"uri": uri, "repeat": 1})

    assert m["median_ms"] > 0 and m["verified"] is True and m["error"] is None
    assert m["runs"] == 1 and m["target"] == "llvm" and m["cached"] is False
    assert set(m) >= {"median_ms", "min_ms", "max_ms", "runs", "target", "device", "verified", "cached", "vendor_ms"}
    assert again["cached"] is True and again["median_ms"] == m["median_ms"]
    assert stored_measurements(own_cache) == 1
    status = notifications(leir_lsp, "leir/status")
    assert [s["measuring"] for s in status] == [True, False, True, False]
    assert status[1]["lastLatencyMs"] == m["median_ms"] and status[1]["uri"] == uri
    assert status[1]["device"] == m["device"]


async def test_convert_leir_to_tvmscript_and_back(leir_lsp: LeirClient):
    uri = await leir_lsp.open("transpose.leir", TRANSPOSE)

    python = await command(leir_lsp, "leir.convert", {"uri": uri})
    py_uri = await leir_lsp.open("transpose_kernel.py", python["text"])
    leir = await command(leir_lsp, "leir.convert", {"uri": py_uri})

    assert (python["language"], python["title"]) == ("python", "transpose.py")
    assert "def transpose(" in python["text"] and "@T.prim_func" in python["text"]
    assert (leir["language"], leir["title"]) == ("leir", "transpose.leir")
    assert "Y_{i,j} = X_{j,i};" in leir["text"]
    assert "L^{32}_{i}" in leir["text"] and "L^{16}_{j}" in leir["text"]


async def test_show_trajectory_of_an_untouched_document_is_empty(leir_lsp: LeirClient):
    uri = await leir_lsp.open("fresh.leir", TRANSPOSE)

    shown = await command(leir_lsp, "leir.showTrajectory", {"uri": uri})

    assert shown == {"uri": uri, "kernel": None, "steps": []}


async def test_restart_stops_the_workers_and_the_next_job_starts_new_ones(leir_lsp: LeirClient):
    uri = await leir_lsp.open("restart.leir", TRANSPOSE)
    await command(leir_lsp, "leir.convert", {"uri": uri})

    assert await command(leir_lsp, "leir.restart") == {"restarted": True}
    converted = await command(leir_lsp, "leir.convert", {"uri": uri})

    assert converted["language"] == "python"


# ------------------------------------------------------------ optimize


async def test_optimize_reports_progress_and_streams_the_trajectory(leir_lsp: LeirClient):
    uri = await leir_lsp.open("optimize.leir", TRANSPOSE)

    result = await command(leir_lsp, "leir.optimize", {"uri": uri, "steps": 1, "budget": 4})

    [token] = leir_lsp.progress_reports
    reports = leir_lsp.progress_reports[token]
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable is True
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert any(isinstance(r, types.WorkDoneProgressReport) and "measured" in (r.message or "") for r in reports)
    trajectory = notifications(leir_lsp, "leir/trajectory")
    assert trajectory[-1]["done"] is True and trajectory[-1]["final"] == result["final"]
    # One notification per kept step before the last, each with the steps so far.
    assert [len(t["steps"]) for t in trajectory[:-1]] == list(range(1, len(result["steps"]) + 1))
    assert trajectory[-1]["steps"] == result["steps"]
    assert result["start_ms"] > 0 and result["applied"] is False
    assert 1 <= result["measurements"] <= 4
    for step in result["steps"]:
        assert step["speedup"] == pytest.approx(step["latency_before_ms"] / step["latency_after_ms"], rel=1e-2)
        assert step["reasoning"]


async def test_cancelling_optimize_from_the_progress_stops_its_measurements(leir_lsp: LeirClient, own_cache):
    uri = await leir_lsp.open("cancel.leir", MATMUL)
    running = asyncio.ensure_future(command(leir_lsp, "leir.optimize", {"uri": uri, "steps": 3, "budget": 200}))

    # Cancel once the search has asked for its first measurements.
    async def measuring():
        while not any(s["measuring"] for s in notifications(leir_lsp, "leir/status")):
            await leir_lsp.wait_for_notification("leir/status")
    await asyncio.wait_for(measuring(), 300)
    [token] = leir_lsp.progress_reports
    leir_lsp.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
    result = await asyncio.wait_for(running, 300)

    assert result["cancelled"] is True and result["applied"] is False
    assert isinstance(leir_lsp.progress_reports[token][-1], types.WorkDoneProgressEnd)
    # Nothing more is measured for it: the cache stays as it was when the
    # command returned, while a later command runs to completion.
    stored = stored_measurements(own_cache)
    await command(leir_lsp, "leir.convert", {"uri": uri})
    assert stored_measurements(own_cache) == stored
    assert notifications(leir_lsp, "leir/status")[-1]["measuring"] is False


async def test_cancel_request_ends_optimize_and_its_measurements(leir_lsp: LeirClient, own_cache):
    uri = await leir_lsp.open("cancel-request.leir", MATMUL)
    params = types.ExecuteCommandParams(command="leir.optimize", arguments=[{"uri": uri, "steps": 3, "budget": 200}])
    running = asyncio.ensure_future(
        leir_lsp.protocol.send_request_async(types.WORKSPACE_EXECUTE_COMMAND, params, msg_id="optimize-1"))

    async def measuring():
        while not any(s["measuring"] for s in notifications(leir_lsp, "leir/status")):
            await leir_lsp.wait_for_notification("leir/status")
    await asyncio.wait_for(measuring(), 300)
    leir_lsp.cancel_request(types.CancelParams(id="optimize-1"))

    with pytest.raises(JsonRpcException) as raised:
        await asyncio.wait_for(running, 300)
    assert "cancel" in str(raised.value).lower()
    # The search ends too: its progress is closed, and the trajectory says done.
    async def ended():
        while not notifications(leir_lsp, "leir/trajectory") or not notifications(leir_lsp, "leir/trajectory")[-1]["done"]:
            await leir_lsp.wait_for_notification("leir/trajectory")
    await asyncio.wait_for(ended(), 300)
    stored = stored_measurements(own_cache)
    await command(leir_lsp, "leir.convert", {"uri": uri})
    assert stored_measurements(own_cache) == stored


async def test_optimize_with_apply_edits_the_unchanged_document_and_records_its_steps(leir_lsp: LeirClient):
    # The editor side of workspace/applyEdit: apply the edit as a change, as an editor does.
    applied_edits = []

    @leir_lsp.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(ls, params: types.ApplyWorkspaceEditParams):
        [change] = params.edit.document_changes
        [edit] = change.edits
        applied_edits.append(change.text_document.version)
        ls.edit(change.text_document.uri, edit.range, edit.new_text)
        return types.ApplyWorkspaceEditResult(applied=True)

    # k innermost reads W with stride 48: swapping j and k makes every access
    # contiguous, a large gain the search keeps.
    uri = await leir_lsp.open("apply.leir", MATMUL, version=4)
    result = await command(leir_lsp, "leir.optimize", {"uri": uri, "steps": 1, "budget": 12, "apply": True})
    shown = await command(leir_lsp, "leir.showTrajectory", {"uri": uri})

    assert result["steps"], result["stop_reason"]
    assert result["applied"] is True and applied_edits == [4]
    assert [(s["id"], s["args"]) for s in shown["steps"]] == [(s["id"], s["args"]) for s in result["steps"]]
    assert shown["steps"][0]["latency_after_ms"] == result["steps"][0]["latency_after_ms"]

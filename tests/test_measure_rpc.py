"""Measuring through a TVM RPC tracker: a tracker and two servers on
127.0.0.1 (random free ports), started for this module and stopped after."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from leir.measure import RPC, MeasurementEngine, RPCError
from leir.measure import rpc as R

pytestmark = pytest.mark.slow

KEY = "leir-test"
LOOPBACK = "127.0.0.1"
#: Starting a tracker and two servers imports TVM three times at once.
START_LIMIT_S = 90.0

MATMUL = """
L^{32}_{i}
  L^{24}_{j}
    L^{16}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def start(args: list[str]) -> subprocess.Popen:
    # A session of its own: TVM's tracker and servers run their work in a
    # child process that a plain terminate() would leave behind.
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            # The group may outlive its leader: make sure it is gone.
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(condition, limit_s: float, what: str):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except (RPCError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"{what} not ready after {limit_s:g} s")


@pytest.fixture(scope="module")
def tracker():
    if importlib.util.find_spec("tornado") is None:
        pytest.fail("TVM's RPC tracker needs tornado, a test dependency: pip install -e '.[test]'")
    port = free_port()
    processes = [start(["tvm.exec.rpc_tracker", "--host", LOOPBACK, "--port", str(port), "--port-end",
                        str(port + 1), "--silent"])]
    try:
        # Servers retry a tracker that is not up every 5 s: start them after it.
        wait_until(lambda: R.tracker_summary(LOOPBACK, port, timeout=1.0) is not None, START_LIMIT_S, "the tracker")
        for _ in range(2):
            server_port = free_port()
            processes.append(start(["tvm.exec.rpc_server", "--tracker", f"{LOOPBACK}:{port}", "--key", KEY,
                                    "--host", LOOPBACK, "--port", str(server_port), "--port-end",
                                    str(server_port + 20), "--silent"]))
        wait_until(lambda: len(R.servers_for(R.tracker_summary(LOOPBACK, port), KEY)) == 2, START_LIMIT_S,
                   "two RPC servers")
        yield port
    finally:
        for p in reversed(processes):
            stop(p)


def test_tracker_protocol_constants_match_tvm():
    from tvm.rpc import base

    assert (R.RPC_TRACKER_MAGIC, R.TRACKER_SUCCESS, R.TRACKER_REQUEST, R.TRACKER_SUMMARY) == (
        base.RPC_TRACKER_MAGIC, base.TrackerCode.SUCCESS, base.TrackerCode.REQUEST, base.TrackerCode.SUMMARY)


def test_rpc_parse_reads_host_port_key():
    assert RPC.parse("127.0.0.1:9190:rtx") == RPC("127.0.0.1", 9190, "rtx")
    for bad in ("127.0.0.1:9190", "host:port:key", ":9190:key", "h:0:k"):
        with pytest.raises(RPCError, match="HOST:PORT:KEY"):
            RPC.parse(bad)


def test_an_engine_refuses_a_key_without_servers(tracker):
    with pytest.raises(RPCError, match="no RPC server is registered under key 'nobody'"):
        MeasurementEngine(RPC(LOOPBACK, tracker, "nobody"), cache=False)


def test_an_engine_refuses_an_unreachable_tracker():
    with pytest.raises(RPCError, match="cannot reach the RPC tracker"):
        MeasurementEngine(RPC(LOOPBACK, free_port(), KEY), cache=False)


def test_measures_through_the_tracker_on_both_servers(tracker, tmp_path):
    rpc = RPC(LOOPBACK, tracker, KEY)
    programs = [MATMUL, MATMUL.replace("{32}", "{40}"), MATMUL.replace("{24}", "{28}")]
    with MeasurementEngine(rpc, cache=tmp_path, repeat=3, min_run_ms=1.0, timeout_s=60) as engine:
        assert engine.workers == 2  # one per server registered under the key
        results = engine.measure_many(programs)
    for m in results:
        assert m.error is None, m.error
        assert (m.verified, m.target, m.device, m.cached) == (True, "rpc-llvm", f"rpc:{KEY}", False)
        assert m.min_ms <= m.median_ms <= m.max_ms and m.runs == 3
    servers = {note for m in results for note in m.notes if note.startswith("timed on the RPC server at")}
    assert len(servers) == 2, servers  # the tracker hands out its free servers in turn
    with MeasurementEngine(rpc, cache=tmp_path, repeat=3) as engine:
        assert engine.measure(programs[0]).cached


def test_compares_two_programs_on_one_server(tracker, tmp_path):
    with MeasurementEngine(RPC(LOOPBACK, tracker, KEY), cache=tmp_path, repeat=2, min_run_ms=1.0,
                           timeout_s=60) as engine:
        p = engine.compare(MATMUL, MATMUL.replace("{24}", "{20}"), rounds=2).result(timeout=120)
    assert p.ok, p.error
    assert p.before.runs == p.after.runs == 4 and p.before.target == "rpc-llvm"
    [before_server] = [n for n in p.before.notes if n.startswith("timed on the RPC server at")]
    assert before_server in p.after.notes  # both sides on the same device

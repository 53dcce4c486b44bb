"""Measuring on devices pooled behind a TVM RPC tracker.

A team starts a tracker and, on each machine with a device, an RPC server
registered under a key that names the kind of device::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    python -m tvm.exec.rpc_server --tracker TRACKER:9190 --key h100

and measures with ``MeasurementEngine(RPC("TRACKER", 9190, "h100", target="cuda"))``
(``leir measure FILE --rpc TRACKER:9190:h100``). Each job asks the tracker for
a device of that key; the tracker hands out free servers in turn and queues
the request while all are busy, so jobs spread over the free devices and no
device runs two timings at once. The engine runs one worker per server
registered under the key.

Kernels are built here (cross-compiled for ``target``), exported as a shared
library, uploaded and loaded on the server, checked against the NumPy
evaluation computed here, and timed there with ``time_evaluator``.

The tracker's summary is read with its small JSON protocol
(``tracker_summary``), so that the engine can size itself without importing
TVM; ``request_session`` (run in a worker) uses TVM's client.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass

from leir.errors import LeirError
from leir.bridge.targets import TARGETS

#: From ``tvm.rpc.base`` (a test checks they agree).
RPC_TRACKER_MAGIC = 0x2F271
TRACKER_SUCCESS = 0
TRACKER_REQUEST = 4
TRACKER_SUMMARY = 6



class RPCError(LeirError):
    """The tracker cannot be reached or has no device for the key."""


@dataclass(frozen=True)
class RPC:
    """Devices registered under ``key`` at the tracker ``host:port``.

    ``target`` is what they are: "llvm" (CPUs; kernels are built for
    ``mcpu``, default this machine's CPU) or "cuda" (NVIDIA GPUs; built for
    ``arch``, default the first server's GPU)."""

    host: str
    port: int
    key: str
    target: str = "llvm"
    mcpu: str | None = None
    arch: str | None = None

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise RPCError(f"RPC target {self.target!r}: expected one of {', '.join(TARGETS)}")

    @classmethod
    def parse(cls, text: str, target: str = "llvm") -> "RPC":
        """``HOST:PORT:KEY`` (the command line's ``--rpc``)."""
        host, sep1, rest = text.partition(":")
        port, sep2, key = rest.partition(":")
        if not (sep1 and sep2 and host and key and port.isdigit() and 0 < int(port) < 65536):
            raise RPCError(f"--rpc {text}: expected HOST:PORT:KEY, e.g. 127.0.0.1:9190:rtx4090")
        return cls(host, int(port), key, target)

    @property
    def device(self) -> str:
        return f"rpc:{self.key}"

    @property
    def target_name(self) -> str:
        return f"rpc-{self.target}"

    def describe(self) -> str:
        return f"{self.key} at {self.host}:{self.port}"


# ------------------------------------------------------------ tracker protocol (no TVM)


def tracker_summary(host: str, port: int, timeout: float = 5.0) -> dict:
    """The tracker's summary: ``{"queue_info": {key: {"free", "pending"}},
    "server_info": [{"key": "server:KEY", "addr": [host, port]}...]}``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack("<i", RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", _recv_exactly(sock, 4))[0]
            if magic != RPC_TRACKER_MAGIC:
                raise RPCError(f"{host}:{port} is not a TVM RPC tracker")
            _send_json(sock, [TRACKER_SUMMARY])
            reply = _recv_json(sock)
    except OSError as e:
        raise RPCError(f"cannot reach the RPC tracker at {host}:{port} ({e.strerror or e})") from None
    if not (isinstance(reply, list) and reply and reply[0] == TRACKER_SUCCESS):
        raise RPCError(f"the RPC tracker at {host}:{port} answered {reply!r} to a summary request")
    return reply[1]


def servers_for(summary: dict, key: str) -> list[tuple[str, int]]:
    """Addresses of the servers registered under ``key``."""
    return [tuple(s["addr"]) for s in summary.get("server_info", []) if s.get("key") == f"server:{key}"]


def _send_json(sock: socket.socket, data) -> None:
    payload = json.dumps(data).encode("utf-8")
    sock.sendall(struct.pack("<i", len(payload)) + payload)


def _recv_json(sock: socket.socket):
    size = struct.unpack("<i", _recv_exactly(sock, 4))[0]
    return json.loads(_recv_exactly(sock, size).decode("utf-8"))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("connection closed by the tracker")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------ sessions (in a worker, with TVM)


def request_session(rpc: RPC, session_timeout: float, priority: int = 1):
    """A session on a free device of ``rpc.key`` (waits while all are busy),
    and the server's address. As TVM's ``TrackerSession.request``, which
    does not say which server it chose."""
    import tvm.rpc

    with socket.create_connection((rpc.host, rpc.port)) as sock:
        sock.sendall(struct.pack("<i", RPC_TRACKER_MAGIC))
        if struct.unpack("<i", _recv_exactly(sock, 4))[0] != RPC_TRACKER_MAGIC:
            raise RPCError(f"{rpc.host}:{rpc.port} is not a TVM RPC tracker")
        _send_json(sock, [TRACKER_REQUEST, rpc.key, "", priority])
        reply = _recv_json(sock)
    if not (isinstance(reply, list) and reply and reply[0] == TRACKER_SUCCESS):
        raise RPCError(f"the RPC tracker refused a device of key {rpc.key}: {reply!r}")
    url, port, matchkey = reply[1]
    session = tvm.rpc.connect(url, port, matchkey, session_timeout=int(max(1, session_timeout)))
    return session, f"{url}:{port}"

"""A bare JSON-RPC peer for transport-level tests: it frames whatever bytes
a test gives it (invalid UTF-8, malformed params), which a real client
library refuses to send, and reads the server's frames back."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from lsp_fixtures import SERVER_COMMAND, WAIT_S


class RawLsp:
    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.received: list[dict] = []
        self._next_id = 0
        #: Server -> client requests answered with an error instead of null.
        self.fail_requests: set[str] = set()

    @classmethod
    async def start(cls, *args: str, env: dict | None = None, capture_stderr: bool = False) -> "RawLsp":
        """Start the server (with extra command-line ``args`` and ``env``);
        with ``capture_stderr``, what it writes there is kept in ``stderr``."""
        process = await asyncio.create_subprocess_exec(
            *SERVER_COMMAND, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE if capture_stderr else asyncio.subprocess.DEVNULL, env=env)
        server = cls(process)
        if capture_stderr:
            server._stderr_task = asyncio.ensure_future(server._collect_stderr())
        return server

    stderr = b""
    _stderr_task = None

    async def _collect_stderr(self) -> None:
        while chunk := await self.process.stderr.read(65536):
            self.stderr += chunk

    async def exit_status(self, timeout: float = WAIT_S) -> tuple[int, str]:
        """Wait for the server to exit: its status and everything it wrote to
        stderr (when captured)."""
        code = await asyncio.wait_for(self.process.wait(), timeout)
        if self._stderr_task is not None:
            await asyncio.wait_for(self._stderr_task, timeout)
        return code, self.stderr.decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        """Raw bytes, framed or not."""
        self.process.stdin.write(data)

    def send_bytes(self, body: bytes) -> None:
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, message: dict) -> None:
        self.send_bytes(json.dumps(message).encode("utf-8"))

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def request(self, method: str, params: Any = None, timeout: float = WAIT_S) -> dict:
        """Send a request and return the whole response (``result`` or ``error``)."""
        msg_id = self.new_id()
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return await self.response(msg_id, timeout)

    async def response(self, msg_id, timeout: float = WAIT_S) -> dict:
        return await self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    async def wait_for(self, matches, timeout: float = WAIT_S) -> dict:
        async def wait():
            seen = 0
            while True:
                for m in self.received[seen:]:
                    if matches(m):
                        return m
                seen = len(self.received)
                await self._read_one()

        return await asyncio.wait_for(wait(), timeout)

    async def _read_one(self) -> None:
        length = None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                raise EOFError(f"the server closed its output (exit code {await self.process.wait()})")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length is not None:
                break
        message = json.loads(await self.process.stdout.readexactly(length))
        if "method" in message and "id" in message:  # a request to the client: answer it
            if message["method"] in self.fail_requests:
                self.send({"jsonrpc": "2.0", "id": message["id"],
                           "error": {"code": -32603, "message": "the client failed"}})
            else:
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        self.received.append(message)

    async def initialize(self, capabilities: dict | None = None) -> dict:
        if capabilities is None:  # what editors announce
            capabilities = {"textDocument": {"documentSymbol": {"hierarchicalDocumentSymbolSupport": True}}}
        response = await self.request("initialize", {"processId": None, "rootUri": None,
                                                     "capabilities": capabilities})
        self.notify("initialized", {})
        return response

    async def close(self) -> int:
        if self.process.returncode is None:
            try:
                await self.request("shutdown", timeout=30)
                self.notify("exit", None)
                await asyncio.wait_for(self.process.wait(), 30)
            except (asyncio.TimeoutError, EOFError, ConnectionError):
                self.process.kill()
                await self.process.wait()
        return self.process.returncode

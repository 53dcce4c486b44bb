"""Framing and JSON-RPC through a raw client (issue 12): every malformed
message whose id can be read is answered and the server goes on; an input
that cannot be read as LSP frames any more ends the server with status 2
and one clear line on stderr (the editor restarts it); the lifecycle is
LSP's (-32002 before initialize, -32600 after shutdown, exit 0 or 1); a
client's mistake is never an editor pop-up, and a refusal is one log line,
not a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import pytest

from lsp_raw import RawLsp

#: The server gives up on a frame after this many seconds without a byte
#: (the default is 30): a bound for the tests below, not a speed assertion.
STALL_S = "3"
ENV = {**os.environ, "LEIR_LSP_FRAME_STALL_S": STALL_S}
#: How long a server that must exit may take (it exits within about
#: STALL_S seconds; this is a bound on a hang, with room for a loaded machine).
EXIT_S = 60.0

FOLD = "textDocument/foldingRange"
NOT_OPEN = {"textDocument": {"uri": "file:///not-open.leir"}}


def frame(body: bytes, header: bytes | None = None) -> bytes:
    return (header if header is not None else b"Content-Length: %d\r\n\r\n" % len(body)) + body


def request(msg_id, method: str = FOLD, params=None, **extra) -> dict:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": NOT_OPEN if params is None else params}
    message.update(extra)
    return message


def body(message) -> bytes:
    return json.dumps(message).encode("utf-8")


async def start(*args: str) -> RawLsp:
    return await RawLsp.start(*args, env=ENV, capture_stderr=True)


@contextlib.asynccontextmanager
async def exiting(*args: str):
    """A server expected to exit by itself: killed if it has not by the end."""
    server = await start(*args)
    try:
        yield server
    finally:
        if server.process.returncode is None:
            server.process.kill()
            await server.process.wait()


def pop_ups(server: RawLsp) -> list[dict]:
    return [m for m in server.received if m.get("method") == "window/showMessage"]


def errors_for(server: RawLsp, msg_id) -> list[dict]:
    return [m for m in server.received if "method" not in m and m.get("id") == msg_id]


# ------------------------------------------------------------- recoverable


def _recoverable_cases():
    """(name, bytes to send, {id: expected error code} answered, with None
    for a null id)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    return [
        ("not JSON", frame(b'{"jsonrpc": "2.0", "id": 7, "method": '), {None: -32700}),
        ("not UTF-8, id readable", frame(b'{"jsonrpc": "2.0", "id": "u8", "method": "x", "params": "\xff"}'),
         {"u8": -32700}),
        ("an empty body", frame(b""), {None: -32700}),
        ("nested too deeply", frame(deep), {None: -32700}),
        ("a 5000-digit integer", frame(b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b"}"), {None: -32700}),
        ("a batch", frame(body([request("b1"), request("b2"), {"jsonrpc": "2.0", "method": "initialized"}])),
         {"b1": -32600, "b2": -32600}),
        ("an empty batch", frame(b"[]"), {None: -32600}),
        ("a number", frame(b"5"), {None: -32600}),
        ("a string", frame(b'"hello"'), {None: -32600}),
        ("null", frame(b"null"), {None: -32600}),
        ("no jsonrpc", frame(body({"id": "nj", "method": FOLD, "params": NOT_OPEN})), {"nj": -32600}),
        ("jsonrpc 1.0", frame(body(request("j1", jsonrpc="1.0"))), {"j1": -32600}),
        ("no method", frame(body({"jsonrpc": "2.0", "id": "nm", "params": {}})), {"nm": -32600}),
        ("a method that is not a string", frame(body(request("ms", method=5))), {"ms": -32600}),
        ("an unknown method", frame(body(request("um", method="leir/noSuchMethod"))), {"um": -32601}),
        ("a float id", frame(body(request(1.5))), {None: -32600}),
        ("a null id", frame(body(request(None))), {None: -32600}),
        ("an object id", frame(body(request({"a": 1}))), {None: -32600}),
        ("a boolean id", frame(body(request(True))), {None: -32600}),
        ("a notification method with an id",
         frame(body(request("no", method="textDocument/didClose", params={"textDocument": {"uri": "file:///x"}}))),
         {"no": -32600}),
        ("a second initialize",
         frame(body(request("in", method="initialize", params={"processId": None, "rootUri": None,
                                                               "capabilities": {}}))), {"in": -32600}),
        ("invalid params", frame(body(request("ip", params={"textDocument": 5}))), {"ip": -32602}),
        ("an unknown notification", frame(body({"jsonrpc": "2.0", "method": "leir/nothing", "params": [1]})), {}),
        ("a request method without an id",
         frame(body({"jsonrpc": "2.0", "method": "textDocument/hover", "params": {}})), {}),
        ("a change to a document that is not open",
         frame(body({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
             "textDocument": {"uri": "file:///nope.leir", "version": 2}, "contentChanges": [{"text": "x"}]}})), {}),
        ("a cancellation of an id that is a list",
         frame(body({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": [1]}})), {}),
        ("a progress cancellation of a token that is an object",
         frame(body({"jsonrpc": "2.0", "method": "window/workDoneProgress/cancel", "params": {"token": {}}})), {}),
        ("a response to no request", frame(body({"jsonrpc": "2.0", "id": 999_999, "result": [1, 2]})), {}),
        ("a malformed error response", frame(body({"jsonrpc": "2.0", "id": 999_998, "error": "bad"})), {}),
        ("a lowercase header", frame(body(request("lc")), b"content-length: %d\r\n\r\n" % len(body(request("lc")))),
         {}),
        ("other headers and spaces",
         frame(body(request("oh")), b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n"
                                     b"Content-Length:    %d   \r\nX-Other: 1\r\n\r\n" % len(body(request("oh")))),
         {}),
        ("LF-only header lines", frame(body(request("lf")), b"Content-Length: %d\n\n" % len(body(request("lf")))), {}),
        ("blank lines between frames", b"\r\n\r\n" + frame(body(request("bl"))), {}),
    ]


async def test_after_each_malformed_message_the_server_answers_and_goes_on():
    server = await start()
    try:
        await server.initialize()
        problems = []
        for name, data, expected in _recoverable_cases():
            before = len(server.received)
            server.write(data)
            answer = await server.request(FOLD, NOT_OPEN)  # answered, in order, after the malformed one
            if answer.get("result", "missing") is not None:
                problems.append(f"{name}: the next request got {answer}")
            seen = server.received[before:]
            for msg_id, code in expected.items():
                got = [m for m in seen if "method" not in m and m.get("id") == msg_id]
                if [m.get("error", {}).get("code") for m in got] != [code]:
                    problems.append(f"{name}: expected one error {code} for id {msg_id!r}, got {got}")
        # The well-framed requests among them were served like any other.
        for msg_id in ("lc", "oh", "lf", "bl"):
            got = errors_for(server, msg_id)
            if len(got) != 1 or got[0].get("result", "missing") is not None:
                problems.append(f"request {msg_id}: expected one null result, got {got}")
        assert problems == []
        assert pop_ups(server) == []  # a client's mistake is a log line, not a pop-up
    finally:
        assert await server.close() == 0
    _, stderr = await server.exit_status()
    assert "Traceback" not in stderr
    assert "ERROR" not in stderr


# ----------------------------------------------------------- unrecoverable

VALID = body(request(1))

UNRECOVERABLE = [
    # (name, bytes, whether to close stdin after them, what the stderr line says)
    ("a Content-Length above 64 MiB", b"Content-Length: 99999999999999\r\n\r\n{}", False, "more than the"),
    ("a Content-Length of 64 MiB + 1", b"Content-Length: %d\r\n\r\n" % (64 * 1024 * 1024 + 1), False,
     "more than the"),
    ("no Content-Length", b"Content-Type: application/json\r\n\r\n" + VALID, False, "without a Content-Length"),
    ("no headers at all", VALID, False, "expected a header line"),
    ("a negative Content-Length", b"Content-Length: -5\r\n\r\n" + VALID, False, "not a number of bytes"),
    ("a Content-Length that is not a number", b"Content-Length: ten\r\n\r\n" + VALID, False,
     "not a number of bytes"),
    ("two different Content-Lengths", b"Content-Length: 10\r\nContent-Length: 12\r\n\r\n" + VALID, False,
     "two different"),
    ("a header line of 20 KB", b"X-Junk: " + b"x" * 20_000, False, "longer than"),
    ("a Content-Length shorter than the body", b"Content-Length: 10\r\n\r\n" + VALID, False,
     "expected a header line"),
    ("a Content-Length longer than the body, client waiting", b"Content-Length: 500\r\n\r\n" + VALID, False,
     "larger than the body sent"),
    ("headers that never end", b"Content-Length: 10\r\n", False, "stopped inside a frame's headers"),
    ("the input ending inside a body", b"Content-Length: 500\r\n\r\n" + VALID, True, f"ended {len(VALID)} bytes into"),
    ("the input ending inside the headers", b"Content-Length: 5", True, "ended inside a frame's headers"),
]


async def _unrecoverable(name: str, data: bytes, close: bool, says: str) -> str | None:
    async with exiting() as server:
        await server.initialize()
        server.write(data)
        if close:
            server.process.stdin.close()
        try:
            code, stderr = await server.exit_status(EXIT_S)
        except asyncio.TimeoutError:
            return f"{name}: still running after {EXIT_S} s"
        errors = [line for line in stderr.splitlines() if " ERROR " in line]
        if code != 2 or len(errors) != 1 or says not in errors[0] or "Traceback" in stderr:
            return f"{name}: exit status {code}, stderr {stderr!r}"
        if pop_ups(server):
            return f"{name}: pop-ups {pop_ups(server)}"
        return None


async def test_an_input_that_cannot_be_read_ends_the_server_with_one_clear_line():
    # Each in a server of its own, all at once (they are independent).
    results = await asyncio.gather(*(_unrecoverable(*case) for case in UNRECOVERABLE))
    assert [r for r in results if r is not None] == []


async def test_a_content_length_shorter_than_the_body_is_answered_before_the_exit():
    async with exiting() as server:
        await server.initialize()
        server.write(b"Content-Length: 10\r\n\r\n" + VALID)
        # The 10 bytes it said were the body are not JSON: answered, with a null id.
        answer = await server.wait_for(lambda m: "method" not in m and m.get("id") is None)
        assert answer["error"]["code"] == -32700
        code, stderr = await server.exit_status(EXIT_S)
        assert code == 2


# --------------------------------------------------------------- lifecycle


async def test_before_initialize_requests_get_server_not_initialized_and_notifications_are_dropped():
    server = await start()
    try:
        uri = "file:///early.leir"
        server.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "leir", "version": 1, "text": "L^{4}_{i} [ Y_{i} = X_{i}; ];\n"}})
        early = await server.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert early["error"]["code"] == -32002

        await server.initialize()
        # The didOpen before initialize was dropped: the document is not open.
        answer = await server.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert answer["result"] is None
    finally:
        assert await server.close() == 0


async def test_after_shutdown_requests_get_invalid_request_and_exit_is_0():
    async with exiting() as server:
        await server.initialize()
        assert (await server.request("shutdown"))["result"] is None
        late = await server.request(FOLD, NOT_OPEN)
        assert late["error"]["code"] == -32600
        again = await server.request("shutdown")
        assert again["error"]["code"] == -32600
        server.notify("exit", None)
        code, stderr = await server.exit_status(EXIT_S)
        assert code == 0
        assert "Traceback" not in stderr


async def test_exit_without_shutdown_is_status_1():
    async with exiting() as server:
        await server.initialize()
        server.notify("exit", None)
        code, _ = await server.exit_status(EXIT_S)
        assert code == 1


async def test_exit_before_initialize_is_status_1_and_closing_the_input_without_exit_too():
    first = await start()
    first.notify("exit", None)
    assert (await first.exit_status(EXIT_S))[0] == 1

    second = await start()
    await second.initialize()
    second.process.stdin.close()
    code, stderr = await second.exit_status(EXIT_S)
    assert code == 1
    assert "Traceback" not in stderr


# -------------------------------------------------------------------- logs


@pytest.mark.parametrize("command, arguments, says", [
    ("leir.noSuchCommand", [], "is not defined"),  # pygls's own refusal (InvalidParams)
    ("leir.measure", [{"uri": "file:///never-opened.leir"}], "is not an open LEIR or Python document"),
])
async def test_a_refused_request_is_one_log_line_not_a_traceback(tmp_path, command, arguments, says):
    log = tmp_path / "server.log"
    server = await start("--log-file", str(log))
    try:
        await server.initialize()
        answer = await server.request("workspace/executeCommand", {"command": command, "arguments": arguments})
        assert says in answer["error"]["message"]
    finally:
        assert await server.close() == 0
    text = log.read_text()
    [line] = [line for line in text.splitlines() if says in line]
    assert " INFO " in line and "refused" in line
    assert "Traceback" not in text and " ERROR " not in text
    assert pop_ups(server) == []


async def test_a_malformed_message_is_one_warning_line_in_the_log(tmp_path):
    log = tmp_path / "server.log"
    server = await start("--log-file", str(log))
    try:
        await server.initialize()
        server.send_bytes(b"[1, 2")
        server.send(request("ip", params={"textDocument": 5}))
        assert (await server.response("ip"))["error"]["code"] == -32602
    finally:
        assert await server.close() == 0
    text = log.read_text()
    warnings = [line for line in text.splitlines() if " WARNING " in line and "ignored" in line]
    assert len(warnings) == 2, warnings
    assert "Traceback" not in text and " ERROR " not in text

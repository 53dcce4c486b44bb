"""Random malformed frames and messages (issue 12), to one server process:
every request whose id can be read gets exactly one response, no answer is
an internal error and nothing pops up, or, after a frame that breaks the
stream, the server exits with status 2 and one ERROR line (and is started
again for the next example). Bounded: a few dozen examples, a few seconds
of waiting at most per broken frame. ``bench/fuzz_protocol.py`` is the long
run."""

from __future__ import annotations

import asyncio
import itertools
import json
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from lsp_raw import RawLsp

ENV = {**os.environ, "LEIR_LSP_FRAME_STALL_S": "3"}
#: A bound on a hang (the server answers in well under a second; a broken
#: frame ends it within about 3 s), not a speed assertion.
ANSWER_S = 60.0

METHODS = ["textDocument/hover", "textDocument/documentSymbol", "textDocument/formatting",
           "textDocument/semanticTokens/full", "textDocument/foldingRange", "textDocument/codeAction",
           "textDocument/codeLens", "codeAction/resolve", "workspace/executeCommand", "initialize",
           "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "initialized",
           "$/cancelRequest", "$/setTrace", "workspace/didChangeConfiguration", "leir/unknown", ""]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)
ids = st.integers(0, 2**31 - 1) | st.text(max_size=8) | st.floats(allow_nan=False) | st.none() | st.booleans() \
    | st.lists(st.integers(), max_size=2)
methods = (st.sampled_from(METHODS) | st.text(max_size=12) | json_values).filter(lambda m: m not in ("exit", "shutdown"))


@st.composite
def messages(draw) -> dict:
    message = {}
    if draw(st.integers(0, 9)):
        message["jsonrpc"] = "2.0"
    elif draw(st.booleans()):
        message["jsonrpc"] = draw(json_values)
    if draw(st.integers(0, 3)):
        message["id"] = draw(ids)
    if draw(st.integers(0, 5)):
        message["method"] = draw(methods)
    if draw(st.booleans()):
        message["params"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return message


BROKEN_HEADERS = [b"", b"Content-Length: -1\r\n\r\n", b"Content-Length: 1e3\r\n\r\n", b"content-length 5\r\n\r\n",
                  b"Content-Length: 99999999999\r\n\r\n", b"X: 1\r\n\r\n", b"{\r\n\r\n",
                  b"Content-Length: 3\r\nContent-Length: 4\r\n\r\n"]


@st.composite
def items(draw) -> tuple[bytes, dict | None, bool]:
    """(bytes to send, the message when it is a well-framed JSON object,
    whether the framing is broken)."""
    kind = draw(st.sampled_from(["message"] * 6 + ["value", "mangled", "broken"]))
    if kind == "message":
        message = draw(messages())
        data = json.dumps(message).encode("utf-8")
        return b"Content-Length: %d\r\n\r\n" % len(data) + data, message, False
    if kind == "value":
        data = json.dumps(draw(json_values)).encode("utf-8")
        return b"Content-Length: %d\r\n\r\n" % len(data) + data, None, False
    if kind == "mangled":  # cut short, or with bytes that are not UTF-8
        data = json.dumps(draw(messages())).encode("utf-8")
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + draw(st.binary(max_size=4)) + data[cut:][:draw(st.integers(0, len(data)))]
        return b"Content-Length: %d\r\n\r\n" % len(data) + data, None, False
    header = draw(st.sampled_from(BROKEN_HEADERS) | st.binary(min_size=1, max_size=12).map(lambda b: b + b"\r\n\r\n"))
    data = json.dumps(draw(messages())).encode("utf-8")
    return header + data, None, True


class Fuzzer:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server: RawLsp | None = None
        self.unique = itertools.count(2**40)
        self.restarts = 0

    async def _start(self) -> RawLsp:
        server = await RawLsp.start(env=ENV, capture_stderr=True)
        await server.initialize()
        return server

    def _readable(self, message: dict) -> bool:
        msg_id = message.get("id")
        return isinstance(msg_id, str) or isinstance(msg_id, int) and not isinstance(msg_id, bool)

    async def run(self, example: list[tuple[bytes, dict | None, bool]]) -> None:
        if self.server is None or self.server.process.returncode is not None:
            self.server = await self._start()
        server = self.server
        expected = []
        for data, message, broken in example:
            if message is not None and self._readable(message):
                # A unique id of the same type, so that answers can be counted.
                message["id"] = next(self.unique) if isinstance(message["id"], int) else f"{message['id']}#{next(self.unique)}"
                data = json.dumps(message).encode("utf-8")
                data = b"Content-Length: %d\r\n\r\n" % len(data) + data
                if "method" in message:
                    expected.append(message["id"])
            server.write(data)
        sentinel = next(self.unique)
        server.send({"jsonrpc": "2.0", "id": sentinel, "method": "textDocument/foldingRange",
                     "params": {"textDocument": {"uri": "file:///not-open.leir"}}})
        expected.append(sentinel)
        before = len(server.received)
        try:
            for msg_id in expected:
                await server.response(msg_id, ANSWER_S)
            # One more round trip, so that a second answer to any of them would be in.
            await server.request("textDocument/foldingRange", {"textDocument": {"uri": "file:///x.leir"}}, ANSWER_S)
        except EOFError:
            code, stderr = await server.exit_status(ANSWER_S)
            errors = [line for line in stderr.splitlines() if " ERROR " in line]
            assert any(broken for _, _, broken in example), f"exited ({code}) without a broken frame: {stderr}"
            assert code == 2 and len(errors) == 1 and "cannot read the client's messages" in errors[0], stderr
            assert "Traceback" not in stderr, stderr
            self.restarts += 1
            return
        answers = [m for m in server.received[before:] if "method" not in m]
        for msg_id in expected:
            assert len([m for m in answers if m.get("id") == msg_id]) == 1, (msg_id, answers)
        internal = [m for m in answers if m.get("error", {}).get("code") == -32603]
        assert internal == [], internal
        shown = [m for m in server.received if m.get("method") == "window/showMessage"]
        assert shown == [], shown

    def close(self) -> None:
        if self.server is not None and self.server.process.returncode is None:
            self.loop.run_until_complete(self.server.close())
        self.loop.close()


def test_random_malformed_input_never_hangs_the_server():
    fuzzer = Fuzzer()

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(items(), min_size=1, max_size=6))
    def check(example):
        fuzzer.loop.run_until_complete(fuzzer.run(example))

    try:
        check()
    finally:
        fuzzer.close()

"""The long run of tests/test_protocol_fuzz.py: N malformed messages and
frames (default 10,000) sent to one leir-lsp process, which is started
again whenever it exits by design (a frame that breaks the stream).

    python3 bench/fuzz_protocol.py [--count N] [--seed S] [--broken SHARE] [--timeout SECONDS]

Each input is sent, then (when it carries no readable id) a valid request
after it; the input's answer (or that request's) is awaited for
``--timeout`` seconds. Printed: how many inputs of each kind were sent, and
the counts of

- crashes: the server exited when nothing sent should have ended it, or
  with a status other than 2, or with a traceback on stderr;
- hangs: no answer within the timeout, and the server still running;
- internal errors: answers with code -32603 (a handler's bug);
- duplicates: a request answered more than once;
- exits by design: status 2 and one ERROR line, after a broken frame;

and the first few of each problem with what was sent. Inputs: JSON-RPC
messages with fields missing, of the wrong type or random (ids, methods,
params), bodies that are not JSON or not UTF-8, batches and bare values,
requests with random positions and ranges on an open document, random
incremental edits of it (ranges past the ends, CRLF, lone surrogates,
emoji), and a few frames with broken headers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter

SERVER = [sys.executable, "-m", "leir_server"]
ENV = {**os.environ, "LEIR_LSP_FRAME_STALL_S": "3"}
DOC = "file:///fuzz/doc.leir"
TEXT = "# fuzz\nL^{4}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = X_{i,j} + 1;\n  ];\n"

REQUESTS = ["textDocument/hover", "textDocument/documentSymbol", "textDocument/formatting",
            "textDocument/semanticTokens/full", "textDocument/foldingRange", "textDocument/codeAction",
            "textDocument/codeLens", "codeAction/resolve", "workspace/executeCommand", "initialize",
            "leir/unknown", "", "$/unknown", "textDocument/definition"]
NOTIFICATIONS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/didSave",
                 "initialized", "$/cancelRequest", "$/setTrace", "workspace/didChangeConfiguration", "leir/nothing"]
PIECES = ["a", " ", "\n", "\r\n", "\r", "é", "😀", "\ud800", "\udc00", "#", ";", "]", "L^{2}_{k}", "\x0c", "\u2028"]
BROKEN_HEADERS = [b"", b"Content-Length: -1\r\n\r\n", b"Content-Length: 1e3\r\n\r\n", b"content-length 5\r\n\r\n",
                  b"Content-Length: 99999999999\r\n\r\n", b"X: 1\r\n\r\n", b"{\r\n\r\n",
                  b"Content-Length: 3\r\nContent-Length: 4\r\n\r\n", b"Content-Length: 5000\r\n\r\n"]


class Generator:
    def __init__(self, rand: random.Random, broken: float):
        self.r = rand
        self.broken = broken
        self.unique = 2**40

    def value(self, depth: int = 0):
        r = self.r
        kind = r.randrange(9 if depth < 3 else 6)
        if kind == 0:
            return None
        if kind == 1:
            return r.choice([True, False])
        if kind == 2:
            return r.choice([0, -1, 1, 2**31, -2**63, 10**30, r.randrange(-1000, 1000)])
        if kind == 3:
            return r.choice([0.5, -1e300, 1e-9, 3.0])
        if kind in (4, 5):
            return "".join(r.choice(PIECES + ["x", "uri", "file:///a"]) for _ in range(r.randrange(6)))
        if kind in (6, 7):
            return {r.choice(["textDocument", "uri", "position", "range", "line", "character", "text", "id",
                              "contentChanges", "version", "command", "arguments", "x"]): self.value(depth + 1)
                    for _ in range(r.randrange(4))}
        return [self.value(depth + 1) for _ in range(r.randrange(4))]

    def position(self):
        r = self.r
        big = r.random() < 0.2
        return {"line": r.randrange(10**6) if big else r.randrange(8),
                "character": r.randrange(2**31) if big else r.randrange(40)}

    def new_id(self):
        self.unique += 1
        return self.unique if self.r.random() < 0.7 else f"s{self.unique}"

    def on_document(self) -> dict:
        """A well-formed request or edit on the open document, at random places."""
        r = self.r
        doc = {"uri": DOC}
        start, end = self.position(), self.position()
        choice = r.randrange(8)
        if choice == 0:
            return {"method": "textDocument/hover", "params": {"textDocument": doc, "position": start}}
        if choice == 1:
            return {"method": "textDocument/codeAction", "params": {
                "textDocument": doc, "range": {"start": start, "end": end}, "context": {"diagnostics": []}}}
        if choice == 2:
            return {"method": r.choice(["textDocument/documentSymbol", "textDocument/semanticTokens/full",
                                        "textDocument/foldingRange", "textDocument/codeLens"]),
                    "params": {"textDocument": doc}}
        if choice == 3:
            return {"method": "textDocument/formatting",
                    "params": {"textDocument": doc, "options": {"tabSize": 2, "insertSpaces": True}}}
        text = "".join(r.choice(PIECES) for _ in range(r.randrange(5)))
        return {"method": "textDocument/didChange", "notification": True, "params": {
            "textDocument": {"uri": DOC, "version": r.randrange(2, 10**6)},
            "contentChanges": [{"range": {"start": start, "end": end}, "text": text}]}}

    def item(self) -> tuple[str, bytes, object, bool]:
        """(kind, bytes, the id an answer must carry or None, whether the framing is broken)."""
        r = self.r
        roll = r.random()
        if roll < self.broken:
            header = r.choice(BROKEN_HEADERS) if r.random() < 0.7 else bytes(
                r.randrange(256) for _ in range(r.randrange(1, 12))) + b"\r\n\r\n"
            return "broken frame", header + json.dumps({"jsonrpc": "2.0", "id": 1}).encode(), None, True
        if roll < 0.30:
            m = self.on_document()
            message = {"jsonrpc": "2.0", "method": m["method"], "params": m["params"]}
            msg_id = None
            if not m.get("notification"):
                msg_id = message["id"] = self.new_id()
            return "on the document", frame(json.dumps(message).encode()), msg_id, False
        if roll < 0.40:
            body = json.dumps(self.value()).encode()
            if r.random() < 0.5:
                body = body[:r.randrange(len(body) + 1)] + bytes(r.randrange(256) for _ in range(r.randrange(3)))
            return "not a message", frame(body), None, False
        # A message with fields missing, of the wrong type, or random.
        message = {}
        if r.random() < 0.9:
            message["jsonrpc"] = "2.0" if r.random() < 0.9 else self.value()
        has_method = r.random() < 0.9
        if has_method:
            names = REQUESTS + NOTIFICATIONS
            message["method"] = r.choice(names) if r.random() < 0.85 else self.value()
        if r.random() < 0.8:
            message["params"] = self.value()
        id_roll = r.random()
        msg_id = None
        if id_roll < 0.7:
            msg_id = message["id"] = self.new_id()
        elif id_roll < 0.8:
            message["id"] = r.choice([None, 1.5, True, [1], {"a": 1}])
        if r.random() < 0.05:
            message[r.choice(["result", "error"])] = self.value()
        body = json.dumps(message).encode()
        expects = msg_id if msg_id is not None and has_method else None
        return "malformed message", frame(body), expects, False


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Server:
    def __init__(self):
        self.process = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=ENV)
        self.answers: dict[object, list[dict]] = {}
        self.arrived = threading.Condition()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.next_id = 0

    def _read(self) -> None:
        out = self.process.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.arrived:
                        self.arrived.notify_all()
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n") and length is not None:
                    break
            message = json.loads(out.read(length))
            if "method" in message and "id" in message:  # a request to the client
                self.write(frame(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": None}).encode()))
                continue
            if "method" in message:
                continue
            with self.arrived:
                self.answers.setdefault(message.get("id"), []).append(message)
                self.arrived.notify_all()

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr.append(line.decode("utf-8", "replace").rstrip("\n"))

    def write(self, data: bytes) -> bool:
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, ValueError, OSError):
            return False

    def wait(self, msg_id, timeout: float) -> str:
        """"answered", "exited" or "hang"."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while msg_id not in self.answers:
                if self.process.poll() is not None:
                    return "exited"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "hang"
                self.arrived.wait(min(left, 0.5))
        return "answered"

    def request(self, method: str, params, timeout: float) -> str:
        self.next_id += 1
        msg_id = f"probe{self.next_id}"
        self.write(frame(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode()))
        return self.wait(msg_id, timeout)

    def start(self, timeout: float) -> bool:
        ok = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}}, timeout)
        self.write(frame(b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}'))
        self.write(frame(json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": DOC, "languageId": "leir", "version": 1, "text": TEXT}}}).encode()))
        return ok == "answered"

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait()
        time.sleep(0.05)  # let the stderr thread finish
        return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--broken", type=float, default=0.01, help="the share of frames with broken headers")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an answer")
    args = parser.parse_args()

    gen = Generator(random.Random(args.seed), args.broken)
    sent: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    started = time.monotonic()

    def problem(kind: str, text: str) -> None:
        counts[kind] += 1
        examples.setdefault(kind, [])
        if len(examples[kind]) < 3:
            examples[kind].append(text[:600])

    server = Server()
    starts = 1
    if not server.start(args.timeout):
        print("the server did not answer initialize", file=sys.stderr)
        return 1
    recent: list[bytes] = []
    for n in range(args.count):
        kind, data, msg_id, broken = gen.item()
        sent[kind] += 1
        recent = (recent + [data[:200]])[-3:]
        server.write(data)
        if msg_id is not None:
            outcome = server.wait(msg_id, args.timeout)
        else:
            outcome = server.request("textDocument/foldingRange", {"textDocument": {"uri": "file:///no.leir"}},
                                     args.timeout)
        if outcome == "answered":
            continue
        if outcome == "hang":
            problem("hangs", f"#{n} {kind}: {recent!r}")
        else:
            code = server.stop()
            errors = [line for line in server.stderr if " ERROR " in line]
            traceback = any("Traceback" in line for line in server.stderr)
            if broken and code == 2 and len(errors) == 1 and not traceback:
                counts["exits by design"] += 1
            else:
                problem("crashes", f"#{n} {kind}: exit {code}: {recent!r}; stderr: {server.stderr[-5:]}")
        # Count this server's answers, then start another.
        server.stop()
        tally(server, counts, problem)
        server = Server()
        starts += 1
        if not server.start(args.timeout):
            problem("crashes", "a new server did not answer initialize")
            break
    server.write(frame(b'{"jsonrpc": "2.0", "id": "last", "method": "shutdown"}'))
    server.wait("last", args.timeout)
    server.write(frame(b'{"jsonrpc": "2.0", "method": "exit"}'))
    try:
        code = server.process.wait(args.timeout)
    except subprocess.TimeoutExpired:
        code = None
        problem("hangs", "the last server did not exit after shutdown and exit")
    if code not in (0, None):
        problem("crashes", f"the last server exited {code} after shutdown and exit")
    tally(server, counts, problem)

    elapsed = time.monotonic() - started
    print(f"leir-lsp protocol fuzz: {args.count} inputs, seed {args.seed}, {elapsed:.0f} s, {starts} server processes")
    print("inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(sent.items())))
    for key in ("crashes", "hangs", "internal errors", "duplicates", "exits by design"):
        print(f"{key}: {counts[key]}")
    for kind, texts in examples.items():
        print(f"\nfirst {kind}:")
        for text in texts:
            print("  " + text)
    return 0 if not (counts["crashes"] or counts["hangs"] or counts["internal errors"] or counts["duplicates"]) else 1


def tally(server: Server, counts: Counter, problem) -> None:
    for msg_id, answers in server.answers.items():
        if msg_id is not None and len(answers) > 1:
            problem("duplicates", f"id {msg_id!r}: {answers[:2]}")
        for answer in answers:
            if answer.get("error", {}).get("code") == -32603:
                problem("internal errors", json.dumps(answer)[:600])


if __name__ == "__main__":
    sys.exit(main())

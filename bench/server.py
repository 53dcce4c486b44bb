"""How fast the real ``leir-lsp`` answers an editor: p50/p95 of

- **start**: process spawn to the ``initialize`` reply (a fresh process each time);
- **diagnostics**: a ``didChange`` to the ``publishDiagnostics`` of that
  version (this includes the server's debounce, ``DEBOUNCE_S``; the figure
  without it is printed too);
- **hover** at a loop or tensor access;
- **code actions**: listing the steps at a loop (no edit computed);
- **resolve**: ``codeAction/resolve`` of a listed step (apply and verify
  numerically, no measurement: ``autoMeasure`` is off); the first resolve
  of each server also starts its job processes (a forkserver that imports
  TVM), so it is reported on a row of its own;

on a generated LEIR file of about 1,000 lines and on the largest bundled
example. Every change makes a new version (a new literal each time), and
every hover, listing and resolve is the first of its kind on that version,
as after a keystroke in an editor: no answer comes from a cache of an
earlier request on the same text.

The client is a plain JSON-RPC client over the server's stdin/stdout (the
stdio transport every editor uses), so the figures include the protocol and
the transport and nothing of a client library. The targets (issue 5):
hover and code-action listing p95 < 50 ms, diagnostics < 100 ms, start < 1 s.

    python bench/server.py [--runs N] [--resolve-runs N] [--starts N] [--docs docs/server.md]

With ``--docs`` the figures replace the section between the markers
``<!-- bench/server.py -->`` and ``<!-- /bench/server.py -->`` of that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS_MS = {"start": 1000.0, "diagnostics": 100.0, "hover": 50.0, "code actions": 50.0}
MARK_BEGIN, MARK_END = "<!-- bench/server.py -->", "<!-- /bench/server.py -->"
#: The first resolve of a server starts the job processes too.
FIRST_RESOLVE = "first resolve (starts the job processes)"


# ------------------------------------------------------------------ the client


class ServerError(Exception):
    pass


class Client:
    """A JSON-RPC client of one server process over stdio. Answers the
    server's own requests (configuration, progress tokens, registrations)
    as an editor would."""

    def __init__(self, command: list[str], settings: dict, env: dict | None = None):
        self.settings = settings
        self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self._ids = iter(range(1, 1 << 30))
        self._pending: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.notifications: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode("utf-8")
        with self._write_lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            message = json.loads(out.read(length))
            received = time.perf_counter()
            if "id" in message and "method" in message:
                self._answer(message)
            elif "id" in message:
                with self._lock:
                    waiting = self._pending.pop(message["id"], None)
                if waiting is not None:
                    waiting.put((received, message))
            else:
                self.notifications.put((received, message))

    def _answer(self, request: dict) -> None:
        method = request["method"]
        if method == "workspace/configuration":
            result = [self.settings.get(item.get("section"), None) for item in request["params"]["items"]]
        elif method == "workspace/applyEdit":
            result = {"applied": False, "failureReason": "the benchmark applies no edit"}
        else:  # window/workDoneProgress/create, client/registerCapability, */refresh
            result = None
        self._send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def request(self, method: str, params, timeout: float = 600.0) -> tuple[float, object]:
        """(seconds from sending to the reply, result)."""
        rid = next(self._ids)
        waiting: queue.Queue = queue.Queue()
        with self._lock:
            self._pending[rid] = waiting
        sent = time.perf_counter()
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            received, message = waiting.get(timeout=timeout)
        except queue.Empty:
            raise ServerError(f"{method}: no reply within {timeout} s") from None
        if "error" in message:
            raise ServerError(f"{method}: {message['error'].get('message')}")
        return received - sent, message.get("result")

    def notify(self, method: str, params) -> float:
        sent = time.perf_counter()
        self._send({"jsonrpc": "2.0", "method": method, "params": params})
        return sent

    def wait_for(self, predicate, timeout: float = 600.0) -> tuple[float, dict]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError("no matching notification")
            try:
                received, message = self.notifications.get(timeout=left)
            except queue.Empty:
                raise ServerError("no matching notification") from None
            if predicate(message):
                return received, message

    def initialize(self, root: Path) -> float:
        """Seconds from spawning the process to the ``initialize`` reply."""
        capabilities = {
            "workspace": {"configuration": True, "applyEdit": True, "workspaceEdit": {"documentChanges": True}},
            "textDocument": {
                "publishDiagnostics": {"versionSupport": True, "relatedInformation": True},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["refactor.rewrite"]}},
                               "resolveSupport": {"properties": ["edit"]}, "dataSupport": True},
            },
            "window": {"workDoneProgress": True},
        }
        rid = next(self._ids)
        waiting: queue.Queue = queue.Queue()
        with self._lock:
            self._pending[rid] = waiting
        self._send({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": capabilities,
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}]}})
        received, message = waiting.get(timeout=120)
        if "error" in message:
            raise ServerError(f"initialize: {message['error']}")
        self.notify("initialized", {})
        return received - self.spawned_at

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=30)
            self.notify("exit", None)
            self.proc.wait(10)
        except (ServerError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def server_command() -> list[str]:
    script = Path(sysconfig.get_path("scripts")) / "leir-lsp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "leir_server"]


# ------------------------------------------------------------------ documents


def generated_program(lines: int = 1000) -> str:
    """A valid LEIR program of at least ``lines`` lines: layer-norm-like
    nests (a reduction, a variance, an elementwise output) over fresh
    tensors, each with a ``*1.000`` literal the benchmark edits."""
    blocks, n = [], 0
    while sum(b.count("\n") for b in blocks) < lines:
        blocks.append(
            f"# block {n}: Y{n} = (X{n} - mean) * rsqrt(var + eps) * g + b, scaled\n"
            f"L^{{64}}_{{i}}\n  L^{{48}}_{{j}} [\n    mean{n}_{{i}} += X{n}_{{i,j}}/48.0;\n  ];\n\n"
            f"L^{{64}}_{{i}}\n  L^{{48}}_{{j}} [\n"
            f"    var{n}_{{i}} += (X{n}_{{i,j}} - mean{n}_{{i}})*(X{n}_{{i,j}} - mean{n}_{{i}})/48.0;\n  ];\n\n"
            f"L^{{64}}_{{i}}\n  L^{{48}}_{{j}} [\n"
            f"    Y{n}_{{i,j}} = (X{n}_{{i,j}} - mean{n}_{{i}})*rsqrt(var{n}_{{i}} + 1e-05)*g{n}_{{j}}*1.000"
            f" + b{n}_{{j}};\n  ];\n\n")
        n += 1
    return "".join(blocks)


def largest_example() -> Path:
    return max(sorted((REPO / "examples").glob("*.leir")), key=lambda p: (len(p.read_text()), p.name))


def position(text: str, offset: int) -> dict:
    line = text.count("\n", 0, offset)
    return {"line": line, "character": offset - (text.rfind("\n", 0, offset) + 1)}


def loop_offsets(text: str) -> list[int]:
    """The offset of every loop header ``L^{`` of the text."""
    out, at = [], text.find("L^{")
    while at >= 0:
        out.append(at)
        at = text.find("L^{", at + 1)
    return out


def access_offsets(text: str) -> list[int]:
    """The offset of the first character of each tensor access ``name_{``
    on an equation line (a line with "=")."""
    out, start = [], 0
    for line in text.splitlines(keepends=True):
        if "=" in line and not line.lstrip().startswith("#"):
            k = line.find("_{")
            while k > 0:
                s = k
                while s > 0 and (line[s - 1].isalnum()):
                    s -= 1
                if s < k:
                    out.append(start + s)
                k = line.find("_{", k + 2)
        start += len(line)
    return out


class Editing:
    """A document whose edits make a new, valid program each time: the
    literal ``old`` at ``offset`` is replaced by a fresh literal of the same
    width."""

    def __init__(self, text: str, literal: str):
        self.text = text
        self.offset = text.rindex(literal) if literal in text else None
        self.width = len(literal)
        self.count = 0

    def next_change(self) -> tuple[dict, str] | None:
        if self.offset is None:
            return None
        self.count += 1
        new = self._literal(self.count)
        start = position(self.text, self.offset)
        end = {"line": start["line"], "character": start["character"] + self.width}
        self.text = self.text[:self.offset] + new + self.text[self.offset + self.width:]
        return {"range": {"start": start, "end": end}, "text": new}, new

    def _literal(self, k: int) -> str:
        """1.001, 1.002, ... written in exactly ``width`` characters, so
        that no other position of the document moves."""
        return ("1." + f"{k % 999 + 1:03d}".ljust(max(1, self.width - 2), "0"))[: max(self.width, 5)]


# ------------------------------------------------------------------ measuring


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q * (len(ordered) - 1)
    lo, hi = int(rank), min(int(rank) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def bench_starts(runs: int, root: Path) -> list[float]:
    times = []
    for _ in range(runs):
        c = Client(server_command(), {"leir": {"autoMeasure": False}})
        try:
            times.append(c.initialize(root))
        finally:
            c.close()
    return times


def bench_document(name: str, text: str, literal: str, runs: int, resolve_runs: int, root: Path) -> dict:
    path = root / name
    path.write_text(text)
    uri = path.as_uri()
    c = Client(server_command(), {"leir": {"autoMeasure": False, "suggestionsOnSave": False}})
    out: dict[str, list[float]] = {"diagnostics": [], "hover": [], "code actions": [], FIRST_RESOLVE: [],
                                   "resolve": []}
    failures: list[str] = []
    try:
        c.initialize(root)
        doc = Editing(text, literal)
        version = 1
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "leir", "version": version,
                                                           "text": text}})
        _, first = c.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                              and m["params"]["uri"] == uri)
        if first["params"]["diagnostics"]:
            raise SystemExit(f"{name}: the benchmark document has diagnostics: {first['params']['diagnostics'][:2]}")
        loops, accesses = loop_offsets(text), access_offsets(text)
        for k in range(max(runs, resolve_runs)):
            change = doc.next_change()
            if change is None:
                break
            version += 1
            sent = c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                       "contentChanges": [change[0]]})
            received, _ = c.wait_for(lambda m, v=version: m.get("method") == "textDocument/publishDiagnostics"
                                     and m["params"]["uri"] == uri and m["params"].get("version") == v)
            if k < runs:
                out["diagnostics"].append(received - sent)
                at = accesses[k % len(accesses)] if k % 2 else loops[k % len(loops)]
                seconds, _ = c.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                              "position": position(doc.text, at)})
                out["hover"].append(seconds)
            at = loops[(k * 7) % len(loops)]
            where = position(doc.text, at)
            seconds, actions = c.request("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "range": {"start": where, "end": where},
                "context": {"diagnostics": []}})
            if k < runs:
                out["code actions"].append(seconds)
            if k < resolve_runs and actions:
                action = actions[(k * 3) % len(actions)]
                try:
                    seconds, resolved = c.request("codeAction/resolve", action)
                    if not resolved.get("edit"):
                        failures.append(f"resolve of {action['title']!r} returned no edit")
                    out[FIRST_RESOLVE if not (out[FIRST_RESOLVE] or out["resolve"]) else "resolve"].append(seconds)
                except ServerError as e:  # a refused step is an answer too, but not a resolve time
                    failures.append(f"resolve of {action['title']!r}: {e}")
    finally:
        c.close()
    return {"name": name, "lines": text.count("\n"), "times": out, "failures": failures}


# ------------------------------------------------------------------ reporting


def summary_rows(starts: list[float], documents: list[dict], debounce_s: float) -> list[tuple]:
    rows = [("start to initialize reply", "-", len(starts), percentile(starts, 0.5) * 1000,
             percentile(starts, 0.95) * 1000, TARGETS_MS["start"])]
    for d in documents:
        label = f"{d['name']} ({d['lines']} lines)"
        for kind in ("diagnostics", "hover", "code actions", FIRST_RESOLVE, "resolve"):
            values = d["times"][kind]
            if not values:
                continue
            rows.append((kind, label, len(values), percentile(values, 0.5) * 1000, percentile(values, 0.95) * 1000,
                         TARGETS_MS.get(kind)))
            if kind == "diagnostics":
                rest = [v - debounce_s for v in values]
                rows.append((f"diagnostics minus the {debounce_s * 1000:g} ms debounce", label, len(rest),
                             percentile(rest, 0.5) * 1000, percentile(rest, 0.95) * 1000, TARGETS_MS["diagnostics"]))
    return rows


def markdown(rows: list[tuple], context: dict, failures: list[str]) -> str:
    lines = [
        f"Measured {context['date']} with `python bench/server.py {context['args']}` on {context['machine']}; "
        f"load average {context['load_before']} before and {context['load_after']} after (other jobs were "
        f"running on this shared machine: treat the figures as upper bounds).",
        "",
        "| what | document | n | p50 ms | p95 ms | target p95 ms | met |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for what, doc, n, p50, p95, target in rows:
        met = "-" if target is None else ("yes" if p95 < target else "**no**")
        lines.append(f"| {what} | {doc} | {n} | {p50:.1f} | {p95:.1f} | {'-' if target is None else f'{target:g}'} "
                     f"| {met} |")
    if failures:
        lines += ["", "Requests that failed during the run:", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n"


def write_docs(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else ""
    block = f"{MARK_BEGIN}\n{text}{MARK_END}"
    if MARK_BEGIN in old and MARK_END in old:
        head, rest = old.split(MARK_BEGIN, 1)
        _, tail = rest.split(MARK_END, 1)
        new = head + block + tail
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + "\n## Performance\n\n" + block + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(new)
    os.replace(tmp, path)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="changes, hovers and listings per document")
    parser.add_argument("--resolve-runs", type=int, default=6, help="resolves per document (each verifies)")
    parser.add_argument("--starts", type=int, default=10, help="server starts")
    parser.add_argument("--lines", type=int, default=1000, help="lines of the generated document")
    parser.add_argument("--docs", type=Path, help="write the figures into this Markdown file")
    args = parser.parse_args(argv)

    try:
        from leir_server.diagnostics import DEBOUNCE_S
    except ImportError:
        DEBOUNCE_S = 0.0
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="leir-bench-server-") as tmp:
        root = Path(tmp)
        env_cache = root / "cache"
        os.environ["LEIR_CACHE_DIR"] = str(env_cache)  # a fresh measurement cache: nothing is measured anyway
        print(f"server: {' '.join(server_command())}", flush=True)
        starts = bench_starts(args.starts, root)
        print(f"start: p50 {percentile(starts, 0.5) * 1000:.0f} ms", flush=True)
        documents = []
        generated = generated_program(args.lines)
        documents.append(bench_document("generated.leir", generated, "1.000", args.runs, args.resolve_runs, root))
        example = largest_example()
        text = example.read_text()
        literal = next((lit for lit in ("0.17677669529663687", "1e-05", "96.0", "2.0") if lit in text), None)
        documents.append(bench_document(example.name, text, literal or "", args.runs, args.resolve_runs, root))
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())

    rows = summary_rows(starts, documents, DEBOUNCE_S)
    failures = [f"{d['name']}: {f}" for d in documents for f in d["failures"]]
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "args": " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(), "load_before": load_before, "load_after": load_after,
    }
    text = markdown(rows, context, failures)
    print(text)
    if args.docs:
        write_docs(args.docs, text)
        print(f"written to {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

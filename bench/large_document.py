"""Whether the real ``leir-lsp`` stays responsive on a very large ``.leir``
file (issue 12.3): the bundled examples repeated, tensors renamed per copy,
to ``--lines`` lines (100,000 by default, a valid program of about 2.4 MB).

    python bench/large_document.py [--lines 100000] [--runs 5]

Over stdio with ``bench/server.py``'s client it opens the file and prints,
with the load average before and after:

- **diagnostics**: didOpen to the publishDiagnostics of version 1 (the
  check runs in a thread, off the protocol loop);
- **loop while checking**: the median time to answer a request on a small
  document (a folding-range request on a 6-line file) sent while the
  large file is being checked: the protocol loop is not frozen;
- per request on the large file, at loops spread over it (``--runs`` of
  each, each on its own position): **hover**, **code actions**,
  **code lenses**, **document symbols**, **semantic tokens**, **folding
  ranges**: median and worst time to the answer, and how many answered
  with an error (a request past its budget answers RequestFailed, or, for
  hover, with what it has; ``leir_server.schedule``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from server import Client, ServerError, position, server_command  # noqa: E402  (bench/server.py)

SMALL = "L^{4}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = X_{i,j} + 1;\n  ];\n"


def renamed(text: str, k: int) -> str:
    """``text`` with each of its tensors renamed NAME_k."""
    from leir.bridge.document import load_leir

    names = sorted(load_leir(text).analysis.tensors, key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, names)) + r")(?=_\{|\^\{|[^\w]|$)")
    return pattern.sub(lambda m: f"{m.group(1)}_{k}", text)


def large_program(lines: int) -> str:
    """The CPU examples that check clean, renamed and repeated to at least
    ``lines`` lines."""
    from leir.bridge.document import load_leir

    bases = [t for t in (p.read_text() for p in sorted((REPO / "examples").glob("*.leir")))
             if "B^{" not in t and load_leir(t).ok]
    out, n, k = [], 0, 0
    while n < lines:
        t = renamed(bases[k % len(bases)], k)
        out.append(t + "\n")
        n += t.count("\n") + 1
        k += 1
    return "".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    text = large_program(args.lines)
    loops = [m.start() + 1 for m in re.finditer(r"L\^\{", text)]
    picks = [loops[(2 * r + 1) * len(loops) // (2 * args.runs)] for r in range(args.runs)]
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="leir-large-"))
    env = {**os.environ, "LEIR_CACHE_DIR": str(root / "cache")}
    client = Client(server_command(), {"leir": {"autoMeasure": False}}, env=env)
    rows = []
    try:
        client.initialize(root)
        small = (root / "small.leir").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {"uri": small, "languageId": "leir", "version": 1,
                                                                "text": SMALL}})
        client.request("textDocument/foldingRange", {"textDocument": {"uri": small}})
        uri = (root / "large.leir").as_uri()
        opened = client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "leir", "version": 1, "text": text}})
        probes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                seconds, _ = client.request("textDocument/foldingRange", {"textDocument": {"uri": small}})
                probes.append(seconds)
                time.sleep(0.1)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        received, message = client.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                                            and m["params"]["uri"] == uri, timeout=600)
        done.set()
        prober.join()
        errors = sum(1 for d in message["params"]["diagnostics"] if d.get("severity") == 1)
        rows.append(("diagnostics (didOpen to publish)", 1, received - opened, received - opened, errors))
        rows.append(("small document's request while checking", len(probes), statistics.median(probes),
                     max(probes), 0))
        doc = {"textDocument": {"uri": uri}}
        requests = [
            ("hover", "textDocument/hover", lambda at: {**doc, "position": position(text, at)}),
            ("code actions", "textDocument/codeAction", lambda at: {
                **doc, "range": {"start": position(text, at), "end": position(text, at)},
                "context": {"diagnostics": []}}),
            ("code lenses", "textDocument/codeLens", lambda at: doc),
            ("document symbols", "textDocument/documentSymbol", lambda at: doc),
            ("semantic tokens", "textDocument/semanticTokens/full", lambda at: doc),
            ("folding ranges", "textDocument/foldingRange", lambda at: doc),
        ]
        for name, method, params in requests:
            times, failed = [], 0
            for at in picks:
                sent = time.perf_counter()
                try:
                    client.request(method, params(at), timeout=300)
                except ServerError:
                    failed += 1
                times.append(time.perf_counter() - sent)
            rows.append((name, len(times), statistics.median(times), max(times), failed))
    finally:
        client.close()
    load_after = os.getloadavg()
    print(f"{text.count(chr(10))} lines, {len(text)} characters, {len(loops)} loops; "
          f"load average {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after")
    print(f"{'what':42} {'n':>3} {'median s':>9} {'max s':>8} {'errors':>6}")
    for name, n, median, worst, failed in rows:
        print(f"{name:42} {n:>3} {median:9.3f} {worst:8.3f} {failed:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``leir-lsp watch DIR``: follow the kernels under a directory in the
terminal (``leir.tools.watch`` does the work).

    leir-lsp watch DIR [--report PATH] [--target llvm|cuda] [--budget N] [--once]

On a terminal the table is redrawn in place; otherwise (a pipe, a log file,
CI) each change of a row is one line, so the output reads as a log. Ctrl-C
stops. ``--once`` checks and measures everything once, prints the table and
exits.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
from typing import NoReturn, Sequence, TextIO

PROG = "leir-lsp watch"

COLUMNS = ("file", "kernel", "latency", "best next step", "expected speedup")


class _OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _budget(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    from leir.tools.watch import DEFAULT_BUDGET

    parser = _OneLineErrorParser(
        prog=PROG, description="Re-check, rank and measure the .leir and TVMScript files under DIR as they change.")
    parser.add_argument("dir", metavar="DIR", help="the directory to watch (recursively)")
    parser.add_argument("--report", metavar="PATH", help="keep a JSON report of the table at PATH")
    parser.add_argument("--target", choices=["llvm", "cuda"], default="llvm", help="where to measure (default llvm)")
    parser.add_argument("--budget", metavar="N", type=_budget, default=DEFAULT_BUDGET,
                        help=f"new measurements per version of a file (default {DEFAULT_BUDGET}; 0: cached only)")
    parser.add_argument("--once", action="store_true", help="check and measure everything once, print, exit")
    parser.add_argument("--ranker", default="heuristic", metavar="NAME",
                        help="what ranks the next steps: heuristic (default) or model (the local model; the "
                             "heuristic, with the reason on stderr, when none is installed)")
    return parser


# ------------------------------------------------------------------ cells


def latency_text(ms: float | None, status: str) -> str:
    if ms is not None:
        if ms < 0.1:
            return f"{ms * 1000:.3g} us"
        return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.3g} s"
    if status in ("measuring", "queued", "verifying"):
        return status + "..."
    if status.startswith(("failed", "verification failed", "not applicable")):
        return status.split(":")[0]
    return status


def cells(row) -> tuple[str, str, str, str, str]:
    """The five cells of a table row (``leir.tools.watch.Row``)."""
    if row.status != "ok" or row.kernel is None:
        return row.file, row.kernel or "-", row.status, row.message or "", ""
    best = row.best
    step = best.title if best is not None else (row.message or "no step applies")
    speedup = row.speedup
    if speedup is not None:
        expected = f"{speedup:.2f}x" + (" (slower)" if speedup < 1 else "")
    elif best is not None and best.status in ("measuring", "queued", "verifying"):
        expected = best.status + "..."
    elif best is not None and best.status.startswith(("failed", "verification failed", "not applicable")):
        expected = best.status
    else:
        expected = "not measured"
    return row.file, row.kernel, latency_text(row.latency_ms, row.latency_status), step, expected


def _fit(values: list[tuple[str, ...]], width: int) -> list[str]:
    widths = [max(len(v[i]) for v in values) for i in range(len(COLUMNS))]
    # Shrink the "best next step" column first, then the file names, to fit.
    for i in (3, 0, 1):
        over = sum(widths) + 2 * (len(widths) - 1) - width
        if over > 0:
            widths[i] = max(8, widths[i] - over)
    out = []
    for v in values:
        parts = [(c if len(c) <= w else c[: w - 1] + "~").ljust(w) for c, w in zip(v, widths)]
        out.append("  ".join(parts).rstrip()[:width])
    return out


def table_lines(rows, width: int = 120) -> list[str]:
    values = [COLUMNS] + [cells(r) for r in rows]
    lines = _fit(values, width)
    return [lines[0], "-" * min(width, max(len(l) for l in lines))] + lines[1:]


# ------------------------------------------------------------------ displays


class LiveTable:
    """The table, redrawn in place on a terminal."""

    def __init__(self, out: TextIO):
        self.out = out
        self._drawn = 0
        self._lock = threading.Lock()

    def __call__(self, watcher) -> None:
        width = shutil.get_terminal_size((120, 24)).columns
        lines = table_lines(watcher.rows(), width) + [f"watching {watcher.root} (Ctrl-C stops)"]
        with self._lock:
            # Back to the first line of the last drawing, then clear below.
            prefix = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
            self.out.write(prefix + "\n".join(lines) + "\n")
            self.out.flush()
            self._drawn = len(lines)


class LineLog:
    """One line per row that changed, for output that is not a terminal."""

    def __init__(self, out: TextIO):
        self.out = out
        self._last: dict[tuple[str, str | None], str] = {}
        self._lock = threading.Lock()

    def __call__(self, watcher) -> None:
        with self._lock:
            seen = set()
            for row in watcher.rows():
                key = (row.file, row.kernel)
                seen.add(key)
                line = "\t".join(cells(row))
                if self._last.get(key) != line:
                    self._last[key] = line
                    self.out.write(line + "\n")
            for key in [k for k in self._last if k not in seen]:
                del self._last[key]
                if not any(k[0] == key[0] for k in seen):
                    self.out.write(f"{key[0]}\tremoved\n")
            self.out.flush()


def _ranker(name: str):
    """``--ranker NAME``'s ranker; a model that does not load says why on
    stderr and the heuristic ranks."""
    from leir.tools.ranking import HEURISTIC, load_ranker_telling

    found = load_ranker_telling(name, lambda reason: print(f"{PROG}: {reason}", file=sys.stderr))
    if found is HEURISTIC and name != "heuristic":
        print(f"{PROG}: ranker {name!r} did not load; ranking with the heuristic", file=sys.stderr)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from leir.errors import LeirError
    from leir.tools.watch import Watcher

    out = sys.stdout
    tty = out.isatty() and not args.once
    try:
        watcher = Watcher(args.dir, report=args.report, target=args.target, budget=args.budget,
                          on_change=None if args.once else (LiveTable(out) if tty else LineLog(out)),
                          ranker=_ranker(args.ranker))
    except LeirError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if args.once:
        try:
            watcher.run_once()
        finally:
            watcher.stop()
        rows = watcher.rows()
        width = shutil.get_terminal_size((120, 24)).columns if out.isatty() else 10_000
        out.write("\n".join(table_lines(rows, width)) + "\n")
        if args.report:
            out.write(f"report: {args.report}\n")
        return 0
    watcher.start()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
    return 0

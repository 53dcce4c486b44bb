"""Watch mode (``leir.tools.watch``, ``leir-lsp watch``): files created, changed,
deleted, renamed, unreadable or huge; bursts of writes; measurements within
a budget, cache first, cancelled when stale; the JSON report; the command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from leir.bridge.document import MAX_DOCUMENT_BYTES
from leir.tools.watch import Debouncer, NextStep, Row, Watcher
from programs import SCALE_TVMSCRIPT

SCALE = """\
# B = 2 A
L^{64}_{i}
  L^{32}_{j} [
    B_{i,j} = A_{i,j}*2.0;
  ];
"""
SCALE_3 = SCALE.replace("2.0", "3.0")
BROKEN = "L^{4}_{i} [\n  B_{i} = ;\n"
TVMSCRIPT = SCALE_TVMSCRIPT


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Each test starts with an empty measurement cache of its own."""
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@dataclass
class FakeMeasurement:
    median_ms: float | None
    error: str | None = None
    cached: bool = False


class FakeMeasurer:
    """Stands in for the measurement engine: a cache keyed by program text,
    and submissions the test completes by hand."""

    target = "llvm"
    device = "test device"
    measured = None  # no MeasuredLookup: leir.tools.suggest ranks without cached latencies

    def __init__(self, cached: dict[str, float] | None = None):
        self.cached = cached or {}
        self.submitted: list[tuple[str, str, Future]] = []  # (label, program text, future)
        self.recorded: list[tuple[str, dict, str, str]] = []  # (before text, step, after text, namespace)

    @staticmethod
    def text(analysis) -> str:
        from leir.printer import print_program

        return print_program(analysis.program)

    def lookup(self, analysis):
        ms = self.cached.get(self.text(analysis))
        return None if ms is None else FakeMeasurement(ms, cached=True)

    def record(self, before, step, after, namespace):
        self.recorded.append((self.text(before), step.to_json(), self.text(after), namespace))

    def submit(self, analysis, label):
        future = Future()
        self.submitted.append((label, self.text(analysis), future))
        return future

    def close(self):
        pass


def only_row(watcher: Watcher, file: str) -> Row:
    rows = [r for r in watcher.rows() if r.file == file]
    assert len(rows) == 1, rows
    return rows[0]


def wait_until(condition, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` (file events arrive on another thread)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


# ------------------------------------------------------------------ debouncing


def test_a_burst_of_touches_is_due_once_after_it_is_quiet():
    now = [0.0]
    d = Debouncer(0.3, clock=lambda: now[0])
    for k in range(50):
        now[0] = k * 0.01
        d.touch("a.leir")
        assert d.due() == []
    now[0] = 0.49 + 0.29
    assert d.due() == []
    now[0] = 0.49 + 0.3
    assert d.due() == ["a.leir"]
    assert d.due() == []
    assert not d.pending()


def test_debouncing_is_per_file():
    now = [0.0]
    d = Debouncer(1.0, clock=lambda: now[0])
    d.touch("a.leir")
    now[0] = 0.5
    d.touch("b.leir")
    now[0] = 1.0
    assert d.due() == ["a.leir"]
    assert d.next_due_in() == pytest.approx(0.5)
    now[0] = 1.5
    assert d.due() == ["b.leir"]


# ------------------------------------------------------------------ files


def watcher_on(tmp_path: Path, **kwargs) -> Watcher:
    kwargs.setdefault("budget", 0)
    kwargs.setdefault("measurer", FakeMeasurer())
    return Watcher(tmp_path, **kwargs)


def test_a_created_file_gets_a_row_with_ranked_steps(tmp_path):
    w = watcher_on(tmp_path)
    (tmp_path / "scale.leir").write_text(SCALE)

    w.refresh("scale.leir")

    row = only_row(w, "scale.leir")
    assert (row.kernel, row.status, row.latency_status) == ("scale", "ok", "not measured")
    assert row.suggestions and row.best is row.suggestions[0]
    assert row.speedup is None
    assert all(s.status == "not measured" and s.latency_ms is None for s in row.suggestions)


def test_suggestions_are_one_per_transformation_and_loop(tmp_path):
    w = watcher_on(tmp_path, suggestions=5)
    (tmp_path / "scale.leir").write_text(SCALE)

    w.refresh("scale.leir")

    places = [(s.step["id"], s.step["args"].get("loop"), str(s.step["args"].get("loops")))
              for s in only_row(w, "scale.leir").suggestions]
    assert len(places) == 5
    assert len(set(places)) == len(places)


class _LogProb:
    """A model-like ranker: every score negative (as a log-probability), in the heuristic's reverse order."""

    name = "logprob"

    def score(self, ctx, steps, target):
        from leir.tools.ranking import HEURISTIC

        return [(-1.0 - score, ("logprob",)) for score, _ in HEURISTIC.score(ctx, steps, target)]


def test_another_ranker_orders_the_next_steps_and_the_report_names_it(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    heuristic = watcher_on(tmp_path, suggestions=5)
    heuristic.refresh("scale.leir")
    by_model = watcher_on(tmp_path, suggestions=5, ranker=_LogProb())
    by_model.refresh("scale.leir")

    mine = [s.step for s in only_row(by_model, "scale.leir").suggestions]
    theirs = [s.step for s in only_row(heuristic, "scale.leir").suggestions]
    assert len(mine) == 5 and mine != theirs  # negative scores are a model's ranking, not "no idea"
    assert all(s.facts == ("logprob",) for s in only_row(by_model, "scale.leir").suggestions)
    assert by_model.report()["ranker"] == "logprob" and heuristic.report()["ranker"] == "heuristic"


def test_a_modified_file_is_checked_again(tmp_path):
    w = watcher_on(tmp_path)
    path = tmp_path / "scale.leir"
    path.write_text(SCALE)
    w.refresh("scale.leir")

    path.write_text(BROKEN)
    w.refresh("scale.leir")

    row = only_row(w, "scale.leir")
    assert (row.kernel, row.status) == (None, "errors")
    assert row.message.startswith("1:11: ")
    assert w.checks["scale.leir"] == 2


def test_a_deleted_file_leaves_the_table(tmp_path):
    w = watcher_on(tmp_path)
    path = tmp_path / "scale.leir"
    path.write_text(SCALE)
    w.refresh("scale.leir")

    path.unlink()
    w.refresh("scale.leir")

    assert w.rows() == []


def test_a_renamed_file_moves_to_its_new_name(tmp_path):
    w = watcher_on(tmp_path)
    (tmp_path / "scale.leir").write_text(SCALE)
    w.refresh("scale.leir")

    (tmp_path / "scale.leir").rename(tmp_path / "double.leir")
    w.refresh("scale.leir")
    w.refresh("double.leir")

    assert [(r.file, r.kernel) for r in w.rows()] == [("double.leir", "double")]


def test_a_file_that_is_not_utf8_gets_a_row_that_says_so(tmp_path):
    w = watcher_on(tmp_path)
    (tmp_path / "latin1.leir").write_bytes("# caf\xe9\n".encode("latin-1") + SCALE.encode())

    w.refresh("latin1.leir")

    row = only_row(w, "latin1.leir")
    assert (row.kernel, row.status, row.message) == (None, "not UTF-8", "byte 0xe9 at offset 5")


def test_a_huge_file_is_refused_without_reading_it(tmp_path):
    w = watcher_on(tmp_path)
    with open(tmp_path / "huge.leir", "wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: nothing is written

    w.refresh("huge.leir")

    row = only_row(w, "huge.leir")
    assert row.status == "too large"
    assert str(MAX_DOCUMENT_BYTES + 1) in row.message


def test_a_directory_named_like_a_kernel_is_not_a_file(tmp_path):
    w = watcher_on(tmp_path)
    (tmp_path / "dir.leir").mkdir()

    w.refresh("dir.leir")

    assert w.rows() == []


def test_scan_finds_kernels_and_skips_hidden_directories_and_other_files(tmp_path):
    for name in ("a.leir", "sub/b.leir", "sub/k.py", ".git/c.leir", "notes.txt", "sub/__pycache__/d.py",
                 ".#a.leir"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    w = watcher_on(tmp_path)

    assert w.scan() == ["a.leir", "sub/b.leir", "sub/k.py"]


def test_python_files_show_their_tvmscript_kernels_and_plain_python_is_ignored(tmp_path):
    (tmp_path / "kernels.py").write_text(TVMSCRIPT)
    (tmp_path / "setup.py").write_text("import os\nprint('not a kernel')\n")
    w = watcher_on(tmp_path)

    w.run_once()

    assert [(r.file, r.kernel, r.status) for r in w.rows()] == [("kernels.py", "scale", "ok")]
    assert only_row(w, "kernels.py").suggestions


def test_a_kernel_file_whose_kernel_breaks_keeps_a_row_with_the_error(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(TVMSCRIPT)
    w = watcher_on(tmp_path)
    w.refresh("kernels.py")

    path.write_text(TVMSCRIPT.replace("T.grid(64, 32)", "T.grid(64, 32"))
    w.refresh("kernels.py")

    row = only_row(w, "kernels.py")
    assert row.status == "errors" and row.message


# ------------------------------------------------------------------ measuring


@pytest.mark.slow  # each measured suggestion is verified: two builds
def test_cache_first_then_new_measurements_within_the_budget(tmp_path):
    from leir.bridge.document import load_leir

    (tmp_path / "scale.leir").write_text(SCALE)
    measurer = FakeMeasurer(cached={FakeMeasurer.text(load_leir(SCALE).analysis): 4.0})
    w = Watcher(tmp_path, budget=2, suggestions=3, measurer=measurer, report=tmp_path / "report.json")

    assert w.run_once(timeout_s=0) is False  # two measurements are still running

    row = only_row(w, "scale.leir")
    assert (row.latency_ms, row.latency_status) == (4.0, "cached")
    assert [s.status for s in row.suggestions] == ["measuring", "measuring", "not measured"]
    assert len(measurer.submitted) == 2
    assert measurer.submitted[0][0] == f"scale.leir:scale {row.suggestions[0].title}"

    measurer.submitted[0][2].set_result(FakeMeasurement(8.0))
    measurer.submitted[1][2].set_result(FakeMeasurement(2.5))

    # The two verified steps are remembered for the editor's code actions.
    assert [(step, namespace) for _, step, _, namespace in measurer.recorded] == [
        (s.step, "leir") for s in row.suggestions[:2]]
    assert [after for *_, after, _ in measurer.recorded] == [text for _, text, _ in measurer.submitted]

    row = only_row(w, "scale.leir")
    assert [s.latency_ms for s in row.suggestions] == [8.0, 2.5, None]
    assert row.best is row.suggestions[1]
    assert row.speedup == pytest.approx(4.0 / 2.5)
    assert not w.busy()


def test_a_program_over_the_memory_budget_is_refused_and_spends_nothing(tmp_path, monkeypatch):
    # SCALE's tensors take 16 kB: over a 10 kB budget.
    monkeypatch.setenv("LEIR_MEMORY_BUDGET_MB", "0.01")
    (tmp_path / "scale.leir").write_text(SCALE)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=2, suggestions=2, measurer=measurer)

    assert w.run_once(timeout_s=30) is True  # nothing left running

    row = only_row(w, "scale.leir")
    assert row.latency_status.startswith("refused: the tensors of this program take 16 kB")
    assert "LEIR_MEMORY_BUDGET_MB" in row.latency_status
    assert len(row.suggestions) == 2
    assert [s.status for s in row.suggestions] == ["refused: the program is over the memory budget"] * 2
    assert measurer.submitted == [] and measurer.recorded == []


def test_a_measurement_the_engine_refuses_for_memory_costs_no_budget(tmp_path):
    from leir.footprint import MemoryBudgetExceeded

    class Refusing(FakeMeasurer):
        """Refuses the first program it is given, as the engine does past its budget."""

        def submit(self, analysis, label):
            if not self.refused:
                self.refused.append(label)
                raise MemoryBudgetExceeded("the tensors of this program take 16 KB; leir builds and runs up to 10 KB")
            return super().submit(analysis, label)

    (tmp_path / "scale.leir").write_text(SCALE)
    measurer = Refusing()
    measurer.refused = []
    w = Watcher(tmp_path, budget=1, suggestions=1, measurer=measurer)

    w.run_once(timeout_s=0)

    row = only_row(w, "scale.leir")
    assert row.latency_status == "refused: the tensors of this program take 16 KB; leir builds and runs up to 10 KB"
    assert measurer.refused == ["scale.leir:scale"]
    # The one measurement of the budget went to the step instead.
    assert [label for label, _, _ in measurer.submitted] == [f"scale.leir:scale {row.suggestions[0].title}"]
    assert row.suggestions[0].status == "measuring"


@pytest.mark.slow
def test_a_python_kernels_step_is_applied_to_the_kernel_verified_and_measured(tmp_path):
    (tmp_path / "kernels.py").write_text(TVMSCRIPT)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=2, suggestions=1, measurer=measurer)

    w.run_once(timeout_s=0)

    row = only_row(w, "kernels.py")
    [suggestion] = row.suggestions
    assert [label for label, _, _ in measurer.submitted] == ["kernels.py:scale", f"kernels.py:scale {suggestion.title}"]
    [(before, step, after, namespace)] = measurer.recorded
    assert (step, namespace) == (suggestion.step, "tvmscript:scale")
    assert (before, after) == (measurer.submitted[0][1], measurer.submitted[1][1])
    assert before != after


@pytest.mark.slow
def test_a_failed_measurement_is_a_reason_not_a_latency(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=2, suggestions=1, measurer=measurer)

    w.run_once(timeout_s=0)
    measurer.submitted[0][2].set_result(FakeMeasurement(3.0))
    measurer.submitted[1][2].set_result(FakeMeasurement(None, error="crashed (signal 11, SIGSEGV) while timing"))

    row = only_row(w, "scale.leir")
    assert (row.latency_ms, row.latency_status) == (3.0, "measured")
    assert row.suggestions[0].status == "failed: crashed (signal 11, SIGSEGV) while timing"
    assert row.suggestions[0].latency_ms is None
    assert row.speedup is None


def test_a_change_cancels_the_measurements_of_the_old_version(tmp_path):
    path = tmp_path / "scale.leir"
    path.write_text(SCALE)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=1, suggestions=1, measurer=measurer)
    w.run_once(timeout_s=0)
    [(_, old_text, old)] = measurer.submitted
    assert "2.0" in old_text and not old.done()

    path.write_text(SCALE_3)
    w.run_once(timeout_s=0)

    assert old.cancelled()
    assert len(measurer.submitted) == 2
    _, new_text, new = measurer.submitted[1]
    assert "3.0" in new_text and not new.done()
    assert only_row(w, "scale.leir").latency_status == "measuring"


def test_a_late_result_of_an_old_version_does_not_land_on_the_new_one(tmp_path):
    path = tmp_path / "scale.leir"
    path.write_text(SCALE)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=1, suggestions=1, measurer=measurer)
    w.run_once(timeout_s=0)
    old = measurer.submitted[0][2]
    old.set_running_or_notify_cancel()  # already timing: cancel() cannot stop it

    path.write_text(SCALE_3)
    w.run_once(timeout_s=0)
    old.set_result(FakeMeasurement(1.0))

    row = only_row(w, "scale.leir")
    assert (row.latency_ms, row.latency_status) == (None, "measuring")


def test_budget_zero_submits_nothing(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    measurer = FakeMeasurer()
    w = Watcher(tmp_path, budget=0, measurer=measurer)

    assert w.run_once() is True

    assert measurer.submitted == []
    assert only_row(w, "scale.leir").latency_status == "not measured"


# ------------------------------------------------------------------ the report


@pytest.mark.slow
def test_the_report_is_json_with_one_row_per_kernel(tmp_path):
    from leir.bridge.document import load_leir

    (tmp_path / "scale.leir").write_text(SCALE)
    (tmp_path / "broken.leir").write_text(BROKEN)
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    measurer = FakeMeasurer(cached={FakeMeasurer.text(load_leir(SCALE).analysis): 4.0})
    w = Watcher(tmp_path, budget=1, suggestions=2, measurer=measurer, report=report)
    w.run_once(timeout_s=0)
    measurer.submitted[0][2].set_result(FakeMeasurement(1.0))
    w.write_report()

    data = json.loads(report.read_text())
    assert data["version"] == 1
    assert (data["root"], data["target"], data["device"], data["budget"]) == (str(tmp_path.resolve()), "llvm",
                                                                             "test device", 1)
    broken, scale = data["rows"]
    assert (broken["file"], broken["kernel"], broken["status"]) == ("broken.leir", None, "errors")
    assert broken["best_step"] is None and broken["expected_speedup"] is None
    assert (scale["file"], scale["kernel"], scale["status"]) == ("scale.leir", "scale", "ok")
    assert (scale["latency_ms"], scale["latency_status"]) == (4.0, "cached")
    first = scale["suggestions"][0]
    assert scale["best_step"] == {**first["step"], "title": first["title"]}
    assert (scale["expected_speedup"], scale["speedup_status"]) == (4.0, "measured")
    assert [s["status"] for s in scale["suggestions"]] == ["measured", "not measured"]
    assert os.listdir(report.parent) == ["report.json"]  # written through a temporary file, which is gone


def test_an_unmeasured_report_says_not_measured(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    w = watcher_on(tmp_path, report=tmp_path / "r.json")

    w.run_once()

    [row] = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert (row["latency_ms"], row["latency_status"]) == (None, "not measured")
    assert (row["expected_speedup"], row["speedup_status"]) == (None, "not measured")
    assert row["best_step"]["title"] == row["suggestions"][0]["title"]


# ------------------------------------------------------------------ following changes


def test_following_a_directory_folds_a_burst_and_follows_renames_and_deletes(tmp_path):
    seen = []
    measurer = FakeMeasurer()  # budget 1, no suggestions: it receives the checked program
    w = Watcher(tmp_path, budget=1, suggestions=0, measurer=measurer, debounce_s=1.0,
                on_change=lambda watcher: seen.append(len(watcher.rows())))
    w.start()
    try:
        path = tmp_path / "scale.leir"
        for k in range(20):  # an editor's save, a formatter, a checkout: many writes at once
            path.write_text(SCALE.replace("2.0", f"{k + 1}.0"))
        wait_until(lambda: len(measurer.submitted) >= 1)
        time.sleep(1.5)  # longer than the debounce: a second check would have happened by now
        assert w.checks["scale.leir"] == 1
        [(_, text, _)] = measurer.submitted
        assert "20.0" in text  # the last version, checked once
        assert only_row(w, "scale.leir").kernel == "scale"

        path.rename(tmp_path / "double.leir")
        wait_until(lambda: [r.file for r in w.rows()] == ["double.leir"])
        assert only_row(w, "double.leir").kernel == "double"

        (tmp_path / "double.leir").write_bytes(b"\xff\xfe")
        wait_until(lambda: only_row(w, "double.leir").status == "not UTF-8")

        (tmp_path / "double.leir").unlink()
        wait_until(lambda: w.rows() == [])
        assert seen  # the display was told
    finally:
        w.stop()


# watchdog 7 warns when a directory returns under a path it watched before
# (it re-registers the inotify watch); nothing is lost.
@pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")
def test_following_a_directory_that_is_renamed_moved_away_and_back(tmp_path, tmp_path_factory):
    root, elsewhere = tmp_path / "root", tmp_path_factory.mktemp("elsewhere")
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "scale.leir").write_text(SCALE)
    w = watcher_on(root, debounce_s=0.2)
    w.start()
    try:
        wait_until(lambda: [r.file for r in w.rows()] == ["kernels/scale.leir"])

        (root / "kernels").rename(root / "moved")
        wait_until(lambda: [r.file for r in w.rows()] == ["moved/scale.leir"])

        (root / "moved").rename(elsewhere / "moved")  # out of the watched tree: no event names its files
        wait_until(lambda: w.rows() == [])

        (elsewhere / "moved").rename(root / "back")  # and in again
        wait_until(lambda: [r.file for r in w.rows()] == ["back/scale.leir"])
    finally:
        w.stop()


# ------------------------------------------------------------------ the display and the command


def test_the_line_log_prints_a_line_per_changed_row():
    from leir_server.watch import LineLog

    class Table:
        root = "."
        table: list[Row] = []

        def rows(self):
            return self.table

    out, table = io.StringIO(), Table()
    log = LineLog(out)
    table.table = [Row("a.leir", "a", suggestions=[NextStep({"id": "split", "args": {}}, "Split loop i by 8")])]
    log(table)
    log(table)  # nothing changed: nothing printed
    table.table = [Row("a.leir", "a", latency_ms=2.0, latency_status="measured",
                       suggestions=[NextStep({"id": "split", "args": {}}, "Split loop i by 8", latency_ms=1.0,
                                               status="measured")])]
    log(table)
    table.table = []
    log(table)

    assert out.getvalue().splitlines() == [
        "a.leir\ta\tnot measured\tSplit loop i by 8\tnot measured",
        "a.leir\ta\t2 ms\tSplit loop i by 8\t2.00x",
        "a.leir\tremoved",
    ]


def test_the_live_table_redraws_over_its_last_drawing():
    from leir_server.watch import LiveTable

    class Table:
        root = "/some/dir"

        def rows(self):
            return [Row("a.leir", "a", "errors", "1:1: oops")]

    out = io.StringIO()
    live = LiveTable(out)
    live(Table())
    first = out.getvalue()
    live(Table())
    second = out.getvalue()[len(first):]

    assert not first.startswith("\x1b")
    lines = first.splitlines()
    assert lines[0].split() == ["file", "kernel", "latency", "best", "next", "step", "expected", "speedup"]
    assert lines[2].split() == ["a.leir", "a", "errors", "1:1:", "oops"]
    assert lines[-1] == "watching /some/dir (Ctrl-C stops)"
    # Back up over the whole previous drawing, clear, and draw again.
    assert second == f"\x1b[{len(lines)}F\x1b[J" + first


@pytest.mark.parametrize("ms, text", [(0.00457, "4.57 us"), (0.433, "0.433 ms"), (35.16, "35.2 ms"),
                                      (2500.0, "2.5 s")])
def test_latencies_are_shown_in_a_readable_unit(ms, text):
    from leir_server.watch import latency_text

    assert latency_text(ms, "measured") == text


def watch_command(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "leir_server", "watch", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def test_watch_once_prints_the_table_and_writes_the_report(tmp_path, examples_dir):
    (tmp_path / "matmul.leir").write_text((examples_dir / "matmul.leir").read_text())
    (tmp_path / "bad.leir").write_bytes(b"\xff")
    report = tmp_path / "report.json"

    out = watch_command(tmp_path, "--once", "--budget", "0", "--report", report)

    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["file", "kernel", "latency", "best", "next", "step", "expected", "speedup"]
    assert lines[2].split()[:3] == ["bad.leir", "-", "not"]
    assert lines[3].split()[:4] == ["matmul.leir", "matmul", "not", "measured"]
    assert lines[3].endswith("not measured")
    assert lines[-1] == f"report: {report}"
    rows = json.loads(report.read_text())["rows"]
    assert [(r["file"], r["kernel"], r["status"]) for r in rows] == [
        ("bad.leir", None, "not UTF-8"), ("matmul.leir", "matmul", "ok")]
    assert rows[1]["best_step"]["title"] in lines[3]


def test_watch_with_a_ranker_that_is_not_installed_says_so_and_ranks_with_the_heuristic(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    report = tmp_path / "report.json"

    out = watch_command(tmp_path, "--once", "--budget", "0", "--report", report, "--ranker", "no-such-ranker")

    assert out.returncode == 0, out.stderr
    assert "ranker 'no-such-ranker' did not load; ranking with the heuristic" in out.stderr
    data = json.loads(report.read_text())
    assert data["ranker"] == "heuristic" and data["rows"][0]["best_step"] is not None


@pytest.mark.slow  # starts the measurement engine: builds and times one kernel
def test_watch_once_measures_within_the_budget(tmp_path):
    (tmp_path / "scale.leir").write_text(SCALE)
    report = tmp_path / "report.json"

    out = watch_command(tmp_path, "--once", "--budget", "1", "--report", report, timeout=600)

    assert out.returncode == 0, out.stderr
    [row] = json.loads(report.read_text())["rows"]
    assert row["latency_status"] == "measured"
    assert row["latency_ms"] > 0
    assert [s["status"] for s in row["suggestions"]] == ["not measured"] * len(row["suggestions"])


@pytest.mark.parametrize("args, message", [
    (["/no/such/dir", "--once"], "leir-lsp watch: error: /no/such/dir: not a directory"),
    (["DIR", "--budget", "-1"], "leir-lsp watch: error: argument --budget: must be 0 or more, got -1"),
    (["DIR", "--target", "tpu"], "leir-lsp watch: error: argument --target: invalid choice"),
])
def test_watch_refuses_bad_arguments_in_one_line(tmp_path, args, message):
    out = watch_command(*[str(tmp_path) if a == "DIR" else a for a in args])

    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(message)

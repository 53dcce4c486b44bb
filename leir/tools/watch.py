"""Watch a directory of kernels: as ``.leir`` files and Python files with
TVMScript kernels change, re-check them, rank the next steps, measure the
current program and the best few steps in the background, and keep a table
(one row per kernel) and a JSON report of it.

    watcher = Watcher("kernels/", report="watch.json", target="llvm", budget=4)
    watcher.run_once()          # one pass: check, rank, measure, report
    watcher.start(); ...; watcher.stop()   # follow changes until stopped

The next steps come from ``leir.tools.suggest`` (the ranking the editor's code
actions use). Rows (``Row``): file, kernel, the current latency (measured,
from the cache, or "not measured"), the best next step and its expected
speedup, which is
``latency before / latency after`` of two measurements of this machine's
target, and is shown only when both were measured: a heuristic rank is never
presented as a speedup.

**Bursts.** An editor saving a file, a formatter rewriting it, and ``git
checkout`` all write several times in a row; each file is re-checked once
its writes have been quiet for ``debounce_s`` (``Debouncer``).

**Measurement.** Through ``leir.measure.MeasurementEngine`` (its worker
processes, its SQLite cache): cached results are used first and free;
``budget`` bounds the new measurements per version of a file (the current
program first, then the suggestions in rank order). Every suggestion is
applied and numerically verified against the current program
(``leir.transforms.verify``) before it is measured; one that fails shows why
and has no latency. A verified step is remembered (``leir.tools.suggest.
StepOutcomes``), so the editor's code actions show its measured speedup too. When a file changes again its pending measurements are
cancelled: they measure a program that no longer exists.

**Bad files** never stop the watcher: a file that vanishes (deleted, or
renamed away) leaves the table; one that is not UTF-8, is larger than
``leir.bridge.document.MAX_DOCUMENT_BYTES`` or cannot be read gets one row saying
so; a file with errors gets one row with the first error.

Checking a Python file imports TVM (to parse its kernels); nothing in the
file runs (``leir.bridge.tvmscript``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from leir.errors import LeirError
#: REFUSED: the status of a program (and of its steps) that the memory budget
#: keeps from being verified, run or measured (``leir.footprint``): nothing
#: was built, and no measurement of the budget was spent on it.
from leir.tools.measuring import REFUSED, EngineMeasurer, TopStepsPlan

logger = logging.getLogger(__name__)

#: File name endings watched: LEIR programs and Python files (those with a
#: TVMScript kernel are shown).
SUFFIXES = (".leir", ".py")
#: Quiet time after the last write before a file is re-checked: long enough
#: to fold an editor's save (write, rename, chmod) into one event, short
#: enough to feel immediate.
DEFAULT_DEBOUNCE_S = 0.3
#: New measurements per version of a file: the current program and the top
#: three suggestions, about ten seconds of one core on a small kernel.
DEFAULT_BUDGET = 4
#: Suggestions kept per kernel.
TOP_SUGGESTIONS = 3
#: Report format version: bumped when a field changes meaning.
REPORT_VERSION = 1

NOT_MEASURED = "not measured"


# ------------------------------------------------------------------ rows


@dataclass
class NextStep:
    """One next step for a kernel and what is known of its effect."""

    step: dict  # {"id": ..., "args": {...}}
    title: str
    #: Why it is ranked where it is: the computed facts behind its score.
    facts: tuple[str, ...] = ()
    #: "not measured", "verifying", "queued", "measuring", "measured",
    #: "cached", or the reason there is no latency ("failed: ...",
    #: "verification failed: ...", "not applicable: ...").
    status: str = NOT_MEASURED
    latency_ms: float | None = None

    def to_json(self) -> dict:
        return {"step": self.step, "title": self.title, "facts": list(self.facts), "status": self.status,
                "latency_ms": self.latency_ms}


@dataclass
class Row:
    """One kernel of one file, or one file that could not be checked
    (``kernel`` None, ``status`` says why)."""

    file: str  # relative to the watched directory, "/" separated
    kernel: str | None
    #: "ok", "errors", "not UTF-8", "too large", "unreadable".
    status: str = "ok"
    message: str | None = None
    latency_ms: float | None = None
    #: As ``NextStep.status``, for the current program.
    latency_status: str = NOT_MEASURED
    suggestions: list[NextStep] = field(default_factory=list)

    @property
    def best(self) -> NextStep | None:
        """The best next step known: the fastest measured suggestion when it
        beats the current program; else the best-ranked one not measured
        yet (it may); else the fastest measured (slower than now: the row
        says so)."""
        measured = sorted((s for s in self.suggestions if s.latency_ms is not None), key=lambda s: s.latency_ms)
        if measured and self.latency_ms is not None and measured[0].latency_ms < self.latency_ms:
            return measured[0]
        unmeasured = [s for s in self.suggestions if s.latency_ms is None and not _failed(s.status)]
        if unmeasured:
            return unmeasured[0]
        return measured[0] if measured else None

    @property
    def speedup(self) -> float | None:
        """Latency before / latency after the best step, when both were
        measured on this target; None otherwise."""
        best = self.best
        if best is None or best.latency_ms is None or self.latency_ms is None or best.latency_ms <= 0:
            return None
        return self.latency_ms / best.latency_ms

    def to_json(self) -> dict:
        best = self.best
        return {
            "file": self.file, "kernel": self.kernel, "status": self.status, "message": self.message,
            "latency_ms": self.latency_ms, "latency_status": self.latency_status,
            "best_step": None if best is None else {**best.step, "title": best.title},
            "expected_speedup": self.speedup,
            "speedup_status": "measured" if self.speedup is not None else NOT_MEASURED,
            "suggestions": [s.to_json() for s in self.suggestions],
        }


def _failed(status: str) -> bool:
    return status.startswith(("failed", "verification failed", "not applicable", REFUSED))


# ------------------------------------------------------------------ debouncing


class Debouncer:
    """Folds bursts of events per key: a key becomes due ``delay_s`` after
    its last ``touch``. ``clock`` is injectable so that tests need no sleep."""

    def __init__(self, delay_s: float, clock: Callable[[], float] = time.monotonic):
        self.delay_s = delay_s
        self.clock = clock
        self._last: dict[Any, float] = {}
        self._lock = threading.Lock()

    def touch(self, key) -> None:
        with self._lock:
            self._last[key] = self.clock()

    def due(self) -> list:
        """Keys quiet for ``delay_s``, each returned once per burst."""
        now = self.clock()
        with self._lock:
            ready = [k for k, t in self._last.items() if now - t >= self.delay_s]
            for k in ready:
                del self._last[k]
        return ready

    def next_due_in(self) -> float | None:
        """Seconds until the next key is due (0 if one is), None if none waits."""
        with self._lock:
            if not self._last:
                return None
            return max(0.0, min(self._last.values()) + self.delay_s - self.clock())

    def pending(self) -> bool:
        with self._lock:
            return bool(self._last)


# ------------------------------------------------------------------ measuring


# ------------------------------------------------------------------ kernels


@dataclass
class _Kernel:
    """One kernel of a file: a ``.leir`` file's program, or one PrimFunc of
    a Python file (raised to LEIR by ``leir.transforms.python_kernels``)."""

    name: str
    text: str  # the whole file
    language: str  # "leir" or "tvmscript"
    analysis: Any = None  # leir.semantics.Analysis; None when it cannot be transformed
    problem: str | None = None

    @property
    def namespace(self) -> str:
        """How ``leir.tools.measuring.StepOutcomes`` files its steps."""
        from leir.tools.measuring import tvmscript_namespace

        return "leir" if self.language == "leir" else tvmscript_namespace(self.name)

    def after(self, step):
        """The analysed program after ``step`` (typed TransformErrors)."""
        from leir import transforms

        if self.language == "leir":
            from leir.semantics import analyze

            return analyze(transforms.apply(self.analysis, step, self.name))
        from leir.transforms.python_kernels import load_kernel, tvmscript_apply

        return load_kernel(tvmscript_apply(self.text, step, self.name), self.name).ctx.analysis


def _first_error(source, diagnostics) -> str | None:
    for d in diagnostics:
        if d.is_error:
            return f"{source.format_location(d.span)}: {d.message}"
    return None


def _leir_stem(path: Path) -> str:
    """The kernel name ``leir apply`` gives a ``.leir`` file."""
    name = path.stem.replace("-", "_").replace(".", "_")
    return name if name.isidentifier() else "main"


def _kernels_of(path: Path, text: str) -> tuple[list[_Kernel], str | None]:
    """The kernels of a checked file, or ([], first error)."""
    from leir.bridge.document import check_text, language_of

    language = language_of(path)
    checked = check_text(text, language)
    error = _first_error(checked.source, checked.diagnostics)
    if error is not None:
        return [], error
    if language == "leir":
        from leir.bridge.document import load_leir

        return [_Kernel(_leir_stem(path), text, "leir", load_leir(text).analysis)], None
    return _tvmscript_kernels(text), None


def _tvmscript_kernels(text: str) -> list[_Kernel]:
    """Each PrimFunc of a Python file's kernels (a module's functions
    included), raised to LEIR."""
    import tvm

    from leir.bridge import tvmscript
    from leir.transforms.python_kernels import load_kernel

    names = []
    for k in tvmscript.load_document(text).kernels:
        if k.kind == "prim_func":
            names.append(k.name)
        elif k.module is not None:
            names.extend(gv.name_hint for gv, f in k.module.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    out = []
    for name in names:
        try:
            out.append(_Kernel(name, text, "tvmscript", load_kernel(text, name).ctx.analysis))
        except LeirError as e:
            out.append(_Kernel(name, text, "tvmscript", None, str(e)))
    return out


def _might_hold_kernels(text: str) -> bool:
    """Whether a Python file has a TVMScript kernel (a syntax scan: no TVM,
    nothing run)."""
    from leir.bridge.tvmscript.discovery import find_kernels

    kernels, _ = find_kernels(text)
    return bool(kernels)


def top_suggestions(kernel: _Kernel, target: str, k: int = TOP_SUGGESTIONS, measured=None,
                    ranker=None) -> list[NextStep]:
    """The ``k`` best next steps of a kernel by ``leir.tools.suggest`` (measured
    speedups first, then ``ranker``'s order: the heuristic's when None, whose
    steps scored 0 or less are left out; a model's scores may be negative,
    so every step it scored counts), at most one per
    (transformation, block, loop): three splits of one loop are one idea,
    not three. Only steps that change latency (the ones ``leir.tools.optimize``
    ranks); operator and algebraic rewrites change what is computed, which
    is the user's call."""
    from leir.tools.suggest import suggest

    if k <= 0:
        return []
    from leir.tools.ranking import HEURISTIC

    found = suggest(kernel.text, kernel.language, kernel=None if kernel.language == "leir" else kernel.name,
                    target=target, measured=measured, ranker=ranker)
    heuristic = ranker is None or ranker is HEURISTIC
    out, seen = [], set()
    for s in found:
        if s.speedup is None and (s.score <= 0 if heuristic else s.score == 0):
            continue
        a = s.step.args
        where = (s.step.id, a.get("block"), a.get("loop"), json.dumps(a.get("loops")))
        if where in seen:
            continue
        seen.add(where)
        row = NextStep(s.step.to_json(), s.title, tuple(s.facts))
        if s.after is not None and s.after.median_ms is not None:
            # Applied, verified and measured before (an editor's code action, an earlier pass).
            row.status, row.latency_ms = "cached", s.after.median_ms
        out.append(row)
        if len(out) == k:
            break
    return out


# ------------------------------------------------------------------ the watcher


@dataclass
class _FileState:
    rows: list[Row]
    generation: int
    #: (row, kernel) of each kernel that can be measured.
    measurable: list[tuple[Row, _Kernel]] = field(default_factory=list)
    futures: list[Future] = field(default_factory=list)


class _FilePlan(TopStepsPlan):
    """``TopStepsPlan`` for one version of one file: one ``run`` per kernel
    (``row`` and ``kernel`` say which), the budget shared by all of them;
    each status goes to the watcher's table (the row for the program, the
    suggestion for a step), unless the file changed meanwhile."""

    def __init__(self, watcher: "Watcher", rel: str, generation: int):
        super().__init__(None, watcher.budget)
        self.watcher, self.rel, self.generation = watcher, rel, generation
        self.row: Row | None = None
        self.kernel: _Kernel | None = None

    def current(self) -> bool:
        return self.watcher._current(self.rel, self.generation) is not None

    def known(self, s: NextStep) -> bool:
        return s.status == "cached"  # applied, verified and measured before (leir.tools.suggest found it)

    def apply(self, s: NextStep):
        return self.watcher._applied(self.rel, self.generation, self.kernel, s)

    def verify(self, s: NextStep, after) -> bool:
        if not self.watcher._verified(self.rel, self.generation, self.kernel, s, after):
            return False
        self.watcher._record(self.kernel, s, after)
        return True

    def label(self, s: NextStep | None) -> str:
        return f"{self.rel}:{self.kernel.name}" + ("" if s is None else f" {s.title}")

    def lookup(self, analysis):
        return self.watcher._lookup(analysis)

    def submit(self, analysis, label: str) -> Future:
        return self.watcher._measurer_now().submit(analysis, label)

    def submitted(self, target, future: Future) -> bool:
        with self.watcher._lock:
            state = self.watcher._current(self.rel, self.generation)
            if state is None:
                return False
            state.futures.append(future)
            return True

    def status(self, s: NextStep | None, status: str, latency_ms: float | None = None) -> None:
        values: dict = {"status": status}
        if status in ("cached", "measured"):
            values["latency_ms"] = latency_ms
        self.watcher._set(self.rel, self.generation, self.row if s is None else s, **values)


class Watcher:
    """Keeps the table of the kernels under ``root`` up to date.

    ``report``: where to write the JSON report after each change (atomically).
    ``budget``: new measurements per version of a file (0: measure nothing;
    cached results are still shown). ``measurer``: a ``Measurer`` (default:
    the measurement engine on ``target``, started on the first measurement).
    ``on_change(watcher)`` is called after each change of the table, from
    the watcher's thread.
    """

    def __init__(self, root: str | os.PathLike, *, report: str | os.PathLike | None = None, target: str = "llvm",
                 budget: int = DEFAULT_BUDGET, suggestions: int = TOP_SUGGESTIONS,
                 debounce_s: float = DEFAULT_DEBOUNCE_S, measurer: EngineMeasurer | None = None,
                 on_change: Callable[["Watcher"], None] | None = None, ranker=None):
        self.root = Path(root)
        #: What ranks each kernel's next steps (``leir.tools.ranking``; the heuristic when None).
        self.ranker = ranker
        if not self.root.is_dir():
            raise LeirError(f"{root}: not a directory")
        self.root = self.root.resolve()
        self.report_path = Path(report) if report is not None else None
        if budget < 0:
            raise LeirError(f"budget {budget}: must be 0 or more")
        self.target = target
        self.budget = budget
        self.suggestions = suggestions
        self.on_change = on_change
        self.debouncer = Debouncer(debounce_s)
        #: Re-checks per file (relative name), for callers that count work.
        self.checks: dict[str, int] = {}
        self._measurer = measurer
        self._lookup_only = None  # a MeasuredLookup when budget is 0 and no measurer was given
        self._files: dict[str, _FileState] = {}
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._plans: list[tuple[str, int]] = []  # (file, generation) to measure, in order
        self._measuring = False
        self._stopping = False
        self._dirty = False
        self._observer = None
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------- names

    def relative(self, path: str | os.PathLike) -> str | None:
        """A watched file's name relative to the root, or None for a file
        the watcher ignores (other suffixes, hidden directories, outside)."""
        p = Path(path)
        try:
            rel = (p if p.is_absolute() else self.root / p).relative_to(self.root)
        except ValueError:
            try:
                rel = p.resolve().relative_to(self.root)
            except (ValueError, OSError):
                return None
        parts = rel.parts
        if not parts or not parts[-1].endswith(SUFFIXES):
            return None
        if any(part.startswith(".") or part == "__pycache__" for part in parts):
            return None  # editors' swap files, .git, temporary files of atomic writes
        return rel.as_posix()

    def scan(self) -> list[str]:
        """Every watched file under the root, sorted."""
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            for name in filenames:
                rel = self.relative(Path(dirpath) / name)
                if rel is not None:
                    found.append(rel)
        return sorted(found)

    # ---------------------------------------------------------------- checking

    def refresh(self, rel: str) -> None:
        """Re-check one file (relative name) now, replace its rows, cancel
        its pending measurements and plan new ones."""
        with self._lock:
            self.checks[rel] = self.checks.get(rel, 0) + 1
            old = self._files.get(rel)
            generation = (old.generation + 1) if old else 1
            if old is not None:
                old.generation = generation  # measurements still running for it are now stale
                for f in old.futures:
                    f.cancel()
        rows, measurable = self._check(rel)
        with self._lock:
            current = self._files.get(rel)
            if current is not None and current.generation != generation:
                return  # refreshed again meanwhile (another thread): that one wins
            if rows is None:
                self._files.pop(rel, None)
            else:
                self._files[rel] = _FileState(rows, generation, measurable)
                if measurable:
                    self._plans.append((rel, generation))
            self._dirty = True
            self._wake.notify_all()

    def _check(self, rel: str) -> tuple[list[Row] | None, list[tuple[Row, _Kernel]]]:
        """The rows of one file (None when it is not, or no longer, a file
        with kernels), and the (row, kernel) pairs that can be measured."""
        from leir.bridge.document import MAX_DOCUMENT_BYTES

        path = self.root / rel
        try:
            size = path.stat().st_size
            if not path.is_file():
                return None, []
            if size > MAX_DOCUMENT_BYTES:
                return [Row(rel, None, "too large", f"{size} bytes is more than the {MAX_DOCUMENT_BYTES} leir reads")], []
            data = path.read_bytes()
        except FileNotFoundError:
            return None, []  # deleted, or renamed away: the rename's other half adds the new name
        except OSError as e:
            return [Row(rel, None, "unreadable", e.strerror or str(e))], []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return [Row(rel, None, "not UTF-8", f"byte 0x{data[e.start]:02x} at offset {e.start}")], []
        is_python = rel.endswith(".py")
        if is_python and not _might_hold_kernels(text) and rel not in self._files:
            return None, []  # a plain Python file (or one that never had a kernel)
        try:
            kernels, error = _kernels_of(path, text)
        except LeirError as e:
            return [Row(rel, None, "errors", str(e))], []
        except Exception as e:  # noqa: BLE001 - a bug in a checker must not stop the watcher
            logger.exception("checking %s", rel)
            return [Row(rel, None, "errors", f"internal error while checking: {type(e).__name__}: {e}")], []
        if error is not None:
            return [Row(rel, None, "errors", error)], []
        if not kernels:
            return (None, []) if is_python else ([Row(rel, None, "errors", "no kernel")], [])
        rows, measurable = [], []
        for k in kernels:
            if k.analysis is None:
                rows.append(Row(rel, k.name, "errors", k.problem))
                continue
            try:
                row = Row(rel, k.name, suggestions=top_suggestions(k, self.target, self.suggestions,
                                                                   self._measured_lookup(), self.ranker))
            except Exception as e:  # noqa: BLE001 - a bug in ranking costs the suggestions, not the row
                logger.exception("ranking %s:%s", rel, k.name)
                row = Row(rel, k.name, "ok", f"could not rank the next steps: {type(e).__name__}: {e}")
            rows.append(row)
            measurable.append((row, k))
        return rows, measurable

    # ---------------------------------------------------------------- measuring

    def _current(self, rel: str, generation: int) -> _FileState | None:
        state = self._files.get(rel)
        return state if state is not None and state.generation == generation else None

    def _measure_plan(self, rel: str, generation: int) -> None:
        """Measure one version of one file: each kernel's program, then its
        suggestions, cache first, at most ``budget`` new measurements
        (``leir.tools.measuring.TopStepsPlan``)."""
        with self._lock:
            state = self._current(rel, generation)
            if state is None:
                return
            work = list(state.measurable)
        plan = _FilePlan(self, rel, generation)
        for row, kernel in work:
            if self._over_budget(rel, generation, row, kernel):
                continue
            plan.row, plan.kernel = row, kernel
            plan.run(kernel.analysis, list(row.suggestions))
            if self._current(rel, generation) is None:
                return

    def _measurer_now(self) -> EngineMeasurer:
        if self._measurer is None:
            from leir.tools.measuring import engine_measurer

            self._measurer = engine_measurer(self.target)
        return self._measurer

    def _measured_lookup(self):
        """The cached latencies ``leir.tools.suggest`` reads (a ``MeasuredLookup``), or None."""
        if self._measurer is None and self.budget == 0:
            # Nothing will be measured: read the cache without an engine.
            if self._lookup_only is None:
                from leir.tools.measuring import MeasuredLookup

                try:
                    self._lookup_only = MeasuredLookup.for_target(self.target) or False
                except LeirError as e:
                    logger.warning("%s", e)
                    self._lookup_only = False
            return self._lookup_only or None
        try:
            return getattr(self._measurer_now(), "measured", None)
        except LeirError as e:
            logger.warning("%s", e)
            return None

    def _lookup(self, analysis):
        try:
            if self._measurer is None and self.budget == 0:
                lookup = self._measured_lookup()
                return lookup.measured(analysis) if lookup is not None else None
            return self._measurer_now().lookup(analysis)
        except LeirError:
            return None

    def _record(self, kernel: _Kernel, s: NextStep, after) -> None:
        from leir.transforms import step_from_json

        step = step_from_json(s.step)
        recorder = self._measurer if self._measurer is not None else self._measured_lookup()
        if recorder is not None:
            recorder.record(kernel.analysis, step, after, kernel.namespace)

    def _set(self, rel: str, generation: int, target: Row | NextStep, **values) -> bool:
        with self._lock:
            if self._current(rel, generation) is None:
                return False
            for name, value in values.items():
                setattr(target, "latency_status" if isinstance(target, Row) and name == "status" else name, value)
            self._dirty = True
            self._wake.notify_all()
            return True

    def _applied(self, rel, generation, kernel: _Kernel, s: NextStep):
        """The analysed program after ``s``, or None (and why, in its status)."""
        from leir.transforms import TransformError, step_from_json

        try:
            return kernel.after(step_from_json(s.step))
        except TransformError as e:
            self._set(rel, generation, s, status=f"not applicable: {e.short}")
        except Exception as e:  # noqa: BLE001 - TVM raises anything
            self._set(rel, generation, s, status=f"not applicable: {type(e).__name__}: {e}")
        return None

    def _over_budget(self, rel, generation, row: Row, kernel: _Kernel) -> bool:
        """Whether running the kernel's program would exceed the memory budget
        (``LEIR_MEMORY_BUDGET_MB``); then the row and each of its steps say
        so, and none of them is verified or measured."""
        from leir.footprint import check_budget

        try:
            message = check_budget(kernel.analysis, "run")
        except LeirError as e:  # a budget in the environment that is not a number
            message = str(e)
        if message is None:
            return False
        self._set(rel, generation, row, status=f"{REFUSED}: {message}")
        for s in list(row.suggestions):
            self._set(rel, generation, s, status=f"{REFUSED}: the program is over the memory budget")
        return True

    def _verified(self, rel, generation, kernel: _Kernel, s: NextStep, after) -> bool:
        from leir.transforms import verify

        self._set(rel, generation, s, status="verifying")
        from leir.footprint import MemoryBudgetExceeded

        try:
            result = verify(kernel.analysis, after)
        except MemoryBudgetExceeded as e:  # the step made the program larger than the budget
            self._set(rel, generation, s, status=f"{REFUSED}: {e}")
            return False
        except Exception as e:  # noqa: BLE001 - a build failure is a failed verification
            self._set(rel, generation, s, status=f"verification failed: {type(e).__name__}: {e}")
            return False
        if not result.ok:
            self._set(rel, generation, s, status=f"verification failed: {result.summary()}")
            return False
        return True  # "verifying" until the measurement (or the cache) says more

    def _measure_loop(self) -> None:
        while True:
            with self._lock:
                while not self._plans and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                rel, generation = self._plans.pop(0)
                self._measuring = True
            try:
                self._measure_plan(rel, generation)
            except Exception:  # noqa: BLE001 - one file's failure must not stop the others
                logger.exception("measuring %s", rel)
            finally:
                with self._lock:
                    self._measuring = False
                    self._wake.notify_all()

    # ---------------------------------------------------------------- the table

    def rows(self) -> list[Row]:
        """A copy of the table, by file then kernel."""
        with self._lock:
            out = []
            for rel in sorted(self._files):
                for row in self._files[rel].rows:
                    out.append(replace(row, suggestions=[replace(s) for s in row.suggestions]))
            return out

    def report(self) -> dict:
        return {
            "version": REPORT_VERSION,
            "root": str(self.root),
            "target": self.target,
            "device": self._measurer.device if self._measurer is not None else None,
            "budget": self.budget,
            "ranker": getattr(self.ranker, "name", "heuristic"),
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "rows": [r.to_json() for r in self.rows()],
        }

    def write_report(self) -> None:
        if self.report_path is None:
            return
        from leir.files import write_atomic

        text = json.dumps(self.report(), indent=1) + "\n"
        try:
            write_atomic(self.report_path, text)
        except OSError as e:
            logger.warning("cannot write the report %s: %s", self.report_path, e.strerror or e)

    def _publish(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
        self.write_report()
        if self.on_change is not None:
            try:
                self.on_change(self)
            except Exception:  # noqa: BLE001 - a display problem must not stop the watcher
                logger.exception("on_change")

    # ---------------------------------------------------------------- running

    def busy(self) -> bool:
        """Whether checks or measurements are pending."""
        with self._lock:
            if self._plans or self._measuring or self.debouncer.pending():
                return True
            return any(not f.done() for s in self._files.values() for f in s.futures)

    def run_once(self, timeout_s: float | None = None) -> bool:
        """Check every file, measure within the budget, write the report.
        Returns False when ``timeout_s`` passed before the measurements
        finished (the report then says which are still "measuring")."""
        for rel in self.scan():
            self.refresh(rel)
            self._publish()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        done = True
        while True:
            with self._lock:
                plan = self._plans.pop(0) if self._plans else None
            if plan is None:
                break
            self._measure_plan(*plan)
            self._publish()
        while self.busy():
            if deadline is not None and time.monotonic() > deadline:
                done = False
                break
            with self._lock:
                self._wake.wait(0.2)
            self._publish()
        self._dirty = True
        self._publish()
        return done

    def start(self) -> None:
        """Check every file, then follow changes (watchdog) in the background."""
        from watchdog.observers import Observer

        handler = _Events(self)
        self._observer = Observer()
        self._observer.schedule(handler, str(self.root), recursive=True)
        self._observer.start()
        for name, fn in (("leir-watch-check", self._check_loop), ("leir-watch-measure", self._measure_loop)):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        for rel in self.scan():
            self.debouncer.touch(rel)
        with self._lock:
            self._wake.notify_all()

    def touched(self, path: str | os.PathLike) -> None:
        """A file event (watchdog's, or a caller's)."""
        rel = self.relative(path)
        if rel is None:
            return
        self.debouncer.touch(rel)
        with self._lock:
            self._wake.notify_all()

    def touched_directory(self, path: str | os.PathLike) -> None:
        """A directory appeared, vanished or moved: every file the table has
        under it, and every file now under it, is checked again."""
        p = Path(path)
        try:
            prefix = (p if p.is_absolute() else self.root / p).relative_to(self.root).as_posix()
        except ValueError:
            return
        if prefix == ".":
            prefix = ""
        with self._lock:
            known = [rel for rel in self._files if not prefix or rel.startswith(prefix + "/")]
        for rel in known:
            self.debouncer.touch(rel)
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
                for name in filenames:
                    rel = self.relative(Path(dirpath) / name)
                    if rel is not None:
                        self.debouncer.touch(rel)
        with self._lock:
            self._wake.notify_all()

    def _check_loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                wait = self.debouncer.next_due_in()
                if not self._dirty:
                    self._wake.wait(wait if wait is not None else 1.0)
                if self._stopping:
                    return
            for rel in self.debouncer.due():
                try:
                    self.refresh(rel)
                except Exception:  # noqa: BLE001 - never let one file stop the watcher
                    logger.exception("re-checking %s", rel)
            self._publish()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no check or measurement is pending (for tests and
        scripts); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.busy() or self._dirty:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._lock:
                self._wake.wait(min(left, 0.1))
        return True

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(5)
        with self._lock:
            self._stopping = True
            for state in self._files.values():
                for f in state.futures:
                    f.cancel()
            self._wake.notify_all()
        for t in self._threads:
            t.join(5)
        if self._measurer is not None:
            try:
                self._measurer.close()
            except Exception:  # noqa: BLE001
                logger.exception("closing the measurement engine")


class _Events:
    """watchdog's events, as touches of the files they name."""

    def __init__(self, watcher: Watcher):
        self.watcher = watcher

    def dispatch(self, event) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads do not change a file
        for path in (getattr(event, "src_path", None), getattr(event, "dest_path", None)):
            if not path:
                continue
            if event.is_directory:
                if event.event_type in ("created", "deleted", "moved"):
                    # A directory renamed or removed takes its files with it,
                    # and one moved in brings files no event named.
                    self.watcher.touched_directory(os.fsdecode(path))
            else:
                self.watcher.touched(os.fsdecode(path))

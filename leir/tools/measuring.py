"""Measuring programs: one ``Measurer`` protocol for every tool that times
programs, its implementations, and the plan that measures a program and
then its top next steps.

- ``Measurer``: a callable from analysed programs to a ``Timing`` each (a
  batch lets an engine use its workers); optionally ``paired(before,
  after, rounds)``, a comparison timed turn about without any cache
  (``measure_pair``). ``leir.tools.optimize`` searches through one.
- ``EngineMeasurer``: the measurement engine (``leir.measure``) behind it,
  with what background measuring needs besides (``submit``, ``lookup``,
  ``record``); ``FallbackMeasurer``: an in-process compile and
  ``time_evaluator`` loop for when the engine is not importable;
  ``leir.tools.jobs`` has a proxy that asks the server's engine from a job
  process.
- ``TopStepsPlan``: measure a program, then the programs its top next steps
  produce, cache first, within a budget: what watch mode and the server's
  auto-measure both do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import statistics
import threading
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, runtime_checkable

from leir.errors import LeirError
from leir.measure.timing import CONFIRM_ROUNDS, MIN_GAIN
from leir.semantics import Analysis

if TYPE_CHECKING:
    from leir.measure import Measurement, MeasurementCache
    from leir.transforms.base import Step

logger = logging.getLogger(__name__)

#: The file, next to the measurement cache, that remembers what program a
#: verified step produced.
OUTCOMES_NAME = "step-outcomes.sqlite"


@dataclass(frozen=True)
class Timing:
    """One measured program: its median latency, or why there is none."""

    ms: float | None
    error: str | None = None
    #: Answered from a cache rather than timed now.
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.ms is not None


@runtime_checkable
class Measurer(Protocol):
    """Times each program of a batch (a batch lets an engine use its
    workers). A measurer may also have ``paired(before, after, rounds) ->
    Paired``, a comparison timed turn about without any cache
    (``measure_pair``), and ``close()``."""

    def __call__(self, analyses: Sequence[Analysis]) -> list[Timing]: ...


@dataclass(frozen=True)
class Paired:
    """Two programs timed turn about: every run of each (ms), and the median
    of each round."""

    before_runs: tuple[float, ...]
    after_runs: tuple[float, ...]
    before_rounds: tuple[float, ...]
    after_rounds: tuple[float, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.before_runs) and bool(self.after_runs)

    @property
    def rounds(self) -> int:
        return len(self.before_rounds)

    @property
    def before_ms(self) -> float:
        return statistics.median(self.before_runs)

    @property
    def after_ms(self) -> float:
        return statistics.median(self.after_runs)

    def confirms(self, min_gain: float = MIN_GAIN) -> bool:
        """The second program is faster beyond the noise: its fastest run and
        its median both at least ``min_gain`` better than the first's, and
        faster in every round."""
        if not self.ok:
            return False
        keep = 1 - min_gain
        return (min(self.after_runs) < min(self.before_runs) * keep and self.after_ms < self.before_ms * keep
                and all(a < b for b, a in zip(self.before_rounds, self.after_rounds)))


def measure_pair(measurer: Measurer, before: Analysis, after: Analysis, rounds: int = CONFIRM_ROUNDS) -> Paired:
    """Time ``before`` and ``after`` turn about: the measurer's own
    ``paired`` when it has one (the engine's compare: one worker, fresh
    builds), else ``rounds`` rounds of one call per program (a measurer
    without ``paired`` is taken to have no cache)."""
    if hasattr(measurer, "paired"):
        return measurer.paired(before, after, rounds)
    b_runs, a_runs = [], []
    for _ in range(rounds):
        [tb] = measurer([before])
        [ta] = measurer([after])
        if not (tb.ok and ta.ok):
            return Paired((), (), (), (), tb.error or ta.error)
        b_runs.append(tb.ms)
        a_runs.append(ta.ms)
    return Paired(tuple(b_runs), tuple(a_runs), tuple(b_runs), tuple(a_runs))


class FallbackMeasurer:
    """FALLBACK measurer, used only when ``leir.measure`` (the measurement
    engine, with its worker processes and SQLite cache) is not importable:
    builds in this process with ``leir.bridge.run.compile_program`` and times with
    TVM's ``time_evaluator``: ``repeat`` runs of at least ``min_repeat_ms``
    each (after one warm-up call), median of their per-call means."""

    def __init__(self, target: str = "llvm", repeat: int = 5, min_repeat_ms: int = 20):
        self.target = target
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms

    def __call__(self, analyses: Sequence[Analysis]) -> list[Timing]:
        return [self.one(a) for a in analyses]

    def one(self, analysis: Analysis) -> Timing:
        import tvm

        from leir.inputs import random_inputs, zeros
        from leir.bridge.run import compile_program

        try:
            compiled = compile_program(analysis, self.target)
            inputs = random_inputs(analysis, 0)
            dev = compiled.device
            args = [tvm.runtime.tensor(inputs[t.name], dev) for t in analysis.inputs()]
            args += [tvm.runtime.tensor(zeros(t), dev) for t in analysis.outputs()]
            timer = compiled.module.time_evaluator("main", dev, number=1, repeat=self.repeat,
                                                   min_repeat_ms=self.min_repeat_ms)
            compiled.module["main"](*args)  # warm-up: first-touch page faults, thread pool start
            seconds = list(timer(*args).results)
            return Timing(statistics.median(seconds) * 1e3)
        except LeirError as e:
            return Timing(None, str(e))
        except Exception as e:  # TVM reports runtime faults as assorted types
            return Timing(None, f"{type(e).__name__}: {e}".splitlines()[0])

    def paired(self, before: Analysis, after: Analysis, rounds: int = CONFIRM_ROUNDS) -> Paired:
        """Both programs built once, then timed turn about, ``rounds`` rounds
        of ``repeat`` runs each."""
        try:
            timers = [self._timer(a) for a in (before, after)]
            runs: list[list[list[float]]] = [[], []]
            for _ in range(rounds):
                for k, timer in enumerate(timers):
                    runs[k].append([s * 1e3 for s in timer()])
        except LeirError as e:
            return Paired((), (), (), (), str(e))
        except Exception as e:  # noqa: BLE001 - TVM reports runtime faults as assorted types
            return Paired((), (), (), (), f"{type(e).__name__}: {e}".splitlines()[0])
        flat = [tuple(x for r in side for x in r) for side in runs]
        medians = [tuple(statistics.median(r) for r in side) for side in runs]
        return Paired(flat[0], flat[1], medians[0], medians[1])

    def _timer(self, analysis: Analysis) -> Callable[[], list[float]]:
        import tvm

        from leir.inputs import random_inputs, zeros
        from leir.bridge.run import compile_program

        compiled = compile_program(analysis, self.target)
        inputs = random_inputs(analysis, 0)
        dev = compiled.device
        args = [tvm.runtime.tensor(inputs[t.name], dev) for t in analysis.inputs()]
        args += [tvm.runtime.tensor(zeros(t), dev) for t in analysis.outputs()]
        compiled.module["main"](*args)  # warm-up
        timer = compiled.module.time_evaluator("main", dev, number=1, repeat=self.repeat,
                                               min_repeat_ms=self.min_repeat_ms)
        return lambda: list(timer(*args).results)


class EngineMeasurer:
    """The measurement engine (``leir.measure.MeasurementEngine``) as a
    ``Measurer``: a batch goes through ``measure_many`` (its workers build
    in parallel; timings take the CPU alone), results come from its SQLite
    cache when it has them. The engine also checks every program against
    the NumPy evaluation; a wrong one comes back as a failure.

    What a background measurer needs besides (watch mode, the server's
    auto-measure, ``TopStepsPlan``): ``submit`` one program for a
    ``Future`` of its ``Measurement``, ``lookup`` its cached measurement
    without measuring, and ``record`` what a verified step produced, so that
    the editor's code actions show its measured speedup (``measured``: the
    ``MeasuredLookup`` these read, made on first use)."""

    def __init__(self, engine, *, measured=None, priority: int = 0):
        self.engine = engine
        self.target = engine.target
        self.device = engine.device
        #: The engine's priority for ``submit`` (the server's background work runs below the user's).
        self.priority = priority
        self._measured = measured

    def __call__(self, analyses: Sequence[Analysis]) -> list[Timing]:
        out = []
        for m in self.engine.measure_many(list(analyses)):
            if m.error is not None or m.median_ms is None:
                out.append(Timing(None, str(m.error or "no latency"), bool(m.cached)))
            else:
                out.append(Timing(float(m.median_ms), None, bool(m.cached)))
        return out

    def paired(self, before: Analysis, after: Analysis, rounds: int = CONFIRM_ROUNDS) -> Paired:
        """The engine's ``compare``: one worker builds both, checks both
        against the NumPy evaluation, times them turn about; no cache."""
        p = self.engine.compare(before, after, rounds=rounds).result()
        if not p.ok:
            return Paired((), (), (), (), str(p.error))
        return Paired(tuple(p.before.results_ms), tuple(p.after.results_ms), tuple(p.before_rounds_ms),
                      tuple(p.after_rounds_ms))

    @property
    def measured(self):
        """The ``MeasuredLookup`` over the engine's cache (None without one)."""
        if self._measured is None:
            self._measured = MeasuredLookup.for_engine(self.engine) or False
        return self._measured or None

    def lookup(self, analysis):
        """The cached ``Measurement`` of exactly ``analysis``, or None."""
        measured = self.measured
        return measured.measured(analysis) if measured is not None else None

    def record(self, before, step, after, namespace: str) -> None:
        """Remember that the verified ``step`` took ``before`` to ``after``."""
        if self.measured is not None:
            self.measured.record(before, step, after, namespace)

    def submit(self, analysis, label: str) -> Future:
        """A ``Future`` of ``analysis``'s ``Measurement`` (cache first)."""
        return self.engine.submit(analysis, label=label, priority=self.priority)

    def close(self) -> None:
        self.engine.close()


def engine_measurer(target: str = "llvm", **kwargs) -> EngineMeasurer:
    """The measurement engine on ``target`` (its workers start on the first
    job). No vendor timing per program: a search compares candidates with
    each other, and a row of watch mode a kernel with its own next step."""
    from leir.measure import MeasurementEngine

    return EngineMeasurer(MeasurementEngine(target, vendor=False), **kwargs)


def default_measurer(target: str = "llvm") -> Measurer:
    """The measurement engine for ``target``; the in-process fallback when
    ``leir.measure`` is not importable or ``LEIR_MEASURE=fallback``."""
    if os.environ.get("LEIR_MEASURE") != "fallback":
        try:
            return engine_measurer(target)
        except ImportError:
            pass
    return FallbackMeasurer(target)


# ------------------------------------------------------------ what a step produced


def program_digest(analysis: Analysis) -> str:
    """SHA-256 of a program's structural text (``leir.measure.key``): equal
    for two programs that build to the same kernel."""
    from leir.measure.key import structural_text

    return hashlib.sha256(structural_text(analysis).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PlanAhead:
    """The rest of a plan from a program: its next step is step ``index``
    of ``of`` toward ``goal`` ("a tiled contraction"), ending at the
    program ``end`` (text). ``predicted_ms``: a cost model's figure for
    ``end`` when it was not measured."""

    goal: str
    index: int
    of: int
    steps: tuple[Step, ...]
    end: str
    predicted_ms: float | None = None

    @property
    def next_step(self) -> Step:
        return self.steps[0]

    def end_analysis(self) -> Analysis | None:
        from leir.bridge.document import load_leir

        doc = load_leir(self.end)
        return doc.analysis if doc.ok else None


class StepOutcomes:
    """(program, step) -> the program the step produced, for steps that were
    applied and verified. An SQLite file next to the measurement cache
    (WAL, as the cache: the server, its workers and the CLI may share it).

    ``namespace`` separates steps that name blocks as LEIR does from steps
    on a Python kernel, which name them as the kernel's TIR does."""

    def __init__(self, directory: str | os.PathLike | None = None):
        from leir.measure.cache import cache_directory

        self.path = cache_directory(directory) / OUTCOMES_NAME
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS outcomes (program TEXT NOT NULL, step TEXT NOT NULL,"
                               " after TEXT NOT NULL, PRIMARY KEY (program, step))")
            self._conn.execute("CREATE TABLE IF NOT EXISTS plans (program TEXT NOT NULL, namespace TEXT NOT NULL,"
                               " plan TEXT NOT NULL, PRIMARY KEY (program, namespace))")
        except (OSError, sqlite3.Error) as e:
            raise LeirError(f"step outcomes {self.path}: cannot open ({e})") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @staticmethod
    def _step_key(step: Step, namespace: str) -> str:
        return f"{namespace}:{step.key}"

    def record(self, before: Analysis, step: Step, after: Analysis, namespace: str = "leir") -> None:
        """Remember that ``step`` took ``before`` to ``after`` (verified)."""
        from leir.printer import print_program

        row = (program_digest(before), self._step_key(step, namespace), print_program(after.complete_program()))
        with self._lock:
            try:
                self._conn.execute("INSERT OR REPLACE INTO outcomes (program, step, after) VALUES (?, ?, ?)", row)
            except sqlite3.Error as e:
                raise LeirError(f"step outcomes {self.path}: cannot write ({e})") from None

    def after_text(self, before_digest: str, step: Step, namespace: str = "leir") -> str | None:
        with self._lock:
            try:
                row = self._conn.execute("SELECT after FROM outcomes WHERE program = ? AND step = ?",
                                         (before_digest, self._step_key(step, namespace))).fetchone()
            except sqlite3.Error:
                return None
        return None if row is None else row[0]

    def record_plan(self, programs: Sequence[Analysis], steps: Sequence[Step], end: Analysis, goal: str,
                    namespace: str = "leir", predicted_ms: float | None = None) -> None:
        """Remember a plan that was applied and verified: ``programs[k]`` is
        the program before ``steps[k]``, ``end`` the program after the last.
        Each of its programs then knows the rest of the plan from it
        (``plan_ahead``); a later plan from one program replaces an earlier."""
        from leir.printer import print_program

        end_text = print_program(end.complete_program())
        n = len(steps)
        rows = []
        for k, (before, step) in enumerate(zip(programs, steps)):
            plan = {"goal": goal, "index": k + 1, "of": n, "steps": [s.to_json() for s in steps[k:]], "end": end_text,
                    "predicted_ms": predicted_ms}
            rows.append((program_digest(before), namespace, json.dumps(plan, sort_keys=True)))
        with self._lock:
            try:
                self._conn.executemany("INSERT OR REPLACE INTO plans (program, namespace, plan) VALUES (?, ?, ?)",
                                       rows)
            except sqlite3.Error as e:
                raise LeirError(f"step outcomes {self.path}: cannot write ({e})") from None

    def plan_ahead(self, before: Analysis | str, namespace: str = "leir") -> "PlanAhead | None":
        """The rest of a recorded plan from ``before`` (an analysis or its
        digest), or None."""
        digest = before if isinstance(before, str) else program_digest(before)
        with self._lock:
            try:
                row = self._conn.execute("SELECT plan FROM plans WHERE program = ? AND namespace = ?",
                                         (digest, namespace)).fetchone()
            except sqlite3.Error:
                return None
        if row is None:
            return None
        from leir.transforms.base import Step

        try:
            d = json.loads(row[0])
            return PlanAhead(d["goal"], int(d["index"]), int(d["of"]),
                             tuple(Step(s["id"], s["args"]) for s in d["steps"]), d["end"], d.get("predicted_ms"))
        except (ValueError, KeyError, TypeError):
            return None  # a row this version cannot read: no plan, not a crash

    def after(self, before: Analysis | str, step: Step, namespace: str = "leir") -> Analysis | None:
        """The analysed program ``step`` produced from ``before`` (an analysis
        or its digest), or None when it was never recorded."""
        from leir.bridge.document import load_leir

        digest = before if isinstance(before, str) else program_digest(before)
        text = self.after_text(digest, step, namespace)
        if text is None:
            return None
        doc = load_leir(text)
        return doc.analysis if doc.ok else None


# ------------------------------------------------------------ cached latencies


@dataclass
class MeasuredLookup:
    """Cached latencies on one target and device: the measurement cache, read
    only (nothing is measured here)."""

    #: The target as the measurement key names it (``MeasurementEngine``'s).
    target_key: str
    device: str
    toolchain: str
    cache: "MeasurementCache"
    outcomes: StepOutcomes | None = None
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def record(self, before: Analysis, step: "Step", after: Analysis, namespace: str) -> None:
        """Remember in ``outcomes`` (when there are any) that the verified
        ``step`` took ``before`` to ``after``; a failure to write is logged,
        never raised (what is known is a cache)."""
        if self.outcomes is not None:
            try:
                self.outcomes.record(before, step, after, namespace)
            except LeirError as e:
                logger.warning("%s", e)

    @classmethod
    def for_target(cls, target: str = "llvm", cache: "MeasurementCache | None" = None,
                   outcomes: StepOutcomes | None = None) -> "MeasuredLookup | None":
        """The lookup of this machine's CPU ("llvm") or GPU ("cuda"); None for
        "cuda" without a GPU. (Devices behind an RPC tracker are named by the
        tracker: use ``for_engine``.)"""
        from leir.measure import MeasurementCache
        from leir.measure.device import cpu_name, gpu_name
        from leir.measure.key import default_toolchain

        if target == "llvm":
            device = cpu_name()
        elif target == "cuda":
            device = gpu_name()
            if device is None:
                return None
        else:
            return None
        return cls(target, device, default_toolchain(), cache or MeasurementCache(),
                   outcomes if outcomes is not None else _default_outcomes())

    @classmethod
    def for_engine(cls, engine, outcomes: StepOutcomes | None = None) -> "MeasuredLookup | None":
        """The lookup matching a ``MeasurementEngine`` (its target, device and cache)."""
        if engine.cache is None:
            return None
        return cls(engine.target_key, engine.device, engine.toolchain, engine.cache,
                   outcomes if outcomes is not None else _default_outcomes())

    def measured(self, analysis: Analysis) -> "Measurement | None":
        """The cached measurement of exactly this program, or None."""
        from leir.measure.key import measurement_key

        try:
            memo = self._memo.get(id(analysis))
            if memo is None or memo[0] is not analysis:
                memo = self._memo[id(analysis)] = (analysis, measurement_key(analysis, self.target_key, self.device,
                                                                             self.toolchain))
                if len(self._memo) > 64:
                    self._memo.pop(next(iter(self._memo)))
            return self.cache.lookup(memo[1])
        except LeirError:
            return None

    def plan_ahead(self, before: Analysis | str, namespace: str = "leir") -> "tuple[PlanAhead, Measurement | None] | None":
        """The rest of a recorded plan from ``before`` and the cached
        measurement of its end program (None when only predicted)."""
        if self.outcomes is None:
            return None
        ahead = self.outcomes.plan_ahead(before, namespace)
        if ahead is None:
            return None
        end = ahead.end_analysis()
        return ahead, (self.measured(end) if end is not None else None)

    def after(self, before: Analysis | str, step: Step, namespace: str = "leir") -> "Measurement | None":
        """The cached measurement of the program ``step`` produced from
        ``before`` (an analysis, or its ``program_digest``)."""
        if self.outcomes is None:
            return None
        after = self.outcomes.after(before, step, namespace)
        return None if after is None else self.measured(after)


_outcomes_lock = threading.Lock()
_outcomes: dict[str, StepOutcomes] = {}


def _default_outcomes() -> StepOutcomes | None:
    """One ``StepOutcomes`` per cache directory per process."""
    from leir.measure.cache import cache_directory

    where = str(cache_directory())
    with _outcomes_lock:
        if where not in _outcomes:
            try:
                _outcomes[where] = StepOutcomes()
            except LeirError:
                return None
        return _outcomes[where]


def default_outcomes() -> StepOutcomes | None:
    return _default_outcomes()


def tvmscript_namespace(kernel: str) -> str:
    """The ``StepOutcomes`` namespace of steps on a Python kernel."""
    return f"tvmscript:{kernel}"


# ------------------------------------------------------------ the plan


#: The status word of a program the memory budget kept from being built
#: (``LEIR_MEMORY_BUDGET_MB``): no measurement is spent on it.
REFUSED = "refused"


class TopStepsPlan:
    """Measure a program, then the programs its next steps produce: what
    watch mode does for each kernel of a changed file, and the server's
    auto-measure for a saved document.

    ``run(program, steps)`` measures ``program`` (cache first), then takes
    the steps in order (the best-ranked first): a step whose effect is
    already ``known`` is skipped; the plan stops when the program is no
    longer ``current`` (the file changed meanwhile); the program after the
    step comes from ``apply`` (None: not applicable, the hook says why); its
    cached measurement is looked up, and without one it is measured only
    while the budget lasts, after ``verify`` (False: the hook says why).

    ``budget``: new measurements at most, shared by every ``run`` of the
    plan (None: no limit). A cached result costs nothing, nor does a
    program the memory budget refuses before anything is built; a
    submission that fails costs one.

    Every change of what is known of a target (None for the program, else
    the step) goes to ``status(target, status, latency_ms)``: "cached" and
    "measured" with a latency, "measuring", "refused: ...", "failed: ...".
    The hooks are methods to override; by default ``lookup`` and ``submit``
    go to ``measurer`` (an ``EngineMeasurer``, or anything with those two).
    """

    def __init__(self, measurer=None, budget: int | None = None):
        self.measurer = measurer
        self.budget = budget
        #: New measurements still allowed (None: no limit).
        self.left = budget

    # ---------------------------------------------------------------- hooks

    def current(self) -> bool:
        return True

    def known(self, step) -> bool:
        return False

    def apply(self, step) -> Any:
        """The analysed program after ``step``, or None."""
        raise NotImplementedError

    def verify(self, step, after) -> bool:
        return True

    def label(self, step) -> str:
        return "program" if step is None else str(step)

    def status(self, target, status: str, latency_ms: float | None = None) -> None:
        pass

    def submitted(self, target, future: Future) -> bool:
        """A measurement of ``target`` was submitted; False (the plan then
        cancels it) when it is no longer wanted."""
        return True

    def lookup(self, analysis):
        """The cached ``Measurement`` of ``analysis``, or None."""
        try:
            return self.measurer.lookup(analysis)
        except LeirError:
            return None

    def submit(self, analysis, label: str) -> Future:
        return self.measurer.submit(analysis, label)

    # ---------------------------------------------------------------- driving

    def run(self, program, steps: Sequence) -> None:
        self.measure(None, program)
        for step in steps:
            if not self.current():
                return
            if self.known(step):
                continue
            after = self.apply(step)
            if after is None:
                continue
            cached = self.lookup(after)
            if cached is None and self.spent:
                continue  # stays "not measured"
            if not self.verify(step, after):
                continue
            self.measure(step, after, cached)

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0

    def _spend(self) -> None:
        if self.left is not None:
            self.left -= 1

    def measure(self, target, analysis, cached=None) -> None:
        """Measure one program (``target``: None for the plan's program, else
        the step that produced it), cache first."""
        from leir.footprint import MemoryBudgetExceeded

        if cached is None:
            cached = self.lookup(analysis)
        if cached is not None:
            self.status(target, "cached", cached.median_ms)
            return
        if self.spent:
            return
        try:
            future = self.submit(analysis, self.label(target))
        except MemoryBudgetExceeded as e:  # refused before anything was built: no measurement spent
            self.status(target, f"{REFUSED}: {e}")
            return
        except LeirError as e:
            self.status(target, f"failed: {e}")
            self._spend()
            return
        if not self.submitted(target, future):
            future.cancel()
            return
        self._spend()
        self.status(target, "measuring")
        future.add_done_callback(lambda f: self._measured(target, f))

    def _measured(self, target, future: Future) -> None:
        """A measurement finished (on the engine's thread: quick)."""
        try:
            m = future.result()
        except CancelledError:
            return  # cancelled because the program changed: nobody waits for it
        except Exception as e:  # noqa: BLE001
            self.status(target, f"failed: {e}")
            return
        if m.error is not None or m.median_ms is None:
            self.status(target, f"failed: {m.error or 'no latency'}")
        else:
            self.status(target, "cached" if m.cached else "measured", m.median_ms)

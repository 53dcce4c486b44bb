"""Ranked suggestions for a document at a cursor: the steps that apply
there, best first, with the facts behind each rank and the latencies the
measurement cache already holds.

    >>> found = suggest(text, "leir", at=offset, measured=MeasuredLookup.for_target("llvm"))
    >>> found[0].label
    'Vectorize loop j (measured 2.1x)'

Nothing here builds or runs a kernel. A ``.leir`` document is parsed and
analysed in pure Python; a Python file's kernel is parsed by TVM and raised
to LEIR (``leir.transforms.python_kernels.load_kernel``), which imports TVM but
compiles nothing.

**Rank.** A step's score is ``leir.ranking.rank``'s heuristic (loop
extents, reduction axes, access strides, the share of the program's
iterations the step touches); steps the search never takes (operator,
algebraic, algorithmic rewrites) score 0 and keep the catalogue's order.
Steps whose latency before and after are both in the cache come first,
fastest after first: a measured 2x beats any guess.

**Measured.** A step's "after" latency needs the program the step
produces, which only applying it can tell (for most steps that means a TVM
schedule). Applying every candidate to look a latency up would be the slow
work listing must not do, so the program a verified step produced is
remembered when it is first computed (``StepOutcomes``: a code action
resolved, an optimize search) and looked up by (program, step). A latency
is shown only when the cache holds a measurement of exactly that program on
this target and device (``leir.measure.key``).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leir.ast import Span
from leir.errors import LeirError
from leir.semantics import Analysis
from leir.transforms.base import Step

if TYPE_CHECKING:
    from leir.measure import Measurement, MeasurementCache

__all__ = ["MeasuredLookup", "StepOutcomes", "Suggestion", "suggest"]

#: The file, next to the measurement cache, that remembers what program a
#: verified step produced.
OUTCOMES_NAME = "step-outcomes.sqlite"


@dataclass(frozen=True)
class Suggestion:
    """One step that applies at the cursor."""

    step: Step
    #: The transformation's own title: "Split loop k by 32".
    title: str
    #: What the step acts on, in the document (None when it acts on no one place).
    span: Span | None
    #: The Python kernel the step belongs to; None in a ``.leir`` document.
    kernel: str | None
    #: ``leir.ranking.rank``'s heuristic score (0 for steps it does not rank).
    score: float
    #: The computed facts behind the score, one short clause each.
    facts: tuple[str, ...]
    #: Cached measurements of the program before and after the step.
    before: "Measurement | None" = None
    after: "Measurement | None" = None

    @property
    def speedup(self) -> float | None:
        if self.before is None or self.after is None or not self.before.median_ms or not self.after.median_ms:
            return None
        return self.before.median_ms / self.after.median_ms

    @property
    def label(self) -> str:
        """The title an editor shows: "Split loop k by 32 (measured 2.1x)"."""
        speedup = self.speedup
        return self.title if speedup is None else f"{self.title} (measured {speedup:.1f}x)"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.step.id, "args": self.step.args, "title": self.title,
                               "label": self.label, "kernel": self.kernel, "score": round(self.score, 3),
                               "facts": list(self.facts)}
        if self.before is not None:
            out["latency_before_ms"] = self.before.median_ms
        if self.after is not None:
            out["latency_after_ms"] = self.after.median_ms
        if self.speedup is not None:
            out["speedup"] = round(self.speedup, 3)
        return out


# ------------------------------------------------------------ what a step produced


def program_digest(analysis: Analysis) -> str:
    """SHA-256 of a program's structural text (``leir.measure.key``): equal
    for two programs that build to the same kernel."""
    from leir.measure.key import structural_text

    return hashlib.sha256(structural_text(analysis).encode("utf-8")).hexdigest()


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

    def after(self, before: Analysis | str, step: Step, namespace: str = "leir") -> Analysis | None:
        """The analysed program ``step`` produced from ``before`` (an analysis
        or its digest), or None when it was never recorded."""
        from leir.document import load_leir

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


# ------------------------------------------------------------ suggesting


def suggest(text: str, language: str, at: int | None = None, *, kernel: str | None = None, target: str = "llvm",
            measured: MeasuredLookup | None = None, limit: int | None = None, document=None,
            only: tuple[str, ...] | None = None, ranker=None) -> list[Suggestion]:
    """The steps that apply at character offset ``at`` of a document
    (everywhere when None), best first (see the module docstring), scored
    by ``ranker`` (a ``leir.ranking.Ranker``; the heuristic by default).
    ``language`` is "leir" or "tvmscript"; ``document``, the
    ``leir.document.LeirDocument`` of ``text`` when the caller has it;
    ``only``, the transformation ids to consider (all by default). A
    document with errors, or a Python file without a kernel that loads, has
    no suggestions."""
    from leir.transforms import TransformError

    try:
        if language == "leir":
            found = _leir_suggestions(document if document is not None else _document(text), at, target, measured,
                                      only, ranker)
        else:
            found = _tvmscript_suggestions(text, at, kernel, target, measured, only, ranker)
    except TransformError:
        return []
    found = order(found)
    return found if limit is None else found[:limit]


def order(found: list[Suggestion]) -> list[Suggestion]:
    """Measured steps first (greatest speedup first), then by score."""
    measured = sorted((s for s in found if s.speedup is not None), key=lambda s: -s.speedup)
    rest = sorted((s for s in found if s.speedup is None), key=lambda s: -s.score)  # stable: catalogue order
    return measured + rest


# Hover and code actions ask again and again about one version of a
# document: its analysis and the ranking of all its steps are computed once
# per text (and target kind), the steps at the cursor each time.


@functools.lru_cache(maxsize=8)
def _document(text: str):
    from leir.document import load_leir

    return load_leir(text)


@functools.lru_cache(maxsize=8)
def _kernel(text: str, kernel: str | None, at: int | None):
    from leir.transforms.python_kernels import load_kernel

    return load_kernel(text, kernel, at)


def kernel_at(text: str, kernel: str | None = None, at: int | None = None):
    """``leir.transforms.python_kernels.load_kernel``, remembered for the last few
    texts: the kernel named, else the only one, else the one holding ``at``."""
    from leir.transforms.python_kernels import KernelError

    if kernel is not None or at is None:
        return _kernel(text, kernel, None)
    try:
        return _kernel(text, None, None)
    except KernelError:  # several kernels: the cursor chooses
        return _kernel(text, None, at)


def _scores(ctx, steps, target: str, ranker=None) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The score and facts ``ranker`` (``leir.ranking``, the heuristic by
    default) gives each of ``steps`` (the ones at the cursor: ranking every
    step of a large program would take seconds); steps the search never
    takes score 0."""
    from leir.ranking import HEURISTIC, SEARCHED

    # The ranking knows "llvm" and "cuda"; an RPC device runs one of them.
    kind = "cuda" if "cuda" in target else "llvm"
    searched = {i for i in SEARCHED if kind == "cuda" or i != "bind"}
    ranked = [step for step in steps if step.id in searched]
    scores = dict(zip((step.key for step in ranked), (ranker or HEURISTIC).score(ctx, ranked, kind)))
    return {step.key: scores.get(step.key, (0.0, ())) for step in steps}


def _leir_suggestions(doc, at: int | None, target: str, measured: MeasuredLookup | None,
                      only: tuple[str, ...] | None = None, ranker=None) -> list[Suggestion]:
    from leir import transforms
    from leir.transforms.base import Context

    if not doc.ok:
        return []
    analysis = doc.analysis
    ctx = Context.of(analysis)
    candidates = transforms.candidates(ctx, at, only=only)
    if not candidates:
        return []
    scores = _scores(ctx, [c.step for c in candidates], target, ranker)
    before = measured.measured(analysis) if measured is not None else None
    digest = program_digest(analysis) if before is not None else None
    out = []
    for c in candidates:
        score, facts = scores.get(c.step.key, (0.0, ()))
        after = measured.after(digest, c.step) if digest is not None else None
        out.append(Suggestion(c.step, c.title, c.span, None, score, facts, before, after))
    return out


def _tvmscript_suggestions(text: str, at: int | None, kernel: str | None, target: str,
                           measured: MeasuredLookup | None, only: tuple[str, ...] | None = None,
                           ranker=None) -> list[Suggestion]:
    from leir import transforms
    from leir.transforms.python_kernels import retitle

    k = kernel_at(text, kernel, at)
    ctx = k.ctx
    if at is None:
        found = transforms.candidates(ctx, None, only=only)
    else:
        seen: dict[str, Any] = {}
        for offset in k.leir_offsets(at):
            for c in transforms.candidates(ctx, offset, only=only):
                seen.setdefault(c.step.key, c)
        order = {t.ID: i for i, t in enumerate(transforms.ALL)}
        found = sorted(seen.values(), key=lambda c: order[c.step.id])
    if not found:
        return []
    scores = _scores(ctx, [c.step for c in found], target, ranker)
    before = measured.measured(ctx.analysis) if measured is not None else None
    digest = program_digest(ctx.analysis) if before is not None else None
    out = []
    for c in found:
        # Steps name the kernel's blocks and loops, as tvmscript_candidates does.
        tir_args = k.to_tir(c.step.args, hasattr(transforms.get(c.step.id), "schedule"))
        if tir_args is None:
            continue
        step = Step(c.step.id, tir_args)
        score, facts = scores.get(c.step.key, (0.0, ()))
        after = measured.after(digest, step, tvmscript_namespace(k.name)) if digest is not None else None
        out.append(Suggestion(step, retitle(c.title, c.step.args, tir_args), k.python_span(c.span), k.name,
                              score, facts, before, after))
    return out

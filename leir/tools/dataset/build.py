"""Building the dataset: trajectories of measured, verified steps.

For each workload file and each of its checked shape variants (``variants``),
``trajectories`` trajectories of at most ``steps`` steps each. At each state:

1. list the legal candidates: the searched loop and memory steps ranked by
   ``leir.tools.ranking.rank`` (a heuristic read off the program: strides,
   extents, reduction axes), and every other transformation's candidates
   (``leir.transforms.candidates``: operator, algebraic, algorithmic);
2. pick ``budget`` of them with a seeded mix: the best-ranked ones
   (``leir.tools.ranking.pick``: at most one per transformation and loop first)
   and about a third drawn at random from all the rest, so the data holds
   steps the heuristic would not try; apply them (steps TVM or our checks
   refuse are replaced by the next draw);
3. measure every new program through the measurement engine
   (``leir.measure.MeasurementEngine``: its SQLite cache first, then its
   worker processes); the program a step leaves is the next state's start,
   so its latency is never measured twice;
4. verify each (below), reason about it (``leir.explain.step_reasoning``)
   and record it: every measured candidate is a sample, the slower ones too;
5. go on from one verified candidate: the fastest ("exploit"), or with
   probability ``explore`` a seeded random one ("explore"), never a program
   the trajectory already visited.

**Verification** (``verify="engine"``, the default) happens where the
program after the step is built anyway, so that nothing is built or
evaluated twice: every program is measured with the trajectory's start
program as the engine's reference (``MeasurementEngine.submit(reference=)``),
so its worker runs the kernel on the inputs of each of
``leir.inputs.SEEDS`` (random, the last integer-valued so that
reassociation is exact) and compares every output with the NumPy
evaluation of the start program, before timing it; a wrong kernel gets no
latency and its sample is recorded as not verified. Each step's program
before was itself checked against the start program, so a verified step
is one whose kernel computes what the program before it computes, within
Step-TP's tolerances (``leir.bridge.comparison.compare``). The programs after the steps
are never evaluated with NumPy (the evaluator iterates in Python over some
transformed nests, which took up to a minute each); the start program is
evaluated once per seed in each worker. A cache hit measured without that
check (by ``leir measure`` or the editor: its ``checked_against`` differs)
is verified here instead, by comparing the NumPy evaluations of the
programs before and after the step on the same seeds (method
``engine+evaluate``). ``verify="full"`` runs ``leir.transforms.verify``
(both programs built with TVM and run on every seed).

**Resuming.** ``OUT/samples.jsonl`` is only appended to, one line per
sample. After the samples of each state are written (and synced),
``OUT/progress.json`` is replaced atomically: the finished trajectories, the
last state each unfinished one completed, and the length of the samples file
at that moment. A killed build started again with the same ``--out`` cuts the
file back to that length (dropping a state cut short), skips the finished
trajectories and takes up each unfinished one from the program its last
committed step chose, with the latency recorded for it: nothing is measured
or written twice, and the path already taken is kept.

**Teachers.** With ``teachers`` N > 0, each start program also gets up to
N *teacher* trajectories that follow the plans of ``leir.tools.plans``
(multi-level tiling of a contraction, parallel and vectorized rows...):
the end programs of up to max(``budget``, N) distinct plans, in the order
``plans_for`` lists them, are measured and verified like any candidate
(these screening measurements count, but are not samples), and the N
fastest verified are followed step by step. With ``teacher_databases``
(``STEM=DIR``), the tuning records of a MetaSchedule JSON database whose
workload is a start program of ``STEM.leir`` are translated into catalogue
steps (``leir.tools.trace_import.import_database``), fastest first; each
record translated whole that reaches a program not reached before is a
teacher trajectory (at most N per database when N > 0). Every step of a
teacher trajectory is a sample like the others (the same engine, cache,
reference check and schema), with ``chosen`` true and ``policy``
``"teacher"``; its reasoning says which step of which plan (or record) it
is, and ``reasoning_facts["teacher"]`` holds the plan's parameters or the
record's MetaSchedule latency. A teacher trajectory has as many steps as
its plan or trace, whatever ``steps``; it ends early at a step that is not
verified (recorded, not chosen). Records that did not translate (the
instruction and why), instructions without a catalogue counterpart
(``lost``), and the plans screened and followed go to ``OUT/teachers.json``
and the build's summary. A teacher trajectory is committed whole; the plans
followed are kept in ``teachers.json``, so that a resumed build follows the
same ones.

**Determinism.** The variants, the candidate picks and the exploration draws
are functions of the seed. Which candidate is fastest is measured, so two
builds with a cold cache can differ where two latencies are close; with the
same cache they are identical.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from leir.tools.dataset import records
from leir.tools.dataset.variants import Variant, load_references, workload_variants
from leir.errors import LeirError
from leir.files import write_atomic
from leir.bridge.targets import TARGETS

SAMPLES = "samples.jsonl"
TEACHERS = "teachers.json"
#: The files of a MetaSchedule JSON database (``ms.database.JSONDatabase``).
DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")
PROGRESS = "progress.json"
CONFIG = "config.json"
VARIANTS = "variants.jsonl"
LOG = "build.log"

#: Settings that change what a build produces; a resumed build must match them.
_IDENTITY = ("variants", "steps", "budget", "target", "seed", "trajectories", "explore", "verify", "repeat",
             "min_run_ms", "workloads_list", "teachers", "teacher_databases", "ranker")
#: The value of a setting a build made before the setting existed had.
_IDENTITY_DEFAULTS = {"teachers": 0, "teacher_databases": [], "ranker": "heuristic"}


class DatasetError(LeirError):
    """Bad arguments, or an output directory built with other settings."""


@dataclass
class BuildConfig:
    workloads: str
    out: str
    variants: int = 4
    steps: int = 6
    #: Candidates measured per state.
    budget: int = 6
    target: str = "llvm"
    seed: int = 0
    #: Measurement workers (builds in parallel; timing has the device alone).
    jobs: int = 2
    trajectories: int = 1
    #: Probability of following a random verified candidate instead of the fastest.
    explore: float = 0.25
    #: Timed runs per measurement, and the least duration of each. Fewer and
    #: shorter than ``leir measure``'s 7 x 10 ms: a dataset compares a step
    #: with its parent, and the spread is recorded beside every median.
    repeat: int = 3
    min_run_ms: float = 2.0
    verify: str = "engine"
    cache_dir: str | None = None
    rpc: str | None = None
    #: Only these workload file names (all ``*.leir`` when empty).
    only: list[str] = field(default_factory=list)
    #: (index, count): this build takes every count-th workload from index
    #: on, so that ``count`` machines can build disjoint parts of one dataset.
    shard: tuple[int, int] | None = None
    workloads_list: list[str] = field(default_factory=list)
    #: Teacher trajectories per start program that follow the best plans of
    #: ``leir.tools.plans`` (module docstring, "Teachers").
    teachers: int = 0
    #: ``STEM=DIR``: MetaSchedule tuning databases whose records' traces,
    #: translated into catalogue steps, are teacher trajectories of the
    #: workload ``STEM.leir`` (``leir.tools.trace_import.import_database``).
    teacher_databases: list[str] = field(default_factory=list)
    #: The ranking that orders each state's candidates before the budget is
    #: spent (``leir.tools.ranking.load_ranker``): "heuristic", or "model"
    #: (the local model, ``leir suggest --ranker``), or another installed one.
    #: A named ranker that does not load stops the build: its data would say
    #: "model" and hold the heuristic's choices.
    ranker: str = "heuristic"

    def check(self) -> None:
        if not Path(self.workloads).is_dir():
            raise DatasetError(f"--workloads {self.workloads}: not a directory")
        self.database_sources()
        for name in ("variants", "trajectories", "teachers"):
            if getattr(self, name) < 0:
                raise DatasetError(f"--{name} must be at least 0")
        for name in ("steps", "budget", "jobs", "repeat"):
            if getattr(self, name) < 1:
                raise DatasetError(f"--{name} must be at least 1")
        if self.trajectories < 1:
            raise DatasetError("--trajectories must be at least 1")
        if not 0.0 <= self.explore <= 1.0:
            raise DatasetError(f"--explore {self.explore}: a probability, between 0 and 1")
        if self.verify not in ("engine", "full"):
            raise DatasetError(f"--verify {self.verify}: expected engine or full")
        if self.target not in TARGETS:
            raise DatasetError(f"--target {self.target}: expected llvm or cuda")

    def database_sources(self) -> list[tuple[str, str]]:
        """``teacher_databases`` as (stem, directory) pairs; ``DatasetError``
        for one that is not ``STEM=DIR`` or whose directory holds no
        MetaSchedule JSON database."""
        out = []
        for text in self.teacher_databases:
            stem, sep, directory = text.partition("=")
            stem, directory = stem.strip(), directory.strip()
            if stem.endswith(".leir"):
                stem = stem[: -len(".leir")]
            if not (sep and stem and directory):
                raise DatasetError(f"--teacher-database {text}: expected STEM=DIR, a workload's file name without "
                                   f".leir and the work directory of a MetaSchedule tuning run (matmul=tune/matmul)")
            d = Path(directory)
            if not d.is_dir():
                raise DatasetError(f"--teacher-database {text}: {directory} is not a directory")
            missing = [n for n in DATABASE_FILES if not (d / n).is_file()]
            if missing:
                raise DatasetError(f"--teacher-database {text}: {directory} holds no MetaSchedule database "
                                   f"(no {' or '.join(missing)})")
            out.append((stem, directory))
        return out


@dataclass
class BuildSummary:
    out: Path
    trajectories: int
    trajectories_run: int
    samples_written: int
    samples_total: int
    verified: int
    measurements: int
    cache_hits: int
    seconds: float
    skipped: list[str]
    #: What the teacher jobs of this run did (``_TeacherCounts.as_dict``):
    #: trajectories and samples from plans and from databases, and what of
    #: the databases did not translate.
    teachers: dict = field(default_factory=dict)

    def text(self) -> str:
        rate = self.samples_written / self.seconds * 60 if self.seconds > 0 else 0.0
        return (f"{self.samples_total} samples in {self.out / SAMPLES} ({self.samples_written} new, "
                f"{self.verified} of the new verified) from {self.trajectories_run} of {self.trajectories} "
                f"trajectories in {self.seconds:.0f} s ({rate:.0f} new samples/min); "
                f"{self.measurements} measurements, {self.cache_hits} from the cache"
                + (f"; {_teachers_text(self.teachers)}" if self.teachers else "")
                + (f"; {len(self.skipped)} notes (skipped workloads, variants, refused steps) in {self.out / LOG}"
                   if self.skipped else ""))


def _teachers_text(t: dict) -> str:
    text = (f"teachers: {t['plan_trajectories']} plan and {t['database_trajectories']} database trajectories "
            f"({t['samples']} samples)")
    if t["database_records"]:
        lost = ", ".join(f"{kind} {n}" for kind, n in t["lost"].items())
        text += (f"; databases: {t['database_records']} records of these programs, {t['translated']} translated "
                 f"whole, {t['stopped']} stopped at an instruction the catalogue refused"
                 + (f", instructions without a catalogue step: {lost}" if lost else ""))
    return text


# ------------------------------------------------------------ files


def read_samples(out: Path) -> Iterator[dict]:
    """The samples of a build directory (or a ``samples.jsonl`` path), in file order."""
    path = out if out.is_file() else out / SAMPLES
    if not path.exists():
        raise DatasetError(f"{path}: no such file (run `leir dataset build` first)")
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break  # cut by a kill; the next build removes it
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}:{n}: not JSON ({e.msg})") from None


# ------------------------------------------------------------ states


@dataclass
class _State:
    analysis: object  # Analysis
    text: str
    measurement: object  # Measurement
    _expected: dict | None = None

    def expected(self) -> dict:
        """seed -> NumPy evaluation of every output (computed once)."""
        if self._expected is None:
            self._expected = {seed: _evaluate(self.analysis, _inputs(self.analysis, seed)) for seed in _seeds()}
        return self._expected


def _seeds() -> tuple[int, ...]:
    from leir.inputs import SEEDS

    return SEEDS


def _inputs(analysis, seed: int) -> dict:
    from leir.inputs import seed_inputs

    return seed_inputs(analysis, seed)


def _evaluate(analysis, inputs: dict) -> dict:
    from leir.evaluate import evaluate

    out = evaluate(analysis, inputs)
    return {t.name: out[t.name] for t in analysis.outputs()}


def _text(analysis) -> str:
    from leir.printer import print_program

    return print_program(analysis.program)


# ------------------------------------------------------------ verification


def _verification(method: str, comparisons: list, seeds, notes: list[str]) -> tuple[bool, dict]:
    from leir.bridge.comparison import MSE_TOLERANCE, RELATIVE_TOLERANCE

    ok = bool(comparisons) and all(c.ok for _, c in comparisons) and not notes
    worst_abs = max((c.max_abs_err for _, c in comparisons), default=0.0)
    worst_rel = max((c.max_rel_err for _, c in comparisons), default=0.0)
    worst_mse = max((c.mse for _, c in comparisons), default=0.0)
    criteria = sorted({c.criterion for _, c in comparisons if c.criterion})
    from leir.bridge.comparison import absolute_tolerance

    dtypes = sorted({dtype for dtype, _ in comparisons})
    summary = "; ".join(notes) if notes else ("ok" if ok else "MISMATCH")
    return ok, {
        "method": method,
        "seeds": list(seeds),
        "max_abs_err": _finite(worst_abs),
        "max_rel_err": _finite(worst_rel),
        "mse": _finite(worst_mse),
        "criterion": ",".join(criteria) if ok else "",
        "rel_tolerance": RELATIVE_TOLERANCE,
        "abs_tolerance": {d: absolute_tolerance(d) for d in dtypes},
        "mse_tolerance": MSE_TOLERANCE,
        "summary": summary,
    }


def _finite(x: float) -> float | None:
    return float(x) if x == x and abs(x) != float("inf") else None


#: The NumPy evaluation of one program on every seed must finish within
#: this much CPU time; most take 10-50 ms, but the evaluator iterates in
#: Python over a nest it cannot run as one array operation (several items
#: that depend on each other), which can take minutes. Such a step is
#: skipped (and noted in build.log): the measurement engine evaluates every
#: program it times with the same evaluator, so it would cost as much again
#: there. (A 10-step build of 6 workloads skipped 53 of 1,153 candidates
#: with a 3 s limit, spending 160 s of this process's CPU on them in a 626 s
#: build; hence 1 s, still 20 times a typical evaluation.)
EVAL_LIMIT_S = 1.0


class SlowEvaluation(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise ``SlowEvaluation`` in the block after ``seconds`` of this
    process's CPU time (not wall time: a loaded machine must not change
    which steps are skipped, or a resumed build would take another path).
    No limit outside the main thread, where signals cannot go."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum, frame):
        raise SlowEvaluation(f"the NumPy evaluation took more than {seconds:g} s of CPU time")

    previous = signal.signal(signal.SIGVTALRM, expired)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def _equivalence(before: _State, after) -> tuple[list, list[str]]:
    """Compare the NumPy evaluation of ``after`` with that of ``before`` on
    every seed: (dtype, Comparison) pairs and notes. Raises ``SlowEvaluation``."""
    from leir.bridge.comparison import compare

    comparisons, notes = [], []
    dtypes = {t.name: t.dtype for t in after.outputs()}
    before_names = {t.name for t in before.analysis.outputs()}
    if before_names != set(dtypes):
        return [], [f"outputs changed from {sorted(before_names)} to {sorted(dtypes)}"]
    with _time_limit(EVAL_LIMIT_S):
        expected = before.expected()
    with _time_limit(EVAL_LIMIT_S):
        for seed in _seeds():
            try:
                # The inputs of the program before, as leir.transforms.verify
                # draws them: the program after may list its inputs in
                # another order or read one outside sqrt (a cache copy),
                # which would draw other values from the same seed.
                got = _evaluate(after, _inputs(before.analysis, seed))
            except LeirError as e:
                return comparisons, [f"the NumPy evaluation failed: {e}"]
            for name, dtype in dtypes.items():
                comparisons.append((dtype, compare(got[name], expected[seed][name], dtype)))
    return comparisons, notes


def _verify_engine(after, measurement, equivalence) -> tuple[bool, dict]:
    """For a cache hit measured without the reference check (only verified
    measurements are cached): the engine's check of ``after`` (its kernel
    against its own NumPy evaluation) and the NumPy equivalence of ``after``
    with the program before it (see the module docstring)."""
    comparisons, notes = equivalence
    return _verification("engine+evaluate", comparisons + _typed(after, measurement.comparisons), _seeds(), notes)


def _verify_reference(after, measurement) -> tuple[bool, dict]:
    """The engine's check of the kernel of ``after`` against the NumPy
    evaluation of the trajectory's start program on every seed (see the
    module docstring)."""
    notes = [] if measurement.error is None else [f"measurement failed: {measurement.error}"]
    return _verification("tvm-vs-start", _typed(after, measurement.comparisons), _seeds(), notes)


def _typed(after, comparisons: dict | None) -> list:
    """(dtype, Comparison) pairs of the outputs of ``after``."""
    dtypes = {t.name: t.dtype for t in after.outputs()}
    return [(dtypes.get(name, "f32"), c) for name, c in (comparisons or {}).items()]


def _verify_full(before: _State, after, measurement) -> tuple[bool, dict]:
    from leir.transforms import verify

    notes = [] if measurement.error is None else [f"measurement failed: {measurement.error}"]
    try:
        v = verify(before.analysis, after)
    except LeirError as e:
        return _verification("tvm", [], _seeds(), notes + [str(e)])
    comparisons = [pair for per in v.comparisons.values() for pair in _typed(after, per)]
    if not v.ok and not comparisons:
        notes.append(v.summary())
    return _verification("tvm", comparisons, _seeds(), notes)


# ------------------------------------------------------------ reasoning


def _reasoning(before, after, step, before_ms: float, after_ms: float | None, target: str) -> tuple[str, dict]:
    """``leir.explain.step_reasoning``'s text and the facts behind it (as
    JSON: tuples become lists, anything else its string)."""
    from leir.explain import step_reasoning

    measured = (before_ms, after_ms) if after_ms is not None else None
    r = step_reasoning(before, after, step, measured=measured, target=target)
    facts = _jsonable(json.loads(json.dumps(dict(r.facts or {}), default=str)))
    return r.text, facts


def _jsonable(value):
    """JSON without NaN or infinities (``null`` instead): JSON has neither."""
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


# ------------------------------------------------------------ one sample


def _verify(state: _State, after, m, cfg: BuildConfig, checked) -> tuple[bool, dict]:
    """Whether the step from ``state`` to ``after``, measured as ``m``, is
    verified, and how (module docstring); raises ``SlowEvaluation``.
    ``checked``: the reference key of the trajectory's start program."""
    if cfg.verify == "full":
        return _verify_full(state, after, m)
    if m.checked_against == checked or not m.cached:
        # Measured now against the start program (a failure, e.g. a
        # wrong result, carries no checked_against but was checked too).
        return _verify_reference(after, m)
    # A cache hit measured without this check (by `leir measure`, the
    # editor...): its kernel matched its own NumPy evaluation; the NumPy
    # evaluations of the programs before and after the step are compared here.
    return _verify_engine(after, m, _equivalence(state, after))


def _sample(variant: Variant, tid: str, step_index: int, state: _State, step, after, text: str, m, ok: bool,
            verification: dict, cfg: BuildConfig, note: str = "", note_facts: dict | None = None) -> dict:
    """The sample of ``step`` from ``state`` to ``after`` (not chosen).
    ``note``, ``note_facts``: a sentence added to the reasoning and the facts
    behind it (``reasoning_facts["teacher"]``)."""
    from leir import transforms

    after_ms = float(m.median_ms) if m is not None and m.median_ms is not None else None
    before_m = state.measurement
    reasoning, facts = _reasoning(state.analysis, after, step, float(before_m.median_ms), after_ms, cfg.target)
    if note:
        reasoning = f"{reasoning.rstrip()} {note}".strip()
    if note_facts is not None:
        facts["teacher"] = _jsonable(json.loads(json.dumps(note_facts, default=str)))
    module = transforms.get(step.id)
    return {
        "id": records.sample_id(tid, step_index, step.to_json()),
        "workload": variant.workload,
        "variant": variant.name,
        "variant_sizes": {str(a): b for a, b in sorted(variant.sizes.items())},
        "trajectory": tid,
        "step_index": step_index,
        "chosen": False,
        "policy": None,
        "before": state.text,
        "step": step.to_json(),
        "strategy": step.id,
        "steptp_strategy": getattr(module, "STEPTP", None),
        "after": text,
        "tensors": [{"name": t.name, "role": t.role, "dtype": t.dtype, "shape": list(t.shape)}
                    for t in state.analysis.tensors.values()],
        "verified": ok,
        "verification": verification,
        "latency_before_ms": float(before_m.median_ms),
        "latency_before_min_ms": float(before_m.min_ms),
        "latency_before_max_ms": float(before_m.max_ms),
        "latency_before_spread": float(before_m.spread or 0.0),
        "latency_after_ms": after_ms,
        "latency_after_min_ms": float(m.min_ms) if after_ms is not None else None,
        "latency_after_max_ms": float(m.max_ms) if after_ms is not None else None,
        "latency_after_spread": float(m.spread or 0.0) if after_ms is not None else None,
        "runs": int(m.runs) if m is not None else 0,
        "speedup": float(before_m.median_ms) / after_ms if after_ms else None,
        "target": before_m.target,
        "device": before_m.device,
        "reasoning": reasoning,
        "reasoning_facts": facts,
        "error": (m.error if m is not None else verification["summary"]) if not ok else None,
    }


# ------------------------------------------------------------ one trajectory


def _rng(seed: int, *parts) -> random.Random:
    digest = hashlib.sha256(json.dumps([seed, *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _picks(analysis, budget: int, target: str, rng: random.Random, ranker=None) -> list:
    """Candidate steps in the order to try them: the best-ranked by
    ``ranker`` (the heuristic when None; at most one per transformation and
    loop first), then about a third of the budget drawn at random from the
    rest, then the rest in a random order (to replace refused steps)."""
    from leir import transforms
    from leir.tools.ranking import SEARCHED, pick, rank

    ranked = rank(analysis, target, ranker=ranker)
    others = [c.step for c in transforms.candidates(analysis, None, only=tuple(t.ID for t in transforms.ALL
                                                                               if t.ID not in SEARCHED))]
    explore = budget // 3
    best = [r.step for r in pick(ranked, budget - explore, rng)]
    chosen = set(best)
    rest = [r.step for r in ranked if r.step not in chosen] + [s for s in others if s not in chosen]
    rng.shuffle(rest)
    return best + rest


def _trajectory(variant: Variant, k: int, cfg: BuildConfig, start_measurement,
                log: Callable[[str], None] = lambda line: None, resume: "_Resume | None" = None,
                ranker=None) -> Iterator:
    """A generator: yields lists of analyses to measure and receives their
    measurements; yields ``("samples", [sample...])`` after each state.
    Returns when the trajectory ends. ``resume``: where a killed build left
    it (the state to go on from, its index, the programs visited)."""
    from leir import transforms
    from leir.bridge.document import load_leir
    from leir.measure.key import reference_key
    from leir.semantics import analyze

    tid = f"{variant.workload}/{variant.name}/t{k}"
    if resume is None:
        state = _State(variant.analysis, _text(variant.analysis), start_measurement)
        visited, first = {state.text}, 0
    else:
        state = _State(load_leir(resume.text).analysis, resume.text, resume.measurement)
        visited, first = set(resume.visited), resume.next_index
    checked = reference_key(variant.analysis, _seeds())
    for step_index in range(first, cfg.steps):
        rng = _rng(cfg.seed, tid, step_index)
        children = []
        for step in _picks(state.analysis, cfg.budget, cfg.target, rng, ranker):
            if len(children) == cfg.budget:
                break
            try:
                program = transforms.apply(state.analysis, step, Path(variant.workload).stem)
            except LeirError:
                continue  # refused by TVM or our checks: never measured, not a sample
            except Exception as e:  # a bug in a transformation must not end a two-hour build
                log(f"{tid}: step {step.key} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                continue
            after = analyze(program)
            text = _text(after)
            if text == state.text:
                continue
            children.append((step, after, text))
        if not children:
            return
        # Measured with the start program as the reference: the engine
        # checks each kernel against it on every seed before timing it.
        got = yield [after for _, after, _ in children]
        samples, good = [], []
        for child, m in zip(children, got):
            step, after, text = child
            try:
                ok, verification = _verify(state, after, m, cfg, checked)
            except SlowEvaluation as e:
                log(f"{tid}: step {step.key} skipped: {e}")
                continue
            sample = _sample(variant, tid, step_index, state, step, after, text, m, ok, verification, cfg)
            samples.append(sample)
            if ok and sample["latency_after_ms"] is not None and text not in visited:
                good.append((sample, after, text, m))
        if not good:
            yield ("samples", samples)
            return
        if rng.random() < cfg.explore:
            pick, policy = rng.choice(good), "explore"
        else:
            pick, policy = min(good, key=lambda g: g[0]["latency_after_ms"]), "exploit"
        pick[0]["chosen"], pick[0]["policy"] = True, policy
        yield ("samples", samples)
        _, after, text, m = pick
        state = _State(after, text, m)
        visited.add(text)


# ------------------------------------------------------------ teachers

#: The name of a start program's teacher job in ``progress.json``'s "done"
#: (``workload/variant/teachers``); its trajectories are ``.../plan<k>`` and
#: ``.../db<k>``.
TEACHER_JOB = "teachers"


@dataclass
class _Teacher:
    """One teacher trajectory: the steps of a plan, or of a translated
    MetaSchedule trace, from the start program."""

    tid: str
    source: str  # "plan" or "metaschedule"
    steps: list
    #: What the reasoning says of where the steps come from (``reasoning_facts["teacher"]``).
    facts: dict
    #: The program after each step (None: replayed from the steps).
    programs: list | None = None
    #: (analysis, measurement) of the end program where screening measured it.
    end: tuple | None = None


@dataclass
class _TeacherCounts:
    plan_trajectories: int = 0
    database_trajectories: int = 0
    samples: int = 0
    database_records: int = 0
    translated: int = 0
    stopped: int = 0
    lost: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class _TeacherFile:
    """``OUT/teachers.json``: per start program, the plans screened and
    followed (with their steps, so that a resumed build follows the same
    ones without screening again) and, per database, what its records gave:
    translated, stopped and why, instructions without a catalogue step."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def get(self, key: str) -> dict:
        return self.data.get(key, {})

    def set(self, key: str, name: str, value) -> None:
        self.data.setdefault(key, {})[name] = value
        write_atomic(self.path, json.dumps(dict(sorted(self.data.items())), indent=1) + "\n", durable=True)


def _plan_candidates(start: _State, variant: Variant, cfg: BuildConfig, limit: int, log) -> list:
    """(plan, end analysis, end text) of up to ``limit`` plans of
    ``leir.tools.plans`` that apply to the start program and reach distinct
    programs, in the order ``plans_for`` lists them (most promising first)."""
    import itertools

    from leir.printer import print_program
    from leir.semantics import analyze
    from leir.tools.plans import distinct, plans_for

    key = f"{variant.workload}/{variant.name}"
    try:
        specs = plans_for(start.analysis, cfg.target, seed=_rng(cfg.seed, key, "plans").randrange(1 << 30))
    except LeirError as e:
        log(f"{key}: no plans ({e})")
        return []
    def bug(spec, e):  # a bug in a plan must not end the build
        log(f"{key}: plan {spec.to_json()} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    found = distinct(specs, start.analysis, print_program, {start.text}, on_error=bug)
    return [(plan, analyze(plan.program), text) for plan, text in itertools.islice(found, limit)]


def _chain(start: _State, teacher: _Teacher, stem: str) -> list:
    """(step, analysis after, text after) for each step of ``teacher`` that
    changes the program (replayed through ``leir.transforms.apply`` when the
    programs are not known); ``LeirError`` when a step is refused."""
    from leir import transforms
    from leir.semantics import analyze

    out, current, text = [], start.analysis, start.text
    for k, step in enumerate(teacher.steps):
        if teacher.programs is not None:
            after = analyze(teacher.programs[k])
        else:
            after = analyze(transforms.apply(current, step, stem))
        after_text = _text(after)
        if after_text != text:
            out.append((step, after, after_text))
        current, text = after, after_text
    return out


def _teachers(variant: Variant, cfg: BuildConfig, start_measurement, sources: list[tuple[str, str]], done: set,
              file: _TeacherFile, counts: _TeacherCounts, log: Callable[[str], None] = lambda line: None) -> Iterator:
    """The teacher trajectories of one start program, as ``_trajectory`` is
    a generator of one walk's: yields lists of analyses to measure and
    receives their measurements; yields ``("trajectory", tid, samples,
    source)`` once per trajectory, all of its samples at once (module
    docstring, "Teachers"). Trajectories in ``done`` are not followed again."""
    from leir.measure.key import reference_key
    from leir.semantics import analyze
    from leir.tools.trace_import import import_database
    from leir.transforms import step_from_json

    key = f"{variant.workload}/{variant.name}"
    start = _State(variant.analysis, _text(variant.analysis), start_measurement)
    checked = reference_key(variant.analysis, _seeds())
    recorded = file.get(key)
    followed: list[_Teacher] = []
    if cfg.teachers and "plans" in recorded:
        # Screened by the build that was killed: the same plans, in the same order.
        for f in recorded["plans"]["followed"]:
            followed.append(_Teacher(f["trajectory"], "plan", [step_from_json(x) for x in f["steps"]],
                                     {"source": "plan", "goal": f["goal"], "params": f["params"]}))
    elif cfg.teachers:
        # Screening: the end programs of up to max(budget, teachers) plans,
        # measured (and verified) like any candidate; the fastest are followed.
        candidates = _plan_candidates(start, variant, cfg, max(cfg.budget, cfg.teachers), log)
        got = (yield [end for _, end, _ in candidates]) if candidates else []
        measured = []
        for n, ((plan, end, text), m) in enumerate(zip(candidates, got)):
            try:
                ok, verification = _verify(start, end, m, cfg, checked)
            except SlowEvaluation as e:
                ok, verification = False, {"summary": str(e)}
            if ok and m.median_ms is not None:
                measured.append((float(m.median_ms), n, plan, end, m))
            else:
                log(f"{key}: plan {plan.spec.to_json()} not followed: its end program is not verified "
                    f"({m.error or verification['summary']})")
        measured.sort(key=lambda item: item[:2])
        rows = []
        for k, (ms, _, plan, end, m) in enumerate(measured[: cfg.teachers]):
            facts = {"source": "plan", "goal": plan.goal, "params": plan.spec.to_json()}
            followed.append(_Teacher(f"{key}/plan{k}", "plan", list(plan.steps), facts, list(plan.programs), (end, m)))
            params = _jsonable(json.loads(json.dumps(plan.spec.to_json(), default=str)))
            rows.append({"trajectory": f"{key}/plan{k}", "goal": plan.goal, "params": params, "end_ms": ms,
                         "steps": [s.to_json() for s in plan.steps]})
        file.set(key, "plans", {"screened": len(candidates), "verified": len(measured), "followed": rows})
    reports, seen, from_databases = [], {start.text}, 0
    for stem, directory in sources:
        if stem != variant.stem:
            continue
        try:
            imported = import_database(variant.analysis, directory)
        except LeirError as e:
            log(f"{key}: --teacher-database {stem}={directory}: {e}")
            reports.append({"database": directory, "error": str(e)})
            continue
        report = {"database": directory, "records": len(imported.records),
                  "other_programs": imported.other_workloads, "translated": imported.complete,
                  "stopped": len(imported.records) - imported.complete, "stopped_at": {},
                  "lost": imported.lost_kinds(), "no_step": 0, "same_program": 0, "over_limit": 0, "followed": []}
        counts.database_records += len(imported.records)
        counts.translated += imported.complete
        counts.stopped += report["stopped"]
        for kind, n in report["lost"].items():
            counts.lost[kind] = counts.lost.get(kind, 0) + n
        taken = 0
        for rank, (seconds, record) in enumerate(imported.records):
            if not record.complete:
                reason = _stop_kind(record.stopped)
                report["stopped_at"][reason] = report["stopped_at"].get(reason, 0) + 1
                log(f"{key}: {directory}: record {rank} ({seconds * 1e3:.3g} ms) not followed: its translation "
                    f"stopped at {record.stopped}")
                continue
            if not record.steps:
                report["no_step"] += 1
                continue
            text = _text(analyze(record.program))
            if text in seen:
                report["same_program"] += 1  # a faster record (or the start) is this program
                continue
            if cfg.teachers and taken == cfg.teachers:
                report["over_limit"] += 1
                continue
            seen.add(text)
            taken += 1
            tid = f"{key}/db{from_databases}"
            from_databases += 1
            facts = {"source": "metaschedule", "database": directory, "record": rank,
                     "metaschedule_ms": seconds * 1e3, "lost": record.lost}
            followed.append(_Teacher(tid, "metaschedule", list(record.steps), facts))
            report["followed"].append({"trajectory": tid, "record": rank, "metaschedule_ms": seconds * 1e3,
                                       "steps": len(record.steps)})
        if not imported.records:
            log(f"{key}: {directory}: no record is for this program ({imported.other_workloads} of other programs)")
        reports.append(report)
    if reports:
        file.set(key, "databases", reports)

    for teacher in followed:
        if teacher.tid in done:
            continue
        try:
            chain = _chain(start, teacher, variant.stem)
        except LeirError as e:
            log(f"{teacher.tid}: not followed: a step is refused ({e})")
            continue
        if not chain:
            continue
        end = teacher.end if teacher.end is not None and _text(teacher.end[0]) == chain[-1][2] else None
        todo = chain if end is None else chain[:-1]
        got = list((yield [after for _, after, _ in todo])) if todo else []
        if end is not None:
            got.append(end[1])
        samples, state, n = [], start, len(chain)
        for k, ((step, after, text), m) in enumerate(zip(chain, got)):
            facts = dict(teacher.facts, step=k + 1, of=n)
            if teacher.source == "plan":
                note = f"Step {k + 1} of {n} of a plan toward {teacher.facts['goal']} (a teacher trajectory)."
            else:
                note = (f"Step {k + 1} of {n} of a MetaSchedule tuning record's trace translated into catalogue "
                        f"steps (MetaSchedule measured its end program at {teacher.facts['metaschedule_ms']:.3g} ms).")
            try:
                ok, verification = _verify(state, after, m, cfg, checked)
            except SlowEvaluation as e:
                log(f"{teacher.tid}: step {k + 1} of {n} ({step.key}) skipped and the trajectory ended: {e}")
                break
            sample = _sample(variant, teacher.tid, k, state, step, after, text, m, ok, verification, cfg, note, facts)
            samples.append(sample)
            if not ok or sample["latency_after_ms"] is None:
                log(f"{teacher.tid}: step {k + 1} of {n} ({step.key}) not verified ({sample['error']}); "
                    f"the trajectory ends there")
                break
            sample["chosen"], sample["policy"] = True, "teacher"
            state = _State(after, text, m)
        yield ("trajectory", teacher.tid, samples, teacher.source)


def _stop_kind(text: str) -> str:
    """What stopped a translation, without the step's arguments (``split:
    7 is not a proper divisor of 64`` for ``split {'block': ...}: 7 is not ...``)."""
    m = re.match(r"(\w+) \{.*\}: (.*)$", text, re.S)
    return f"{m.group(1)}: {m.group(2)}" if m else text.split(" (")[0]


@dataclass(frozen=True)
class _Resume:
    text: str
    measurement: object
    next_index: int
    visited: frozenset


@dataclass(frozen=True)
class _Recorded:
    """The latency figures of a program, as a sample recorded them (a
    resumed trajectory's state was measured by the build that was killed)."""

    median_ms: float
    min_ms: float
    max_ms: float
    spread: float
    target: str
    device: str


def _resume_points(samples: list[dict], states: dict[str, int]) -> dict[str, "_Resume | None"]:
    """For each trajectory with committed states: where to go on from
    (None when its last committed state chose no step: it has ended)."""
    by_tid: dict[str, dict[int, dict]] = {}
    for s in samples:
        if s["chosen"]:
            by_tid.setdefault(s["trajectory"], {})[s["step_index"]] = s
    out = {}
    for tid, last in states.items():
        chain = by_tid.get(tid, {})
        if last not in chain:
            out[tid] = None
            continue
        c = chain[last]
        visited = {chain[i]["before"] for i in range(last + 1) if i in chain}
        visited |= {chain[i]["after"] for i in range(last + 1) if i in chain}
        measurement = _Recorded(c["latency_after_ms"], c["latency_after_min_ms"], c["latency_after_max_ms"],
                                c["latency_after_spread"], c["target"], c["device"])
        out[tid] = _Resume(c["after"], measurement, last + 1, frozenset(visited))
    return out


# ------------------------------------------------------------ the build


class _Progress:
    """Progress in *states* (one per step of a trajectory; a trajectory has
    at most ``steps``), so that the ETA moves with the work: trajectories
    advance side by side and finish in bursts. A trajectory that ends early
    takes its remaining states off the total. tqdm on a terminal; otherwise
    a line per finished trajectory with the rate and the ETA (for logs)."""

    def __init__(self, trajectories: int, trajectories_done: int, steps: int, states_done: int, stream=sys.stderr):
        self.trajectories, self.trajectories_done, self.stream = trajectories, trajectories_done, stream
        # A finished trajectory counts as ``steps`` states (its unused ones
        # are neither done nor left).
        self.total = trajectories * steps
        self.done = self.initial = states_done
        self.start = time.monotonic()
        self.bar = None
        if stream.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=self.total, initial=states_done, unit="state", file=stream, dynamic_ncols=True)

    def state(self, samples: int, verified: int) -> None:
        """One more state's samples were committed."""
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix(samples=samples, verified=verified, refresh=False)
            self.bar.update(1)

    def trajectory(self, unused_states: int, samples: int, verified: int) -> None:
        """A trajectory ended, ``unused_states`` before its last step."""
        self.trajectories_done += 1
        self.total -= unused_states
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.set_postfix(samples=samples, verified=verified, traj=self.trajectories_done, refresh=False)
            self.bar.refresh()
            return
        print(f"leir dataset: {self.trajectories_done}/{self.trajectories} trajectories, {self.done}/{self.total} "
              f"states, {samples} samples ({verified} verified), {self.elapsed():.0f} s elapsed, "
              f"ETA {self.eta():.0f} s", file=self.stream, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def eta(self) -> float:
        """Seconds left at this run's rate of states (an upper bound's worth:
        trajectories that end early shorten it)."""
        run = self.done - self.initial
        return self.elapsed() / run * (self.total - self.done) if run else 0.0

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _config_json(cfg: BuildConfig) -> dict:
    data = asdict(cfg)
    return {k: data[k] for k in _IDENTITY}


def _load_variants(cfg: BuildConfig, out: Path, log: Callable[[str], None]) -> list[Variant]:
    """The start programs; computed once and kept in ``variants.jsonl`` so
    that a resumed build does not check them again."""
    from leir.bridge.document import load_leir

    path = out / VARIANTS
    if path.exists():
        found = []
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            found.append(Variant(row["workload"], row["name"], load_leir(row["program"]).analysis,
                                 {int(a): b for a, b in row["sizes"].items()}))
        return found
    references = load_references(Path(cfg.workloads))
    found = []
    for name in cfg.workloads_list:
        found += workload_variants(Path(cfg.workloads) / name, cfg.variants, cfg.seed, references, cfg.target, log)
    rows = [json.dumps({"workload": v.workload, "name": v.name, "sizes": {str(a): b for a, b in v.sizes.items()},
                        "program": _text(v.analysis)}) for v in found]
    write_atomic(path, "".join(r + "\n" for r in rows), durable=True)
    return found


def _build_ranker(name: str):
    """The ranker ``--ranker name`` orders candidates with (None: the
    heuristic); ``DatasetError`` with the reason when a named one does not load."""
    from leir.tools import ranking

    if name in ("", "heuristic"):
        return None
    said: list[str] = []
    found = ranking.load_ranker_telling(name, said.append)
    if found is ranking.HEURISTIC:
        raise DatasetError(f"--ranker {name}: it did not load ({'; '.join(said) or 'no reason given'}); "
                           f"build with --ranker heuristic, or install it")
    return found


def build(cfg: BuildConfig, engine=None, progress: bool = True) -> BuildSummary:
    """Run (or resume) a build into ``cfg.out``. ``engine``: a measurement
    engine to use (default: one made from the config, closed at the end)."""
    cfg.check()
    ranker = _build_ranker(cfg.ranker)
    names = sorted(p.name for p in Path(cfg.workloads).glob("*.leir"))
    sources = cfg.database_sources()
    for stem, directory in sources:
        if f"{stem}.leir" not in names:
            raise DatasetError(f"--teacher-database {stem}={directory}: no workload {stem}.leir in {cfg.workloads}"
                               + (f" (its workloads: {', '.join(Path(n).stem for n in names)})" if names else ""))
        _check_database(stem, directory)
    if cfg.only:
        unknown = sorted(set(cfg.only) - set(names))
        if unknown:
            raise DatasetError(f"--only: no {', '.join(unknown)} in {cfg.workloads}")
        names = [n for n in names if n in set(cfg.only)]
    if cfg.shard is not None:
        index, count = cfg.shard
        if not (count >= 1 and 0 <= index < count):
            raise DatasetError(f"--shard {index}/{count}: expected I/N with 0 <= I < N")
        names = names[index::count]
    if not names:
        raise DatasetError(f"--workloads {cfg.workloads}: no .leir files")
    cfg.workloads_list = names
    out = Path(cfg.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"--out {out}: cannot create ({e.strerror})") from None
    config_path = out / CONFIG
    wanted = _config_json(cfg)
    if config_path.exists():
        have = json.loads(config_path.read_text(encoding="utf-8"))
        diff = sorted(k for k in wanted if have.get(k, _IDENTITY_DEFAULTS.get(k)) != wanted[k])
        if diff:
            raise DatasetError(f"{out} was built with other settings ({', '.join(diff)}); "
                               f"resume with the same ones or choose another --out")
    else:
        write_atomic(config_path, json.dumps(wanted, indent=1) + "\n", durable=True)

    log_file = open(out / LOG, "a", encoding="utf-8")
    skipped: list[str] = []

    def log(line: str) -> None:
        skipped.append(line)
        log_file.write(line + "\n")
        log_file.flush()

    started = time.monotonic()
    for stem, directory in sources:
        if f"{stem}.leir" not in cfg.workloads_list:
            log(f"--teacher-database {stem}={directory}: {stem}.leir is not among this build's workloads "
                f"(--only, --shard); not used")
    try:
        variants = _load_variants(cfg, out, log)
        samples_path = out / SAMPLES
        progress_path = out / PROGRESS
        committed = json.loads(progress_path.read_text(encoding="utf-8")) if progress_path.exists() else {}
        if samples_path.exists() and samples_path.stat().st_size and "bytes" not in committed:
            raise DatasetError(f"{samples_path} has samples but {progress_path} does not say how many were "
                               f"committed; this directory cannot be resumed: choose another --out")
        if not progress_path.exists():  # before the first sample, so that a kill at any point resumes
            write_atomic(progress_path, json.dumps({"done": [], "states": {}, "bytes": 0}) + "\n", durable=True)
        # Samples written after the last committed state (a state cut short
        # by a kill) are dropped: that state runs again.
        if samples_path.exists():
            with open(samples_path, "rb+") as f:
                f.truncate(committed.get("bytes", 0))
        done = set(committed.get("done", []))
        states = {tid: k for tid, k in committed.get("states", {}).items() if tid not in done}
        previous = list(read_samples(out)) if samples_path.exists() else []
        existing = {s["id"] for s in previous}
        total_before = len(previous)
        resume = _resume_points(previous, states)
        for tid, point in resume.items():
            if point is None:
                done.add(tid)
        todo = []
        for v in variants:
            todo += [(v, k, resume.get(_tid(v, k))) for k in range(cfg.trajectories) if _tid(v, k) not in done]
            # The teacher trajectories of a start program after its walks.
            if (cfg.teachers or any(stem == v.stem for stem, _ in sources)) and _tid(v, TEACHER_JOB) not in done:
                todo.append((v, TEACHER_JOB, None))
        walks = sum(1 for _, k, _ in todo if k != TEACHER_JOB)
        total = len(variants) * cfg.trajectories
        owned = engine is None
        if owned:
            engine = _engine(cfg)
        # Resumed trajectories have done the states up to their last committed one.
        states_done = sum(point.next_index for point in resume.values() if point is not None)
        bar = _Progress(total, total - walks, cfg.steps, (total - walks) * cfg.steps + states_done) \
            if progress else None
        counts = {"written": 0, "verified": 0, "measurements": 0, "hits": 0}
        teachers = _TeacherCounts()
        context = (sources, _TeacherFile(out / TEACHERS), teachers, ranker)
        with open(samples_path, "a", encoding="utf-8") as sink:
            try:
                _run(todo, cfg, engine, sink, existing, done, states, progress_path, counts, bar, log, context)
            finally:
                if bar is not None:
                    bar.close()
                if owned:
                    engine.close()
    finally:
        log_file.close()
    return BuildSummary(out, total, walks, counts["written"], total_before + counts["written"],
                        counts["verified"], counts["measurements"], counts["hits"], time.monotonic() - started, skipped,
                        teachers.as_dict() if cfg.teachers or sources else {})


def _tid(variant: Variant, k) -> str:
    """A walk's trajectory id (``k``: its index), or the teacher job's."""
    return f"{variant.workload}/{variant.name}/" + (f"t{k}" if k != TEACHER_JOB else TEACHER_JOB)


def _check_database(stem: str, directory: str) -> None:
    """``DatasetError`` unless MetaSchedule can read the database in ``directory``."""
    try:
        from tvm.s_tir import meta_schedule as ms

        ms.database.JSONDatabase(work_dir=directory).get_all_tuning_records()
    except Exception as e:  # TVM's parser: a damaged file
        last = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        raise DatasetError(f"--teacher-database {stem}={directory}: MetaSchedule cannot read this database "
                           f"({type(e).__name__}: {last})") from None


def _engine(cfg: BuildConfig):
    from leir.measure import RPC, MeasurementEngine

    target = RPC.parse(cfg.rpc, cfg.target) if cfg.rpc else cfg.target
    return MeasurementEngine(target, workers=None if cfg.rpc else cfg.jobs, cache=cfg.cache_dir or True,
                             repeat=cfg.repeat, min_run_ms=cfg.min_run_ms, vendor=False, seed=0)


#: Trajectories advanced side by side (at least; twice the engine's workers
#: when it has more, as through a tracker with many devices): while the
#: engine builds and times one's candidates, this process applies and
#: verifies the others' steps.
WAVE = 4


def _run(todo, cfg, engine, sink, existing, done, states, progress_path, counts, bar, log, context) -> None:
    sources, teacher_file, teacher_counts, ranker = context
    queue = list(todo)
    active: list[dict] = []
    wave = max(WAVE, 2 * getattr(engine, "workers", 1))

    def submit(analyses, reference) -> list:
        futures = [engine.submit(a, repeat=cfg.repeat, reference=reference) for a in analyses]
        counts["measurements"] += len(futures)
        return futures

    def start_next() -> None:
        while queue and len(active) < wave:
            variant, k, resume = queue.pop(0)
            job = {"tid": _tid(variant, k), "variant": variant, "k": k, "gen": None,
                   "futures": [], "resume": resume, "states": resume.next_index if resume is not None else 0}
            if resume is None:
                job["futures"] = submit([variant.analysis], variant.analysis)
            active.append(job)

    def commit() -> None:
        sink.flush()
        os.fsync(sink.fileno())
        write_atomic(progress_path, json.dumps({"done": sorted(done), "states": dict(sorted(states.items())),
                                                "bytes": sink.tell()}, indent=0) + "\n", durable=True)

    def write(samples) -> None:
        for sample in samples:
            if sample["id"] in existing:
                continue
            records.validate(sample)
            sink.write(records.dumps(sample) + "\n")
            existing.add(sample["id"])
            counts["written"] += 1
            counts["verified"] += sample["verified"]

    start_next()
    while active:
        for job in list(active):
            ms = [f.result() for f in job["futures"]]
            counts["hits"] += sum(1 for m in ms if m.cached)
            if job["gen"] is None:
                if job["resume"] is None and (ms[0].error is not None or ms[0].median_ms is None):
                    log(f"{job['tid']}: the start program has no latency ({ms[0].error}); trajectory skipped")
                    _finish(job, active, done, states, commit, counts, bar, cfg.steps)
                    continue
                if job["k"] == TEACHER_JOB:
                    job["gen"] = _teachers(job["variant"], cfg, ms[0], sources, done, teacher_file, teacher_counts,
                                           log)
                else:
                    job["gen"] = _trajectory(job["variant"], job["k"], cfg, ms[0] if ms else None, log,
                                             job["resume"], ranker)
                request = next(job["gen"], None)
            else:
                request = job["gen"].send(ms)
            # Samples come out before the next request (or the end).
            while isinstance(request, tuple) and request[0] == "trajectory":
                # A teacher trajectory, whole: committed at once (a kill
                # before the commit follows it again, from the cache).
                _, tid, samples, source = request
                write(samples)
                done.add(tid)
                commit()
                teacher_counts.samples += len(samples)
                if source == "plan":
                    teacher_counts.plan_trajectories += 1
                else:
                    teacher_counts.database_trajectories += 1
                request = next(job["gen"], None)
            while isinstance(request, tuple):
                for sample in request[1]:
                    states[job["tid"]] = sample["step_index"]
                write(request[1])
                commit()
                job["states"] += 1
                if bar is not None:
                    bar.state(counts["written"], counts["verified"])
                request = next(job["gen"], None)
            if request is None:
                _finish(job, active, done, states, commit, counts, bar, cfg.steps)
            else:
                job["futures"] = submit(request, job["variant"].analysis)
        start_next()


def _finish(job, active, done, states, commit, counts, bar, steps: int) -> None:
    active.remove(job)
    done.add(job["tid"])
    states.pop(job["tid"], None)
    commit()
    if bar is not None and job["k"] != TEACHER_JOB:
        bar.trajectory(max(0, steps - job["states"]), counts["written"], counts["verified"])

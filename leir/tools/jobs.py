"""The slow work of an editor session, as functions a worker process runs:
apply one step and verify it numerically, convert between LEIR and
TVMScript, and run an optimize search whose measurements are made by the
process that started it.

Every function takes plain, picklable arguments (text, a step as JSON) and
returns a plain, picklable result: the new text, or a ``Failure`` that says
why not in the words a user reads. A user's mistake or a refused step is a
``Failure``, never an exception; an exception out of here is a bug.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from leir.errors import LeirError
from leir.tools import optimize_messages as messages

__all__ = ["Applied", "Converted", "Failure", "apply_step", "convert", "job_worker_initializer", "kernel_program",
           "optimize_child"]


def job_worker_initializer(cap: int | None, budget_mb: float | None = None) -> None:
    """The server's job pool ``initializer``: the process's memory is capped
    at ``cap`` bytes and it is marked isolated (``leir.sandbox``), and the
    memory budget (``leir.footprint``) its jobs check programs against is
    ``budget_mb`` (None: the default or ``$LEIR_MEMORY_BUDGET_MB``)."""
    import os

    from leir.footprint import BUDGET_ENV
    from leir.sandbox import worker_initializer

    if budget_mb is not None:
        os.environ[BUDGET_ENV] = repr(float(budget_mb))
    worker_initializer(cap)


@dataclass(frozen=True)
class Failure:
    """Why a job has no result. ``code`` is the typed error's code
    (``leir.transforms.base``: "stale-step", "not-applicable",
    "verification-failed", "tvm-refused"...; "document" when the document
    has errors); ``message`` one line; ``detail`` the longer explanation."""

    code: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class Applied:
    """A step applied to a document and verified."""

    #: The whole document after the step.
    text: str
    #: ``Verification.summary()``: what was compared, and the worst error.
    verification: str
    #: The programs before and after, in complete LEIR text (for measuring).
    before_program: str
    after_program: str


@dataclass(frozen=True)
class Converted:
    #: "python" or "leir".
    language: str
    text: str
    #: A name for the new document: "matmul.py", "matmul.leir".
    title: str


def _failure(e: LeirError) -> Failure:
    short = getattr(e, "short", str(e))
    return Failure(getattr(e, "code", "error"), short, getattr(e, "detail", "") or "")


# ------------------------------------------------------------ apply + verify


def apply_step(text: str, language: str, step: dict, kernel: str | None = None, verify: bool = True,
               record: bool = True) -> Applied | Failure:
    """``step`` ({"id", "args"}) applied to a document's text: the whole
    new text, verified on random inputs against the old one (unless
    ``verify`` is False), or a ``Failure``. ``language`` is "leir" or
    "tvmscript" (then ``kernel`` names the kernel, as the step's arguments
    do). With ``record``, a verified step's outcome is remembered for
    ``leir.tools.suggest`` (``StepOutcomes``)."""
    from leir.transforms import step_from_json

    try:
        parsed = step_from_json(step)
        if language == "leir":
            return _apply_leir(text, parsed, verify, record)
        return _apply_tvmscript(text, parsed, kernel, verify, record)
    except LeirError as e:
        return _failure(e)


def _apply_leir(text: str, step, verify: bool, record: bool) -> Applied | Failure:
    from leir import transforms
    from leir.bridge.document import load_leir
    from leir.printer import print_program
    from leir.semantics import analyze

    doc = load_leir(text)
    if not doc.ok:
        first = next(d for d in doc.diagnostics if d.is_error)
        return Failure("document", f"the document has errors ({doc.source.format_location(first.span)}: "
                                   f"{first.message}); fix them before transforming it")
    if verify:
        from leir.footprint import require_within_budget

        require_within_budget(doc.analysis, "verify")  # before anything is lowered or built
    program = transforms.apply(doc.analysis, step)
    after = analyze(program)
    summary = "not verified"
    if verify:
        result = transforms.verify(doc.analysis, after)
        summary = result.summary()
        if not result.ok:
            return Failure("verification-failed", f"{step.id} changes what the program computes: {summary}",
                           "the step was not applied; this is a bug in leir's legality checks")
        if record:
            _record(doc.analysis, step, after, "leir")
    return Applied(print_program(program), summary, print_program(doc.analysis.complete_program()),
                   print_program(after.complete_program()))


def _apply_tvmscript(text: str, step, kernel: str | None, verify: bool, record: bool) -> Applied | Failure:
    from leir.printer import print_program
    from leir.tools.measuring import tvmscript_namespace
    from leir.transforms.python_kernels import load_kernel, tvmscript_apply, tvmscript_verify

    before = load_kernel(text, kernel)
    if verify:
        from leir.footprint import require_within_budget

        require_within_budget(before.ctx.analysis, "verify")
    new_text = tvmscript_apply(text, step, before.name)
    after = load_kernel(new_text, before.name)
    summary = "not verified"
    if verify:
        result = tvmscript_verify(text, new_text, before.name)
        summary = result.summary()
        if not result.ok:
            return Failure("verification-failed", f"{step.id} changes what kernel {before.name} computes: {summary}",
                           "the step was not applied; this is a bug in leir's legality checks")
        if record:
            _record(before.ctx.analysis, step, after.ctx.analysis, tvmscript_namespace(before.name))
    return Applied(new_text, summary, print_program(before.ctx.analysis.complete_program()),
                   print_program(after.ctx.analysis.complete_program()))


def record_plan(programs, steps, end, goal: str) -> None:
    """Remember a kept plan in the step outcomes, so that the editor offers
    its steps in order (``leir.tools.suggest``)."""
    _into_outcomes(lambda outcomes: outcomes.record_plan(programs, steps, end, goal))


def _record(before, step, after, namespace: str) -> None:
    _into_outcomes(lambda outcomes: outcomes.record(before, step, after, namespace))


def _into_outcomes(write) -> None:
    from leir.tools.measuring import default_outcomes

    outcomes = default_outcomes()
    if outcomes is None:
        return
    try:
        write(outcomes)
    except LeirError:
        pass  # a read-only cache directory costs the "measured" label and the plan's ranking, not the step


# ------------------------------------------------------------ convert


def kernel_name(name: str) -> str:
    """A Python identifier for a kernel named after a file ("my-op" -> "my_op")."""
    name = re.sub(r"\W", "_", name) or "main"
    return name if name.isidentifier() else f"k_{name}"


def convert(text: str, language: str, kernel: str | None = None, name: str = "main") -> Converted | Failure:
    """A ``.leir`` document as a TVMScript kernel named ``name``, or a Python
    file's kernel as LEIR, as ``leir convert`` prints them."""
    from leir.printer import print_program

    try:
        if language == "leir":
            from leir.bridge.document import load_leir
            from leir.bridge.lower import to_tvmscript

            doc = load_leir(text)
            if not doc.ok:
                first = next(d for d in doc.diagnostics if d.is_error)
                return Failure("document", f"the document has errors ({doc.source.format_location(first.span)}: "
                                           f"{first.message}); fix them before converting it")
            name = kernel_name(name)
            return Converted("python", to_tvmscript(doc.analysis, name).rstrip("\n") + "\n", f"{name}.py")
        from leir.format import canonical_program
        from leir.transforms.python_kernels import load_kernel

        k = load_kernel(text, kernel)
        return Converted("leir", print_program(canonical_program(k.ctx.analysis, minimal=True)), f"{k.name}.leir")
    except LeirError as e:
        return _failure(e)


def kernel_program(text: str, kernel: str | None = None) -> str | Failure:
    """A Python file's kernel raised to LEIR: the complete program text (what
    the measurement engine takes)."""
    from leir.printer import print_program
    from leir.transforms.python_kernels import load_kernel

    try:
        return print_program(load_kernel(text, kernel).ctx.analysis.complete_program())
    except LeirError as e:
        return _failure(e)


# ------------------------------------------------------------ optimize


class _Cancelled(Exception):
    """The parent asked the search to stop."""


@dataclass
class _ProxyMeasurer:
    """A ``leir.tools.measuring.Measurer`` that asks the parent process to measure
    (its measurement engine owns the workers and the cache), and remembers
    every answer: a program asked for twice is measured once."""

    conn: Any
    known: dict[str, Any] = field(default_factory=dict)
    #: How a search's result names its measurer.
    name = "MeasurementEngine (server)"

    def __call__(self, analyses):
        from leir.tools.measuring import Timing
        from leir.printer import print_program

        texts = [print_program(a.complete_program()) for a in analyses]
        todo = [t for t in dict.fromkeys(texts) if t not in self.known]
        if todo:
            self.conn.send(messages.MeasureRequest(todo))
            reply = self.conn.recv()
            if isinstance(reply, messages.Cancel):
                raise _Cancelled()
            for t, (ms, error, cached) in zip(todo, reply.timings):
                self.known[t] = Timing(ms, error, cached)
        return [self.known[t] for t in texts]


class _PairingProxyMeasurer(_ProxyMeasurer):
    """A proxy whose parent's engine can also time two programs turn about
    without its cache (``leir.tools.measuring.measure_pair`` uses ``paired``)."""

    def paired(self, before, after, rounds: int):
        from leir.tools.measuring import Paired
        from leir.printer import print_program

        self.conn.send(messages.PairedRequest(print_program(before.complete_program()),
                                              print_program(after.complete_program()), rounds))
        reply = self.conn.recv()
        if isinstance(reply, messages.Cancel):
            raise _Cancelled()
        return Paired(tuple(reply.before_runs), tuple(reply.after_runs), tuple(reply.before_rounds),
                      tuple(reply.after_rounds), reply.error)


def optimize_child(conn, text: str, language: str, kernel: str | None, options: dict) -> None:
    """Run ``leir.tools.optimize.optimize`` on a document, talking to the parent
    through ``conn`` (a ``multiprocessing`` connection):

    - sends a ``MeasureRequest`` (or ``PairedRequest``) and waits for
      ``Timings`` (``PairedTimes``), or ``Cancel``;
    - sends ``Progress`` as the search goes, and ``StepKept`` for each step
      kept, as it is kept;
    - ends with ``Done`` or ``Failed`` (``leir.tools.optimize_messages``).

    ``options``: steps, budget, strategy, target, seed: the search is the
    one ``leir optimize`` runs. Greedy sends each step as it keeps it, beam
    and MCTS theirs once the final program's gain is confirmed."""
    try:
        conn.send(_optimize(conn, text, language, kernel, options))
    except _Cancelled:
        conn.send(messages.Failed(Failure("cancelled", "optimize was cancelled")))
    except LeirError as e:
        conn.send(messages.Failed(_failure(e)))
    except (EOFError, BrokenPipeError):
        pass  # the parent went away


#: Measurements the editor's Optimize spends at most when it names no budget:
#: what the benchmark suite gives leir and MetaSchedule (docs/optimize.md),
#: room for a tiled kernel's plans and their polish; 6 per step + 1 (the
#: command line's default) would be 121 for the 20 steps the editor proposes,
#: minutes of building on a realistic size.
EDITOR_BUDGET = 64


def _optimize(conn, text: str, language: str, kernel: str | None, options: dict):
    from leir.tools.optimize import optimize
    from leir.printer import print_program

    if language == "leir":
        from leir.bridge.document import load_leir

        doc = load_leir(text)
        if not doc.ok:
            return messages.Failed(Failure("document", "the document has errors; fix them before optimizing it"))
        start = doc.analysis
    else:
        from leir.transforms.python_kernels import load_kernel

        start = load_kernel(text, kernel).ctx.analysis
    from leir.footprint import BUDGET_ENV, require_within_budget

    if options.get("memory_budget_mb") is not None:  # what this search's verifications check against
        import os

        os.environ[BUDGET_ENV] = repr(float(options["memory_budget_mb"]))
    require_within_budget(start, "verify")
    steps = int(options.get("steps", 3))
    budget = int(options.get("budget", min(6 * steps + 1, EDITOR_BUDGET)))
    strategy = options.get("strategy", "plans")
    target = options.get("target", "llvm")
    seed = int(options.get("seed", 0))
    measurer = (_PairingProxyMeasurer if options.get("paired") else _ProxyMeasurer)(conn)

    def progress(message: str) -> None:
        conn.send(messages.Progress(message))

    def kept(before, step, after, record) -> None:
        _record(before, step, after, "leir")
        conn.send(messages.StepKept(record.to_json(), print_program(after.program)))

    result = optimize(start, steps=steps, budget=budget, strategy=strategy, target=target, measurer=measurer,
                      seed=seed, progress=progress, on_kept=kept, on_plan=record_plan)
    return messages.Done(result.to_json())


def timing_json(m) -> tuple[float | None, str | None, bool]:
    """A ``Measurement`` as a ``Timings`` answer carries it."""
    if m.error is not None or m.median_ms is None:
        return None, str(m.error or "no latency"), bool(m.cached)
    return float(m.median_ms), None, bool(m.cached)

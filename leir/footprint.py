"""How much memory a program's tensors take, and the budget leir builds and
runs programs within.

A program's size is chosen by its text (``in X: f32[12000,12000]`` is
576 MB), so everything that builds and runs one (``leir run``, a
verification, a measurement, a search) first checks it here and refuses,
in one line and before anything is built or allocated, a program whose
memory would exceed the budget. The worker processes that do the building
are capped as well (``leir.sandbox``), below what the machine has; the
budget makes the common case a clear message rather than a worker killed
by its cap.

What is counted (``Footprint``), bytes as NumPy stores them (one per
element for ``i4``/``u4``):

- **the program's tensors**: every input, output and temporary;
- **running it once** (``run_bytes``; ``leir run``, a measurement): the
  inputs on the host and on the device, each output zero-filled on the
  host, on the device and read back, the temporaries on the device, and,
  for the check against the NumPy evaluation, the evaluator's copy of every
  output and temporary and the comparison's float64 work arrays;
- **verifying a step** (``verify_bytes``; code actions, ``leir apply
  --verify``, each step of a search): one seed's inputs on the host and the
  device, both programs' outputs kept for the comparison (the reference
  outputs of the program before, and the outputs after) while the second
  runs (zeros, device, result), the larger program's temporaries (twice:
  the same count as a run, so that no build a verification makes is
  refused when the verification was not), and the comparison's float64
  work arrays for the largest output. The seeds run
  one after the other: only one seed's arrays are alive at a time.

  Measured (``/tmp``-style script: ``ru_maxrss`` of a process that has
  built one kernel, before and after): ``C = A + B`` on f32[4000,4000]
  (tensors 192 MB) peaked 941 MB higher verifying a step and 940 MB higher
  for ``leir.bridge.run.check``; the model says 1024 MB for both. The issue's
  12000x12000 verification peaked at 6.3 GB; the model says 9.2 GB.

The budget is ``LEIR_MEMORY_BUDGET_MB`` in the environment (the command
line) or the server's ``leir.memoryBudgetMB`` setting; default
``DEFAULT_BUDGET_MB``. Importing this module is cheap (no NumPy, no TVM).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from leir.errors import LeirError

__all__ = [
    "DEFAULT_BUDGET_MB", "BUDGET_ENV", "Footprint", "MemoryBudgetExceeded", "budget_bytes", "budget_diagnostics",
    "check_budget",
    "footprint", "format_bytes", "require_within_budget", "worker_cap",
]

#: The default budget, in MB (10**6 bytes).
DEFAULT_BUDGET_MB = 1000
#: The environment variable the command line reads the budget from.
BUDGET_ENV = "LEIR_MEMORY_BUDGET_MB"
#: Where the message says the budget is set.
SETTING = "setting leir.memoryBudgetMB, or LEIR_MEMORY_BUDGET_MB for the command line"

_MB = 10**6

#: Bytes per element as NumPy (and ml_dtypes) store each LEIR dtype.
ITEMSIZE = {
    "f16": 2, "f32": 4, "f64": 8, "bf16": 2, "f8e4m3fn": 1, "f8e5m2": 1,
    "i4": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
    "u4": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8, "bool": 1,
}

#: A float64 copy of an output for the comparison: the comparison holds
#: about this many float64 arrays of the output's size at once.
COMPARE_F64_ARRAYS = 4


class MemoryBudgetExceeded(LeirError):
    """The program's memory would exceed the budget; nothing was built."""

    code = "memory-budget"

    def __init__(self, message: str, needed: int = 0, budget: int = 0):
        super().__init__(message)
        self.short = message
        self.detail = ""
        self.needed = needed
        self.budget = budget


@dataclass(frozen=True)
class Footprint:
    """Bytes of a program's tensors, by role, and of its largest output."""

    inputs: int
    outputs: int
    temporaries: int
    largest_output_elements: int
    #: The tensor taking the most bytes, and how many.
    largest: tuple[str, int] = ("", 0)

    @property
    def tensors(self) -> int:
        return self.inputs + self.outputs + self.temporaries

    def run_bytes(self) -> int:
        """Building and running it once, checked against the evaluator."""
        return self.verify_bytes()

    def verify_bytes(self, after: "Footprint | None" = None) -> int:
        """Verifying a step from this program to ``after`` on one seed at a
        time (see the module docstring). One model for both: what a
        verification builds is never larger than what it verifies, so a
        program within the budget for verification is within it for each
        build and run the verification makes."""
        after = after or self
        outputs = max(self.outputs, after.outputs)
        elements = max(self.largest_output_elements, after.largest_output_elements)
        return (2 * max(self.inputs, after.inputs) + 4 * outputs + 2 * max(self.temporaries, after.temporaries)
                + COMPARE_F64_ARRAYS * 8 * elements)


def _tensor_bytes(t) -> int:
    n = 1
    for d in t.shape:
        n *= int(d)
    return n * ITEMSIZE.get(t.dtype, 8)


def footprint(analysis) -> Footprint:
    """The ``Footprint`` of an analysed program (``leir.semantics.Analysis``)."""
    by_role = {"in": 0, "out": 0, "tmp": 0}
    largest, largest_out = ("", 0), 0
    for t in analysis.tensors.values():
        b = _tensor_bytes(t)
        by_role[t.role] = by_role.get(t.role, 0) + b
        if b > largest[1]:
            largest = (t.name, b)
        if t.role == "out":
            n = 1
            for d in t.shape:
                n *= int(d)
            largest_out = max(largest_out, n)
    return Footprint(by_role["in"], by_role["out"], by_role["tmp"], largest_out, largest)


def format_bytes(n: int) -> str:
    """``1.7 GB``, ``576 MB``, ``12 kB`` (decimal units, two significant figures at least)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return f"{text.removesuffix('.0')} {unit}"
    return f"{n} bytes"


def budget_bytes(budget_mb: float | None = None) -> int:
    """The budget in bytes: ``budget_mb`` when given, else
    ``$LEIR_MEMORY_BUDGET_MB``, else the default. Raises ``LeirError`` for
    an environment value that is not a positive number."""
    if budget_mb is None:
        text = os.environ.get(BUDGET_ENV, "").strip()
        if not text:
            budget_mb = DEFAULT_BUDGET_MB
        else:
            try:
                budget_mb = float(text)
            except ValueError:
                raise LeirError(f"{BUDGET_ENV}={text!r}: expected a number of megabytes") from None
            if not budget_mb > 0:
                raise LeirError(f"{BUDGET_ENV}={text!r}: expected a positive number of megabytes")
    return int(budget_mb * _MB)


#: What the worker processes that build and run programs may use beyond the
#: budget: TVM and LLVM's own address space (about 2 GiB mapped, most of it
#: never touched) and the compiler's working memory.
WORKER_OVERHEAD = 3 * 1024**3


def worker_cap(budget_mb: float | None = None) -> int:
    """The memory cap (``leir.sandbox.limit_memory``) of a worker that builds
    and verifies programs within the budget: the budget plus TVM's own
    address space; 4.2 GB (3 GiB + 1 GB) with the default budget."""
    return WORKER_OVERHEAD + budget_bytes(budget_mb)


_WHAT = {
    "tensors": "",
    "run": "building and running it needs about {needed}",
    "verify": "verifying a step on it needs about {needed} (both programs' outputs are kept for the comparison)",
    "measure": "measuring it needs about {needed}",
}


def check_budget(analysis, what: str = "run", *, budget_mb: float | None = None, after=None) -> str | None:
    """The refusal message when ``what`` ("run", "verify", "measure") on the
    program would exceed the budget, else None."""
    budget = budget_bytes(budget_mb)
    fp = footprint(analysis)
    if what == "verify":
        needed = fp.verify_bytes(footprint(after) if after is not None else None)
    elif what == "tensors":
        needed = fp.tensors
    else:
        needed = fp.run_bytes()
    if fp.tensors <= budget and needed <= budget:
        return None
    head = f"the tensors of this program take {format_bytes(fp.tensors)}"
    if fp.largest[0] and fp.largest[1] * 2 > fp.tensors:
        head += f" ({fp.largest[0]}: {format_bytes(fp.largest[1])})"
    if needed > fp.tensors:
        head += "; " + _WHAT.get(what, _WHAT["run"]).format(needed=format_bytes(needed))
    return f"{head}; leir builds and runs programs up to {format_bytes(budget)} ({SETTING})"


def require_within_budget(analysis, what: str = "run", *, budget_mb: float | None = None, after=None) -> None:
    """Raise ``MemoryBudgetExceeded`` (a one-line ``LeirError``) when ``what``
    on the program would exceed the budget. Call it before building or
    allocating anything."""
    message = check_budget(analysis, what, budget_mb=budget_mb, after=after)
    if message is not None:
        fp = footprint(analysis)
        raise MemoryBudgetExceeded(message, fp.tensors, budget_bytes(budget_mb))


def budget_diagnostics(analysis, budget_mb: float | None = None) -> list:
    """A warning at the program's largest tensor (its declaration, or its
    first access) when building and running the program would exceed the
    budget: leir will refuse to verify, run or measure it. [] otherwise
    (and for a program with errors). Cheap: a sum over the tensors."""
    if analysis is None or not analysis.ok:
        return []
    try:
        message = check_budget(analysis, "run", budget_mb=budget_mb)
    except LeirError:
        return []
    if message is None:
        return []
    from leir.ast import Span
    from leir.diagnostics import warning

    name = footprint(analysis).largest[0]
    span = analysis.tensors[name].span if name in analysis.tensors else None
    if span is None:
        start = analysis.program.span.start if analysis.program.span else 0
        span = Span(start, start)
    return [warning(span, "memory-budget", f"{message}: steps on it are not verified, and it is not run or measured")]

"""Build a LEIR program with TVM, run it, and check it against the NumPy
evaluator.

``check`` is what "verified" means for a program or a transformation step:
TVM's result on seeded random inputs matches ``leir.evaluate`` for every
output, by Step-TP's acceptance rule (``compare``).

On the CPU, thread-bound (``B``) loops are lowered as serial loops, so a
GPU-style program can be checked without a GPU; the result says so in its
notes. TVM is imported inside the functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from leir.bridge.comparison import Comparison, compare, merge_comparisons
from leir.errors import LeirError
from leir.inputs import InputError, check_inputs, random_inputs, zeros
from leir.bridge.lower import lower, thread_loops, tvm_error_message
from leir.semantics import Analysis
from leir.bridge.targets import TARGETS, cuda_target, gpu_problems, host_target, kernel_threads

if TYPE_CHECKING:
    import tvm

__all__ = [
    "BuildError", "CheckResult", "Comparison", "CompiledProgram", "InputError", "RunError", "RunResult",
    "build", "check", "compile_program", "compare", "cuda_target", "host_target", "merge_comparisons",
    "random_inputs", "run",
]



class RunError(LeirError):
    """The program could not be run (no such device, or TVM failed)."""


class BuildError(RunError):
    """TVM could not build the program for the target."""


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    target: str  # "llvm" | "cuda"
    #: What the user should know about how it ran (serialised threads...).
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckResult:
    ok: bool
    target: str
    seed: int
    comparisons: dict[str, Comparison]
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{name}: {c.describe()}" for name, c in self.comparisons.items()]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


# ------------------------------------------------------------ building and running


def build(func: "tvm.tirx.PrimFunc", target) -> "tvm.runtime.Executable":
    """``tvm.compile`` of ``func`` for ``target`` (a ``tvm.target.Target`` or
    its dictionary); raises ``BuildError`` with TVM's reason."""
    import tvm

    try:
        return tvm.compile(func, target=target)
    except Exception as exc:  # TVM reports build failures as assorted exception types
        raise BuildError(f"TVM could not build the program: {tvm_error_message(exc)}") from exc


def run(analysis: Analysis, inputs: dict[str, np.ndarray], target: str = "llvm") -> RunResult:
    """Build the program for ``target`` ("llvm": this CPU, "cuda": this
    machine's GPU) and run it on ``inputs``; outputs start zeroed. Raises
    ``InputError``, ``LoweringError``, ``BuildError`` or ``RunError``."""
    check_inputs(analysis, inputs)
    return compile_program(analysis, target)(inputs)


@dataclass
class CompiledProgram:
    """A program built and loaded once, to run on many inputs."""

    analysis: Analysis
    target: str
    module: object
    device: object
    notes: list[str]

    def __call__(self, inputs: dict[str, np.ndarray]) -> RunResult:
        arrays = check_inputs(self.analysis, inputs)
        return RunResult(_call(self.module, self.analysis, arrays, self.device), self.target, list(self.notes))


def compile_program(analysis: Analysis, target: str = "llvm") -> CompiledProgram:
    """Lower, build and load the program for ``target`` (see ``run``)."""
    if target not in TARGETS:
        raise RunError(f"unknown target {target!r}: expected one of {', '.join(TARGETS)}")
    from leir.footprint import require_within_budget

    require_within_budget(analysis, "run")  # MemoryBudgetExceeded, before anything is built
    _require_transferable(analysis)
    func, tvm_target, device, notes = _lowered_for(analysis, target)
    module = _loaded(build(func, tvm_target))
    return CompiledProgram(analysis, target, module, device, notes)


def _lowered_for(analysis: Analysis, target: str):
    """The function, TVM target, device and notes for running on ``target``."""
    import tvm

    if target == "llvm":
        threads = thread_loops(analysis)
        notes = [f"thread-bound loops {', '.join(threads)} were run as serial loops on the CPU"] if threads else []
        return lower(analysis, threads_as_serial=bool(threads)), host_target(), tvm.cpu(0), notes
    tvm_target = cuda_target()
    if tvm_target is None:
        raise RunError("no CUDA GPU is available on this machine")
    problems = gpu_problems(analysis)
    if problems:
        raise BuildError(problems[0])
    return lower(analysis), tvm_target, tvm.cuda(0), []


#: Dtypes TVM packs two to a byte, which NumPy (ml_dtypes) stores one per byte.
PACKED_DTYPES = ("i4", "u4")


def _require_transferable(analysis: Analysis) -> None:
    for t in analysis.tensors.values():
        if t.role != "tmp" and t.dtype in PACKED_DTYPES:
            raise RunError(f"{t.name} is {t.dtype}: TVM packs {t.dtype} two to a byte and cannot take it from NumPy; "
                           f"the evaluator (leir.evaluate) can run it")


def _loaded(executable) -> object:
    # TVM starts its thread pool at the first kernel this process runs; its
    # default is half the CPUs, pinned (one thread on a 2-vCPU machine), so
    # `leir run` and the in-process timer would see no parallel loop pay.
    os.environ.setdefault("TVM_NUM_THREADS", str(kernel_threads()))
    try:
        return executable.jit()
    except Exception as exc:  # nvcc or the loader failed
        raise BuildError(f"TVM could not load the built program: {tvm_error_message(exc)}") from exc


def _call(module, analysis: Analysis, arrays: dict[str, np.ndarray], device) -> dict[str, np.ndarray]:
    import tvm

    try:
        params = [tvm.runtime.tensor(arrays[t.name], device) for t in analysis.inputs()]
        results = {t.name: tvm.runtime.tensor(zeros(t), device) for t in analysis.outputs()}
        module["main"](*params, *results.values())
        device.sync()
        return {name: value.numpy() for name, value in results.items()}
    except Exception as exc:  # a kernel fault surfaces as a TVM error
        raise RunError(f"running the program failed: {tvm_error_message(exc)}") from exc


# ------------------------------------------------------------ checking


def check(analysis: Analysis, seed: int = 0, target: str = "llvm") -> CheckResult:
    """Run the program with TVM and with the NumPy evaluator on the same
    random inputs (``random_inputs(analysis, seed)``) and compare every output."""
    from leir.evaluate import evaluate

    inputs = random_inputs(analysis, seed)
    result = run(analysis, inputs, target)
    expected = evaluate(analysis, inputs)
    comparisons = {}
    notes = list(result.notes)
    for t in analysis.outputs():
        comparisons[t.name] = compare(result.outputs[t.name], expected[t.name], t.dtype)
        nans = int(np.count_nonzero(np.isnan(expected[t.name].astype(np.float64))))
        if nans:
            notes.append(f"{t.name} has {nans} NaN values in the reference: an input outside a function's domain?")
    if not comparisons:
        notes.append("the program has no outputs, so nothing was compared")
    ok = bool(comparisons) and all(c.ok for c in comparisons.values())
    return CheckResult(ok, target, seed, comparisons, notes)

"""The latency of a vendor implementation of the same workload, for context
("our kernel runs at 40% of OpenBLAS").

Two kinds of reference, tried in this order:

- **A contraction run by BLAS.** A program that is one equation
  ``C_{..} += A_{..}*B_{..}`` over full loop ranges, with plain loop
  variables as indices (a matmul, batched matmul, matrix-vector product, or
  any einsum of two tensors), is timed as ``np.einsum`` with a precomputed
  contraction path, which NumPy hands to BLAS (``tensordot``). The path is
  computed once, outside the timing, as ``optimize=True`` would on each call.
  Inputs of another dtype than the output (f16 inputs accumulated in f32)
  are converted to the output's dtype beforehand.
- **The bundled NumPy reference.** A program that is one of
  ``examples/*.leir`` (same structural text, ``key.structural_text``) is
  timed as its function in ``examples/references.py``. Those compute in
  float64 for accuracy, so they are a slow vendor; the result says so.

Either reference's outputs are compared with the NumPy evaluation of the
program (the rule ``leir.bridge.comparison.compare`` applies to kernels) before it is
timed: a reference that computes something else is not reported.

A transformed program is no longer a recognisable contraction or a bundled
example; pass the program it was derived from as the workload
(``MeasurementEngine.submit(..., workload=original)``).

Only CPU references exist here; on a GPU there is none (cuBLAS through torch
is not wired up), so ``vendor_latency`` returns None there.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from leir import ast as A
from leir.measure.measurement import VendorResult
from leir.measure.timing import DEFAULT_MIN_RUN_MS, DEFAULT_REPEAT, summarize, time_callable
from leir.semantics import Analysis

#: Environment variables that change which OpenBLAS kernels or how many
#: threads run; reported as they are, never changed.
BLAS_ENVIRONMENT = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


# ------------------------------------------------------------ recognising a contraction


@dataclass(frozen=True)
class Contraction:
    """``output = einsum(subscripts, *operands)``."""

    subscripts: str
    operands: tuple[str, str]
    output: str


def recognise_contraction(analysis: Analysis) -> Contraction | None:
    """The program as an einsum of two tensors, or None when it is not one
    (see the module docstring for what qualifies)."""
    if len(analysis.equations) != 1 or analysis.temporaries():
        return None
    info = analysis.equations[0]
    eq = info.equation
    if info.kind != "reduce" or info.combiner != "sum" or eq.predicate is not None:
        return None
    # ``C = C - A*B`` has the sum combiner with a negated operand: not a contraction.
    product = info.operand
    if not (isinstance(product, A.Binary) and product.op == "*"
            and isinstance(product.lhs, A.Access) and isinstance(product.rhs, A.Access)):
        return None
    accesses = (eq.lhs, product.lhs, product.rhs)
    extents: dict[str, int] = {}
    for loop in info.loops:
        if loop.start != 0 or loop.var in extents:
            return None
        extents[loop.var] = loop.extent
    used: set[str] = set()
    for access in accesses:
        names = _plain_indices(access)
        if names is None or len(set(names)) != len(names):
            return None
        shape = analysis.tensors[access.tensor].shape
        if any(extents.get(v) != d for v, d in zip(names, shape)):
            return None  # a partial range, or an index that is not a loop variable
        used.update(names)
    if used != set(extents):
        return None  # a loop that no tensor is indexed by would repeat the accumulation
    for access in accesses[1:]:
        if analysis.tensors[access.tensor].role != "in":
            return None
    if not all(_is_float(analysis.tensors[a.tensor].dtype) for a in accesses):
        return None
    if all(len(v) == 1 and v.isascii() and v.isalpha() for v in extents):
        letters = {v: v for v in extents}  # ``ik,kj->ij`` reads as the program does
    elif len(extents) <= 26:
        letters = {v: chr(ord("a") + i) for i, v in enumerate(extents)}
    else:
        return None
    spec = [("".join(letters[v] for v in _plain_indices(a))) for a in accesses]
    return Contraction(f"{spec[1]},{spec[2]}->{spec[0]}", (product.lhs.tensor, product.rhs.tensor), eq.lhs.tensor)


def _plain_indices(access: A.Access) -> list[str] | None:
    if access.indices is None:
        return []
    if not all(isinstance(i, A.Var) for i in access.indices):
        return None
    return [i.name for i in access.indices]


def _is_float(dtype: str) -> bool:
    return dtype in ("f16", "f32", "f64")


# ------------------------------------------------------------ bundled references


def examples_directory() -> Path:
    """``examples/`` of a source checkout (absent from an installed wheel)."""
    return Path(__file__).resolve().parents[2] / "examples"


def bundled_reference(analysis: Analysis) -> tuple[str, Callable[..., dict]] | None:
    """(stem, function) of the bundled example the program is, or None."""
    from leir.measure.key import structural_text

    stem = _bundled_index().get(structural_text(analysis))
    if stem is None:
        return None
    module = _references_module()
    fn = getattr(module, stem, None) if module is not None else None
    return (stem, fn) if fn is not None else None


@functools.lru_cache(maxsize=1)
def _bundled_index() -> dict[str, str]:
    from leir.bridge.document import load_leir
    from leir.measure.key import structural_text

    index = {}
    directory = examples_directory()
    if not (directory / "references.py").is_file():
        return index
    for path in sorted(directory.glob("*.leir")):
        try:
            doc = load_leir(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        if doc.ok:
            index.setdefault(structural_text(doc.analysis), path.stem)
    return index


@functools.lru_cache(maxsize=1)
def _references_module():
    path = examples_directory() / "references.py"
    spec = importlib.util.spec_from_file_location("leir_bundled_references", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------ timing


def vendor_latency(analysis: Analysis, *, inputs: dict[str, np.ndarray] | None = None,
                   expected: dict[str, np.ndarray] | None = None, seed: int = 0, repeat: int = DEFAULT_REPEAT,
                   min_run_ms: float = DEFAULT_MIN_RUN_MS, device: str = "cpu") -> VendorResult | None:
    """Time the vendor reference of the program's workload on this machine's
    CPU, or None when there is none (or it does not compute the same
    outputs). ``inputs`` and ``expected`` default to ``random_inputs(analysis,
    seed)`` and their NumPy evaluation."""
    if device != "cpu":
        return None
    from leir.evaluate import evaluate
    from leir.bridge.comparison import compare
    from leir.inputs import random_inputs

    call = _contraction_call(analysis) or _bundled_call(analysis)
    if call is None:
        return None
    fn, what, kind = call
    if inputs is None:
        inputs = random_inputs(analysis, seed)
    if expected is None:
        expected = evaluate(analysis, inputs)
    bound = fn(inputs)
    outputs = bound()
    for t in analysis.outputs():
        if t.name not in outputs or not compare(np.asarray(outputs[t.name]), expected[t.name], t.dtype).ok:
            return None
    seconds, number = time_callable(bound, repeat=repeat, min_run_ms=min_run_ms)
    s = summarize(seconds, number)
    return VendorResult(s.median_ms, s.min_ms, s.max_ms, s.runs, number, what, kind, blas_description())


def _contraction_call(analysis: Analysis):
    c = recognise_contraction(analysis)
    if c is None:
        return None
    out = analysis.tensors[c.output]
    from leir.inputs import numpy_dtype

    dtype = numpy_dtype(out.dtype)
    converted = any(analysis.tensors[name].dtype != out.dtype for name in c.operands)

    def bind(inputs):
        a, b = (np.ascontiguousarray(inputs[name], dtype=dtype) for name in c.operands)
        path = np.einsum_path(c.subscripts, a, b, optimize=True)[0]
        return lambda: {c.output: np.einsum(c.subscripts, a, b, optimize=path)}

    what = f"np.einsum('{c.subscripts}', {c.operands[0]}, {c.operands[1]}, optimize=<path>)"
    if converted:
        what += f" on inputs converted to {out.dtype}"
    return bind, what, "blas-contraction"


def _bundled_call(analysis: Analysis):
    found = bundled_reference(analysis)
    if found is None:
        return None
    stem, fn = found

    def bind(inputs):
        return lambda: fn(**inputs)

    return bind, f"examples/references.py:{stem} (NumPy, computes in float64)", "bundled-reference"


# ------------------------------------------------------------ BLAS configuration


def blas_info() -> dict:
    """What NumPy's BLAS is and how it runs: library and version, the
    kernels OpenBLAS chose (its core type), its threads, and the environment
    variables that change them. From threadpoolctl when it is installed,
    else from the loaded OpenBLAS itself, else from ``numpy.show_config``."""
    info: dict = {"numpy": np.__version__, "library": None, "core": None, "threads": None,
                  "environment": {k: os.environ[k] for k in BLAS_ENVIRONMENT if k in os.environ}}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        pools.sort(key=lambda p: "numpy" not in str(p.get("filepath", "")))  # NumPy's, not SciPy's
        if pools:
            pool = pools[0]
            info.update(library=f"{pool.get('internal_api')} {pool.get('version')}",
                        core=pool.get("architecture"), threads=pool.get("num_threads"))
            return info
    info.update(_openblas_probe())
    if info["library"] is None:
        blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        if blas:
            info["library"] = f"{blas.get('name')} {blas.get('version')}"
    return info


def blas_description() -> str:
    """``numpy 2.4.6, OpenBLAS 0.3.31 (SkylakeX kernels, 2 threads)``, plus
    any OPENBLAS_* setting in force."""
    info = blas_info()
    details = []
    if info["core"]:
        details.append(f"{info['core']} kernels")
    if info["threads"]:
        details.append(f"{info['threads']} thread{'s' if info['threads'] != 1 else ''}")
    details += [f"{k}={v}" for k, v in info["environment"].items()]
    text = f"numpy {info['numpy']}, {info['library'] or 'unknown BLAS'}"
    return text + (f" ({', '.join(details)})" if details else "")


def _openblas_probe() -> dict:
    """Ask the OpenBLAS that NumPy loaded (symbol names carry the
    scipy-openblas prefix and 64-bit-integer suffix in NumPy's wheels).
    SciPy loads an OpenBLAS of its own: NumPy's is the one in its wheel's
    library directory."""
    path = _loaded_library("openblas", prefer=os.path.dirname(os.path.dirname(np.__file__)) + "/numpy")
    if path is None:
        return {}
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return {}
    found: dict = {}
    for prefix, suffix in (("scipy_", "64_"), ("scipy_", ""), ("", ""), ("", "64_")):
        config = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
        if config is None:
            continue
        config.restype = ctypes.c_char_p
        version = re.match(r"OpenBLAS\s+(\S+)", (config() or b"").decode(errors="replace"))
        found["library"] = f"OpenBLAS {version.group(1)}" if version else "OpenBLAS"
        core = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)
        if core is not None:
            core.restype = ctypes.c_char_p
            found["core"] = (core() or b"").decode(errors="replace") or None
        threads = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
        if threads is not None:
            threads.restype = ctypes.c_int
            found["threads"] = int(threads())
        break
    return found


def _loaded_library(fragment: str, prefer: str = "") -> str | None:
    """The path of a loaded shared library whose name contains
    ``fragment``; one whose path starts with ``prefer`` if there is one
    (``numpy`` matches ``numpy.libs`` too)."""
    found = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if fragment in os.path.basename(path).lower() and ".so" in path and path not in found:
                    found.append(path)
    except OSError:
        return None
    preferred = [p for p in found if prefer and p.startswith(prefer)]
    return (preferred or found or [None])[0]

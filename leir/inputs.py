"""Tensor values for running a LEIR program: NumPy dtypes, input checking
and reproducible random inputs.

Shared by the NumPy evaluator (``leir.evaluate``) and the TVM runner
(``leir.bridge.run``), so both accept and reject exactly the same inputs. Imports
nothing but NumPy (and ml_dtypes, which TVM depends on, for bf16/f8/i4).
"""

from __future__ import annotations

import numpy as np

from leir import ast as A
from leir.errors import LeirError
from leir.semantics import Analysis, TensorInfo


class InputError(LeirError, ValueError):
    """An input is missing, unknown, or of the wrong shape or dtype."""


#: LEIR dtypes NumPy lacks; ml_dtypes provides them under these names.
_ML_DTYPES = {"bf16": "bfloat16", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "i4": "int4", "u4": "uint4"}


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that stores a LEIR dtype (``"f32"`` -> float32)."""
    if dtype in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError as exc:  # pragma: no cover - ml_dtypes ships with TVM
            raise InputError(f"{dtype} tensors need the ml_dtypes package") from exc
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[dtype]))
    return np.dtype(A.DTYPES[dtype])


def is_float(dtype: str) -> bool:
    return dtype.startswith(("f", "bf"))


def is_integer(dtype: str) -> bool:
    return dtype.startswith(("i", "u"))


def describe(t: TensorInfo) -> str:
    """``(128, 64) f32``: how messages name a tensor's expected type."""
    return f"{tuple(t.shape)} {t.dtype}"


def check_inputs(analysis: Analysis, inputs: dict[str, object]) -> dict[str, np.ndarray]:
    """Every input of the program as an array of its declared shape and
    dtype. Arrays of another dtype of the same kind (float64 for an f32
    input) are converted; anything else raises ``InputError``."""
    expected = {t.name: t for t in analysis.inputs()}
    for name in inputs:
        if name not in expected:
            if name in analysis.tensors:
                raise InputError(f"{name} is {_role_name(analysis.tensors[name].role)}, not an input of the program")
            known = ", ".join(expected) or "none"
            raise InputError(f"unknown input {name} (the program's inputs: {known})")
    arrays = {}
    for name, t in expected.items():
        if name not in inputs:
            raise InputError(f"input {name}: missing (expected {describe(t)})")
        arrays[name] = _as_input_array(t, inputs[name])
    return arrays


def _as_input_array(t: TensorInfo, value: object) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != tuple(t.shape):
        raise InputError(f"input {t.name}: expected shape {describe(t)}, got {array.shape} {array.dtype}")
    target = numpy_dtype(t.dtype)
    if array.dtype != target and array.dtype.kind not in _ACCEPTED_KINDS[_kind(t.dtype)]:
        raise InputError(f"input {t.name}: expected {describe(t)}, got {array.shape} {array.dtype}")
    # Not np.ascontiguousarray: it turns a scalar (0-d) input into shape (1,).
    return np.asarray(array, dtype=target, order="C")


#: NumPy kinds an input array may have for each kind of LEIR dtype: floats
#: take floats and integers, integers take integers, booleans only booleans.
_ACCEPTED_KINDS = {"float": "fiu", "int": "iu", "bool": "b"}


def _kind(dtype: str) -> str:
    if dtype == "bool":
        return "bool"
    return "float" if is_float(dtype) else "int"


def _role_name(role: str) -> str:
    return {"out": "an output", "tmp": "a temporary", "in": "an input"}[role]


def random_inputs(analysis: Analysis, seed: int = 0) -> dict[str, np.ndarray]:
    """Reproducible inputs for every input tensor, in declaration order:
    floats uniform in [-1, 1); integers small (-8..7 signed, 0..7 unsigned)
    so that sums stay far from overflow; booleans fair coin flips. A float
    input read only inside ``sqrt``, ``rsqrt`` or ``log`` (a variance) is
    drawn from [0, 1) instead, so that the program stays in its domain.
    Raises ``leir.footprint.MemoryBudgetExceeded`` (before allocating) when
    the program's tensors alone exceed the memory budget."""
    from leir.footprint import require_within_budget

    require_within_budget(analysis, "tensors")
    rng = np.random.default_rng(seed)
    nonnegative = domain_limited_inputs(analysis)
    return {t.name: random_array(t, rng, nonnegative=t.name in nonnegative) for t in analysis.inputs()}


#: Seeds of a numerical verification; the last one draws integer-valued
#: inputs (``integer_valued``), on which sums and products are exact.
SEEDS = (0, 1, 2)


def integer_valued(inputs: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The same tensors with small integer values (floats stay floats)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, arr in inputs.items():
        if np.issubdtype(arr.dtype, np.floating):
            lo = 0 if (arr >= 0).all() else -3
            out[name] = rng.integers(lo, 4, size=arr.shape).astype(arr.dtype)
        else:
            out[name] = arr
    return out


def seed_inputs(analysis: Analysis, seed: int, seeds: tuple[int, ...] = SEEDS) -> dict[str, np.ndarray]:
    """The inputs a verification on ``seeds`` draws for ``seed``:
    ``random_inputs``, made integer-valued for the last seed of several."""
    inputs = random_inputs(analysis, seed)
    if len(seeds) > 1 and seed == seeds[-1]:
        inputs = integer_valued(inputs, seed)
    return inputs


#: Functions whose argument must not be negative.
_NONNEGATIVE_DOMAIN = frozenset({"sqrt", "rsqrt", "log"})


def domain_limited_inputs(analysis: Analysis) -> set[str]:
    """Inputs every read of which is inside the argument of sqrt, rsqrt or log."""
    inside: dict[str, bool] = {}

    def visit(e: A.Expr, limited: bool) -> None:
        if isinstance(e, A.Access):
            inside[e.tensor] = inside.get(e.tensor, True) and limited
        limited = limited or (isinstance(e, A.Call) and e.func in _NONNEGATIVE_DOMAIN)
        for child in A.children(e):
            if not isinstance(e, A.Access):  # indices hold no tensor reads
                visit(child, limited)

    for info in analysis.equations:
        visit(info.equation.rhs, False)
        if info.equation.predicate is not None:
            visit(info.equation.predicate, False)
    return {t.name for t in analysis.inputs() if inside.get(t.name, False)}


def random_array(t: TensorInfo, rng: np.random.Generator, *, nonnegative: bool = False) -> np.ndarray:
    shape = tuple(t.shape)
    target = numpy_dtype(t.dtype)
    if t.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if is_integer(t.dtype):
        low = 0 if t.dtype.startswith("u") else -8
        return rng.integers(low, 8, size=shape).astype(target)
    return rng.uniform(0.0 if nonnegative else -1.0, 1.0, size=shape).astype(target)


def zeros(t: TensorInfo) -> np.ndarray:
    return np.zeros(tuple(t.shape), dtype=numpy_dtype(t.dtype))

"""Whether two results agree: Step-TP's acceptance rule for one output
(``compare``), and several comparisons of one output as one
(``merge_comparisons``). NumPy only: what verification, the measurement
engine's reference checks and the vendor baselines share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ABSOLUTE_TOLERANCE", "COARSE_FLOATS", "Comparison", "DEFAULT_ABSOLUTE_TOLERANCE", "MSE_TOLERANCE",
    "RELATIVE_TOLERANCE", "absolute_tolerance", "compare", "merge_comparisons",
]


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_err: float
    max_rel_err: float
    mse: float
    #: Which part of the rule accepted it: "exact", "elementwise", "mse",
    #: or "" when it failed.
    criterion: str = ""
    #: Elements outside the element-wise tolerance.
    mismatched: int = 0

    def describe(self) -> str:
        verdict = f"ok ({self.criterion})" if self.ok else f"MISMATCH ({self.mismatched} elements)"
        return f"{verdict}: max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}, mse {self.mse:.3g}"


#: Step-TP's acceptance rule ("Their verification and filtering" in
#: the Step-TP paper): relative error <= 5e-3, or absolute
#: error <= 1e-7 (1.5 for f16, 1e-3 for f32), or MSE <= 1e-5.
RELATIVE_TOLERANCE = 5e-3
MSE_TOLERANCE = 1e-5
ABSOLUTE_TOLERANCE = {"f16": 1.5, "f32": 1e-3}
DEFAULT_ABSOLUTE_TOLERANCE = 1e-7
#: Not named by Step-TP; these formats are coarser than f16, so they get its bound.
COARSE_FLOATS = ("bf16", "f8e4m3fn", "f8e5m2")


def absolute_tolerance(dtype: str) -> float:
    if dtype in COARSE_FLOATS:
        return ABSOLUTE_TOLERANCE["f16"]
    return ABSOLUTE_TOLERANCE.get(dtype, DEFAULT_ABSOLUTE_TOLERANCE)


def compare(actual: np.ndarray, expected: np.ndarray, dtype: str) -> Comparison:
    """Step-TP's rule, read element-wise: every element is within the
    relative tolerance or within the dtype's absolute tolerance of the
    expected one; failing that, the whole tensor passes if its mean squared
    error is within the MSE tolerance. Equal values (both the same infinity,
    or both NaN) match exactly. Integer and bool outputs have no rounding to
    forgive and must be equal."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return Comparison(False, np.inf, np.inf, np.inf, "", max(actual.size, expected.size))
    a, e = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    with np.errstate(all="ignore"):
        error = np.where(same, 0.0, np.abs(a - e))
        error = np.where(np.isnan(error), np.inf, error)
        relative = np.where(same, 0.0, error / np.abs(e))
    max_abs = float(error.max(initial=0.0))
    nonzero = (e != 0) & np.isfinite(e)
    max_rel = float(relative[nonzero].max(initial=0.0))
    mse = float(np.mean(error ** 2)) if error.size else 0.0
    if not _is_float(dtype):
        mismatched = int(np.count_nonzero(~same))
        return Comparison(mismatched == 0, max_abs, max_rel, mse, "exact" if mismatched == 0 else "", mismatched)
    within = same | (error <= absolute_tolerance(dtype)) | (relative <= RELATIVE_TOLERANCE)
    mismatched = int(np.count_nonzero(~within))
    if mismatched == 0:
        return Comparison(True, max_abs, max_rel, mse, "elementwise", 0)
    if mse <= MSE_TOLERANCE:
        return Comparison(True, max_abs, max_rel, mse, "mse", mismatched)
    return Comparison(False, max_abs, max_rel, mse, "", mismatched)


#: Criteria from the strictest to the most forgiving.
_CRITERIA = ("exact", "elementwise", "mse")


def merge_comparisons(comparisons: list[Comparison]) -> Comparison:
    """One output compared on several inputs, as one comparison: ok when
    every one is, the largest of each error figure, and the most forgiving
    criterion that was needed."""
    if len(comparisons) == 1:
        return comparisons[0]
    ok = all(c.ok for c in comparisons)
    criterion = max((c.criterion for c in comparisons), key=_CRITERIA.index) if ok else ""
    return Comparison(ok, max(c.max_abs_err for c in comparisons), max(c.max_rel_err for c in comparisons),
                      max(c.mse for c in comparisons), criterion, max(c.mismatched for c in comparisons))


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("f", "bf"))

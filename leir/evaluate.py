"""Reference evaluation of a LEIR program with NumPy, independent of TVM.

It follows docs/leir-syntax.md exactly: equations run in program order, each
for every iteration of its enclosing loops (innermost fastest) where its
guard holds; a nest's items run one after the other inside every iteration
of the loops they share; a reduction that is its tensor's first write starts
from the combiner's identity, an update accumulates onto what is there.
Values are typed by ``leir.value_types`` and computed in float64 (int64 for
integers), then rounded to the written tensor's dtype when stored.

Speed comes from running many iterations of an equation at once, which is
exact when they do not depend on each other:

- A *block* is a set of iterations of one equation: the loops not yet fixed
  form a grid, and every loop variable is an array broadcast over it
  (``np.ix_`` style), so ``X_{i,k}*W_{k,j}`` is one array operation. Blocks
  above ``MAX_POINTS`` iterations are cut along their outermost loop.
- Reductions (``C = C + e``, ``max``, ``min``, ``*``) are order-free: the
  operand is reduced along the reduction axes of the grid (or with
  ``ufunc.at`` where a guard or a non-injective index forbids it) and
  combined into the stored value once per block.
- Any other equation that reads the tensor it writes is checked per block:
  if an iteration reads an element another iteration of the block writes (a
  scan like ``M_{j} = max(M_{j-1}, X_{j})``), the block is split along its
  outermost loop and each part is run in order, down to single iterations.
- A nest with several items runs its loops as a grid only where that cannot
  change the result: along a loop variable that indexes, in one fixed
  dimension, every access to every tensor the nest writes, the iterations
  touch disjoint elements. The other loops are iterated in Python, in order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from leir import ast as A
from leir import value_types as VT
from leir.errors import LeirError
from leir.inputs import check_inputs, numpy_dtype
from leir.printer import access_text, equation_text
from leir.semantics import Analysis, EquationInfo, TensorInfo

#: Iterations evaluated as one array operation at most (a few arrays of this
#: many float64 values, ~32 MiB each, are alive at once).
MAX_POINTS = 1 << 22

_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class EvaluationError(LeirError):
    """The program cannot be evaluated (it has errors, indexes outside a
    tensor at run time, or uses a value the typing rules reject)."""


def evaluate(analysis: Analysis, inputs: dict[str, np.ndarray], *,
             include_temporaries: bool = False) -> dict[str, np.ndarray]:
    """Run the program on ``inputs`` (name -> array) and return every output
    (and every temporary if asked), each in its declared dtype. Raises
    ``leir.inputs.InputError`` for a missing or mis-shaped input."""
    if not analysis.ok:
        first = next(d for d in analysis.diagnostics if d.is_error)
        raise EvaluationError(f"the program has errors: {first.message}")
    interpreter = _Interpreter(analysis, check_inputs(analysis, inputs))
    with np.errstate(all="ignore"):  # inf/nan follow IEEE arithmetic, as on the device
        interpreter.run()
    roles = ("out", "tmp") if include_temporaries else ("out",)
    return {t.name: interpreter.arrays[t.name] for t in analysis.tensors.values() if t.role in roles}


# ------------------------------------------------------------ dtypes


def compute_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype values of a LEIR dtype are computed in."""
    if dtype == "bool":
        return np.dtype(bool)
    if VT.is_float_dtype(dtype):
        return np.dtype(np.float64)
    return np.dtype(np.uint64 if dtype == "u64" else np.int64)


def convert(x, dtype: str):
    """Computed values converted to ``dtype``: rounded to it, then widened
    to its compute dtype (numbers become booleans by "not zero")."""
    if dtype == "bool":
        return np.asarray(x) != 0
    return np.asarray(x).astype(numpy_dtype(dtype)).astype(compute_dtype(dtype))


def _erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # SciPy is optional; math.erf is exact but scalar
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf(x)


# ------------------------------------------------------------ iteration spaces


@dataclass(frozen=True)
class _Axis:
    """A loop not fixed yet, with the values its variable still takes."""

    var: str
    values: np.ndarray  # int64, in iteration order


class _Grid:
    """The values of loop variables over a block of iterations: fixed loops
    are scalars; free loops are arrays broadcast over ``shape`` (one axis
    each, outermost first), or, after a guard, 1-D arrays listing the
    iterations where it holds (``points``)."""

    def __init__(self, env: dict[str, int], axes: list[_Axis]):
        self.axes = axes
        self.shape = tuple(len(a.values) for a in axes)
        self.points = False
        self.vars: dict[str, object] = {var: np.int64(value) for var, value in env.items()}
        for k, axis in enumerate(axes):
            view = [1] * len(axes)
            view[k] = -1
            self.vars[axis.var] = axis.values.reshape(view)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def restrict(self, mask: np.ndarray) -> "_Grid":
        """The iterations where ``mask`` (over ``shape``) holds, in order."""
        grid = _Grid.__new__(_Grid)
        grid.axes = self.axes
        grid.points = True
        grid.shape = (int(np.count_nonzero(mask)),)
        grid.vars = {var: (value if np.ndim(value) == 0 else np.broadcast_to(value, self.shape)[mask])
                     for var, value in self.vars.items()}
        return grid

    def full(self, x) -> np.ndarray:
        return np.broadcast_to(x, self.shape)


# ------------------------------------------------------------ the interpreter


class _Interpreter:
    def __init__(self, analysis: Analysis, inputs: dict[str, np.ndarray]):
        self.analysis = analysis
        self.tensors = analysis.tensors
        self.infos = {info.site.path: info for info in analysis.equations}
        self.arrays: dict[str, np.ndarray] = {}
        for t in self.tensors.values():
            if t.role == "in":
                self.arrays[t.name] = inputs[t.name].copy()
            else:
                self.arrays[t.name] = np.zeros(tuple(t.shape), dtype=numpy_dtype(t.dtype))
        #: Per reduction (by equation index): which elements have received
        #: their implied initial value.
        self.initialised: dict[int, np.ndarray] = {}
        self._separable: dict[tuple[tuple[int, ...], str], bool] = {}

    def run(self) -> None:
        for u, unit in enumerate(self.analysis.program.units):
            self.run_nest(unit, (u,), {}, [])

    # ---------------------------------------------------------- structure

    def run_nest(self, nest: A.Nest, path: tuple[int, ...], env: dict[str, int], axes: list[_Axis]) -> None:
        axes = axes + [_Axis(l.var, np.arange(l.start, l.start + l.extent, dtype=np.int64)) for l in nest.loops]
        if len(nest.body) == 1:
            self.run_item(nest.body[0], path + (0,), env, axes)
            return
        together = [a for a in axes if self.separable(a.var, nest, path)]
        in_order = [a for a in axes if a not in together]
        for values in itertools.product(*(a.values for a in in_order)):
            fixed = env | {a.var: int(v) for a, v in zip(in_order, values)}
            for i, item in enumerate(nest.body):
                self.run_item(item, path + (i,), fixed, together)

    def run_item(self, item: A.Item, path: tuple[int, ...], env: dict[str, int], axes: list[_Axis]) -> None:
        if isinstance(item, A.Equation):
            self.run_equation(self.infos[path], env, axes)
        else:
            self.run_nest(item, path, env, axes)

    def separable(self, var: str, nest: A.Nest, path: tuple[int, ...]) -> bool:
        """Whether iterations of loop ``var`` touch disjoint elements of
        every tensor ``nest`` writes: some dimension of each such tensor is
        indexed by exactly ``var`` in all of the nest's accesses to it."""
        key = (path, var)
        if key not in self._separable:
            self._separable[key] = _separable(var, nest)
        return self._separable[key]

    # ---------------------------------------------------------- equations

    def run_equation(self, info: EquationInfo, env: dict[str, int], axes: list[_Axis]) -> None:
        size = math.prod(len(a.values) for a in axes)
        if size > MAX_POINTS:
            self.run_in_parts(info, env, axes)
        elif not self.run_block(info, _Grid(env, axes)):
            # Iterations of this block depend on each other: run its
            # outermost loop in order, one value at a time.
            first, rest = axes[0], axes[1:]
            for value in first.values:
                self.run_equation(info, env | {first.var: int(value)}, rest)

    def run_in_parts(self, info: EquationInfo, env: dict[str, int], axes: list[_Axis]) -> None:
        first, rest = axes[0], axes[1:]
        if len(first.values) == 1:
            self.run_equation(info, env | {first.var: int(first.values[0])}, rest)
            return
        step = max(1, MAX_POINTS // max(1, math.prod(len(a.values) for a in rest)))
        for start in range(0, len(first.values), step):
            self.run_equation(info, env, [_Axis(first.var, first.values[start:start + step])] + rest)

    def run_block(self, info: EquationInfo, grid: _Grid) -> bool:
        """Run every iteration of ``grid`` at once; False (and nothing done)
        when they depend on each other."""
        eq = info.equation
        tensor = self.tensors[eq.lhs.tensor]
        if grid.axes and _reads(eq.predicate, tensor.name):
            return False  # a guard on the written tensor: only one iteration at a time is safe
        try:
            if eq.predicate is not None:
                mask = grid.full(_Values(self, grid).condition(eq.predicate, tensor.dtype))
                if not mask.any():
                    return True
                grid = grid.restrict(mask)
            values = _Values(self, grid)
            written = values.flat_index(eq.lhs)
            dependent = _dependent_reads(info)
            if dependent and _conflicts(values, grid, written, dependent):
                return False
            if info.combiner is not None:
                self.accumulate(info, tensor, values, grid, written)
            else:
                self.assign(info, tensor, values, grid, written)
        except VT.TypeRuleError as exc:
            raise EvaluationError(f"in {equation_text(eq)}: {exc}") from None
        return True

    def assign(self, info: EquationInfo, tensor: TensorInfo, values: "_Values", grid: _Grid, written) -> None:
        result = grid.full(values.value(info.equation.rhs, tensor.dtype)).ravel()
        elements = grid.full(written).ravel()
        if not _writes_distinct(info, grid):
            elements, result = _last_writes(elements, result)
        self.arrays[tensor.name].reshape(-1)[elements] = _stored(result, tensor.dtype)

    def accumulate(self, info: EquationInfo, tensor: TensorInfo, values: "_Values", grid: _Grid, written) -> None:
        combine = _COMBINE[info.combiner]
        operand = grid.full(values.value(info.operand, tensor.dtype))
        if grid.points:
            elements, terms = grid.full(written), operand
        else:
            reduce_dims = tuple(k for k, a in enumerate(grid.axes) if a.var in info.reduce_axes)
            terms = combine.reduce(operand, axis=reduce_dims, keepdims=True) if reduce_dims else operand
            elements = np.broadcast_to(written, terms.shape)
        elements, terms = elements.ravel(), terms.ravel()
        if not grid.points and _writes_distinct(info, grid, spatial_only=True):
            unique, inverse = elements, None
        else:
            unique, inverse = np.unique(elements, return_inverse=True)
        if info.kind == "reduce":
            self.initialise(info, tensor, unique)
        flat = self.arrays[tensor.name].reshape(-1)
        current = flat[unique].astype(compute_dtype(tensor.dtype))
        if inverse is None:
            current = combine(current, terms)
        else:
            combine.at(current, inverse, terms)
        flat[unique] = _stored(current, tensor.dtype)

    def initialise(self, info: EquationInfo, tensor: TensorInfo, elements: np.ndarray) -> None:
        """Give the elements this reduction has not touched yet its initial value."""
        done = self.initialised.setdefault(info.index, np.zeros(tensor.size, dtype=bool))
        fresh = elements[~done[elements]]
        self.arrays[tensor.name].reshape(-1)[fresh] = _identity(info.combiner, tensor.dtype)
        done[fresh] = True


# ------------------------------------------------------------ expressions


class _Values:
    """LEIR expressions evaluated over a grid of iterations."""

    def __init__(self, interpreter: _Interpreter, grid: _Grid):
        self.interpreter = interpreter
        self.grid = grid

    def index(self, e: A.Expr, tensor: str = "an index"):
        if isinstance(e, A.Num) and isinstance(e.value, int):
            return np.int64(e.value)
        if isinstance(e, A.Var):
            return self.grid.vars[e.name]
        if isinstance(e, A.Unary) and e.op == "-":
            return -self.index(e.operand, tensor)
        if isinstance(e, A.Binary) and e.op in VT.INDEX_OPERATORS:
            a, b = self.index(e.lhs, tensor), self.index(e.rhs, tensor)
            if e.op == "//":
                return np.floor_divide(a, b)
            if e.op == "%":
                return np.mod(a, b)
            return a + b if e.op == "+" else a - b if e.op == "-" else a * b
        raise VT.index_error(e, tensor)

    def element_indices(self, access: A.Access) -> tuple:
        tensor = self.interpreter.tensors[access.tensor]
        indices = tuple(self.index(e, access.tensor) for e in access.indices or ())
        for d, (index, extent) in enumerate(zip(indices, tensor.shape)):
            if np.size(index) and (np.min(index) < 0 or np.max(index) >= extent):
                bad = int(np.min(index)) if np.min(index) < 0 else int(np.max(index))
                raise EvaluationError(f"{access_text(access)} goes outside {access.tensor}: index {d} takes the value "
                                      f"{bad}, but dimension {d} has extent {extent}")
        return indices

    def flat_index(self, access: A.Access):
        """Row-major element numbers of ``access`` over the grid."""
        tensor = self.interpreter.tensors[access.tensor]
        flat = np.int64(0)
        for index, stride in zip(self.element_indices(access), _strides(tensor.shape)):
            flat = flat + index * stride
        return flat

    def load(self, access: A.Access):
        return self.interpreter.arrays[access.tensor][self.element_indices(access)]

    def value(self, e: A.Expr, dtype: str):
        if isinstance(e, A.Num):
            return convert(np.asarray(VT.literal(e, dtype)), dtype)
        if VT.is_index_expr(e):
            return convert(self.index(e), dtype)
        if isinstance(e, A.Access):
            return convert(self.load(e), dtype)
        if VT.is_condition(e):
            return convert(self.condition(e, dtype), dtype)
        if isinstance(e, A.Unary):  # "-"
            VT.check_arithmetic("-", dtype)
            return -self.value(e.operand, dtype)
        if isinstance(e, A.Binary):
            return self.arithmetic(e, dtype)
        return self.call(e, dtype)

    def arithmetic(self, e: A.Binary, dtype: str):
        VT.check_arithmetic(e.op, dtype)
        a, b = self.value(e.lhs, dtype), self.value(e.rhs, dtype)
        floating = VT.is_float_dtype(dtype)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "/":
            return a / b if floating else _truncdiv(a, b)
        if e.op == "//":
            return np.floor(a / b) if floating else np.floor_divide(a, b)
        if e.op == "%":
            return a - np.floor(a / b) * b if floating else np.mod(a, b)
        return np.power(a, b)  # "**"

    def call(self, e: A.Call, dtype: str):
        args = e.args
        if VT.is_cast(e):  # computed in the cast's dtype, rounded to it, then converted
            return convert(convert(self.value(args[0], e.func), e.func), dtype)
        if e.func == "if_then_else":
            return np.where(self.condition(args[0], dtype), self.value(args[1], dtype), self.value(args[2], dtype))
        if dtype == "bool":
            raise VT.TypeRuleError(f"{e.func}(...) in a bool computation: a bool tensor is written with comparisons, &, | and !")
        VT.check_float_function(e.func, dtype)
        values = [self.value(a, dtype) for a in args]
        if e.func in ("floor", "ceil") and not VT.is_float_dtype(dtype):
            return values[0]
        x = values[0]
        unary = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda v: 1.0 / np.sqrt(v), "abs": np.abs,
                 "erf": _erf, "tanh": np.tanh, "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "floor": np.floor,
                 "ceil": np.ceil}
        if e.func in unary:
            return unary[e.func](x)
        binary = {"max": np.maximum, "min": np.minimum, "pow": np.power}
        return binary[e.func](x, values[1])

    def condition(self, e: A.Expr, dtype: str):
        if isinstance(e, A.Binary) and e.op in A.COMPARISONS:
            if VT.is_index_expr(e.lhs) and VT.is_index_expr(e.rhs):
                a, b = self.index(e.lhs), self.index(e.rhs)
            else:
                operand_dtype = VT.comparison_dtype(e, dtype, self.interpreter.tensors)
                a, b = self.value(e.lhs, operand_dtype), self.value(e.rhs, operand_dtype)
            compare = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                       "==": np.equal, "!=": np.not_equal}[e.op]
            return compare(a, b)
        if isinstance(e, A.Binary) and e.op in A.LOGICAL:
            a, b = self.condition(e.lhs, dtype), self.condition(e.rhs, dtype)
            return np.logical_and(a, b) if e.op == "&" else np.logical_or(a, b)
        if isinstance(e, A.Unary) and e.op == "!":
            return np.logical_not(self.condition(e.operand, dtype))
        return convert(self.value(e, dtype), "bool")


# ------------------------------------------------------------ helpers


def _strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return strides[::-1]


def _truncdiv(a, b):
    """Integer division rounding toward zero (C and TVM semantics)."""
    q = np.floor_divide(a, b)
    inexact = (a - q * b) != 0
    return q + (inexact & ((np.asarray(a) < 0) != (np.asarray(b) < 0)))


def _stored(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return values != 0
    return np.asarray(values).astype(numpy_dtype(dtype))


def _identity(combiner: str, dtype: str):
    lo = hi = 0
    if VT.is_integer_dtype(dtype):
        info = np.iinfo(numpy_dtype(dtype)) if dtype not in ("i4", "u4") else None
        lo, hi = (info.min, info.max) if info else ((-8, 7) if dtype == "i4" else (0, 15))
    return VT.reduction_identity(combiner, dtype, lo, hi)


def _last_writes(elements: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep, for every element written several times, the last write."""
    reverse = elements[::-1]
    unique, first = np.unique(reverse, return_index=True)
    last = len(elements) - 1 - first
    return unique, values[last]


def _writes_distinct(info: EquationInfo, grid: _Grid, spatial_only: bool = False) -> bool:
    """Whether distinct iterations of the grid surely write distinct
    elements: every free loop is a spatial one (or, with ``spatial_only``,
    every free spatial loop) and indexes its own dimension by itself."""
    free = [a.var for a in grid.axes]
    if spatial_only:
        free = [v for v in free if v not in info.reduce_axes]
    elif any(v in info.reduce_axes for v in free):
        return False
    plain = [e.name for e in info.equation.lhs.indices or () if isinstance(e, A.Var)]
    return all(plain.count(v) == 1 for v in free)


def _dependent_reads(info: EquationInfo) -> list[A.Access]:
    """Reads of the written tensor that can see another iteration's write:
    all of them, except the element a reduction combines into."""
    eq = info.equation
    if info.combiner is not None:
        return []  # the operand of a reduction shape never reads the written tensor
    return [n for n in A.walk(eq.rhs) if isinstance(n, A.Access) and n.tensor == eq.lhs.tensor]


def _conflicts(values: _Values, grid: _Grid, written, reads: list[A.Access]) -> bool:
    """Whether some iteration of the grid reads an element that another
    iteration writes (or two iterations write the same element)."""
    elements = grid.full(written).ravel()
    count = elements.size
    order = np.argsort(elements, kind="stable")
    ordered = elements[order]
    if count > 1 and np.any(ordered[1:] == ordered[:-1]):
        return True
    iteration = np.arange(count)
    for access in reads:
        read = grid.full(values.flat_index(access)).ravel()
        at = np.minimum(np.searchsorted(ordered, read), count - 1)
        if np.any((ordered[at] == read) & (order[at] != iteration)):
            return True
    return False


def _reads(expr: A.Expr | None, tensor: str) -> bool:
    return expr is not None and any(isinstance(n, A.Access) and n.tensor == tensor for n in A.walk(expr))


def _separable(var: str, nest: A.Nest) -> bool:
    equations = [n for n in A.walk(nest) if isinstance(n, A.Equation)]
    written = {eq.lhs.tensor for eq in equations}
    for tensor in written:
        accesses = [n for eq in equations for n in A.walk(eq) if isinstance(n, A.Access) and n.tensor == tensor]
        rank = accesses[0].rank
        if not any(all(a.indices is not None and a.indices[d] == A.Var(var) for a in accesses) for d in range(rank)):
            return False
    return True

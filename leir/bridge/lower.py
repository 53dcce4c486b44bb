"""LEIR -> TensorIR: a TVM ``PrimFunc`` with one ``T.sblock`` per equation.

The function is built with TVM's IR builder (``tvm.script.ir_builder``)
rather than by printing TVMScript text and parsing it back: the builder takes
names and constants as values, so no tensor name, literal or infinity can be
mis-escaped, and TVM infers each block's ``T.reads``/``T.writes`` exactly as
its parser would.

What one equation becomes (docs/leir-syntax.md, "Meaning of an equation"):

- a block named after the written tensor (``C``, then ``C_1``...), inside
  the TVM loops of its enclosing LEIR loops (kind ``L P V U B`` ->
  ``T.serial/parallel/vectorized/unroll/thread_binding``), with nested nests
  keeping their structure;
- block iteration variables ``v<loop>`` bound with ``T.axis.remap``: spatial
  for loops that index the written element, reduce for the others;
- ``T.init()`` with the combiner's identity for a reduction that is the
  tensor's first write (``kind == "reduce"``); an update of a value written
  earlier gets no init;
- ``T.where`` for a ``where`` guard (over the loop variables, as TVM wants);
- the value computed by the rules of ``leir.value_types``.

Parameters are the inputs then the outputs, in declaration order;
temporaries are allocated by the root block, in their scope
(``T.sblock_alloc_buffer``: TVM's compute_at and compute_inline take a
block that writes a buffer the root block does not allocate for an output
block, and refuse to move it). ``threads_as_serial`` lowers ``B`` loops to
serial loops so that a GPU-style program runs on the CPU. TVM is imported
inside the functions: importing this module is cheap.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

from leir import ast as A
from leir import value_types as VT
from leir.errors import LeirError
from leir.printer import equation_text
from leir.semantics import Analysis, EquationInfo

if TYPE_CHECKING:
    import tvm


class LoweringError(LeirError):
    """The program cannot be lowered to TensorIR (it has errors, or uses
    something TVM cannot express)."""


def lower(analysis: Analysis, name: str = "main", *, threads_as_serial: bool = False) -> "tvm.tirx.PrimFunc":
    """The TensorIR ``PrimFunc`` of an analysed program."""
    _require_lowerable(analysis, name)
    try:
        return _Lowering(analysis, threads_as_serial).function(name)
    except LeirError:
        raise
    except Exception as exc:  # TVM reports its own failures as assorted exception types
        raise LoweringError(f"TVM rejected the program: {tvm_error_message(exc)}") from exc


def to_tvmscript(analysis: Analysis, name: str = "main") -> str:
    """The program as TVMScript, printed by TVM (``leir convert --to tvmscript``)."""
    return lower(analysis, name).script()


def thread_loops(analysis: Analysis) -> list[str]:
    """Variables of the thread-bound (``B``) loops, in program order, once each."""
    names: list[str] = []
    for node in A.walk(analysis.program):
        if isinstance(node, A.Loop) and node.kind == "B" and node.var not in names:
            names.append(node.var)
    return names


def _require_lowerable(analysis: Analysis, name: str) -> None:
    if not analysis.ok:
        first = next(d for d in analysis.diagnostics if d.is_error)
        count = sum(d.is_error for d in analysis.diagnostics)
        more = f" (and {count - 1} more)" if count > 1 else ""
        raise LoweringError(f"the program has errors: {first.message}{more}")
    if not name.isidentifier():
        raise LoweringError(f"function name {name!r} is not an identifier")


def tvm_error_message(exc: BaseException) -> str:
    """The informative last line of a TVM error (they carry tracebacks)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


class _Lowering:
    def __init__(self, analysis: Analysis, threads_as_serial: bool):
        self.analysis = analysis
        self.threads_as_serial = threads_as_serial
        self.infos = {info.site.path: info for info in analysis.equations}
        self.buffers: dict[str, object] = {}
        self.block_names: set[str] = set()

    def function(self, name: str):
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        with IRBuilder() as builder:
            with T.prim_func(s_tir=True):
                T.func_name(name)
                T.func_attr({"tirx.noalias": True, "global_symbol": name})
                self.declare_buffers()
                for u, unit in enumerate(self.analysis.program.units):
                    self.nest(unit, (u,), {})
        return builder.get()

    def declare_buffers(self) -> None:
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        tensors = self.analysis.tensors.values()
        params = [t for t in tensors if t.role == "in"] + [t for t in tensors if t.role == "out"]
        for t in params:
            self.buffers[t.name] = T.arg(t.name, T.buffer(tuple(t.shape), A.DTYPES[t.dtype]))
        for t in tensors:
            if t.role == "tmp":
                buffer = T.sblock_alloc_buffer(tuple(t.shape), A.DTYPES[t.dtype], scope=A.SCOPES[t.scope])
                self.buffers[t.name] = IRBuilder.name(t.name, buffer)

    def nest(self, nest: A.Nest, path: tuple[int, ...], loop_vars: dict[str, object]) -> None:
        from tvm.script.ir_builder import IRBuilder

        loop_vars = dict(loop_vars)
        with ExitStack() as stack:
            for loop in nest.loops:
                var = stack.enter_context(self.loop_frame(loop))
                loop_vars[loop.var] = IRBuilder.name(loop.var, var)
            for i, item in enumerate(nest.body):
                if isinstance(item, A.Equation):
                    self.block(self.infos[path + (i,)], loop_vars)
                else:
                    self.nest(item, path + (i,), loop_vars)

    def loop_frame(self, loop: A.Loop):
        from tvm.script.ir_builder import tirx as T

        bounds = (loop.extent,) if loop.start == 0 else (loop.start, loop.start + loop.extent)
        if loop.kind == "B" and not self.threads_as_serial:
            return T.thread_binding(*bounds, thread=A.THREAD_AXES[loop.var])
        frame = {"L": T.serial, "P": T.parallel, "V": T.vectorized, "U": T.unroll, "B": T.serial}[loop.kind]
        return frame(*bounds)

    def block(self, info: EquationInfo, loop_vars: dict[str, object]) -> None:
        try:
            self._block(info, loop_vars)
        except VT.TypeRuleError as exc:
            raise LoweringError(f"in {equation_text(info.equation)}: {exc}") from None
        except LoweringError:
            raise
        except Exception as exc:  # TVM reports its own failures as assorted exception types
            raise LoweringError(f"TVM rejected {equation_text(info.equation)}: {tvm_error_message(exc)}") from exc

    def _block(self, info: EquationInfo, loop_vars: dict[str, object]) -> None:
        from tvm.script.ir_builder import tirx as T

        eq = info.equation
        tensor = self.analysis.tensors[eq.lhs.tensor]
        buffer = self.buffers[tensor.name]
        with T.sblock(self.block_name(tensor.name)):
            block_vars = self.iteration_vars(info, loop_vars)
            if eq.predicate is not None:
                T.where(_Exprs(self, loop_vars).condition(eq.predicate, tensor.dtype))
            exprs = _Exprs(self, block_vars)
            indices = exprs.indices(eq.lhs)
            if info.kind == "reduce":
                with T.init():
                    T.buffer_store(buffer, reduction_init(info.combiner, tensor.dtype), indices)
            T.buffer_store(buffer, exprs.value(eq.rhs, tensor.dtype), indices)

    def iteration_vars(self, info: EquationInfo, loop_vars: dict[str, object]) -> dict[str, object]:
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        loops = info.loops
        if not loops:
            return {}
        kinds = "".join("S" if loop.var in info.spatial else "R" for loop in loops)
        bound = T.axis.remap(kinds, [loop_vars[loop.var] for loop in loops])
        bound = list(bound) if len(loops) > 1 else [bound]
        named = IRBuilder.name_many([f"v{loop.var}" for loop in loops], bound)
        return {loop.var: var for loop, var in zip(loops, named)}

    def block_name(self, tensor: str) -> str:
        name, k = tensor, 0
        while name in self.block_names:
            k += 1
            name = f"{tensor}_{k}"
        self.block_names.add(name)
        return name


def reduction_init(combiner: str, dtype: str):
    """The initial value of a reduction as a TVM constant of ``dtype``."""
    import tvm

    tvm_dtype = A.DTYPES[dtype]
    lo = hi = 0
    if VT.is_integer_dtype(dtype):
        lo, hi = tvm.tirx.min_value(tvm_dtype).value, tvm.tirx.max_value(tvm_dtype).value
    return tvm.tirx.const(VT.reduction_identity(combiner, dtype, lo, hi), tvm_dtype)


class _Exprs:
    """LEIR expressions -> TVM ``PrimExpr``, with loop variables bound to
    ``variables`` (block iteration variables in a block's body, loop
    variables in its ``T.where``)."""

    def __init__(self, lowering: _Lowering, variables: dict[str, object]):
        import tvm

        self.tir = tvm.tirx
        self.lowering = lowering
        self.variables = variables

    # ------------------------------------------------------------- indices

    def indices(self, access: A.Access) -> list:
        return [self.index(e, access.tensor) for e in access.indices or ()]

    def index(self, e: A.Expr, tensor: str = "an index"):
        tir = self.tir
        if isinstance(e, A.Num) and isinstance(e.value, int):
            return tir.const(e.value, "int32")
        if isinstance(e, A.Var):
            return self.variables[e.name]
        if isinstance(e, A.Unary) and e.op == "-":
            return tir.const(0, "int32") - self.index(e.operand, tensor)
        if isinstance(e, A.Binary) and e.op in VT.INDEX_OPERATORS:
            a, b = self.index(e.lhs, tensor), self.index(e.rhs, tensor)
            if e.op == "//":
                return tir.floordiv(a, b)
            if e.op == "%":
                return tir.floormod(a, b)
            return a + b if e.op == "+" else a - b if e.op == "-" else a * b
        raise VT.index_error(e, tensor)

    def load(self, access: A.Access):
        buffer = self.lowering.buffers[access.tensor]
        return self.tir.BufferLoad(buffer, self.indices(access))

    # -------------------------------------------------------------- values

    def convert(self, x, dtype: str):
        """``x`` converted to ``dtype`` (numbers become booleans by "not zero")."""
        tir = self.tir
        target = A.DTYPES[dtype]
        if str(x.ty) == target:
            return x
        if dtype == "bool":
            return tir.NE(x, tir.const(0, str(x.ty)))
        return tir.Cast(target, x)

    def value(self, e: A.Expr, dtype: str):
        tir = self.tir
        if isinstance(e, A.Num):
            return tir.const(VT.literal(e, dtype), A.DTYPES[dtype])
        if VT.is_index_expr(e):
            return self.convert(self.index(e), dtype)
        if isinstance(e, A.Access):
            return self.convert(self.load(e), dtype)
        if VT.is_condition(e):
            return self.convert(self.condition(e, dtype), dtype)
        if isinstance(e, A.Unary):  # "-"
            VT.check_arithmetic("-", dtype)
            return tir.const(0, A.DTYPES[dtype]) - self.value(e.operand, dtype)
        if isinstance(e, A.Binary):
            return self.arithmetic(e, dtype)
        return self.call(e, dtype)

    def arithmetic(self, e: A.Binary, dtype: str):
        tir = self.tir
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
            return tir.Div(a, b) if floating else tir.truncdiv(a, b)
        if e.op == "//":
            return tir.floor(tir.Div(a, b)) if floating else tir.floordiv(a, b)
        if e.op == "%":
            return a - tir.floor(tir.Div(a, b)) * b if floating else tir.floormod(a, b)
        return tir.power(a, b)  # "**"

    def call(self, e: A.Call, dtype: str):
        tir = self.tir
        args = e.args
        if VT.is_cast(e):
            return self.convert(self.value(args[0], e.func), dtype)
        if e.func == "if_then_else":
            return tir.if_then_else(self.condition(args[0], dtype), self.value(args[1], dtype), self.value(args[2], dtype))
        if dtype == "bool":
            raise VT.TypeRuleError(f"{e.func}(...) in a bool computation: a bool tensor is written with comparisons, &, | and !")
        VT.check_float_function(e.func, dtype)
        values = [self.value(a, dtype) for a in args]
        if e.func in ("floor", "ceil") and not VT.is_float_dtype(dtype):
            return values[0]
        unary = {"exp": tir.exp, "log": tir.log, "sqrt": tir.sqrt, "rsqrt": tir.rsqrt, "abs": tir.abs, "erf": tir.erf,
                 "tanh": tir.tanh, "sigmoid": tir.sigmoid, "floor": tir.floor, "ceil": tir.ceil}
        if e.func in unary:
            return unary[e.func](values[0])
        binary = {"max": tir.Max, "min": tir.Min, "pow": tir.power}
        return binary[e.func](values[0], values[1])

    # ---------------------------------------------------------- conditions

    def condition(self, e: A.Expr, dtype: str):
        """``e`` as a boolean; comparisons compute their operands in
        ``dtype`` (integer index expressions compare as integers)."""
        tir = self.tir
        if isinstance(e, A.Binary) and e.op in A.COMPARISONS:
            if VT.is_index_expr(e.lhs) and VT.is_index_expr(e.rhs):
                a, b = self.index(e.lhs), self.index(e.rhs)
            else:
                operand_dtype = VT.comparison_dtype(e, dtype, self.lowering.analysis.tensors)
                a, b = self.value(e.lhs, operand_dtype), self.value(e.rhs, operand_dtype)
            return {"<": tir.LT, "<=": tir.LE, ">": tir.GT, ">=": tir.GE, "==": tir.EQ, "!=": tir.NE}[e.op](a, b)
        if isinstance(e, A.Binary) and e.op in A.LOGICAL:
            a, b = self.condition(e.lhs, dtype), self.condition(e.rhs, dtype)
            return tir.And(a, b) if e.op == "&" else tir.Or(a, b)
        if isinstance(e, A.Unary) and e.op == "!":
            return tir.Not(self.condition(e.operand, dtype))
        return self.convert(self.value(e, dtype), "bool")

"""The allow-list a kernel's Python syntax must pass before TVM parses it.

TVM's parser evaluates the Python expressions of a kernel (``T.int32(...)``
arguments, annotations, decorators) with Python's builtins in reach, so a
kernel line ``x = T.int32(__import__("os").system("..."))`` runs a shell
command while the file is merely parsed. ``screen_kernel`` therefore walks
the kernel's syntax tree and accepts only what a kernel written by hand or
printed by TVM contains:

- names from the TVMScript namespaces the file imports, on an explicit list
  (``T.sblock``, ``T.axis.remap``, ``T.Buffer``, ``T.exp``, dtypes, ...;
  the tables below);
- the kernel's own variables (parameters, assignment, loop and ``with``
  targets), literals, literal module constants (``N = 128``), ``range``;
- as string constants, only identifier-shaped text (a dtype, a scope, a
  block or attribute name: ``"float32"``, ``"shared.dyn"``, ``"tir.noalias"``,
  ``"n"``): TVM parses some strings as Python expressions (a quoted
  ``T.Buffer`` shape is a symbolic expression it evaluates), so no string of
  another shape reaches it; a docstring is allowed, and TVM gets it blanked
  (``blanked_docstrings``);
- as numbers, literals and constant arithmetic of at most 64 bits: Python
  folds ``2 ** 64 ** ...`` or ``10 ** 18 * 10 ** 18 * ...`` while TVM parses,
  so an integer constant expression is bounded before anything computes it;
- arithmetic, comparisons, boolean operators, conditional expressions,
  subscripts and slices, tuples, lists, dicts (``T.func_attr({...})``),
  keyword arguments, and ``lambda`` only where the printer writes one (the
  combiner of ``T.comm_reducer``);
- the statements of a kernel body: assignments, ``for``, ``while``, ``if``,
  ``with``, ``assert``, ``return``, ``pass``, ``break``, ``continue``.

Everything else is an "untrusted-code" error at its exact range, and a
kernel with any such error never reaches TVM."""

from __future__ import annotations

import ast
import builtins
import operator
import re
from collections.abc import Iterator
from contextlib import contextmanager

from leir.diagnostics import Diagnostic, error
from leir.bridge.tvmscript.discovery import FileScope, KernelKind, KernelSource, decorator_kind
from leir.bridge.tvmscript.lines import PythonLines
from leir.bridge.tvmscript.namespaces import LEGACY_TIR_RENAMES, Resolved, resolve

#: Members of the TIR namespace (``T.``) a kernel may use.
TIR_MEMBERS = frozenset(
    {
        # What TVM's printer writes for a scheduled s_tir kernel.
        "sblock", "init", "where", "reads", "writes", "sblock_attr",
        "sblock_alloc_buffer", "alloc_buffer", "match_buffer", "decl_buffer",
        "Buffer", "buffer", "func_attr", "grid", "serial", "parallel",
        "vectorized", "unroll", "thread_binding", "launch_thread", "env_thread",
        "attr", "evaluate", "assume", "comm_reducer", "iter_var", "var",
        "handle", "Ptr", "void", "type_annotation",
        "If", "Then", "Else", "While", "Assert", "Let", "Bind",
        # Expressions.
        "cast", "Cast", "Select", "Ramp", "Broadcast", "Shuffle", "ramp",
        "broadcast", "reinterpret", "if_then_else", "likely", "max", "min",
        "max_value", "min_value", "infinity", "ceildiv", "floordiv", "floormod",
        "truncdiv", "truncmod", "abs", "fabs", "exp", "exp2", "exp10", "log",
        "log2", "log10", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "sin",
        "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "atan2", "asinh",
        "acosh", "atanh", "erf", "pow", "fma", "fmod", "hypot", "copysign",
        "ldexp", "nextafter", "floor", "ceil", "round", "trunc", "nearbyint",
        "isnan", "isinf", "isfinite", "isnullptr", "popcount", "clz",
        "shift_left", "shift_right", "bitwise_and", "bitwise_or", "bitwise_xor",
        "bitwise_not", "q_multiply_shift",
        # GPU intrinsics of lowered kernels (cross-thread reduction, tensor cores).
        "tvm_storage_sync", "tvm_thread_allreduce", "tvm_warp_shuffle",
        "tvm_warp_shuffle_up", "tvm_warp_shuffle_down", "tvm_warp_shuffle_xor",
        "tvm_warp_activemask", "tvm_access_ptr", "address_of",
        "tvm_fill_fragment", "tvm_load_matrix_sync", "tvm_mma_sync",
        "tvm_bmma_sync", "tvm_store_matrix_sync", "tvm_thread_invariant",
    }
)  # fmt: skip

#: ``T.float32``, ``T.int8x4``, ``T.bf16``, ``T.float8_e4m3fn``, ``T.bool``...
TIR_DTYPE = re.compile(r"(?:u?int(?:8|16|32|64)|float(?:16|32|64)|bfloat16|float[468]_e\w+|[fiu](?:8|16|32|64)|bf16)(?:x\d+)?|bool|boolean")

#: Namespaces inside ``T`` and their members (``T.axis.remap``).
TIR_SUBNAMESPACES = {"axis": frozenset({"spatial", "reduce", "scan", "opaque", "remap", "S", "R"})}

#: Members of the IR namespace (``I.``) a kernel may use; ``ir_module`` only
#: as a decorator.
IR_MEMBERS = frozenset({"module_attrs", "module_global_infos", "dummy_global_info", "vdevice"})

#: Decorator members and the keyword arguments each may take (literals only:
#: TVM reads them from the syntax tree).
DECORATOR_KEYWORDS: dict[KernelKind, frozenset[str]] = {
    "prim_func": frozenset({"private", "s_tir", "check_well_formed", "persistent"}),
    "ir_module": frozenset({"check_well_formed"}),
}

#: ``T.`` members refused with a reason beyond "not on the list".
REFUSED_TIR_MEMBERS = {
    **dict.fromkeys(
        ("macro", "inline", "jit", "meta_var", "meta_class", "constexpr", "Optional",
         "register_script_namespace", "external_kernel", "call_kernel"),
        "it carries Python code or values of the file into the kernel, and leir does not run the file",
    ),
    **dict.fromkeys(
        ("call_extern", "call_pure_extern", "call_packed", "call_cpacked", "call_packed_lowered",
         "call_cpacked_lowered", "tvm_call_packed", "tvm_call_cpacked", "tvm_call_packed_lowered",
         "tvm_call_cpacked_lowered", "call_intrin", "call_llvm_intrin", "call_llvm_pure_intrin",
         "call_ffi_kernel"),
        "it calls a function outside the kernel, by name, when the kernel runs",
    ),
}  # fmt: skip

#: Attributes a kernel may read from its own variables (buffers).
BUFFER_FIELDS = frozenset({"data", "shape", "strides", "elem_offset", "dtype"})

#: ``T.`` functions whose positional arguments may be a lambda: TVM's printer
#: writes ``T.comm_reducer(lambda x, y: T.max(x, y), [...])``.
LAMBDA_TAKERS = frozenset({"comm_reducer"})

#: Builtins a kernel may use, and only as a call: ``for i in range(n)``.
ALLOWED_BUILTINS = frozenset({"range"})

#: Every Python builtin name. TVM's parser falls back to Python's builtins
#: for a name it does not know, so a kernel may never load one, not even
#: after binding it: outside the binding's scope the builtin is what TVM
#: finds.
BUILTIN_NAMES = frozenset(dir(builtins))

#: ``x ** e`` and ``x << e`` are computed by Python when both sides are
#: plain numbers; a literal exponent bounds what a kernel can make TVM spend.
MAX_LITERAL_EXPONENT = 64

#: Integer constants (literals, module constants and what Python folds from
#: them) are at most this many bits: an int64 or uint64 value, no more.
MAX_INTEGER_BITS = 64

#: What a string constant in a kernel may say: a name, or dotted names.
IDENTIFIER_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: The longest string constant a kernel may hold (a block name, a scope).
MAX_STRING_LENGTH = 256
#: Most elements of a module constant's tuple or list that a kernel may use.
MAX_CONSTANT_ELEMENTS = 4096

_STATEMENTS_REFUSED = {
    ast.FunctionDef: "A function defined inside a kernel",
    ast.AsyncFunctionDef: "A function defined inside a kernel",
    ast.ClassDef: "A class defined inside a kernel",
    ast.Import: "An import inside a kernel",
    ast.ImportFrom: "An import inside a kernel",
    ast.Global: "`global`",
    ast.Nonlocal: "`nonlocal`",
    ast.Try: "`try`",
    ast.Raise: "`raise`",
    ast.Delete: "`del`",
    ast.Match: "`match`",
    ast.AsyncFor: "`async for`",
    ast.AsyncWith: "`async with`",
}
if hasattr(ast, "TryStar"):
    _STATEMENTS_REFUSED[ast.TryStar] = "`try`"

_EXPRESSIONS_REFUSED = {
    ast.ListComp: "A comprehension",
    ast.SetComp: "A comprehension",
    ast.DictComp: "A comprehension",
    ast.GeneratorExp: "A generator expression",
    ast.Lambda: "A lambda outside T.comm_reducer(...)",
    ast.NamedExpr: "An assignment expression (:=)",
    ast.JoinedStr: "An f-string",
    ast.Starred: "Unpacking with *",
    ast.Await: "`await`",
    ast.Yield: "`yield`",
    ast.YieldFrom: "`yield from`",
    ast.Set: "A set literal",
}

_ALLOWED_BY = "a kernel may use only TVMScript names (T.…, I.…), its own variables, literals and literal module constants"


def screen_kernel(kernel: KernelSource) -> list[Diagnostic]:
    """"untrusted-code" errors for everything in a kernel outside the
    allow-list; an empty list means the kernel may be given to TVM."""
    screen = _Screen(kernel.scope, kernel.lines)
    try:
        if kernel.kind == "ir_module":
            screen.module(kernel.node)
        else:
            screen.function(kernel.node)
    except RecursionError:
        screen.diagnostics.append(
            error(kernel.name_span, "untrusted-code", "This kernel is nested too deeply to check; it is not parsed.")
        )
    return screen.diagnostics


class _Screen:
    def __init__(self, scope: FileScope, lines: PythonLines):
        self.scope = scope
        self.lines = lines
        self.diagnostics: list[Diagnostic] = []
        self.params: frozenset[str] = frozenset()
        self.locals: frozenset[str] = frozenset()
        self.lambda_params: frozenset[str] = frozenset()
        self.in_signature = False
        self._values: dict[int, int | None] = {}

    def refuse(self, node: ast.AST, what: str) -> None:
        self.diagnostics.append(error(self.lines.node_span(node), "untrusted-code", what))

    @contextmanager
    def checking(self) -> Iterator[list[bool]]:
        """Yields a one-element list that is [True] after the block when the
        block refused nothing, so that a parent reports only what its
        children did not already report."""
        before = len(self.diagnostics)
        clean = [True]
        yield clean
        clean[0] = len(self.diagnostics) == before

    # ------------------------------------------------------------ definitions

    def module(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.decorator(decorator, "ir_module")
        for base in [*node.bases, *node.keywords]:
            self.refuse(base, "An @I.ir_module class has no base classes or class keywords.")
        for statement in node.body:
            if _is_docstring(node, statement):
                continue
            if isinstance(statement, ast.FunctionDef) and any(
                decorator_kind(d, self.scope) == "prim_func" for d in statement.decorator_list
            ):
                self.function(statement)
            elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                self.refuse(statement, "An @I.ir_module class may hold only @T.prim_func functions.")
            elif isinstance(statement, ast.Pass):
                pass
            elif isinstance(statement, ast.Expr):
                self.expr(statement.value)
            else:
                self.refuse(statement, "An @I.ir_module class may hold only @T.prim_func functions.")

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if isinstance(node, ast.AsyncFunctionDef):
            self.refuse(node, "A kernel is a plain function, not async def.")
            return
        for decorator in node.decorator_list:
            self.decorator(decorator, "prim_func")
        args = node.args
        for extra in [*args.posonlyargs, *args.kwonlyargs, args.vararg, args.kwarg]:
            if extra is not None:
                self.refuse(extra, "A kernel takes plain parameters only (no /, *, *args or **kwargs).")
        params = frozenset(a.arg for a in args.args)
        saved = self.params, self.locals
        self.params, self.locals = params, _names_stored_in(node.body)
        self.in_signature = True
        for arg in args.args:
            self.binding_name(arg, arg.arg, is_param=True)
            if arg.annotation is not None:
                self.expr(arg.annotation)
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.expr(default)
        if node.returns is not None:
            self.expr(node.returns)
        self.in_signature = False
        self.body(node.body[1:] if _is_docstring(node, node.body[0]) else node.body)
        self.params, self.locals = saved

    def decorator(self, node: ast.expr, kind: KernelKind) -> None:
        target = node.func if isinstance(node, ast.Call) else node
        if decorator_kind(node, self.scope) != kind:
            wanted = "@T.prim_func" if kind == "prim_func" else "@I.ir_module"
            self.refuse(node, f"Only {wanted} may decorate this kernel; leir does not run other decorators.")
            return
        if not isinstance(node, ast.Call):
            return
        for arg in node.args:
            self.refuse(arg, f"{_dotted(target)} takes keyword arguments only.")
        allowed = DECORATOR_KEYWORDS[kind]
        for keyword in node.keywords:
            if keyword.arg not in allowed:
                self.refuse(keyword, f"{_dotted(target)} takes only {', '.join(sorted(allowed))} here.")
            elif not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, bool)):
                self.refuse(keyword.value, f"{keyword.arg}= takes True or False.")

    # ------------------------------------------------------------- statements

    def body(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target, store=True)
            self.expr(node.value)
        elif isinstance(node, ast.AugAssign):
            self.target(node.target, store=True)
            self.expr(node.value)
            self.operator_guard(node, node.op, node.target, node.value)
        elif isinstance(node, ast.AnnAssign):
            self.target(node.target, store=True)
            self.expr(node.annotation)
            if node.value is not None:
                self.expr(node.value)
        elif isinstance(node, ast.Expr):
            self.expr(node.value)
        elif isinstance(node, ast.For | ast.While):
            if isinstance(node, ast.For):
                self.target(node.target)
                self.expr(node.iter)
            else:
                self.expr(node.test)
            self.body(node.body)
            if node.orelse:
                self.refuse(node.orelse[0], "A TVMScript loop has no else branch.")
        elif isinstance(node, ast.If):
            self.expr(node.test)
            self.body(node.body)
            self.body(node.orelse)
        elif isinstance(node, ast.With):
            for item in node.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.target(item.optional_vars)
            self.body(node.body)
        elif isinstance(node, ast.Assert):
            self.expr(node.test)
            if node.msg is not None:
                self.expr(node.msg)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.expr(node.value)
        elif isinstance(node, ast.Pass | ast.Break | ast.Continue):
            pass
        else:
            what = _STATEMENTS_REFUSED.get(type(node), f"A {type(node).__name__} statement")
            self.refuse(node, f"{what} is not TVMScript; leir does not run it.")

    def target(self, node: ast.expr, *, store: bool = False) -> None:
        """An assignment, loop or ``with`` target. A buffer element
        (``A[i] = ...``) is a target only of a whole assignment (``store``):
        TVM binds other targets by running a Python assignment."""
        if isinstance(node, ast.Name):
            self.binding_name(node, node.id, is_param=False)
        elif isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Subscript) and store:
            self.expr(node.value)
            self.expr(node.slice)
        else:
            self.refuse(node, "A kernel assigns only to its own variables and to buffer elements (A[i] = ...).")

    def binding_name(self, node: ast.AST, name: str, *, is_param: bool) -> None:
        if _is_dunder(name):
            self.refuse(node, f"`{name}` is a dunder name; {_ALLOWED_BY}.")
        elif name in self.scope.aliases:
            self.refuse(node, f"`{name}` is the file's name for a TVMScript namespace; a kernel may not rebind it.")
        elif name in BUILTIN_NAMES and not is_param:
            self.refuse(
                node,
                f"`{name}` is the name of a Python builtin, which TVM falls back to where the variable "
                "is not in scope; rename the variable.",
            )

    # ------------------------------------------------------------ expressions

    def expr(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant):
            reason = constant_refusal(node.value)
            if reason is not None:
                self.refuse(node, reason)
            return
        if isinstance(node, ast.Name | ast.Attribute) and self.scope.path_of(node) is not None:
            self.namespace_reference(node)
        elif isinstance(node, ast.Name):
            self.load_name(node)
        elif isinstance(node, ast.Attribute):
            self.attribute(node)
        elif isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.BinOp):
            with self.checking() as clean:
                self.expr(node.left)
                self.expr(node.right)
                self.operator_guard(node, node.op, node.left, node.right)
            if clean[0]:
                self.integer_guard(node)
        elif isinstance(node, ast.UnaryOp):
            with self.checking() as clean:
                self.expr(node.operand)
            if clean[0]:
                self.integer_guard(node)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self.expr(value)
        elif isinstance(node, ast.Compare):
            self.expr(node.left)
            for comparator in node.comparators:
                self.expr(comparator)
        elif isinstance(node, ast.IfExp):
            self.expr(node.test)
            self.expr(node.body)
            self.expr(node.orelse)
        elif isinstance(node, ast.Subscript):
            self.expr(node.value)
            self.expr(node.slice)
        elif isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    self.expr(part)
        elif isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.expr(element)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if key is None:
                    self.refuse(value, "Unpacking with ** is not TVMScript; leir does not run it.")
                    continue
                self.expr(key)
                self.expr(value)
        else:
            what = _EXPRESSIONS_REFUSED.get(type(node), f"A {type(node).__name__} expression")
            self.refuse(node, f"{what} is not TVMScript; leir does not run it.")

    def load_name(self, node: ast.Name) -> None:
        name = node.id
        if name in self.lambda_params:
            return
        if _is_dunder(name) and name not in BUILTIN_NAMES:
            self.refuse(node, f"`{name}` is a dunder name; {_ALLOWED_BY}.")
        elif name in self.params and not (self.in_signature and name in BUILTIN_NAMES):
            return
        elif name in BUILTIN_NAMES:
            if name in ALLOWED_BUILTINS:
                self.refuse(node, f"`{name}` may only be called, as in `for i in {name}(n)`.")
            else:
                self.refuse(node, f"`{name}` is a Python builtin; {_ALLOWED_BY}.")
        elif name in self.locals:
            return
        elif name in self.scope.constants:
            reason = constant_refusal(self.scope.constants[name])
            if reason is not None:
                self.refuse(node, f"`{name}` is a module constant leir does not give TVM: {reason[0].lower()}{reason[1:]}")
        elif name in self.scope.bound_names:
            self.refuse(
                node,
                f"`{name}` is defined outside the kernel by code that leir does not run; {_ALLOWED_BY} "
                "(`N = 128` at module level).",
            )
        # Any other name is undefined: TVM reports it, and cannot reach
        # anything by it because builtins are refused above.

    def namespace_reference(self, node: ast.Name | ast.Attribute) -> None:
        """``T.axis.remap``-like names: on the allow-list or refused."""
        path = self.scope.path_of(node)
        reason = _namespace_refusal(_dotted(node), resolve(path) if path else None)
        if reason is not None:
            self.refuse(node, reason)

    def attribute(self, node: ast.Attribute) -> None:
        if _is_dunder(node.attr):
            self.refuse(node, f"`.{node.attr}` is a dunder attribute; {_ALLOWED_BY}.")
            return
        with self.checking() as clean:
            self.expr(node.value)
        if not clean[0]:
            return
        is_variable = isinstance(node.value, ast.Name) and (
            node.value.id in self.params or node.value.id in self.locals
        )
        if not (is_variable and node.attr in BUFFER_FIELDS):
            fields = ", ".join(f".{f}" for f in sorted(BUFFER_FIELDS))
            self.refuse(node, f"A kernel reads only {fields} of its own variables; `.{node.attr}` is not allowed.")

    def call(self, node: ast.Call) -> None:
        func = node.func
        lambda_ok = False
        if isinstance(func, ast.Name | ast.Attribute) and self.scope.path_of(func) is not None:
            self.namespace_reference(func)
            resolved = self.scope.resolve(func)
            lambda_ok = resolved is not None and resolved.members[-1:] == ("comm_reducer",)
        elif isinstance(func, ast.Name) and func.id in ALLOWED_BUILTINS:
            pass
        elif isinstance(func, ast.Name):
            with self.checking() as clean:
                self.load_name(func)
            if clean[0]:
                self.refuse(func, f"A kernel may call only TVMScript functions (T.…) and range; `{func.id}` is neither.")
        else:
            with self.checking() as clean:
                self.expr(func)
            if clean[0]:
                self.refuse(func, "A kernel may call only TVMScript functions (T.…) and range.")
        for arg in node.args:
            if isinstance(arg, ast.Lambda) and lambda_ok:
                self.reducer_lambda(arg)
            else:
                self.expr(arg)
        for keyword in node.keywords:
            if keyword.arg is None:
                self.refuse(keyword, "Unpacking with ** is not TVMScript; leir does not run it.")
            else:
                self.expr(keyword.value)

    def reducer_lambda(self, node: ast.Lambda) -> None:
        args = node.args
        if args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults:
            self.refuse(node, "A T.comm_reducer combiner takes plain parameters only (lambda x, y: ...).")
            return
        for arg in args.args:
            self.binding_name(arg, arg.arg, is_param=False)
        saved = self.lambda_params
        self.lambda_params = saved | {a.arg for a in args.args}
        self.expr(node.body)
        self.lambda_params = saved

    def integer_guard(self, node: ast.expr) -> None:
        """Refuse an integer constant expression that Python would fold to
        more than ``MAX_INTEGER_BITS`` bits while TVM parses."""
        value = self.integer_value(node)
        if value is not None and value.bit_length() > MAX_INTEGER_BITS:
            self._values[id(node)] = None  # reported here, not again by its parents
            self.refuse(node, f"This constant expression is larger than {MAX_INTEGER_BITS} bits; a kernel's integer "
                              "constants are int64 or uint64 values.")

    def integer_value(self, node: ast.expr) -> int | None:
        """The value of ``node`` when it is an integer expression made only
        of literals and module constants (what Python folds while TVM
        parses), else None (a TIR expression; a float, which costs nothing
        to fold). Its operands are at most ``MAX_INTEGER_BITS`` bits (a
        larger one is refused, and None here) and exponents and shifts at
        most ``MAX_LITERAL_EXPONENT`` (``operator_guard``), so computing it
        takes at most a few thousand bits."""
        key = id(node)
        if key in self._values:
            return self._values[key]
        value = None
        if isinstance(node, ast.Constant):
            value = node.value
        elif isinstance(node, ast.Name) and node.id in self.scope.constants and node.id not in self.locals:
            value = self.scope.constants[node.id]
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Invert):
            operand = self.integer_value(node.operand)
            if operand is not None:
                value = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](operand)
        elif isinstance(node, ast.BinOp) and type(node.op) in _INTEGER_OPERATORS:
            left, right = self.integer_value(node.left), self.integer_value(node.right)
            if left is not None and right is not None and _foldable(node.op, left, right):
                value = _INTEGER_OPERATORS[type(node.op)](left, right)
        if not isinstance(value, int) or isinstance(value, bool):
            value = None
        self._values[key] = value
        return value

    def operator_guard(self, node: ast.AST, op: ast.operator, left: ast.expr, right: ast.expr) -> None:
        """Operators Python evaluates eagerly on plain values, where a kernel
        could make TVM's parser spend unbounded time or memory."""
        if isinstance(op, ast.Pow | ast.LShift) and not _is_small_number(right):
            symbol = "**" if isinstance(op, ast.Pow) else "<<"
            self.refuse(
                node,
                f"`{symbol}` takes a literal right-hand side of at most {MAX_LITERAL_EXPONENT} in a kernel "
                f"(use T.pow / T.shift_left for computed ones).",
            )
        elif isinstance(op, ast.Mult) and (_is_sequence_literal(left) or _is_sequence_literal(right)):
            self.refuse(node, "Repeating a string or sequence with * is not TVMScript.")
        elif isinstance(op, ast.Mod) and _is_sequence_literal(left):
            self.refuse(node, "String formatting with % is not TVMScript.")


def constant_refusal(value: object) -> str | None:
    """Why a literal (or a module constant's value) may not be given to
    TVM, or None when it may."""
    if value is None or isinstance(value, bool | float):
        return None
    if isinstance(value, int):
        if value.bit_length() > MAX_INTEGER_BITS:
            return f"An integer literal of more than {MAX_INTEGER_BITS} bits is not a kernel constant."
        return None
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH:
            return f"A string constant in a kernel is at most {MAX_STRING_LENGTH} characters (a name, a dtype, a scope)."
        if value and not (IDENTIFIER_STRING.fullmatch(value) and not any(_is_dunder(p) for p in value.split("."))):
            return ("A string constant in a kernel may hold only a name, a dtype or a scope (letters, digits, _ "
                    "and dots); TVM parses some strings as Python code, so leir gives it no other text.")
        return None
    if isinstance(value, tuple | list):
        if len(value) > MAX_CONSTANT_ELEMENTS:
            return f"A constant sequence in a kernel has at most {MAX_CONSTANT_ELEMENTS} elements."
        return next((r for r in map(constant_refusal, value) if r is not None), None)
    if isinstance(value, bytes):
        return "A bytes literal is not TVMScript."
    if isinstance(value, complex):
        return "A complex number is not TVMScript."
    if value is Ellipsis:
        return "`...` is not TVMScript."
    return f"A {type(value).__name__} literal is not TVMScript."


#: The integer operators Python folds on plain numbers, as TVM's parser
#: lets it (``/`` makes a float and is left out).
_INTEGER_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
}  # fmt: skip


def _foldable(op: ast.operator, left: int, right: int) -> bool:
    """Whether folding ``left op right`` is an integer within bounds (and
    raises nothing): operands of at most ``MAX_INTEGER_BITS`` bits, a
    non-negative exponent or shift of at most ``MAX_LITERAL_EXPONENT``, no
    division by zero."""
    if left.bit_length() > MAX_INTEGER_BITS or right.bit_length() > MAX_INTEGER_BITS:
        return False
    if isinstance(op, ast.Pow | ast.LShift | ast.RShift):
        return 0 <= right <= MAX_LITERAL_EXPONENT
    if isinstance(op, ast.FloorDiv | ast.Mod):
        return right != 0
    return True


def _namespace_refusal(written: str, resolved: Resolved | None) -> str | None:
    """Why a name rooted at a namespace alias (``written`` as in the file)
    is refused, or None when it is on the allow-list."""
    if resolved is None:
        return f"`{written}` is not a TVMScript name; {_ALLOWED_BY}."
    members = list(resolved.members)
    if not members:
        return f"`{written}` may only be used as `{written}.<name>` in a kernel."
    not_listed = f"`{written}` is not on leir's list of TVMScript names a kernel may use."
    if resolved.namespace in ("tirx", "tir"):
        first = members[0]
        if resolved.namespace == "tir":
            first = LEGACY_TIR_RENAMES.get(first, first)
        if first in REFUSED_TIR_MEMBERS:
            return f"`{written}` is refused: {REFUSED_TIR_MEMBERS[first]}."
        if first == "prim_func":
            return f"`{written}` is allowed only as the kernel's decorator."
        if first in TIR_SUBNAMESPACES:
            if len(members) == 2 and members[1] in TIR_SUBNAMESPACES[first]:
                return None
            return not_listed
        if len(members) == 1 and (first in TIR_MEMBERS or TIR_DTYPE.fullmatch(first)):
            return None
        return not_listed
    if members == ["ir_module"]:
        return f"`{written}` is allowed only as the decorator of a module class."
    if len(members) == 1 and members[0] in IR_MEMBERS:
        return None
    return not_listed


def docstrings(kernel: KernelSource) -> list[ast.Constant]:
    """The docstrings of a kernel (its function's, or its module class's and
    each of its functions'). The screen lets them through whatever they
    say, and TVM is given the kernel with them blanked."""
    node = kernel.node
    definitions = [node, *(s for s in node.body if isinstance(s, ast.FunctionDef))] if isinstance(node, ast.ClassDef) else [node]
    return [d.body[0].value for d in definitions if d.body and _is_docstring(d, d.body[0])]


def _is_docstring(definition: ast.AST, statement: ast.stmt) -> bool:
    return (
        statement is definition.body[0]
        and isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _names_stored_in(body: list[ast.stmt]) -> frozenset[str]:
    """Every name the body assigns, loops or binds with ``with ... as``.

    Collecting too many is harmless: a name bound only later, or in a scope
    that has ended, is undefined to TVM (builtins are refused separately)."""
    return frozenset(
        node.id
        for statement in body
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    )


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _is_small_number(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and abs(node.value) <= MAX_LITERAL_EXPONENT
    )


def _is_sequence_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.List | ast.Tuple) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return "the decorator"

"""TensorIR -> LEIR: raise a TVM ``PrimFunc`` (written by hand, printed by
TVM, generated from tensor expressions, or the result of schedule
primitives) back to a LEIR ``Program``.

Every block becomes an equation whose indices are over loop variables (the
block's iterator bindings are substituted in), every loop a LEIR loop of the
same kind (a thread-bound loop is named after its axis: ``bx``, ``tx``...),
and statement order is kept. Buffers become declarations: a parameter that
is written is ``out``, one only read is ``in``, an allocated buffer is
``tmp`` in its storage scope. Values follow LEIR's typing rules
(leir/value_types.py), so ``T.Cast("float32", a*b)`` with ``a*b`` in f16 is
``f16(a*b)``: computed in f16, then converted.

A block's ``T.init`` becomes LEIR's implied initial value when that is what
it means: the combiner's identity, the tensor's first write, and an init
that TVM runs exactly at the first iteration of the loops the written index
does not use. Otherwise the init is an equation of its own: before the
outermost reduction loop when the loops down to the block hold nothing else
(what ``decompose_reduction`` writes), else in place, guarded by ``where``
to the iterations where TVM runs it. An ``if_then_else`` whose untaken
branch reads outside a tensor (padding) becomes one guarded equation per
branch, which LEIR's bounds check accepts.

What LEIR cannot say raises ``RaiseError`` naming the construct; the raiser
never returns a program that means something else than the function, nor
one that LEIR's analysis rejects.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

from leir import affine
from leir import ast as A
from leir.errors import LeirError

#: TVM dtype string -> LEIR spelling.
_LEIR_DTYPE = {tvm_name: leir_name for leir_name, tvm_name in A.DTYPES.items()}
#: TVM storage scope -> LEIR scope letter. Dynamic shared memory is shared
#: memory whose size is set at launch; LEIR does not distinguish it.
_LEIR_SCOPE = {"global": "g", "shared": "s", "shared.dyn": "s", "local": "l"}
#: TVM thread tag -> LEIR ``B`` loop variable.
_THREAD_NAME = {tag: name for name, tag in A.THREAD_AXES.items()}
#: TIR intrinsics (op name without its ``tirx.`` prefix) -> LEIR function.
_FUNCTION = {
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "fabs": "abs",
    "erf": "erf",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "floor": "floor",
    "ceil": "ceil",
    "pow": "pow",
    "if_then_else": "if_then_else",
}
#: Names a loop variable or tensor must not take: LEIR's reserved words, and
#: names the reader would take for something else.
_AVOID = frozenset({"in", "out", "tmp", "where", "inf"}) | frozenset(A.DTYPES) | frozenset(A.FUNCTIONS)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Largest reduction iteration space enumerated to prove where an init fires.
_MAX_ENUMERATED = 1 << 16

_COMM_REDUCE = 2  # the IterVar type of a reduction block iterator
#: tvm.tirx.ForKind -> LEIR loop kind.
_LOOP_KIND = {0: "L", 1: "P", 2: "V", 3: "U", 4: "B"}
_THREAD_BINDING = 4


class RaiseError(LeirError):
    """The function uses something LEIR cannot express."""


def raise_func(func) -> A.Program:
    """The LEIR program that computes what ``func`` (a ``tvm.tirx.PrimFunc``)
    computes. Raises ``RaiseError`` for constructs LEIR cannot express."""
    return Raiser(func).run()


def raise_module(mod) -> dict[str, A.Program]:
    """Every PrimFunc of an ``IRModule``, raised, by global name. Functions
    of other kinds (Relax) are skipped."""
    from tvm.tirx import PrimFunc

    out: dict[str, A.Program] = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, PrimFunc):
            name = gvar.name_hint
            try:
                out[name] = raise_func(func)
            except RaiseError as e:
                raise RaiseError(f"{name}: {e}") from None
    return out


# ------------------------------------------------------------------ helpers


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _kind(node) -> str:
    return type(node).__name__


def _fresh(base: str, taken) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", base) or "v"
    if not _IDENT.match(name):
        name = "_" + name
    if name not in taken and name not in _AVOID:
        return name
    for n in itertools.count(1):
        candidate = f"{name}_{n}"
        if candidate not in taken and candidate not in _AVOID:
            return candidate
    raise AssertionError("unreachable")


def _int(expr, what: str) -> int:
    if _kind(expr) != "IntImm":
        raise RaiseError(f"{what} is not a constant ({expr})")
    return int(expr.value)


def _num(value: int | float, dtype: str) -> A.Expr:
    """A literal whose text reads back as the same value in ``dtype``."""
    if isinstance(value, float) or dtype.startswith(("float", "bfloat")):
        value = float(value)
        if math.isnan(value):
            raise RaiseError("a NaN constant has no LEIR literal")
        negative = math.copysign(1.0, value) < 0
        magnitude = abs(value)
        if math.isinf(magnitude):
            text = "inf"
        elif dtype in ("float32", "float16") and _round(magnitude, dtype) == magnitude:
            # A value already rounded to the narrow type: its shortest text
            # there (``3.4028235e+38``, not ``3.4028234663852886e+38``).
            import numpy as np

            text = str(np.float32(magnitude) if dtype == "float32" else np.float16(magnitude))
            if float(text) > float(np.finfo(dtype).max):
                # TVM refuses a literal above the type's maximum even when it
                # rounds down to it: write the maximum exactly.
                text = repr(magnitude)
        else:
            text = repr(magnitude)  # the literal as written (0.7071067811865476)
        if text.isdigit():
            text += ".0"
        node: A.Expr = A.Num(float(text), text)
    else:
        value = int(value)
        negative = value < 0
        node = A.Num(abs(value), str(abs(value)))
    return A.Unary("-", node) if negative else node


def _conjuncts(expr: A.Expr | None) -> list[A.Expr]:
    if expr is None:
        return []
    if isinstance(expr, A.Binary) and expr.op == "&":
        return _conjuncts(expr.lhs) + _conjuncts(expr.rhs)
    return [expr]


def _conjoin(parts: list[A.Expr]) -> A.Expr | None:
    out: A.Expr | None = None
    for p in parts:
        out = p if out is None else A.Binary("&", out, p)
    return out


def _replace(expr: A.Expr, target: A.Expr, new: A.Expr) -> A.Expr:
    """``expr`` with the node ``target`` (by identity) replaced by ``new``."""
    if expr is target:
        return new
    if isinstance(expr, A.Unary):
        return A.Unary(expr.op, _replace(expr.operand, target, new))
    if isinstance(expr, A.Binary):
        return A.Binary(expr.op, _replace(expr.lhs, target, new), _replace(expr.rhs, target, new))
    if isinstance(expr, A.Call):
        return A.Call(expr.func, tuple(_replace(a, target, new) for a in expr.args))
    return expr


def _vars(expr: A.Expr) -> frozenset[str]:
    return frozenset(n.name for n in A.walk(expr) if isinstance(n, A.Var))


def _eval_index(expr: A.Expr, env: dict):
    """Integer/boolean value of an index or guard expression over numpy
    arrays of loop values, or None when it is not such an expression."""
    import numpy as np

    if isinstance(expr, A.Num):
        return expr.value if isinstance(expr.value, int) else None
    if isinstance(expr, A.Var):
        return env.get(expr.name)
    if isinstance(expr, A.Unary):
        x = _eval_index(expr.operand, env)
        if x is None:
            return None
        return -x if expr.op == "-" else np.logical_not(x)
    if isinstance(expr, A.Binary):
        a, b = _eval_index(expr.lhs, env), _eval_index(expr.rhs, env)
        if a is None or b is None:
            return None
        op = expr.op
        if op in ("//", "%") and np.any(np.asarray(b) == 0):
            return None
        return {
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "//": lambda: a // b, "%": lambda: a % b,
            "<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b, ">=": lambda: a >= b,
            "==": lambda: a == b, "!=": lambda: a != b,
            "&": lambda: np.logical_and(a, b), "|": lambda: np.logical_or(a, b),
        }.get(op, lambda: None)()
    if isinstance(expr, A.Call) and expr.func in ("max", "min") and len(expr.args) == 2:
        a, b = (_eval_index(x, env) for x in expr.args)
        if a is None or b is None:
            return None
        return np.maximum(a, b) if expr.func == "max" else np.minimum(a, b)
    return None


def _injective(access: A.Access, loops: list[A.Loop]) -> bool:
    """Whether distinct iterations of the loops ``access`` uses write
    distinct elements (proved by mixed radix for affine indices, else by
    enumeration when small); False when not proved."""
    import numpy as np

    used = [l for l in loops if any(l.var in _vars(i) for i in access.indices or ())]
    if affine.injective(access.indices or (), used):
        return True
    size = 1
    for l in used:
        size *= l.extent
    if size > _MAX_ENUMERATED * 16:
        return False
    grids = np.meshgrid(*[np.arange(l.start, l.start + l.extent) for l in used], indexing="ij")
    env = {l.var: g.ravel() for l, g in zip(used, grids)}
    columns = []
    for index in access.indices or ():
        v = _eval_index(index, env)
        if v is None:
            return False
        columns.append(np.broadcast_to(np.asarray(v), (size,)))
    if not columns:
        return size == 1
    return len(np.unique(np.stack(columns, axis=1), axis=0)) == size


def _identity(combiner: str, dtype: str) -> int | float | bool:
    """The initial value LEIR implies for a reduction into ``dtype`` (a
    LEIR dtype), as leir.bridge.lower writes it."""
    import numpy as np

    from leir import value_types as VT

    lo = hi = 0
    if VT.is_integer_dtype(dtype):
        info = np.iinfo(A.DTYPES[dtype]) if dtype not in ("i4", "u4") else None
        lo, hi = (info.min, info.max) if info else ((-8, 7) if dtype == "i4" else (0, 15))
    return VT.reduction_identity(combiner, dtype, int(lo), int(hi))


# ------------------------------------------------------------------ raising


@dataclass
class _Tensor:
    name: str
    dtype: str  # LEIR spelling
    shape: tuple[int, ...]
    scope: str  # LEIR letter
    role: str


@dataclass
class _LoopNode:
    """A loop under construction: its LEIR header and body items (equations
    and nested ``_LoopNode``s), merged into ``Nest``s at the end."""

    loop: A.Loop
    items: list = field(default_factory=list)


@dataclass
class _Frame:
    """One enclosing statement during the walk: a loop (``node`` set) or a
    block / if that adds bindings or a guard but no LEIR loop."""

    stmt: object
    node: _LoopNode | None
    items: list  # where the statements inside this frame put their items


class Raiser:
    """Raises one PrimFunc to a LEIR program (``raise_func`` runs it).

    Public so that a reader that needs more than the program can subclass
    it: ``leir.transforms.python_kernels`` overrides ``stmt_SBlockRealize``
    and ``equations`` to remember which TIR block and loops each equation
    came from. A statement of TIR kind ``K`` is raised by ``stmt_K``;
    ``equations`` turns one block body into equations."""

    def __init__(self, func):
        from tvm.tirx import PrimFunc

        if not isinstance(func, PrimFunc):
            raise RaiseError(f"expected a PrimFunc, got {type(func).__name__}")
        self.func = func
        self.tensors: dict = {}  # tvm buffer var -> _Tensor
        self.order: list = []  # buffers in declaration order
        self.written: set[str] = set()  # tensors written so far, in program order
        self.thread_names: set[str] = set()
        self.units: list = []
        self.frames: list[_Frame] = []
        self.env: dict = {}  # tvm var -> A.Expr (loop vars, block iter vars, let vars)
        #: Conditions guarding the current statements: (TIR condition,
        #: negated?, what it is), converted per equation in its dtype.
        self.guard: list[tuple] = []
        self.scope_names: list[str] = []  # enclosing loop variable names

    # -------------------------------------------------------------- driver

    def run(self) -> A.Program:
        body = self.func.body
        self.thread_names = self.bound_threads(body)
        self.declare_params()
        self.collect(body)
        if _kind(body) == "SBlockRealize" and not body.block.iter_vars and body.block.init is None:
            root = body.block
            self.check_block_shell(root)
            body = root.body
        self.frames = [_Frame(None, None, self.units)]
        self.stmt(body)
        decls = tuple(A.Decl(t.role, t.name, t.dtype, t.shape, t.scope) for t in (self.tensors[b] for b in self.order))
        units = []
        for item in self.units:
            if isinstance(item, _LoopNode):
                nest = _to_nest(item)
                if nest is not None:
                    units.append(nest)
            else:
                units.append(A.Nest((), (item,), bracketed=False))
        if not units:
            raise RaiseError("the function computes nothing (no block writes a buffer)")
        program = A.Program(decls, tuple(units))
        self.check_valid(program)
        return program

    def check_valid(self, program: A.Program) -> None:
        """What LEIR's analysis rejects (a thread loop whose iterations all
        write one element, ...) is not a program to hand back."""
        from leir.semantics import analyze

        errors = [d for d in analyze(program).diagnostics if d.is_error]
        if errors:
            raise RaiseError(f"the function raises to LEIR that is not valid: {errors[0].message}")

    # -------------------------------------------------------- declarations

    def bound_threads(self, body) -> set[str]:
        """LEIR names of the thread axes loops are bound to."""
        names = set()
        for s in _statements(body):
            if _kind(s) == "For" and int(s.kind) == _THREAD_BINDING:
                tag = str(s.thread_binding.thread_tag) if s.thread_binding is not None else ""
                if tag not in _THREAD_NAME:
                    raise RaiseError(f"loop {s.loop_var.name} is bound to {tag or 'an unnamed thread'}; "
                                     f"LEIR binds to {', '.join(_THREAD_NAME)} only")
                names.add(_THREAD_NAME[tag])
        return names

    def declare_params(self) -> None:
        from tvm.tirx import is_buffer_var

        written = self.written_buffers()
        # Thread-bound loops are named after their axis; keep those names free.
        taken: set[str] = set(self.thread_names)
        for p in self.func.params:
            if not is_buffer_var(p):
                raise RaiseError(f"parameter {p.name} is a scalar, not a buffer; LEIR kernels take tensors only")
            scope = str(p.scope())
            if scope != "global":
                raise RaiseError(f"parameter {p.name} is in {scope} memory; inputs and outputs must be global")
            role = "out" if any(p.same_as(w) for w in written) else "in"
            self.declare(p, role, taken)

    def declare(self, buf, role: str, taken: set[str]) -> None:
        name = _fresh(str(buf.name), taken)
        taken.add(name)
        dtype = str(buf.dtype)
        if dtype not in _LEIR_DTYPE:
            raise RaiseError(f"buffer {buf.name} has dtype {dtype}, which LEIR has no name for")
        scope = str(buf.scope())
        if scope not in _LEIR_SCOPE:
            raise RaiseError(f"buffer {buf.name} is in {scope} memory; LEIR has global, shared and local only")
        shape = tuple(_int(d, f"dimension {k} of buffer {buf.name}") for k, d in enumerate(buf.shape))
        if list(buf.strides):
            raise RaiseError(f"buffer {buf.name} has explicit strides; LEIR tensors are dense row-major")
        if _kind(buf.elem_offset) != "IntImm" or int(buf.elem_offset.value) != 0:
            raise RaiseError(f"buffer {buf.name} starts at an element offset; LEIR tensors start at 0")
        if getattr(buf, "layout", None) is not None:
            raise RaiseError(f"buffer {buf.name} has a layout; LEIR tensors are dense row-major")
        self.tensors[buf] = _Tensor(name, _LEIR_DTYPE[dtype], shape, _LEIR_SCOPE[scope], role)
        self.order.append(buf)

    def written_buffers(self) -> list:
        out = []
        for s in _statements(self.func.body):
            if _kind(s) == "BufferStore":
                out.append(s.buffer)
        return out

    def collect(self, body) -> None:
        """Declare every allocated buffer, in order of allocation."""
        taken = {t.name for t in self.tensors.values()} | self.thread_names
        for s in _statements(body):
            k = _kind(s)
            if k == "SBlock":
                for buf in s.alloc_buffers:
                    self.declare(buf, "tmp", taken)
            elif k == "AllocBuffer":
                self.declare(s.buffer, "tmp", taken)

    def tensor(self, buf) -> _Tensor:
        t = self.tensors.get(buf)
        if t is None:
            raise RaiseError(f"buffer {buf.name} is neither a parameter nor allocated (a match_buffer or a view?)")
        return t

    # ---------------------------------------------------------- statements

    def emit(self, item) -> None:
        self.frames[-1].items.append(item)

    def stmt(self, s) -> None:
        k = _kind(s)
        method = getattr(self, "stmt_" + k, None)
        if method is None:
            raise RaiseError(_UNSUPPORTED_STMT.get(k, f"{k} statements are not expressible in LEIR"))
        method(s)

    def stmt_SeqStmt(self, s) -> None:
        for sub in s.seq:
            self.stmt(sub)

    def stmt_AllocBuffer(self, s) -> None:
        pass  # declared by collect()

    def stmt_Evaluate(self, s) -> None:
        if _kind(s.value) == "IntImm":
            return  # a no-op
        raise RaiseError(f"T.evaluate({s.value}) has side effects LEIR cannot express")

    def stmt_For(self, s) -> None:
        letter = _LOOP_KIND.get(int(s.kind))
        if letter is None:
            raise RaiseError(f"loop {s.loop_var.name} has a kind ({s.kind}) LEIR does not have")
        extent = _int(s.extent, f"the extent of loop {s.loop_var.name}")
        start = _int(s.min, f"the start of loop {s.loop_var.name}")
        if s.step is not None and not (_kind(s.step) == "IntImm" and int(s.step.value) == 1):
            raise RaiseError(f"loop {s.loop_var.name} has step {s.step}; LEIR loops step by 1")
        taken = set(self.scope_names) | {t.name for t in self.tensors.values()}
        if letter == "B":
            name = _THREAD_NAME[str(s.thread_binding.thread_tag)]
            if name in self.scope_names:
                raise RaiseError(f"loop {s.loop_var.name} binds {s.thread_binding.thread_tag} inside a loop already bound to it "
                                 f"(threads sharing work, with an implied barrier); LEIR runs every loop in order")
        else:
            name = _fresh(str(s.loop_var.name), taken | self.thread_names)
        node = _LoopNode(A.Loop(letter, extent, name, start))
        self.env[s.loop_var] = A.Var(name)
        self.scope_names.append(name)
        self.frames.append(_Frame(s, node, node.items))
        try:
            self.stmt(s.body)
        finally:
            self.frames.pop()
            self.scope_names.pop()
        self.emit(node)

    def stmt_IfThenElse(self, s) -> None:
        for branch, negate in ((s.then_case, False), (s.else_case, True)):
            if branch is None:
                continue
            self.guard.append((s.condition, negate, "an if condition"))
            self.frames.append(_Frame(s, None, self.frames[-1].items))
            try:
                self.stmt(branch)
            finally:
                self.frames.pop()
                self.guard.pop()

    def stmt_Bind(self, s) -> None:
        if any(_kind(n) == "TensorLoad" for n in _exprs(s.value)):
            raise RaiseError(f"let {s.var.name} = {s.value} reads a buffer, so it cannot be inlined where it is used")
        if not _is_index(s.value):
            raise RaiseError(f"let {s.var.name} = {s.value} is not an index expression LEIR can inline")
        self.env[s.var] = self.index(s.value, f"let {s.var.name}")
        body = getattr(s, "body", None)
        if body is not None:
            self.stmt(body)

    def check_block_shell(self, block) -> None:
        if list(block.match_buffers):
            raise RaiseError(f"block {block.name_hint!r} matches a sub-buffer region (T.match_buffer); LEIR has no views")

    def stmt_SBlockRealize(self, s) -> None:
        block = s.block
        self.check_block_shell(block)
        saved_guard = list(self.guard)
        for iv, value in zip(block.iter_vars, s.iter_values):
            self.env[iv.var] = self.index(value, f"the binding of {iv.var.name} in block {block.name_hint!r}")
        pred = s.predicate
        if not (_kind(pred) == "IntImm" and int(pred.value) == 1):
            if _kind(pred) == "IntImm":
                raise RaiseError(f"block {block.name_hint!r} has predicate False and never runs")
            self.guard.append((pred, False, f"the predicate of block {block.name_hint!r}"))
        try:
            fire = self.init_condition(block) if block.init is not None else []
            if block.init is not None and _kind(block.body) == "BufferStore" and _kind(block.init) == "BufferStore":
                self.reduction(s, fire)
                return
            self.frames.append(_Frame(s, None, self.frames[-1].items))
            try:
                if block.init is not None:
                    # A blockized reduction: its init is a statement of its
                    # own, run where TVM runs it, before the body.
                    self.guard += [(c, False, None) for c in fire]
                    self.stmt(block.init)
                    del self.guard[len(self.guard) - len(fire):]
                self.stmt(block.body)
            finally:
                self.frames.pop()
        finally:
            self.guard = saved_guard

    def init_condition(self, block) -> list[A.Expr]:
        """Where TVM runs a block's init: every reduction iterator at its
        start (conjuncts; those always true are left out)."""
        loops = [f.node.loop for f in self.frames if f.node is not None]
        fire = []
        for iv in block.iter_vars:
            if int(iv.iter_type) != _COMM_REDUCE:
                continue
            binding = self.env[iv.var]
            for loop in loops:
                if loop.var in _vars(binding) and loop.kind in ("P", "V", "B"):
                    raise RaiseError(f"block {block.name_hint!r} reduces across {A.KIND_WORDS[loop.kind]} loop {loop.var} "
                                     f"(a cross-thread reduction); LEIR reductions run over serial loops")
            cond = A.Binary("==", binding, _num(_int(iv.dom.min, "a block iterator's start"), "int64"))
            if _eval_index(cond, {}) is not True:
                fire.append(cond)
        return fire

    def stmt_BufferStore(self, s) -> None:
        self.emit_all(self.equations(s, allow_self_read=False))

    # ---------------------------------------------------------- equations

    def store_target(self, s) -> A.Access:
        t = self.tensor(s.buffer)
        if len(s.indices) != len(t.shape):
            raise RaiseError(f"store to {t.name} uses {len(s.indices)} indices for a rank-{len(t.shape)} buffer")
        indices = tuple(self.index(i, f"an index of {t.name}") for i in s.indices)
        return A.Access(t.name, indices if t.shape else None)

    def equations(self, s, *, allow_self_read: bool, guard: list[A.Expr] | None = None) -> list[A.Equation]:
        """The equation(s) of a buffer store under the current guard (or
        ``guard``): one, or one per branch of a padding ``if_then_else``."""
        lhs = self.store_target(s)
        dtype = A.DTYPES[self.tensor(s.buffer).dtype]
        rhs = self.value(s.value, dtype)
        conjuncts = self.guards(dtype) if guard is None else guard
        loops = [f.node.loop for f in self.frames if f.node is not None]
        out = []
        for part, part_guard in self.split_padding(rhs, conjuncts, loops):
            eq = A.Equation(lhs, part, _conjoin(part_guard))
            self.check_reads(eq, allow_self_read)
            out.append(eq)
        self.written.add(lhs.tensor)
        return out

    def equation(self, s, *, allow_self_read: bool, guard: list[A.Expr] | None = None) -> A.Equation:
        eqs = self.equations(s, allow_self_read=allow_self_read, guard=guard)
        if len(eqs) != 1:
            raise RaiseError("an init reads out of bounds in an if_then_else branch; LEIR cannot guard it")
        return eqs[0]

    def emit_all(self, eqs: list[A.Equation]) -> None:
        for eq in eqs:
            self.emit(eq)

    def check_reads(self, eq: A.Equation, allow_self_read: bool) -> None:
        """Every tensor read was written before, unless it is an input (LEIR
        programs start from their inputs; TVM would read what the caller
        left in an output, or uninitialised memory)."""
        lhs = eq.lhs
        reads = [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
        if eq.predicate is not None:
            reads += [n for n in A.walk(eq.predicate) if isinstance(n, A.Access)]
        for r in reads:
            if self.role(r.tensor) == "in" or r.tensor in self.written:
                continue
            if r.tensor == lhs.tensor and allow_self_read:
                continue
            what = "an output's incoming value" if self.role(r.tensor) == "out" else "memory no block has written"
            raise RaiseError(f"{lhs.tensor} = ... reads {r.tensor} before any block writes it ({what}); "
                             f"LEIR programs start from their inputs only")

    def split_padding(self, rhs: A.Expr, guard: list[A.Expr], loops: list[A.Loop]) -> list[tuple[A.Expr, list[A.Expr]]]:
        """``rhs`` under ``guard``, split on each ``if_then_else`` over loop
        variables whose branch reads outside a tensor (padding): TVM only
        evaluates the branch taken, and LEIR says so with ``where``, which
        its bounds check respects. Exact: each part is the right-hand side
        with the if_then_else replaced by one branch, guarded by its
        condition or its negation."""
        ranges = affine.loop_ranges(loops)
        for node in A.walk(rhs):
            if not (isinstance(node, A.Call) and node.func == "if_then_else" and len(node.args) == 3):
                continue
            cond, then, other = node.args
            if any(isinstance(n, A.Access) for n in A.walk(cond)) or not _vars(cond) <= ranges.keys():
                continue
            if not (self.out_of_bounds(then, ranges) or self.out_of_bounds(other, ranges)):
                continue
            return (self.split_padding(_replace(rhs, node, then), guard + [cond], loops)
                    + self.split_padding(_replace(rhs, node, other), guard + [A.Unary("!", cond)], loops))
        return [(rhs, guard)]

    def out_of_bounds(self, expr: A.Expr, ranges: dict) -> bool:
        """Whether a read in ``expr`` may index outside its tensor (what
        LEIR's analysis reports for an unguarded equation)."""
        shapes = {t.name: t.shape for t in self.tensors.values()}
        for node in A.walk(expr):
            if not isinstance(node, A.Access) or node.indices is None:
                continue
            for index, extent in zip(node.indices, shapes[node.tensor]):
                b = affine.bounds(index, ranges) if _vars(index) <= ranges.keys() else None
                if b is not None and (b[0] < 0 or b[1] >= extent):
                    return True
        return False

    def role(self, name: str) -> str:
        return next(t.role for t in self.tensors.values() if t.name == name)

    def reduction(self, realize, fire: list[A.Expr]) -> None:
        """A block with ``T.init``: one LEIR reduction when its implied init
        means the same, else an explicit init equation and an update."""
        from leir.semantics import reduction_shape

        block = realize.block
        init, body = block.init, block.body
        t = self.tensor(body.buffer)
        dtype = A.DTYPES[t.dtype]
        lhs = self.store_target(body)
        outer = self.guards(dtype)
        loops = [f.node.loop for f in self.frames if f.node is not None]
        spatial = frozenset().union(*map(_vars, lhs.indices or ()))
        reduce_loops = [l for l in loops if l.var not in spatial]
        if self.store_target(init) == lhs and self.fires_first_only(reduce_loops, fire, outer):
            # 1. Implied init: LEIR starts a reduction (first write, combiner
            #    shape) with the combiner's identity at the first iteration
            #    of the loops its written index does not use.
            rhs = self.value(body.value, dtype)
            combiner, _ = reduction_shape(A.Equation(lhs, rhs))
            init_value = init.value
            if (combiner is not None and lhs.tensor not in self.written and _injective(lhs, loops)
                    and _kind(init_value) in ("IntImm", "FloatImm")
                    and float(init_value.value) == float(_identity(combiner, t.dtype))
                    and len(self.split_padding(rhs, outer, loops)) == 1):
                self.emit(self.equation(body, allow_self_read=True))
                return
            # 2. Explicit init just before the outermost reduction loop (what
            #    decompose_reduction writes), over the loops inside it that
            #    the written index uses.
            placement = self.init_placement(realize, reduce_loops, lhs, rhs, init)
            if placement is not None:
                frame, spatial_inside = placement
                names = {l.var for l in reduce_loops}
                init_guard = [c for c in outer if not (_vars(c) & names)]
                item = self.equation(init, allow_self_read=False, guard=init_guard)
                for loop in reversed(spatial_inside):
                    item = _LoopNode(loop, [item])
                frame.items.append(item)
                self.emit_all(self.equations(body, allow_self_read=False))
                return

        # 3. Explicit init in place, guarded to where TVM runs it.
        self.emit(self.equation(init, allow_self_read=False, guard=outer + fire))
        self.emit_all(self.equations(body, allow_self_read=False))

    def init_placement(self, realize, reduce_loops, lhs, rhs, init) -> tuple[_Frame, list[A.Loop]] | None:
        """Where an explicit init can run once before its reduction: the
        frame just outside the outermost reduction loop, and the loops
        between that loop and the block that are not reduction loops.
        Requires every loop from there to the block to hold only the next
        one; with loops to repeat, also that the block reads its tensor only
        at the element it writes (so running all inits first changes
        nothing)."""
        names = {l.var for l in reduce_loops}
        child = realize
        k = len(self.frames) - 1
        chain: list[A.Loop] = []
        seen: set[str] = set()
        while seen != names:
            frame = self.frames[k]
            if k == 0 or frame.node is None or not frame.stmt.body.same_as(child):
                return None
            chain.append(frame.node.loop)
            if frame.node.loop.var in names:
                seen.add(frame.node.loop.var)
            child = frame.stmt
            k -= 1
        spatial_inside = [l for l in reversed(chain) if l.var not in names]
        if spatial_inside:
            init_reads = [n for n in A.walk(self.value(init.value, A.DTYPES[self.tensor(init.buffer).dtype]))
                          if isinstance(n, A.Access)]
            self_reads = [n for n in A.walk(rhs) if isinstance(n, A.Access) and n.tensor == lhs.tensor]
            if any(r.tensor == lhs.tensor for r in init_reads) or any(r != lhs for r in self_reads):
                return None
            if not _injective(lhs, [f.node.loop for f in self.frames if f.node is not None]):
                return None  # TVM re-runs the init between iterations writing one element
        return self.frames[k], spatial_inside

    def fires_first_only(self, reduce_loops: list[A.Loop], fire: list[A.Expr], guard: list[A.Expr]) -> bool:
        """Whether TVM's init condition (every reduction iterator at its
        start, and the block predicate) holds exactly at the first iteration
        of ``reduce_loops``, whatever the other loops are."""
        import numpy as np

        names = [l.var for l in reduce_loops]
        inner = set(names)
        conds = list(fire)
        for c in guard:
            used = _vars(c)
            if used & inner:
                if not used <= inner:
                    return False  # mixes reduction and other loops: not provable here
                conds.append(c)
        for c in fire:
            if not _vars(c) <= inner:
                return False
        size = 1
        for l in reduce_loops:
            size *= l.extent
        if size > _MAX_ENUMERATED or size == 0:
            return False
        grids = np.meshgrid(*[np.arange(l.start, l.start + l.extent) for l in reduce_loops], indexing="ij")
        env = dict(zip(names, grids))
        shape = tuple(l.extent for l in reduce_loops)
        fires = np.ones(shape, dtype=bool)
        for c in conds:
            v = _eval_index(c, env)
            if v is None:
                return False
            fires &= np.broadcast_to(np.asarray(v, dtype=bool), shape)
        first = np.zeros(shape, dtype=bool)
        first[(0,) * len(shape)] = True
        return bool(np.array_equal(fires, first))

    # --------------------------------------------------------- expressions

    def index(self, e, what: str) -> A.Expr:
        """An integer expression over loop variables: an index, a binding."""
        return _Expr(self, what).index(e)

    def value(self, e, dtype: str, what: str = "a stored value") -> A.Expr:
        """``e`` computed in ``dtype`` (a TVM dtype string)."""
        return _Expr(self, what).value(e, dtype)

    def guards(self, dtype: str) -> list[A.Expr]:
        """The conjuncts guarding the current statement, for an equation
        that computes in ``dtype``."""
        out = []
        for expr, negate, what in self.guard:
            cond = expr if what is None else self.value(expr, dtype, what)  # what is None: LEIR already
            out += [A.Unary("!", cond)] if negate else _conjuncts(cond)
        return out



_UNSUPPORTED_STMT = {
    "While": "while loops are not expressible in LEIR",
    "AssertStmt": "T.Assert is not expressible in LEIR",
    "AttrStmt": "T.attr statements are not expressible in LEIR",
    "DeclBuffer": "T.decl_buffer aliases memory; LEIR tensors do not alias",
    "Break": "break is not expressible in LEIR",
    "Continue": "continue is not expressible in LEIR",
    "Return": "return is not expressible in LEIR",
}


class _Expr:
    """TIR expressions -> LEIR, following LEIR's typing rules
    (leir/value_types.py): an equation computes in a context dtype (the
    written tensor's), reads and literals take the context dtype, and inside
    a cast ``d(e)`` the context is ``d``. A TIR ``Cast(d, e)`` whose operand
    computes in ``d2`` therefore becomes ``d2(e)``: ``e`` computed in ``d2``,
    then converted to the context ``d``."""

    def __init__(self, raiser: Raiser, what: str):
        self.r = raiser
        self.what = what

    def fail(self, message: str):
        raise RaiseError(f"{message} (in {self.what})")

    # ----------------------------------------------------------- indices

    def index(self, e) -> A.Expr:
        """An integer expression of loop variables, ``+ - * // %`` and
        integer literals."""
        k = _kind(e)
        if k == "IntImm" and not _is_float(_dtype(e)) and _dtype(e) != "bool":
            return _num(int(e.value), "int64")
        if k == "Var":
            return self.var(e)
        if k == "Sub" and _is_zero(e.a):
            return A.Unary("-", self.index(e.b))  # how leir.bridge.lower writes -x
        op = _INDEX_OPS.get(k)
        if op is not None:
            return A.Binary(op, self.index(e.a), self.index(e.b))
        if k == "TensorLoad":
            self.fail(f"a buffer read ({e.source.name}) in an index is not expressible in LEIR")
        if k == "Let":
            self.r.env[e.var] = self.index(e.value)
            return self.index(e.body)
        self.fail(f"{e} is not an index LEIR can write (loop variables, + - * // % and integers)")

    def var(self, e) -> A.Expr:
        if e in self.r.env:
            return self.r.env[e]
        from tvm.tirx import is_buffer_var

        if is_buffer_var(e):
            self.fail(f"buffer {e.name} is used as a value")
        self.fail(f"variable {e.name} is not a loop variable or block iterator (a scalar parameter?)")

    # ------------------------------------------------------------ values

    def value(self, e, ctx: str) -> A.Expr:
        """``e`` computed in the context dtype ``ctx`` (TVM dtype string)."""
        if _is_index(e):
            return self.index(e)
        k = _kind(e)
        if k in _ARITHMETIC and _dtype(e) != ctx and not _is_hint(e):
            self.fail(f"{e} computes in {_dtype(e)} where LEIR computes in {ctx}")
        method = getattr(self, "x_" + k, None)
        if method is None:
            self.fail(f"{k} expressions are not expressible in LEIR: {e}")
        return method(e, ctx)

    def x_IntImm(self, e, ctx: str) -> A.Expr:
        return self.literal(int(e.value), _dtype(e), ctx)

    def x_FloatImm(self, e, ctx: str) -> A.Expr:
        return self.literal(float(e.value), _dtype(e), ctx)

    def literal(self, value, dtype: str, ctx: str) -> A.Expr:
        if dtype == "bool" or ctx == "bool":
            if dtype != ctx and value not in (0, 1):
                self.fail(f"constant {value} used as a boolean")
            return _num(int(bool(value)), "int64")
        exact = _round(value, dtype)
        node = _num(value if dtype == ctx else exact, ctx)
        if _round(_literal_value(node), ctx) != _round(exact, ctx) or (dtype != ctx and _round(exact, ctx) != exact):
            self.fail(f"constant {value} of type {dtype} is not exactly representable in {ctx}")
        return node

    def x_Var(self, e, ctx: str) -> A.Expr:
        return self.var(e)

    def x_TensorLoad(self, e, ctx: str) -> A.Expr:
        # A read of another dtype converts to the context, as TVM's Cast of
        # the load does; callers only pass such loads under a cast.
        t = self.r.tensor(e.source)
        if len(e.indices) != len(t.shape):
            self.fail(f"read of {t.name} uses {len(e.indices)} indices for a rank-{len(t.shape)} buffer")
        indices = tuple(self.index(i) for i in e.indices)
        return A.Access(t.name, indices if t.shape else None)

    def arith(op):
        def convert(self, e, ctx: str) -> A.Expr:
            return A.Binary(op, self.value(e.a, ctx), self.value(e.b, ctx))

        return convert

    x_Add = arith("+")
    x_Mul = arith("*")
    x_FloorDiv = arith("//")
    x_FloorMod = arith("%")
    # LEIR's / truncates for integers, as TVM's Div does.
    x_Div = arith("/")
    del arith

    def x_Sub(self, e, ctx: str) -> A.Expr:
        if _is_zero(e.a):
            return A.Unary("-", self.value(e.b, ctx))  # how leir.bridge.lower writes -x
        if _is_float(ctx):
            # a - floor(a/b)*b is how leir.bridge.lower writes a float a % b.
            m = e.b
            if _kind(m) == "Mul" and _is_call(m.a, "floor") and _kind(m.a.args[0]) == "Div":
                div = m.a.args[0]
                if _same(div.a, e.a) and _same(div.b, m.b):
                    return A.Binary("%", self.value(e.a, ctx), self.value(m.b, ctx))
        return A.Binary("-", self.value(e.a, ctx), self.value(e.b, ctx))

    def x_Mod(self, e, ctx: str) -> A.Expr:
        self.fail(f"{e} is a truncating modulo; LEIR's % is floor modulo")

    def x_Min(self, e, ctx: str) -> A.Expr:
        return A.Call("min", (self.value(e.a, ctx), self.value(e.b, ctx)))

    def x_Max(self, e, ctx: str) -> A.Expr:
        return A.Call("max", (self.value(e.a, ctx), self.value(e.b, ctx)))

    def compare(op):
        def convert(self, e, ctx: str) -> A.Expr:
            if ctx == "bool":
                # A bool context has no numbers: LEIR compares in the dtype
                # of the first tensor the comparison reads (f64 if none).
                first = next((n for n in _exprs(e) if _kind(n) == "TensorLoad"), None)
                ctx = str(first.source.dtype) if first is not None else "float64"
            return A.Binary(op, self.operand(e.a, ctx), self.operand(e.b, ctx))

        return convert

    x_EQ = compare("==")
    x_NE = compare("!=")
    x_LT = compare("<")
    x_LE = compare("<=")
    x_GT = compare(">")
    x_GE = compare(">=")
    del compare

    def operand(self, e, ctx: str) -> A.Expr:
        """An operand of a comparison. TVM compares in the operands' dtype,
        LEIR in the context: the same when the conversion is exact."""
        d = _dtype(e)
        if d == ctx or _is_index(e):
            return self.value(e, ctx)
        if not _exact_conversion(d, ctx):
            self.fail(f"{e} is compared in {d}, which LEIR would compare in {ctx}")
        if _kind(e) in ("TensorLoad", "IntImm", "FloatImm", "Cast"):
            return self.value(e, ctx) if _kind(e) != "Cast" else self.x_Cast(e, ctx)
        return A.Call(_leir_dtype(d, self), (self.value(e, d),))

    def x_And(self, e, ctx: str) -> A.Expr:
        return A.Binary("&", self.value(e.a, ctx), self.value(e.b, ctx))

    def x_Or(self, e, ctx: str) -> A.Expr:
        return A.Binary("|", self.value(e.a, ctx), self.value(e.b, ctx))

    def x_Not(self, e, ctx: str) -> A.Expr:
        return A.Unary("!", self.value(e.a, ctx))

    def x_Select(self, e, ctx: str) -> A.Expr:
        c, t, f = e.condition, e.true_value, e.false_value
        # x >= 0 ? x : 0 - x is how TVM writes an integer abs.
        if (_kind(c) == "GE" and _is_zero(c.b) and _same(c.a, t) and _kind(f) == "Sub" and _is_zero(f.a)
                and _same(f.b, t)):
            return A.Call("abs", (self.value(t, ctx),))
        return A.Call("if_then_else", (self.value(e.condition, ctx), self.value(e.true_value, ctx),
                                       self.value(e.false_value, ctx)))

    def x_Cast(self, e, ctx: str) -> A.Expr:
        d = _dtype(e)
        child = e.value
        inner = _dtype(child)
        if _kind(child) == "TensorLoad" and d == ctx and ctx != "bool":
            # A read converts to the context by itself: ``X_{i}``, not
            # ``f32(X_{i})``, as a person writes it (and as it lowers).
            return self.value(child, d)
        if _kind(child) in ("TensorLoad", "IntImm", "FloatImm", "Var") or _is_index(child) or inner == "bool" or inner == d:
            # Converting a read, a literal, an index or a condition: LEIR's
            # d(x) reads x in d.
            node = A.Call(_leir_dtype(d, self), (self.value(child, d),))
        else:
            # The operand computes in its own dtype, then converts.
            node = self.value(child, inner)
            if not (isinstance(node, A.Call) and node.func == _leir_dtype(inner, self)):
                node = A.Call(_leir_dtype(inner, self), (node,))
            if d != ctx:
                node = A.Call(_leir_dtype(d, self), (node,))
        if d != ctx and not _exact_conversion(d, ctx) and ctx != "bool":
            self.fail(f"{e} converts to {d}, which LEIR would convert on to {ctx}")
        return node

    def x_Let(self, e, ctx: str) -> A.Expr:
        # A let expression is pure: substituting its value is exact.
        self.r.env[e.var] = self.value(e.value, _dtype(e.value))
        return self.value(e.body, ctx)

    def x_Call(self, e, ctx: str) -> A.Expr:
        op = str(e.op.name).rsplit(".", 1)[-1]
        args = list(e.args)
        if op == "likely" and len(args) == 1:
            return self.value(args[0], ctx)  # a hint, not a value change
        if op == "floor" and _is_float(ctx) and _kind(args[0]) == "Div":
            # floor(a/b) is how leir.bridge.lower writes a float a // b.
            div = args[0]
            return A.Binary("//", self.value(div.a, ctx), self.value(div.b, ctx))
        func = _FUNCTION.get(op)
        if func is None:
            self.fail(f"T.{op} has no LEIR counterpart")
        return A.Call(func, tuple(self.value(a, ctx) for a in args))


_INDEX_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%"}
#: Expression kinds that compute a value in their own dtype.
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "Select", "Call"})


def _is_zero(e) -> bool:
    return _kind(e) in ("IntImm", "FloatImm") and e.value == 0 and _dtype(e) != "bool"


def _is_call(e, name: str) -> bool:
    return _kind(e) == "Call" and str(e.op.name).rsplit(".", 1)[-1] == name


def _same(a, b) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def _is_hint(e) -> bool:
    return _kind(e) == "Call" and str(e.op.name).endswith(".likely")


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _is_index(e) -> bool:
    """Integer arithmetic over loop variables and integer constants, which
    LEIR evaluates exactly in integers whatever the context."""
    k = _kind(e)
    if k in ("IntImm", "Var"):
        return _dtype(e).startswith(("int", "uint"))
    if k in _INDEX_OPS:
        return _is_index(e.a) and _is_index(e.b)
    return False


def _leir_dtype(dtype: str, conv: _Expr) -> str:
    if dtype not in _LEIR_DTYPE:
        conv.fail(f"dtype {dtype} has no LEIR name")
    return _LEIR_DTYPE[dtype]


def _bits(dtype: str) -> int:
    digits = re.search(r"\d+", dtype)
    return int(digits.group()) if digits else 1


#: Significand bits (with the implicit one) of each float dtype.
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53, "float8_e4m3fn": 4, "float8_e5m2": 3}


def _exact_conversion(src: str, dst: str) -> bool:
    """Whether every ``src`` value converts to ``dst`` exactly and in order
    (so comparing after conversion gives the same answer)."""
    if src == dst or src == "bool":
        return True
    if _is_float(src):
        if not _is_float(dst):
            return False
        if src.startswith("float8") and dst in ("float16", "float32", "float64"):
            return True
        return _MANTISSA[src] <= _MANTISSA[dst] and _bits(src) < _bits(dst)
    signed = src.startswith("int")
    if _is_float(dst):
        return _bits(src) - (1 if signed else 0) <= _MANTISSA[dst]
    if dst == "bool":
        return False
    dst_signed = dst.startswith("int")
    if signed and not dst_signed:
        return False
    return _bits(src) + (1 if dst_signed and not signed else 0) <= _bits(dst)


def _round(value, dtype: str):
    """``value`` as stored in ``dtype``."""
    if _is_float(dtype):
        from leir.inputs import numpy_dtype

        import numpy as np

        return float(np.asarray(value, dtype=numpy_dtype(_LEIR_DTYPE[dtype])).astype(np.float64))
    return int(value)


def _literal_value(node: A.Expr):
    if isinstance(node, A.Unary):
        return -_literal_value(node.operand)
    return node.value


def _exprs(e):
    """Every sub-expression of a TIR expression."""
    yield e
    for attr in ("a", "b", "value", "condition", "true_value", "false_value", "body"):
        child = getattr(e, attr, None)
        if child is not None and _kind(e) not in ("IntImm", "FloatImm"):
            yield from _exprs(child)
    for name in ("args", "indices"):
        for child in getattr(e, name, None) or ():
            yield from _exprs(child)


def _statements(s):
    """Every statement under ``s`` (blocks and their inits included)."""
    if s is None:
        return
    yield s
    k = _kind(s)
    if k == "SeqStmt":
        for sub in s.seq:
            yield from _statements(sub)
    elif k == "SBlockRealize":
        yield from _statements(s.block)
    elif k == "SBlock":
        yield from _statements(s.init)
        yield from _statements(s.body)
    elif k == "IfThenElse":
        yield from _statements(s.then_case)
        yield from _statements(s.else_case)
    else:
        body = getattr(s, "body", None)
        if body is not None and k != "Evaluate":
            yield from _statements(body)


def _to_nest(node: _LoopNode) -> A.Nest | None:
    """A loop chain (each loop holding only the next) becomes one nest."""
    loops = [node.loop]
    items = node.items
    while len(items) == 1 and isinstance(items[0], _LoopNode):
        loops.append(items[0].loop)
        items = items[0].items
    body = []
    for item in items:
        if isinstance(item, _LoopNode):
            nest = _to_nest(item)
            if nest is not None:
                body.append(nest)
        else:
            body.append(item)
    if not body:
        return None  # a loop that does nothing
    return A.Nest(tuple(loops), tuple(body))

"""TensorIR -> LEIR: raise a TVM ``PrimFunc`` (written by hand, printed by
TVM, or the result of schedule primitives) back to a LEIR ``Program``.

Every block becomes one equation whose indices are over loop variables (the
block's iteration-variable bindings are substituted in), every loop a LEIR
loop of the same kind, and the statement order is kept. Buffers become
declarations: a parameter that is written is ``out``, one only read is
``in``, an allocated buffer is ``tmp`` in its storage scope.

A block's ``T.init`` becomes LEIR's implied initial value when that is
exactly what it means (identity of the combiner, first write of the tensor,
init firing once per element at the first reduction iteration). Otherwise
the init becomes its own equation: before the reduction loops when they are
the innermost loops around the block (what ``decompose_reduction`` writes),
else guarded by ``where`` to the iterations where TVM runs it.

What LEIR cannot say raises ``RaiseError`` naming the construct; the raiser
never returns a program that means something else than the function.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

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

_DATA_PAR, _COMM_REDUCE = 0, 2  # tvm IterVar types


class RaiseError(LeirError):
    """The function uses something LEIR cannot express."""


def raise_func(func) -> A.Program:
    """The LEIR program that computes what ``func`` (a ``tvm.tir.PrimFunc``)
    computes. Raises ``RaiseError`` for constructs LEIR cannot express."""
    return _Raiser(func).run()


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
        elif dtype in ("float32", "float16"):
            # The shortest text that rounds to the same value in the
            # narrow type, so that ``1e-05`` stays ``1e-05``.
            import numpy as np

            text = str(np.float32(magnitude) if dtype == "float32" else np.float16(magnitude))
        else:
            text = repr(magnitude)
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


def _identity(combiner: str, dtype: str) -> int | float:
    """The combiner's identity, which LEIR implies as the initial value."""
    if dtype.startswith(("int", "uint")):
        bits = int(re.sub(r"\D", "", dtype))
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.startswith("int") else (0, (1 << bits) - 1)
        return {"sum": 0, "prod": 1, "max": lo, "min": hi}[combiner]
    return {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}[combiner]


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


class _Raiser:
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
        self.guard: list[A.Expr] = []  # conjuncts guarding the current statements
        self.scope_names: list[str] = []  # enclosing loop variable names

    # -------------------------------------------------------------- driver

    def run(self) -> A.Program:
        body = self.func.body
        self.thread_names = self.bound_threads(body)
        self.declare_params()
        self.collect(body)
        if _kind(body) == "SBlockRealize" and not body.block.iter_vars:
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
        return A.Program(decls, tuple(units))

    # -------------------------------------------------------- declarations

    def bound_threads(self, body) -> set[str]:
        """LEIR names of the thread axes loops are bound to."""
        names = set()
        for s in _statements(body):
            if _kind(s) == "For" and int(s.kind) == 4:
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
        kind = int(s.kind)
        extent = _int(s.extent, f"the extent of loop {s.loop_var.name}")
        start = _int(s.min, f"the start of loop {s.loop_var.name}")
        if s.step is not None and not (_kind(s.step) == "IntImm" and int(s.step.value) == 1):
            raise RaiseError(f"loop {s.loop_var.name} has step {s.step}; LEIR loops step by 1")
        taken = set(self.scope_names) | {t.name for t in self.tensors.values()}
        if kind == 4:
            name = _THREAD_NAME[str(s.thread_binding.thread_tag)]
            if name in self.scope_names:
                raise RaiseError(f"loop {s.loop_var.name} binds {s.thread_binding.thread_tag} inside a loop already bound to it")
            letter = "B"
        else:
            letter = {0: "L", 1: "P", 2: "V", 3: "U"}.get(kind)
            if letter is None:
                raise RaiseError(f"loop {s.loop_var.name} has a kind ({s.kind}) LEIR does not have")
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
        cond = self.condition(s.condition, "an if condition")
        for branch, guard in ((s.then_case, cond), (s.else_case, A.Unary("!", cond))):
            if branch is None:
                continue
            self.guard.append(guard)
            self.frames.append(_Frame(s, None, self.frames[-1].items))
            try:
                self.stmt(branch)
            finally:
                self.frames.pop()
                self.guard.pop()

    def stmt_Bind(self, s) -> None:
        if any(_kind(n) == "TensorLoad" for n in _exprs(s.value)):
            raise RaiseError(f"let {s.var.name} = {s.value} reads a buffer, so it cannot be inlined where it is used")
        self.env[s.var] = self.value(s.value, _dtype(s.value))
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
            self.guard.extend(_conjuncts(self.condition(pred, f"the predicate of block {block.name_hint!r}")))
        try:
            if block.init is not None:
                self.reduction(s)
            else:
                self.frames.append(_Frame(s, None, self.frames[-1].items))
                try:
                    self.stmt(block.body)
                finally:
                    self.frames.pop()
        finally:
            self.guard = saved_guard

    def stmt_BufferStore(self, s) -> None:
        self.emit(self.equation(s, allow_self_read=False))

    # ---------------------------------------------------------- equations

    def store_target(self, s) -> A.Access:
        t = self.tensor(s.buffer)
        if len(s.indices) != len(t.shape):
            raise RaiseError(f"store to {t.name} uses {len(s.indices)} indices for a rank-{len(t.shape)} buffer")
        indices = tuple(self.index(i, f"an index of {t.name}") for i in s.indices)
        return A.Access(t.name, indices if t.shape else None)

    def equation(self, s, *, allow_self_read: bool, guard: list[A.Expr] | None = None) -> A.Equation:
        lhs = self.store_target(s)
        t = self.tensor(s.buffer)
        rhs = self.value(s.value, A.DTYPES[t.dtype])
        predicate = _conjoin(self.guard if guard is None else guard)
        reads = [n for n in A.walk(rhs) if isinstance(n, A.Access)]
        if predicate is not None:
            reads += [n for n in A.walk(predicate) if isinstance(n, A.Access)]
        for r in reads:
            if self.role(r.tensor) == "in" or r.tensor in self.written:
                continue
            if r.tensor == lhs.tensor and allow_self_read:
                continue
            what = "an output's incoming value" if self.role(r.tensor) == "out" else "memory no block has written"
            raise RaiseError(f"{lhs.tensor} = ... reads {r.tensor} before any block writes it ({what}); "
                             f"LEIR programs start from their inputs only")
        self.written.add(lhs.tensor)
        return A.Equation(lhs, rhs, predicate)

    def role(self, name: str) -> str:
        return next(t.role for t in self.tensors.values() if t.name == name)

    def reduction(self, realize) -> None:
        """A block with ``T.init``: one LEIR reduction when its implied init
        means the same, else an explicit init equation and an update."""
        from leir.semantics import reduction_shape

        block = realize.block
        name = block.name_hint
        init, body = block.init, block.body
        if _kind(body) != "BufferStore" or _kind(init) != "BufferStore":
            raise RaiseError(f"block {name!r} has T.init but its body or init is not a single buffer store")
        outer = list(self.guard)
        loops = [f.node.loop for f in self.frames if f.node is not None]
        update_eq = A.Equation(self.store_target(body), A.Num(0, "0"))  # lhs only, for the checks below
        init_lhs = self.store_target(init)
        t = self.tensor(body.buffer)
        dtype = A.DTYPES[t.dtype]
        init_value = init.value
        lhs = update_eq.lhs
        reduce_loops = [l for l in loops if l.var not in set().union(*(map(_vars, lhs.indices or ())))]
        reduce_vars = [(iv, self.env[iv.var]) for iv in block.iter_vars if int(iv.iter_type) == _COMM_REDUCE]
        for iv, _ in reduce_vars:
            for loop in loops:
                if loop.var in _vars(self.env[iv.var]) and loop.kind in ("P", "V", "B"):
                    raise RaiseError(f"block {name!r} reduces across {_KIND_NAME[loop.kind]} loop {loop.var} "
                                     f"(a cross-thread reduction); LEIR reductions run over serial loops")
        # TVM runs the init where every reduction iterator is at its minimum.
        fire = [A.Binary("==", b, _num(_int(iv.dom.min, "a block iterator's start"), "int32")) for iv, b in reduce_vars]
        if init_lhs != lhs:
            # Not the usual shape; keep TVM's meaning literally.
            self.emit(self.equation(init, allow_self_read=False, guard=outer + fire))
            self.emit(self.equation(body, allow_self_read=False))
            return

        # 1. Implied init: LEIR starts a reduction at the first iteration of
        #    the loops its written index does not use.
        rhs_probe = A.Equation(lhs, self.value(body.value, dtype))
        combiner, _ = reduction_shape(rhs_probe)
        is_identity = (combiner is not None and _kind(init_value) in ("IntImm", "FloatImm")
                       and float(init_value.value) == float(_identity(combiner, dtype)))
        if is_identity and lhs.tensor not in self.written and self.fires_first_only(reduce_loops, fire, outer):
            self.emit(self.equation(body, allow_self_read=True))
            return

        # 2. Explicit init before the reduction loops, when they are the
        #    innermost loops around the block, each holding only the next.
        hoist = self.hoist_frame(realize, reduce_loops)
        if hoist is not None and self.fires_first_only(reduce_loops, fire, outer):
            inner = {l.var for l in reduce_loops}
            init_guard = [c for c in outer if not (_vars(c) & inner)]
            hoist.items.append(self.equation(init, allow_self_read=False, guard=init_guard))
            self.emit(self.equation(body, allow_self_read=False))
            return

        # 3. Explicit init in place, guarded to where TVM runs it.
        self.emit(self.equation(init, allow_self_read=False, guard=outer + fire))
        self.emit(self.equation(body, allow_self_read=False))

    def hoist_frame(self, realize, reduce_loops: list[A.Loop]) -> _Frame | None:
        """The frame just outside the reduction loops when those loops are
        exactly the innermost loops around ``realize``, each with the next
        as its whole body; else None."""
        names = {l.var for l in reduce_loops}
        child = realize
        k = len(self.frames) - 1
        seen: set[str] = set()
        while k > 0 and self.frames[k].node is not None and self.frames[k].node.loop.var in names:
            frame = self.frames[k]
            if not frame.stmt.body.same_as(child):
                return None
            seen.add(frame.node.loop.var)
            child = frame.stmt
            k -= 1
        if seen != names:
            return None
        return self.frames[k]

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
        return _Expr(self, None, what, loads=False).convert(e)

    def condition(self, e, what: str) -> A.Expr:
        """A guard: a block predicate or an if condition."""
        return _Expr(self, None, what, loads=True).convert(e)

    def value(self, e, dtype: str) -> A.Expr:
        """The right-hand side of a store into a ``dtype`` buffer."""
        return _Expr(self, dtype, "a stored value").convert(e)


_KIND_NAME = {"P": "parallel", "V": "vectorized", "B": "thread-bound"}

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
    """One TIR expression -> LEIR. ``dtype`` is the stored buffer's dtype
    for values (LEIR computes an equation in its written tensor's dtype, so
    arithmetic in another dtype is refused), None for indices and guards."""

    def __init__(self, raiser: _Raiser, dtype: str | None, what: str, loads: bool = True):
        self.r = raiser
        self.dtype = dtype
        self.what = what
        self.loads = loads

    def fail(self, message: str):
        raise RaiseError(f"{message} (in {self.what})")

    def convert(self, e) -> A.Expr:
        k = _kind(e)
        method = getattr(self, "x_" + k, None)
        if method is None:
            self.fail(f"{k} expressions are not expressible in LEIR: {e}")
        self.check_dtype(e, k)
        return method(e)

    def check_dtype(self, e, k: str) -> None:
        if self.dtype is None or k not in _ARITHMETIC:
            return
        d = _dtype(e)
        if d != self.dtype and d != "bool" and not _is_index_arith(e):
            self.fail(f"{e} computes in {d} inside an equation that writes {self.dtype}; "
                      f"LEIR computes each equation in its written tensor's dtype")

    def x_IntImm(self, e) -> A.Expr:
        if _dtype(e) == "bool":
            self.fail("a boolean constant has no LEIR literal")
        return _num(int(e.value), _dtype(e))

    def x_FloatImm(self, e) -> A.Expr:
        return _num(float(e.value), _dtype(e))

    def x_Var(self, e) -> A.Expr:
        if e in self.r.env:
            return self.r.env[e]
        from tvm.tirx import is_buffer_var

        if is_buffer_var(e):
            self.fail(f"buffer {e.name} is used as a value")
        self.fail(f"variable {e.name} is not a loop variable or block iterator (a scalar parameter or thread index?)")

    def x_TensorLoad(self, e) -> A.Expr:
        if not self.loads:
            self.fail(f"a buffer read ({e.source.name}) in an index is not expressible in LEIR")
        t = self.r.tensor(e.source)
        if len(e.indices) != len(t.shape):
            self.fail(f"read of {t.name} uses {len(e.indices)} indices for a rank-{len(t.shape)} buffer")
        inner = _Expr(self.r, None, f"an index of {t.name}", loads=False)
        indices = tuple(inner.convert(i) for i in e.indices)
        return A.Access(t.name, indices if t.shape else None)

    def binary(op):
        def convert(self, e) -> A.Expr:
            return A.Binary(op, self.convert(e.a), self.convert(e.b))

        return convert

    x_Add = binary("+")
    x_Sub = binary("-")
    x_Mul = binary("*")
    x_FloorDiv = binary("//")
    x_FloorMod = binary("%")
    x_EQ = binary("==")
    x_NE = binary("!=")
    x_LT = binary("<")
    x_LE = binary("<=")
    x_GT = binary(">")
    x_GE = binary(">=")
    x_And = binary("&")
    x_Or = binary("|")
    del binary

    def x_Div(self, e) -> A.Expr:
        if not _dtype(e).startswith(("float", "bfloat")):
            self.fail(f"{e} truncates an integer division; LEIR's // rounds down (write T.floordiv)")
        return A.Binary("/", self.convert(e.a), self.convert(e.b))

    def x_Mod(self, e) -> A.Expr:
        self.fail(f"{e} is a truncating modulo; LEIR's % is floor modulo (write T.floormod)")

    def x_Min(self, e) -> A.Expr:
        return A.Call("min", (self.convert(e.a), self.convert(e.b)))

    def x_Max(self, e) -> A.Expr:
        return A.Call("max", (self.convert(e.a), self.convert(e.b)))

    def x_Not(self, e) -> A.Expr:
        return A.Unary("!", self.convert(e.a))

    def x_Select(self, e) -> A.Expr:
        return A.Call("if_then_else", (self.convert(e.condition), self.convert(e.true_value), self.convert(e.false_value)))

    def x_Cast(self, e) -> A.Expr:
        d = _dtype(e)
        if d not in _LEIR_DTYPE:
            self.fail(f"a cast to {d}, which LEIR has no name for")
        return A.Call(_LEIR_DTYPE[d], (self.convert(e.value),))

    def x_Let(self, e) -> A.Expr:
        # A let expression is pure: substituting its value is exact.
        self.r.env[e.var] = self.convert(e.value)
        return self.convert(e.body)

    def x_Call(self, e) -> A.Expr:
        op = str(e.op.name).rsplit(".", 1)[-1]
        args = list(e.args)
        if op == "likely" and len(args) == 1:
            return self.convert(args[0])  # a hint, not a value change
        func = _FUNCTION.get(op)
        if func is None:
            self.fail(f"T.{op} has no LEIR counterpart")
        return A.Call(func, tuple(self.convert(a) for a in args))


#: Expression kinds that compute a value in their own dtype.
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Min", "Max", "Select", "Call"})


def _is_index_arith(e) -> bool:
    """Integer arithmetic over loop variables and constants only (exact in
    any dtype wide enough, as LEIR treats loop variables)."""
    k = _kind(e)
    if k in ("IntImm", "Var"):
        return not str(_dtype(e)).startswith(("float", "bfloat"))
    if k in ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Min", "Max"):
        return _is_index_arith(e.a) and _is_index_arith(e.b)
    return False


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

"""Semantic analysis: the tensor table (declared or inferred) and the
meaning of every equation (plain write, reduction with implied init, or
update of an earlier value), with the checks that need them.

``analyze`` never raises on a parsed program; what is wrong becomes a
diagnostic at the offending node, with related locations where a second
place explains the first.

Checks, by code (errors unless marked as warnings):

- names and scopes: ``duplicate-declaration``, ``name-clash``,
  ``bad-scope``, ``duplicate-loop-var``, ``loop-var-out-of-scope``,
  ``unknown-loop-var``, ``unused-tensor`` (warning);
- types: ``dtype-conflict``, ``scope-conflict``, ``rank-conflict``
  (a tensor with neither declaration nor superscript is f32 in global
  memory: the default that keeps files short);
- roles and order: ``write-to-input``, ``never-written``,
  ``read-before-write``, ``reduction-init``, ``repeated-write`` (warning);
- indices: ``index-out-of-bounds``, ``negative-index``,
  ``shape-not-inferable``;
- parallel loops: ``race``, ``vectorized-reduction``, ``possible-race``
  (warning), ``vector-not-innermost`` (warning);
- GPU threads: ``bad-thread-axis``, ``thread-extent-mismatch``,
  ``thread-extent-limit``, ``threads-per-block``, ``unbound-on-gpu``
  (warning).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leir import affine
from leir import ast as A
from leir.ast import Span
from leir.cancel import checkpoint
from leir.limits import MAX_ELEMENTS, MAX_ITERATIONS, power_text
from leir.diagnostics import Diagnostic, Related, error, warning
from leir.printer import access_text

#: Initial value implied for each reduction combiner.
COMBINER_INIT = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}

#: CUDA's launch limits (compute capability 3.0 and later): threads per
#: block, and the largest extent of each thread and block axis.
MAX_THREADS_PER_BLOCK = 1024
THREAD_AXIS_LIMITS = {
    "tx": 1024,
    "ty": 1024,
    "tz": 64,
    "bx": 2**31 - 1,
    "by": 65535,
    "bz": 65535,
}
_THREAD_IDX = ("tx", "ty", "tz")

#: Iteration points the enumeration-based checks may visit in one analysis,
#: over all equations: two full spaces of ``affine.MAX_POINTS``, about 30 ms.
#: Keeps a pathological document within the editor's budget; the common
#: cases are decided without enumerating.
ENUMERATION_BUDGET = 2 * affine.MAX_POINTS

_PARALLEL_KINDS = frozenset({"P", "V", "B"})
_NO_SPAN = Span(0, 0)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # a key of ast.DTYPES
    shape: tuple[int, ...]
    scope: str  # a key of ast.SCOPES
    role: str  # "in" | "out" | "tmp"
    declared: bool
    #: Where the tensor is declared, or first accessed when it is inferred.
    span: Span | None = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def as_decl(self) -> A.Decl:
        return A.Decl(self.role, self.name, self.dtype, self.shape, self.scope)


@dataclass(frozen=True)
class EquationInfo:
    site: A.EquationSite
    #: "assign": writes a value computed from other tensors;
    #: "reduce": first write of the tensor, accumulating with an implied init;
    #: "update": reads the element it writes, which an earlier equation wrote.
    kind: str
    #: "sum" | "prod" | "max" | "min" when the right-hand side has a
    #: reduction shape (``C = C + e``...), else None.
    combiner: str | None
    #: The ``e`` of a reduction shape: what is combined into the element.
    operand: A.Expr | None
    #: Enclosing loop variables that index the written element.
    spatial: tuple[str, ...]
    #: Enclosing loop variables that do not (reduction axes for reduce/update).
    reduce_axes: tuple[str, ...]
    #: Position in program order.
    index: int

    @property
    def equation(self) -> A.Equation:
        return self.site.equation

    @property
    def loops(self) -> tuple[A.Loop, ...]:
        return self.site.loops

    @property
    def init(self) -> float | None:
        return COMBINER_INIT[self.combiner] if self.kind == "reduce" else None

    @property
    def iterations(self) -> int:
        """How many times the equation runs: the product of its loops' extents."""
        n = 1
        for loop in self.loops:
            n *= loop.extent
        return n


@dataclass
class Analysis:
    program: A.Program
    tensors: dict[str, TensorInfo]
    equations: list[EquationInfo]
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    def inputs(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "in"]

    def outputs(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "out"]

    def temporaries(self) -> list[TensorInfo]:
        return [t for t in self.tensors.values() if t.role == "tmp"]

    def complete_program(self) -> A.Program:
        """The program with a declaration for every tensor (declared ones
        first, in their order; then inferred inputs, outputs, temporaries)."""
        declared = list(self.program.decls)
        names = {d.name for d in declared}
        inferred = [t for t in self.tensors.values() if t.name not in names]
        order = {"in": 0, "out": 1, "tmp": 2}
        inferred.sort(key=lambda t: order[t.role])  # stable: first appearance within a role
        return A.Program(
            tuple(declared) + tuple(t.as_decl() for t in inferred),
            self.program.units,
            self.program.span,
            self.program.end_comments,
        )


def analyze(program: A.Program) -> Analysis:
    return _Analyzer(program).run()


def classify(program: A.Program) -> list[EquationInfo]:
    """The equations of ``program`` classified (assign, reduce, update;
    their loops and axes) without the checks ``analyze`` runs, for a program
    known to be valid (a loop rewrite of a checked one)."""
    return _Analyzer(program).classify()


def reduction_shape(eq: A.Equation) -> tuple[str | None, A.Expr | None]:
    """The combiner and combined operand if ``eq`` reads its own element in
    a reduction shape (``C = C + e``, ``C = e + C``, ``C = C - e``,
    ``C = C * e``, ``C = max(C, e)``...), else (None, None)."""
    lhs, rhs = eq.lhs, eq.rhs

    def is_self(e: A.Expr) -> bool:
        return isinstance(e, A.Access) and e.tensor == lhs.tensor and e.indices == lhs.indices

    def reads_self(e: A.Expr) -> bool:
        return any(a.tensor == lhs.tensor for a in _accesses(e))

    if isinstance(rhs, A.Binary) and rhs.op in ("+", "*", "-"):
        combiner = {"+": "sum", "*": "prod", "-": "sum"}[rhs.op]
        if is_self(rhs.lhs) and not reads_self(rhs.rhs):
            operand = rhs.rhs if rhs.op != "-" else A.Unary("-", rhs.rhs)
            return combiner, operand
        if rhs.op != "-" and is_self(rhs.rhs) and not reads_self(rhs.lhs):
            return combiner, rhs.lhs
    if isinstance(rhs, A.Call) and rhs.func in ("max", "min") and len(rhs.args) == 2:
        a, b = rhs.args
        if is_self(a) and not reads_self(b):
            return rhs.func, b
        if is_self(b) and not reads_self(a):
            return rhs.func, a
    return None, None


# --------------------------------------------------------------------- walks


def _scan(expr: A.Expr, accesses: list[A.Access], variables: list[A.Var]) -> None:
    """Append the accesses and loop-variable uses in ``expr``, in source
    order. Iterative: cheaper than ``ast.walk`` on the hot path."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        e = pop()
        t = type(e)
        if t is A.Access:
            accesses.append(e)
            if e.indices:
                stack.extend(reversed(e.indices))
        elif t is A.Var:
            variables.append(e)
        elif t is A.Binary:
            push(e.rhs)
            push(e.lhs)
        elif t is A.Unary:
            push(e.operand)
        elif t is A.Call:
            stack.extend(reversed(e.args))


def _accesses(expr: A.Expr) -> list[A.Access]:
    out: list[A.Access] = []
    _scan(expr, out, [])
    return out


@dataclass
class _Use:
    access: A.Access
    eq_index: int
    is_write: bool
    loops: tuple[A.Loop, ...]
    ranges: dict[str, affine.Range]  # of those loops
    #: The guard the access runs under (None for accesses in the guard
    #: itself, which are evaluated at every iteration).
    predicate: A.Expr | None


@dataclass
class _Facts:
    """What one equation reads and which loop variables it names."""

    site: A.EquationSite
    reads: list[A.Access]  # right-hand side, source order
    guard_reads: list[A.Access]
    variables: list[A.Var]  # everywhere in the equation
    ranges: dict[str, affine.Range]


class _Analyzer:
    def __init__(self, program: A.Program):
        self.program = program
        self.diags: list[Diagnostic] = []
        self.sites = list(A.equation_sites(program))
        self.all_loops: dict[str, A.Loop] = {}
        self.has_thread_loops = False
        self._collect_loops()
        self.facts = []
        for k, site in enumerate(self.sites):
            if not k & 255:
                checkpoint()
            self.facts.append(self._facts(site))
        self.enumeration_left = ENUMERATION_BUDGET
        self.warned_vector_loops: set[int] = set()
        self._forms: dict[int, affine.Affine | None] = {}
        self._vars: dict[int, frozenset[str]] = {}
        self._guard_holds: dict[int, bool | None] = {}

    def _collect_loops(self) -> None:
        """Every loop variable's first binding in program order."""
        stack = list(reversed(self.program.units))
        while stack:
            nest = stack.pop()
            for loop in nest.loops:
                self.all_loops.setdefault(loop.var, loop)
                if loop.kind == "B":
                    self.has_thread_loops = True
            stack.extend(item for item in reversed(nest.body) if isinstance(item, A.Nest))

    @staticmethod
    def _facts(site: A.EquationSite) -> _Facts:
        eq = site.equation
        reads: list[A.Access] = []
        guard_reads: list[A.Access] = []
        variables: list[A.Var] = []
        for index in eq.lhs.indices or ():
            _scan(index, [], variables)
        _scan(eq.rhs, reads, variables)
        if eq.predicate is not None:
            _scan(eq.predicate, guard_reads, variables)
        return _Facts(site, reads, guard_reads, variables, affine.loop_ranges(site.loops))

    def form(self, index: A.Expr) -> affine.Affine | None:
        """``affine.linearize``, once per index node."""
        key = id(index)
        if key not in self._forms:
            self._forms[key] = affine.linearize(index)
        return self._forms[key]

    def vars_of(self, expr: A.Expr) -> frozenset[str]:
        """``affine.index_vars``, once per node."""
        key = id(expr)
        names = self._vars.get(key)
        if names is None:
            names = self._vars[key] = affine.index_vars(expr)
        return names

    def report(self, d: Diagnostic) -> None:
        self.diags.append(d)

    def run(self) -> Analysis:
        decls = self.check_decls()
        self.check_loops()
        uses = self.collect_uses(decls)
        equations = self.classify()
        # Races first: when a pathological document exhausts the
        # enumeration budget, better an inferred shape larger than needed
        # than a race left undecided.
        self.check_races(equations)
        tensors = self.build_tensors(decls, uses)
        self.check_bounds(tensors, uses)
        self.check_init_order(tensors, equations)
        self.check_types(tensors, equations)
        self.check_guarded_reduction_inits(equations)
        self.check_reduction_injective(equations)
        # ``C += e`` is ``C = C + e`` with both accesses at one span: a check
        # of each access would otherwise report the same problem twice.
        self.diags = list(dict.fromkeys(self.diags))
        self.diags.sort(key=lambda d: (d.span.start, d.span.end))
        return Analysis(self.program, tensors, equations, self.diags)

    def check_reduction_injective(self, equations: list[EquationInfo]) -> None:
        """A reduction's implied init is stored once per iteration of the
        loops that index the written element (TVM's ``T.init``); if two of
        those iterations write one element, the second would reset it."""
        np = affine._numpy()
        for info in equations:
            eq = info.equation
            if info.kind != "reduce" or not eq.lhs.indices or not info.spatial:
                continue
            forms = [affine.linearize(i) for i in eq.lhs.indices]
            spatial = [l for l in info.loops if l.var in info.spatial]
            if _injective(forms, spatial):
                continue
            space = self.space(spatial)
            if space is None:
                continue  # too large to decide: no false error
            columns = []
            for index in eq.lhs.indices:
                values = space.evaluate(index)
                if values is None:
                    break
                columns.append(space.full(values).ravel())
            else:
                if _repeats(columns, np):
                    names = ", ".join(l.var for l in spatial)
                    self.report(error(eq.lhs.span or eq.span or _NO_SPAN, "reduction-not-injective",
                                      f"several iterations of loops {names} write the same element of {eq.lhs.tensor}, "
                                      f"and each would store the implied initial value: initialise {eq.lhs.tensor} "
                                      f"in an earlier equation"))

    def check_guarded_reduction_inits(self, equations: list[EquationInfo]) -> None:
        """A reduction's implied initial value is stored under its guard
        (TVM runs ``T.init`` only where ``T.where`` holds, at the first
        iteration of the reduction loops). An element whose guard is false
        there but true later would accumulate onto garbage."""
        np = affine._numpy()
        for info in equations:
            eq = info.equation
            if info.kind != "reduce" or eq.predicate is None:
                continue
            names = self.vars_of(eq.predicate)
            reduce_vars = [l for l in info.loops if l.var in info.reduce_axes and l.var in names]
            if not reduce_vars:
                continue  # the guard only chooses elements: each gets its init
            loops = [l for l in info.loops if l.var in names]
            space = self.space(loops)
            mask = space.evaluate(eq.predicate) if space is not None else None
            if mask is None:
                continue  # cannot decide: no false error
            holds = space.full(mask).astype(bool)
            at_start = np.ones(holds.shape, dtype=bool)
            for l in reduce_vars:
                at_start &= space.full(space.axes[l.var]) == l.start
            element_vars = [l.var for l in loops if l.var not in info.reduce_axes]
            keys = np.stack([space.full(space.axes[v]).ravel() for v in element_vars], axis=1) if element_vars \
                else np.zeros((holds.size, 1), dtype=np.int64)
            written = {tuple(k) for k in keys[holds.ravel()]}
            initialised = {tuple(k) for k in keys[(holds & at_start).ravel()]}
            missing = written - initialised
            if missing:
                example = dict(zip(element_vars, sorted(missing)[0]))
                starts = ", ".join(f"{l.var}={l.start}" for l in reduce_vars)
                where = ", ".join(f"{k}={v}" for k, v in example.items())
                self.report(error(eq.predicate.span or eq.span or _NO_SPAN, "guarded-reduction-init",
                                  f"the guard is false at the first reduction iteration ({starts})"
                                  f"{' for ' + where if where else ''} but true later, so {eq.lhs.tensor}'s implied "
                                  f"initial value would be skipped there (TVM stores it under the guard): "
                                  f"initialise {eq.lhs.tensor} in an earlier equation"))

    def check_types(self, tensors: dict[str, TensorInfo], equations: list[EquationInfo]) -> None:
        """What the typing rules (leir.value_types) give no meaning to, e.g.
        ``exp`` in an integer equation: reported here rather than when
        lowering refuses it."""
        from leir import value_types

        for info in equations:
            eq = info.equation
            t = tensors.get(eq.lhs.tensor)
            if t is None:
                continue
            parts = [eq.rhs] + ([eq.predicate] if eq.predicate is not None else [])
            for k, part in enumerate(parts):
                context = t.dtype
                if k == 1:  # the guard is a condition over the written dtype
                    found = value_types.type_errors(A.Call("if_then_else", (part, A.Num(0, "0"), A.Num(0, "0"))), context, tensors)
                else:
                    found = value_types.type_errors(part, context, tensors)
                for node, message in found:
                    self.report(error(getattr(node, "span", None) or eq.span or _NO_SPAN, "type-rule", message))

    # ------------------------------------------------------------ declarations

    def check_decls(self) -> dict[str, A.Decl]:
        decls: dict[str, A.Decl] = {}
        for d in self.program.decls:
            span = d.name_span or d.span or _NO_SPAN
            if d.name in decls:
                first = decls[d.name]
                self.report(error(span, "duplicate-declaration", f"tensor {d.name} is declared twice",
                                  Related(first.name_span or first.span or _NO_SPAN, "first declared here")))
                continue
            if d.name in self.all_loops:
                self.report(error(span, "name-clash", f"{d.name} names both a tensor and a loop variable",
                                  Related(self.all_loops[d.name].var_span or _NO_SPAN, "loop variable here")))
            if d.scope != "g" and d.role != "tmp":
                self.report(error(d.span or span, "bad-scope",
                                  f"{d.role} tensor {d.name} must live in global memory; only temporaries can be @{d.scope}"))
            decls[d.name] = d
        return decls

    # ------------------------------------------------------------------ loops

    def check_loops(self) -> None:
        """Shadowing, thread axes and launch limits, vector loop placement,
        and equations left on the host of a GPU program."""

        def visit(nest: A.Nest, outer: dict[str, A.Loop], kernel: list[A.Loop] | None, bound: bool,
                  vector_loops: list[A.Loop], iterations: int | None = 1) -> None:
            scope = dict(outer)
            vector_loops = list(vector_loops)
            for loop in nest.loops:
                span = loop.var_span or loop.span or _NO_SPAN
                if iterations is not None:  # None: reported further out
                    iterations *= max(loop.extent, 1)
                    if iterations > MAX_ITERATIONS:
                        self.report(error(loop.extent_span or span, "too-many-iterations",
                                          f"the loops down to {loop.var} run more than {power_text(MAX_ITERATIONS)} "
                                          f"iterations (their extents multiplied): more than TVM's and NumPy's "
                                          f"int64 counters hold"))
                        iterations = None
                if loop.var in scope:
                    self.report(error(span, "duplicate-loop-var",
                                      f"loop variable {loop.var} is already bound by an enclosing loop",
                                      Related(scope[loop.var].var_span or _NO_SPAN, "bound here")))
                if loop.kind == "B":
                    bound = True
                    if loop.var not in A.THREAD_AXES:
                        self.report(error(span, "bad-thread-axis",
                                          f"a B loop's variable names its thread axis: one of {', '.join(A.THREAD_AXES)}, not {loop.var}"))
                    else:
                        # The outermost thread-bound loop starts a kernel:
                        # TVM splits the host code around it.
                        if kernel is None:
                            kernel = []
                            kernels.append(kernel)
                        kernel.append(loop)
                if loop.kind not in ("V", "U") and loop.kind in A.LOOP_KINDS:
                    self.check_vector_contains(vector_loops, loop)
                if loop.kind == "V":
                    vector_loops.append(loop)
                scope[loop.var] = loop
            for item in nest.body:
                if isinstance(item, A.Nest):
                    visit(item, scope, kernel, bound, vector_loops, iterations)
                elif not bound and self.has_thread_loops:
                    self.report(warning(item.lhs.span or _NO_SPAN, "unbound-on-gpu",
                                        f"this equation is under no B loop, but the program binds loops to GPU threads: "
                                        f"TVM runs it on the host, which cannot write {item.lhs.tensor} in device memory; "
                                        f"bind one of its loops (B^{{n}}_{{bx=0}}) or move it into a bound nest"))

        kernels: list[list[A.Loop]] = []
        for unit in self.program.units:
            visit(unit, {}, None, False, [])
        for kernel in kernels:
            self.check_kernel(kernel)

    def check_vector_contains(self, vector_loops: list[A.Loop], inner: A.Loop) -> None:
        for vloop in vector_loops:
            if id(vloop) in self.warned_vector_loops:
                continue  # one warning per vector loop
            self.warned_vector_loops.add(id(vloop))
            self.report(warning(vloop.var_span or vloop.span or _NO_SPAN, "vector-not-innermost",
                                f"vectorized loop {vloop.var} contains {A.KIND_WORDS.get(inner.kind, inner.kind)} loop {inner.var}: "
                                f"TVM keeps {inner.var} as a loop and vectorizes its body across {vloop.var}, one vector "
                                f"operation per iteration (strided wherever {vloop.var} does not index the last dimension); "
                                f"make {vloop.var} the innermost loop",
                                Related(inner.span or _NO_SPAN, f"{A.KIND_WORDS.get(inner.kind, inner.kind)} loop {inner.var}")))

    def check_kernel(self, loops: list[A.Loop]) -> None:
        """One kernel's thread-bound loops: one extent per axis, and CUDA's
        launch limits."""
        first: dict[str, A.Loop] = {}
        extent: dict[str, int] = {}
        over_limit = False
        for loop in loops:
            axis = loop.var
            span = loop.extent_span or loop.span or _NO_SPAN
            tag = A.THREAD_AXES[axis]
            if axis in first and loop.extent != first[axis].extent:
                # Seen with TVM 0.27: the kernel is launched with the first
                # binding's extent and the other loop's body runs under it
                # unguarded, cutting it short or running past its end.
                launched = first[axis].extent
                self.report(error(span, "thread-extent-mismatch",
                                  f"{tag} has extent {loop.extent} here but {launched} earlier in the same kernel: TVM "
                                  f"launches the kernel with the first extent, so this loop would run {launched} "
                                  f"iterations instead of {loop.extent}",
                                  Related(first[axis].extent_span or _NO_SPAN, f"{tag} with extent {launched}")))
            first.setdefault(axis, loop)
            extent[axis] = max(extent.get(axis, 0), loop.extent)
            limit = THREAD_AXIS_LIMITS[axis]
            if loop.extent > limit:
                over_limit = True
                self.report(error(span, "thread-extent-limit",
                                  f"{tag} extent {loop.extent} exceeds CUDA's limit of {limit}"))
        threads = [first[a] for a in _THREAD_IDX if a in first]
        total = 1
        for axis in _THREAD_IDX:
            total *= extent.get(axis, 1)
        if total > MAX_THREADS_PER_BLOCK and not over_limit:
            last = threads[-1]
            sizes = " x ".join(f"{A.THREAD_AXES[l.var]} {extent[l.var]}" for l in threads)
            self.report(error(last.extent_span or last.span or _NO_SPAN, "threads-per-block",
                              f"{total} threads per block ({sizes}) exceed CUDA's limit of {MAX_THREADS_PER_BLOCK}",
                              *(Related(l.extent_span or _NO_SPAN, f"{A.THREAD_AXES[l.var]} extent {extent[l.var]}")
                                for l in threads[:-1])))

    # ------------------------------------------------------------------- uses

    def collect_uses(self, decls: dict[str, A.Decl]) -> dict[str, list[_Use]]:
        uses: dict[str, list[_Use]] = {}
        for k, facts in enumerate(self.facts):
            if not k & 63:
                checkpoint()
            site = facts.site
            eq = site.equation
            bound = facts.ranges
            parts = [(eq.lhs, True, eq.predicate)]
            parts += [(r, False, eq.predicate) for r in facts.reads]
            parts += [(r, False, None) for r in facts.guard_reads]
            for access, is_write, guard in parts:
                if access.indices is None and access.tensor in self.all_loops and access.tensor not in decls:
                    loop = self.all_loops[access.tensor]
                    self.report(error(access.span or _NO_SPAN, "loop-var-out-of-scope",
                                      f"loop variable {access.tensor} is used outside its loop",
                                      Related(loop.span or _NO_SPAN, "the loop is here")))
                    continue
                uses.setdefault(access.tensor, []).append(_Use(access, k, is_write, site.loops, bound, guard))
            for node in facts.variables:
                if node.name in bound:
                    continue
                span = node.span or _NO_SPAN
                if node.name in self.all_loops:
                    loop = self.all_loops[node.name]
                    self.report(error(span, "loop-var-out-of-scope",
                                      f"loop variable {node.name} is used outside its loop",
                                      Related(loop.span or _NO_SPAN, "the loop is here")))
                else:
                    self.report(error(span, "unknown-loop-var", f"unknown loop variable {node.name}"))
        return uses

    # ---------------------------------------------------------------- tensors

    def build_tensors(self, decls: dict[str, A.Decl], uses: dict[str, list[_Use]]) -> dict[str, TensorInfo]:
        tensors: dict[str, TensorInfo] = {}
        order = list(decls) + [n for n in uses if n not in decls]
        for name in order:
            decl = decls.get(name)
            tensor_uses = uses.get(name, [])
            if decl is not None and not tensor_uses:
                self.report(warning(decl.name_span or _NO_SPAN, "unused-tensor", f"tensor {name} is declared but never used"))
            dtype, scope = self.resolve_type(name, decl, tensor_uses)
            rank = self.resolve_rank(name, decl, tensor_uses)
            role = self.resolve_role(name, decl, tensor_uses)
            if decl is not None:
                shape = decl.shape
            else:
                shape = self.infer_shape(name, rank, tensor_uses)
            span = (decl.name_span if decl else None) or (tensor_uses[0].access.name_span if tensor_uses else None)
            info = tensors[name] = TensorInfo(name, dtype, shape, scope, role, decl is not None, span)
            if len(shape) > 1 and info.size > MAX_ELEMENTS:
                self.report(error(span or _NO_SPAN, "tensor-too-large",
                                  f"tensor {name} would have {_dims_text(shape)} elements, more than "
                                  f"{power_text(MAX_ELEMENTS)} (TVM's and NumPy's int64 offsets)"))
        return tensors

    def resolve_type(self, name: str, decl: A.Decl | None, uses: list[_Use]) -> tuple[str, str]:
        dtype = decl.dtype if decl else None
        scope = decl.scope if decl else None
        first_dtype: A.Access | None = None
        first_scope: A.Access | None = None
        for u in uses:
            a = u.access
            span = a.span or _NO_SPAN
            if a.dtype is not None:
                if dtype is None:
                    dtype, first_dtype = a.dtype, a
                elif a.dtype != dtype:
                    where = Related(decl.name_span or _NO_SPAN, f"declared {decl.dtype} here") if decl else Related(first_dtype.span or _NO_SPAN, f"{dtype} here")
                    self.report(error(span, "dtype-conflict", f"{name} is {dtype}, but this access says {a.dtype}", where))
            if a.scope is not None:
                if scope is None:
                    scope, first_scope = a.scope, a
                elif a.scope != scope:
                    where = Related(decl.name_span or _NO_SPAN, f"declared @{decl.scope} here") if decl else Related(first_scope.span or _NO_SPAN, f"@{scope} here")
                    self.report(error(span, "scope-conflict", f"{name} is in scope {scope}, but this access says {a.scope}", where))
        if dtype is None:
            dtype = "f32"  # the documented default
        if dtype not in A.DTYPES:
            dtype = "f32"  # the parser reported it
        if scope not in A.SCOPES:
            scope = "g"
        return dtype, scope

    def resolve_rank(self, name: str, decl: A.Decl | None, uses: list[_Use]) -> int:
        rank = len(decl.shape) if decl else None
        first: A.Access | None = None
        for u in uses:
            a = u.access
            if rank is None:
                rank, first = a.rank, a
            elif a.rank != rank:
                where = Related(decl.name_span or _NO_SPAN, f"declared with rank {rank} here") if decl else Related(first.span or _NO_SPAN, f"rank {rank} here")
                self.report(error(a.span or _NO_SPAN, "rank-conflict",
                                  f"{name} has {rank} dimension{'s' if rank != 1 else ''}, but this access uses {a.rank}", where))
        return rank or 0

    def resolve_role(self, name: str, decl: A.Decl | None, uses: list[_Use]) -> str:
        writes = [u for u in uses if u.is_write]
        if decl is not None:
            if decl.role == "in" and writes:
                self.report(error(writes[0].access.span or _NO_SPAN, "write-to-input",
                                  f"{name} is an input and cannot be written",
                                  Related(decl.name_span or _NO_SPAN, "declared as input here")))
            if decl.role in ("out", "tmp") and not writes and uses:
                self.report(error(decl.name_span or _NO_SPAN, "never-written",
                                  f"{decl.role} tensor {name} is never written"))
            return decl.role
        if not writes:
            return "in"
        first_write = min(u.eq_index for u in writes)
        writing_eqs = {u.eq_index for u in writes}
        for u in uses:
            if not u.is_write and u.eq_index > first_write and u.eq_index not in writing_eqs:
                return "tmp"
        return "out"

    def infer_shape(self, name: str, rank: int, uses: list[_Use]) -> tuple[int, ...]:
        extents = [1] * rank
        for u in uses:
            a = u.access
            if a.indices is None or len(a.indices) != rank:
                continue
            for d, index in enumerate(a.indices):
                if not self.vars_of(index) <= u.ranges.keys():
                    continue  # an unbound variable, reported already
                span = index.span or a.span or _NO_SPAN
                b, exact = self.exact_range(index, u)
                if not exact:
                    b = self.sound_range(index, u)
                    if b is None:
                        self.report(error(span, "shape-not-inferable",
                                          f"cannot infer dimension {d} of {name} from this index; declare {name} with its shape"))
                        continue
                elif b is None:
                    continue  # the guard never holds
                elif b[0] < 0:
                    self.report(error(span, "negative-index",
                                      f"index {d} of {name} can be {b[0]} here, below 0; declare {name} or change the index"))
                extents[d] = max(extents[d], b[1] + 1)
        return tuple(extents)

    def sound_range(self, index: A.Expr, use: _Use) -> affine.Range | None:
        """Bounds that hold every value ``index`` takes where ``use`` runs
        (possibly wider), or None when there are none. Cheap."""
        form = self.form(index)
        if form is None:
            return affine.bounds(index, use.ranges)
        if use.predicate is None:
            return form.bounds(use.ranges)
        return affine.guarded_bounds(form, use.ranges, use.predicate)

    def exact_range(self, index: A.Expr, use: _Use) -> tuple[affine.Range | None, bool]:
        """The smallest and largest value ``index`` takes where ``use`` runs
        (under its guard), as ``(range, True)``; ``(None, True)`` when the
        guard never holds; ``(None, False)`` when it cannot be known
        exactly (too many points to enumerate, or a guard that reads
        tensors)."""
        form = self.form(index)
        guard, certain = self.relevant_guard(use.predicate, self.vars_of(index), use.loops)
        if certain is None:
            return None, True
        if not certain:
            return None, False
        if form is not None and guard is None:
            return form.bounds(use.ranges), True
        names = self.vars_of(index) | (self.vars_of(guard) if guard is not None else frozenset())
        loops = [l for l in use.loops if l.var in names]
        values = self.enumerate_values(loops, index, guard)
        if values is None:
            return None, False
        if values.size == 0:
            return None, True
        return (int(values.min()), int(values.max())), True

    def enumerate_values(self, loops: list[A.Loop], index: A.Expr, guard: A.Expr | None):
        """The index's values at the points of ``loops`` where the guard
        holds (a flat array), or None when that cannot be enumerated."""
        space = self.space(loops)
        if space is None:
            return None
        values = space.evaluate(index)
        if values is None:
            return None
        values = space.full(values)
        if guard is not None:
            mask = space.evaluate(guard)
            if mask is None:
                return None
            values = values[space.full(mask).astype(bool)]
        return values

    def space(self, loops: list[A.Loop]) -> affine.Space | None:
        """An enumerable space over ``loops``, charged to the budget; None
        when it is too large or the budget is spent."""
        size = affine.Space.size_of(loops)
        if size > affine.MAX_POINTS or size > self.enumeration_left:
            return None
        if any(l.extent < 1 for l in loops):
            return None
        self.enumeration_left -= size
        return affine.Space(loops)

    # --------------------------------------------------------------- equations

    def classify(self) -> list[EquationInfo]:
        infos: list[EquationInfo] = []
        written: set[str] = set()
        for k, facts in enumerate(self.facts):
            if not k & 63:
                checkpoint()
            site = facts.site
            eq = site.equation
            lhs = eq.lhs
            self_reads = [r for r in facts.reads if r.tensor == lhs.tensor]
            combiner, operand = reduction_shape(eq) if self_reads else (None, None)
            first = lhs.tensor not in written
            if not self_reads:
                kind = "assign"
            elif first:
                if combiner is None:
                    bad = next((r for r in self_reads if r.indices != lhs.indices), self_reads[0])
                    self.report(error(bad.span or _NO_SPAN, "reduction-init",
                                      f"{lhs.tensor} is read before it is first written, so its initial value cannot be implied: "
                                      f"write a reduction as {lhs.tensor} = {lhs.tensor} + e (or *, max, min), "
                                      f"or initialise {lhs.tensor} in an earlier equation"))
                kind = "reduce"
            else:
                kind = "update"
            lhs_vars: set[str] = set()
            for index in lhs.indices or ():
                lhs_vars |= self.vars_of(index)
            spatial = tuple(l.var for l in site.loops if l.var in lhs_vars)
            rest = tuple(l.var for l in site.loops if l.var not in lhs_vars)
            guard_vars = self.vars_of(eq.predicate) if eq.predicate is not None else frozenset()
            # Parallel loops that repeat a write are races, reported apart.
            repeated = [l for l in site.loops if l.var in rest and l.var not in guard_vars
                        and l.kind not in _PARALLEL_KINDS and l.extent > 1]
            if kind == "assign":
                # A value read inside the loop (a running maximum, a per-row
                # temporary) is used at every iteration, not only the last.
                repeated = [l for l in repeated if not self.read_inside(l, lhs.tensor, k)]
            if kind == "assign" and repeated:
                loop = repeated[0]
                self.report(warning(lhs.span or _NO_SPAN, "repeated-write",
                                    f"{access_text(lhs)} is written on every iteration of loop {loop.var}, which its index does not use; "
                                    f"only the last iteration's value remains",
                                    Related(loop.span or _NO_SPAN, f"loop {loop.var}")))
            infos.append(EquationInfo(site, kind, combiner, operand, spatial, rest, k))
            written.add(lhs.tensor)
        return infos

    def read_inside(self, loop: A.Loop, tensor: str, writer: int) -> bool:
        """Whether an equation other than ``writer`` inside ``loop`` reads
        ``tensor``."""
        for k, facts in enumerate(self.facts):
            if k != writer and any(l is loop for l in facts.site.loops):
                if any(r.tensor == tensor for r in facts.reads + facts.guard_reads):
                    return True
        return False

    def check_init_order(self, tensors: dict[str, TensorInfo], equations: list[EquationInfo]) -> None:
        """A temporary or output read before any equation wrote it."""
        first_write: dict[str, int] = {}
        for info in equations:
            first_write.setdefault(info.equation.lhs.tensor, info.index)
        for info, facts in zip(equations, self.facts):
            eq = info.equation
            for node in facts.reads + facts.guard_reads:
                t = tensors.get(node.tensor)
                if t is None or t.role == "in":
                    continue
                if node.tensor == eq.lhs.tensor and info.kind in ("reduce", "update"):
                    continue
                fw = first_write.get(node.tensor)
                if fw is None or fw >= info.index:
                    self.report(error(node.span or _NO_SPAN, "read-before-write",
                                      f"{node.tensor} is read here before any equation writes it"))

    # ------------------------------------------------------------------ races

    def check_races(self, equations: list[EquationInfo]) -> None:
        """Two iterations of a P, V or B loop (same values of the loops
        outside it, any values of the loops inside) must never write the
        same element."""
        for info in equations:
            if not info.index & 63:
                checkpoint()
            loops = info.loops
            for k, loop in enumerate(loops):
                if loop.kind in _PARALLEL_KINDS and loop.extent > 1:
                    self.check_race(info, loop, loops[:k], loops[k + 1:])

    def check_race(self, info: EquationInfo, loop: A.Loop, outer: tuple[A.Loop, ...], inner: tuple[A.Loop, ...]) -> None:
        eq = info.equation
        lhs = eq.lhs
        indices = lhs.indices or ()
        forms = [self.form(i) for i in indices]
        free = affine.loop_ranges((loop,) + inner)
        if affine.separates([f for f in forms if f is not None], loop.var, free):
            return
        index_names = frozenset().union(*(self.vars_of(i) for i in indices)) if indices else frozenset()
        guard, certain = self.relevant_guard(eq.predicate, index_names | {loop.var}, info.loops)
        if certain is None:
            return  # the guard never holds: nothing is written
        if loop.var not in index_names and guard is None:
            # Iterations of the loop with the same inner values write the
            # same element.
            collision = ((loop.start, loop.start + 1), None)
        else:
            names = index_names | (self.vars_of(guard) if guard is not None else frozenset())
            # Loops inside vary freely; with affine indices and no guard,
            # loops outside cancel out, otherwise they are enumerated too.
            if guard is None and all(f is not None for f in forms):
                enumerated_outer: list[A.Loop] = []
            else:
                enumerated_outer = [l for l in outer if l.var in names]
            space_loops = enumerated_outer + [loop] + [l for l in inner if l.var in names]
            # Loops left out of the space sit at their first iteration, so
            # that the witness is an element the program really writes.
            first_iteration = {l.var: l.start for l in outer}
            collision = self.find_collision(space_loops, loop, enumerated_outer, indices, forms, guard, first_iteration)
        if collision == ():
            return
        if collision is None or not certain:
            self.report(warning(loop.var_span or loop.span or _NO_SPAN, "possible-race",
                                f"could not prove that different iterations of {A.KIND_WORDS.get(loop.kind, loop.kind)} loop {loop.var} "
                                f"write different elements of {lhs.tensor} (the index is not affine, the guard reads "
                                f"tensors, or there are too many iterations to enumerate); a race if they do",
                                Related(lhs.span or _NO_SPAN, "the write")))
            return
        self.report_race(info, loop, collision[0], collision[1])

    def relevant_guard(self, guard: A.Expr | None, names: frozenset[str],
                       loops: tuple[A.Loop, ...]) -> tuple[A.Expr | None, bool | None]:
        """The guard as far as a question about ``names`` is concerned:
        ``(guard, True)`` when it names one of them; otherwise it only says
        whether the equation runs at all: ``(None, True)`` if it holds
        somewhere, ``(None, None)`` if it never does, ``(None, False)`` if
        that is unknown."""
        if guard is None or self.vars_of(guard) & names:
            return guard, True
        holds = self.guard_holds_somewhere(guard, loops)
        return None, (None if holds is False else holds is True)

    def guard_holds_somewhere(self, guard: A.Expr, loops: tuple[A.Loop, ...]) -> bool | None:
        """Whether the guard holds at some iteration (None: unknown)."""
        key = id(guard)
        if key not in self._guard_holds:
            names = self.vars_of(guard)
            space = self.space([l for l in loops if l.var in names])
            mask = space.evaluate(guard) if space is not None else None
            self._guard_holds[key] = None if mask is None else bool(affine._numpy().any(mask))
        return self._guard_holds[key]

    def find_collision(self, loops: list[A.Loop], loop: A.Loop, outer: list[A.Loop], indices: tuple[A.Expr, ...],
                       forms: list[affine.Affine | None], guard: A.Expr | None, fixed: dict[str, int]):
        """Two values of ``loop`` that write the same element (with equal
        values of the ``outer`` loops), as ``((v1, v2), element)``; ``()``
        when there are none; None when the space cannot be enumerated.
        Affine indices may name loops outside the space: they take their
        ``fixed`` values."""
        space = self.space(loops)
        if space is None:
            return None
        np = affine._numpy()
        columns = []
        for index, form in zip(indices, forms):
            values = space.affine_values(form, fixed) if form is not None else space.evaluate(index)
            if values is None:
                return None
            columns.append(space.full(values))
        keys = columns + [space.full(space.axes[l.var]) for l in outer]
        var_values = space.full(space.axes[loop.var])
        if guard is not None:
            mask = space.evaluate(guard)
            if mask is None:
                return None
            mask = space.full(mask).astype(bool)
            keys = [c[mask] for c in keys]
            var_values = var_values[mask]
        if var_values.size < 2:
            return ()
        # Sort the points by (element, outer values, loop value): a race is
        # two neighbours with the same element and outer values but
        # different loop values.
        order = np.lexsort([var_values] + keys[::-1])
        same_key = np.ones(order.size - 1, dtype=bool)
        for column in keys:
            sorted_column = column[order]
            same_key &= sorted_column[1:] == sorted_column[:-1]
        sorted_var = var_values[order]
        hits = np.nonzero(same_key & (sorted_var[1:] != sorted_var[:-1]))[0]
        if hits.size == 0:
            return ()
        first = order[hits[0]]
        element = tuple(int(c[first]) for c in keys[: len(columns)])
        return (int(sorted_var[hits[0]]), int(sorted_var[hits[0] + 1])), element

    def report_race(self, info: EquationInfo, loop: A.Loop, values: tuple[int, int], element: tuple[int, ...] | None) -> None:
        lhs = info.equation.lhs
        span = loop.var_span or loop.span or _NO_SPAN
        target = f"element ({', '.join(map(str, element))}) of {lhs.tensor}" if element else access_text(lhs)
        a, b = values
        if loop.kind == "V" and loop.var in info.reduce_axes and info.kind in ("reduce", "update"):
            # Measured with TVM 0.27: the vectorized reduction builds and
            # silently returns a wrong sum.
            self.report(error(span, "vectorized-reduction",
                              f"vectorized loop {loop.var} is a reduction axis of {lhs.tensor}: all its lanes accumulate into "
                              f"{target} at once, which TVM cannot vectorize without rfactor; make {loop.var} serial "
                              f"or vectorize a spatial loop",
                              Related(lhs.span or _NO_SPAN, "the reduction")))
            return
        self.report(error(span, "race",
                          f"iterations {loop.var}={a} and {loop.var}={b} of {A.KIND_WORDS.get(loop.kind, loop.kind)} loop {loop.var} both write "
                          f"{target} (a race): make {loop.var} serial or index the write by it",
                          Related(lhs.span or _NO_SPAN, "the write")))

    # ----------------------------------------------------------------- bounds

    def check_bounds(self, tensors: dict[str, TensorInfo], uses: dict[str, list[_Use]]) -> None:
        """Every index of a declared tensor stays inside its shape where it
        runs (under its equation's guard). Reported only when the range is
        exact: an over-estimate is no evidence of an error."""
        for name, tensor_uses in uses.items():
            t = tensors.get(name)
            if t is None or not t.declared:
                continue  # inferred shapes hold every index by construction
            for u in tensor_uses:
                a = u.access
                if a.indices is None or len(a.indices) != len(t.shape):
                    continue
                for d, index in enumerate(a.indices):
                    if not self.vars_of(index) <= u.ranges.keys():
                        continue  # an unbound variable, reported already
                    extent = t.shape[d]
                    b = self.sound_range(index, u)
                    if b is not None and 0 <= b[0] and b[1] < extent:
                        continue
                    b, exact = self.exact_range(index, u)
                    if b is None or not exact or (0 <= b[0] and b[1] < extent):
                        continue
                    lo, hi = b
                    guarded = " where the guard holds" if u.predicate is not None else ""
                    self.report(error(index.span or a.span or _NO_SPAN, "index-out-of-bounds",
                                      f"index {d} of {name} ranges over {lo}..{hi}{guarded}, outside 0..{extent - 1} "
                                      f"(dimension {d} of {name} has extent {extent})"))


def _dims_text(shape: tuple[int, ...]) -> str:
    return " x ".join(map(str, shape)) if sum(len(str(d)) for d in shape) < 200 else f"{len(shape)} dimensions' worth of"

def _injective(forms: list, loops: list[A.Loop]) -> bool:
    """Whether the affine ``forms`` (one per index) map the iterations of
    ``loops`` to distinct index tuples, proven without enumerating: each
    loop variable appears in one index only, and within an index the
    variables are mixed-radix digits (sorted by coefficient, each
    coefficient exceeds the largest value the smaller terms reach), as after
    a split (``io*8 + ii`` with ``ii`` in 0..7). False when not proven."""
    extents = {l.var: l.extent for l in loops}
    seen: set[str] = set()
    for form in forms:
        if form is None:
            return False
        reach = 0
        for var, c in sorted(form.coeffs, key=lambda vc: abs(vc[1])):
            if var not in extents or var in seen or abs(c) <= reach:
                return False
            seen.add(var)
            reach += abs(c) * (extents[var] - 1)
    return seen == set(extents)


def _repeats(columns: list, np) -> bool:
    """Whether two rows of the index columns (one per index, one row per
    iteration) are equal: the columns flattened into one integer per row
    (mixed radix over each column's range), then sorted."""
    if not columns or columns[0].size < 2:
        return False
    flat = np.zeros(columns[0].shape, dtype=np.int64)
    radix = 1
    for col in columns:
        lo, hi = int(col.min()), int(col.max())
        width = hi - lo + 1
        if radix * width >= 1 << 62:  # no room to flatten: compare rows
            return len(np.unique(np.stack(columns, axis=1), axis=0)) < columns[0].size
        flat += (col - lo) * radix
        radix *= width
    if radix < columns[0].size:
        return True  # more iterations than elements they can reach
    flat.sort()
    return bool((flat[1:] == flat[:-1]).any())

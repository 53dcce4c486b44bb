"""Semantic analysis: the tensor table (declared or inferred) and the
meaning of every equation (plain write, reduction with implied init, or
update of an earlier value), with the checks that need them.

``analyze`` never raises on a parsed program; what is wrong becomes a
diagnostic at the offending node, with related locations where a second
place explains the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leir import affine
from leir import ast as A
from leir.ast import Span
from leir.diagnostics import Diagnostic, Related, error, warning

#: Initial value implied for each reduction combiner.
COMBINER_INIT = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


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


@dataclass
class _Use:
    access: A.Access
    eq_index: int
    is_write: bool
    loops: tuple[A.Loop, ...]
    predicate: A.Expr | None


def analyze(program: A.Program) -> Analysis:
    return _Analyzer(program).run()


class _Analyzer:
    def __init__(self, program: A.Program):
        self.program = program
        self.diags: list[Diagnostic] = []
        self.sites = list(A.equation_sites(program))
        self.all_loops: dict[str, A.Loop] = {}
        for node in A.walk(program):
            if isinstance(node, A.Loop):
                self.all_loops.setdefault(node.var, node)

    def report(self, d: Diagnostic) -> None:
        self.diags.append(d)

    def run(self) -> Analysis:
        decls = self.check_decls()
        self.check_loops()
        uses = self.collect_uses(decls)
        tensors = self.build_tensors(decls, uses)
        equations = self.classify(tensors)
        self.check_bounds(tensors, uses)
        self.check_init_order(tensors, equations)
        self.diags.sort(key=lambda d: (d.span.start, d.span.end))
        return Analysis(self.program, tensors, equations, self.diags)

    # ------------------------------------------------------------ declarations

    def check_decls(self) -> dict[str, A.Decl]:
        decls: dict[str, A.Decl] = {}
        for d in self.program.decls:
            span = d.name_span or d.span or Span(0, 0)
            if d.name in decls:
                first = decls[d.name]
                self.report(error(span, "duplicate-declaration", f"tensor {d.name} is declared twice",
                                  Related(first.name_span or first.span or Span(0, 0), "first declared here")))
                continue
            if d.name in self.all_loops:
                self.report(error(span, "name-clash", f"{d.name} names both a tensor and a loop variable",
                                  Related(self.all_loops[d.name].var_span or Span(0, 0), "loop variable here")))
            if d.scope != "g" and d.role != "tmp":
                self.report(error(d.span or span, "bad-scope",
                                  f"{d.role} tensor {d.name} must live in global memory; only temporaries can be @{d.scope}"))
            decls[d.name] = d
        return decls

    # ------------------------------------------------------------------ loops

    def check_loops(self) -> None:
        def visit(nest: A.Nest, outer: dict[str, A.Loop]) -> None:
            scope = dict(outer)
            for loop in nest.loops:
                span = loop.var_span or loop.span or Span(0, 0)
                if loop.var in scope:
                    self.report(error(span, "duplicate-loop-var",
                                      f"loop variable {loop.var} is already bound by an enclosing loop",
                                      Related(scope[loop.var].var_span or Span(0, 0), "bound here")))
                if loop.kind == "B" and loop.var not in A.THREAD_AXES:
                    self.report(error(span, "bad-thread-axis",
                                      f"a B loop's variable names its thread axis: one of {', '.join(A.THREAD_AXES)}, not {loop.var}"))
                scope[loop.var] = loop
            for item in nest.body:
                if isinstance(item, A.Nest):
                    visit(item, scope)

        for unit in self.program.units:
            visit(unit, {})

    # ------------------------------------------------------------------- uses

    def collect_uses(self, decls: dict[str, A.Decl]) -> dict[str, list[_Use]]:
        uses: dict[str, list[_Use]] = {}
        for k, site in enumerate(self.sites):
            eq = site.equation
            bound = {l.var for l in site.loops}
            parts = [(eq.lhs, True)]
            reads = [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
            if eq.predicate is not None:
                reads += [n for n in A.walk(eq.predicate) if isinstance(n, A.Access)]
            parts += [(r, False) for r in reads]
            for access, is_write in parts:
                if access.indices is None and access.tensor in self.all_loops and access.tensor not in decls:
                    loop = self.all_loops[access.tensor]
                    self.report(error(access.span or Span(0, 0), "loop-var-out-of-scope",
                                      f"loop variable {access.tensor} is used outside its loop",
                                      Related(loop.span or Span(0, 0), "the loop is here")))
                    continue
                uses.setdefault(access.tensor, []).append(_Use(access, k, is_write, site.loops, eq.predicate))
            for node in A.walk(eq):
                if isinstance(node, A.Var) and node.name not in bound:
                    span = node.span or Span(0, 0)
                    if node.name in self.all_loops:
                        loop = self.all_loops[node.name]
                        self.report(error(span, "loop-var-out-of-scope",
                                          f"loop variable {node.name} is used outside its loop",
                                          Related(loop.span or Span(0, 0), "the loop is here")))
                    else:
                        self.report(error(span, "unknown-loop-var", f"unknown loop variable {node.name}"))
            if eq.lhs.tensor in self.all_loops and eq.lhs.tensor not in decls and eq.lhs.indices is None:
                pass  # reported above
        return uses

    # ---------------------------------------------------------------- tensors

    def build_tensors(self, decls: dict[str, A.Decl], uses: dict[str, list[_Use]]) -> dict[str, TensorInfo]:
        tensors: dict[str, TensorInfo] = {}
        order = list(decls) + [n for n in uses if n not in decls]
        for name in order:
            decl = decls.get(name)
            tensor_uses = uses.get(name, [])
            if decl is not None and not tensor_uses:
                self.report(warning(decl.name_span or Span(0, 0), "unused-tensor", f"tensor {name} is declared but never used"))
            dtype, scope = self.resolve_type(name, decl, tensor_uses)
            rank = self.resolve_rank(name, decl, tensor_uses)
            role = self.resolve_role(name, decl, tensor_uses)
            if decl is not None:
                shape = decl.shape
            else:
                shape = self.infer_shape(name, rank, tensor_uses)
            span = (decl.name_span if decl else None) or (tensor_uses[0].access.name_span if tensor_uses else None)
            tensors[name] = TensorInfo(name, dtype, shape, scope, role, decl is not None, span)
        return tensors

    def resolve_type(self, name: str, decl: A.Decl | None, uses: list[_Use]) -> tuple[str, str]:
        dtype = decl.dtype if decl else None
        scope = decl.scope if decl else None
        first_dtype: A.Access | None = None
        first_scope: A.Access | None = None
        for u in uses:
            a = u.access
            span = a.span or Span(0, 0)
            if a.dtype is not None:
                if dtype is None:
                    dtype, first_dtype = a.dtype, a
                elif a.dtype != dtype:
                    where = Related(decl.name_span, f"declared {decl.dtype} here") if decl else Related(first_dtype.span, f"{dtype} here")
                    self.report(error(span, "dtype-conflict", f"{name} is {dtype}, but this access says {a.dtype}", where))
            if a.scope is not None:
                if scope is None:
                    scope, first_scope = a.scope, a
                elif a.scope != scope:
                    where = Related(decl.name_span, f"declared @{decl.scope} here") if decl else Related(first_scope.span, f"@{scope} here")
                    self.report(error(span, "scope-conflict", f"{name} is in scope {scope}, but this access says {a.scope}", where))
        if dtype is None:
            if uses:
                self.report(warning(uses[0].access.name_span or Span(0, 0), "missing-dtype",
                                    f"the dtype of {name} is not known (no declaration, no superscript); assuming f32"))
            dtype = "f32"
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
                where = Related(decl.name_span, f"declared with rank {rank} here") if decl else Related(first.span, f"rank {rank} here")
                self.report(error(a.span or Span(0, 0), "rank-conflict",
                                  f"{name} has {rank} dimension{'s' if rank != 1 else ''}, but this access uses {a.rank}", where))
        return rank or 0

    def resolve_role(self, name: str, decl: A.Decl | None, uses: list[_Use]) -> str:
        writes = [u for u in uses if u.is_write]
        if decl is not None:
            if decl.role == "in" and writes:
                self.report(error(writes[0].access.span or Span(0, 0), "write-to-input",
                                  f"{name} is an input and cannot be written",
                                  Related(decl.name_span or Span(0, 0), "declared as input here")))
            if decl.role in ("out", "tmp") and not writes and uses:
                self.report(error(decl.name_span or Span(0, 0), "never-written",
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
            ranges = affine.loop_ranges(u.loops)
            for d, index in enumerate(a.indices):
                if not affine.index_vars(index) <= ranges.keys():
                    continue  # an unbound variable, reported already
                b = affine.bounds(index, ranges)
                span = index.span or a.span or Span(0, 0)
                if b is None:
                    self.report(error(span, "shape-not-inferable",
                                      f"cannot infer dimension {d} of {name} from this index; declare {name} with its shape"))
                    continue
                if b[0] < 0:
                    self.report(error(span, "negative-index",
                                      f"index {d} of {name} can be {b[0]} here, below 0; declare {name} or change the index"))
                extents[d] = max(extents[d], b[1] + 1)
        return tuple(extents)

    # --------------------------------------------------------------- equations

    def classify(self, tensors: dict[str, TensorInfo]) -> list[EquationInfo]:
        infos: list[EquationInfo] = []
        written: set[str] = set()
        for k, site in enumerate(self.sites):
            eq = site.equation
            lhs = eq.lhs
            combiner, operand = reduction_shape(eq)
            self_reads = [n for n in A.walk(eq.rhs) if isinstance(n, A.Access) and n.tensor == lhs.tensor]
            first = lhs.tensor not in written
            if not self_reads:
                kind = "assign"
            elif first:
                if combiner is None:
                    bad = next((r for r in self_reads if r.indices != lhs.indices), self_reads[0])
                    self.report(error(bad.span or Span(0, 0), "reduction-init",
                                      f"{lhs.tensor} is read before it is first written, so its initial value cannot be implied: "
                                      f"write a reduction as {lhs.tensor} = {lhs.tensor} + e (or *, max, min), "
                                      f"or initialise {lhs.tensor} in an earlier equation"))
                kind = "reduce"
            else:
                kind = "update"
            lhs_vars = set()
            for index in lhs.indices or ():
                lhs_vars |= affine.index_vars(index)
            spatial = tuple(l.var for l in site.loops if l.var in lhs_vars)
            rest = tuple(l.var for l in site.loops if l.var not in lhs_vars)
            if kind == "assign" and rest:
                loop = next(l for l in site.loops if l.var == rest[0])
                self.report(warning(lhs.span or Span(0, 0), "repeated-write",
                                    f"{_access_text(lhs)} is written on every iteration of loop {rest[0]}, which its index does not use; "
                                    f"only the last iteration's value remains",
                                    Related(loop.span or Span(0, 0), f"loop {rest[0]}")))
            if kind in ("reduce", "update") or (kind == "assign" and rest):
                for var in rest:
                    loop = next(l for l in site.loops if l.var == var)
                    if loop.kind in ("P", "V", "B"):
                        self.report(error(loop.var_span or Span(0, 0), "race",
                                          f"iterations of {_kind_name(loop.kind)} loop {var} all write the same element "
                                          f"{_access_text(lhs)} (a race): make {var} serial or index the write by it",
                                          Related(lhs.span or Span(0, 0), "the write")))
            infos.append(EquationInfo(site, kind, combiner if self_reads else None, operand if self_reads else None,
                                      spatial, rest, k))
            written.add(lhs.tensor)
        return infos

    def check_init_order(self, tensors: dict[str, TensorInfo], equations: list[EquationInfo]) -> None:
        """A temporary or output read before any equation wrote it."""
        first_write: dict[str, int] = {}
        for info in equations:
            first_write.setdefault(info.equation.lhs.tensor, info.index)
        for info in equations:
            eq = info.equation
            for node in A.walk(eq.rhs):
                if not isinstance(node, A.Access) or node.tensor not in tensors:
                    continue
                t = tensors[node.tensor]
                if t.role == "in":
                    continue
                fw = first_write.get(node.tensor)
                if node.tensor == eq.lhs.tensor and info.kind in ("reduce", "update"):
                    continue
                if fw is None or fw >= info.index:
                    self.report(error(node.span or Span(0, 0), "read-before-write",
                                      f"{node.tensor} is read here before any equation writes it"))

    # ----------------------------------------------------------------- bounds

    def check_bounds(self, tensors: dict[str, TensorInfo], uses: dict[str, list[_Use]]) -> None:
        for name, tensor_uses in uses.items():
            t = tensors.get(name)
            if t is None:
                continue
            for u in tensor_uses:
                a = u.access
                if a.indices is None or len(a.indices) != len(t.shape):
                    continue
                if u.predicate is not None:
                    # A guard may keep the index in range; checked by
                    # enumeration in check_guarded_bounds when small.
                    continue
                ranges = affine.loop_ranges(u.loops)
                for d, index in enumerate(a.indices):
                    b = affine.bounds(index, ranges)
                    if b is None:
                        continue
                    if b[0] < 0 or b[1] >= t.shape[d]:
                        lo, hi = b
                        self.report(error(index.span or a.span or Span(0, 0), "index-out-of-bounds",
                                          f"index {d} of {name} ranges over {lo}..{hi}, outside 0..{t.shape[d] - 1} "
                                          f"(dimension {d} of {name} has extent {t.shape[d]})"))


def reduction_shape(eq: A.Equation) -> tuple[str | None, A.Expr | None]:
    """The combiner and combined operand if ``eq`` reads its own element in
    a reduction shape (``C = C + e``, ``C = e + C``, ``C = C - e``,
    ``C = C * e``, ``C = max(C, e)``...), else (None, None)."""
    lhs, rhs = eq.lhs, eq.rhs

    def is_self(e: A.Expr) -> bool:
        return isinstance(e, A.Access) and e.tensor == lhs.tensor and e.indices == lhs.indices

    def reads_self(e: A.Expr) -> bool:
        return any(isinstance(n, A.Access) and n.tensor == lhs.tensor for n in A.walk(e))

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


def _kind_name(kind: str) -> str:
    return {"P": "parallel", "V": "vectorized", "B": "thread-bound", "U": "unrolled", "L": "serial"}.get(kind, kind)


def _access_text(a: A.Access) -> str:
    from leir.printer import print_expr

    return print_expr(a, declared=frozenset({a.tensor}))

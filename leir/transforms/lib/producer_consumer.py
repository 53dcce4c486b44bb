"""What compute_at, reverse_compute_at, compute_inline and reverse_compute_inline share.

Each of the four moves one equation (a TVM block) next to, under or into
the equations that produce or consume what it computes; in TVM they are
``compute_at`` and ``compute_inline`` with their ``reverse_`` mirrors. The
same facts decide all four: what TVM's block scope records of each block
(``dataflow``), whether a block is "complete", and whether the program is
a "stage pipeline". The two ``*compute_at`` steps also share how a block's
new loop is offered and checked, the box of elements one iteration of a
loop reads or writes, and the names given back to the loops TVM generates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from leir import affine
from leir import ast as A
from leir.printer import access_text, equation_text, print_expr
from leir.semantics import EquationInfo
from leir.transforms.base import BadStep, Candidate, Context, LoopSite, NotApplicable, Step
from leir.transforms.rewrite import map_equation, map_expr, substitute

#: What rules a block out wherever it would go (None when nothing does).
BlockRefusal = Callable[[Context, EquationInfo], "NotApplicable | None"]
#: What rules out moving the block under the loop at a site.
LoopRefusal = Callable[[Context, EquationInfo, LoopSite], "NotApplicable | None"]


# ------------------------------------------------------------ arguments


def _block_name(args: dict, step_id: str) -> str:
    block = args.get("block")
    if not isinstance(block, str) or not block:
        raise BadStep(f"{step_id}: argument 'block' must be a name, got {block!r}")
    return block


def check_block(ctx: Context, args: dict, step_id: str, refusal: BlockRefusal) -> None:
    """Raise what rules out the block ``args["block"]``, if anything does."""
    problem = refusal(ctx, ctx.equation_of_block(_block_name(args, step_id)))
    if problem is not None:
        raise problem


def block_and_loop_args(ctx: Context, args: dict, step_id: str) -> tuple[EquationInfo, LoopSite]:
    """The block ``args["block"]`` and the loop ``args["at"]`` names as
    ``{"block": ..., "loop": ...}``."""
    block = _block_name(args, step_id)
    at = args.get("at")
    if not (isinstance(at, dict) and isinstance(at.get("block"), str) and isinstance(at.get("loop"), str)):
        raise BadStep(f"{step_id}: argument 'at' must name a loop as {{\"block\": ..., \"loop\": ...}}, got {at!r}")
    return ctx.equation_of_block(block), ctx.loop_site(at["block"], at["loop"])


# ------------------------------------------------- moving under a loop
# compute_at moves a producer under a loop of its first reader,
# reverse_compute_at a consumer under a loop of its last producer: the same
# offer, check and renaming with the roles swapped.


def attach_candidates(ctx: Context, at: int | None, step_id: str, block_refusal: BlockRefusal,
                      loop_refusal: LoopRefusal,
                      partner: Callable[[Dataflow, EquationInfo], EquationInfo]) -> list[Candidate]:
    """A step per loop around ``partner`` (the equation whose loops are
    offered) that a block at the cursor may move under."""
    out = []
    flow = dataflow(ctx)
    for info in ctx.equations_at(at):
        if block_refusal(ctx, info) is not None:
            continue
        other = partner(flow, info)
        name, other_name = ctx.block_names[info.index], ctx.block_names[other.index]
        for site in enclosing_sites(ctx, other):
            if loop_refusal(ctx, info, site) is None:
                args = {"block": name, "at": ctx.loop_ref(site)}
                title = f"Compute {name} at loop {site.loop.var} of {other_name}"
                out.append(Candidate(Step(step_id, args), title, info.equation.span))
    return out


def attach_check(ctx: Context, args: dict, step_id: str, block_refusal: BlockRefusal,
                 loop_refusal: LoopRefusal) -> None:
    info, site = block_and_loop_args(ctx, args, step_id)
    refusal = block_refusal(ctx, info) or loop_refusal(ctx, info, site)
    if refusal is not None:
        raise refusal


def attach_tidy(ctx: Context, args: dict, program: A.Program, step_id: str = "compute_at") -> A.Program:
    """The moved block's new loops named after its own loops where they run
    over the same range; ``TvmRefused`` when TVM's result runs a moved
    reduction over fewer iterations than it had (see ``_reduction_kept``)."""
    info = ctx.equation_of_block(args["block"])
    site = ctx.loop_site(args["at"]["block"], args["at"]["loop"])
    _reduction_kept(info, program, step_id)
    return tidy_moved(program, info, site.depth + 1)


def _reduction_kept(info: EquationInfo, program: A.Program, step_id: str) -> None:
    """Each element of a reduction must still combine every term: the
    reduction loops of the moved equation must run over as many iterations
    after the move as before. TVM 0.27's ``reverse_compute_at`` can get the
    domain of a split reduction axis wrong (a ``k_0*31 + k_1`` axis under a
    producer written ``k_0*16 + k_1`` came back with 2 x 2 of its 2 x 31
    iterations, found by ``leir dataset build``'s verification); such a
    result is refused rather than offered as a rewrite that fails to verify."""
    if not info.reduce_axes:
        return
    from leir.semantics import classify
    from leir.transforms.base import TvmRefused

    before = 1
    for loop in info.loops:
        if loop.var in info.reduce_axes:
            before *= loop.extent
    for moved in classify(program):
        if moved.equation.lhs.tensor != info.equation.lhs.tensor or moved.kind != info.kind:
            continue
        after = 1
        for loop in moved.loops:
            if loop.var in moved.reduce_axes:
                after *= loop.extent
        if after < before:
            names = ", ".join(l.var for l in moved.loops if l.var in moved.reduce_axes)
            raise TvmRefused(f"TVM's {step_id} left the reduction of {info.equation.lhs.tensor} with {after} of its "
                             f"{before} iterations", f"after {step_id}, loops {names} run {after} times per element "
                             f"of {info.equation.lhs.tensor} instead of {before}: TVM computed the moved block's "
                             f"domain wrongly, so the step is refused")


def encloses_refusal(ctx: Context, info: EquationInfo, site: LoopSite, error: type[NotApplicable],
                     partners: str) -> NotApplicable | None:
    """The loop already encloses the block (``partners`` says whose loops it
    should be moved under instead)."""
    name = ctx.block_names[info.index]
    loop = site.loop
    if info.index in site.equations:
        return error(f"loop {loop.var} already encloses {name}",
                     f"{name} is already inside loop {loop.var}; compute it at a loop of {partners}", loop.span)
    return None


def kernel_loop_refusal(ctx: Context, name: str, site: LoopSite, path: tuple[A.Loop, ...],
                        vector_error: type[NotApplicable], thread_error: type[NotApplicable]) -> NotApplicable | None:
    """A vectorized loop down to the site (``path``), or a thread axis of its
    kernel that does not enclose it."""
    vector = next((l for l in path if l.kind == "V"), None)
    if vector is not None:
        return vector_error(
            f"loop {vector.var} is vectorized",
            f"{name} would go inside vectorized loop {vector.var}, which TVM vectorizes only as the innermost loop",
            vector.span)
    missing = missing_thread_axes(ctx, site, path)
    if missing:
        return thread_error(
            f"loop {site.loop.var} is outside thread axis {missing[0]}",
            f"loop {site.loop.var} is in a kernel that also binds {', '.join(missing)}; every thread would run "
            f"{name} there; compute it at a loop inside all the kernel's thread-bound loops", site.loop.span)
    return None


# ------------------------------------------------------------ dataflow
# Every equation is a TVM block directly under the root block; what TVM's
# block scope records of them decides its checks.


@dataclass(frozen=True)
class Problem:
    short: str
    detail: str
    span: A.Span | None


@dataclass
class Dataflow:
    ctx: Context
    #: Per equation, the accesses TVM records as the block's reads: those of
    #: the value, without a reduction's own element (its init writes it).
    reads: list[list[A.Access]]
    guard_reads: dict[str, list[int]]
    writers: dict[str, list[int]]

    def tensors_read(self, k: int) -> list[str]:
        return list(dict.fromkeys(a.tensor for a in self.reads[k]))

    def reads_of(self, k: int, tensor: str) -> list[A.Access]:
        return [a for a in self.reads[k] if a.tensor == tensor]

    def later_readers(self, info: EquationInfo) -> list[EquationInfo]:
        """Equations after ``info`` that read what it writes (TVM's consumers
        of a block that is the only writer of its tensor)."""
        tensor = info.equation.lhs.tensor
        eqs = self.ctx.analysis.equations
        return [eqs[k] for k in range(info.index + 1, len(eqs)) if tensor in self.tensors_read(k)]

    def producers(self, info: EquationInfo) -> list[EquationInfo]:
        """Earlier equations writing what ``info`` reads or writes (TVM's
        read-after-write and write-after-write producers)."""
        names = set(self.tensors_read(info.index)) | {info.equation.lhs.tensor}
        eqs = self.ctx.analysis.equations
        return [eqs[k] for k in range(info.index) if eqs[k].equation.lhs.tensor in names]


def dataflow(ctx: Context) -> Dataflow:
    cached = ctx.__dict__.get("_producer_consumer_dataflow")
    if cached is not None:
        return cached
    reads, guard_reads, writers = [], {}, {}
    for info in ctx.analysis.equations:
        eq = info.equation
        own = eq.lhs.tensor if info.kind == "reduce" else None
        reads.append([n for n in A.walk(eq.rhs) if isinstance(n, A.Access) and n.tensor != own])
        if eq.predicate is not None:
            for n in A.walk(eq.predicate):
                if isinstance(n, A.Access):
                    guard_reads.setdefault(n.tensor, []).append(info.index)
        writers.setdefault(eq.lhs.tensor, []).append(info.index)
    flow = Dataflow(ctx, reads, guard_reads, writers)
    ctx.__dict__["_producer_consumer_dataflow"] = flow
    return flow


def complete_refusal(ctx: Context, info: EquationInfo, error: type[NotApplicable], what: str,
                     allow_reduction: bool = True) -> NotApplicable | None:
    """Whether the block is what TVM calls complete (the only writer of its
    tensor, every loop indexing the write, not reading it) or, when
    allowed, a reduction block (the only writer, with an implied init)."""
    eq = info.equation
    tensor = eq.lhs.tensor
    name = ctx.block_names[info.index]
    others = [k for k in dataflow(ctx).writers[tensor] if k != info.index]
    if others:
        other = ctx.analysis.equations[others[0]].equation
        return error(
            f"{tensor} is also written by {ctx.block_names[others[0]]}",
            f"{name} can be {what} only if it is the only equation writing {tensor}; {equation_text(other)} writes it too",
            other.span)
    if info.kind == "reduce" and allow_reduction:
        return None
    if info.kind != "assign":
        kinds = "a plain computation or a reduction with an implied initial value" if allow_reduction \
            else "a plain computation"
        return error(f"{name} reads what it writes",
                     f"{equation_text(eq)} reads {tensor}, which it writes; only {kinds} can be {what}", eq.span)
    if info.reduce_axes:
        loop = next(l for l in info.loops if l.var == info.reduce_axes[0])
        return error(f"{name} repeats its write over loop {loop.var}",
                     f"{equation_text(eq)} writes the same element on every iteration of loop {loop.var}, which its index "
                     f"does not use; only an equation whose loops all index what it writes can be {what}", loop.span)
    return None


def write_index_problem(lhs: A.Access, loops: tuple[A.Loop, ...], split: bool = True) -> str | None:
    """Why the written index is not an exact map of the loops onto a box:
    each dimension one loop variable or, with ``split``, an affine
    combination of its own loop variables that tiles a range densely
    (``io*32+ii`` after a split). TVM inverts a split index only when every
    loop of the block indexes the write (not for a reduction)."""
    extents = {l.var: l.extent for l in loops}
    seen: set[str] = set()
    for d, index in enumerate(lhs.indices or ()):
        form = affine.linearize(index)
        if form is None or not form.coeffs:
            return f"index {d} ({print_expr(index, index=True)}) is not an affine combination of loop variables"
        if not split and not isinstance(index, A.Var):
            return f"index {d} ({print_expr(index, index=True)}) is not a loop variable"
        if form.variables & seen:
            return f"a loop variable of index {d} ({print_expr(index, index=True)}) also indexes another dimension"
        seen |= form.variables
        if not _dense(form, extents):
            return f"index {d} ({print_expr(index, index=True)}) skips elements"
    return None


def _dense(form: affine.Affine, extents: dict[str, int]) -> bool:
    """Whether the form's variables tile a contiguous range (mixed radix)."""
    reach = 0
    for coeff, extent in sorted((abs(c), extents[v]) for v, c in form.coeffs):
        if extent == 1:
            continue
        if coeff != reach + 1:
            return False
        reach += coeff * (extent - 1)
    return True


def enclosing_sites(ctx: Context, info: EquationInfo) -> list[LoopSite]:
    """The loops around an equation, outermost first."""
    return [s for s in ctx.loop_sites if info.index in s.equations]


def missing_thread_axes(ctx: Context, site: LoopSite, path) -> list[str]:
    """Thread axes of the loop's kernel that do not enclose the loop: every
    thread of them would run what is put there."""
    unit = ctx.program.units[_unit_of(ctx, site)]
    axes = list(dict.fromkeys(n.var for n in A.walk(unit) if isinstance(n, A.Loop) and n.kind == "B"))
    bound = {l.var for l in path if l.kind == "B"}
    return [a for a in axes if a not in bound]


def _unit_of(ctx: Context, site: LoopSite) -> int:
    return ctx.analysis.equations[site.equations[0]].site.path[0]


def thread_relaxes(scope: str, axis: str) -> bool:
    """Whether TVM, computing what one iteration needs of a temporary in
    ``scope``, takes the union over a loop bound to ``axis`` (the threads
    that share the memory)."""
    if scope == "g":
        return True
    return scope == "s" and axis.startswith("t")


# ------------------------------------------------------------- regions


@dataclass(frozen=True)
class Interval:
    """``sym + lo .. sym + hi``: an affine part ``sym`` in the loops that
    stay fixed, and constant bounds over the loops that vary."""

    sym: tuple[tuple[str, int], ...]
    lo: int
    hi: int


def interval(form: affine.Affine, relaxed: dict[str, affine.Range]) -> Interval:
    sym = tuple((v, c) for v, c in form.coeffs if v not in relaxed)
    varying = affine.Affine(tuple((v, c) for v, c in form.coeffs if v in relaxed), form.const)
    lo, hi = varying.bounds(relaxed)
    return Interval(sym, lo, hi)


def box_union(accesses: Iterable[tuple[A.Access, dict[str, affine.Range]]], others: str,
              rank: int = 0) -> list[Interval | None] | str:
    """Per dimension, the smallest interval holding every access's elements
    while the loops in its ``relaxed`` ranges vary, or why that is not a
    box: an index that is not affine, or accesses that differ in the loops
    that stay fixed (``others`` names the rest of them in that message)."""
    region: list[Interval | None] = [None] * rank
    for access, relaxed in accesses:
        indices = access.indices or ()
        region += [None] * (len(indices) - len(region))
        for d, index in enumerate(indices):
            form = affine.linearize(index)
            if form is None:
                return f"{access_text(access)} has an index that is not affine"
            part = interval(form, relaxed)
            old = region[d]
            if old is not None and old.sym != part.sym:
                return f"{access_text(access)} and {others} differ in the loops outside"
            region[d] = part if old is None else Interval(part.sym, min(old.lo, part.lo), max(old.hi, part.hi))
    return region


def relaxed_ranges(loops: tuple[A.Loop, ...], depth: int, scope: str) -> dict[str, affine.Range]:
    """The loops TVM lets vary when it relaxes an access to the loop at
    ``depth``: those inside it, and thread-bound ones outside that share
    memory of ``scope``."""
    chosen = list(loops[depth:]) + [l for l in loops[:depth] if l.kind == "B" and thread_relaxes(scope, l.var)]
    return affine.loop_ranges(chosen)


def region_misfit(lhs: A.Access, loops: tuple[A.Loop, ...], region: list[Interval],
                  shape: tuple[int, ...]) -> int | None:
    """A dimension written through several loop variables of which only
    part, and more than one element, is needed."""
    for d, index in enumerate(lhs.indices or ()):
        form = affine.linearize(index)
        if form is None or len([c for c in form.coeffs]) <= 1:
            continue
        part = region[d]
        if part is None:
            continue
        full = not part.sym and part.lo <= 0 and part.hi >= shape[d] - 1
        if not full and part.lo != part.hi:
            return d
    return None


def disjoint_dims(accesses: list[tuple[A.Access, tuple[A.Loop, ...]]], loop: A.Loop, path) -> list[int]:
    """The dimensions in which different iterations of ``loop`` touch
    disjoint intervals: every access has the same coefficient on the loop
    and the same part in the loops outside it (``path`` down to it), and
    that coefficient is larger than the span of what the loops inside add."""
    outside = {l.var for l in path[: path.index(loop)]}
    rank = max((len(a.indices or ()) for a, _ in accesses), default=0)
    out = []
    for d in range(rank):
        forms = [(affine.linearize(a.indices[d]), loops) for a, loops in accesses]
        if any(f is None for f, _ in forms):
            continue
        coeffs = {f.coeff(loop.var) for f, _ in forms}
        syms = {tuple((v, c) for v, c in f.coeffs if v in outside) for f, _ in forms}
        if len(coeffs) != 1 or len(syms) != 1 or 0 in coeffs:
            continue
        lo = hi = None
        for f, loops in forms:
            inner = affine.Affine(tuple((v, c) for v, c in f.coeffs if v not in outside and v != loop.var), f.const)
            a, b = inner.bounds(affine.loop_ranges(loops))
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
        if abs(coeffs.pop()) > hi - lo:
            out.append(d)
    return out


# ------------------------------------------------------- stage pipeline


def stage_pipeline_problem(ctx: Context) -> Problem | None:
    """Why TVM would not call the program a stage pipeline (its condition
    for moving and inlining blocks), as far as our analysis can tell: an
    equation writing a tensor that an earlier equation read, or a read that
    the writes before it cannot be shown to cover (TVM's region cover)."""
    cached = ctx.__dict__.get("_producer_consumer_stage_pipeline", False)
    if cached is not False:
        return cached
    problem = _write_after_read(ctx) or _uncovered_read(ctx)
    ctx.__dict__["_producer_consumer_stage_pipeline"] = problem
    return problem


def stage_pipeline_refusal(ctx: Context, error: type[NotApplicable], what: str) -> NotApplicable | None:
    """``stage_pipeline_problem`` as the step's error: "TVM ``what`` only in
    a stage pipeline: ..."."""
    problem = stage_pipeline_problem(ctx)
    if problem is None:
        return None
    return error(problem.short, f"TVM {what} only in a stage pipeline: {problem.detail}", problem.span)


def _write_after_read(ctx: Context) -> Problem | None:
    flow = dataflow(ctx)
    read_by: dict[str, int] = {}
    for info in ctx.analysis.equations:
        tensor = info.equation.lhs.tensor
        reader = read_by.get(tensor)
        if reader is not None and reader != info.index:
            earlier = ctx.analysis.equations[reader].equation
            return Problem(
                f"{tensor} is written after {ctx.block_names[reader]} reads it",
                f"{equation_text(info.equation)} writes {tensor} after {equation_text(earlier)} read it (a write-after-read "
                f"dependence)", info.equation.span)
        for name in flow.tensors_read(info.index):
            read_by.setdefault(name, info.index)
        for name, readers in flow.guard_reads.items():
            if info.index in readers:
                read_by.setdefault(name, info.index)
    return None


def _uncovered_read(ctx: Context) -> Problem | None:
    flow = dataflow(ctx)
    eqs = ctx.analysis.equations
    for consumer in eqs:
        for tensor in flow.tensors_read(consumer.index):
            producers = [eqs[k] for k in flow.writers.get(tensor, ()) if k < consumer.index]
            by_depth: dict[int, list[EquationInfo]] = {}
            for p in producers:
                by_depth.setdefault(_common_depth(p.loops, consumer.loops), []).append(p)
            for depth, group in by_depth.items():
                if not any(_covers(ctx, p, consumer, tensor, depth) for p in group):
                    access = flow.reads_of(consumer.index, tensor)[0]
                    return Problem(
                        f"cannot show that {tensor} is computed before {ctx.block_names[consumer.index]} reads it",
                        f"leir cannot show (as TVM must) that the elements {access_text(access)} reads were all "
                        f"written before: {equation_text(group[0].equation)} writes them", access.span)
    return None


def _common_depth(a: tuple[A.Loop, ...], b: tuple[A.Loop, ...]) -> int:
    k = 0
    while k < len(a) and k < len(b) and a[k] is b[k]:
        k += 1
    return k


def _covers(ctx: Context, producer: EquationInfo, consumer: EquationInfo, tensor: str, depth: int) -> bool:
    """Whether what ``producer`` writes under the loops below ``depth``
    (a lower bound) holds what ``consumer`` reads there (an upper bound)."""
    t = ctx.analysis.tensors[tensor]
    written = _written_box(producer, depth, t.scope)
    if written is None:
        return False
    reads = dataflow(ctx).reads_of(consumer.index, tensor)
    relaxed = relaxed_ranges(consumer.loops, depth, t.scope)
    for d, extent in enumerate(t.shape):
        w = written[d]
        if not w.sym and w.lo <= 0 and w.hi >= extent - 1:
            continue
        for access in reads:
            form = affine.linearize(access.indices[d])
            if form is None:
                return False
            r = interval(form, relaxed)
            if r.sym != w.sym:
                return False
            if r.sym:
                if not (w.lo <= r.lo and r.hi <= w.hi):
                    return False
            elif not (max(w.lo, 0) <= max(r.lo, 0) and min(r.hi, extent - 1) <= min(w.hi, extent - 1)):
                return False
    return True


def _written_box(info: EquationInfo, depth: int, scope: str) -> list[Interval] | None:
    """Per dimension, the elements written for fixed loops outside
    ``depth`` when that is a box TVM can see whole, else None."""
    eq = info.equation
    relaxed = relaxed_ranges(info.loops, depth, scope)
    extents = {v: hi - lo + 1 for v, (lo, hi) in relaxed.items()}
    box, seen = [], set()
    forms = [affine.linearize(i) for i in eq.lhs.indices or ()]
    for form in forms:
        if form is None:
            return None
        varying = {v: c for v, c in form.coeffs if v in relaxed}
        if set(varying) & seen:
            return None
        seen |= set(varying)
        if not _dense(affine.Affine.of(varying, 0), extents):
            return None
        box.append(interval(form, relaxed))
    if eq.predicate is not None:
        for conjunct in _conjuncts(eq.predicate):
            bounds = affine.guard_upper_bounds(conjunct)
            if not bounds:
                return None
            for bound_form, k in bounds:
                if not bound_form.variables <= relaxed.keys():
                    return None
                hit = False
                for d, form in enumerate(forms):
                    part = box[d]
                    if part.sym:
                        continue
                    if bound_form.coeffs == form.coeffs:
                        box[d] = Interval((), part.lo, min(part.hi, k + form.const))
                        hit = True
                    elif bound_form.coeffs == tuple((v, -c) for v, c in form.coeffs):
                        box[d] = Interval((), max(part.lo, form.const - k), part.hi)
                        hit = True
                if not hit:
                    return None
    return box


def _conjuncts(e: A.Expr) -> list[A.Expr]:
    if isinstance(e, A.Binary) and e.op == "&":
        return _conjuncts(e.lhs) + _conjuncts(e.rhs)
    return [e]


# ------------------------------------------------------------- naming


def tidy_moved(program: A.Program, info: EquationInfo, depth: int) -> A.Program:
    """A moved equation as a person writes it: its new loops named after
    its own (``rename_new_loops``), and ``x//n*n + x%n`` (TVM's inverse of
    a split index, at one element) folded back to ``x``."""
    program = rename_new_loops(program, info, depth)
    tensor = info.equation.lhs.tensor

    def fold_access(e: A.Expr):
        if isinstance(e, A.Access) and e.indices is not None:
            return replace(e, indices=tuple(_fold_divmod(i) for i in e.indices))
        return None

    def item(node):
        if isinstance(node, A.Equation):
            if node.lhs.tensor != tensor:
                return node
            return map_equation(node, lambda e: map_expr(e, fold_access))
        return replace(node, body=tuple(item(b) for b in node.body))

    return replace(program, units=tuple(item(u) for u in program.units))


def _fold_divmod(e: A.Expr) -> A.Expr:
    terms = _sum_terms(e)
    if terms is None or len(terms) < 2:
        return e
    for a in range(len(terms)):
        for b in range(len(terms)):
            x = _divmod_pair(terms[a], terms[b])
            if a != b and x is not None:
                rest = [t for k, t in enumerate(terms) if k not in (a, b)]
                out = x
                for t in rest:
                    out = A.Binary("+", out, t)
                return _fold_divmod(out)
    return e


def _sum_terms(e: A.Expr) -> list[A.Expr] | None:
    if isinstance(e, A.Binary) and e.op == "+":
        lhs, rhs = _sum_terms(e.lhs), _sum_terms(e.rhs)
        return None if lhs is None or rhs is None else lhs + rhs
    return [e]


def _divmod_pair(scaled: A.Expr, rem: A.Expr) -> A.Expr | None:
    """``x`` when ``scaled`` is ``x//n*n`` and ``rem`` is ``x%n``."""
    if not (isinstance(scaled, A.Binary) and scaled.op == "*" and isinstance(rem, A.Binary) and rem.op == "%"):
        return None
    quotient, n = scaled.lhs, scaled.rhs
    if not (isinstance(quotient, A.Binary) and quotient.op == "//" and isinstance(n, A.Num)):
        return None
    if quotient.lhs == rem.lhs and quotient.rhs == n == rem.rhs and isinstance(n.value, int) and n.value > 0:
        return quotient.lhs
    return None


def rename_new_loops(program: A.Program, info: EquationInfo, depth: int) -> A.Program:
    """Give the loops TVM generated around a moved equation (``ax0``...)
    the names of the equation's own loops, where one runs over the same
    range from 0 and the name is free there.

    TVM creates one loop per loop of the moved equation that does not
    shrink to one iteration, in order; the written index says which of the
    equation's loops a new loop stands for."""
    tensor = info.equation.lhs.tensor
    sites = [s for s in A.equation_sites(program) if s.equation.lhs.tensor == tensor]
    if not sites or any(s.loops[:depth] != sites[0].loops[:depth] for s in sites):
        return program
    new_loops = list(sites[-1].loops[depth:])
    if any(s.loops[depth:] != tuple(new_loops) for s in sites):
        return program
    old_indices = info.equation.lhs.indices or ()
    new_indices = sites[-1].equation.lhs.indices or ()
    new_vars = {l.var for l in new_loops}
    outer = {l.var for l in sites[-1].loops[:depth]}
    names: dict[int, str] = {}
    queue = list(new_loops)
    for old in info.loops:
        dim = next((d for d, index in enumerate(old_indices) if old.var in affine.index_vars(index)), None)
        if dim is not None:
            value = new_indices[dim]
            uses = affine.index_vars(value) & new_vars
            if not uses:
                continue  # one iteration: no loop
            if not queue or queue[0].var not in uses:
                return program
            new = queue.pop(0)
            # A dimension written through several variables is needed whole
            # or at one element (compute_at's precondition): a loop there
            # runs over the whole range of its variable.
            same = not isinstance(old_indices[dim], A.Var) or value == A.Var(new.var)
        else:
            if old.extent == 1:
                continue
            if not queue:
                return program
            new = queue.pop(0)
            same = True
        if same and new.extent == old.extent and old.start == 0 and new.start == 0 and old.var not in outer:
            names[id(new)] = old.var
    final = [names.get(id(l), l.var) for l in new_loops]
    if queue or not names or len(set(final)) < len(final):
        return program
    return _rename(program, names)


def _rename(program: A.Program, names: dict[int, str]) -> A.Program:
    def nest(n: A.Nest, mapping: dict[str, A.Expr]) -> A.Nest:
        mapping = dict(mapping)
        loops = []
        for loop in n.loops:
            if id(loop) in names:
                mapping[loop.var] = A.Var(names[id(loop)])
                loop = replace(loop, var=names[id(loop)])
            loops.append(loop)
        body = tuple(nest(item, mapping) if isinstance(item, A.Nest) else equation(item, mapping) for item in n.body)
        return replace(n, loops=tuple(loops), body=body)

    def equation(eq: A.Equation, mapping: dict[str, A.Expr]) -> A.Equation:
        if not mapping:
            return eq
        lhs = substitute(eq.lhs, mapping)
        return replace(eq, lhs=lhs, rhs=substitute(eq.rhs, mapping),
                       predicate=None if eq.predicate is None else substitute(eq.predicate, mapping))

    return replace(program, units=tuple(nest(u, {}) for u in program.units))


# ------------------------------------------------------------- messages

"""Facts computed from a program alone: strides, footprints and working
sets of accesses, operation counts, and the facts about one loop
(``loop_facts``) or one tensor access (``access_facts``) that hover shows.

Definitions are in the package docstring and docs/reasoning.md."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from leir import ast as A
from leir import affine
from leir.semantics import Analysis, EquationInfo




def human_bytes(n: float) -> str:
    if n < 1024:
        return f"{n:g} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}" if n < 100 else f"{n:.0f} {unit}"
    return f"{n} B"  # pragma: no cover


def human_count(n: float) -> str:
    if n < 10_000:
        return f"{n:g}"
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"  # pragma: no cover


@functools.lru_cache(maxsize=64)
def dtype_bytes(dtype: str) -> float:
    """Storage bytes of one element (``i4`` is half a byte, ``bool`` one),
    remembered (the cost features ask for it per access).
    (``leir.measure.device.dtype_bits`` says the same; importing it would
    load the measurement engine, too slow for hover.)"""
    if dtype == "bool":
        return 1.0
    m = re.search(r"\d+", dtype)
    return (int(m.group()) if m else 32) / 8


def _print(e: A.Expr) -> str:
    from leir.printer import print_expr

    return print_expr(e)


def _accesses(eq: A.Equation) -> list[A.Access]:
    """The written access, then the reads in source order (guard included)."""
    out = [eq.lhs]
    for part in (eq.rhs, eq.predicate):
        if part is not None:
            out.extend(n for n in A.walk(part) if isinstance(n, A.Access))
    return out


def _row_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _stride(analysis: Analysis, access: A.Access, var: str, loops: Sequence[A.Loop] | None = None) -> int | None:
    """Element stride of one access as ``var`` advances by one (0 for a
    scalar; None where it is not one constant or the shape is unknown).

    Affine indices give it exactly. Indices with ``//`` and ``%`` by
    constants (what a fusion writes) are evaluated when ``loops`` (the
    enclosing loops) are given: the address differences repeat with the
    least common multiple of the divisors, so that many points decide it
    (``Y_{f//96,f%96}`` has stride 1, ``b_{f%96}`` none)."""
    t = analysis.tensors.get(access.tensor)
    if not access.indices:
        return 0
    if t is None or len(t.shape) != len(access.indices):
        return None
    stride = 0
    rows = _row_strides(t.shape)
    for index, row in zip(access.indices, rows):
        form = affine.linearize(index)
        if form is None:
            if var in affine.index_vars(index):
                return _evaluated_stride(access, rows, var, loops)
            continue
        stride += form.coeff(var) * row
    return stride


#: Most points evaluated to find the stride of a non-affine index.
_MAX_STRIDE_POINTS = 4096


def _evaluated_stride(access: A.Access, rows: list[int], var: str, loops: Sequence[A.Loop] | None) -> int | None:
    if not loops:
        return None
    loop = next((l for l in loops if l.var == var), None)
    if loop is None:
        return None
    divisors = []
    for index in access.indices:
        for n in A.walk(index):
            if isinstance(n, A.Binary) and n.op in ("//", "%"):
                if not (isinstance(n.rhs, A.Num) and isinstance(n.rhs.value, int) and n.rhs.value > 0):
                    return None
                divisors.append(n.rhs.value)
    period = 1
    for d in divisors:
        period = math.lcm(period, d)
    points = min(loop.extent - 1, period)
    if points > _MAX_STRIDE_POINTS:
        return None
    env = {l.var: l.start for l in loops}

    def address(v: int) -> int | None:
        env[var] = v
        total = 0
        for index, row in zip(access.indices, rows):
            x = _eval_int(index, env)
            if x is None:
                return None
            total += x * row
        return total

    first = address(loop.start)
    stride = None
    for v in range(loop.start + 1, loop.start + 1 + points):
        nxt = address(v)
        if first is None or nxt is None:
            return None
        if stride is None:
            stride = nxt - first
        elif nxt - first != stride:
            return None
        first = nxt
    return 0 if stride is None else stride


def _eval_int(e: A.Expr, env: dict[str, int]) -> int | None:
    if isinstance(e, A.Num):
        return e.value if isinstance(e.value, int) else None
    if isinstance(e, A.Var):
        return env.get(e.name)
    if isinstance(e, A.Unary) and e.op == "-":
        x = _eval_int(e.operand, env)
        return None if x is None else -x
    if isinstance(e, A.Binary) and e.op in ("+", "-", "*", "//", "%"):
        a, b = _eval_int(e.lhs, env), _eval_int(e.rhs, env)
        if a is None or b is None or (e.op in ("//", "%") and b == 0):
            return None
        return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0}[e.op]
    return None


def access_strides(analysis: Analysis, info: EquationInfo, var: str) -> dict[str, int | None]:
    """Element stride of each tensor access of an equation as ``var``
    advances by one (None where an index is not affine). Keys are tensor
    names; a second access of a tensor with another stride gets
    ``NAME#k``. (Used by ``leir.tools.optimize``'s ranking.)"""
    eq = info.equation
    accesses = [eq.lhs] + [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
    out: dict[str, int | None] = {}
    for a in accesses:
        t = analysis.tensors.get(a.tensor)
        if t is None or not a.indices:
            continue
        if not t.shape or len(t.shape) != len(a.indices):
            continue
        stride = _stride(analysis, a, var, info.loops)
        name = a.tensor
        if name in out and out[name] != stride:
            name = f"{a.tensor}#{len(out)}"
        out[name] = stride
    return out


def operations(e: A.Expr) -> int:
    """Arithmetic operators and function calls in an expression (a cast is a
    conversion, a read is not arithmetic)."""
    if isinstance(e, A.Binary):
        return 1 + operations(e.lhs) + operations(e.rhs)
    if isinstance(e, A.Unary):
        return 1 + operations(e.operand)
    if isinstance(e, A.Call):
        return (0 if e.func in A.DTYPES else 1) + sum(operations(a) for a in e.args)
    return 0


def _iterations(loops: Sequence[A.Loop]) -> int:
    return math.prod(l.extent for l in loops)


def program_operations(analysis: Analysis) -> int:
    return sum(_iterations(i.loops) * operations(i.equation.rhs) for i in analysis.equations)


def compulsory_bytes(analysis: Analysis) -> float:
    return sum(t.size * dtype_bytes(t.dtype) for t in analysis.tensors.values() if t.role in ("in", "out"))


def tensor_bytes(analysis: Analysis, name: str) -> float:
    t = analysis.tensors[name]
    return t.size * dtype_bytes(t.dtype)


# ------------------------------------------------------------------ footprints


def _dim_box(index: A.Expr, moving: dict[str, int], fixed: dict[str, int]) -> tuple[int, int, int] | None:
    """(lo, hi, points) of one index while the ``moving`` loops (var ->
    extent, starting at 0 offset from ``fixed``) run; None when unbounded."""
    form = affine.linearize(index)
    names = affine.index_vars(index)
    points = math.prod(moving.get(v, 1) for v in names)
    ranges = {v: (fixed.get(v, 0), fixed.get(v, 0) + moving[v] - 1) if v in moving else (fixed.get(v, 0),) * 2
              for v in names}
    if form is not None:
        lo, hi = form.bounds(ranges)
        return lo, hi, points
    b = affine.bounds(index, ranges)
    if b is None:
        return None
    return b[0], b[1], points


#: Cache line size used when the machine does not say (x86 and most ARM
#: cores: 64 bytes).
LINE_BYTES = 64


def _dim_counts(analysis: Analysis, accesses) -> list[tuple[int, int, int]] | None:
    """Per dimension of one tensor, (distinct indices, index span, size)
    over ``accesses`` (see ``footprint``); None for an unknown tensor."""
    t = analysis.tensors.get(accesses[0][0].tensor)
    if t is None:
        return None
    out = []
    for d, size in enumerate(t.shape):
        lo = hi = None
        points = 0
        for access, loops, running in accesses:
            if not access.indices or len(access.indices) != len(t.shape):
                lo, hi, points = 0, size - 1, size
                break
            moving = {l.var: l.extent for l in running}
            fixed = {l.var: l.start for l in loops}
            box = _dim_box(access.indices[d], moving, fixed)
            if box is None:
                lo, hi, points = 0, size - 1, size
                break
            lo = box[0] if lo is None else min(lo, box[0])
            hi = box[1] if hi is None else max(hi, box[1])
            points += box[2]
        span = min(hi - lo + 1, size)
        out.append((max(1, min(span, points)), max(1, span), size))
    return out


def footprint(analysis: Analysis, accesses: Sequence[tuple[A.Access, Sequence[A.Loop], Sequence[A.Loop]]]) -> int:
    """Distinct elements of one tensor touched by ``accesses``: each is
    (access, its enclosing loops, the loops among them that run). Per
    dimension the smaller of the union of the index ranges, the sum of the
    points each access visits, and the dimension's size; their product."""
    if not accesses:
        return 0
    dims = _dim_counts(analysis, accesses)
    if dims is None:
        return 0
    return math.prod(n for n, _, _ in dims)


def footprint_lines(analysis: Analysis, accesses, line_bytes: int = LINE_BYTES) -> int:
    """Cache lines of ``line_bytes`` holding the elements ``footprint``
    counts (row-major, the tensor assumed line-aligned): trailing dimensions
    covered whole form one contiguous run with the next one if it is dense;
    a dimension touched with gaps puts each of its indices in a run of its
    own. (``C_{k,j}`` over k alone touches one element per row: a line per
    element.)"""
    if not accesses:
        return 0
    dims = _dim_counts(analysis, accesses)
    t = analysis.tensors.get(accesses[0][0].tensor)
    if dims is None or t is None:
        return 0
    eb = dtype_bytes(t.dtype)
    return dims_lines(dims, eb, line_bytes)


def dims_lines(dims: list[tuple[int, int, int]], element_bytes: float, line_bytes: int = LINE_BYTES) -> int:
    """Cache lines holding a box given per dimension as (points, span,
    size), as ``_dim_counts`` gives it (see ``footprint_lines``)."""
    if not dims:
        return 1
    eb = element_bytes
    run = 1  # elements in one contiguous run
    k = len(dims) - 1
    while k > 0 and dims[k][0] == dims[k][2]:
        run *= dims[k][2]
        k -= 1
    n, span, _ = dims[k]
    rest = math.prod(c for c, _, _ in dims[:k])
    if n == span:  # dense: the runs of consecutive indices join
        return math.ceil(n * run * eb / line_bytes) * rest
    # With gaps: a run per index, but never more lines than the span covers.
    return min(n * math.ceil(run * eb / line_bytes), math.ceil(span * run * eb / line_bytes)) * rest


def _under(info: EquationInfo, loop: A.Loop) -> int | None:
    """Position of ``loop`` (by identity) among the equation's loops."""
    for n, l in enumerate(info.loops):
        if l is loop:
            return n
    return None


def working_set(analysis: Analysis, loop: A.Loop, *, inclusive: bool = False,
                only: set[int] | None = None, line_bytes: int | None = LINE_BYTES) -> dict[str, float]:
    """Bytes per tensor touched by the loops inside ``loop`` (one iteration
    of it), or by ``loop`` and those inside it (``inclusive``: one full
    pass), over every equation under it (``only``: these equation indices):
    the cache lines of ``line_bytes`` that hold the elements touched, or the
    elements' own bytes when ``line_bytes`` is None."""
    per_tensor: dict[str, list] = {}
    for info in analysis.equations:
        if only is not None and info.index not in only:
            continue
        n = _under(info, loop)
        if n is None:
            continue
        running = info.loops[n if inclusive else n + 1:]
        for a in _accesses(info.equation):
            per_tensor.setdefault(a.tensor, []).append((a, info.loops, running))
    out = {}
    for name, accs in per_tensor.items():
        if name in analysis.tensors:
            if line_bytes is None:
                out[name] = footprint(analysis, accs) * dtype_bytes(analysis.tensors[name].dtype)
            else:
                out[name] = footprint_lines(analysis, accs, line_bytes) * line_bytes
    return out


@dataclass(frozen=True)
class AccessStride:
    block: str
    tensor: str
    #: The access as printed (``W_{k,j}``).
    text: str
    written: bool
    #: Elements moved per iteration of the loop; None when not affine.
    stride: int | None


@dataclass(frozen=True)
class Refusal:
    transform: str
    code: str
    short: str
    detail: str
    #: For reorder, fuse and tile: the loop directly inside, paired with this one.
    with_loop: str | None = None


@dataclass
class LoopFacts:
    var: str
    kind: str
    extent: int
    start: int
    #: Enclosing loops, outermost first, as (var, kind, extent).
    outer: list[tuple[str, str, int]]
    #: Iterations of this loop's body over one run of the program: the
    #: product of the enclosing extents times this extent.
    trip_count: int
    #: Blocks (equations, by block name) under the loop.
    blocks: list[str]
    #: Every access under the loop with its stride along it.
    strides: list[AccessStride]
    #: Blocks for which this loop is a reduction axis / a spatial axis.
    reduction_for: list[str]
    spatial_for: list[str]
    #: Bytes per tensor (of the cache lines touched) in one iteration / one
    #: full pass of the loop.
    iteration_working_set: dict[str, float]
    pass_working_set: dict[str, float]
    #: Steps offered on this loop (leir.transforms.candidates), as (id, title, args).
    offered: list[tuple[str, str, dict]] = field(default_factory=list)
    #: Loop transformations not offered, with the precondition that fails.
    refused: list[Refusal] = field(default_factory=list)

    @property
    def kind_name(self) -> str:
        return A.KIND_WORDS[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "var": self.var, "kind": self.kind, "extent": self.extent, "start": self.start,
            "outer": [list(o) for o in self.outer], "trip_count": self.trip_count, "blocks": self.blocks,
            "strides": [s.__dict__ for s in self.strides], "reduction_for": self.reduction_for,
            "spatial_for": self.spatial_for, "iteration_working_set": self.iteration_working_set,
            "pass_working_set": self.pass_working_set,
            "offered": [{"id": i, "title": t, "args": a} for i, t, a in self.offered],
            "refused": [r.__dict__ for r in self.refused],
        }


def _context(analysis: Analysis):
    from leir.transforms.base import Context

    return Context.of(analysis)


def _find_site(ctx, *, at: int | None = None, block: str | None = None, var: str | None = None):
    if at is not None:
        for site in ctx.loop_sites:
            if site.loop.span is not None and site.loop.span.contains(at):
                return site
        return None
    if block is None or var is None:
        raise ValueError("loop_facts needs at=OFFSET or block= and var=")
    from leir.errors import LeirError

    try:
        return ctx.loop_site(block, var)
    except LeirError:
        return None


#: Loop transformations whose ``check`` needs only the loop (plus the
#: placeholder arguments given): asked for the reason when not offered.
_LOOP_CHECKS = (
    ("split", lambda e: {"factors": [-(-e // 2), 2]}),
    ("parallelize", lambda e: {}),
    ("vectorize", lambda e: {}),
    ("unroll", lambda e: {}),
    ("rfactor", lambda e: {"factor_axis": 0}),
    ("decompose_reduction", lambda e: {}),
)


def loop_facts(analysis: Analysis, *, at: int | None = None, block: str | None = None, var: str | None = None,
               legality: bool = True, target: str = "llvm", line_bytes: int = LINE_BYTES) -> LoopFacts | None:
    """Facts about the loop whose header holds offset ``at`` (or loop ``var``
    around block ``block``); None when there is no such loop. ``legality``
    lists the steps offered on it and, for the loop transformations not
    offered, the failing precondition (cheap: no lowering)."""
    ctx = _context(analysis)
    site = _find_site(ctx, at=at, block=block, var=var)
    if site is None:
        return None
    loop = site.loop
    names = ctx.block_names
    strides, reduction_for, spatial_for = [], [], []
    for k in site.equations:
        info = analysis.equations[k]
        b = names[k]
        seen = set()
        for n, a in enumerate(_accesses(info.equation)):
            text = _print(a)
            if (text, n == 0) in seen or (n > 0 and (text, True) in seen):
                continue  # C += e reads the element it writes: one row for it
            seen.add((text, n == 0))
            strides.append(AccessStride(b, a.tensor, text, n == 0, _stride(analysis, a, loop.var, info.loops)))
        if loop.var in info.reduce_axes and info.kind in ("reduce", "update"):
            reduction_for.append(b)
        elif loop.var in info.spatial:
            spatial_for.append(b)
    facts = LoopFacts(
        var=loop.var, kind=loop.kind, extent=loop.extent, start=loop.start,
        outer=[(l.var, l.kind, l.extent) for l in site.outer],
        trip_count=_iterations(site.outer) * loop.extent,
        blocks=[names[k] for k in site.equations], strides=strides,
        reduction_for=reduction_for, spatial_for=spatial_for,
        iteration_working_set=working_set(analysis, loop, line_bytes=line_bytes),
        pass_working_set=working_set(analysis, loop, inclusive=True, line_bytes=line_bytes),
    )
    if legality and analysis.ok:
        _legality(ctx, site, facts, target)
    return facts


def _legality(ctx, site, facts: LoopFacts, target: str) -> None:
    from leir import transforms
    from leir.errors import LeirError
    from leir.transforms.base import NotApplicable, TransformError

    blocks = {ctx.block_names[k] for k in site.equations}
    var = site.loop.var
    at = site.loop.span.start if site.loop.span is not None else None
    try:
        listed = transforms.candidates(ctx, at, only=LOOP_STEPS)
    except LeirError:
        listed = []
    offered_ids = set()
    for c in listed:
        args = c.step.args
        mine = (args.get("loop") == var and args.get("block") in blocks) or (
            var in (args.get("loops") or ()) and args.get("block") in blocks) or (
            isinstance(args.get("at"), dict) and args["at"].get("loop") == var and args["at"].get("block") in blocks)
        if mine:
            if c.step.id == "bind" and target != "cuda":
                continue
            facts.offered.append((c.step.id, c.title, args))
            offered_ids.add(c.step.id)
    ref = ctx.loop_ref(site)
    for tid, extra in _LOOP_CHECKS:
        if tid in offered_ids:
            continue
        try:
            transforms.get(tid).check(ctx, {**ref, **extra(site.loop.extent)})
        except NotApplicable as e:
            facts.refused.append(Refusal(tid, getattr(e, "code", "not-applicable"), e.short, e.detail))
        except TransformError:
            continue  # needs other arguments: not a precondition of the loop
        except LeirError:
            continue
    inner = next((s for s in ctx.loop_sites if s.outer and s.outer[-1] is site.loop), None)
    if inner is None:
        return
    pair = [var, inner.loop.var]
    offered_pairs = {i for i, _, a in facts.offered if list(a.get("loops") or ()) == pair}
    for tid in _PAIR_CHECKS:
        if tid in offered_pairs:
            continue
        try:
            transforms.get(tid).check(ctx, {"block": ref["block"], "loops": pair})
        except NotApplicable as e:
            facts.refused.append(Refusal(tid, getattr(e, "code", "not-applicable"), e.short, e.detail,
                                         inner.loop.var))
        except LeirError:
            continue  # tile needs sizes: its loops themselves qualify


#: The transformations whose steps can name a loop (``loop``, ``loops`` or
#: ``at`` in their arguments): the only ones ``_legality`` lists as offered
#: on a loop. The others (row patterns, algebra, tensor steps) match over the
#: whole program, which on a 100,000-line file took seconds per hover for
#: steps never shown there (a test checks that they never name a loop).
LOOP_STEPS = (
    "split", "tile", "reorder", "fuse", "unroll", "parallelize", "vectorize", "bind", "rfactor",
    "decompose_reduction", "compute_at", "reverse_compute_at", "operator_fusion", "operator_fission",
    "expression_reorder", "tensor_split", "tensor_concat",
)

#: Transformations of a loop and the one directly inside it.
_PAIR_CHECKS = ("reorder", "fuse", "tile")


@dataclass(frozen=True)
class LoopAccess:
    """One enclosing loop as an access sees it."""

    var: str
    extent: int
    stride: int | None
    #: Whether the loop's variable appears in the access's indices.
    indexes: bool
    #: Distinct elements / their bytes / the bytes of the cache lines
    #: holding them, touched by one full pass of this loop.
    footprint: int
    footprint_bytes: float
    footprint_line_bytes: float


@dataclass
class AccessFacts:
    tensor: str
    text: str
    block: str
    written: bool
    shape: tuple[int, ...]
    dtype: str
    scope: str
    role: str
    bytes: float
    element_bytes: float
    loops: list[LoopAccess]
    #: Times each element is touched by this access: the product of the
    #: extents of the enclosing loops that do not index it.
    reuse: int
    #: Those loops.
    reuse_loops: list[str]
    #: The innermost reuse loop and the working set of one iteration of it.
    reuse_loop: str | None
    reuse_distance_bytes: float | None

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["loops"] = [l.__dict__ for l in self.loops]
        d["shape"] = list(self.shape)
        return d


def _find_access(analysis: Analysis, at: int) -> tuple[EquationInfo, A.Access, int] | None:
    best = None
    for info in analysis.equations:
        span = info.equation.span
        if span is None or not span.contains(at):
            continue
        for n, a in enumerate(_accesses(info.equation)):
            s = a.span
            if s is not None and s.contains(at) and (best is None or s.end - s.start < best[3]):
                best = (info, a, n, s.end - s.start)
    return None if best is None else best[:3]


def access_facts(analysis: Analysis, *, at: int | None = None, block: str | None = None,
                 tensor: str | None = None, occurrence: int = 0, line_bytes: int = LINE_BYTES) -> AccessFacts | None:
    """Facts about the access under offset ``at`` (the innermost one), or
    the ``occurrence``-th access of ``tensor`` in block ``block``."""
    ctx = _context(analysis)
    if at is not None:
        found = _find_access(analysis, at)
        if found is None:
            return None
        info, access, n = found
    else:
        if block is None or tensor is None:
            raise ValueError("access_facts needs at=OFFSET or block= and tensor=")
        try:
            info = ctx.equation_of_block(block)
        except Exception:
            return None
        matches = [(n, a) for n, a in enumerate(_accesses(info.equation)) if a.tensor == tensor]
        if len(matches) <= occurrence:
            return None
        n, access = matches[occurrence]
    t = analysis.tensors.get(access.tensor)
    if t is None:
        return None
    indexed = set()
    for index in access.indices or ():
        indexed |= affine.index_vars(index)
    loops = []
    for d, l in enumerate(info.loops):
        running = info.loops[d:]
        fp = footprint(analysis, [(access, info.loops, running)])
        lines = footprint_lines(analysis, [(access, info.loops, running)], line_bytes)
        loops.append(LoopAccess(l.var, l.extent, _stride(analysis, access, l.var, info.loops), l.var in indexed, fp,
                                fp * dtype_bytes(t.dtype), lines * line_bytes))
    reuse_loops = [l.var for l in info.loops if l.var not in indexed and l.extent > 1]
    reuse_loop, distance = _reuse(analysis, info, access, line_bytes)
    return AccessFacts(
        tensor=t.name, text=_print(access), block=ctx.block_names[info.index], written=n == 0,
        shape=t.shape, dtype=t.dtype, scope=t.scope, role=t.role, bytes=t.size * dtype_bytes(t.dtype),
        element_bytes=dtype_bytes(t.dtype), loops=loops,
        reuse=math.prod(l.extent for l in info.loops if l.var not in indexed), reuse_loops=reuse_loops,
        reuse_loop=reuse_loop, reuse_distance_bytes=distance,
    )


def _reuse(analysis: Analysis, info: EquationInfo, access: A.Access,
           line_bytes: int = LINE_BYTES) -> tuple[str | None, float | None]:
    """The access's reuse loop and the bytes (in cache lines) one iteration
    of it touches: the reuse distance."""
    indexed = set()
    for index in access.indices or ():
        indexed |= affine.index_vars(index)
    for l in reversed(info.loops):
        if l.var not in indexed and l.extent > 1:
            return l.var, sum(working_set(analysis, l, line_bytes=line_bytes).values())
    return None, None



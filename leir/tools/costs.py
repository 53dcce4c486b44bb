"""The cost-model seam: features of a program read from its analysis, and
the ``CostModel`` protocol a learned latency model implements.

A cost model predicts a program's latency from ``program_features`` alone:
nothing is lowered, built or run, so a search can screen hundreds to
thousands of candidate programs per second (about 800/s for a tiled 512^3
matmul, 2,500/s for a naive one, on this 2-core machine) and measure only
the most promising few.
The model itself lives in ``leir_models`` (``leir_models.cost_model``, an
XGBoost booster) and is found through the entry-point group
``leir.cost_models`` (``load_cost_model``), so ``leir`` keeps working, and
is tested, without it (as with ``leir.tools.ranking``'s ``Ranker``).

Features (``FEATURE_NAMES``; ``program_features`` returns them in that
order, a fixed-length list of floats). Counts of iterations, operations and
bytes are ``log2(1 + x)``, loop extents ``log2(extent)``; a missing loop
or equation is padded with zeros (an extent with -1, a parallel depth
with -1: there 0 is a real value).

- ``prog.*``, the whole program: the target (``cuda`` or not); total loop
  iterations (the sum over equations of the product of their loops'
  extents); arithmetic operations (``leir.explain.program_operations``);
  compulsory bytes (the inputs and outputs, each moved once:
  ``leir.explain.compulsory_bytes``) and the arithmetic intensity, their
  ratio; nests, equations, loops; buffers declared with a scope (``@l``
  local, ``@s`` shared: what ``cache_write``/``cache_read`` make) and their
  bytes; global temporaries and their bytes (intermediate traffic); the
  share of the iterations in the two dominant equations; the machine's
  cores and f32 vector lanes; over every equation, the shares of the
  iterations under a parallel, a vectorized and an unrolled loop and of
  those whose innermost loop moves every access by at most one element,
  how often a parallel region starts (the iterations of the loops outside
  each outermost parallel loop), the operations per core and lane and the
  bytes each cache level fetches (as ``eqK.log2_traffic_*`` below), summed.
- ``eqK.*`` for the two dominant equations (``K`` = 0, 1: the most
  iterations first, ties in program order): present, share of the
  program's iterations, iterations, operations per iteration and in all,
  loops around it, whether it is a reduction, its reduction axes and their
  extent, the written element's bytes, its accesses.
- ``eqK.inP.*`` for the innermost four loops of that equation (``P`` = 0
  is the innermost): the kind, one-hot (``L`` serial, ``P`` parallel, ``V``
  vectorized, ``U`` unrolled, ``B`` thread-bound; ``leir.ast.KIND_WORDS``),
  the extent, whether it is a reduction axis of the equation; the working
  set of one iteration of the loop (``leir.explain.working_set``: the
  bytes of the cache lines the loops inside touch, over every equation
  under the loop) and its ratio to the machine's L1d, L2 and L3; the reuse
  over one full pass of the loop (element accesses made / distinct
  elements touched: how often each element is used again once loaded).
- ``eqK.in0_stride*``, ``eqK.in1_stride*``, ``eqK.write_stride*``: per
  access of the equation, the element stride along the innermost loop and
  the next one out (``leir.explain.access_strides``), counted as 0 (the
  same element: a register), 1 (contiguous: vectorizable) or other (a new
  cache line per iteration, or unknown); and the written access's class
  along the innermost loop, one-hot.
- ``eqK.vector_*``: vector lanes (the product of the ``V`` loops'
  extents, 0 without one), whether the vectorized loop is the innermost,
  accesses with stride 1 and with another stride (not 0) along it, and the
  lanes' bytes over the machine's vector register (1 fills it).
- ``eqK.parallel_*``: parallel iterations (the product of the ``P`` loops'
  extents), the depth of the outermost parallel loop (-1 without one: an
  inner parallel loop starts its threads once per outer iteration), those
  iterations per core, the balance (ceil(iterations / cores) * cores /
  iterations: 1 when every core gets as many), and the iterations of the
  equation per parallel iteration (the work a thread gets).
- ``eqK.unroll_*``: unrolled iterations (the product of the ``U`` loops'
  extents) and the ``U`` loops; ``eqK.gpu_*``: threads per block and
  blocks (``B`` loops over ``t*`` and ``b*`` axes).
- memory and compute, roughly: the nest's footprint (the working set of a
  full pass of its outermost loop), a thread's working set (one iteration
  of the outermost parallel loop), the bytes each of L1d, L2 and L3 would
  fetch (``eqK.log2_traffic_*``: the innermost loop whose full pass does
  not fit in the cache fetches the working set of one of its iterations on
  each of its iterations; a nest that fits, its footprint once), and the
  operations per core and vector lane (iterations * operations / (cores
  used * lanes)).
"""

from __future__ import annotations

import logging
import math
from typing import Protocol, Sequence, runtime_checkable

from leir import affine
from leir import ast as A
from leir.explain.facts import _stride  # one access's stride: what access_strides is made of
from leir.explain.facts import compulsory_bytes, operations
from leir.explain.facts import _accesses, dtype_bytes
from leir.explain.machine import Machine
from leir.semantics import Analysis, EquationInfo

__all__ = ["ENTRY_POINT_GROUP", "FEATURE_NAMES", "CostModel", "load_cost_model", "program_features"]

logger = logging.getLogger(__name__)

#: The entry-point group an installed cost model registers under
#: (``leir_models`` registers ``default``).
ENTRY_POINT_GROUP = "leir.cost_models"

#: Loop kinds in the one-hot order of ``eqK.inP.kind_*``.
KINDS = tuple(A.LOOP_KINDS)  # L P V U B
#: Equations described one by one, and loops per equation (innermost first).
TOP_EQUATIONS = 2
INNER_LOOPS = 4

_PROGRAM = (
    "prog.target_cuda", "prog.log2_iterations", "prog.log2_operations", "prog.log2_compulsory_bytes",
    "prog.log2_intensity", "prog.nests", "prog.equations", "prog.loops", "prog.local_buffers",
    "prog.shared_buffers", "prog.log2_local_bytes", "prog.log2_shared_bytes", "prog.global_temporaries",
    "prog.log2_temporary_bytes", "prog.top_share", "prog.log2_cores", "prog.vector_lanes_f32",
    "prog.parallel_share", "prog.vector_share", "prog.unrolled_share", "prog.contiguous_share",
    "prog.log2_parallel_starts", "prog.log2_ops_per_lane_core", "prog.log2_traffic_l1", "prog.log2_traffic_l2",
    "prog.log2_traffic_l3",
)
_EQUATION = (
    "present", "share", "log2_iterations", "ops_per_iteration", "log2_operations", "loops", "reduction",
    "reduce_axes", "log2_reduce_extent", "element_bytes", "accesses",
)
_LOOP = tuple(f"kind_{k}" for k in KINDS) + (
    "log2_extent", "reduction_axis", "log2_ws_bytes", "ws_over_l1", "ws_over_l2", "ws_over_l3", "log2_reuse",
)
_TAIL = (
    "in0_stride0", "in0_stride1", "in0_stride_other", "in1_stride0", "in1_stride1", "in1_stride_other",
    "write_stride0", "write_stride1", "write_stride_other",
    "vector_lanes", "vector_innermost", "vector_stride1", "vector_stride_other", "vector_fill",
    "log2_parallel_extent", "parallel_depth", "parallel_per_core", "parallel_balance",
    "log2_work_per_parallel_iteration",
    "log2_unrolled", "unroll_loops", "log2_gpu_threads", "log2_gpu_blocks",
    "log2_nest_bytes", "log2_parallel_ws_bytes", "log2_traffic_l1", "log2_traffic_l2", "log2_traffic_l3",
    "log2_ops_per_lane_core",
)


def _names() -> tuple[str, ...]:
    names = list(_PROGRAM)
    for k in range(TOP_EQUATIONS):
        names += [f"eq{k}.{n}" for n in _EQUATION]
        for p in range(INNER_LOOPS):
            names += [f"eq{k}.in{p}.{n}" for n in _LOOP]
        names += [f"eq{k}.{n}" for n in _TAIL]
    return tuple(names)


#: The name of each feature, in ``program_features``' order.
FEATURE_NAMES: tuple[str, ...] = _names()
_PER_EQUATION = len(_EQUATION) + INNER_LOOPS * len(_LOOP) + len(_TAIL)


def _log2(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


class _Features:
    """The memoised queries one program's features share: each index's
    affine form (what every footprint and stride is computed from), and
    the working set and reuse of each loop (several equations share loops).

    The working set and footprints are ``leir.explain.facts``' own
    definitions (``working_set``, ``footprint``, ``footprint_lines``,
    ``access_strides``), computed here with each index linearized once per
    program rather than once per query: on a tiled matmul that is half the
    time. tests/test_costs.py checks that they agree on every example."""

    def __init__(self, analysis: Analysis, machine: Machine):
        self.analysis = analysis
        self.machine = machine
        self._loop: dict[int, tuple[float, float]] = {}
        self._accesses: dict[int, list[A.Access]] = {}
        self._forms: dict[int, tuple] = {}
        self._rows: dict[str, list[int]] = {}
        #: id(loop) -> (equation, the loop's position among its loops), for every equation under it.
        self._under: dict[int, list[tuple[EquationInfo, int]]] = {}
        for info in analysis.equations:
            for d, l in enumerate(info.loops):
                self._under.setdefault(id(l), []).append((info, d))

    def accesses(self, info: EquationInfo) -> list[A.Access]:
        got = self._accesses.get(info.index)
        if got is None:
            got = self._accesses[info.index] = _accesses(info.equation)
        return got

    def form(self, index: A.Expr):
        """(affine form or None, variables) of an index expression."""
        got = self._forms.get(id(index))
        if got is None:
            got = self._forms[id(index)] = (affine.linearize(index), affine.index_vars(index), index)
        return got

    def _dims(self, accesses) -> list[tuple[int, int, int]] | None:
        """``leir.explain.facts._dim_counts`` with the cached forms."""
        t = self.analysis.tensors.get(accesses[0][0].tensor)
        if t is None:
            return None
        rank = len(t.shape)
        prepared = []
        for access, loops, running in accesses:
            if not access.indices or len(access.indices) != rank:
                prepared = None
                break
            prepared.append((access.indices, {l.var: l.extent for l in running}, {l.var: l.start for l in loops}))
        out = []
        for d, size in enumerate(t.shape):
            lo = hi = None
            points = 0
            for indices, moving, fixed in prepared or ((None, None, None),):
                if indices is None:
                    lo, hi, points = 0, size - 1, size
                    break
                form, names, index = self.form(indices[d])
                pts = 1
                ranges = {}
                for v in names:
                    start = fixed.get(v, 0)
                    extent = moving.get(v)
                    if extent is None:
                        ranges[v] = (start, start)
                    else:
                        pts *= extent
                        ranges[v] = (start, start + extent - 1)
                if form is not None:
                    blo, bhi = form.bounds(ranges)
                else:
                    b = affine.bounds(index, ranges)
                    if b is None:
                        lo, hi, points = 0, size - 1, size
                        break
                    blo, bhi = b
                lo = blo if lo is None else min(lo, blo)
                hi = bhi if hi is None else max(hi, bhi)
                points += pts
            span = min(hi - lo + 1, size)
            out.append((max(1, min(span, points)), max(1, span), size))
        return out

    def _lines(self, dims, dtype: str) -> int:
        """``leir.explain.facts.footprint_lines`` from ``_dims``."""
        from leir.explain.facts import dims_lines

        return dims_lines(dims, dtype_bytes(dtype), self.machine.line_bytes or 64)

    def loop(self, loop: A.Loop) -> tuple[float, float, float]:
        """(working set of one iteration of ``loop`` in bytes of cache lines,
        as ``leir.explain.working_set``; reuse over one full pass of it:
        element accesses made per distinct element touched; the working set
        of one full pass, as ``working_set(inclusive=True)``), over every
        equation under it."""
        got = self._loop.get(id(loop))
        if got is not None:
            return got
        inner: dict[str, list] = {}
        whole: dict[str, list] = {}
        made = 0
        for info, n in self._under.get(id(loop), ()):
            accs = self.accesses(info)
            made += math.prod(l.extent for l in info.loops[n:]) * len(accs)
            for a in accs:
                inner.setdefault(a.tensor, []).append((a, info.loops, info.loops[n + 1:]))
                whole.setdefault(a.tensor, []).append((a, info.loops, info.loops[n:]))
        tensors = self.analysis.tensors
        line_bytes = self.machine.line_bytes or 64
        ws = 0.0
        for name, accs in inner.items():
            dims = self._dims(accs) if name in tensors else None
            if dims is not None:
                ws += self._lines(dims, tensors[name].dtype) * line_bytes
        touched = 0
        passing = 0.0
        for name, accs in whole.items():
            dims = self._dims(accs) if name in tensors else None
            if dims is not None:
                touched += math.prod(c for c, _, _ in dims)
                passing += self._lines(dims, tensors[name].dtype) * line_bytes
        got = self._loop[id(loop)] = (ws, made / touched if touched else 0.0, passing)
        return got

    def traffic(self, info: EquationInfo, cache: int) -> float:
        """Bytes a cache of ``cache`` bytes fetches for the equation's nest,
        estimated from working sets: the innermost loop whose full pass no
        longer fits fetches the working set of one of its iterations anew on
        each iteration (one of the loops outside it times its extent); when
        the whole nest fits, its footprint once."""
        loops = info.loops
        if not loops:
            return 0.0
        for d in range(len(loops) - 1, -1, -1):
            ws, _, passing = self.loop(loops[d])
            if passing > cache:
                return math.prod(l.extent for l in loops[: d + 1]) * ws
        return self.loop(loops[0])[2]

    def rows(self, name: str) -> list[int]:
        got = self._rows.get(name)
        if got is None:
            strides, acc = [], 1
            for n in reversed(self.analysis.tensors[name].shape):
                strides.append(acc)
                acc *= n
            got = self._rows[name] = strides[::-1]
        return got

    def stride(self, access: A.Access, var: str, loops) -> int | None:
        """``leir.explain.facts._stride`` with the cached forms (through
        ``//`` and ``%`` it asks ``_stride`` itself, which evaluates)."""
        if not access.indices:
            return 0
        t = self.analysis.tensors.get(access.tensor)
        if t is None or len(t.shape) != len(access.indices):
            return None
        stride = 0
        for index, row in zip(access.indices, self.rows(access.tensor)):
            form, names, _ = self.form(index)
            if form is None:
                if var in names:
                    return _stride(self.analysis, access, var, loops)
                continue
            stride += form.coeff(var) * row
        return stride

    def strides(self, info: EquationInfo, var: str) -> dict[str, int | None]:
        """``leir.explain.access_strides``: per tensor (a second access with
        another stride as ``NAME#k``), the guard's accesses left out."""
        eq = info.equation
        accesses = self.accesses(info)
        if eq.predicate is not None:
            accesses = [eq.lhs] + [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
        out: dict[str, int | None] = {}
        for a in accesses:
            t = self.analysis.tensors.get(a.tensor)
            if t is None or not a.indices or not t.shape or len(t.shape) != len(a.indices):
                continue
            s = self.stride(a, var, info.loops)
            name = a.tensor
            if name in out and out[name] != s:
                name = f"{a.tensor}#{len(out)}"
            out[name] = s
        return out


def _stride_counts(strides: dict[str, int | None]) -> tuple[int, int, int]:
    zero = sum(1 for s in strides.values() if s == 0)
    one = sum(1 for s in strides.values() if s is not None and abs(s) == 1)
    return zero, one, len(strides) - zero - one


def _equation_features(f: _Features, info: EquationInfo, total: int) -> list[float]:
    analysis, machine = f.analysis, f.machine
    loops = info.loops
    iterations = info.iterations
    ops = operations(info.equation.rhs)
    reduce_axes = set(info.reduce_axes)
    reduction = info.combiner is not None and info.kind in ("reduce", "update")
    out_tensor = analysis.tensors.get(info.equation.lhs.tensor)
    element_bytes = dtype_bytes(out_tensor.dtype) if out_tensor is not None else 4.0
    accesses = f.accesses(info)
    reduce_extent = math.prod(l.extent for l in loops if l.var in reduce_axes)
    row = [1.0, iterations / total if total else 0.0, _log2(iterations), float(ops), _log2(iterations * ops),
           float(len(loops)), float(reduction), float(len(reduce_axes)), _log2(reduce_extent) if reduce_axes else 0.0,
           element_bytes, float(len(accesses))]
    l1, l2, l3 = machine.l1d or 1, machine.l2 or 1, machine.l3 or 1
    for p in range(INNER_LOOPS):
        if p >= len(loops):
            row += [0.0] * len(KINDS) + [-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            continue
        loop = loops[-1 - p]
        row += [float(loop.kind == k) for k in KINDS]
        ws, reuse, _ = f.loop(loop)
        row += [math.log2(loop.extent) if loop.extent > 0 else -1.0, float(loop.var in reduce_axes),
                _log2(ws), ws / l1, ws / l2, ws / l3, _log2(reuse)]
    # Strides along the innermost two loops, and the written access's class.
    for p in range(2):
        if p < len(loops):
            row += _stride_counts(f.strides(info, loops[-1 - p].var))
        else:
            row += [0.0, 0.0, 0.0]
    write = [0.0, 0.0, 0.0]
    if loops:
        lhs = info.equation.lhs
        if not lhs.indices:
            write[0] = 1.0
        else:
            s = f.stride(lhs, loops[-1].var, loops)
            write[0 if s == 0 else 1 if s is not None and abs(s) == 1 else 2] = 1.0
    row += write
    # Vectors.
    vloops = [l for l in loops if l.kind == "V"]
    lanes = math.prod(l.extent for l in vloops) if vloops else 0
    if vloops:
        vs = f.strides(info, vloops[-1].var)
        _, v1, vother = _stride_counts(vs)
        row += [float(lanes), float(loops[-1].kind == "V"), float(v1), float(vother),
                lanes * element_bytes / (machine.vector_bytes or 16)]
    else:
        row += [0.0, 0.0, 0.0, 0.0, 0.0]
    # Threads on the CPU.
    ploops = [(d, l) for d, l in enumerate(loops) if l.kind == "P"]
    cores = max(1, machine.cores)
    if ploops:
        extent = math.prod(l.extent for _, l in ploops)
        row += [_log2(extent), float(ploops[0][0]), extent / cores,
                math.ceil(extent / cores) * cores / extent if extent else 0.0, _log2(iterations / max(1, extent))]
    else:
        row += [0.0, -1.0, 0.0, 0.0, _log2(iterations)]
    uloops = [l for l in loops if l.kind == "U"]
    row += [_log2(math.prod(l.extent for l in uloops)) if uloops else 0.0, float(len(uloops))]
    threads = math.prod(l.extent for l in loops if l.kind == "B" and l.var.startswith("t"))
    blocks = math.prod(l.extent for l in loops if l.kind == "B" and l.var.startswith("b"))
    row += [_log2(threads) if threads > 1 else 0.0, _log2(blocks) if blocks > 1 else 0.0]
    # Memory and compute, roughly: the nest's footprint, a thread's working
    # set, what each cache level fetches, operations per core and lane.
    row += [_log2(f.loop(loops[0])[2]) if loops else 0.0, _log2(f.loop(ploops[0][1])[0]) if ploops else 0.0,
            _log2(f.traffic(info, l1)), _log2(f.traffic(info, l2)), _log2(f.traffic(info, l3))]
    used = min(cores, math.prod(l.extent for _, l in ploops)) if ploops else 1
    row.append(_log2(iterations * max(1, ops) / (used * max(1, lanes))))
    return row


def _program_loops(program: A.Program) -> int:
    n = 0
    stack = list(program.units)
    while stack:
        nest = stack.pop()
        n += len(nest.loops)
        stack.extend(i for i in nest.body if isinstance(i, A.Nest))
    return n


def program_features(analysis: Analysis, machine: Machine | None = None, *, target: str = "llvm") -> list[float]:
    """The ``FEATURE_NAMES`` of ``analysis`` (on ``machine``, this CPU by
    default, for ``target``), a list of floats of fixed length, computed
    from the analysis alone (nothing is built)."""
    machine = machine or Machine.detect()
    f = _Features(analysis, machine)
    equations = analysis.equations
    total = sum(i.iterations for i in equations)
    ops = sum(i.iterations * operations(i.equation.rhs) for i in equations)
    compulsory = compulsory_bytes(analysis)
    scoped = {"l": [0, 0.0], "s": [0, 0.0]}
    temporaries, temporary_bytes = 0, 0.0
    for t in analysis.tensors.values():
        nbytes = t.size * dtype_bytes(t.dtype)
        if t.scope in scoped:
            scoped[t.scope][0] += 1
            scoped[t.scope][1] += nbytes
        elif t.role == "tmp":
            temporaries += 1
            temporary_bytes += nbytes
    # Every equation, summed (weighted by its iterations where a share).
    shares = [0.0, 0.0, 0.0, 0.0]
    starts, compute, traffic = 0.0, 0.0, [0.0, 0.0, 0.0]
    caches = (machine.l1d or 1, machine.l2 or 1, machine.l3 or 1)
    cores = max(1, machine.cores)
    started: set[int] = set()
    for info in equations:
        loops, n = info.loops, info.iterations
        ploops = [(d, l) for d, l in enumerate(loops) if l.kind == "P"]
        lanes = math.prod(l.extent for l in loops if l.kind == "V")
        kinds = {l.kind for l in loops}
        inner = f.strides(info, loops[-1].var) if loops else {}
        shares[0] += n * bool(ploops)
        shares[1] += n * ("V" in kinds)
        shares[2] += n * ("U" in kinds)
        shares[3] += n * all(s is not None and abs(s) <= 1 for s in inner.values())
        if ploops and id(ploops[0][1]) not in started:
            started.add(id(ploops[0][1]))
            starts += math.prod(l.extent for l in loops[: ploops[0][0]])
        used = min(cores, math.prod(l.extent for _, l in ploops)) if ploops else 1
        compute += n * max(1, operations(info.equation.rhs)) / (used * lanes)
        for c, size in enumerate(caches):
            traffic[c] += f.traffic(info, size)
    top = sorted(equations, key=lambda i: (-i.iterations, i.index))[:TOP_EQUATIONS]
    row = [float(target == "cuda" or target.startswith("cuda") or target.startswith("rpc-cuda")),
           _log2(total), _log2(ops), _log2(compulsory), math.log2((ops + 1.0) / (compulsory + 1.0)),
           float(len(analysis.program.units)), float(len(equations)), float(_program_loops(analysis.program)),
           float(scoped["l"][0]), float(scoped["s"][0]), _log2(scoped["l"][1]), _log2(scoped["s"][1]),
           float(temporaries), _log2(temporary_bytes),
           sum(i.iterations for i in top) / total if total else 0.0,
           math.log2(max(1, machine.cores)), (machine.vector_bytes or 16) / 4,
           *(x / total if total else 0.0 for x in shares), _log2(starts), _log2(compute),
           *(_log2(t) for t in traffic)]
    for k in range(TOP_EQUATIONS):
        if k < len(top):
            row += _equation_features(f, top[k], total)
        else:
            row += [0.0] * _PER_EQUATION
    return [float(v) for v in row]


# --------------------------------------------------------------------- models


@runtime_checkable
class CostModel(Protocol):
    """Predicts programs' latencies from their analyses (nothing built)."""

    #: What the model is, for reports ("xgboost", a file name).
    name: str

    def predict(self, analyses: Sequence[Analysis], target: str) -> list[float]:
        """Predicted latency of each of ``analyses`` on ``target``, in ms
        (lower is faster), in their order."""
        ...

    def update(self, analyses: Sequence[Analysis], ms: Sequence[float], target: str) -> None:
        """Learn from ``ms``, the latencies measured for ``analyses`` on
        ``target`` during a search."""
        ...


def load_cost_model(name: str | None = None) -> CostModel | None:
    """The cost model installed under the entry-point group
    ``leir.cost_models`` named ``name`` (None: ``default``, else the first
    by name), loaded; None when there is none or it fails to load (the
    reason is logged at debug level), so callers fall back to heuristics."""
    from importlib import metadata

    try:
        found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as e:  # noqa: BLE001 - a broken distribution's metadata
        logger.debug("cost models: reading the entry points failed: %s", e)
        return None
    if not found:
        logger.debug("cost models: nothing is installed under %s", ENTRY_POINT_GROUP)
        return None
    found.sort(key=lambda ep: ep.name)
    if name is None:
        chosen = next((ep for ep in found if ep.name == "default"), found[0])
    else:
        chosen = next((ep for ep in found if ep.name == name), None)
        if chosen is None:
            logger.debug("cost models: no %r among %s", name, ", ".join(ep.name for ep in found))
            return None
    try:
        loader = chosen.load()
        model = loader() if callable(loader) and not isinstance(loader, CostModel) else loader
    except Exception as e:  # noqa: BLE001 - an installed model that cannot load is no model
        logger.debug("cost models: loading %s (%s) failed: %s: %s", chosen.name, chosen.value, type(e).__name__, e)
        return None
    if not isinstance(model, CostModel):
        logger.debug("cost models: %s gave %r, not a CostModel", chosen.name, type(model).__name__)
        return None
    return model

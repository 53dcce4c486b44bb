"""Factor a reduction over one of its loops into partial results and a final combination.

``C_{i} += e`` over loops ``k`` and ``j`` becomes two nests: the first
accumulates a partial result for each iteration of ``k`` into a new
temporary ``C_rf`` (``k`` is now a spatial axis of it), the second combines
the partial results into ``C``. Iterations of ``k`` no longer accumulate
into one element, so ``k`` can then be parallelized, vectorized or bound to
threads; the price is the temporary and the final combination.

It requires:

- an equation that is a reduction with its implied initial value (the first
  write of its tensor);
- the only equation writing its tensor;
- a reduction in a shape TVM recognises (``C = C + e``, ``C = C * e``, or
  ``max(C, e)`` / ``min(C, e)`` of an integer tensor: TVM starts a float max
  at the lowest finite value, LEIR at -inf);
- a reduction without a guard (TVM 0.27 drops it from the combining nest);
- a serial (L) reduction loop of it with at least 2 iterations;
- the reduction alone under its outermost loop (TVM 0.27 refuses an equation
  before it there and fails internally on one after it);
- a program TVM calls a stage pipeline (every tensor written before it is
  read, and every read covered by the writes before it);
- the new dimension of the partial results first (``factor_axis`` 0) or last
  (the tensor's rank).

Example: partial sums over the inner part of a split reduction

    step: {"block": "S", "loop": "ki", "factor_axis": 1}

    before:
    L^{64}_{i}
      L^{16}_{ko}
        L^{8}_{ki}$0 [
          S_{i} += X_{i,ko*8+ki};
        ];

    after:
    L^{64}_{i}
      L^{16}_{ko}
        L^{8}_{ki} [
          S_rf_{i,ki} += X_{i,ko*8+ki};
        ];

    L^{64}_{i}
      L^{8}_{ki} [
        S_{i} += S_rf_{i,ki};
      ];

Example: one partial product per iteration of the only reduction loop

    step: {"block": "P", "loop": "j", "factor_axis": 0}

    before:
    L^{16}_{i}
      L^{10}_{j}$0 [
        P_{i} *= X_{i,j};
      ];

    after:
    L^{16}_{i}
      L^{10}_{j} [
        P_rf_{j,i} = X_{i,j};
      ];

    L^{16}_{i}
      L^{10}_{j} [
        P_{i} *= P_rf_{j,i};
      ];

Example: not a float max (TVM's initial value differs)

    step: {"block": "M", "loop": "j", "factor_axis": 0}

    before:
    L^{16}_{i}
      L^{10}_{j}$0 [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    refused: rfactor-combiner
"""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir import value_types as VT
from leir.printer import access_text, print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, int_arg, loop_arg, tvm_loop

from leir.transforms.lib.reductions import reduction_block_refusal

ID = "rfactor"
GROUP = "loop"
TITLE = "Factor a reduction"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "reduction_factorization"


class NotReduction(NotApplicable):
    """The equation is not a reduction with its implied initial value (the first write of its
    tensor)."""

    code = "rfactor-not-reduction"


class WrittenElsewhere(NotApplicable):
    """Another equation writes the reduction's tensor too."""

    code = "rfactor-written-elsewhere"


class Combiner(NotApplicable):
    """The reduction is not in a shape TVM recognises (``C = C + e``, ``C = C * e``, or an
    integer ``max``/``min``)."""

    code = "rfactor-combiner"


class Guard(NotApplicable):
    """The reduction has a guard (TVM 0.27 drops it from the combining nest)."""

    code = "rfactor-guard"


class NotReductionLoop(NotApplicable):
    """The loop is not a reduction loop of the equation (it indexes the written element)."""

    code = "rfactor-not-reduction-loop"


class LoopNotSerial(NotApplicable):
    """The reduction loop is not serial (L): only a serial loop is factored."""

    code = "rfactor-loop-not-serial"


class LoopTooShort(NotApplicable):
    """The reduction loop has fewer than 2 iterations: nothing to factor."""

    code = "rfactor-loop-too-short"


class NotAlone(NotApplicable):
    """The reduction's outermost loop holds another equation: TVM 0.27 refuses one before it and
    fails on one after it."""

    code = "rfactor-not-alone"


class NotStagePipeline(NotApplicable):
    """The program is not what TVM calls a stage pipeline: a tensor is written after an equation
    reads it, or a read is not covered by earlier writes."""

    code = "rfactor-not-stage-pipeline"


class WrongFactorAxis(NotApplicable):
    """``factor_axis`` is neither first (0) nor last (the tensor's rank) among the partial
    results' dimensions."""

    code = "rfactor-wrong-factor-axis"


def _reads(info: EquationInfo) -> list[A.Access]:
    eq = info.equation
    exprs = [eq.rhs] + ([eq.predicate] if eq.predicate is not None else [])
    return [n for e in exprs for n in A.walk(e) if isinstance(n, A.Access)]


def stage_pipeline_problem(ctx: Context) -> tuple[str, str, A.Span | None] | None:
    """``_stage_pipeline_problem``, once per context (a property of the
    whole program, asked on every listing at a reduction loop)."""
    if "_stage_pipeline_problem" not in ctx.__dict__:
        ctx.__dict__["_stage_pipeline_problem"] = _stage_pipeline_problem(ctx)
    return ctx.__dict__["_stage_pipeline_problem"]


def _stage_pipeline_problem(ctx: Context) -> tuple[str, str, A.Span | None] | None:
    """Why TVM would not call the program a stage pipeline (rfactor needs
    one): a tensor written after an earlier equation read it, or a read
    that the earlier writes of its tensor may not cover. Conservative: a
    cover is proved per dimension for affine indices of unguarded writers
    (equal coefficients on the loops both share, and the read's range over
    its own inner loops inside the writer's), as TVM's analyser proves it."""
    equations = ctx.analysis.equations
    reads = [_reads(info) for info in equations]
    first_read: dict[str, tuple[int, A.Access]] = {}
    for info, accesses in zip(equations, reads):
        lhs = info.equation.lhs
        earlier = first_read.get(lhs.tensor)
        if earlier is not None and earlier[0] != info.index:
            reader = equations[earlier[0]]
            return (f"{lhs.tensor} is written after {access_text(earlier[1])} reads it",
                    f"{access_text(lhs)} writes {lhs.tensor} after {access_text(reader.equation.lhs)} read it "
                    f"({access_text(earlier[1])}): TVM factors a reduction only in a program where every tensor is "
                    f"written before it is read (a stage pipeline)", info.equation.span)
        for a in accesses:
            first_read.setdefault(a.tensor, (info.index, a))
    writers: dict[str, list[EquationInfo]] = {}
    for info, accesses in zip(equations, reads):
        for a in accesses:
            producers = [p for p in writers.get(a.tensor, []) if p is not info]
            if producers and not _covered(producers, info, a):
                return (f"{access_text(a)} may read elements no earlier equation writes",
                        f"{access_text(a)} in {access_text(info.equation.lhs)} reads elements of {a.tensor} that its earlier "
                        f"writers may not all write (could not prove it): TVM factors a reduction only in a program "
                        f"where every read is covered by the writes before it (a stage pipeline)",
                        a.span or info.equation.span)
        writers.setdefault(info.equation.lhs.tensor, []).append(info)
    return None


def _covered(producers: list[EquationInfo], consumer: EquationInfo, read: A.Access) -> bool:
    """TVM groups the writers by their innermost loop shared with the
    reader; each group must cover the read (one writer of it, here)."""
    groups: dict[int, list[EquationInfo]] = {}
    for p in producers:
        groups.setdefault(_shared(p, consumer), []).append(p)
    return all(any(_covers(p, consumer, read, shared) for p in group) for shared, group in groups.items())


def _shared(a: EquationInfo, b: EquationInfo) -> int:
    n = 0
    while n < min(len(a.loops), len(b.loops)) and a.loops[n] is b.loops[n]:
        n += 1
    return n


def _covers(producer: EquationInfo, consumer: EquationInfo, read: A.Access, shared: int) -> bool:
    write = producer.equation.lhs
    if producer.equation.predicate is not None:
        return False  # what a guarded write covers is not proved here
    if (write.indices or ()) == () and (read.indices or ()) == ():
        return True
    if len(write.indices or ()) != len(read.indices or ()):
        return False
    outer = {l.var for l in producer.loops[:shared]}
    inner_w = affine.loop_ranges(producer.loops[shared:])
    inner_r = affine.loop_ranges(consumer.loops[shared:])
    for wi, ri in zip(write.indices, read.indices):
        if wi == ri and all(inner_w.get(v) == inner_r.get(v) for v in affine.index_vars(wi) - outer):
            continue
        fw, fr = affine.linearize(wi), affine.linearize(ri)
        if fw is None or fr is None:
            return False
        if [c for c in fw.coeffs if c[0] in outer] != [c for c in fr.coeffs if c[0] in outer]:
            return False
        rest_w = affine.Affine(tuple(c for c in fw.coeffs if c[0] not in outer), fw.const)
        rest_r = affine.Affine(tuple(c for c in fr.coeffs if c[0] not in outer), fr.const)
        if not (rest_w.variables <= inner_w.keys() and rest_r.variables <= inner_r.keys()):
            return False
        (lw, hw), (lr, hr) = rest_w.bounds(inner_w), rest_r.bounds(inner_r)
        if lr < lw or hr > hw:
            return False
    return True


# ------------------------------------------------------------------ rfactor

_BLOCK_ERRORS = {"not-reduction": NotReduction, "written-elsewhere": WrittenElsewhere, "guard": Guard}


def factor_axes(ctx: Context, info: EquationInfo) -> tuple[int, ...]:
    """Where the partial results' new dimension may go: first or last."""
    rank = len(ctx.analysis.tensors[info.equation.lhs.tensor].shape)
    return (0,) if rank == 0 else (0, rank)


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for site in ctx.loops_at(at):
        info = ctx.analysis.equations[site.equations[0]]
        if _refusal(ctx, site, info) is not None:
            continue
        lhs = info.equation.lhs
        indices = [print_expr(i, index=True) for i in lhs.indices or ()]
        for axis in factor_axes(ctx, info):
            partial = indices[:axis] + [site.loop.var] + indices[axis:]
            title = f"Factor the reduction into {lhs.tensor} over loop {site.loop.var} (partials {lhs.tensor}_rf_{{{','.join(partial)}}})"
            args = {"block": ctx.block_names[info.index], "loop": site.loop.var, "factor_axis": axis}
            out.append(Candidate(Step(ID, args), title, site.loop.span))
    return out


def _refusal(ctx: Context, site: LoopSite, info: EquationInfo) -> NotApplicable | None:
    loop = site.loop
    refusal = reduction_block_refusal(ctx, info, _BLOCK_ERRORS)
    if refusal is not None:
        return refusal
    eq = info.equation
    if eq.predicate is not None:
        guard = print_expr(eq.predicate, declared=frozenset(ctx.analysis.tensors))
        return Guard(f"the reduction {access_text(eq.lhs)} has a guard ({guard})",
                     f"TVM 0.27's rfactor keeps the guard {guard} on the partial results but drops it from the nest "
                     f"that combines them, which then reads partial results never written (measured); factor the "
                     f"reduction before splitting it imperfectly", eq.span)
    if not _tvm_combiner(ctx, info):
        dtype = ctx.analysis.tensors[eq.lhs.tensor].dtype
        if info.combiner in ("max", "min") and VT.is_float_dtype(dtype):
            why = (f"TVM factors a {dtype} {info.combiner} only from its {'lowest' if info.combiner == 'max' else 'highest'} "
                   f"finite value, but LEIR starts it at {'-' if info.combiner == 'max' else ''}inf")
        else:
            why = ("TVM recognises only C = C + e, C = C * e, and max(C, e) or min(C, e) of integers, with the "
                   "accumulated element first (write C -= e as C += -e)")
        return Combiner(f"TVM cannot factor the reduction {access_text(eq.lhs)}", why, eq.span)
    if loop.var not in info.reduce_axes:
        return NotReductionLoop(f"loop {loop.var} is not a reduction loop of {eq.lhs.tensor}",
                                f"loop {loop.var} indexes {access_text(eq.lhs)}, so it is not one of the loops the "
                                f"reduction accumulates over ({', '.join(info.reduce_axes) or 'none'})", loop.span)
    if loop.kind != "L":
        kind = A.KIND_WORDS[loop.kind]
        return LoopNotSerial(f"loop {loop.var} is {kind}",
                             f"only a serial (L) loop is factored; {loop.var} is {kind}", loop.span)
    if loop.extent < 2:
        return LoopTooShort(f"loop {loop.var} has {loop.extent} iteration",
                            f"a loop of {loop.extent} iteration has nothing to factor", loop.span)
    top = next(s for s in ctx.loop_sites if s.loop is info.loops[0])
    if len(top.equations) > 1:
        other = next(ctx.analysis.equations[k] for k in top.equations if k != info.index)
        return NotAlone(f"loop {top.loop.var} also holds {access_text(other.equation.lhs)}",
                        f"the outermost loop {top.loop.var} around {eq.lhs.tensor} also computes "
                        f"{access_text(other.equation.lhs)}: TVM 0.27 factors a reduction only when its outermost loop "
                        f"holds nothing else (it refuses an equation before the reduction and fails internally on "
                        f"one after it); split the nest first (operator fission)", loop.span)
    problem = stage_pipeline_problem(ctx)
    if problem is not None:
        return NotStagePipeline(*problem)
    return None


def _tvm_combiner(ctx: Context, info: EquationInfo) -> bool:
    """TVM 0.27's reducers, as they match our lowering: ``x + y`` and
    ``x * y`` with the accumulated element on the left, ``max``/``min``
    with it first and an integer identity (measured: ``e + C``, ``C - e``,
    ``max(e, C)`` and float max/min are refused)."""
    eq = info.equation
    rhs = eq.rhs
    dtype = ctx.analysis.tensors[eq.lhs.tensor].dtype
    if dtype == "bool":
        return False
    if isinstance(rhs, A.Binary) and rhs.op in ("+", "*"):
        return _is_self(rhs.lhs, eq.lhs)
    if isinstance(rhs, A.Call) and rhs.func in ("max", "min"):
        return _is_self(rhs.args[0], eq.lhs) and VT.is_integer_dtype(dtype)
    return False


def _is_self(e: A.Expr, lhs: A.Access) -> bool:
    return isinstance(e, A.Access) and e.tensor == lhs.tensor and e.indices == lhs.indices


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    info = ctx.equation_of_block(args["block"])
    factor_axis = int_arg(args, "factor_axis", ID)
    refusal = _refusal(ctx, site, info)
    if refusal is not None:
        raise refusal
    axes = factor_axes(ctx, info)
    if factor_axis not in axes:
        raise WrongFactorAxis(f"factor_axis {factor_axis} is neither first nor last",
                              f"the partial results of {info.equation.lhs.tensor} get a new dimension for loop "
                              f"{site.loop.var}, placed first (0) or last ({axes[-1]}); got {factor_axis}",
                              site.loop.span)


def schedule(sch, ctx: Context, args: dict) -> None:
    sch.rfactor(tvm_loop(sch, args["block"], args["loop"]), args["factor_axis"])


def rfactor(program, block: str, loop: str, factor_axis: int = 0):
    """Apply a reduction factorization (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop, "factor_axis": factor_axis}))

"""What the steps that change a loop's kind share: the names of the kinds,
the loops of given kinds around and inside a loop, and whether the
iterations of a loop can run at once (parallel, vectorized and thread-bound
loops all do), with TVM's guard check; and the vector lanes a GPU kernel has.
Moved from ``parallelize`` (and ``GPU_LANES`` from ``vectorize``), which
import them back."""

from __future__ import annotations

from dataclasses import dataclass

from leir import affine
from leir import ast as A
from leir.ast import Span
from leir.printer import access_text
from leir.semantics import EquationInfo
from leir.transforms.base import Context, LoopSite


#: Most iteration points enumerated to prove that iterations write distinct
#: elements through a non-affine index (``f//8``, ``f%8`` after a fusion).
#: Candidates must stay cheap: 2^16 points take about a millisecond.
MAX_ENUMERATED = 1 << 16


# ------------------------------------------------ what runs at once, shared
#
# Parallel, vectorized and thread-bound loops all run their iterations at
# once, so vectorize and bind use these checks too, each with its own error
# classes.


@dataclass(frozen=True)
class Problem:
    """Why the iterations of a loop cannot run at once. ``reason`` is one
    of ``reduction-axis``, ``not-compact-dataflow``, ``dependence``."""

    reason: str
    short: str
    detail: str
    span: Span | None


def concurrency_problem(ctx: Context, site: LoopSite, how: str) -> Problem | None:
    """The first reason the iterations of ``site``'s loop cannot run at
    once (``how`` says how, for messages: "in parallel", "as vector
    lanes"...), or None. In order: a reduction axis, equations TVM's
    primitive refuses, a dependence between iterations."""
    return (reduction_axis_problem(ctx, site, how) or compact_dataflow_problem(ctx, site, how)
            or dependence_problem(ctx, site, how))


def reduction_axis_problem(ctx: Context, site: LoopSite, how: str) -> Problem | None:
    var = site.loop.var
    for k in site.equations:
        info = ctx.analysis.equations[k]
        if var not in info.reduce_axes:
            continue
        lhs = info.equation.lhs
        what = (f"a reduction axis of {lhs.tensor}: its iterations accumulate into the same element"
                if info.kind in ("reduce", "update") else
                f"not an index of {access_text(lhs)}: every iteration writes the same element")
        return Problem("reduction-axis", f"loop {var} is a reduction axis of {lhs.tensor}",
                       f"loop {var} is {what}, so they cannot run {how}; choose a loop that indexes the written "
                       f"element (or factor the reduction with rfactor first)", site.loop.span)
    return None


def compact_dataflow_problem(ctx: Context, site: LoopSite, how: str) -> Problem | None:
    """TVM's precondition for parallel, vectorize and bind: every block
    under the loop is a complete block (a fresh value, every loop around it
    a spatial axis) or a reduction block (an implied initial value, affine
    bindings), and is the only writer of its tensor under the loop, before
    any reader there."""
    var = site.loop.var
    infos = [ctx.analysis.equations[k] for k in site.equations]
    writer: dict[str, EquationInfo] = {}
    for info in infos:
        eq = info.equation
        lhs = eq.lhs
        text = access_text(lhs)
        if info.kind == "update":
            return Problem("not-compact-dataflow", f"{text} updates a value written before",
                           f"{text} under loop {var} reads and updates the value an earlier equation wrote: TVM "
                           f"runs loops {how} only when each equation under them computes a fresh value or a "
                           f"reduction with its implied initial value", eq.span)
        if info.kind == "assign" and info.reduce_axes:
            axis = info.reduce_axes[0]
            return Problem("not-compact-dataflow", f"{text} is written on every iteration of loop {axis}",
                           f"{text} under loop {var} is written again on every iteration of loop {axis}, which its "
                           f"index does not use: TVM runs loops {how} only when each equation under them writes "
                           f"each element once (or is a reduction)", eq.span)
        if info.kind == "reduce" and not tvm_affine_guard(eq.predicate):
            return Problem("not-compact-dataflow", f"TVM cannot schedule the guard of {text}",
                           f"the reduction {text} under loop {var} has a guard that is not a bound on single loop "
                           f"variables (like j < 20): TVM then does not recognise it as a reduction, and runs "
                           f"loops {how} only around reductions it recognises", eq.span)
        if lhs.tensor in writer:
            first = writer[lhs.tensor]
            return Problem("not-compact-dataflow", f"{lhs.tensor} is written twice under loop {var}",
                           f"{lhs.tensor} is written by {access_text(first.equation.lhs)} and again by {text} under loop "
                           f"{var}: TVM runs loops {how} only when each tensor under them has one writer", eq.span)
        writer[lhs.tensor] = info
    for info in infos:
        for a in _reads(info):
            w = writer.get(a.tensor)
            if w is not None and w.index > info.index:
                return Problem("not-compact-dataflow", f"{a.tensor} is read before it is written under loop {var}",
                               f"{access_text(a)} is read under loop {var} before {access_text(w.equation.lhs)} writes it "
                               f"there: TVM runs loops {how} only when each tensor is written before it is read "
                               f"under them", a.span or info.equation.span)
    return None


def dependence_problem(ctx: Context, site: LoopSite, how: str) -> Problem | None:
    """A read or write under the loop that may touch an element another
    iteration of the loop writes. The proof is per dimension of the
    indices (see ``_independent``); what it cannot prove counts as a
    dependence."""
    var = site.loop.var
    infos = [ctx.analysis.equations[k] for k in site.equations]
    writes = {info.equation.lhs.tensor: info for info in infos}
    for w in infos:
        lhs = w.equation.lhs
        if not _self_independent(site, w):
            return Problem("dependence", f"iterations of loop {var} may write the same element of {lhs.tensor}",
                           f"could not prove that different iterations of loop {var} write different elements of "
                           f"{lhs.tensor} ({access_text(lhs)}), so they cannot run {how}", w.equation.span)
    for info in infos:
        for a in _reads(info):
            w = writes.get(a.tensor)
            if w is None or _independent(site, w, w.equation.lhs, info, a):
                continue
            return Problem("dependence", f"{access_text(a)} may read what another iteration of loop {var} writes",
                           f"{access_text(a)} may read an element of {a.tensor} that a different iteration of loop {var} "
                           f"writes ({access_text(w.equation.lhs)}): the result depends on the order of the iterations, "
                           f"so they cannot run {how}", a.span or info.equation.span)
    return None


def tvm_affine_guard(guard: A.Expr | None) -> bool:
    """Whether TVM accepts a reduction block with this guard: its affine
    binding check (DetectIterMap) matches a guard that bounds single loop
    variables (``j < 20``, ``j + 2 <= 19``, ``k >= 1``, joined by ``&``);
    ``jo*32 + ji < 100``, ``j*2 < 20``, ``j != 3`` and ``|`` it does not
    (measured with TVM 0.27)."""
    if guard is None:
        return True
    if isinstance(guard, A.Binary) and guard.op == "&":
        return tvm_affine_guard(guard.lhs) and tvm_affine_guard(guard.rhs)
    if not (isinstance(guard, A.Binary) and guard.op in ("<", "<=", ">", ">=")):
        return False
    lhs, rhs = affine.linearize(guard.lhs), affine.linearize(guard.rhs)
    if lhs is None or rhs is None:
        return False
    if lhs.coeffs and rhs.coeffs:
        return False
    coeffs = lhs.coeffs or rhs.coeffs
    return len(coeffs) == 1 and coeffs[0][1] == 1


def kind_loops(site: LoopSite, ctx: Context, kinds: str) -> tuple[list[A.Loop], list[A.Loop]]:
    """Loops of the given kinds around ``site``'s loop and inside it."""
    around = [l for l in site.outer if l.kind in kinds]
    inside = [s.loop for s in ctx.loop_sites if s.loop.kind in kinds and any(o is site.loop for o in s.outer)]
    return around, inside


def _reads(info: EquationInfo) -> list[A.Access]:
    """Every tensor read of an equation: its value and its guard."""
    eq = info.equation
    out = [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]
    if eq.predicate is not None:
        out += [n for n in A.walk(eq.predicate) if isinstance(n, A.Access)]
    return out


def _inner_ranges(site: LoopSite, info: EquationInfo) -> dict[str, affine.Range]:
    """Ranges of the loops of ``info`` inside ``site``'s loop."""
    loops = info.loops
    k = next(n for n, l in enumerate(loops) if l is site.loop)
    return affine.loop_ranges(loops[k + 1:])


def _self_independent(site: LoopSite, info: EquationInfo) -> bool:
    """Different iterations of the loop write different elements through
    the equation's written access (inner loops free, outer loops equal)."""
    indices = info.equation.lhs.indices or ()
    if affine.separates_iterations(indices, site.loop, _inner_ranges(site, info)):
        return True
    return _enumerated_independent(site, info, indices)


def _enumerated_independent(site: LoopSite, info: EquationInfo, indices: tuple[A.Expr, ...]) -> bool:
    """``_self_independent`` by enumerating the iterations (the guard is
    ignored: an over-approximation of what is written)."""
    if not indices:
        return False
    names = frozenset().union(*(affine.index_vars(i) for i in indices))
    loops = [l for l in info.loops if l.var in names or l is site.loop]
    k = next(n for n, l in enumerate(loops) if l is site.loop)
    outer = loops[:k]
    if affine.Space.size_of(loops) > MAX_ENUMERATED:
        return False
    space = affine.Space(loops)
    np = affine._numpy()
    columns = []
    for index in indices:
        values = space.evaluate(index)
        if values is None:
            return False
        columns.append(space.full(values))
    keys = columns + [space.full(space.axes[l.var]) for l in outer]
    var_values = space.full(space.axes[site.loop.var])
    # Points with equal keys (element and outer values) must share the
    # loop's value.
    order = np.lexsort([var_values] + keys[::-1])
    same = np.ones(order.size - 1, dtype=bool)
    for column in keys:
        c = column[order]
        same &= c[1:] == c[:-1]
        if not same.any():
            return True
    v = var_values[order]
    return not bool((same & (v[1:] != v[:-1])).any())


def _independent(site: LoopSite, w: EquationInfo, write: A.Access, r: EquationInfo, read: A.Access) -> bool:
    """No iteration of the loop reads through ``read`` an element that a
    different iteration writes through ``write``."""
    if (write.indices or ()) == (read.indices or ()) and _same_inner_loops(site, w, r, write):
        # The read touches, at each iteration, exactly the elements the
        # write touches then; those differ between iterations (checked).
        return True
    if not write.indices or len(write.indices) != len(read.indices or ()):
        return False
    var = site.loop.var
    outer = {l.var for l in site.outer}
    inner_w, inner_r = _inner_ranges(site, w), _inner_ranges(site, r)
    free = {var} | set(inner_w) | set(inner_r)
    names: dict = {}
    opaque_w = [affine.opaque_outer(i, free, names) for i in write.indices]
    opaque_r = [affine.opaque_outer(i, free, names) for i in read.indices]
    outer |= set(names.values())
    if _apart(var, outer, opaque_w, opaque_r, inner_w, inner_r):
        return True
    # A fused loop read as v//n and v%n: iterations differ in the high digit
    # (the low one free at both), or in the low digit with the high one equal.
    split = affine.split_digits(opaque_w + opaque_r, site.loop)
    if split is None:
        return False
    digits, ranges = split
    wd, rd = digits[:len(opaque_w)], digits[len(opaque_w):]
    # Two different iterations differ in a first digit (in any fixed order):
    # the digits before it are equal at both, the ones after it free.
    order = list(ranges)
    for k, d in enumerate(order):
        later = {x: ranges[x] for x in order[k + 1:]}
        if not _apart(d, outer | set(order[:k]), wd, rd, {**inner_w, **later}, {**inner_r, **later}):
            return False
    return True


def _apart(var: str, outer: set[str], write_indices, read_indices, inner_w: dict, inner_r: dict) -> bool:
    """Some dimension where the write and the read move with ``var`` by the
    same coefficient ``c``, name the loops in ``outer`` alike, and whose
    other terms cannot make up a nonzero multiple of ``c``: then two points
    with different ``var`` never touch the same element."""
    for wi, ri in zip(write_indices, read_indices):
        fw, fr = affine.linearize(wi), affine.linearize(ri)
        if fw is None or fr is None:
            continue
        c = fw.coeff(var)
        if c == 0 or fr.coeff(var) != c:
            continue
        if [(x, k) for x, k in fw.coeffs if x in outer] != [(x, k) for x, k in fr.coeffs if x in outer]:
            continue
        rest_w = affine.Affine(tuple((x, k) for x, k in fw.coeffs if x != var and x not in outer), fw.const)
        rest_r = affine.Affine(tuple((x, k) for x, k in fr.coeffs if x != var and x not in outer), fr.const)
        if not (rest_w.variables <= inner_w.keys() and rest_r.variables <= inner_r.keys()):
            continue
        lw, hw = rest_w.bounds(inner_w)
        lr, hr = rest_r.bounds(inner_r)
        # Equal elements need c*(v1 - v2) = rest_r - rest_w, which lies in
        # [lr - hw, hr - lw]; a nonzero multiple of c does not fit there.
        if hr - lw < abs(c) and hw - lr < abs(c):
            return True
    return False


def _same_inner_loops(site: LoopSite, w: EquationInfo, r: EquationInfo, access: A.Access) -> bool:
    """The loops inside ``site``'s loop that ``access`` names have the same
    ranges around ``w`` and around ``r``."""
    names = frozenset().union(*(affine.index_vars(i) for i in access.indices or ()))
    rw, rr = _inner_ranges(site, w), _inner_ranges(site, r)
    return all(rw.get(n) == rr.get(n) for n in names if n in rw or n in rr)


#: Lanes inside a GPU kernel. TVM 0.27's CUDA code generator has vector
#: types of 2 and 4 lanes for every dtype (8 and 16 only for some; measured:
#: f32x16, f64x8 and boolx8 fail to generate).
GPU_LANES = (2, 4)

"""Write a reduction's implied initial value as an equation of its own, before a chosen loop.

``C_{i,j} += e`` starts each element at 0 implicitly (TVM's ``T.init``,
run at the first iteration of the reduction loops). Decomposing it writes
``C_{i,j} = 0.0`` in a nest of its own before the chosen loop, and the
reduction then accumulates onto that value. The update loop nest no longer
tests for its first iteration, and the initialisation can be scheduled on
its own (vectorized, or placed where its writes stay in cache).

It requires:

- an equation that is a reduction with its implied initial value (the first
  write of its tensor);
- the only equation writing its tensor;
- a guard, if any, that bounds single loop variables (TVM's condition for a
  reduction block);
- a guard, if any, that holds at the first iteration of the reduction loops
  (where TVM runs the implied initial value; a guard that skips it leaves it
  unrun);
- a loop around it that is not inside any of its reduction loops (the
  initial value is written before the accumulation starts).

Example: initialise the whole output first

    step: {"block": "C", "loop": "i"}

    before:
    L^{64}_{i}$0
      L^{48}_{j}
        L^{32}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

    after:
    L^{64}_{i}
      L^{48}_{j} [
        C_{i,j} = 0.0;
      ];

    L^{64}_{i}
      L^{48}_{j}
        L^{32}_{k} [
          C_{i,j} += X_{i,k}*W_{k,j};
        ];

Example: initialise each element just before its accumulation

    step: {"block": "M", "loop": "j"}

    before:
    L^{16}_{i}
      L^{10}_{j}$0 [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    after:
    L^{16}_{i} [
      M_{i} = -inf;
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];
    ];

Example: not inside a reduction loop

    step: {"block": "C", "loop": "j"}

    before:
    L^{16}_{i}
      L^{8}_{k}
        L^{4}_{j}$0 [
          C_{i,j} += X_{i,k*4+j};
        ];

    refused: decompose_reduction-loop-inside-reduction
"""

from __future__ import annotations

from dataclasses import replace

from leir import affine
from leir import ast as A
from leir.printer import access_text, print_expr
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, TvmRefused, loop_arg, tvm_loop
from leir.transforms.lib.reductions import reduction_block_refusal
from leir.transforms.rewrite import map_equation, substitute

ID = "decompose_reduction"
GROUP = "loop"
TITLE = "Decompose a reduction"
#: Step-TP has no strategy for this (their reductions keep the implied
#: initial value); TVM's primitive is ``decompose_reduction``.
STEPTP = None


class NotReduction(NotApplicable):
    """The equation is not a reduction with its implied initial value (the first write of its
    tensor)."""

    code = "decompose_reduction-not-reduction"


class WrittenElsewhere(NotApplicable):
    """Another equation writes the reduction's tensor too."""

    code = "decompose_reduction-written-elsewhere"


class Guard(NotApplicable):
    """The reduction's guard does not bound single loop variables, or fails at the first
    iteration of a reduction loop (where TVM runs the implied initial value)."""

    code = "decompose_reduction-guard"


class LoopInsideReduction(NotApplicable):
    """The loop is inside one of the reduction's loops."""

    code = "decompose_reduction-loop-inside-reduction"


_BLOCK_ERRORS = {"not-reduction": NotReduction, "written-elsewhere": WrittenElsewhere, "guard": Guard}


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for site in ctx.loops_at(at):
        for k in site.equations:
            info = ctx.analysis.equations[k]
            if info.kind != "reduce" or _refusal(ctx, site, info) is not None:
                continue
            tensor = info.equation.lhs.tensor
            title = f"Initialise {tensor} explicitly before loop {site.loop.var}"
            args = {"block": ctx.block_names[k], "loop": site.loop.var}
            out.append(Candidate(Step(ID, args), title, site.loop.span))
    return out


def _refusal(ctx: Context, site: LoopSite, info: EquationInfo) -> NotApplicable | None:
    refusal = reduction_block_refusal(ctx, info, _BLOCK_ERRORS)
    if refusal is not None:
        return refusal
    skipping = _skips_first_iteration(info)
    if skipping is not None:
        loop, guard = skipping
        return Guard(f"the guard {guard} skips the first iteration of loop {loop.var}",
                     f"the guard of {access_text(info.equation.lhs)} does not hold at {loop.var} = {loop.start}, the "
                     f"iteration where TVM runs the implied initial value (T.init), so the lowered reduction never "
                     f"runs it; an explicit initial value would change what TVM computes", info.equation.span)
    loops = info.loops
    position = next(n for n, l in enumerate(loops) if l is site.loop)
    reductions = [n for n, l in enumerate(loops) if l.var in info.reduce_axes]
    if reductions and position > reductions[0]:
        outer = loops[reductions[0]]
        return LoopInsideReduction(
            f"loop {site.loop.var} is inside reduction loop {outer.var}",
            f"loop {site.loop.var} is inside {outer.var}, a loop the reduction into {info.equation.lhs.tensor} "
            f"accumulates over: the initial value must be written before the accumulation starts, so before "
            f"{outer.var} or a loop around it", site.loop.span)
    return None


def _skips_first_iteration(info: EquationInfo) -> tuple[A.Loop, str] | None:
    """A reduction loop at whose first iteration the guard fails (the
    guard is a conjunction of bounds on single variables, checked before)."""
    guard = info.equation.predicate
    if guard is None:
        return None
    starts = {l.var: l for l in info.loops if l.var in info.reduce_axes}
    stack = [guard]
    while stack:
        e = stack.pop()
        if isinstance(e, A.Binary) and e.op == "&":
            stack += [e.lhs, e.rhs]
            continue
        names = affine.index_vars(e) & starts.keys()
        if not names:
            continue
        loop = starts[next(iter(names))]
        space = affine.Space([loop])
        holds = space.evaluate(e)
        if holds is None or not bool(space.full(holds)[0]):
            return loop, print_expr(e)
    return None


def check(ctx: Context, args: dict) -> None:
    site = loop_arg(ctx, args, ID)
    refusal = _refusal(ctx, site, ctx.equation_of_block(args["block"]))
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    """TVM's ``decompose_reduction`` (its checks are the backstop), raised
    back to LEIR; the copies of the loops it makes for the initial value
    keep their names (TVM appends ``_init``: a sibling nest may reuse a
    name, so the suffix only clutters the text)."""
    import tvm

    from leir.bridge.raise_tir import raise_func
    from leir.transforms.splice import splice

    sch = tvm.s_tir.Schedule(ctx.func)
    try:
        sch.decompose_reduction(args["block"], tvm_loop(sch, args["block"], args["loop"]))
    except Exception as e:
        from leir.transforms.applying import raised_by_tvm, schedule_error_message

        if not raised_by_tvm(e):
            raise
        detail = schedule_error_message(e)
        raise TvmRefused(f"TVM refused {ID}: {detail.splitlines()[0] if detail else 'schedule error'}", detail) from None
    after = raise_func(sch.mod["main"])
    units = tuple(_without_init_suffix(u, frozenset(), frozenset(d.name for d in after.decls))
                  for u in after.units)
    return splice(ctx.program, raise_func(ctx.func), replace(after, units=units))


def _without_init_suffix(nest: A.Nest, enclosing: frozenset[str], tensors: frozenset[str]) -> A.Nest:
    """``nest`` with its loops named ``x_init`` renamed ``x`` where no
    enclosing loop or tensor is called ``x``."""
    rename: dict[str, A.Expr] = {}
    loops = []
    bound = set(enclosing)
    for loop in nest.loops:
        base = loop.var[: -len("_init")] if loop.var.endswith("_init") else None
        if base and base not in bound and base not in tensors:
            rename[loop.var] = A.Var(base)
            loop = replace(loop, var=base)
        bound.add(loop.var)
        loops.append(loop)
    body = []
    for item in nest.body:
        if isinstance(item, A.Equation):
            body.append(map_equation(item, lambda e: substitute(e, rename)) if rename else item)
        else:
            inner = _without_init_suffix(item, frozenset(bound), tensors)
            body.append(_substituted(inner, rename) if rename else inner)
    return replace(nest, loops=tuple(loops), body=tuple(body))


def _substituted(nest: A.Nest, rename: dict[str, A.Expr]) -> A.Nest:
    body = tuple(map_equation(i, lambda e: substitute(e, rename)) if isinstance(i, A.Equation) else _substituted(i, rename)
                 for i in nest.body)
    return replace(nest, body=body)


def decompose_reduction(program, block: str, loop: str):
    """Apply a reduction decomposition (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop}))

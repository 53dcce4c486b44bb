"""Remove computations whose results are never read: a temporary nobody reads, or a write overwritten before any read.

With ``"tensor"``, every equation that writes a declared temporary that no
other equation reads goes, with its declaration (nests left empty go too).
With ``"block"``, one equation goes whose writes are all overwritten before
anything reads them: by the very next item of the same body writing the
same element, or by a later equation that writes the whole tensor with
nothing reading it in between. Dead code costs time, memory traffic and
often a whole kernel launch. Inputs keep their declared or inferred shape
(a declaration is added where the removed code was what decided it), so
the kernel keeps its parameters.

It requires:

- for a tensor, a declared temporary (an inferred tensor that nobody reads
  is an output);
- for a tensor, no reader but the equations that write it;
- for a block, either an unguarded-or-equally-guarded next equation in the
  same body writing the same element without reading the tensor, or a later
  unguarded equation writing every element of the tensor without reading it,
  sharing no loop with the block;
- for a block and such a later equation, no equation reading the tensor
  between the two or inside a loop around the block;
- for a block and such a later equation, any reader inside the overwriting
  loops reading each element after its overwrite.

Example: a temporary that nothing reads any more

    step: {"tensor": "T"}

    before:
    tmp T: f32[16]

    L^{16}_{i} [
      T_{i} = X_{i}*2.0;
      Y_{i} = X_{i} + 1.0;
    ];

    after:
    L^{16}_{i} [
      Y_{i} = X_{i} + 1.0;
    ];

Example: a value overwritten before anybody reads it

    step: {"block": "Y"}

    before:
    L^{16}_{i} [
      Y_{i} = X_{i}*2.0$0;
      Y_{i} = X_{i} + 1.0;
    ];

    after:
    L^{16}_{i} [
      Y_{i} = X_{i} + 1.0;
    ];

Example: a whole nest whose result is overwritten by a later one

    step: {"block": "S"}

    before:
    L^{8}_{i}
      L^{4}_{k} [
        S_{i} += X_{i,k}$0;
      ];

    L^{8}_{i} [
      S_{i} = W_{i}*3.0;
    ];

    L^{8}_{i} [
      Y_{i} = S_{i} + 1.0;
    ];

    after:
    in  X: f32[8,4]

    L^{8}_{i} [
      S_{i} = W_{i}*3.0;
    ];

    L^{8}_{i} [
      Y_{i} = S_{i} + 1.0;
    ];

Example: the value is read before the overwrite

    step: {"block": "S"}

    before:
    L^{8}_{i} [
      S_{i} = X_{i}*2.0$0;
      Y_{i} = S_{i} + 1.0;
      S_{i} = X_{i}*3.0;
    ];

    refused: dead_code_elimination-value-read
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir.bridge.lower import equation_text
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import BadStep, Candidate, Context, NotApplicable, StaleStep, Step, str_arg
from leir.transforms.lib.dependence import order_conflict, touches

ID = "dead_code_elimination"
GROUP = "operator"
TITLE = "Eliminate dead code"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "dead_code_elimination"


class NotTemporary(NotApplicable):
    """The tensor is not a declared temporary (an input, an output, or an inferred temporary):
    only a declared temporary can be removed."""

    code = "dead_code_elimination-not-temporary"


class TensorRead(NotApplicable):
    """An equation other than its writers reads the tensor."""

    code = "dead_code_elimination-tensor-read"


class ValueRead(NotApplicable):
    """An equation reads what the block wrote before anything overwrites it."""

    code = "dead_code_elimination-value-read"


class NotOverwritten(NotApplicable):
    """Nothing overwrites what the block writes before it is read (no next equation writing the
    same element, no later one writing every element without sharing a loop)."""

    code = "dead_code_elimination-not-overwritten"


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    here = ctx.equations_at(at)
    tensors = []
    for info in here:
        name = info.equation.lhs.tensor
        if name not in tensors:
            tensors.append(name)
    for name in tensors:
        if _tensor_refusal(ctx, name) is None:
            writers = [i for i in ctx.analysis.equations if i.equation.lhs.tensor == name]
            span = next((i.equation.span for i in here if i.equation.lhs.tensor == name), None)
            out.append(Candidate(Step(ID, {"tensor": name}), f"Remove temporary {name}, which nothing reads "
                                 f"({len(writers)} equation{'s' if len(writers) > 1 else ''})", span))
    for info in here:
        block = ctx.block_names[info.index]
        if _store_refusal(ctx, info) is None:
            out.append(Candidate(Step(ID, {"block": block}), f"Remove {block}: its value is overwritten before any read",
                                 info.equation.span))
    return out


def check(ctx: Context, args: dict) -> None:
    if ("tensor" in args) == ("block" in args):
        raise BadStep(f"{ID}: give either \"tensor\" (a temporary nobody reads) or \"block\" (an overwritten write)")
    if "tensor" in args:
        name = str_arg(args, "tensor", ID)
        if name not in ctx.analysis.tensors:
            raise StaleStep(f"no tensor {name} in the program", f"the program has tensors {', '.join(ctx.analysis.tensors)}")
        refusal = _tensor_refusal(ctx, name)
    else:
        refusal = _store_refusal(ctx, ctx.equation_of_block(str_arg(args, "block", ID)))
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    if "tensor" in args:
        doomed = {info.site.path for info in ctx.analysis.equations if info.equation.lhs.tensor == args["tensor"]}
        decls = tuple(d for d in ctx.program.decls if d.name != args["tensor"])
    else:
        doomed = {ctx.equation_of_block(args["block"]).site.path}
        decls = ctx.program.decls
    units = []
    for u, unit in enumerate(ctx.program.units):
        kept = _without(unit, (u,), doomed)
        if kept is not None:
            units.append(kept)
    program = replace(ctx.program, decls=decls, units=tuple(units))
    return _keep_interface(ctx, program)


def dead_code_elimination(program, tensor: str | None = None, block: str | None = None):
    """Remove the dead temporary ``tensor`` or the overwritten ``block``
    (see the module docstring) and return the new program."""
    args = {"tensor": tensor} if tensor is not None else {"block": block}
    return apply_transform(__name__, program, Step(ID, args))


# ------------------------------------------------------------------ legality


def _tensor_refusal(ctx: Context, name: str) -> NotApplicable | None:
    t = ctx.analysis.tensors[name]
    if t.role != "tmp" or not t.declared:
        role = {"in": "an input", "out": "an output", "tmp": "an inferred temporary"}[t.role]
        why = " (a tensor nobody reads after writing it is inferred to be an output)" if t.role == "out" else ""
        return NotTemporary(f"{name} is {role}",
                            f"only a declared temporary can be removed: {name} is {role}"
                            + why,
                            t.span)
    for info in ctx.analysis.equations:
        if info.equation.lhs.tensor == name:
            continue
        for touch in touches(info):
            if touch.access.tensor == name and not touch.is_write:
                return TensorRead(f"{name} is read by {ctx.block_names[info.index]}",
                                  f"{equation_text(info.equation)} reads {name}", touch.access.span)
    return None


def _store_refusal(ctx: Context, info: EquationInfo) -> NotApplicable | None:
    """Why the writes of ``info`` are not all overwritten before a read."""
    name = ctx.block_names[info.index]
    tensor = info.equation.lhs.tensor
    nxt = _next_in_body(ctx, info)
    if nxt is not None and _overwrites_in_place(info, nxt):
        return None
    later = [w for w in ctx.analysis.equations if w.index > info.index]
    for w in later:
        if _reads(w, tensor):
            return ValueRead(f"{ctx.block_names[w.index]} reads {tensor} before it is overwritten",
                             f"{equation_text(w.equation)} reads {tensor} before anything overwrites what "
                             f"{equation_text(info.equation)} wrote", w.equation.span)
        if w.equation.lhs.tensor == tensor and _overwrites_all(ctx, w):
            return _whole_overwrite_refusal(ctx, info, w)
    return NotOverwritten(f"nothing overwrites what {name} writes",
                          f"no later equation writes every element {name} writes to {tensor} before it is read",
                          info.equation.span)


def _next_in_body(ctx: Context, info: EquationInfo) -> EquationInfo | None:
    path = info.site.path
    nxt = path[:-1] + (path[-1] + 1,)
    return next((w for w in ctx.analysis.equations if w.site.path == nxt), None)


def _overwrites_in_place(info: EquationInfo, nxt: EquationInfo) -> bool:
    """The next item writes the same element in the same iteration, under
    the same guard, without reading the tensor first."""
    eq, other = info.equation, nxt.equation
    return (other.lhs.tensor == eq.lhs.tensor and other.lhs.indices == eq.lhs.indices
            and other.predicate in (None, eq.predicate) and not _reads(nxt, eq.lhs.tensor))


def _reads(info: EquationInfo, tensor: str) -> bool:
    return any(t.access.tensor == tensor and not t.is_write for t in touches(info))


def _overwrites_all(ctx: Context, info: EquationInfo) -> bool:
    """An unguarded equation that writes every element of its tensor, from
    its own loops (each index a distinct loop variable over the whole
    dimension), without reading the tensor."""
    eq = info.equation
    if eq.predicate is not None or _reads(info, eq.lhs.tensor):
        return False
    shape = ctx.analysis.tensors[eq.lhs.tensor].shape
    loops = {l.var: l for l in info.loops}
    seen = set()
    for index, extent in zip(eq.lhs.indices or (), shape):
        if not isinstance(index, A.Var) or index.name in seen:
            return False
        seen.add(index.name)
        loop = loops[index.name]
        if loop.start != 0 or loop.extent != extent:
            return False
    return True


def _whole_overwrite_refusal(ctx: Context, info: EquationInfo, w: EquationInfo) -> NotApplicable | None:
    name, other = ctx.block_names[info.index], ctx.block_names[w.index]
    tensor = info.equation.lhs.tensor
    mine = {id(l) for l in info.loops}
    theirs = {id(l) for l in w.loops}
    if mine & theirs:
        loop = next(l for l in info.loops if id(l) in theirs)
        return NotOverwritten(f"{other} overwrites {tensor} inside loop {loop.var}, which also runs {name}",
                              f"{name} and {other} share loop {loop.var}, so {other} overwrites {tensor} only after "
                              f"each iteration of it, not after all of {name}", loop.span)
    for r in ctx.analysis.equations:
        if r.index in (info.index, w.index) or not _reads(r, tensor):
            continue
        if any(id(l) in mine for l in r.loops):
            return ValueRead(f"{ctx.block_names[r.index]} reads {tensor} inside a loop around {name}",
                             f"{equation_text(r.equation)} shares a loop with {name}, so it may read the value "
                             f"{name} writes", r.equation.span)
        shared = _common_prefix(r.loops, w.loops)
        if shared and (r.index < w.index or order_conflict(ctx, (), [w], [r], shared, shared, frozenset({tensor}))):
            # A reader inside the overwriting loops must read each element
            # after the overwrite (in the same or a later iteration).
            return ValueRead(f"{ctx.block_names[r.index]} may read {tensor} before {other} overwrites it",
                             f"{equation_text(r.equation)} runs inside loop {shared[-1].var} with {other}, and may read "
                             f"an element of {tensor} that {other} has not overwritten yet", r.equation.span)
    return None


def _common_prefix(a: tuple[A.Loop, ...], b: tuple[A.Loop, ...]) -> tuple[A.Loop, ...]:
    out = []
    for x, y in zip(a, b):
        if x is not y:
            break
        out.append(x)
    return tuple(out)


# ----------------------------------------------------------------- rewriting


def _without(item: A.Item, path: tuple[int, ...], doomed: set[tuple[int, ...]]) -> A.Item | None:
    if isinstance(item, A.Equation):
        return None if path in doomed else item
    body = []
    for k, sub in enumerate(item.body):
        kept = _without(sub, path + (k,), doomed)
        if kept is not None:
            body.append(kept)
    if not body:
        return None
    return replace(item, body=tuple(body))


def _keep_interface(ctx: Context, program: A.Program) -> A.Program:
    """Declare the inputs whose inferred shape the removed code decided (or
    that it alone read), so that the kernel keeps its parameters."""
    from leir.semantics import analyze

    declared = {d.name for d in program.decls}
    now = analyze(program).tensors
    extra = tuple(t.as_decl() for t in ctx.analysis.inputs()
                  if t.name not in declared and (t.name not in now or now[t.name].shape != t.shape))
    return replace(program, decls=program.decls + extra)

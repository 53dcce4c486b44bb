"""Merge two operators that compute the same thing into one, over a concatenated loop range.

Two consecutive nests of one equation each are merged when the second
computes what the first does:

- over the next range of one loop, writing the same tensor (what tensor
  split produces): the two nests become one whose loop covers both ranges;
- on other tensors (``Q = X @ Wq`` and ``K = X @ Wk``): the tensors that
  differ are concatenated along the chosen loop into new temporaries, one
  nest computes both results over the doubled loop into a concatenated
  temporary, and two copies split it into the original outputs (Step-TP's
  concatenate, compute, split). Inputs and outputs are the kernel's
  interface, so only temporaries are concatenated.

One larger operator keeps a wide machine busier than two small ones and
reads the shared inputs (``X``) once.

It requires:

- a nest that holds only this equation;
- a following nest that holds only one equation over the same loops (same
  kinds, starts and extents; for a range, the chosen loop's extent may
  differ, and a reduction's second range may be preceded by the nest that
  writes its initial value);
- a loop not bound to a thread axis;
- a second equation equal to the first with its loop variables renamed and
  the chosen loop shifted past the first range, or with tensors renamed;
- for ranges, an equation that reads no element of its own tensor but the
  one it writes;
- for ranges, an initial value nest outside every reduction loop;
- for ranges, along a reduction loop, an order-free combiner unless no
  reduction loop of the nest comes before the chosen one;
- for other tensors, two first writes (plain or reductions) without guards;
- for other tensors, neither equation reading what the other writes;
- for other tensors, outputs indexed by the chosen (spatial) loop in one
  dimension, each renamed input likewise, with that dimension exactly the
  loop's extent and the same shape and dtype as its partner;
- for other tensors, every other access not using the loop;
- for other tensors, no thread-bound loop (the copies are serial loops
  outside any kernel).

Example: the Q and K projections of attention computed as one matmul

    step: {"block": "Q", "loop": "j"}

    before:
    L^{16}_{i}
      L^{8}_{j}$0
        L^{32}_{k} [
          Q_{i,j} += X_{i,k}*Wq_{k,j};
        ];

    L^{16}_{i}
      L^{8}_{j}
        L^{32}_{k} [
          K_{i,j} += X_{i,k}*Wk_{k,j};
        ];

    after:
    L^{32}_{k}
      L^{8}_{j} [
        Wq_Wk_{k,j} = Wq_{k,j};
      ];

    L^{32}_{k}
      L^{8}_{j} [
        Wq_Wk_{k,j+8} = Wk_{k,j};
      ];

    L^{16}_{i}
      L^{16}_{j}
        L^{32}_{k} [
          Q_K_{i,j} += X_{i,k}*Wq_Wk_{k,j};
        ];

    L^{16}_{i}
      L^{8}_{j} [
        Q_{i,j} = Q_K_{i,j};
      ];

    L^{16}_{i}
      L^{8}_{j} [
        K_{i,j} = Q_K_{i,j+8};
      ];

Example: two halves of a row loop merged back (the inverse of tensor split)

    step: {"block": "Y", "loop": "i"}

    before:
    L^{32}_{i}$0
      L^{48}_{j} [
        Y_{i,j} = X_{i,j}*2.0;
      ];

    L^{32}_{r}
      L^{48}_{c} [
        Y_{r+32,c} = X_{r+32,c}*2.0;
      ];

    after:
    L^{64}_{i}
      L^{48}_{j} [
        Y_{i,j} = X_{i,j}*2.0;
      ];

Example: the second operator reads what the first writes

    step: {"block": "A", "loop": "j"}

    before:
    L^{16}_{i}
      L^{8}_{j}$0 [
        A_{i,j} = X_{i,j}*2.0;
      ];

    L^{16}_{i}
      L^{8}_{j} [
        B_{i,j} = A_{i,j}*2.0;
      ];

    refused: tensor_concat-dependence
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from leir import affine
from leir import ast as A
from leir.bridge.lower import equation_text
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import Candidate, Context, LoopSite, NotApplicable, Step, loop_arg
from leir.transforms.lib.combiners import init_value
from leir.transforms.lib.dependence import touches
from leir.transforms.lib.nests import equations_under, fresh_loops, places_of, rename_vars, replace_items, sibling
from leir.transforms.rewrite import fresh_name, map_equation, names_in, substitute
from leir.printer import access_text

ID = "tensor_concat"
GROUP = "operator"
TITLE = "Concatenate operators"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "tensor_concat_to_fuse_operators"


class NotAlone(NotApplicable):
    """The nest of the loop holds more than this equation."""

    code = "tensor_concat-not-alone"


class NoPartner(NotApplicable):
    """No nest follows that holds one equation over the same loops (same kinds, starts and
    extents)."""

    code = "tensor_concat-no-partner"


class ThreadLoop(NotApplicable):
    """The loop is bound to a thread axis: concatenating would change the kernel's thread extent."""

    code = "tensor_concat-thread-loop"


class DifferentComputation(NotApplicable):
    """The second equation is not the first with its loop variables renamed and the chosen loop
    shifted past the first range (after its initial value nest, outside every reduction loop),
    nor the first with tensors renamed."""

    code = "tensor_concat-different-computation"


class OrderMatters(NotApplicable):
    """Merging the ranges would reorder what depends on order: the equation reads another
    element of its own tensor, or a combiner that is not order-free follows a reduction loop."""

    code = "tensor_concat-order"


class NotConcatenable(NotApplicable):
    """The two equations cannot become one operator over other tensors (guarded, not first
    writes, not indexed along the loop in one whole dimension, different shapes or dtypes, or on
    GPU threads)."""

    code = "tensor_concat-not-concatenable"


class Dependent(NotApplicable):
    """One equation reads what the other writes: one needs the other's result."""

    code = "tensor_concat-dependence"


@dataclass(frozen=True)
class Merge:
    """What a step merges: the first nest, the nests after it it replaces,
    and for other tensors the renaming of the second equation's tensors."""

    site: LoopSite
    path: tuple[int, ...]
    first: EquationInfo
    second: EquationInfo
    #: How many items from ``path`` on the step replaces.
    count: int
    #: Extent of the chosen loop in the second nest (ranges).
    rest: int
    #: Tensor renaming first -> second, None when the ranges of one
    #: tensor are merged.
    tensors: dict[str, str] | None


# =================================================================== the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out: list[Candidate] = []
    for site in ctx.loops_at(at):
        if len(site.equations) != 1:
            continue
        merge, refusal = _plan(ctx, site)
        if refusal is not None:
            continue
        args = ctx.loop_ref(site)
        a, b = ctx.block_names[merge.first.index], ctx.block_names[merge.second.index]
        if merge.tensors is None:
            title = f"Merge the two ranges of {merge.first.equation.lhs.tensor} along {site.loop.var}"
        else:
            title = f"Compute {a} and {b} as one operator concatenated along {site.loop.var}"
        out.append(Candidate(Step(ID, args), title, site.loop.span))
    return out


def check(ctx: Context, args: dict) -> None:
    _, refusal = _plan(ctx, loop_arg(ctx, args, ID))
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    merge, _ = _plan(ctx, loop_arg(ctx, args, ID))
    if merge.tensors is None:
        loop = merge.site.loop
        nest = merge.site.nest
        loops = tuple(replace(l, extent=l.extent + merge.rest) if l is loop else l for l in nest.loops)
        end = sibling(ctx.program, merge.path, merge.count - 1).end_comments
        return replace_items(ctx.program, merge.path, merge.count, (replace(nest, loops=loops, end_comments=end, span=None),))
    return _concatenate(ctx, merge)


def tensor_concat(program, block: str, loop: str):
    """Merge the operator ``block`` with the next one along ``loop`` (see
    the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"block": block, "loop": loop}))


# ------------------------------------------------------------------ legality


def _chain(nest: A.Nest) -> tuple[tuple[A.Loop, ...], A.Equation] | None:
    """The loops down to the single equation of a nest, or None."""
    loops: tuple[A.Loop, ...] = ()
    item: A.Item = nest
    while isinstance(item, A.Nest):
        if len(item.body) != 1:
            return None
        loops += item.loops
        item = item.body[0]
    return loops, item


def _plan(ctx: Context, site: LoopSite) -> tuple[Merge | None, NotApplicable | None]:
    loop = site.loop
    place = places_of(ctx)[id(site.nest)]
    mine = equations_under(ctx, place.path)
    if len(mine) != 1:
        names = ", ".join(ctx.block_names[i.index] for i in mine)
        return None, NotAlone(f"the nest of loop {loop.var} holds {len(mine)} equations",
                              f"tensor concat merges single operators; the nest of loop {loop.var} holds {names}",
                              loop.span)
    first = mine[0]
    name = ctx.block_names[first.index]
    if loop.kind == "B":
        return None, ThreadLoop(f"loop {loop.var} is bound to a thread axis",
                                f"concatenating along thread-bound loop {loop.var} changes the kernel's thread extent; "
                                f"choose another loop", loop.span)
    chain1 = _chain(site.nest)
    position = next(k for k, l in enumerate(chain1[0]) if l is loop)
    after = sibling(ctx.program, place.path, 1)
    count = 2
    init = None
    if isinstance(after, A.Nest) and first.kind == "reduce" and loop.var in first.spatial:
        chain = _chain(after)
        if chain is not None and chain[1].lhs.tensor == first.equation.lhs.tensor:
            init = after
            after = sibling(ctx.program, place.path, 2)
            count = 3
    second_infos = equations_under(ctx, place.path[:-1] + (place.path[-1] + count - 1,)) if isinstance(after, A.Nest) else []
    chain2 = _chain(after) if isinstance(after, A.Nest) else None
    if chain2 is None or len(second_infos) != 1 or len(chain2[0]) != len(chain1[0]):
        return None, NoPartner(f"no operator like {name} follows it",
                               f"tensor concat merges {name} with the next nest, which must hold one equation over "
                               f"{len(chain1[0])} loops like {name}'s", loop.span)
    second = second_infos[0]
    other = ctx.block_names[second.index]
    loops1, loops2 = chain1[0], chain2[0]
    same_tensor = second.equation.lhs.tensor == first.equation.lhs.tensor
    for k, (a, b) in enumerate(zip(loops1, loops2)):
        if (a.kind, a.start) != (b.kind, b.start) or (a.extent != b.extent and not (same_tensor and k == position)):
            return None, NoPartner(f"the loops of {other} differ from {name}'s",
                                   f"loop {b.var} of {other} does not match loop {a.var} of {name} (kind, start and "
                                   f"extent must be equal)", b.span)
    renamed = rename_vars(chain2[1], {b.var: a.var for a, b in zip(loops1, loops2)})
    if same_tensor:
        refusal = _range_refusal(ctx, site, first, second, renamed, init, loops2[position].extent)
        if refusal is not None:
            return None, refusal
        return Merge(site, place.path, first, second, count, loops2[position].extent, None), None
    if init is not None:
        return None, NoPartner(f"no operator like {name} follows it", f"{name} is followed by another write of "
                               f"{first.equation.lhs.tensor}, not by a second operator", loop.span)
    tensors, refusal = _tensor_refusal(ctx, site, first, second, renamed)
    if refusal is not None:
        return None, refusal
    return Merge(site, place.path, first, second, 2, 0, tensors), None


def _range_refusal(ctx, site, first, second, renamed: A.Equation, init, rest: int) -> NotApplicable | None:
    loop = site.loop
    name, other = ctx.block_names[first.index], ctx.block_names[second.index]
    offset = loop.extent
    shift = {loop.var: A.Binary("+", A.Var(loop.var), A.Num(offset, str(offset)))}
    expected = map_equation(first.equation, lambda e: substitute(e, shift))
    spatial = loop.var in first.spatial
    needs_init = spatial and first.kind == "reduce"
    if not same_equation(expected, renamed) or (init is not None) != needs_init:
        return DifferentComputation(
            f"{other} does not continue {name} along {loop.var}",
            f"merging ranges needs {other} to be {name} with {loop.var} shifted by {offset}: "
            f"{equation_text(expected)}" + (", after the nest that writes its initial value" if needs_init else "")
            + f"; it is {equation_text(second.equation)}", second.equation.span)
    if init is not None:
        depth = next(k for k, l in enumerate(first.loops) if l is _chain(site.nest)[0][0])
        if any(l.var in first.reduce_axes and l.extent > 1 for l in first.loops[:depth]):
            return DifferentComputation(f"the initial value of {other}'s range is written inside a reduction loop",
                                        f"the nest before {other} resets {first.equation.lhs.tensor} at every iteration "
                                        f"of a reduction loop around the nests, which one merged reduction would not do",
                                        init.loops[0].span if init.loops else None)
        chain = _chain(init)
        value = init_value(ctx, first)
        target = expected.lhs
        inner = [l for l in first.loops if l.var in first.spatial and any(l is m for m in _chain(site.nest)[0])]
        renamed_init = rename_vars(chain[1], {b.var: a.var for a, b in zip(inner, chain[0])})
        shapes_ok = len(chain[0]) == len(inner) and all(
            (a.kind, a.start, a.extent if a is not loop else rest) == (b.kind, b.start, b.extent)
            for a, b in zip(inner, chain[0]))
        if not shapes_ok or value is None or not same_equation(renamed_init, A.Equation(target, value, expected.predicate)):
            return DifferentComputation(f"the nest before {other} is not the initial value of its range",
                                        f"{equation_text(chain[1])} does not write the initial value of "
                                        f"{first.equation.lhs.tensor} over the second range", chain[1].span)
    return _order_refusal(ctx, site, first)


def _order_refusal(ctx, site, first) -> NotApplicable | None:
    """Tensor split's rule, seen from the merged side: interleaving the two
    ranges must not reorder what depends on order."""
    loop = site.loop
    for t in touches(first):
        if t.access.tensor == first.equation.lhs.tensor and not t.is_write and t.access.indices != first.equation.lhs.indices:
            return OrderMatters(f"{ctx.block_names[first.index]} reads another element of {t.access.tensor}",
                                "merging would interleave the two ranges, which read each other's writes", t.access.span)
    if loop.var not in first.spatial and first.combiner is None:
        before = [l for l in site.nest.loops[:site.position] if l.var in first.reduce_axes and l.extent > 1]
        if before:
            return OrderMatters(f"the order of {first.equation.lhs.tensor}'s updates would change",
                                f"{ctx.block_names[first.index]} updates each element at every iteration of "
                                f"{before[0].var} and {loop.var}; merging the ranges of {loop.var} interleaves them "
                                f"with {before[0].var}", loop.span)
    return None


def _tensor_refusal(ctx, site, first, second, renamed: A.Equation) -> tuple[dict[str, str] | None, NotApplicable | None]:
    loop = site.loop
    name, other = ctx.block_names[first.index], ctx.block_names[second.index]
    tensors = tensor_renaming(first.equation, renamed)
    if tensors is None:
        return None, DifferentComputation(
            f"{other} computes something else than {name}",
            f"{equation_text(second.equation)} is not {equation_text(first.equation)} with other tensors",
            second.equation.span)
    a, b = first.equation.lhs.tensor, second.equation.lhs.tensor
    info = ctx.analysis.tensors

    def refuse(short, detail, span=None):
        return None, NotConcatenable(short, detail, span or loop.span)

    if first.kind not in ("assign", "reduce") or second.kind not in ("assign", "reduce"):
        return refuse(f"{name} or {other} updates an earlier value",
                      "both operators must be first writes of their outputs (plain values or reductions)")
    if first.equation.predicate is not None or second.equation.predicate is not None:
        return refuse(f"{name} or {other} is guarded", "guarded operators are not concatenated")
    if b in {t.access.tensor for t in touches(first)} or a in {t.access.tensor for t in touches(second) if not t.is_write}:
        return None, Dependent(f"{other} depends on {name}",
                               f"{other} reads {a}, or {name} reads {b}: one needs the other's result, so they cannot "
                               f"run as one operator", second.equation.span)
    if loop.var not in first.spatial:
        return refuse(f"{loop.var} is a reduction loop of {name}",
                      f"outputs are concatenated along a loop that indexes them; {loop.var} does not index {a}")
    if loop.start != 0:
        return refuse(f"loop {loop.var} does not start at 0", "concatenation needs a loop starting at 0")
    if any(l.kind == "B" for l in first.loops):
        return refuse(f"{name} runs on GPU threads",
                      "the concatenating and splitting copies would be serial loops outside the kernel, "
                      "on the host, which cannot write device memory")
    for x, y in [(a, b)] + [(p, q) for p, q in tensors.items() if p != q and p != a]:
        if (info[x].dtype, info[x].shape) != (info[y].dtype, info[y].shape):
            return refuse(f"{x} and {y} differ in shape or dtype",
                          f"{x} is {info[x].dtype}{list(info[x].shape)} and {y} is {info[y].dtype}{list(info[y].shape)}")
    dims: dict[str, int | None] = {}
    for access in [n for n in A.walk(first.equation) if isinstance(n, A.Access)]:
        renamed_too = tensors.get(access.tensor, access.tensor) != access.tensor
        dim = concat_dimension(access, loop.var)
        if renamed_too:
            if dim is None or dims.setdefault(access.tensor, dim) != dim or (
                    access.tensor != a and info[access.tensor].shape[dim] != loop.extent):
                return refuse(f"{access.tensor} is not indexed by {loop.var} in one whole dimension",
                              f"{access_text(access)} must use {loop.var} alone in exactly one index, over that whole "
                              f"dimension ({loop.extent}), to be concatenated along it", access.span)
        elif any(loop.var in affine.index_vars(i) for i in access.indices or ()):
            return refuse(f"{access.tensor} is read along {loop.var} by both operators",
                          f"{access_text(access)} is shared by {name} and {other} and uses {loop.var}: doubling {loop.var} "
                          f"would read past its end", access.span)
    return tensors, None


def concat_dimension(access: A.Access, var: str) -> int | None:
    """The one dimension an access indexes by the loop variable alone, when
    no other index uses it."""
    found = None
    for d, index in enumerate(access.indices or ()):
        if isinstance(index, A.Var) and index.name == var:
            if found is not None:
                return None
            found = d
        elif var in affine.index_vars(index):
            return None
    return found


def tensor_renaming(a: A.Equation, b: A.Equation) -> dict[str, str] | None:
    """The one-to-one tensor renaming that turns ``a`` into ``b`` (which
    writes another tensor), if the two are otherwise equal."""
    mapping: dict[str, str] = {}
    if a.lhs.tensor == b.lhs.tensor or not _match(a, b, mapping):
        return None
    if len(set(mapping.values())) != len(mapping):
        return None
    return mapping


def same_equation(a: A.Equation, b: A.Equation) -> bool:
    """Equal equations, comparing indices by their affine forms
    (``i+32`` is ``32+i``)."""
    return _match(a, b, None)


def _match(a: A.Equation, b: A.Equation, mapping: dict[str, str] | None) -> bool:
    """Whether ``a`` and ``b`` are equal, indices by their affine forms;
    with a ``mapping``, tensors may be renamed consistently (recorded)."""

    def same(x, y) -> bool:
        if type(x) is not type(y):
            return False
        if isinstance(x, A.Access):
            if mapping is None:
                if x.tensor != y.tensor:
                    return False
            elif mapping.setdefault(x.tensor, y.tensor) != y.tensor:
                return False
            return x.rank == y.rank and all(same_index(i, j) for i, j in zip(x.indices or (), y.indices or ()))
        if isinstance(x, A.Num):
            return x.value == y.value
        if isinstance(x, A.Var):
            return x.name == y.name
        if isinstance(x, A.Unary):
            return x.op == y.op and same(x.operand, y.operand)
        if isinstance(x, A.Binary):
            return x.op == y.op and same(x.lhs, y.lhs) and same(x.rhs, y.rhs)
        return x.func == y.func and len(x.args) == len(y.args) and all(same(p, q) for p, q in zip(x.args, y.args))

    if (a.predicate is None) != (b.predicate is None):
        return False
    return same(a.lhs, b.lhs) and same(a.rhs, b.rhs) and (a.predicate is None or same(a.predicate, b.predicate))


def same_index(i: A.Expr, j: A.Expr) -> bool:
    fi, fj = affine.linearize(i), affine.linearize(j)
    if fi is not None and fj is not None:
        return fi == fj
    return i == j


# ------------------------------------------------------------- rewriting


def _concatenate(ctx: Context, merge: Merge) -> A.Program:
    site, first, second = merge.site, merge.first, merge.second
    loop = site.loop
    extent = loop.extent
    info = ctx.analysis.tensors
    taken = names_in(ctx.program) | set(info)
    a, b = first.equation.lhs.tensor, second.equation.lhs.tensor
    new_names: dict[str, str] = {}
    decls: list[A.Decl] = []
    units: list[A.Nest] = []
    for p, q in merge.tensors.items():
        if p == q:
            continue
        cat = fresh_name(f"{p}_{q}", taken)
        taken.add(cat)
        new_names[p] = cat
        t = info[p]
        dim = _dimension_of(first.equation, p, loop.var)
        cat_shape = tuple(n * 2 if d == dim else n for d, n in enumerate(t.shape))
        if t.dtype != "f32":
            decls.append(A.Decl("tmp", cat, t.dtype, cat_shape))
        if p == a:
            continue  # the output: written by the fused nest, split below
        loops = _copy_loops(first.equation, p, t.shape, taken, {l.var for l in first.loops if not _inside(l, site.nest)})
        index = tuple(A.Var(l.var) for l in loops)
        shifted = tuple(A.Binary("+", v, A.Num(extent, str(extent))) if d == dim else v for d, v in enumerate(index))
        units.append(A.Nest(loops, (A.Equation(A.Access(cat, index), A.Access(p, index)),)))
        units.append(A.Nest(fresh_loops(loops), (A.Equation(A.Access(cat, shifted), A.Access(q, index)),)))
    rename = {old: new for old, new in new_names.items()}
    fused_eq = _rename_tensors(first.equation, rename)
    nest = site.nest
    fused = _with_loop(nest, loop, extent * 2, fused_eq)
    units.append(replace(fused, span=None))
    spatial = tuple(l for l in first.loops if l.var in first.spatial and any(l is m for m in _chain(nest)[0]))
    out_index = first.equation.lhs.indices
    shift = {loop.var: A.Binary("+", A.Var(loop.var), A.Num(extent, str(extent)))}
    cat_out = new_names[a]
    units.append(A.Nest(fresh_loops(spatial), (A.Equation(A.Access(a, out_index), A.Access(cat_out, out_index)),)))
    moved = tuple(substitute(i, shift) for i in out_index or ())
    units.append(A.Nest(fresh_loops(spatial), (A.Equation(A.Access(b, out_index), A.Access(cat_out, moved or None)),)))
    program = replace_items(ctx.program, merge.path, 2, tuple(units))
    return replace(program, decls=program.decls + tuple(decls))


def _dimension_of(eq: A.Equation, tensor: str, var: str) -> int:
    for node in A.walk(eq):
        if isinstance(node, A.Access) and node.tensor == tensor:
            return concat_dimension(node, var)
    raise AssertionError(tensor)


def _inside(loop: A.Loop, nest: A.Nest) -> bool:
    return any(l is loop for l in _chain(nest)[0])


def _copy_loops(eq: A.Equation, tensor: str, shape: tuple[int, ...], taken: set[str],
                outer: set[str]) -> tuple[A.Loop, ...]:
    """Loops over a whole tensor, named after the variables that index it
    in ``eq`` where they are plain (and not loops around the copy), fresh
    names elsewhere."""
    access = next(n for n in A.walk(eq) if isinstance(n, A.Access) and n.tensor == tensor)
    loops = []
    used: set[str] = set()
    for index, extent in zip(access.indices or (), shape):
        plain = isinstance(index, A.Var) and index.name not in used and index.name not in outer
        name = index.name if plain else fresh_name("d", taken | used)
        used.add(name)
        loops.append(A.Loop("L", extent, name))
    return tuple(loops)


def _with_loop(nest: A.Nest, loop: A.Loop, extent: int, eq: A.Equation) -> A.Nest:
    """The single-equation nest with ``loop`` widened and ``eq`` as its
    equation."""
    loops = tuple(replace(l, extent=extent) if l is loop else l for l in nest.loops)
    if len(nest.body) == 1 and isinstance(nest.body[0], A.Nest):
        return replace(nest, loops=loops, body=(_with_loop(nest.body[0], loop, extent, eq),))
    return replace(nest, loops=loops, body=(eq,))


def _rename_tensors(eq: A.Equation, mapping: dict[str, str]) -> A.Equation:
    from leir.transforms.rewrite import map_expr

    def fn(n):
        if isinstance(n, A.Access) and n.tensor in mapping:
            return replace(n, tensor=mapping[n.tensor], dtype=None, scope=None, span=None)
        return None

    return map_equation(eq, lambda e: map_expr(e, fn))

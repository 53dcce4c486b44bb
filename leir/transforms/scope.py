"""What a step can change, so that its verification builds and runs only that.

A step rewrites a contiguous run of a program's top-level nests (one nest
for a split or a reorder; a producer and its consumer for compute_at; a new
nest for cache_read...) and leaves the others as they are. ``scope_of``
finds, from the programs before and after:

- the **prefix**: the leading nests equal in both (same syntax tree, spans
  and comments aside), touching no tensor whose declaration the step
  changed;
- the **suffix**: the trailing nests equal in both;
- the **region** between them, which differs (``before[p:nb-s]`` against
  ``after[p:na-s]``);
- the **cone**: the suffix nests that read or write (transitively) what
  either region writes, or touch a tensor whose declaration changed;
- the **upstream slice**: the prefix nests whose results the region and
  the cone read (transitively), and no others.

Why that is a sound numerical check of the whole program (the argument
``leir.transforms.verify`` relies on):

1. Both programs start from the same state (the same inputs, outputs
   zeroed) and run the same prefix, with the same declarations of every
   tensor it touches. LEIR is deterministic and an equation's meaning
   (assign, reduce with its implied init, update) depends only on the
   equations before it, so both are in the same state after the prefix.
   That state is computed once, by the upstream slice: a nest outside the
   slice writes no tensor the slice, the region or the cone reads (the
   slice is closed under "reads a tensor an earlier nest writes"; a
   partial write keeps the tensor wanted, so every earlier writer of it is
   in the slice too).
2. A suffix nest outside the cone reads and writes no tensor either region
   writes, nor one that a cone nest writes, nor one whose declaration
   changed: it reads the same values and writes the same values in both
   programs, into tensors whose other values are the same in both (a nest
   that overwrites what a region wrote is in the cone, or a later reader
   would see its values in one program and the region's in the other). The
   cone grows in program order, so a nest that reads what a cone nest wrote
   is in the cone.
3. So every output that the region, the cone and the changed declarations
   do not write (the "tainted" tensors) has the same final value in both
   programs, and the outputs that can differ are exactly the program's
   outputs among the tainted tensors. The scoped verification runs the
   region followed by the cone, in each program, from the state after the
   prefix (tensors the sub-program writes start from that state through a
   copy), on the same seeds' inputs, and compares those outputs by the
   same rule as the whole-program verification.

Indices hold no tensor reads, so the data flow between nests is the tensor
names each reads and writes (a reduction reads the tensor it accumulates
into; a guard's reads count).

Whenever the sub-programs cannot be formed (a changed input, a region that
is the whole program, a sub-program the checker rejects) the caller
verifies the whole program instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leir import ast as A
from leir.semantics import Analysis, analyze

__all__ = ["Scope", "SubPrograms", "scope_of", "sub_programs", "unit_tensors"]


def unit_tensors(unit: A.Nest) -> tuple[frozenset[str], frozenset[str]]:
    """(read, written) tensor names of one top-level nest. A reduction
    (``C += e``) reads what it writes."""
    reads: set[str] = set()
    writes: set[str] = set()
    for node in A.walk(unit):
        if isinstance(node, A.Equation):
            writes.add(node.lhs.tensor)
            for side in (node.rhs, node.predicate):
                if side is not None:
                    reads.update(n.tensor for n in A.walk(side) if isinstance(n, A.Access))
    return frozenset(reads), frozenset(writes)


def _info(t) -> tuple:
    return (t.dtype, tuple(t.shape), t.scope, t.role)


@dataclass(frozen=True)
class Scope:
    """Which nests a step changed and which it can affect (indices into the
    programs' top-level nests)."""

    #: Nests in each program.
    total_before: int
    total_after: int
    #: ``before.units[:prefix]`` equals ``after.units[:prefix]``.
    prefix: int
    #: The last ``suffix`` nests are equal.
    suffix: int
    #: Suffix nests re-run (indices in the program before; the program after
    #: has them at ``k - total_before + total_after``).
    cone: tuple[int, ...]
    #: Prefix nests run once to give the state the region starts from.
    upstream: tuple[int, ...]
    #: Outputs whose values can differ: the ones compared.
    compared: tuple[str, ...]
    #: Tensors the prefix writes that the sub-programs need (their state
    #: after the prefix).
    carried: tuple[str, ...]
    #: Tensors whose declaration (dtype, shape, scope, role) the step changed.
    changed_tensors: tuple[str, ...] = ()

    @property
    def region_before(self) -> tuple[int, ...]:
        return tuple(range(self.prefix, self.total_before - self.suffix))

    @property
    def region_after(self) -> tuple[int, ...]:
        return tuple(range(self.prefix, self.total_after - self.suffix))

    @property
    def cone_after(self) -> tuple[int, ...]:
        return tuple(k - self.total_before + self.total_after for k in self.cone)

    def describe(self) -> str:
        """One line: what was built and run."""
        def nests(indices) -> str:
            if not indices:
                return "none"
            return ", ".join(str(k + 1) for k in indices)

        verified = self.region_before + self.cone
        text = (f"verified nests {nests(verified)} of {self.total_before} "
                f"(after the step: {nests(self.region_after + self.cone_after)} of {self.total_after})")
        text += (f", from the state nests {nests(self.upstream)} compute" if self.upstream
                 else ", from the program's inputs")
        if len(verified) + len(self.upstream) < self.total_before:
            text += f"; the other nests cannot change any compared output ({', '.join(self.compared) or 'none'})"
        return text


def scope_of(before: Analysis, after: Analysis) -> Scope | None:
    """The ``Scope`` of the step from ``before`` to ``after``, or None when
    the whole program has to be verified."""
    ub, ua = before.program.units, after.program.units
    nb, na = len(ub), len(ua)
    outs = [t.name for t in before.outputs()]
    if sorted(outs) != sorted(t.name for t in after.outputs()):
        return None
    changed = set()
    for name in set(before.tensors) | set(after.tensors):
        tb, ta = before.tensors.get(name), after.tensors.get(name)
        if tb is None or ta is None or _info(tb) != _info(ta):
            changed.add(name)
    for name in changed:
        for side in (before, after):
            t = side.tensors.get(name)
            if t is not None and t.role == "in":
                return None  # the inputs drawn for the program before would not fit
    p = 0
    while p < min(nb, na) and ub[p] == ua[p]:
        p += 1
    s = 0
    while s < min(nb, na) - p and ub[nb - 1 - s] == ua[na - 1 - s]:
        s += 1
    access_b = [unit_tensors(u) for u in ub]
    for k in range(p):
        r, w = access_b[k]
        if (r | w) & changed:
            p = k
            break
    if p == 0 and s == 0:
        return None
    tainted = set(changed)
    for k in range(p, nb - s):
        tainted |= access_b[k][1]
    for u in ua[p:na - s]:
        tainted |= unit_tensors(u)[1]
    cone = []
    for k in range(nb - s, nb):
        r, w = access_b[k]
        # A nest that writes a tainted tensor is in the cone too: it may
        # overwrite what the region wrote (dead_code_elimination's example:
        # the nest after the removed one writes S again before Y reads it).
        if (r | w) & tainted or (r | w) & changed:
            cone.append(k)
            tainted |= w
    compared = tuple(name for name in outs if name in tainted)
    # The state after the prefix that the sub-programs need.
    wanted: set[str] = set(compared)
    for k in list(range(p, nb - s)) + cone:
        r, w = access_b[k]
        wanted |= r | w
    for u in ua[p:na - s]:
        r, w = unit_tensors(u)
        wanted |= r | w
    prefix_writes = set()
    for k in range(p):
        prefix_writes |= access_b[k][1]
    carried = tuple(sorted((wanted & prefix_writes) - {t.name for t in before.inputs()}))
    need = set(carried)
    upstream = []
    for k in range(p - 1, -1, -1):
        r, w = access_b[k]
        if w & need:
            upstream.append(k)
            need |= r
    return Scope(nb, na, p, s, tuple(cone), tuple(reversed(upstream)), compared, carried, tuple(sorted(changed)))


# ------------------------------------------------------------ the sub-programs


@dataclass
class SubPrograms:
    """The programs the scoped verification builds, analysed."""

    #: The upstream slice (None when the region needs nothing the prefix
    #: computes); its outputs are the carried tensors.
    upstream: Analysis | None
    before: Analysis
    after: Analysis
    #: Input of a sub-program -> (kind, tensor): "input" (a program input,
    #: drawn as for the whole program), "carried" (the upstream slice's
    #: value of the tensor), "zeros" (a tensor nothing wrote yet).
    feeds: dict[str, tuple[str, str]] = field(default_factory=dict)


def _fresh(name: str, taken: set[str]) -> str:
    k = 0
    while True:
        candidate = f"{name}__init{k or ''}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate
        k += 1


def _copy_nest(target, source: str) -> A.Nest:
    """``target = source`` over every element."""
    loops = tuple(A.Loop("L", int(d), f"c{n}__") for n, d in enumerate(target.shape))
    indices = tuple(A.Var(l.var) for l in loops) if loops else None
    eq = A.Equation(A.Access(target.name, indices), A.Access(source, indices))
    return A.Nest(loops, (eq,), bracketed=bool(loops))


def _decl(t, role: str) -> A.Decl:
    return A.Decl(role, t.name, t.dtype, tuple(t.shape), t.scope if role == "tmp" else "g")


def _sub(side: Analysis, units: tuple[A.Nest, ...], scope: Scope, feeds: dict, taken: set[str]) -> Analysis:
    reads, writes = set(), set()
    for u in units:
        r, w = unit_tensors(u)
        reads |= r
        writes |= w
    carried = set(scope.carried)
    decls, copies = [], []
    names = [n for n in side.tensors if n in reads | writes or n in scope.compared]
    for name in names:
        t = side.tensors[name]
        if t.role == "in":
            decls.append(_decl(t, "in"))
            feeds[name] = ("input", name)
        elif name in writes or name in scope.compared:
            if name in carried:
                source = next((k for k, v in feeds.items() if v == ("carried", name) and k != name), None)
                if source is None:
                    source = _fresh(name, taken)
                    feeds[source] = ("carried", name)
                decls.append(A.Decl("in", source, t.dtype, tuple(t.shape), "g"))
                copies.append(_copy_nest(t, source))
            decls.append(_decl(t, "out" if name in scope.compared else "tmp"))
        else:  # read only: its state after the prefix is an input here
            decls.append(_decl(t, "in"))
            feeds[name] = ("carried", name) if name in carried else ("zeros", name)
    return analyze(A.Program(tuple(decls), tuple(copies) + tuple(units)))


def sub_programs(before: Analysis, after: Analysis, scope: Scope) -> SubPrograms | None:
    """The upstream slice and the two sub-programs; None when one of them
    does not check (the caller then verifies the whole program)."""
    ub, ua = before.program.units, after.program.units
    taken = set(before.tensors) | set(after.tensors)
    feeds: dict[str, tuple[str, str]] = {}
    sub_b = _sub(before, tuple(ub[k] for k in scope.region_before + scope.cone), scope, feeds, taken)
    sub_a = _sub(after, tuple(ua[k] for k in scope.region_after + scope.cone_after), scope, feeds, taken)
    upstream = None
    if scope.upstream:
        units = tuple(ub[k] for k in scope.upstream)
        used = set()
        for u in units:
            r, w = unit_tensors(u)
            used |= r | w
        decls = []
        for name, t in before.tensors.items():
            if name not in used:
                continue
            # Outputs start zero-filled, as in the program; a carried
            # temporary is an output here, so that its values come back.
            role = "in" if t.role == "in" else ("out" if name in scope.carried or t.role == "out" else "tmp")
            decls.append(_decl(t, role))
        upstream = analyze(A.Program(tuple(decls), units))
    for a in (sub_b, sub_a, upstream):
        if a is not None and not a.ok:
            return None
    if any(kind == "carried" and upstream is None for kind, _ in feeds.values()):
        return None
    return SubPrograms(upstream, sub_b, sub_a, feeds)


# ------------------------------------------------------------ one build for both


def merged(subs: SubPrograms) -> tuple[Analysis, dict[str, str]] | None:
    """Both sub-programs as one program (the nests before the step, then
    the nests after it, with every tensor of the second part that the first
    part has too renamed), so that one build serves both; and the renaming
    (a tensor of the program after -> its name here). The two parts share
    no tensor they write, and an input only when its declaration is the
    same, so each part computes exactly what it computes alone. None when
    the merged program does not check."""
    from dataclasses import replace

    from leir.transforms.rewrite import map_equation, map_expr

    sb, sa = subs.before, subs.after
    taken = set(sb.tensors) | set(sa.tensors)
    rename: dict[str, str] = {}
    for name, t in sa.tensors.items():
        tb = sb.tensors.get(name)
        if t.role == "in" and tb is not None and tb.role == "in" and _info(tb) == _info(t):
            rename[name] = name  # the same input: fed once
        else:
            k, candidate = 0, f"{name}__after"
            while candidate in taken:
                k += 1
                candidate = f"{name}__after{k}"
            taken.add(candidate)
            rename[name] = candidate

    def access(e):
        return replace(e, tensor=rename[e.tensor]) if isinstance(e, A.Access) and e.tensor in rename else None

    def item(node):
        if isinstance(node, A.Equation):
            return map_equation(node, lambda e: map_expr(e, access))
        return replace(node, body=tuple(item(i) for i in node.body))

    decls = list(sb.complete_program().decls)
    for d in sa.complete_program().decls:
        if rename[d.name] != d.name:
            decls.append(replace(d, name=rename[d.name], name_span=None, span=None))
    units = tuple(sb.program.units) + tuple(item(u) for u in sa.program.units)
    program = analyze(A.Program(tuple(decls), units))
    if not program.ok:
        return None
    return program, rename

"""What the passes of an analysis share: the program's equations with
what each reads and which loop variables it names (``Facts``), every
loop variable's first binding, the diagnostics reported so far, and the
memoised queries the checks ask again and again (an index's affine form
and variables, whether a guard holds somewhere, an enumerable iteration
space charged to one budget per analysis).

One ``Context`` is made per analysis (``leir.semantics.driver``); each
pass is a function taking it as its first argument."""

from __future__ import annotations

from dataclasses import dataclass

from leir import affine
from leir import ast as A
from leir.ast import Span
from leir.cancel import checkpoint
from leir.diagnostics import Diagnostic

#: Iteration points the enumeration-based checks may visit in one analysis,
#: over all equations: two full spaces of ``affine.MAX_POINTS``, about 30 ms.
#: Keeps a pathological document within the editor's budget; the common
#: cases are decided without enumerating.
ENUMERATION_BUDGET = 2 * affine.MAX_POINTS

#: Loop kinds whose iterations may run at once (parallel, vectorized,
#: thread-bound).
PARALLEL_KINDS = frozenset({"P", "V", "B"})

#: The span of a diagnostic whose node has none (a synthesised node).
NO_SPAN = Span(0, 0)


# --------------------------------------------------------------------- walks


def scan(expr: A.Expr, accesses: list[A.Access], variables: list[A.Var]) -> None:
    """Append the accesses and loop-variable uses in ``expr``, in source
    order. Iterative: cheaper than ``ast.walk`` on the hot path."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        e = pop()
        t = type(e)
        if t is A.Access:
            accesses.append(e)
            if e.indices:
                stack.extend(reversed(e.indices))
        elif t is A.Var:
            variables.append(e)
        elif t is A.Binary:
            push(e.rhs)
            push(e.lhs)
        elif t is A.Unary:
            push(e.operand)
        elif t is A.Call:
            stack.extend(reversed(e.args))


def accesses_in(expr: A.Expr) -> list[A.Access]:
    out: list[A.Access] = []
    scan(expr, out, [])
    return out


@dataclass
class Use:
    """One access of a tensor: where it is, and the loops it runs in."""

    access: A.Access
    eq_index: int
    is_write: bool
    loops: tuple[A.Loop, ...]
    ranges: dict[str, affine.Range]  # of those loops
    #: The guard the access runs under (None for accesses in the guard
    #: itself, which are evaluated at every iteration).
    predicate: A.Expr | None


@dataclass
class Facts:
    """What one equation reads and which loop variables it names."""

    site: A.EquationSite
    reads: list[A.Access]  # right-hand side, source order
    guard_reads: list[A.Access]
    variables: list[A.Var]  # everywhere in the equation
    ranges: dict[str, affine.Range]


class Context:
    """The state one analysis shares among its passes: the ``program``, its
    equation ``sites`` and their ``facts`` (in program order), every loop
    variable's first binding (``all_loops``), whether any loop is bound to
    GPU threads (``has_thread_loops``), the diagnostics reported so far
    (``diags``, in report order: the driver sorts them), and what is left
    of the enumeration budget (``enumeration_left``, spent by ``space``).

    Made once per analysis; building it walks the program once, which is
    all ``leir.semantics.classify``'s light path pays beyond classifying."""

    def __init__(self, program: A.Program):
        self.program = program
        self.diags: list[Diagnostic] = []
        self.sites = list(A.equation_sites(program))
        self.all_loops: dict[str, A.Loop] = {}
        self.has_thread_loops = False
        self._collect_loops()
        self.facts: list[Facts] = []
        for k, site in enumerate(self.sites):
            if not k & 255:
                checkpoint()
            self.facts.append(self._facts(site))
        self.enumeration_left = ENUMERATION_BUDGET
        self._forms: dict[int, affine.Affine | None] = {}
        self._vars: dict[int, frozenset[str]] = {}
        self._guard_holds: dict[int, bool | None] = {}

    def _collect_loops(self) -> None:
        """Every loop variable's first binding in program order."""
        stack = list(reversed(self.program.units))
        while stack:
            nest = stack.pop()
            for loop in nest.loops:
                self.all_loops.setdefault(loop.var, loop)
                if loop.kind == "B":
                    self.has_thread_loops = True
            stack.extend(item for item in reversed(nest.body) if isinstance(item, A.Nest))

    @staticmethod
    def _facts(site: A.EquationSite) -> Facts:
        eq = site.equation
        reads: list[A.Access] = []
        guard_reads: list[A.Access] = []
        variables: list[A.Var] = []
        for index in eq.lhs.indices or ():
            scan(index, [], variables)
        scan(eq.rhs, reads, variables)
        if eq.predicate is not None:
            scan(eq.predicate, guard_reads, variables)
        return Facts(site, reads, guard_reads, variables, affine.loop_ranges(site.loops))

    def form(self, index: A.Expr) -> affine.Affine | None:
        """``affine.linearize``, once per index node."""
        key = id(index)
        if key not in self._forms:
            self._forms[key] = affine.linearize(index)
        return self._forms[key]

    def vars_of(self, expr: A.Expr) -> frozenset[str]:
        """``affine.index_vars``, once per node."""
        key = id(expr)
        names = self._vars.get(key)
        if names is None:
            names = self._vars[key] = affine.index_vars(expr)
        return names

    def report(self, d: Diagnostic) -> None:
        self.diags.append(d)

    def space(self, loops: list[A.Loop]) -> affine.Space | None:
        """An enumerable space over ``loops``, charged to the budget; None
        when it is too large or the budget is spent."""
        size = affine.Space.size_of(loops)
        if size > affine.MAX_POINTS or size > self.enumeration_left:
            return None
        if any(l.extent < 1 for l in loops):
            return None
        self.enumeration_left -= size
        return affine.Space(loops)

    def relevant_guard(self, guard: A.Expr | None, names: frozenset[str],
                       loops: tuple[A.Loop, ...]) -> tuple[A.Expr | None, bool | None]:
        """The guard as far as a question about ``names`` is concerned:
        ``(guard, True)`` when it names one of them; otherwise it only says
        whether the equation runs at all: ``(None, True)`` if it holds
        somewhere, ``(None, None)`` if it never does, ``(None, False)`` if
        that is unknown."""
        if guard is None or self.vars_of(guard) & names:
            return guard, True
        holds = self.guard_holds_somewhere(guard, loops)
        return None, (None if holds is False else holds is True)

    def guard_holds_somewhere(self, guard: A.Expr, loops: tuple[A.Loop, ...]) -> bool | None:
        """Whether the guard holds at some iteration (None: unknown)."""
        key = id(guard)
        if key not in self._guard_holds:
            names = self.vars_of(guard)
            space = self.space([l for l in loops if l.var in names])
            mask = space.evaluate(guard) if space is not None else None
            self._guard_holds[key] = None if mask is None else bool(affine._numpy().any(mask))
        return self._guard_holds[key]

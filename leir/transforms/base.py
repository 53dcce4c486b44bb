"""What every transformation shares: steps, candidates, typed errors, and
the context a transformation reads (the analysed program, its loops, the
TensorIR it lowers to).

A *step* is one atomic transformation with concrete arguments, as JSON:
``{"id": "split", "args": {"block": "C", "loop": "k", "factors": [8, 32]}}``.
Loops are named by the block (equation) they enclose and their variable,
because loop variable names repeat across nests (every softmax nest has an
``i``) while block names are unique. Block names follow the lowering: the
written tensor's name, then ``_1``, ``_2``... for later writes of it.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from leir import ast as A
from leir.ast import Span
from leir.errors import LeirError
from leir.semantics import Analysis, EquationInfo

# ------------------------------------------------------------------ steps


@dataclass(frozen=True)
class Step:
    id: str
    args: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "args": self.args}

    @property
    def key(self) -> str:
        """A canonical string of the step, for equality and caching."""
        return json.dumps(self.to_json(), sort_keys=True)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Step) and self.key == other.key


@dataclass(frozen=True)
class Candidate:
    """A step that applies at a place in the program, with a title for the
    editor and the source range it acts on."""

    step: Step
    title: str
    span: Span | None

    def to_json(self, source=None) -> dict[str, Any]:
        """``{"id", "title", "args", "range"}``; the range's lines and
        columns are 1-based, as in ``--at LINE:COL`` and diagnostics."""
        out = {"id": self.step.id, "title": self.title, "args": self.step.args}
        if self.span is not None and source is not None:
            out["range"] = span_json(source, self.span)
        return out


def span_json(source, span: Span) -> dict[str, Any]:
    (l0, c0), (l1, c1) = source.position(span.start), source.position(span.end)
    return {"start": {"line": l0 + 1, "column": c0 + 1}, "end": {"line": l1 + 1, "column": c1 + 1}}


def step_from_json(data: Any) -> Step:
    """A step from ``leir actions --json`` output (extra keys ignored)."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        raise BadStep("a step is a JSON object with an \"id\" string and an \"args\" object")
    args = data.get("args", {})
    if not isinstance(args, dict):
        raise BadStep(f"step {data['id']}: \"args\" must be an object")
    return Step(data["id"], args)


# ----------------------------------------------------------------- errors


class TransformError(LeirError):
    """A step that cannot be applied. ``str(e)`` is the short message; the
    detailed one (``detail``) says why, pointing at the loop or access
    (``span``) — it is what "why is this not offered?" shows."""

    code = "transform-error"

    def __init__(self, short: str, detail: str | None = None, span: Span | None = None):
        super().__init__(short)
        self.short = short
        self.detail = detail or short
        self.span = span


class BadStep(TransformError):
    """The step's JSON or arguments are malformed."""

    code = "bad-step"


class UnknownTransform(TransformError):
    code = "unknown-transform"


class StaleStep(TransformError):
    """The step names a block, loop or tensor the program no longer has (or
    no longer has in that shape): it was computed on another version."""

    code = "stale-step"


class NotApplicable(TransformError):
    """A precondition does not hold. Each transformation subclasses this
    once per precondition."""

    code = "not-applicable"


class TvmRefused(TransformError):
    """TVM's schedule primitive refused a step our analysis allowed: a bug
    in our legality check, reported as such."""

    code = "tvm-refused"


class VerificationFailed(TransformError):
    """The rewritten program computes something else: a bug in our legality
    check, reported as such and never applied."""

    code = "verification-failed"


# ---------------------------------------------------------------- context


@dataclass(frozen=True)
class LoopSite:
    """A loop with what surrounds it: the loops outside it (outermost first)
    and the equations inside it (their indices in program order)."""

    loop: A.Loop
    outer: tuple[A.Loop, ...]
    equations: tuple[int, ...]
    #: The nest the loop belongs to and its position in ``nest.loops``.
    nest: A.Nest
    position: int

    @property
    def depth(self) -> int:
        return len(self.outer)


#: Contexts kept by ``Context.of`` (a few documents' current versions).
_RECENT_CONTEXTS = 4
_RECENT: list["Context"] = []
_RECENT_LOCK = threading.Lock()


@dataclass
class Context:
    """A program as transformations see it."""

    analysis: Analysis
    name: str = "main"

    @classmethod
    def of(cls, analysis: Analysis, name: str = "main") -> "Context":
        """The Context of ``analysis``, shared with the last few callers that
        asked for the same analysis object: hover, the code-action menu and
        the explanation of a loop on one document version then compute the
        program's loop sites, block names and nest places once."""
        with _RECENT_LOCK:
            for ctx in _RECENT:
                if ctx.analysis is analysis and ctx.name == name:
                    return ctx
            ctx = cls(analysis, name)
            _RECENT.insert(0, ctx)
            del _RECENT[_RECENT_CONTEXTS:]
            return ctx

    def memo(self, key: Any, compute):
        """``compute()``, once per Context and ``key``: a whole-program fact
        a transformation's listing needs at every cursor position."""
        memo = self.__dict__.setdefault("_memo", {})
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    @property
    def program(self) -> A.Program:
        return self.analysis.program

    @cached_property
    def block_names(self) -> list[str]:
        """Block name of each equation, in program order (as lowered)."""
        names: list[str] = []
        seen: set[str] = set()
        for info in self.analysis.equations:
            base = info.equation.lhs.tensor
            name, k = base, 0
            while name in seen:
                k += 1
                name = f"{base}_{k}"
            seen.add(name)
            names.append(name)
        return names

    def equation_of_block(self, block: str) -> EquationInfo:
        try:
            return self.analysis.equations[self.block_names.index(block)]
        except ValueError:
            raise StaleStep(f"no block {block} in the program", f"the program has blocks {', '.join(self.block_names)}") from None

    @cached_property
    def loop_sites(self) -> list[LoopSite]:
        """Every loop in program order (outer before inner)."""
        sites: list[LoopSite] = []
        index_of = {info.site.path: info.index for info in self.analysis.equations}

        def equations_under(nest: A.Nest, path: tuple[int, ...]) -> list[int]:
            out = []
            for i, item in enumerate(nest.body):
                if isinstance(item, A.Equation):
                    out.append(index_of[path + (i,)])
                else:
                    out.extend(equations_under(item, path + (i,)))
            return out

        def visit(nest: A.Nest, outer: tuple[A.Loop, ...], path: tuple[int, ...]) -> None:
            eqs = tuple(equations_under(nest, path))
            for p, loop in enumerate(nest.loops):
                sites.append(LoopSite(loop, outer + nest.loops[:p], eqs, nest, p))
            for i, item in enumerate(nest.body):
                if isinstance(item, A.Nest):
                    visit(item, outer + nest.loops, path + (i,))

        for u, unit in enumerate(self.program.units):
            visit(unit, (), (u,))
        return sites

    def loop_site(self, block: str, var: str) -> LoopSite:
        """The loop ``var`` around ``block``, or StaleStep."""
        info = self.equation_of_block(block)
        sites = self._site_of_loop
        for loop in info.loops:  # the sites holding the equation, outermost first
            if loop.var == var and id(loop) in sites:
                return sites[id(loop)]
        raise StaleStep(f"block {block} has no loop {var}",
                        f"the loops around {block} are {', '.join(l.var for l in info.loops) or 'none'}")

    def loop_ref(self, site: LoopSite) -> dict[str, str]:
        """The arguments that name a loop: its first block and its variable."""
        return {"block": self.block_names[site.equations[0]], "loop": site.loop.var}

    @cached_property
    def child_sites(self) -> dict[int, list[LoopSite]]:
        """id(loop) -> the loops directly inside it, in program order."""
        out: dict[int, list[LoopSite]] = {}
        for s in self.loop_sites:
            if s.outer:
                out.setdefault(id(s.outer[-1]), []).append(s)
        return out

    def loops_at(self, at: int | None) -> list[LoopSite]:
        """The loops a cursor position selects: the loop whose header holds
        it; else every loop enclosing it (innermost first); everything when
        no position is given."""
        if at is None:
            return list(self.loop_sites)
        near = self._near(at)[0]
        on_header = [s for s in near if s.loop.span is not None and s.loop.span.contains(at)]
        if on_header:
            return on_header
        enclosing = [s for s in near if s.nest.span is not None and s.nest.span.contains(at)]
        return sorted(enclosing, key=lambda s: -s.depth)

    def equations_at(self, at: int | None) -> list[EquationInfo]:
        if at is None:
            return list(self.analysis.equations)
        return [info for info in self._near(at)[1]
                if info.equation.span is not None and info.equation.span.contains(at)]

    def _near(self, at: int) -> tuple[list[LoopSite], list[EquationInfo]]:
        """The loop sites and equations of the top-level units whose span
        holds ``at`` (a loop or equation holding it lies in one of them), in
        program order; all of them when a unit has no span (a program built
        by a rewrite). Found by bisection: hover and listing on a
        100,000-line file no longer scan every loop per request."""
        index = self._unit_index
        if index is None:
            return self.loop_sites, self.analysis.equations
        starts, units = index
        k = bisect.bisect_right(starts, at) - 1
        sites: list[LoopSite] = []
        equations: list[EquationInfo] = []
        for j in (k - 1, k):
            if j >= 0:
                span, unit_sites, unit_equations = units[j]
                if span.contains(at):
                    sites += unit_sites
                    equations += unit_equations
        return sites, equations

    @cached_property
    def _site_of_loop(self) -> dict[int, LoopSite]:
        return {id(site.loop): site for site in self.loop_sites}

    @cached_property
    def _unit_index(self):
        """(unit starts, [(span, loop sites, equations)] per unit), or None
        when a unit has no span or the units are not in order."""
        units = self.program.units
        if any(u.span is None for u in units):
            return None
        starts = [u.span.start for u in units]
        if starts != sorted(starts):
            return None
        unit_of: dict[int, int] = {}
        for u, unit in enumerate(units):
            stack = [unit]
            while stack:
                nest = stack.pop()
                unit_of[id(nest)] = u
                stack.extend(item for item in nest.body if isinstance(item, A.Nest))
        grouped = [(u.span, [], []) for u in units]
        for site in self.loop_sites:
            grouped[unit_of[id(site.nest)]][1].append(site)
        for info in self.analysis.equations:
            grouped[info.site.path[0]][2].append(info)
        return starts, grouped

    @cached_property
    def func(self):
        """The lowered TensorIR PrimFunc (thread-bound loops kept)."""
        from leir.bridge.lower import lower

        return lower(self.analysis, self.name)


# ------------------------------------------------------------ arguments


def int_arg(args: dict, key: str, step_id: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadStep(f"{step_id}: argument {key!r} must be an integer, got {value!r}")
    return value


def str_arg(args: dict, key: str, step_id: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise BadStep(f"{step_id}: argument {key!r} must be a name, got {value!r}")
    return value


def int_list_arg(args: dict, key: str, step_id: str) -> list[int]:
    value = args.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BadStep(f"{step_id}: argument {key!r} must be a list of integers, got {value!r}")
    return value


def loop_arg(ctx: Context, args: dict, step_id: str) -> LoopSite:
    """The loop named by ``args["block"]`` and ``args["loop"]``."""
    return ctx.loop_site(str_arg(args, "block", step_id), str_arg(args, "loop", step_id))


def tvm_loop(sch, block: str, var: str):
    """The TVM loop random variable around ``block`` whose variable is ``var``."""
    for rv in sch.get_loops(sch.get_sblock(block)):
        if sch.get(rv).loop_var.name == var:
            return rv
    raise StaleStep(f"TVM finds no loop {var} around block {block}")


#: ``divisors`` tries at most this many candidates: every divisor of an
#: extent the checker accepts (``leir.limits.MAX_EXTENT``, whose square
#: root is 46,341) is found; of a larger number, those up to this and their
#: cofactors.
MAX_TRIAL_DIVISOR = 1 << 16


@functools.lru_cache(maxsize=4096)
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, min(math.isqrt(n), MAX_TRIAL_DIVISOR) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order (all of them for
    ``n <= 2**32``; past that only the pairs with a member up to
    ``MAX_TRIAL_DIVISOR``): O(sqrt(n)) at most 65,536 steps, cached."""
    if n < 1:
        return []
    return list(_divisors(n))

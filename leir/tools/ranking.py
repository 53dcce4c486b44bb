"""The ranking seam: what orders the steps ``leir optimize`` measures first,
the editor offers first and the dataset builder explores first.

A ``Ranker`` scores candidate steps of one program for a target, higher is
better, each with the facts the score was read from (short clauses, for the
reasoning). ``HeuristicRanker`` is the first implementation: a cheap
heuristic computed from the program alone (loop extents, reduction axes,
access strides, the share of the program's iterations a step touches:
nothing is built). A learned model plugs in here (``leir_models``), so
``leir`` keeps working, and is tested, without it: ``load_ranker`` finds
one through the entry-point group ``leir.rankers`` (``leir_models``
registers ``model``, the language model of docs/model.md) and returns the
heuristic, with the reason logged, when none is installed or it cannot load.
"""

from __future__ import annotations

import logging
import math
import os
import random
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, runtime_checkable

from leir import transforms
from leir.errors import LeirError
from leir.explain import access_strides
from leir.semantics import Analysis, EquationInfo

__all__ = ["HEURISTIC", "RANKER_GROUP", "SEARCHED", "HeuristicRanker", "Ranked", "Ranker", "load_ranker", "pick",
           "rank", "score_step"]

logger = logging.getLogger(__name__)

#: The entry-point group an installed ranker registers under: a callable
#: returning a ``Ranker`` (``leir_models`` registers ``model``).
RANKER_GROUP = "leir.rankers"

#: Loop and memory transformations: the ones that change latency without
#: changing the arithmetic (``leir.transforms.SCHEDULE_GROUPS``), in the
#: catalogue's order.
SEARCHED = transforms.ids_in(*transforms.SCHEDULE_GROUPS)


@runtime_checkable
class Ranker(Protocol):
    """Scores steps of one program (``ctx``, a ``leir.transforms.Context``).

    Optional (looked up with ``getattr``, not part of the protocol's check):
    ``explain(ctx, step, target) -> str | None``, reasoning the ranker
    writes for one step, already checked against the step's facts
    (``leir.explain.grounding``); ``leir.tools.suggest`` shows it, as
    predicted, for its first few suggestions. ``reasoning_note: str |
    None``, said beside that reasoning (e.g. "decoded under SOL at budget
    0.5"). ``decoding() -> dict``, how its reasoning is decoded, as plain
    data with a ``text`` clause (the server's model worker reports it)."""

    #: What the ranking is, for reports ("heuristic", a model's name).
    name: str

    def score(self, ctx, steps: Sequence, target: str) -> list[tuple[float, tuple[str, ...]]]:
        """(score, facts) of each of ``steps``, in their order; higher is better."""
        ...


class HeuristicRanker:
    """``score_step`` of each step; a step it cannot reason about scores 1."""

    name = "heuristic"

    def score(self, ctx, steps: Sequence, target: str) -> list[tuple[float, tuple[str, ...]]]:
        from leir.cancel import checkpoint

        out = []
        for step in steps:
            checkpoint()  # a request past its budget or overtaken stops here (leir.cancel)
            try:
                out.append(score_step(ctx, step, target))
            except LeirError:
                out.append((1.0, ()))
        return out


HEURISTIC = HeuristicRanker()


def _entry_points(name: str) -> list:
    """The entry points of ``leir.rankers`` called ``name``."""
    from importlib import metadata

    return [ep for ep in metadata.entry_points(group=RANKER_GROUP) if ep.name == name]


def load_ranker_telling(name: str | None, tell: Callable[[str], None]) -> Ranker:
    """``load_ranker(name)``, handing ``tell`` each reason it logs for not
    loading the ranker (the commands print them; the dataset builder stops
    on them)."""
    said = logging.Handler(logging.WARNING)
    said.emit = lambda record: tell(record.getMessage())
    logger.addHandler(said)
    try:
        return load_ranker(name)
    finally:
        logger.removeHandler(said)


def ranker_missing(name: str | None = "model") -> str | None:
    """Why ``load_ranker(name)`` would give the heuristic, found without
    loading the ranker (no torch, no weights read): nothing is installed
    under the name, or its factory's optional ``missing()`` (an attribute of
    the entry point's object, e.g. "no model file") names what is missing.
    None when it may load (loading can still fail, and says why)."""
    if name in (None, "heuristic"):
        return None
    try:
        found = _entry_points(name)
        if not found:
            return f"nothing is installed under {RANKER_GROUP} as {name!r}"
        missing = getattr(found[0].load(), "missing", None)
        return missing() if callable(missing) else None
    except Exception as e:  # noqa: BLE001 - a broken install: loading it would say more
        return f"{type(e).__name__}: {e}"


def load_ranker(name: str | None = "model") -> Ranker:
    """The ranker called ``name``: ``"heuristic"`` (or None) is ``HEURISTIC``;
    any other name is looked up in the entry-point group ``leir.rankers``
    and loaded. When nothing is installed under that name, or loading it
    fails (no torch, no model file), the heuristic is returned and the reason
    logged as a warning: asking for a model never crashes."""
    if name in (None, "heuristic"):
        return HEURISTIC
    try:
        found = _entry_points(name)
    except Exception as e:  # noqa: BLE001 - a broken distribution's metadata
        logger.warning("ranker %r: reading the entry points failed (%s); using the heuristic", name, e)
        return HEURISTIC
    if not found:
        logger.warning("ranker %r: nothing is installed under %s (pip install 'leir-lsp[lm]'); using the heuristic",
                       name, RANKER_GROUP)
        return HEURISTIC
    try:
        loader = found[0].load()
        ranker = loader() if callable(loader) and not isinstance(loader, Ranker) else loader
    except Exception as e:  # noqa: BLE001 - an installed ranker that cannot load is no ranker
        logger.warning("ranker %r (%s) did not load: %s: %s; using the heuristic", name, found[0].value,
                       type(e).__name__, e)
        return HEURISTIC
    if not isinstance(ranker, Ranker):
        logger.warning("ranker %r gave %s, not a Ranker; using the heuristic", name, type(ranker).__name__)
        return HEURISTIC
    return ranker


@dataclass(frozen=True)
class Ranked:
    step: object  # leir.transforms.Step
    title: str
    score: float
    #: Facts behind the score, one short clause each, for the reasoning.
    facts: tuple[str, ...]


def _strides_text(strides: dict[str, int | None]) -> str:
    return ", ".join(f"{n.split('#')[0]} {'?' if s is None else s}" for n, s in strides.items())


def _contiguous(strides: dict[str, int | None]) -> bool:
    return bool(strides) and all(s in (0, 1) for s in strides.values()) and any(s == 1 for s in strides.values())


def rank(analysis: Analysis, target: str = "llvm", ranker: "Ranker | None" = None) -> list[Ranked]:
    """Every searched candidate step with its score from ``ranker`` (the
    heuristic by default), best first."""
    from leir.transforms.base import Context

    ranker = ranker or HEURISTIC
    ctx = Context.of(analysis)
    only = tuple(i for i in SEARCHED if target == "cuda" or i != "bind")
    found = transforms.candidates(ctx, None, only=only)
    scores = ranker.score(ctx, [c.step for c in found], target)
    ranked = [Ranked(c.step, c.title, score, facts) for c, (score, facts) in zip(found, scores)]
    ranked.sort(key=lambda r: -r.score)  # stable: ALL order among equals
    return ranked


def _innermost(ctx, site) -> bool:
    # The loops that enclose another, once per program (was a scan of every
    # loop per step scored: linear in the program on each listing).
    outer = ctx.memo("outer_loops", lambda: {id(o) for s in ctx.loop_sites for o in s.outer})
    return id(site.loop) not in outer


def _iterations(info: EquationInfo) -> int:
    return math.prod(l.extent for l in info.loops)


def _share(ctx, step) -> float:
    """The fraction of the program's loop iterations spent in the equations
    the step's block or loop encloses (a step on a small nest matters less)."""
    total = ctx.memo("total_iterations", lambda: sum(_iterations(i) for i in ctx.analysis.equations) or 1)
    args = step.args
    if "block" not in args:
        return 1.0
    if "loop" in args:
        eqs = ctx.loop_site(args["block"], args["loop"]).equations
        return sum(_iterations(ctx.analysis.equations[e]) for e in eqs) / total
    return _iterations(ctx.equation_of_block(args["block"])) / total


def score_step(ctx, step, target: str) -> tuple[float, tuple[str, ...]]:
    """The heuristic score of ``step`` in ``ctx`` (a ``leir.transforms.Context``) for
    ``target``, and the facts it was read from: what ``rank`` orders by."""
    try:
        share = _share(ctx, step)
    except LeirError:
        share = 1.0
    score, facts = _base_score(ctx, step, target)
    if share < 0.999:
        facts = facts + (f"{share:.0%} of the program's loop iterations",)
    return score * (0.3 + 0.7 * share), facts


def _base_score(ctx, step, target: str) -> tuple[float, tuple[str, ...]]:
    args, sid = step.args, step.id
    cores = os.cpu_count() or 1
    site = ctx.loop_site(args["block"], args["loop"]) if "loop" in args and "block" in args else None
    info = ctx.equation_of_block(args["block"]) if "block" in args else None
    if sid == "parallelize" and site is not None:
        facts = (f"{site.loop.extent} iterations over {cores} cores",)
        # An inner parallel loop starts its threads once per outer iteration.
        return 100 - 40 * site.depth - (40 if site.loop.extent < cores else 0), facts
    if sid == "bind":
        return 90 - 5 * (site.depth if site else 0), ()
    if sid == "vectorize" and site is not None and info is not None:
        strides = access_strides(ctx.analysis, info, site.loop.var)
        facts = (f"{site.loop.extent} lanes", f"strides along {site.loop.var}: {_strides_text(strides)}")
        score = 90 if _contiguous(strides) else 25
        if site.loop.extent > 64:
            score -= 15  # LLVM splits a long vector loop anyway; a split first gives it a better width
        if site.loop.extent % 4:
            score -= 20
        return score, facts
    if sid == "reorder" and info is not None and len(args.get("loops") or ()) == 2:
        outer, inner = args["loops"]
        inner_site = ctx.loop_site(args["block"], inner)
        if _innermost(ctx, inner_site):
            now = access_strides(ctx.analysis, info, inner)
            then = access_strides(ctx.analysis, info, outer)
            facts = (f"innermost {inner} has strides {_strides_text(now)}",
                     f"{outer} would have {_strides_text(then)}")
            if _contiguous(then) and not _contiguous(now):
                return 85, facts
            return 15, facts
        return 20, ()
    if sid == "split" and site is not None and info is not None:
        inner = args["factors"][1]
        exact = site.loop.extent % inner == 0
        strides = access_strides(ctx.analysis, info, site.loop.var)
        reduction = site.loop.var in info.reduce_axes
        facts = (f"{site.loop.extent} iterations into {args['factors'][0]}x{inner}",)
        score = 15.0
        if _innermost(ctx, site) and _contiguous(strides) and inner in (8, 16, 32):
            score, facts = 60.0, facts + (f"strides along {site.loop.var}: {_strides_text(strides)}",)
        elif reduction and inner in (16, 32, 64):
            score, facts = 40.0, facts + (f"{site.loop.var} is a reduction axis",)
        elif inner in (8, 16, 32):
            score = 30.0
        return score - (30 if not exact else 0), facts
    if sid == "tile" and info is not None:
        # Tiling pays where a reduction re-reads data across the tiled loops.
        sizes = args.get("sizes", [])
        good = all(s in (8, 16, 32) for s in sizes) and bool(info.reduce_axes)
        return (45.0 if good else 12.0), (f"{'x'.join(map(str, sizes))} tiles",)
    if sid == "unroll" and site is not None:
        if _innermost(ctx, site) and site.loop.extent <= 16:
            return 30.0, (f"{site.loop.extent} iterations",)
        return 5.0, ()
    if sid in ("compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline"):
        return 35.0, ()
    if sid == "cache_write":
        return 25.0, ()
    if sid == "fuse":
        return 15.0, ()
    return 8.0, ()


def pick(ranked: list[Ranked], k: int, rng: random.Random, exclude: set[str] = frozenset()) -> list[Ranked]:
    """The ``k`` best-ranked steps, at most one per (transformation, loop)
    before a second of the same (so k picks are not six splits of one loop),
    with the last pick drawn at random from the rest when k > 2."""
    pool = [r for r in ranked if r.step.key not in exclude]
    if k <= 0 or not pool:
        return []
    exploit = k - 1 if k > 2 else k
    chosen, seen = [], set()
    for r in pool:
        where = (r.step.id, r.step.args.get("block"), r.step.args.get("loop"), str(r.step.args.get("loops")))
        if where not in seen:
            seen.add(where)
            chosen.append(r)
        if len(chosen) == exploit:
            break
    for r in pool:
        if len(chosen) >= exploit:
            break
        if r not in chosen:
            chosen.append(r)
    rest = [r for r in pool if r not in chosen]
    if len(chosen) < k and rest:
        chosen.append(rng.choice(rest))
    return chosen

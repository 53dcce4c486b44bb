"""The reasoning for one step: facts of the programs before and after it,
turned into sentences per transformation family (``step_reasoning``). The
program a simple step makes, predicted on the syntax tree, is
``leir.explain.prediction``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from leir import ast as A
from leir.semantics import Analysis, EquationInfo
from leir.explain.facts import (
    _accesses, _context, _iterations, _print, _reuse, _stride, compulsory_bytes, dtype_bytes, footprint,
    LINE_BYTES, human_bytes, human_count, operations, program_operations, tensor_bytes, working_set,
)
from leir.explain.machine import Machine
from leir.measure.timing import MIN_GAIN


#: Relative change in latency this project treats as measurement noise:
#: the gain a search asks of a step (repeated timings differ by about 1-2%).
NOISE = MIN_GAIN

#: Inner iterations per parallel iteration below which the reasoning of a
#: slower step lists the small amount of work as a possible cost (it names
#: the number; the threshold only decides whether to mention it).
SMALL_PARALLEL_WORK = 1000

#: Equation instances per run of an unrolled loop above which a slower
#: step's reasoning lists the code size as a possible cost.
LARGE_UNROLL = 64

#: CUDA facts that hold on every GPU TVM targets (not measured, not assumed).
WARP_SIZE = 32
_THREAD_AXES = ("tx", "ty", "tz")

#: How the sentences about a step's measured latency begin; they close the
#: reasoning (``step_reasoning`` writes them last), so ``unmeasured`` can cut
#: them from a stored text.
MEASURED_HEAD = "Latency measured on "
_BLOCK_AXES = ("bx", "by", "bz")


@dataclass
class Reasoning:
    """Why a step should help (or did not), sentence by sentence, with the
    computed values the sentences state."""

    sentences: list[str]
    facts: dict[str, Any]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "sentences": self.sentences, "facts": self.facts}


@dataclass
class _Side:
    """One program as the reasoning compares it."""

    analysis: Analysis
    ctx: Any

    @classmethod
    def of(cls, analysis: Analysis) -> "_Side":
        return cls(analysis, _context(analysis))

    def info(self, block: str | None) -> EquationInfo | None:
        if block is None:
            return None
        try:
            return self.ctx.equation_of_block(block)
        except Exception:
            return None

    def block(self, info: EquationInfo) -> str:
        return self.ctx.block_names[info.index]


def _innermost(info: EquationInfo) -> A.Loop | None:
    return info.loops[-1] if info.loops else None


def _access_rows(analysis: Analysis, info: EquationInfo) -> list[tuple[str, str, int | None]]:
    """(tensor, printed access, stride along the innermost loop) per access."""
    inner = _innermost(info)
    rows = []
    for a in _accesses(info.equation):
        if not a.indices:
            continue
        rows.append((a.tensor, _print(a), _stride(analysis, a, inner.var, info.loops) if inner else 0))
    return rows


def _reuse_table(side: _Side, info: EquationInfo, line_bytes: int) -> dict[str, tuple[str, float]]:
    """Tensor -> (reuse loop, reuse distance in bytes) for the reads and the
    write of one equation (the first access of each tensor)."""
    out: dict[str, tuple[str, float]] = {}
    for a in _accesses(info.equation):
        if a.tensor in out or not a.indices:
            continue
        loop, distance = _reuse(side.analysis, info, a, line_bytes)
        if loop is not None:
            out[a.tensor] = (loop, distance)
    return out


def _level(machine: Machine, nbytes: float) -> str:
    found = machine.level_of(nbytes)
    return found[0] if found else "memory"


_LEVEL_ORDER = {"L1d": 0, "L2": 1, "L3": 2, "memory": 3}


class _Writer:
    def __init__(self, machine: Machine | None, target: str):
        self.sentences: list[str] = []
        self.facts: dict[str, Any] = {}
        #: Facts that could make the step slower (said when it measured slower).
        self.risks: list[str] = []
        #: The CPU the program runs on, when known: its caches, cores and
        #: vectors are compared with the program's; None on a GPU or a
        #: remote device nobody described (sizes are then stated alone).
        self.machine = machine if target != "cuda" else None
        self.target = target
        self.line_bytes = machine.line_bytes if machine is not None else LINE_BYTES

    def say(self, sentence: str, **facts: Any) -> None:
        self.sentences.append(sentence)
        self.facts.update(facts)

    def risk(self, text: str) -> None:
        self.risks.append(text)


def _loops_text(loops: Sequence[A.Loop]) -> str:
    return ", ".join(f"{l.var} ({l.extent})" for l in loops)


def _contiguity(w: _Writer, before: _Side, after: _Side, block: str, quiet: bool = False,
                name_block: bool = False) -> None:
    """Which accesses of ``block`` become contiguous (or stop being) along
    the innermost loop (``quiet``: nothing said when no stride changes;
    ``name_block``: each sentence says which block, for steps that touch
    several)."""
    bi, ai = before.info(block), after.info(block)
    if bi is None or ai is None or not bi.loops or not ai.loops:
        return
    b_rows, a_rows = _access_rows(before.analysis, bi), _access_rows(after.analysis, ai)
    if [r[0] for r in b_rows] != [r[0] for r in a_rows]:
        return
    b_in, a_in = _innermost(bi), _innermost(ai)
    if quiet and [r[2] for r in b_rows] == [r[2] for r in a_rows]:
        return
    if b_in.var != a_in.var:
        w.say(f"The innermost loop of {block} becomes {a_in.var} ({a_in.extent} iterations; was {b_in.var}).",
              innermost_before=b_in.var, innermost_after=a_in.var)
    gained, lost, invariant, changed = [], [], [], []
    seen = set()
    for (t, text_b, sb), (_, text_a, sa) in zip(b_rows, a_rows):
        if sb == sa or (text_a, sb, sa) in seen:
            continue
        seen.add((text_a, sb, sa))
        changed.append({"block": block, "tensor": t, "access": text_a, "stride_before": sb, "stride_after": sa})
        if sa == 1 and sb != 1:
            gained.append(f"{text_a} (stride {_stride_word(sb)} before)")
        elif sb == 1 and sa == 0:
            invariant.append(text_a)
        elif sb == 1 and sa != 1:
            lost.append(f"{text_a} (stride {_stride_word(sa)}, was 1)")
    if changed:
        w.facts.setdefault("stride_changes", []).extend(changed)
    where = f"In {block}, " if name_block else ""
    if gained:
        w.say(f"{where}{'a' if where else 'A'}long {a_in.var}, {_join(gained)} {'is' if len(gained) == 1 else 'are'} "
              f"now contiguous: consecutive iterations touch consecutive elements.")
    if invariant:
        w.say(f"{where}{_join(invariant)} {'stays' if len(invariant) == 1 else 'stay'} the same element across "
              f"{a_in.var} (stride 0, was 1).")
    if lost:
        w.say(f"{where or 'But '}{_join(lost)} {'is' if len(lost) == 1 else 'are'} no longer contiguous along "
              f"{a_in.var}.")
        w.risk(f"{_join(lost)} lost unit stride along the innermost loop {a_in.var}"
               + (f" of {block}" if name_block else ""))
    if not changed and b_in.var != a_in.var:
        w.say(f"The strides along the innermost loop stay the same ({_strides_list(a_rows)}).")


def _stride_word(s: int | None) -> str:
    return "unknown" if s is None else str(s)


def _strides_list(rows) -> str:
    return ", ".join(dict.fromkeys(f"{text} {_stride_word(s)}" for _, text, s in rows))


def _join(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _reuse_changes(w: _Writer, before: _Side, after: _Side, block: str) -> bool:
    """Reuse distances of ``block``'s tensors before and after, against the
    cache sizes; True when something was said."""
    bi, ai = before.info(block), after.info(block)
    if bi is None or ai is None:
        return False
    rb, ra = _reuse_table(before, bi, w.line_bytes), _reuse_table(after, ai, w.line_bytes)
    said = False
    rows = []
    for t in ra:
        if t not in rb:
            continue
        (lb, db), (la, da) = rb[t], ra[t]
        if abs(db - da) < 1:
            continue
        rows.append({"tensor": t, "reuse_loop_before": lb, "distance_before": db, "reuse_loop_after": la,
                     "distance_after": da})
        if w.machine is None:
            w.say(f"{t} is touched again after {human_bytes(da)} of cache lines in between (across loop {la}); "
                  f"before, after {human_bytes(db)} (across loop {lb}).")
            said = True
            continue
        lvb, lva = _level(w.machine, db), _level(w.machine, da)
        where_a = "fits in " + w.machine.cache_text(lva) if lva != "memory" else "exceeds every cache level"
        where_b = "fit in " + w.machine.cache_text(lvb) if lvb != "memory" else "exceeded every cache level"
        if _LEVEL_ORDER[lva] < _LEVEL_ORDER[lvb]:
            w.say(f"{t} is reused across loop {la} after {human_bytes(da)} of cache lines in between, which {where_a}; "
                  f"before, it was reused across loop {lb} after {human_bytes(db)}, which only {where_b}.")
            said = True
        elif _LEVEL_ORDER[lva] > _LEVEL_ORDER[lvb]:
            w.say(f"{t}'s reuse distance grows to {human_bytes(da)} (across loop {la}; was {human_bytes(db)} "
                  f"across {lb}), which no longer fits in {w.machine.cache_text(lvb)}.")
            w.risk(f"{t}'s reuse distance grew from {human_bytes(db)} to {human_bytes(da)}, past "
                   f"{w.machine.cache_text(lvb)}")
            said = True
        elif da < db:
            w.say(f"{t}'s reuse distance shrinks from {human_bytes(db)} to {human_bytes(da)} "
                  f"(reused across loop {la}; both "
                  f"{'within ' + w.machine.cache_text(lva) if lva != 'memory' else 'beyond the caches'}).")
            said = True
    if rows:
        w.facts["reuse_changes"] = rows
    return said


def _handoffs(analysis: Analysis, line_bytes: int) -> dict[str, dict[str, Any]]:
    """For each temporary written by one equation and read by a later one:
    how much data passes between writing an element and reading it back.
    With a loop common to both equations it is the working set of one
    iteration of the innermost such loop; without one, all of the
    temporary is written before any of it is read (its whole size)."""
    from leir.transforms.base import Context

    # The "before" program of every step explained at one cursor is the same
    # analysis: computed once for it.
    return Context.of(analysis).memo(("handoffs", line_bytes), lambda: _handoffs_of(analysis, line_bytes))


#: id(equation) -> (the equation, the tensors it reads). A predicted
#: program shares the equations a step leaves alone with the program
#: before it, so explaining several steps at one cursor walks each
#: equation once. The equation is kept with its entry, so its id stays its own.
_READS: dict[int, tuple[A.Equation, frozenset[str]]] = {}
_READS_LIMIT = 200_000


def _reads(eq: A.Equation) -> frozenset[str]:
    found = _READS.get(id(eq))
    if found is None or found[0] is not eq:
        if len(_READS) >= _READS_LIMIT:
            _READS.clear()
        found = _READS[id(eq)] = (eq, frozenset(a.tensor for a in _accesses(eq)[1:]))
    return found[1]


def _handoffs_of(analysis: Analysis, line_bytes: int) -> dict[str, dict[str, Any]]:
    first_writer: dict[str, Any] = {}
    readers: dict[str, list] = {}
    for info in analysis.equations:
        name = info.equation.lhs.tensor
        first_writer.setdefault(name, info)
        # An equation that writes a tensor is not its reader (a reduction reads its own result).
        for tensor in _reads(info.equation) - {name}:
            readers.setdefault(tensor, []).append(info)
    out: dict[str, dict[str, Any]] = {}
    for t in analysis.temporaries():
        writer = first_writer.get(t.name)
        if writer is None:
            continue
        reader = next((r for r in readers.get(t.name, ()) if r.index > writer.index), None)
        if reader is None:
            continue
        common = [l for l in writer.loops if any(l is m for m in reader.loops)]
        if common:
            loop = common[-1]
            out[t.name] = {"loop": loop.var, "bytes": sum(working_set(analysis, loop, line_bytes=line_bytes).values()),
                           "writer": writer.index, "reader": reader.index}
        else:
            out[t.name] = {"loop": None, "bytes": t.size * dtype_bytes(t.dtype), "writer": writer.index,
                           "reader": reader.index}
    return out


def _handoff_changes(w: _Writer, before: _Side, after: _Side) -> None:
    hb, ha = _handoffs(before.analysis, w.line_bytes), _handoffs(after.analysis, w.line_bytes)
    rows = []
    for name, h in ha.items():
        if name not in hb or (hb[name]["loop"], round(hb[name]["bytes"])) == (h["loop"], round(h["bytes"])):
            continue
        old = hb[name]
        rows.append({"tensor": name, "before": old, "after": h})
        if old["loop"] is None:
            was = f"all of {name} ({human_bytes(old['bytes'])}) was written before any of it was read back"
        else:
            was = (f"it was read back within one iteration of {old['loop']}, after {human_bytes(old['bytes'])} "
                   "of cache lines")
        if h["loop"] is None:
            now = f"all of {name} ({human_bytes(h['bytes'])}) is written before any of it is read back"
        else:
            now = (f"each element of {name} is read back within one iteration of {h['loop']}, after "
                   f"{human_bytes(h['bytes'])} of cache lines")
        fit = ""
        if w.machine is not None:
            level = _level(w.machine, h["bytes"])
            fit = (f", which fits in {w.machine.cache_text(level)}" if level != "memory"
                   else ", more than every cache level holds")
        w.say(f"Now {now}{fit}; before, {was}.")
        if w.machine is not None and h["bytes"] > old["bytes"] \
                and _level(w.machine, h["bytes"]) != _level(w.machine, old["bytes"]):
            w.risk(f"{name} now travels {human_bytes(h['bytes'])} between its write and its read "
                   f"(was {human_bytes(old['bytes'])})")
    if rows:
        w.facts["handoff_changes"] = rows


def _program_diff(w: _Writer, before: _Side, after: _Side, *, ops: bool = True, temporaries: bool = True) -> None:
    """Operations, temporaries, producer-to-consumer distances and
    arithmetic intensity, where they change."""
    _handoff_changes(w, before, after)
    ob, oa = program_operations(before.analysis), program_operations(after.analysis)
    w.facts.update(operations_before=ob, operations_after=oa)
    if ops and ob != oa:
        hb, ha = (human_count(ob), human_count(oa)) if human_count(ob) != human_count(oa) else (f"{ob:,}", f"{oa:,}")
        if oa < ob:
            w.say(f"Operations drop from {hb} to {ha} ({1 - oa / ob:.0%} fewer).")
        else:
            w.say(f"Operations grow from {hb} to {ha} ({oa - ob:+,}" + (f", {oa / ob:.2f}x)." if ob else ")."))
            w.risk(f"operations grew from {hb} to {ha}")
    if temporaries and not w.facts.get("temporaries_said"):
        tb = {t.name: t for t in before.analysis.temporaries()}
        ta = {t.name: t for t in after.analysis.temporaries()}
        removed = [n for n in tb if n not in ta]
        added = [n for n in ta if n not in tb]
        if removed:
            w.say(f"Removes the temporar{'y' if len(removed) == 1 else 'ies'} "
                  + _join([f"{n} ({_shape_text(tb[n])}, {human_bytes(tensor_bytes(before.analysis, n))})"
                           for n in removed])
                  + ": no longer written to memory and read back.",
                  temporaries_removed={n: tensor_bytes(before.analysis, n) for n in removed})
        if added:
            w.say(f"Adds the temporar{'y' if len(added) == 1 else 'ies'} "
                  + _join([f"{n} ({_shape_text(ta[n])}{_scope_text(ta[n])}, "
                           f"{human_bytes(tensor_bytes(after.analysis, n))})"
                           for n in added]) + ".",
                  temporaries_added={n: tensor_bytes(after.analysis, n) for n in added})
            for n in added:
                if ta[n].scope == "g":
                    w.risk(f"the temporary {n} ({human_bytes(tensor_bytes(after.analysis, n))}) is written to memory "
                           "and read back")
    cb, ca = compulsory_bytes(before.analysis), compulsory_bytes(after.analysis)
    if cb and ca:
        ib, ia = ob / cb, oa / ca
        w.facts.update(intensity_before=ib, intensity_after=ia)
        if abs(ib - ia) > 0.01 * max(ib, ia):
            w.say(f"Arithmetic intensity goes from {ib:.3g} to {ia:.3g} operations per byte of inputs and outputs.")


def _shape_text(t) -> str:
    return f"{t.dtype}[{','.join(map(str, t.shape))}]" if t.shape else t.dtype


def _scope_text(t) -> str:
    return {"g": "", "s": " in shared memory", "l": " in local memory"}[t.scope]


def _loop_of(side: _Side, block: str | None, var: str | None) -> A.Loop | None:
    if block is None or var is None:
        return None
    try:
        return side.ctx.loop_site(block, var).loop
    except Exception:
        return None


def _site_of(side: _Side, block: str | None, var: str | None):
    if block is None or var is None:
        return None
    try:
        return side.ctx.loop_site(block, var)
    except Exception:
        return None


def _step_loop(before: _Side, after: _Side, step):
    """(block, loop variable, the loop's site after the step, else before)
    of a step on one loop; None when the loop is in neither program."""
    block, var = step.args.get("block"), step.args.get("loop")
    site = _site_of(after, block, var) or _site_of(before, block, var)
    return None if site is None else (block, var, site)


# ------------------------------------------------------------------ families


def _split(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block, var = args.get("block"), args.get("loop")
    loop = _loop_of(before, block, var)
    ai = after.info(block)
    factors = args.get("factors") or []
    if loop is not None and len(factors) == 2:
        outer, inner = factors
        new = [l for l in (ai.loops if ai else ()) if l.var not in {x.var for x in before.info(block).loops}]
        names = " and ".join(f"{l.var} ({l.extent})" for l in new) or f"{outer} x {inner}"
        w.say(f"Splits loop {var} of {block} ({loop.extent} iterations) into {names}.",
              loop=var, extent=loop.extent, factors=[outer, inner])
        if outer * inner != loop.extent:
            w.say(f"The split is imperfect: {outer} x {inner} = {outer * inner} iterations for {loop.extent}, "
                  f"so a guard skips {outer * inner - loop.extent} of them and is tested on every iteration.",
                  guarded_iterations=outer * inner - loop.extent)
            w.risk(f"the imperfect split adds a guard tested on all {outer * inner} iterations")
    said = _reuse_changes(w, before, after, block)
    _contiguity(w, before, after, block, quiet=True)
    if not said and not w.facts.get("stride_changes"):
        inner = [l for l in (ai.loops if ai else ()) if l.var.startswith(f"{var}_")]
        w.say("The strides along the innermost loop and the reuse distances are the same before and after: "
              "the split by itself keeps the iteration order; what it adds is an inner loop"
              + (f" {inner[-1].var} of {inner[-1].extent} iterations" if inner else "")
              + " for later steps to act on.", order_unchanged=True)


def _tile(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block = args.get("block")
    loops, sizes = args.get("loops") or [], args.get("sizes") or []
    ai = after.info(block)
    bi = before.info(block)
    if bi is not None and ai is not None:
        old = {l.var for l in bi.loops}
        new = [l for l in ai.loops if l.var not in old]
        w.say(f"Tiles loops {', '.join(loops)} of {block} by {'x'.join(map(str, sizes))}: "
              f"the nest becomes {_loops_text(ai.loops)}.", loops=loops, sizes=sizes,
              loops_after=[l.var for l in ai.loops])
        # tile makes the outer loops of each tiled loop, then the inner ones:
        # one iteration of the last outer loop runs one tile.
        if len(new) >= 2:
            tile_outer = new[len(new) // 2 - 1]
            if tile_outer is not None:
                ws = working_set(after.analysis, tile_outer, line_bytes=w.line_bytes)
                total = sum(ws.values())
                parts = ", ".join(f"{t} {human_bytes(b)}" for t, b in ws.items())
                if w.machine is None:
                    where = ""
                else:
                    level = _level(w.machine, total)
                    where = (f"fits in {w.machine.cache_text(level)}" if level != "memory"
                             else "exceeds every cache level")
                w.say(f"One tile (one iteration of {tile_outer.var}) touches {parts}: {human_bytes(total)}"
                      + (f", which {where}." if where else "."), tile_working_set=ws, tile_working_set_bytes=total)
    if bi is not None:
        ops = _iterations(bi.loops) * operations(bi.equation.rhs)
        touched = {a.tensor for a in _accesses(bi.equation)}
        nbytes = sum(tensor_bytes(before.analysis, t) for t in touched if t in before.analysis.tensors)
        if ops and nbytes:
            w.say(f"{block} does {human_count(ops)} operations on {human_bytes(nbytes)} of tensors: "
                  f"{ops / nbytes:.3g} operations per byte if each element came from memory once.",
                  block_operations=ops, block_tensor_bytes=nbytes, block_intensity=ops / nbytes)
    said = _reuse_changes(w, before, after, block)
    _contiguity(w, before, after, block, quiet=True)
    if bi is not None and ai is not None:
        added = len(ai.loops) - len(bi.loops)
        w.facts["loops_added"] = added
        if not said:
            w.say(f"No tensor's reuse distance moves to a smaller cache level with these tile sizes, and the nest "
                  f"has {added} more loop{'s' * (added != 1)} to run.")
            w.risk(f"tiling adds {added} loop{'s' * (added != 1)} and moves no reuse distance to a smaller cache level")


def _reorder(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block = args.get("block")
    loops = args.get("loops") or []
    order = args.get("order") or []
    if len(loops) == 2:
        w.say(f"Swaps loops {loops[0]} and {loops[1]} around {block}.", loops=loops)
    elif len(order) >= 2:
        bi = before.info(block)
        was = [l.var for l in bi.loops if l.var in order] if bi is not None else []
        if was:
            w.say(f"Puts loops {', '.join(was)} around {block} in the order {', '.join(order)}.", loops=order,
                  loops_before=was)
    _contiguity(w, before, after, block)
    _reuse_changes(w, before, after, block)


def _fuse(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block, loops = args.get("block"), args.get("loops") or []
    extents = [l.extent for l in (_loop_of(before, block, v) for v in loops) if l is not None]
    ai = after.info(block)
    fused = None
    if ai is not None:
        old = {l.var for l in before.info(block).loops}
        new = [l for l in ai.loops if l.var not in old]
        fused = new[0] if new else None
    if fused is not None:
        w.say(f"Fuses loops {' and '.join(loops)} ({' x '.join(map(str, extents))}) of {block} into one loop "
              f"{fused.var} of {fused.extent} iterations.", fused=fused.var, extent=fused.extent)
        strides = [_stride(after.analysis, a, fused.var, ai.loops) for a in _accesses(ai.equation) if a.indices]
        if any(s is None for s in strides):
            w.say(f"Some indices now divide and take remainders of {fused.var} (// and %): their strides along it "
                  "are not one constant.")
        offered = _offered_on(after, block, fused.var, _LOOP_STEPS[w.target == "cuda"])
        if offered:
            w.say(f"On the program after it, {_join(offered)} {'is' if len(offered) == 1 else 'are'} offered on "
                  f"{fused.var}: one loop of {fused.extent} iterations instead of {' x '.join(map(str, extents))}.",
                  offered_on_fused=offered)
    _contiguity(w, before, after, block)


def _parallelize(w: _Writer, before: _Side, after: _Side, step) -> None:
    found = _step_loop(before, after, step)
    if found is None:
        return
    block, var, site = found
    loop = site.loop
    inner_iters = sum(_iterations(after.analysis.equations[k].loops[site.depth + 1:]) for k in site.equations)
    info = after.info(block)
    inner_loops = [l.var for l in info.loops[site.depth + 1:]] if info is not None else []
    work = (f"each iteration doing {human_count(inner_iters)} inner iteration{'s' * (inner_iters != 1)}"
            + (f" ({', '.join(inner_loops)})." if inner_loops else "."))
    w.facts.update(parallel_loop=var, parallel_iterations=loop.extent,
                   inner_iterations_per_parallel_iteration=inner_iters)
    if w.machine is None:
        w.say(f"Runs loop {var} in parallel: its {loop.extent} iterations, {work}")
    else:
        cores = w.machine.cores
        per_core = -(-loop.extent // cores)
        w.say(f"Runs loop {var} in parallel: its {loop.extent} iterations over {_plural(cores, 'core')} ({per_core} "
              f"per core at most), {work}", cores=cores, per_core=per_core)
        if loop.extent < cores:
            w.say(f"Only {loop.extent} iterations for {cores} cores: at most {loop.extent} cores are busy.")
            w.risk(f"loop {var} has only {loop.extent} iterations for {cores} cores")
        elif loop.extent % cores:
            w.say(f"{loop.extent} iterations do not divide evenly over {cores} cores "
                  f"({loop.extent} = {cores} x {loop.extent // cores} + {loop.extent % cores}).")
    if site.outer:
        starts = _iterations(site.outer)
        w.say(f"Loop {var} is inside {_loops_text(site.outer)}, so the parallel region starts {human_count(starts)} "
              "times, once per iteration of the loops around it.", parallel_region_starts=starts)
        if starts > 1:
            w.risk(f"the parallel region starts {human_count(starts)} times (loop {var} is not outermost)")
    if inner_iters and inner_iters < SMALL_PARALLEL_WORK:
        w.risk(f"each parallel iteration does only {_plural(inner_iters, 'inner iteration')} of work")


def _vectorize(w: _Writer, before: _Side, after: _Side, step) -> None:
    found = _step_loop(before, after, step)
    if found is None:
        return
    block, var, site = found
    loop = site.loop
    lanes = loop.extent
    widths = []
    rows = []
    for k in site.equations:
        info = after.analysis.equations[k]
        t = after.analysis.tensors[info.equation.lhs.tensor]
        widths.append(lanes * dtype_bytes(t.dtype))
        rows.extend((a.tensor, _print(a), _stride(after.analysis, a, var, info.loops))
                    for a in _accesses(info.equation) if a.indices)
    width = max(widths) if widths else 0
    elem = after.analysis.tensors[after.info(block).equation.lhs.tensor].dtype if after.info(block) else "f32"
    w.facts.update(vector_loop=var, lanes=lanes, vector_bytes_used=width)
    if w.machine is None:
        w.say(f"Vectorizes loop {var} of {block}: {lanes} lanes of {elem} ({width:g} bytes per vector operation).")
    else:
        mv = w.machine.vector_bytes
        w.facts["machine_vector_bytes"] = mv
        if width == mv:
            rel = f"exactly the machine's {w.machine.vector_text()}"
        elif width > mv:
            rel = f"{width / mv:g}x the machine's {w.machine.vector_text()}"
        else:
            rel = f"less than the machine's {w.machine.vector_text()} (a {width / mv:.0%} share)"
        w.say(f"Vectorizes loop {var} of {block}: {lanes} lanes of {elem} = {width:g} bytes per vector operation, "
              f"{rel}.")
        if width < mv:
            w.risk(f"{lanes} lanes fill only {width:g} of the machine's {mv}-byte vectors")
        elif width % mv:
            w.risk(f"{width:g} bytes is not a multiple of the machine's {mv}-byte vectors")
    contiguous = list(dict.fromkeys(text for _, text, s in rows if s == 1))
    broadcast = list(dict.fromkeys(text for _, text, s in rows if s == 0))
    strided = list(dict.fromkeys(f"{text} (stride {_stride_word(s)})" for _, text, s in rows if s not in (0, 1)))
    w.facts["strides_along_vector_loop"] = [{"access": text, "stride": s} for _, text, s in rows]
    if contiguous:
        w.say(f"Along {var}, {_join(contiguous)} {'is' if len(contiguous) == 1 else 'are'} contiguous"
              + (f" and {_join(broadcast)} {'is' if len(broadcast) == 1 else 'are'} the same element in every lane"
                 if broadcast else "") + ".")
    if strided:
        w.say(f"{_join(strided)} {'is' if len(strided) == 1 else 'are'} not contiguous along {var}: the lanes "
              "read elements that far apart.")
        w.risk(f"{_join(strided)} is not contiguous along the vector loop {var}")


def _unroll(w: _Writer, before: _Side, after: _Side, step) -> None:
    found = _step_loop(before, after, step)
    if found is None:
        return
    block, var, site = found
    loop = site.loop
    instances = sum(_iterations(after.analysis.equations[k].loops[site.depth:]) for k in site.equations)
    inner = [l.var for l in _nest_loops(site.nest)][site.position + 1:] if site.nest is not None else []
    w.say(f"Unrolls loop {var} ({loop.extent} iterations): its body"
          + (f" (with loop{'s' * (len(inner) > 1)} {', '.join(inner)} inside)" if inner else "")
          + f" is written out {loop.extent} times, without {var}'s counter and branch; one run executes "
          f"{human_count(instances)} equation instance{'s' * (instances != 1)}.",
          unrolled_loop=var, extent=loop.extent, instances=instances)
    if site.outer:
        runs = _iterations(site.outer)
        w.say(f"Loop {var} runs {human_count(runs)} times (once per iteration of "
              f"{', '.join(l.var for l in site.outer)}).",
              unrolled_runs=runs)
    if instances > LARGE_UNROLL:
        w.risk(f"unrolling writes out {human_count(instances)} equation instances (larger code)")


def _bind(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block, var, axis = args.get("block"), args.get("loop"), args.get("axis")
    ai = after.info(block)
    if ai is None:
        return
    threads = _iterations([l for l in ai.loops if l.kind == "B" and l.var in _THREAD_AXES])
    blocks = _iterations([l for l in ai.loops if l.kind == "B" and l.var in _BLOCK_AXES])
    tag = A.THREAD_AXES.get(axis, axis)
    loop = _loop_of(before, block, var)
    w.say(f"Binds loop {var}{f' ({loop.extent} iterations)' if loop else ''} of {block} to {tag}: the kernel now has "
          f"{human_count(blocks)} block{'s' * (blocks != 1)} of {threads} thread{'s' * (threads != 1)}.",
          axis=tag, blocks=blocks, threads_per_block=threads)
    if threads > 1 and threads % WARP_SIZE:
        w.say(f"{threads} threads per block is not a multiple of the {WARP_SIZE}-thread warp: the last warp of each "
              "block runs partly empty.")
        w.risk(f"{threads} threads per block is not a multiple of {WARP_SIZE}")
    if axis in _THREAD_AXES:
        rows = [(a.tensor, _print(a), _stride(after.analysis, a, axis, ai.loops))
                for a in _accesses(ai.equation) if a.indices]
        coalesced = list(dict.fromkeys(text for _, text, s in rows if s == 1))
        if axis == "tx" and coalesced:
            w.say(f"Along threadIdx.x, {_join(coalesced)} {'is' if len(coalesced) == 1 else 'are'} contiguous: "
                  "neighbouring threads touch neighbouring elements.")


def _cache_copy(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    tensor = args.get("tensor")
    added = [t for t in after.analysis.temporaries() if t.name not in before.analysis.tensors]
    for t in added:
        # The copy: an equation that only moves elements between the tensor and its cache.
        copies = [i for i in after.analysis.equations if isinstance(i.equation.rhs, A.Access)
                  and {i.equation.lhs.tensor, i.equation.rhs.tensor} == {t.name, tensor}]
        copy_elems = sum(_iterations(i.loops) for i in copies)
        verb = "reads" if step.id == "cache_read" else "writes"
        nbytes = tensor_bytes(after.analysis, t.name)
        w.say(f"{args.get('block')} now {verb} {tensor} through {t.name} ({_shape_text(t)}{_scope_text(t)}, "
              f"{human_bytes(nbytes)}); the copy between them moves {human_count(copy_elems)} elements.",
              cache_tensor=t.name, cache_scope=t.scope, cache_bytes=nbytes, copy_elements=copy_elems)
        w.facts["temporaries_said"] = True
        original = before.analysis.tensors.get(tensor)
        user = after.info(args.get("block"))
        separate = user is not None and all(not any(l is m for m in user.loops) for i in copies for l in i.loops)
        if original is not None and t.size >= original.size:
            w.say(f"{t.name} is a full copy: it holds all {human_count(original.size)} elements of {tensor}, "
                  f"so the copy reads and writes {human_bytes(nbytes)} more than the program did before"
                  + (f"; it runs in a nest of its own, outside every loop of {args.get('block')}." if separate
                     else "."),
                  copy_in_own_nest=separate)
            w.risk(f"{t.name} is a full copy of {tensor} ({human_bytes(nbytes)})")


def _compute_at(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block = args.get("block")
    at = args.get("at") or {}
    site = _site_of(after, at.get("block"), at.get("loop"))
    pi = after.info(block)
    bi = before.info(block)
    if site is None or pi is None or bi is None:
        return
    written = pi.equation.lhs.tensor
    moving = pi.loops[site.depth + 1:]
    per_iter = footprint(after.analysis, [(pi.equation.lhs, pi.loops, moving)])
    eb = dtype_bytes(after.analysis.tensors[written].dtype)
    # Where the block ran before: in its own nest, or already inside loops
    # it shared with the other block.
    other = before.info(at.get("block"))
    shared = [l for l in bi.loops if other is not None and any(l is m for m in other.loops)]
    before_moving = bi.loops[len(shared):]
    before_count = footprint(before.analysis, [(bi.equation.lhs, bi.loops, before_moving)])
    if shared:
        was = (f"instead of {_elements(before_count)} ({human_bytes(before_count * eb)}) per iteration of "
               f"{shared[-1].var}")
    else:
        where = "before" if step.id == "compute_at" else "after"
        was = (f"instead of all {_elements(before_count)} ({human_bytes(before_count * eb)}) in a separate nest "
               f"{where} it")
    w.say(f"Moves {block} inside loop {at.get('loop')} ({site.loop.extent} iterations) of {at.get('block')}: each "
          f"iteration writes {_elements(per_iter)} of {written} ({human_bytes(per_iter * eb)}), {was}.",
          at_loop=at.get("loop"), elements_per_iteration=per_iter, elements_before=before_count,
          shared_loop_before=shared[-1].var if shared else None)
    w.facts["iteration_working_set_bytes"] = sum(
        working_set(after.analysis, site.loop, line_bytes=w.line_bytes).values())


#: The steps worth naming as now offered on a loop: by target (cuda or not).
_LOOP_STEPS = {False: ("parallelize", "vectorize"), True: ("bind", "vectorize")}


def _offered_on(side: _Side, block: str | None, var: str, ids: tuple[str, ...]) -> list[str]:
    """Which of ``ids`` ``leir.transforms.candidates`` offers on loop ``var``
    around ``block`` in this program."""
    from leir import transforms

    if block is None:
        return []
    try:
        site = side.ctx.loop_site(block, var)
        found = transforms.candidates(side.ctx, site.loop.span.start if site.loop.span else None, only=ids)
    except Exception:
        return []
    blocks = {side.ctx.block_names[k] for k in site.equations}
    out = [c.step.id for c in found if c.step.args.get("loop") == var and c.step.args.get("block") in blocks]
    return list(dict.fromkeys(out))


def _elements(n: int) -> str:
    return f"{human_count(n)} element{'s' * (n != 1)}"


def _compute_inline(w: _Writer, before: _Side, after: _Side, step) -> None:
    block = step.args.get("block")
    bi = before.info(block)
    if bi is not None:
        t = bi.equation.lhs.tensor
        direction = "its consumers" if step.id == "compute_inline" else "the equation it feeds"
        w.say(f"Inlines {block} into {direction}: {t}'s expression is computed where it is used.", inlined=t)


def _rfactor(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block, var = args.get("block"), args.get("loop")
    bi = before.info(block)
    partial = [i for i in after.analysis.equations if i.equation.lhs.tensor not in before.analysis.tensors]
    if bi is None or not partial:
        return
    p = partial[0]
    t = after.analysis.tensors[p.equation.lhs.tensor]
    w.say(f"Factors the reduction of {bi.equation.lhs.tensor} over loop {var}: partial results go to {t.name} "
          f"({_shape_text(t)}, {human_bytes(tensor_bytes(after.analysis, t.name))}), then a second equation "
          "combines them.",
          partials=t.name, partials_bytes=tensor_bytes(after.analysis, t.name))
    w.facts["temporaries_said"] = True
    if t.scope == "g":
        w.risk(f"the partial results {t.name} take {human_bytes(tensor_bytes(after.analysis, t.name))} written "
               "and read back")
    if var in p.spatial:
        offered = _offered_on(after, after.block(p), var, _LOOP_STEPS[w.target == "cuda"])
        w.say(f"In {t.name}, {var} is a spatial axis (it was a reduction axis of {bi.equation.lhs.tensor})"
              + (f": {_join(offered)} {'is' if len(offered) == 1 else 'are'} now offered on it." if offered
                 else "."), offered_on_factored_loop=offered)


def _decompose(w: _Writer, before: _Side, after: _Side, step) -> None:
    args = step.args
    block, var = args.get("block"), args.get("loop")
    bi = before.info(block)
    if bi is None:
        return
    t = bi.equation.lhs.tensor
    inits = [i for i in after.analysis.equations if i.equation.lhs.tensor == t and i.kind == "assign"]
    # Block names follow program order: the new initial write takes the
    # name, the reduction becomes NAME_1.
    update = next((i for i in after.analysis.equations if i.equation.lhs.tensor == t and i.kind == "update"), None)
    if inits and update is not None:
        init = inits[0]
        w.say(f"Writes the initial value of {t} ({_print(init.equation.rhs)}) in an equation of its own before "
              f"loop {var} ({human_count(_iterations(init.loops))} writes); the reduction then only "
              f"accumulates onto it.", init_before_loop=var, init_writes=_iterations(init.loops))


_FAMILIES = {
    "split": _split, "tile": _tile, "reorder": _reorder, "fuse": _fuse, "parallelize": _parallelize,
    "vectorize": _vectorize, "unroll": _unroll, "bind": _bind, "cache_read": _cache_copy,
    "cache_write": _cache_copy, "compute_at": _compute_at, "reverse_compute_at": _compute_at,
    "compute_inline": _compute_inline, "reverse_compute_inline": _compute_inline, "rfactor": _rfactor,
    "decompose_reduction": _decompose,
}


def _title(before: _Side, step) -> str:
    """The title the editor showed for the step (its candidate's), else
    the transformation's."""
    from leir import transforms

    try:
        for c in transforms.candidates(before.ctx, None, only=(step.id,)):
            if c.step == step:
                return c.title
        return transforms.get(step.id).TITLE
    except Exception:
        return step.id


def _generic(w: _Writer, before: _Side, after: _Side, step) -> None:
    """Any other step: what changed, from the two programs."""
    from leir.ast import SCOPES

    counts = []
    for side in (before, after):
        program = side.analysis.program
        counts.append((len(program.units), len(side.analysis.equations), sum(1 for _ in _all_loops(program))))
    (ub, eb, nb), (ua, ea, na) = counts
    w.say(f"{_title(before, step)}: {_plural(ub, 'loop nest')} with {_plural(eb, 'equation')} and "
          f"{_plural(nb, 'loop')} before, {ua}, {ea} and {na} after.",
          nests_before=ub, nests_after=ua, equations_before=eb, equations_after=ea, loops_before=nb, loops_after=na)
    for name, tb in before.analysis.tensors.items():
        ta = after.analysis.tensors.get(name)
        if ta is None:
            continue
        if tb.scope != ta.scope:
            w.say(f"{name} moves from {SCOPES[tb.scope]} to {SCOPES[ta.scope]} memory.",
                  **{f"scope_{name}": [tb.scope, ta.scope]})
        if tb.shape != ta.shape:
            w.say(f"{name}'s layout changes from [{','.join(map(str, tb.shape))}] to [{','.join(map(str, ta.shape))}].",
                  **{f"shape_{name}": [list(tb.shape), list(ta.shape)]})
    # Strides along the innermost loops, block by block (a layout or an
    # operator rewrite can make an access contiguous or break it).
    for block in before.ctx.block_names:
        if block in after.ctx.block_names:
            _contiguity(w, before, after, block, quiet=True, name_block=True)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _all_loops(program: A.Program):
    for unit in program.units:
        yield from _nest_loops(unit)


def _nest_loops(nest: A.Nest):
    yield from nest.loops
    for item in nest.body:
        if isinstance(item, A.Nest):
            yield from _nest_loops(item)


def _measured(w: _Writer, measured: tuple[float, float], target: str) -> None:
    b, a = measured
    w.facts.update(latency_before_ms=b, latency_after_ms=a, target=target)
    if not (b > 0 and a > 0):
        return
    ratio = b / a
    w.facts["speedup"] = ratio
    head = f"{MEASURED_HEAD}{target}: {_ms(b)} → {_ms(a)}"
    if abs(1 - a / b) < NOISE:
        w.say(f"{head}, {ratio:.2f}x: within the {NOISE:.0%} this project treats as measurement noise.")
    elif a < b:
        w.say(f"{head}, {ratio:.2f}x faster.")
    else:
        w.say(f"{head}, {a / b:.2f}x slower.")
        if w.risks:
            w.say(f"Facts the analysis finds that can cost time here: {'; '.join(dict.fromkeys(w.risks))}.")
        else:
            w.say("The analysis finds no cause among the facts above (strides, reuse distances, parallel "
                  "iterations, vector width and operation counts).")


def unmeasured(text: str) -> str:
    """A reasoning text (``Reasoning.text``) without its closing sentences
    about the measured latency (and, for a slower step, the costs named
    because it measured slower): the reasoning ``step_reasoning`` writes for
    the same step before it is measured. The measured sentences always come
    last, each starting with ``MEASURED_HEAD`` or following it."""
    if text.startswith(MEASURED_HEAD):
        return ""
    head, sep, _ = text.partition(" " + MEASURED_HEAD)
    return head if sep else text


def _ms(x: float) -> str:
    return f"{x:.3g} ms" if x >= 0.01 else f"{x * 1000:.3g} µs"


def step_reasoning(before: Analysis, after: Analysis, step, *, measured: tuple[float, float] | None = None,
                   target: str = "llvm", machine: Machine | None = None) -> Reasoning:
    """Why ``step`` (turning ``before`` into ``after``) should help, from the
    facts of both programs; closes with the measured effect when given.

    ``machine`` is the CPU the program runs on; by default this one when the
    target is ``llvm``. For ``cuda``, and for ``rpc`` without a machine (the
    remote device's caches are unknown here), nothing is compared with CPU
    caches, cores or vectors."""
    if machine is None and target == "llvm":
        machine = Machine.detect()
    w = _Writer(machine, target)
    w.facts.update(step=step.id, args=step.args)
    b, a = _Side.of(before), _Side.of(after)
    family = _FAMILIES.get(step.id)
    try:
        if family is not None:
            family(w, b, a, step)
        else:
            _generic(w, b, a, step)
        _program_diff(w, b, a)
    except Exception as e:  # the reasoning must never take a step down with it
        w.say(f"(The analysis could not explain this step: {type(e).__name__}.)")
    if not w.sentences:
        _generic(w, b, a, step)
    if measured is not None:
        _measured(w, measured, target)
    w.facts["risks"] = list(dict.fromkeys(w.risks))
    if w.machine is not None:
        w.facts["machine"] = w.machine.to_json()
    return Reasoning(w.sentences, w.facts)

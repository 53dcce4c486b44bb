"""Grounding: does a sentence about one step state only what the analysis
computed for that step?

Reasoning that a model writes (``leir_models.lm.reasoning``) reads like the
reasoning ``step_reasoning`` writes, but nothing makes it true. ``check``
holds each sentence against the facts of that step on that program
(``step_facts``: ``step_reasoning``'s facts, the names and numbers of the
programs before and after, the machine) and keeps a sentence only when

- **every number** in it is a number of the facts, read in the formats the
  explain module writes: counts (``16.4K``, ``12,288``), sizes
  (``24.5 KiB``, ``32K``, ``64-byte``), percentages, ratios (``2.49x``),
  latencies (``0.0155 ms``, ``6.22 µs``), shapes (``f32[128,96]``), within
  the precision it is printed with (``16.4K`` is 16,350 to 16,450). A ratio
  or a percentage may be the ratio of two facts (``1 - a/b`` too, for "25%
  fewer"); ``A x B = C``, ``A = B x C + D`` and ``A..B`` are checked as
  arithmetic, their results need not be facts;
- **every name** it uses (a loop after "loop", in ``NAME (N ...)``, after
  "across"/"along"; an access ``T_{i,k}``; an identifier with ``_`` or a
  digit; an all-capitals identifier) is a loop, tensor or block of either
  program or a name in the facts;
- **its claims agree with the facts where the facts state them**: an
  access said to be contiguous (stride 1) or not, against the strides the
  facts list; a loop said to run in parallel or be vectorized, against the
  loop kinds of the program after the step; a loop said to be a reduction or
  a spatial axis, against the equations; "N lanes" and "N cores" against the
  lanes and the machine's cores; a size said to fit in (or exceed) a cache
  level, against the machine's cache sizes, and "the 32 KiB L1d" against the
  machine's L1d.

A sentence that does not check is dropped, with the first thing that
failed. Nothing is evaluated: the text is only matched with regular
expressions and compared with numbers.

    facts = step_facts(before, after, step, target="llvm", machine=machine)
    result = check(generated_text, facts)
    result.text, result.kept, result.dropped, result.share
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from leir import ast as A
from leir.explain.facts import access_strides, dtype_bytes, tensor_bytes
from leir.explain.machine import Machine
from leir.explain.reasoning import NOISE, WARP_SIZE, Reasoning, step_reasoning
from leir.semantics import Analysis

__all__ = ["Dropped", "GroundingResult", "StepFacts", "check", "sentences", "step_facts"]

#: Relative tolerance on top of a figure's printed precision (floating-point
#: noise in a fact, a figure rounded twice).
REL_TOL = 1e-3

#: Constants the explain module states without storing them as facts.
_CONSTANTS = (NOISE, WARP_SIZE)

#: Words that are not names although they look like one (upper case, or a
#: digit in them).
_WORDS = frozenset({
    "L1d", "L1", "L2", "L3", "AVX", "AVX2", "AVX-512", "SSE2", "NEON", "SIMD", "CPU", "GPU", "OS", "TVM", "LEIR",
    "CUDA", "BPE", "JSON", "RPC", "B", "KiB", "MiB", "GiB", "TiB", "K", "M", "G", "A", "I", "threadIdx", "blockIdx",
    "vthread", "x", "y", "z",
})

#: Words after "loop"/"loops" that are not a loop's name.
_NOT_LOOPS = frozenset({
    "nest", "nests", "of", "is", "in", "and", "with", "that", "the", "runs", "counter", "body", "variable",
    "order", "kind", "kinds", "iterations", "around", "inside", "outside", "to", "it", "its", "a", "an", "was",
    "now", "becomes", "stays", "stay", "loop", "loops", "does", "do", "starts", "start", "moves", "move",
    "adds", "add", "gets", "get", "goes", "go", "grows", "drops", "bound", "on", "by", "for", "at", "are", "be",
    "has", "as", "or", "s", "before", "after", "then", "here", "there", "from", "into", "instead", "only",
    "once", "each", "every", "so", "which",
})

#: The words the explain module's sentences are made of (the string
#: literals of ``leir.explain.reasoning``); a sentence may also use the
#: words of its step's title and the program's names. Another word is not
#: one the facts can stand behind.
_VOCABULARY = frozenset("""
    above access accesses accumulates across act added adds after again against all along among an analysis and put
    any apart are arithmetic around as assign at axis back become becomes before being between beyond bind binds
    block body both branch busy but bx by byte bytes bz cache caches came can candidate candidates cause change
    changed changes closes code combines common compared compares compute computed consecutive constant consumer
    consumers contiguous copy core cores cost could counter counts cpu cuda data decompose default device did
    distance distances divide do does doing drop each editor effect element elements else empty equation
    equations evenly every exactly exceeded exceeds executes explain expression factors facts family far faster
    feeds fewer fill finds first fit fits for from full fuse fuses given go goes grew grow grows guard handoff
    handoffs has help here holds how ids ies if imperfect in indices initial inline inlines inner innermost
    inputs inside instance instances instead intensity into is it iteration iterations its itself keeps kernel
    lane lanes larger last latency later layout leir less level lines llvm local long longer loop loops lost
    machine makes measured measurement memory more most moves ms much multiple name neighbouring neither nest no
    noise none not nothing now of offered offers on once one only onto operation operations or order other out
    outermost outputs outside over own parallel parallelize partial partly passes past per predicted prediction
    printed producer program programs project quiet read reader reading reads reasoning reduction region
    remainders remote removes reorder results reuse reused reverse rfactor risks rpc run runs said same says
    scope second sentence sentences separate set several shape share shared should showed shrinks side simple
    site size sizes skips slower smaller so some something spatial speedup split splits starts state stay stays
    step steps stop stride strides such swaps syntax take target temporar temporaries temporary tensor tensors
    tested text than that the their them then these they this thread threadidx threads through tile tiles tiling
    time times title to touch touched touches transformation transforms travels treats tree true turned turning
    two tx ty tz unit unknown unroll unrolling unrolls update used value values var variable vector vectorize
    vectorizes vectors warp was what when where which whole why width with within without work working write
    writer writes writing written
""".split())

# Memory scopes and loop kinds, in words ("moves from global to local memory").
_VOCABULARY |= frozenset(w for text in (*A.SCOPES.values(), *A.KIND_WORDS.values())
                         for w in re.findall(r"[a-z]+", text))

_DTYPE = re.compile(r"(?:[fiu]\d+|bf16|bool)$")
_UNITS = {"KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4, "B": 1, "-byte": 1}
_COUNT_UNITS = {"K": (1e3, 1024), "M": (1e6, 1024 ** 2), "G": (1e9, 1024 ** 3)}
_LEVEL_WORDS = {"L1d": "l1d", "L1": "l1d", "L2": "l2", "L3": "l3"}

_TOKEN = re.compile(r"""
    (?P<access>(?P<tensor>[A-Za-z][A-Za-z0-9_]*?)_\{(?P<index>[^{}]*)\})
  | (?P<shape>(?P<dtype>[A-Za-z][A-Za-z0-9]*)?\[(?P<dims>[^\[\]]*)\])
  | (?P<word>AVX-512|(?:threadIdx|blockIdx)\.[xyz])
  | (?P<range>(?P<lo>\d+)\.\.(?P<hi>\d+))
  | (?P<sizes>\d+(?:x\d+)+(?![A-Za-z0-9]))
  | (?P<num>(?:(?<=[\s(])[+-])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+(?:\.\d+)?(?:e[+-]?\d+)?))
    (?P<unit>\s?(?:KiB|MiB|GiB|TiB)\b|\s?B\b|%|x(?![A-Za-z0-9])|[KMG](?![A-Za-z0-9])|-byte\b|\s?ms\b|\s?µs\b)?
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
""", re.VERBOSE)

_PRODUCT = re.compile(r"(?<![\d.])(\d+) x (\d+) = (\d+)(?!\d|\.\d)")
_DIVISION = re.compile(r"(?<![\d.])(\d+) = (\d+) x (\d+) \+ (\d+)(?!\d|\.\d)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][)\]])\s+|\n+")


@dataclass(frozen=True)
class Dropped:
    """A sentence that did not check, and the first thing that failed."""

    sentence: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"sentence": self.sentence, "reason": self.reason}


@dataclass
class GroundingResult:
    """The sentences that check against the facts, and the ones dropped."""

    kept: list[str] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.kept) + len(self.dropped)

    @property
    def share(self) -> float | None:
        """Kept sentences over all sentences (None when there were none)."""
        return len(self.kept) / self.total if self.total else None

    @property
    def text(self) -> str:
        return " ".join(self.kept)

    def to_json(self) -> dict[str, Any]:
        return {"kept": self.kept, "dropped": [d.to_json() for d in self.dropped], "total": self.total,
                "checked": len(self.kept)}


@dataclass(frozen=True)
class StepFacts:
    """What a sentence about one step may state (``step_facts`` builds it)."""

    #: ``step_reasoning``'s facts of the step (the machine included, when known).
    facts: dict[str, Any]
    #: Every number a figure may be: the facts' numbers, the numbers of both
    #: programs (extents, index constants, literals), tensor shapes, element
    #: counts and bytes, and the explain module's constants.
    numbers: tuple[float, ...]
    loops: frozenset[str]
    tensors: frozenset[str]
    #: Blocks, and the names the facts hold (a cache tensor, a fused loop).
    names: frozenset[str]
    #: Every tensor access of either program, printed as the reasoning prints it ("X_{i,k}").
    accesses: frozenset[str]
    #: Loop variable -> the kinds it has in the program after the step ("P", "V", ...).
    kinds_after: dict[str, frozenset[str]]
    #: Loop variables that are a reduction axis of some equation, before or after.
    reduction_axes: frozenset[str]
    #: Loop variables that index the written element of some equation after the step.
    spatial_after: frozenset[str]
    #: What ``step_reasoning`` itself says about the step.
    reference: tuple[str, ...] = ()
    #: Words of the step's title ("Compute ... into a temporary") and of both
    #: programs (``exp``, ``inf``), lower case.
    title_words: frozenset[str] = frozenset()

    @property
    def machine(self) -> dict[str, Any] | None:
        return self.facts.get("machine") or None


def step_facts(before: Analysis, after: Analysis | None, step, *, measured: tuple[float, float] | None = None,
               target: str = "llvm", machine: Machine | dict | None = None) -> StepFacts:
    """The facts of ``step`` on ``before`` (``after``: the program it makes;
    computed with ``leir.transforms.apply`` when None), as ``step_reasoning``
    computes them for ``target`` and ``machine`` (a ``Machine``, or its
    ``to_json`` as a dataset sample stores it). ``measured``: the latencies
    before and after, when the step was measured (a sentence about latency
    checks only then)."""
    from leir.bridge.document import load_leir
    from leir.printer import print_program
    from leir.transforms.base import Step

    if isinstance(step, dict):
        step = Step(step["id"], step.get("args", {}))
    if isinstance(machine, dict):
        machine = Machine(**{k: tuple(v) if k == "assumed" else v for k, v in machine.items()
                             if k in Machine.__dataclass_fields__})
    if after is None:
        from leir import transforms

        doc = load_leir(print_program(transforms.apply(before.program, step)))
        if not doc.ok:
            raise ValueError(f"the program after {step.id} does not check")
        after = doc.analysis
    reasoning = step_reasoning(before, after, step, measured=measured, target=target, machine=machine)
    return facts_of(reasoning, before, after, step)


def facts_of(reasoning: Reasoning, before: Analysis, after: Analysis, step=None) -> StepFacts:
    """``StepFacts`` from a ``Reasoning`` already computed for ``before`` ->
    ``after``; with ``step``, the numbers of the step's own title ("2 uses
    in var") count as facts too, as the reasoning of a rewrite states it."""
    from leir.explain.reasoning import _Side, _title
    from leir.explain.facts import _accesses
    from leir.printer import print_expr, print_program

    numbers: list[float] = list(_CONSTANTS)
    names: set[str] = set()
    _leaves(reasoning.facts, numbers, names)
    for value in reasoning.facts.values():  # split factors, tile sizes: their product is said too
        if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            numbers.append(math.prod(value))
    title_words: set[str] = set()
    if step is not None:
        title = _title(_Side.of(before), step)
        numbers.extend(float(m) for m in re.findall(r"(?<![A-Za-z_0-9.])\d+(?:\.\d+)?(?:e[+-]?\d+)?", title))
        title_words.update(w.lower() for w in re.findall(r"[A-Za-z]+", title))
    loops: set[str] = set()
    tensors: set[str] = set()
    blocks: set[str] = set()
    reduction: set[str] = set()
    spatial_after: set[str] = set()
    kinds_after: dict[str, set[str]] = {}
    accesses: set[str] = set()
    for side, analysis in (("before", before), ("after", after)):
        text = print_program(analysis.program)
        title_words.update(w.lower() for w in re.findall(r"[A-Za-z]+", text))
        numbers.extend(float(m) for m in re.findall(r"(?<![A-Za-z_0-9.])\d+(?:\.\d+)?(?:e[+-]?\d+)?", text))
        for unit in analysis.program.units:
            for loop in _nest_loops(unit):
                loops.add(loop.var)
                numbers.append(loop.extent)
                if side == "after":
                    kinds_after.setdefault(loop.var, set()).add(loop.kind)
        for name, t in analysis.tensors.items():
            tensors.add(name)
            numbers.extend(t.shape)
            numbers.append(t.size)
            numbers.append(tensor_bytes(analysis, name))
            numbers.append(dtype_bytes(t.dtype))
        for info in analysis.equations:
            accesses.update(print_expr(a) for a in _accesses(info.equation))
            for loop in info.loops:  # strides along each loop ("stride 4", "(X_{i,k} 1, ...)")
                numbers.extend(v for v in access_strides(analysis, info, loop.var).values() if v is not None)
            if info.kind in ("reduce", "update"):
                reduction.update(info.reduce_axes)
            if side == "after":
                spatial_after.update(info.spatial)
        blocks.update(_block_names(analysis))
        # Element counts the facts state are also said in bytes ("32.8K elements (128 KiB)").
        sizes = {dtype_bytes(t.dtype) for t in analysis.tensors.values()}
        numbers.extend(v * b for k, v in reasoning.facts.items() if "element" in k and isinstance(v, (int, float))
                       and not isinstance(v, bool) for b in sizes)
    return StepFacts(dict(reasoning.facts), tuple(sorted(set(numbers))), frozenset(loops), frozenset(tensors),
                     frozenset(blocks | names), frozenset(accesses), {k: frozenset(v) for k, v in kinds_after.items()},
                     frozenset(reduction), frozenset(spatial_after), tuple(reasoning.sentences),
                     frozenset(title_words))


def _block_names(analysis: Analysis) -> list[str]:
    from leir.explain.facts import _context

    try:
        return list(_context(analysis).block_names)
    except Exception:  # a program the transforms cannot name blocks of: its tensors still count
        return []


def _nest_loops(nest: A.Nest) -> Iterable[A.Loop]:
    yield from nest.loops
    for item in nest.body:
        if isinstance(item, A.Nest):
            yield from _nest_loops(item)


def _leaves(value: Any, numbers: list[float], names: set[str]) -> None:
    """The numbers and identifier-like strings anywhere in a facts value."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            numbers.append(float(value))
    elif isinstance(value, str):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            names.add(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and not isinstance(v, dict):
                names.add(k)  # working-set tables are keyed by tensor
            _leaves(v, numbers, names)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _leaves(v, numbers, names)


# ------------------------------------------------------------------ sentences


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences: after ``.``, ``!`` or ``?`` (or one of
    them and a closing bracket) followed by white space, and at line breaks;
    a decimal point or ``threadIdx.x`` is not an end. Empty pieces and the
    model's special tokens are left out."""
    text = re.sub(r"<\|[a-z]+\|>", " ", text)
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def check(text: str | Sequence[str], facts: StepFacts) -> GroundingResult:
    """Each sentence of ``text`` (a string, cut with ``sentences``, or a list
    of sentences) kept when it checks against ``facts``, else dropped with
    the reason (module docstring)."""
    parts = sentences(text) if isinstance(text, str) else [s.strip() for s in text if s and s.strip()]
    result = GroundingResult()
    for sentence in parts:
        reason = _check_sentence(sentence, facts)
        if reason is None:
            result.kept.append(sentence)
        else:
            result.dropped.append(Dropped(sentence, reason))
    return result


@dataclass
class _Tok:
    kind: str
    text: str
    start: int
    end: int
    match: re.Match


def _tokens(sentence: str) -> list[_Tok]:
    out = []
    for m in _TOKEN.finditer(sentence):
        kind = next(k for k in ("access", "shape", "word", "range", "sizes", "num", "name") if m.group(k) is not None)
        out.append(_Tok(kind, m.group(0), m.start(), m.end(), m))
    return out


def _check_sentence(sentence: str, f: StepFacts) -> str | None:
    """None when ``sentence`` checks, else why not."""
    if not re.search(r"[.!?][)\]]?$", sentence):
        return "incomplete: the sentence does not end"
    exempt: set[int] = set()  # starts of numbers that are results of arithmetic checked here
    for m in _PRODUCT.finditer(sentence):
        a, b, c = map(int, m.groups())
        if a * b != c:
            return f"arithmetic: {a} x {b} is not {c}"
        exempt.add(m.start(3))
    for m in _DIVISION.finditer(sentence):
        a, b, q, r = map(int, m.groups())
        if b * q + r != a:
            return f"arithmetic: {b} x {q} + {r} is not {a}"
        exempt.update((m.start(3), m.start(4)))
    toks = _tokens(sentence)
    for k, t in enumerate(toks):
        if t.kind == "num" and t.start not in exempt:
            why = _check_number(t, f)
            if why:
                return why
        elif t.kind == "range":
            lo, hi = int(t.match.group("lo")), int(t.match.group("hi"))
            if not ((lo == 0 or _in(lo, 0, f.numbers)) and (_in(hi + 1, 0, f.numbers) or _in(hi, 0, f.numbers))):
                return f"number: range {t.text} is not in the facts"
        elif t.kind == "sizes":
            for part in t.text.split("x"):
                if not _in(float(part), 0, f.numbers):
                    return f"number: {part} in {t.text} is not in the facts"
        elif t.kind == "shape":
            why = _check_shape(t, f)
            if why:
                return why
        elif t.kind == "access":
            why = _check_access(t, f)
            if why:
                return why
        elif t.kind == "name":
            why = _check_name(toks, k, sentence, f)
            if why:
                return why
    return _check_claims(sentence, toks, f)


# ------------------------------------------------------------------ numbers


def _precision(text: str, rounded: bool = False) -> float:
    """Half a unit of the last digit ``text`` is printed with (0 for a
    short integer that is not ``rounded``: 2 means 2; a longer one may be a
    rounded figure, as is any percentage, ratio or size)."""
    mantissa, _, exponent = text.lower().partition("e")
    scale = 10.0 ** int(exponent) if exponent else 1.0
    if "." in mantissa:
        return 0.5 * 10.0 ** -len(mantissa.split(".")[1]) * scale
    digits = len(mantissa.lstrip("+-").replace(",", ""))
    return 0.5 * scale if digits >= 3 or exponent or rounded else 0.0


def _in(value: float, tol: float, pool: Sequence[float]) -> bool:
    return any(abs(p - value) <= tol + REL_TOL * max(abs(p), 1e-12) for p in pool)


def _ratios(pool: Sequence[float]) -> list[float]:
    positive = [p for p in pool if p > 0]
    return [a / b for a in positive for b in positive if a != b]


def _check_number(t: _Tok, f: StepFacts) -> str | None:
    raw = t.match.group("num")
    unit = (t.match.group("unit") or "").strip()
    value = float(raw.replace(",", ""))
    tol = _precision(raw, rounded=bool(unit))
    pool = f.numbers
    if raw[0] in "+-":  # a signed figure is a difference of two facts
        if any(abs((a - b) - value) <= tol + REL_TOL * abs(value) for a in pool for b in pool):
            return None
        return f"number: {t.text} is not a difference of two facts"
    if unit in _UNITS:
        ok = _in(value * _UNITS[unit], tol * _UNITS[unit], pool)
    elif unit in _COUNT_UNITS:
        ok = any(_in(value * s, tol * s, pool) for s in _COUNT_UNITS[unit])
    elif unit == "%":
        v, tl = value / 100, tol / 100
        ratios = _ratios(pool)
        ok = _in(v, tl, pool) or _in(v, tl, ratios) or _in(1 - v, tl, ratios)
    elif unit == "x":
        ok = _in(value, tol, pool) or _in(value, tol, _ratios(pool))
    elif unit in ("ms", "µs"):
        scale = 1.0 if unit == "ms" else 1e-3
        latencies = [f.facts[k] for k in ("latency_before_ms", "latency_after_ms")
                     if isinstance(f.facts.get(k), (int, float))]
        ok = _in(value * scale, tol * scale, latencies)
    else:  # also a figure printed with three significant digits ("28" for 27.97)
        ok = _in(value, tol, pool) or any(f"{p:.3g}" == raw for p in pool)
    return None if ok else f"number: {t.text.strip()} is not in the facts"


def _check_shape(t: _Tok, f: StepFacts) -> str | None:
    dtype = t.match.group("dtype")
    dims = [d.strip() for d in t.match.group("dims").split(",") if d.strip()]
    if dtype is not None and not _DTYPE.match(dtype):
        return f"name: {t.text} is not a shape the facts know"
    for d in dims:
        if not re.fullmatch(r"\d+", d) or not _in(float(d), 0, f.numbers):
            return f"number: {d} in {t.text} is not in the facts"
    return None


def _check_access(t: _Tok, f: StepFacts) -> str | None:
    tensor = t.match.group("tensor")
    if tensor not in f.tensors:
        return f"name: tensor {tensor} is not in the program"
    for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", t.match.group("index")):
        if name not in f.loops:
            return f"name: loop {name} (in {t.text}) is not in the program"
    if t.text not in f.accesses:
        return f"name: {t.text} is not an access of the program"
    return None


# ------------------------------------------------------------------ names


def _known(name: str, f: StepFacts) -> bool:
    return name in f.loops or name in f.tensors or name in f.names


def _check_name(toks: list[_Tok], k: int, sentence: str, f: StepFacts) -> str | None:
    t = toks[k]
    name = t.text
    if _known(name, f) or name in _WORDS or _DTYPE.match(name) or sentence.startswith("...", t.end):
        return None  # (a title cuts a long expression short with "...")
    prev = toks[k - 1].text if k else ""
    after = sentence[t.end:t.end + 12]
    # A name in a list after "loop(s)": "loops i, j and k".
    j = k - 1
    while j >= 0 and toks[j].kind == "name" and toks[j].text == "and":
        j -= 1
    listed = j >= 0 and toks[j].kind in ("name",) and toks[j].text.lower() in ("loop", "loops")
    if not listed and j >= 0 and toks[j].kind == "name" and (_known(toks[j].text, f) and toks[j].text in f.loops):
        # "loops i, j": the separator between two names is a comma or "and".
        between = sentence[toks[j].end:t.start]
        i = j
        while i >= 0 and toks[i].kind == "name" and toks[i].text in f.loops:
            i -= 1
        listed = between.strip() in (",", "and", ", and") and i >= 0 and toks[i].text.lower() in ("loop", "loops")
    if listed and name not in _NOT_LOOPS:
        return f"name: loop {name} is not in the program"
    if prev.lower() in ("across", "along") and name not in _NOT_LOOPS:
        return f"name: loop {name} is not in the program"
    if re.match(r" \(\d+(?:\)| iter)", after) and not name[0].isupper() and name not in _NOT_LOOPS:
        return f"name: loop {name} is not in the program"
    if "_" in name or re.search(r"\d", name):
        return f"name: {name} is not in the program"
    if re.fullmatch(r"[A-Z][A-Z0-9]*", name) and not (k == 0 and len(name) == 1):
        return f"name: {name} is not in the program"
    word = name.lower()
    if len(word) > 1 and not ({word, word[:-1] if word.endswith("s") else word} & (_VOCABULARY | f.title_words)):
        return f"word: {name} is not a word of the explain module's reasoning"
    return None


# ------------------------------------------------------------------ claims

_NEGATION = re.compile(r"\b(?:not|no longer|lost|never|isn't|aren't)\b")


def _check_claims(sentence: str, toks: list[_Tok], f: StepFacts) -> str | None:
    lower = sentence.lower()
    negated = bool(_NEGATION.search(lower))
    mentioned_loops = [t.text for t in toks if t.kind == "name" and t.text in f.loops]
    # Contiguity, against the strides the facts list.
    claim = re.search(r"contiguous|stride-1|unit stride", lower)
    if claim:
        strides = _stated_strides(f.facts)
        # The accesses the claim is about: those of its clause, before it.
        clause = max(sentence.rfind(c, 0, claim.start()) for c in ":;") + 1
        for t in toks:
            if t.kind == "access" and clause <= t.start < claim.start() and t.text in strides:
                s = strides[t.text]
                if negated != (s != 1):
                    claim = "not contiguous" if negated else "contiguous"
                    return f"claim: {t.text} is said to be {claim}, the facts give stride {s}"
    # "ACCESS (stride N)": the stride the facts give that access ("before": the one before the step).
    for m in re.finditer(r"([A-Za-z][A-Za-z0-9_]*?_\{[^{}]*\}) \(stride (-?\d+|unknown)( before)?", sentence):
        access, said, before = m.group(1), m.group(2), bool(m.group(3))
        known = _stated_strides(f.facts, before=before)
        if access in known:
            stated = "unknown" if known[access] is None else str(known[access])
            if said != stated:
                return f"claim: {access} has stride {said}, the facts give {stated}"
    # Parallel and vectorized loops, against the loop kinds after the step.
    for word, kind, fact in ((r"\bin parallel\b", "P", "parallel_loop"),
                             (r"\bvectoriz(?:es|ed)\b", "V", "vector_loop")):
        if re.search(word, lower) and not negated:
            claimed = [v for v in _loops_after_word(toks, f) if v in f.loops]
            for v in claimed:
                if kind not in f.kinds_after.get(v, ()) and f.facts.get(fact) != v:
                    return (f"claim: loop {v} is said to be {'in parallel' if kind == 'P' else 'vectorized'}, "
                            "the program after the step does not make it so")
    # Reduction and spatial axes.
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*) is an? (reduction|spatial) axis", sentence):
        v, what = m.groups()
        if v in f.loops:
            if what == "reduction" and v not in f.reduction_axes:
                return f"claim: {v} is said to be a reduction axis, no equation reduces over it"
            if what == "spatial" and v not in f.spatial_after:
                return f"claim: {v} is said to be a spatial axis, no equation after the step is indexed by it"
    for m in re.finditer(r"reduction (?:of [A-Za-z_][A-Za-z0-9_]* )?over loop ([A-Za-z_][A-Za-z0-9_]*)", sentence):
        if m.group(1) in f.loops and m.group(1) not in f.reduction_axes:
            return f"claim: loop {m.group(1)} is said to be reduced over, no equation reduces over it"
    # Lanes and cores, against the facts that state them.
    for m in re.finditer(r"(?<![\d.])(\d+) (lanes|cores)\b", sentence):
        n, what = int(m.group(1)), m.group(2)
        stated = f.facts.get("lanes") if what == "lanes" else (f.machine or {}).get("cores", f.facts.get("cores"))
        if stated is not None and n != stated and not (what == "cores" and not negated and "at most" in lower):
            return f"claim: {n} {what}, the facts give {stated}"
    return _check_caches(sentence, f)


def _loops_after_word(toks: list[_Tok], f: StepFacts) -> list[str]:
    """Loops the sentence names after "loop"/"loops" (or any it names, when
    it names no loop that way)."""
    out = [toks[k + 1].text for k in range(len(toks) - 1)
           if toks[k].text.lower() in ("loop", "loops") and toks[k + 1].kind == "name"]
    return out or [t.text for t in toks if t.kind == "name" and t.text in f.loops and t.text not in f.tensors]


def _stated_strides(facts: dict[str, Any], before: bool = False) -> dict[str, int | None]:
    """Access -> its stride along the innermost (or vector) loop, where the
    facts give one: after the step, or ``before`` it."""
    out: dict[str, int | None] = {}
    for row in facts.get("stride_changes") or ():
        out[row.get("access")] = row.get("stride_before" if before else "stride_after")
    if not before:
        for row in facts.get("strides_along_vector_loop") or ():
            out.setdefault(row.get("access"), row.get("stride"))
    return out


_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s?(KiB|MiB|GiB|TiB|B\b|K\b|M\b)")
_CACHE = re.compile(r"(?:the (\d+(?:\.\d+)?\s?(?:KiB|MiB|GiB|B|K|M)) )?\b(L1d|L1|L2|L3)\b")


def _bytes(number: str, unit: str) -> float:
    return float(number) * {"B": 1, "K": 1024, "M": 1024 ** 2}.get(unit, _UNITS.get(unit, 1))


def _check_caches(sentence: str, f: StepFacts) -> str | None:
    """Cache sizes named against the machine's; "fits in LEVEL", "no longer
    fits in LEVEL" and "exceeds every cache level" against the size said
    just before."""
    machine = f.machine
    levels = list(_CACHE.finditer(sentence))
    fits = re.search(r"\bfits? in\b|\bexceeds every cache level\b|\bexceeded every cache level\b", sentence)
    if (levels or fits) and not machine:
        if levels or "cache level" in sentence:
            return "claim: a cache level is named, the facts have no machine"
    if not machine:
        return None
    for m in levels:
        size_text, level = m.group(1), m.group(2)
        size = machine.get(_LEVEL_WORDS[level])
        if size_text and size is not None:
            n, unit = re.match(r"(\d+(?:\.\d+)?)\s?(\w+)", size_text).groups()
            if abs(_bytes(n, unit) - size) > _precision(n) * _bytes("1", unit) + REL_TOL * size:
                return f"claim: the {size_text} {level}, the machine's {level} is {size} bytes"
    caches = [("l1d", machine.get("l1d")), ("l2", machine.get("l2")), ("l3", machine.get("l3"))]
    for m in re.finditer(r"(no longer )?fits? in (?:the \d+(?:\.\d+)?\s?\w+ )?(L1d|L1|L2|L3)\b"
                         r"|(exceed(?:s|ed) every cache level)", sentence):
        said = [s for s in _SIZE.finditer(sentence[:m.start()])
                if not _CACHE.match(sentence, s.start() - 4 if s.start() >= 4 else 0)]
        if not said:
            continue
        nbytes = _bytes(*said[-1].groups())
        if m.group(3):
            if machine.get("l3") and nbytes <= machine["l3"]:
                return f"claim: {said[-1].group(0)} is said to exceed every cache level, the L3 holds it"
            continue
        level = _LEVEL_WORDS[m.group(2)]
        size = machine.get(level)
        if size is None:
            continue
        slack = _precision(said[-1].group(1)) * _bytes("1", said[-1].group(2))
        if m.group(1):  # "no longer fits in LEVEL": the larger figure, the one after the step
            nbytes = max(_bytes(*s.groups()) for s in said)
            if nbytes + slack <= size:
                return f"claim: {said[-1].group(0)} is said not to fit in {m.group(2)} ({size} bytes)"
            continue
        smaller = [s for name, s in caches[:[n for n, _ in caches].index(level)] if s]
        if nbytes - slack > size:
            return f"claim: {said[-1].group(0)} is said to fit in {m.group(2)} ({size} bytes)"
        if "only" not in sentence[:m.start()].split(",")[-1] and any(nbytes + slack <= s for s in smaller):
            return f"claim: {said[-1].group(0)} is said to fit in {m.group(2)}, a smaller level holds it"
    return None

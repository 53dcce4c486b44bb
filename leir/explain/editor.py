"""What an editor shows about a program: hover's markdown, and the
trajectory record of an applied step.

Built from leir's own objects only (an analysis, the ranked suggestions
``leir.tools.suggest`` gives, a ``leir.tools.measuring.MeasuredLookup``, a
job's ``Applied`` result; they are passed in, never imported here): nothing
here knows LSP, the session or a snapshot, and every fact it states comes
from the rest of ``leir.explain``. The server's hover, code lens, resolve
and optimize handlers call it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from leir.semantics import Analysis
    from leir.tools.jobs import Applied
    from leir.tools.measuring import MeasuredLookup
    from leir.tools.suggest import Suggestion


def latency_text(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.3g} ms"
    return f"{ms * 1000:.3g} µs"


# ------------------------------------------------------------------ hover


def cursor_facts(analysis: "Analysis", offsets: list[int], target: str) -> list[str]:
    """What the analysis knows about the access or the loop at the first of
    ``offsets`` (LEIR offsets): one markdown part, or none."""
    from leir import explain

    parts: list[str] = []
    for at in offsets[:1]:
        for describe in (explain.describe_access, explain.describe_loop):
            text = describe(analysis, at=at, target=target)
            if text:
                parts.append(text)
                break
    return parts


def step_text(analysis: "Analysis", s: "Suggestion", language: str, target: str,
              lookup: "MeasuredLookup | None") -> str:
    """One step offered at the cursor, explained: why it should help, and
    its measured latencies when the cache has them."""
    from leir.explain import describe_step

    measured = None
    if s.before is not None and s.after is not None and s.before.median_ms and s.after.median_ms:
        measured = (s.before.median_ms, s.after.median_ms)
    after = None
    if language == "leir" and lookup is not None and lookup.outcomes is not None:
        after = lookup.outcomes.after(analysis, s.step)
    if language == "leir":
        text = describe_step(analysis, s.step, after=after, measured=measured, target=target,
                             device=s.before.device if s.before is not None else None)
    else:  # the step names the kernel's TIR blocks: say what the ranking computed
        text = f"**{s.step.id}**"
        if s.facts:
            text += "\n" + "\n".join(f"- {fact}" for fact in s.facts)
        if measured is not None:
            text += (f"\n- measured {latency_text(measured[0])} -> {latency_text(measured[1])}"
                     f" ({measured[0] / measured[1]:.2f}x) on {s.before.target}, {s.before.device}")
    if s.plan_text is not None:
        text = f"This is {s.plan_text}, a plan that was applied and verified as a whole.\n\n{text}"
    if s.reasoning:
        how = s.reasoning_status + (f", {s.reasoning_note}" if s.reasoning_note else "")
        text += (f"\n\n*The local model's reasoning ({how}; only its sentences that state this "
                 f"step's computed facts are kept):* {s.reasoning}")
    return f"### {s.label}\n{text}"


def hover_text(facts: list[str], analysis: "Analysis", steps: list["Suggestion"], language: str, target: str,
               lookup: "MeasuredLookup | None", *, started: float, budget_s: float) -> str | None:
    """Hover's markdown: the ``facts`` at the cursor, then the ``steps``
    offered on what is under it, explained while the time since ``started``
    (``time.perf_counter``) is within ``budget_s`` and named after it (the
    first is always explained), then the current program's latency."""
    parts = list(facts)
    if steps:
        explained, named = [], []
        for s in steps:
            if explained and time.perf_counter() - started > budget_s:
                named.append(s.label)
            else:
                explained.append(step_text(analysis, s, language, target, lookup))
        if named:
            explained.append("Also offered here: " + "; ".join(f"**{label}**" for label in named)
                             + " (the code-action menu applies them)")
        parts.append("\n\n".join(explained))
    before = steps[0].before if steps else None
    if before is not None and before.median_ms:
        parts.append(f"current program: {latency_text(before.median_ms)} on {before.target} "
                     f"({before.device}), measured {before.runs} runs")
    return "\n\n---\n\n".join(parts) if parts else None


# ------------------------------------------------------------------ trajectory records


def trajectory_entry(step: dict, title: str, applied: "Applied", language: str, *, target: str,
                     lookup: Callable[[], "MeasuredLookup | None"], before_analysis=None) -> dict:
    """The trajectory record of an applied step: its latencies before and
    after when the cache has them (``lookup()``, asked only once both
    programs load), and the reasoning from both programs.
    ``before_analysis``: the document's own analysis, when it is the
    program the step was applied to (a ``.leir`` document), which saves
    parsing it again (a third of a second on a 1,000-line file)."""
    from types import SimpleNamespace

    from leir.bridge.document import load_leir

    entry: dict[str, Any] = {"id": step["id"], "args": step["args"], "title": title,
                             "latency_before_ms": None, "latency_after_ms": None, "speedup": None,
                             "reasoning": "", "verified": applied.verification}
    if before_analysis is not None and before_analysis.ok:
        before = SimpleNamespace(ok=True, analysis=before_analysis)
    else:
        before = load_leir(applied.before_program)
    after = load_leir(applied.after_program)
    if not (before.ok and after.ok):
        return entry
    measured_lookup = lookup()
    if measured_lookup is not None:
        mb, ma = measured_lookup.measured(before.analysis), measured_lookup.measured(after.analysis)
        if mb is not None and ma is not None and mb.median_ms and ma.median_ms:
            entry.update(latency_before_ms=mb.median_ms, latency_after_ms=ma.median_ms,
                         speedup=round(mb.median_ms / ma.median_ms, 3))
    from leir.explain.reasoning import step_reasoning
    from leir.transforms import Step

    measured = None
    if entry["latency_before_ms"] is not None:
        measured = (entry["latency_before_ms"], entry["latency_after_ms"])
    if language == "leir":  # a Python kernel's step names TIR blocks, which the LEIR form does not have
        reasoning = step_reasoning(before.analysis, after.analysis, Step(step["id"], step["args"]), measured=measured,
                                   target=target)
        entry["reasoning"] = reasoning.text
    return entry


def search_entries(steps: list[dict]) -> list[dict]:
    """The trajectory records of the steps an optimize search kept (its
    result's ``steps``), each titled with its step's id."""
    return [{**s, "title": s["id"]} for s in steps]

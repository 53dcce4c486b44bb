"""Markdown for hover: on a loop header, on a tensor access, on a
suggested step. Pure functions of an analysis; they never build or run."""

from __future__ import annotations


from leir import ast as A
from leir.semantics import Analysis
from leir.explain.facts import LINE_BYTES, access_facts, human_bytes, human_count, loop_facts
from leir.explain.machine import Machine
from leir.explain.prediction import predicted_after
from leir.explain.reasoning import _Writer, _level, _measured, _stride_word, step_reasoning


def _code(s: str) -> str:
    return f"`{s}`"


def _line_bytes(machine: Machine | None) -> int:
    return machine.line_bytes if machine is not None else LINE_BYTES


def _fit(machine: Machine | None, nbytes: float, target: str) -> str:
    """" (fits in the 32 KiB L1d)", or nothing where the CPU is not known."""
    if machine is None or target == "cuda":
        return ""
    level = _level(machine, nbytes)
    return f" (fits in {machine.cache_text(level)})" if level != "memory" else " (more than every cache)"


def describe_loop(analysis: Analysis, *, at: int | None = None, block: str | None = None, var: str | None = None,
                  machine: Machine | None = None, target: str = "llvm") -> str | None:
    """Markdown for hover on a loop header (None when there is no loop)."""
    machine = machine or (Machine.detect() if target == "llvm" else None)
    f = loop_facts(analysis, at=at, block=block, var=var, target=target, line_bytes=_line_bytes(machine))
    if f is None:
        return None
    bound = f" to {A.THREAD_AXES[f.var]}" if f.kind == "B" and f.var in A.THREAD_AXES else ""
    lines = [f"**loop {_code(f.var)}**: {f.kind_name} ({f.kind}){bound}, {f.extent} iterations"
             + (f" from {f.start}" if f.start else "")]
    if f.outer:
        lines.append(f"- inside {', '.join(f'{v} ({e})' for v, _, e in f.outer)}; trip count "
                     f"{human_count(f.trip_count)} ({' x '.join(str(e) for _, _, e in f.outer)} x {f.extent})")
    else:
        lines.append(f"- outermost; trip count {human_count(f.trip_count)}")
    if f.reduction_for:
        lines.append(f"- **reduction** axis of {', '.join(map(_code, f.reduction_for))}")
    if f.spatial_for:
        lines.append(f"- spatial axis of {', '.join(map(_code, f.spatial_for))}")
    dep = [s for s in f.strides if s.stride != 0]
    if dep:
        lines.append("- accesses that depend on it (element stride per iteration): "
                     + ", ".join(f"{_code(s.text)} {_stride_word(s.stride)}" for s in dep))
    indep = sorted({s.text for s in f.strides if s.stride == 0})
    if indep:
        lines.append(f"- not indexed by it (reused every iteration): {', '.join(map(_code, indep))}")
    ws = sum(f.iteration_working_set.values())
    if ws:
        lines.append(f"- one iteration touches {human_bytes(ws)} of cache lines" + _fit(machine, ws, target))
    if f.offered:
        ids = list(dict.fromkeys(i for i, _, _ in f.offered))
        lines.append(f"- offered: {', '.join(ids)}")
    if f.refused:
        lines.append("- not offered: " + "; ".join(
            f"{r.transform}{f' with {r.with_loop}' if r.with_loop else ''} ({r.short})" for r in f.refused))
    return "\n".join(lines)


def describe_access(analysis: Analysis, *, at: int | None = None, block: str | None = None,
                    tensor: str | None = None, machine: Machine | None = None, target: str = "llvm") -> str | None:
    """Markdown for hover on a tensor access (None when there is none)."""
    machine = machine or (Machine.detect() if target == "llvm" else None)
    f = access_facts(analysis, at=at, block=block, tensor=tensor, line_bytes=_line_bytes(machine))
    if f is None:
        return None
    from leir.ast import SCOPES

    shape = f"[{','.join(map(str, f.shape))}]" if f.shape else "scalar"
    role = {"in": "input", "out": "output", "tmp": "temporary"}[f.role]
    lines = [f"**{_code(f.text)}** in block {_code(f.block)} ({'written' if f.written else 'read'})",
             f"- {role} {_code(f.tensor)}: {f.dtype}{shape}, {SCOPES[f.scope]} memory, {human_bytes(f.bytes)}"]
    if f.loops:
        rows = ["| loop | extent | stride | one pass touches | in cache lines |", "|---|---|---|---|---|"]
        for l in f.loops:
            rows.append(f"| {l.var} | {l.extent} | {_stride_word(l.stride)} | {human_count(l.footprint)} elements, "
                        f"{human_bytes(l.footprint_bytes)} | {human_bytes(l.footprint_line_bytes)} |")
        lines.append("")
        lines.extend(rows)
        lines.append("")
    if f.reuse > 1:
        lines.append(f"- each element is touched {human_count(f.reuse)} times (loops {', '.join(f.reuse_loops)} do not "
                     "index it)")
    else:
        lines.append("- each element is touched once by this access")
    if f.reuse_loop is not None:
        lines.append(f"- reused across {_code(f.reuse_loop)} after {human_bytes(f.reuse_distance_bytes)} of cache lines"
                     + _fit(machine, f.reuse_distance_bytes, target))
    return "\n".join(lines)


def describe_step(before: Analysis, step, *, after: Analysis | None = None,
                  measured: tuple[float, float] | None = None, target: str = "llvm", device: str | None = None,
                  machine: Machine | None = None) -> str:
    """Markdown for hover on a suggested step: the reasoning from the
    programs before and after it (``after`` given, or predicted on the
    syntax tree for loop-kind changes and reorders), else the facts of the
    loops the step names; the measured latencies when given."""
    from leir.transforms.base import Step

    if isinstance(step, dict):
        step = Step(step["id"], step.get("args", {}))
    machine = machine or (Machine.detect() if target == "llvm" else None)
    head = f"**{step.id}** {_code(_args_text(step.args))}"
    if after is None:
        after = predicted_after(before, step)
    if after is not None:
        r = step_reasoning(before, after, step, measured=measured, target=target, machine=machine)
        body = "\n".join(f"- {s}" for s in r.sentences)
    else:
        lines = []
        block = step.args.get("block")
        for var in ([step.args["loop"]] if isinstance(step.args.get("loop"), str) else
                    list(step.args.get("loops") or [])):
            text = describe_loop(before, block=block, var=var, machine=machine, target=target)
            if text:
                lines.append(text)
        if measured is not None:
            w = _Writer(machine, target)
            _measured(w, measured, target)
            lines.extend(f"- {s}" for s in w.sentences)
        body = "\n\n".join(lines) or "- (apply the step to see its reasoning)"
    tail = f"\n\n_target {target}" + (f", device {device}" if device else "") + "_"
    return f"{head}\n\n{body}{tail}"


def _args_text(args: dict) -> str:
    import json

    return json.dumps(args, sort_keys=True)

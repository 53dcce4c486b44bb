"""A snapshot of what leir offers and says, to diff before and after a
refactor that must not change behaviour (issue 13).

For every bundled example (and the test suite's named programs), it records:

- every candidate step of the catalogue (id, arguments, title), in order;
- hover's facts on every loop header and tensor access (``leir.explain``:
  strides, working sets, the steps offered there and the failing
  precondition of each loop step that is not, short and detailed);
- the explanation of the first candidate of each transformation;
- ``leir.tools.suggest``'s ranking of the whole program (id, arguments, score);
- the result of applying the first ``--apply`` candidates of each
  transformation: the program printed, or the error's type, short and
  detailed messages.

    python bench/behaviour_snapshot.py OUT.json [--apply N]
    diff <(python -m json.tool A.json) <(python -m json.tool B.json)

Nothing is measured; applying a schedule step builds with TVM (no run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def _programs() -> dict[str, str]:
    out = {p.name: p.read_text() for p in sorted((REPO / "examples").glob("*.leir"))}
    try:
        import programs as named  # tests/programs.py: the named fixtures
    except ImportError:
        return out
    for name in sorted(vars(named)):
        value = getattr(named, name)
        if name.isupper() and isinstance(value, str) and "L^{" in value and "TVMSCRIPT" not in name:
            out[f"tests/programs.py:{name}"] = value
    return out


def _error(e: Exception) -> dict:
    return {"error": type(e).__name__, "short": getattr(e, "short", str(e)), "detail": getattr(e, "detail", None)}


def snapshot(text: str, apply_first: int) -> dict:
    from leir import explain, transforms
    from leir.bridge.document import load_leir
    from leir.printer import print_program
    from leir.tools.suggest import suggest

    doc = load_leir(text)
    if not doc.ok:
        return {"diagnostics": [(d.code, d.message) for d in doc.diagnostics]}
    analysis = doc.analysis
    found = transforms.candidates(analysis)
    record: dict = {"candidates": [[c.step.id, c.step.args, c.title] for c in found]}
    hovers = {}
    for at in sorted({i for i in range(len(text)) if text.startswith("L^{", i)}
                     | {a.span.start for info in analysis.equations for a in _accesses(info.equation)
                        if a.span is not None}):
        facts = (explain.describe_loop(analysis, at=at, machine=_MACHINE)
                 or explain.describe_access(analysis, at=at, machine=_MACHINE))
        if facts:
            hovers[str(at)] = facts
    record["hover"] = hovers
    firsts = {}
    for c in found:
        firsts.setdefault(c.step.id, c)
    record["explained"] = {tid: explain.describe_step(analysis, c.step, target="llvm", machine=_MACHINE)
                           for tid, c in firsts.items()}
    record["ranked"] = [[s.step.id, s.step.args, round(s.score, 6)] for s in suggest(text, "leir", None)]
    applied = []
    counts: dict[str, int] = {}
    for c in found:
        if counts.get(c.step.id, 0) >= apply_first:
            continue
        counts[c.step.id] = counts.get(c.step.id, 0) + 1
        try:
            applied.append([c.step.id, c.step.args, print_program(transforms.apply(analysis, c.step))])
        except Exception as e:  # noqa: BLE001 - a refusal is part of the behaviour recorded
            applied.append([c.step.id, c.step.args, _error(e)])
    record["applied"] = applied
    return record


def _accesses(eq):
    from leir import ast as A

    return [n for part in (eq.lhs, eq.rhs, eq.predicate) if part is not None for n in A.walk(part)
            if isinstance(n, A.Access)]


_MACHINE = None


def main(argv: list[str] | None = None) -> int:
    global _MACHINE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--apply", type=int, default=2, help="candidates applied per transformation and program")
    args = parser.parse_args(argv)
    from leir.explain.machine import Machine

    # A fixed machine, so that the explanations do not depend on where it ran.
    _MACHINE = Machine(cores=8)
    out = {}
    for name, text in _programs().items():
        out[name] = snapshot(text, args.apply)
        print(f"{name}: {len(out[name].get('candidates', []))} candidates", file=sys.stderr)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

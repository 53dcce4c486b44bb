"""The ``leir`` command line: check, fmt, convert, run.

Every user mistake (bad file, bad argument, a program that does not check)
is one line on standard error and a non-zero exit; a traceback means a bug
in leir-lsp (set LEIR_DEBUG=1 to see it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from leir.errors import LeirError
from leir.files import write_atomic

EXIT_OK = 0
EXIT_FINDINGS = 1  # the input has errors (check, run mismatch)
EXIT_USAGE = 2  # bad arguments or unreadable files


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise LeirError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="leir", description="LEIR tensor programs: check, format, convert, run.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_ArgumentParser)

    p = sub.add_parser("check", help="report diagnostics as path:line:col: severity: message")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("fmt", help="print the canonical (or compact) form of a .leir file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--compact", action="store_true", help="Step-TP one-line form (drops comments and declarations)")
    p.add_argument("--write", action="store_true", help="rewrite the file in place instead of printing")
    p.set_defaults(handler=cmd_fmt)

    p = sub.add_parser("convert", help="convert between LEIR and TVMScript (to standard output)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--to", required=True, choices=["tvmscript", "leir"])
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.set_defaults(handler=cmd_convert)

    p = sub.add_parser("run", help="build, run, and check against the numpy reference")
    p.add_argument("file", metavar="FILE")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--inputs", metavar="IN.npz", help="input arrays keyed by tensor name")
    src.add_argument("--random-inputs", metavar="SEED", type=int, help="random inputs from this seed")
    p.add_argument("--output", metavar="OUT.npz", help="write every output tensor, keyed by name")
    p.add_argument("--target", choices=["llvm", "cuda"], default="llvm")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.add_argument("--no-check", action="store_true", help="skip the comparison with the numpy reference")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("actions", help="list the transformation steps that apply (JSON with --json)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--at", metavar="LINE:COL", help="only steps that apply at this position (1-based)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {id, title, args, range}")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.set_defaults(handler=cmd_actions)

    p = sub.add_parser("suggest", help="the ranked legal steps (at a position), by the model or the heuristic")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--at", metavar="LINE:COL", help="only steps that apply at this position (1-based)")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.add_argument("--top", type=int, default=10, metavar="N", help="the N best (default 10; 0: all)")
    _add_ranker_argument(p)
    p.add_argument("--target", choices=["llvm", "cuda"], default="llvm")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {id, args, title, score, source, reasoning} (and generated_reasoning "
                        "{text, status}: what a model wrote for its first 3, checked against the step's facts)")
    p.set_defaults(handler=cmd_suggest)

    p = sub.add_parser("apply", help="apply one step and print (or --write) the new program")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--step", required=True, metavar="JSON", help="one element of `leir actions --json`, or - for stdin")
    p.add_argument("--verify", action="store_true", help="run before and after on random inputs and compare")
    p.add_argument("--write", action="store_true", help="rewrite the file in place")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.set_defaults(handler=cmd_apply)

    p = sub.add_parser("import-trace", help="translate MetaSchedule tuning records into catalogue steps")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--database", required=True, metavar="DIR",
                   help="MetaSchedule's work directory (database_workload.json, database_tuning_record.json)")
    p.add_argument("--json", action="store_true", help="print every record's translation as JSON")
    p.add_argument("--write", metavar="OUT", help="write the best record's steps as a trace for `leir replay`")
    p.set_defaults(handler=cmd_import_trace)

    p = sub.add_parser("replay", help="apply a trace of steps (a JSON list) and print the result")
    p.add_argument("file", metavar="FILE")
    p.add_argument("trace", metavar="TRACE.json")
    p.add_argument("--write", action="store_true", help="rewrite the file in place")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.set_defaults(handler=cmd_replay)

    p = sub.add_parser("optimize", help="search for measured, verified steps that make the program faster")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--steps", type=int, required=True, metavar="N", help="at most N steps")
    p.add_argument("--budget", type=int, metavar="M", help="at most M programs measured, the start included (default 6N+1)")
    p.add_argument("--target", choices=["llvm", "cuda"], default="llvm")
    p.add_argument("--strategy", choices=["plans", "greedy", "beam", "mcts"], default="plans",
                   help="plans (default): plans of catalogue steps, then greedy polish; greedy, beam, mcts: one step at a time")
    p.add_argument("--beam-width", type=int, default=3, metavar="B", help="programs kept per round by beam (default 3)")
    p.add_argument("--iterations", type=int, default=10, help="MCTS iterations (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the exploration picks")
    p.add_argument("--json", action="store_true", help='print {"start_ms", "steps", "final", ...} as JSON')
    p.add_argument("--write", metavar="OUT", help="write the final program to OUT")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    _add_ranker_argument(p, "the order in which single steps are tried: ")
    p.set_defaults(handler=cmd_optimize)

    p = sub.add_parser("measure", help="build, check against the numpy reference and time; results are cached")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--target", choices=["llvm", "cuda"], default="llvm",
                   help="this CPU or this machine's GPU (with --rpc: what the remote devices are)")
    p.add_argument("--rpc", metavar="HOST:PORT:KEY", help="measure on the devices a TVM RPC tracker pools under KEY")
    p.add_argument("--repeat", type=int, metavar="N", help="timed runs, each of at least 10 ms (default 7)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="time limit of each phase of a job (default 60)")
    p.add_argument("--no-cache", action="store_true", help="measure even when the cache has the program")
    p.add_argument("--cache-dir", metavar="DIR", help="measurement cache (default $LEIR_CACHE_DIR, $XDG_CACHE_HOME/leir-lsp)")
    p.add_argument("--kernel", help="which kernel of a Python file with several")
    p.add_argument("--json", action="store_true", help='print {"median_ms", "min_ms", "max_ms", "runs", ...} (a list for several files)')
    p.set_defaults(handler=cmd_measure)

    p = sub.add_parser("bench-device", help="measure this CPU's peak FLOP/s and memory bandwidth, for rooflines")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (about a second; a lower estimate)")
    p.add_argument("--cache-dir", metavar="DIR", help="where the figures are kept (as for measure)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(handler=cmd_bench_device)

    from leir.tools.dataset.cli import add_parser as add_dataset_parser  # build|export|stats, in leir/tools/dataset

    add_dataset_parser(sub)

    # The model's own arguments are parsed by the installed model package
    # (entry point group leir.models), which leir does not import.
    p = sub.add_parser("model", help="the local language model: train, evaluate, tokens (docs/model.md)",
                       add_help=False)
    p.set_defaults(handler=cmd_model, args=[])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        given = sys.argv[1:] if argv is None else argv
        if given[:1] == ["model"]:  # its own options (--help too) are the model package's
            args = parser.parse_args(["model"])
            args.args = given[1:]
        else:
            args = parser.parse_args(argv)
        if args.version:
            print(f"leir {_version()}")
            return EXIT_OK
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return args.handler(args)
    except LeirError as e:
        print(f"leir: {e}" if not str(e).startswith("leir") else str(e), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug: say so in one line unless debugging
        if os.environ.get("LEIR_DEBUG"):
            raise
        print(f"leir: internal error: {type(e).__name__}: {e} (set LEIR_DEBUG=1 for a traceback)", file=sys.stderr)
        return 3


#: The entry-point group of the model commands (``leir_models`` registers ``lm``).
MODEL_COMMANDS = "leir.models"


def cmd_model(args) -> int:
    """``leir model ...``: handed to the ``main(argv)`` an installed model package registers."""
    from importlib import metadata

    found = sorted(metadata.entry_points(group=MODEL_COMMANDS), key=lambda ep: ep.name)
    if not found:
        raise LeirError("leir model: no model package is installed (pip install 'leir-lsp[lm]')")
    chosen = next((ep for ep in found if ep.name == "lm"), found[0])
    try:
        main_of = chosen.load()
    except ImportError as e:
        raise LeirError(f"leir model: {chosen.value} does not import ({e}); pip install 'leir-lsp[lm]'") from None
    return main_of(list(args.args))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leir-lsp")
    except PackageNotFoundError:
        return "0+unknown"


# ------------------------------------------------------------------- check


def cmd_check(args) -> int:
    from leir.bridge.document import CheckedFile, check_text, language_of, load_leir, read_text
    from leir.footprint import budget_diagnostics

    status = EXIT_OK
    for path in args.files:
        try:
            text = read_text(path)
        except LeirError as e:
            print(f"leir: {e}", file=sys.stderr)
            status = max(status, EXIT_USAGE)
            continue
        if language_of(path) == "leir":
            doc = load_leir(text)
            # With what leir would refuse to run (leir.footprint): a warning, not a finding.
            checked = CheckedFile(text, doc.source, doc.diagnostics + budget_diagnostics(doc.analysis))
        else:
            checked = check_text(text, "tvmscript")
        for d in checked.diagnostics:
            print(f"{path}:{checked.source.format_location(d.span)}: {d.severity}: {d.message} [{d.code}]")
            for r in d.related:
                print(f"{path}:{checked.source.format_location(r.span)}: note: {r.message}")
        if not checked.ok:
            status = max(status, EXIT_FINDINGS)
    return status


# --------------------------------------------------------------------- fmt


def cmd_fmt(args) -> int:
    from leir.bridge.document import language_of, load_leir, read_text
    from leir.format import canonical_text
    from leir.printer import print_program

    if language_of(args.file) != "leir":
        raise LeirError(f"{args.file}: fmt formats .leir files; Python files have their own formatters")
    text = read_text(args.file)
    doc = load_leir(text)
    syntax_errors = [d for d in doc.parsed.diagnostics if d.is_error]
    if syntax_errors:
        first = syntax_errors[0]
        more = f" (and {len(syntax_errors) - 1} more)" if len(syntax_errors) > 1 else ""
        raise LeirError(f"{args.file}:{doc.source.format_location(first.span)}: error: {first.message}{more}; not formatted")
    if args.compact:
        # Every access needs its superscript; a file that does not check is
        # laid out only (what to declare is unknown).
        out = print_program(doc.analysis.complete_program() if doc.analysis.ok else doc.program, "compact") + "\n"
    else:
        out = canonical_text(doc.parsed, doc.analysis)  # what the editor's formatting gives
    if args.write:
        if out != text:
            write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
    return EXIT_OK


# ----------------------------------------------------------------- convert


def cmd_convert(args) -> int:
    from leir.bridge.document import load_program
    from leir.printer import print_program

    analysis, name = load_program(args.file, args.kernel)
    if args.to == "leir":
        from leir.format import canonical_program

        sys.stdout.write(print_program(canonical_program(analysis, minimal=True)))
        return EXIT_OK
    from leir.bridge.lower import to_tvmscript

    sys.stdout.write(to_tvmscript(analysis, name).rstrip("\n") + "\n")
    return EXIT_OK


# --------------------------------------------------------------------- run


def cmd_run(args) -> int:
    import numpy as np

    from leir.bridge.document import load_program
    from leir.bridge.run import compare, random_inputs, run

    analysis, _ = load_program(args.file, args.kernel)
    if args.inputs is not None:
        inputs = _load_npz(args.inputs)
    else:
        inputs = random_inputs(analysis, args.random_inputs)
    result = run(analysis, inputs, target=args.target)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    status = EXIT_OK
    if not args.no_check:
        from leir.evaluate import evaluate

        expected = evaluate(analysis, inputs)
        for t in analysis.outputs():
            cmp = compare(result.outputs[t.name], expected[t.name], t.dtype)
            verdict = "matches" if cmp.ok else "DIFFERS FROM"
            print(f"{t.name}: {verdict} the numpy reference (max abs err {cmp.max_abs_err:.3g}, "
                  f"max rel err {cmp.max_rel_err:.3g}, mse {cmp.mse:.3g})", file=sys.stderr)
            if not cmp.ok:
                status = EXIT_FINDINGS
    if args.output:
        _save_npz(args.output, {t.name: result.outputs[t.name] for t in analysis.outputs()})
    else:
        for t in analysis.outputs():
            arr = np.asarray(result.outputs[t.name])
            print(f"{t.name}: {t.dtype}{list(arr.shape)} sum={float(arr.astype(np.float64).sum()):.6g}")
    return status


# ----------------------------------------------------- transformations


class _PythonFile:
    """A Python file with TVMScript kernels, as the transformation commands
    take it: its text; the kernel is chosen per command (``--kernel``)."""

    def __init__(self, path: str, text: str):
        from leir.diagnostics import SourceText

        self.path = path
        self.text = text
        self.source = SourceText(text)


def _transformable(path: str, kernel: str | None = None):
    """The LEIR document of a .leir file, or a ``_PythonFile``."""
    from leir.bridge.document import language_of, load_leir, read_text

    if language_of(path) != "leir":
        return _PythonFile(path, read_text(path))
    if kernel is not None:
        raise LeirError(f"{path}: --kernel chooses a kernel of a Python file; a .leir file is one program")
    text = read_text(path)
    doc = load_leir(text)
    for d in doc.diagnostics:
        if d.is_error:
            raise LeirError(f"{path}:{doc.source.format_location(d.span)}: error: {d.message}")
    return doc


def _position(doc, at: str) -> int:
    try:
        line_text, col_text = at.split(":")
        line, col = int(line_text), int(col_text)
    except ValueError:
        raise LeirError(f"--at {at}: expected LINE:COL, e.g. 12:5") from None
    if not (1 <= line <= doc.source.line_count) or col < 1:
        raise LeirError(f"--at {at}: the file has {doc.source.line_count} lines")
    return doc.source.offset(line - 1, col - 1)


def _in_file(path: str, e: LeirError) -> LeirError:
    """A kernel-choice error, prefixed with the file it is about."""
    return LeirError(f"{path}: {e}")


def cmd_actions(args) -> int:
    from leir import transforms

    doc = _transformable(args.file, args.kernel)
    at = _position(doc, args.at) if args.at else None
    if isinstance(doc, _PythonFile):
        from leir.transforms.python_kernels import KernelError, tvmscript_candidates

        try:
            found = tvmscript_candidates(doc.text, args.kernel, at)
        except KernelError as e:
            raise _in_file(args.file, e) from None
        _print_actions(doc, found, args.json)
        return EXIT_OK
    found = transforms.candidates(doc.analysis, at)
    _print_actions(doc, found, args.json)
    return EXIT_OK


def _add_ranker_argument(p, what: str = "") -> None:
    p.add_argument("--ranker", default="heuristic", metavar="NAME",
                   help=what + "heuristic (default), model: the installed language model, or smollm2: the "
                        "larger tier, SmolLM2 fine-tuned (docs/model.md); the heuristic when none loads")


def _load_ranker(name: str, command: str):
    """``load_ranker(name)``, saying on standard error why a model did not
    load (``load_ranker`` logs it and falls back to the heuristic)."""
    from leir.tools.ranking import load_ranker_telling

    return load_ranker_telling(name, lambda reason: print(f"leir {command}: {reason}", file=sys.stderr))


def cmd_suggest(args) -> int:
    import json

    from leir.tools.suggest import suggest

    doc = _transformable(args.file, args.kernel)
    at = _position(doc, args.at) if args.at else None
    ranker = _load_ranker(args.ranker, "suggest")
    if isinstance(doc, _PythonFile):
        found = suggest(doc.text, "tvmscript", at, kernel=args.kernel, target=args.target, ranker=ranker)
    else:
        found = suggest(doc.source.text, "leir", at, target=args.target, document=doc, ranker=ranker)
    found = found[:args.top] if args.top else found
    rows = [{"id": s.step.id, "args": s.step.args, "title": s.label, "score": round(s.score, 4),
             "source": ranker.name if s.score else "catalogue", "reasoning": "; ".join(s.facts),
             **({"generated_reasoning": {"text": s.reasoning, "status": s.reasoning_status}} if s.reasoning else {})}
            for s in found]
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    print(f"ranked by {ranker.name}")
    for r in rows:
        print(f"{r['score']:10.3f}  {r['title']}" + (f"  ({r['reasoning']})" if r["reasoning"] else ""))
        if "generated_reasoning" in r:
            said = r["generated_reasoning"]
            print(f"{'':10}  {ranker.name} ({said['status']}): {said['text']}")
    return EXIT_OK


def _print_actions(doc, found, as_json: bool) -> None:
    import json

    if as_json:
        print(json.dumps([c.to_json(doc.source) for c in found], indent=1))
    else:
        for c in found:
            where = doc.source.format_location(c.span) if c.span else "-"
            print(f"{where}\t{c.step.id}\t{c.title}")


def _read_step(text: str):
    import json

    from leir.transforms import step_from_json

    raw = sys.stdin.read() if text == "-" else text
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise LeirError(f"--step: not JSON ({e.msg} at character {e.pos})") from None
    return step_from_json(data), data


def _check_not_stale(doc, step, data, kernel: str | None = None) -> None:
    """A step that carries a range must still be offered at that range."""
    from leir import transforms
    from leir.transforms import StaleStep
    from leir.transforms.base import span_json

    if not isinstance(data, dict) or "range" not in data:
        return
    if isinstance(doc, _PythonFile):
        from leir.transforms.python_kernels import tvmscript_candidates

        offered = [c for c in tvmscript_candidates(doc.text, kernel) if c.step.id == step.id]
    else:
        offered = transforms.candidates(doc.analysis, None, only=(step.id,))
    for c in offered:
        if c.step == step and c.span is not None and span_json(doc.source, c.span) == data["range"]:
            return
    raise StaleStep(f"stale step: {step.id} {json_args(step)} is not offered at that range of the current file "
                    f"(it was computed on another version); list the actions again")


def json_args(step) -> str:
    import json

    return json.dumps(step.args, sort_keys=True)


def cmd_apply(args) -> int:
    from leir import transforms
    from leir.printer import print_program
    from leir.semantics import analyze

    doc = _transformable(args.file, args.kernel)
    step, data = _read_step(args.step)
    if isinstance(doc, _PythonFile):
        return _apply_tvmscript(doc, step, data, args)
    _check_not_stale(doc, step, data)
    program = transforms.apply(doc.analysis, step, Path(args.file).stem)
    out = print_program(program)
    if args.verify:
        result = transforms.verify(doc.analysis, analyze(program))
        print(f"verify: {'ok' if result.ok else 'FAILED'}: {result.summary()}", file=sys.stderr)
        if not result.ok:
            return EXIT_FINDINGS
    if args.write:
        write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
    return EXIT_OK


def _apply_tvmscript(doc: _PythonFile, step, data, args) -> int:
    """``leir apply`` on a Python file: the whole file with the kernel
    transformed (printed, or written with --write)."""
    from leir.transforms.python_kernels import KernelError, tvmscript_apply, tvmscript_verify

    try:
        _check_not_stale(doc, step, data, args.kernel)
        out = tvmscript_apply(doc.text, step, args.kernel)
        if args.verify:
            result = tvmscript_verify(doc.text, out, args.kernel)
            print(f"verify: {'ok' if result.ok else 'FAILED'}: {result.summary()}", file=sys.stderr)
            if not result.ok:
                return EXIT_FINDINGS
    except KernelError as e:
        raise _in_file(args.file, e) from None
    if args.write:
        write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
    return EXIT_OK


def cmd_replay(args) -> int:
    import json

    from leir import transforms
    from leir.bridge.document import read_text
    from leir.printer import print_program

    doc = _transformable(args.file, args.kernel)
    try:
        data = json.loads(read_text(args.trace))
    except json.JSONDecodeError as e:
        raise LeirError(f"{args.trace}: not JSON ({e.msg} at character {e.pos})") from None
    if isinstance(data, dict) and "steps" in data:
        data = data["steps"]
    if not isinstance(data, list):
        raise LeirError(f"{args.trace}: a trace is a JSON list of steps ({{\"id\", \"args\"}} objects)")
    steps = [transforms.step_from_json(s) for s in data]
    if isinstance(doc, _PythonFile):
        from leir.transforms.python_kernels import KernelError, tvmscript_replay

        try:
            out = tvmscript_replay(doc.text, steps, args.kernel)
        except KernelError as e:
            raise _in_file(args.file, e) from None
        if args.write:
            write_atomic(Path(args.file), out)
        else:
            sys.stdout.write(out)
        return EXIT_OK
    program = transforms.replay(doc.analysis, steps, Path(args.file).stem)
    out = print_program(program)
    if args.write:
        write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
    return EXIT_OK


def cmd_import_trace(args) -> int:
    import json

    from leir import transforms
    from leir.bridge.document import load_program
    from leir.tools.trace_import import import_database

    analysis, _ = load_program(args.file)
    found = import_database(analysis, args.database)
    if not found.records:
        raise LeirError(f"{args.database}: no record that ran for this program"
                        + (f" ({found.other_workloads} of other programs)" if found.other_workloads else ""))
    seconds, best = found.records[0]
    verified = transforms.verify(analysis, _reanalysed(best.program))
    summary = {"records": len(found.records), "complete": found.complete, "other_workloads": found.other_workloads,
               "lost": found.lost_kinds(), "best": {**best.to_json(), "metaschedule_ms": round(seconds * 1e3, 4),
                                                  "verified": verified.ok, "verification": verified.summary()}}
    if args.write:
        write_atomic(Path(args.write), json.dumps([s.to_json() for s in best.steps], indent=1) + "\n")
    if args.json:
        summary["all"] = [{"metaschedule_ms": round(s * 1e3, 4), **imp.to_json()} for s, imp in found.records]
        print(json.dumps(summary, indent=1))
        return EXIT_OK
    print(f"{found.complete} of {len(found.records)} records translate completely into catalogue steps"
          + (f" ({found.other_workloads} records of other programs skipped)" if found.other_workloads else ""))
    for kind, n in found.lost_kinds().items():
        print(f"  not translated: {kind} ({n} times)")
    print(f"best record ({seconds * 1e3:.4g} ms measured by MetaSchedule): {len(best.steps)} steps, "
          f"{'complete' if best.complete else 'stopped: ' + str(best.stopped)}; "
          f"{'verified' if verified.ok else 'NOT verified'} against the program ({verified.summary()})")
    for k, step in enumerate(best.steps, 1):
        print(f"{k}. {step.id} {json.dumps(step.args, sort_keys=True)}")
    for text in best.lost:
        print(f"   lost: {text}")
    return EXIT_OK


def _reanalysed(program):
    from leir.semantics import analyze

    return analyze(program)


def cmd_optimize(args) -> int:
    import json

    from leir.bridge.document import load_program
    from leir.tools.optimize import format_result, optimize
    from leir.printer import print_program

    analysis, _ = load_program(args.file, args.kernel)
    if args.write and not (Path(args.write).parent if str(Path(args.write).parent) else Path(".")).is_dir():
        # Said before the search, not after minutes of it.
        raise LeirError(f"{args.write}: no such directory {Path(args.write).parent}")
    progress = (lambda line: print(f"leir optimize: {line}", file=sys.stderr)) if not args.json else None
    from leir.tools.jobs import record_plan

    ranker = _load_ranker(args.ranker, "optimize")
    result = optimize(analysis, steps=args.steps, budget=args.budget, strategy=args.strategy, target=args.target,
                      seed=args.seed, beam_width=args.beam_width, iterations=args.iterations, progress=progress,
                      on_plan=record_plan, ranker=ranker)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(format_result(result))
    if args.write:
        try:
            write_atomic(Path(args.write), print_program(result.final))
        except OSError as e:
            raise LeirError(f"{args.write}: cannot write ({e.strerror})") from None
    return EXIT_OK


# ----------------------------------------------------------------- measure


def cmd_measure(args) -> int:
    import json

    from leir.bridge.document import load_program
    from leir.measure import RPC, MeasurementEngine
    from leir.measure.report import ProgressBar, format_measurement
    from leir.measure.timing import DEFAULT_REPEAT

    programs = [load_program(path, args.kernel)[0] for path in args.files]
    target = RPC.parse(args.rpc, args.target) if args.rpc else args.target
    workers = None if args.rpc else min(len(programs), 2)  # one TVM worker is enough for one file
    bar = ProgressBar(sys.stdout) if sys.stdout.isatty() and not args.json else None
    with MeasurementEngine(target, workers=workers, cache=args.cache_dir or True, timeout_s=args.timeout,
                           repeat=args.repeat if args.repeat is not None else DEFAULT_REPEAT) as engine:
        try:
            results = engine.measure_many(programs, labels=args.files, progress=bar, use_cache=not args.no_cache)
        finally:
            if bar is not None:
                bar.clear()
    if args.json:
        rows = [m.to_json() for m in results]
        if len(rows) > 1:
            rows = [{"file": path, **row} for path, row in zip(args.files, rows)]
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=1))
    else:
        print("\n\n".join(format_measurement(m, path) for path, m in zip(args.files, results)))
    return EXIT_OK if all(m.ok for m in results) else EXIT_FINDINGS


def cmd_bench_device(args) -> int:
    import json
    from dataclasses import asdict

    from leir.measure.device import measure_cpu_peaks, save_peaks
    from leir.measure.report import format_peaks

    peaks = measure_cpu_peaks(quick=args.quick)
    try:
        path = save_peaks(peaks, args.cache_dir)
    except OSError as e:
        raise LeirError(f"cannot save the device figures ({e.strerror}: {e.filename})") from None
    if args.json:
        print(json.dumps({**asdict(peaks), "path": str(path)}, indent=1))
    else:
        print(format_peaks(peaks, path))
    return EXIT_OK


def _load_npz(path: str) -> dict:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise LeirError(f"{path}: no such file") from None
    except (ValueError, OSError) as e:
        raise LeirError(f"{path}: not a readable .npz file ({e})") from None


def _save_npz(path: str, arrays: dict) -> None:
    import numpy as np

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".npz", dir=target.parent if str(target.parent) else ".")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, target)
    except OSError as e:
        os.unlink(tmp)
        raise LeirError(f"{path}: cannot write ({e.strerror})") from None


if __name__ == "__main__":
    sys.exit(main())

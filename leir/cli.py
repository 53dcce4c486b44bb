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
    p.set_defaults(handler=cmd_actions)

    p = sub.add_parser("apply", help="apply one step and print (or --write) the new program")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--step", required=True, metavar="JSON", help="one element of `leir actions --json`, or - for stdin")
    p.add_argument("--verify", action="store_true", help="run before and after on random inputs and compare")
    p.add_argument("--write", action="store_true", help="rewrite the file in place")
    p.set_defaults(handler=cmd_apply)

    p = sub.add_parser("replay", help="apply a trace of steps (a JSON list) and print the result")
    p.add_argument("file", metavar="FILE")
    p.add_argument("trace", metavar="TRACE.json")
    p.add_argument("--write", action="store_true", help="rewrite the file in place")
    p.set_defaults(handler=cmd_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leir-lsp")
    except PackageNotFoundError:
        return "0+unknown"


# ------------------------------------------------------------------- check


def cmd_check(args) -> int:
    from leir.document import check_text, language_of, read_text

    status = EXIT_OK
    for path in args.files:
        try:
            text = read_text(path)
        except LeirError as e:
            print(f"leir: {e}", file=sys.stderr)
            status = max(status, EXIT_USAGE)
            continue
        checked = check_text(text, language_of(path))
        for d in checked.diagnostics:
            print(f"{path}:{checked.source.format_location(d.span)}: {d.severity}: {d.message} [{d.code}]")
            for r in d.related:
                print(f"{path}:{checked.source.format_location(r.span)}: note: {r.message}")
        if not checked.ok:
            status = max(status, EXIT_FINDINGS)
    return status


# --------------------------------------------------------------------- fmt


def cmd_fmt(args) -> int:
    from leir.document import language_of, load_leir, read_text
    from leir.format import canonical_program
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
    if not doc.analysis.ok:
        program = doc.program  # layout only: what to declare is unknown
    elif args.compact:
        program = doc.analysis.complete_program()  # every access needs its superscript
    else:
        program = canonical_program(doc.analysis)
    out = print_program(program, "compact" if args.compact else "canonical")
    if args.compact:
        out += "\n"
    if args.write:
        if out != text:
            write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
    return EXIT_OK


def write_atomic(path: Path, text: str) -> None:
    """Replace a file's contents all at once: a crash leaves the old file."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        try:
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----------------------------------------------------------------- convert


def cmd_convert(args) -> int:
    from leir.document import load_program
    from leir.printer import print_program

    analysis, name = load_program(args.file, args.kernel)
    if args.to == "leir":
        from leir.format import canonical_program

        sys.stdout.write(print_program(canonical_program(analysis, minimal=True)))
        return EXIT_OK
    from leir.lower import to_tvmscript

    sys.stdout.write(to_tvmscript(analysis, name).rstrip("\n") + "\n")
    return EXIT_OK


# --------------------------------------------------------------------- run


def cmd_run(args) -> int:
    import numpy as np

    from leir.document import load_program
    from leir.run import compare, random_inputs, run

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


def _transformable(path: str):
    from leir.document import language_of, load_leir, read_text

    if language_of(path) != "leir":
        raise LeirError(f"{path}: transformations of Python/TVMScript files are not available from the CLI yet; "
                        f"convert the kernel with `leir convert {path} --to leir` first")
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


def cmd_actions(args) -> int:
    import json

    from leir import transforms

    doc = _transformable(args.file)
    at = _position(doc, args.at) if args.at else None
    found = transforms.candidates(doc.analysis, at)
    if args.json:
        print(json.dumps([c.to_json(doc.source) for c in found], indent=1))
    else:
        for c in found:
            where = doc.source.format_location(c.span) if c.span else "-"
            print(f"{where}\t{c.step.id}\t{c.title}")
    return EXIT_OK


def _read_step(text: str):
    import json

    from leir.transforms import step_from_json

    raw = sys.stdin.read() if text == "-" else text
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise LeirError(f"--step: not JSON ({e.msg} at character {e.pos})") from None
    return step_from_json(data), data


def _check_not_stale(doc, step, data) -> None:
    """A step that carries a range must still be offered at that range."""
    from leir import transforms
    from leir.transforms import StaleStep
    from leir.transforms.base import span_json

    if not isinstance(data, dict) or "range" not in data:
        return
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

    doc = _transformable(args.file)
    step, data = _read_step(args.step)
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


def cmd_replay(args) -> int:
    import json

    from leir import transforms
    from leir.document import read_text
    from leir.printer import print_program

    doc = _transformable(args.file)
    try:
        data = json.loads(read_text(args.trace))
    except json.JSONDecodeError as e:
        raise LeirError(f"{args.trace}: not JSON ({e.msg} at character {e.pos})") from None
    if isinstance(data, dict) and "steps" in data:
        data = data["steps"]
    if not isinstance(data, list):
        raise LeirError(f"{args.trace}: a trace is a JSON list of steps ({{\"id\", \"args\"}} objects)")
    steps = [transforms.step_from_json(s) for s in data]
    program = transforms.replay(doc.analysis, steps, Path(args.file).stem)
    out = print_program(program)
    if args.write:
        write_atomic(Path(args.file), out)
    else:
        sys.stdout.write(out)
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

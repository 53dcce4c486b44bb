"""A document the tool works on: a ``.leir`` file or a Python file with
TVMScript kernels. Loading never raises for a user's text; what is wrong
comes back as diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from leir.ast import Program
from leir.diagnostics import Diagnostic, SourceText
from leir.errors import LeirError
from leir.parser import ParseResult, parse
from leir.semantics import Analysis, analyze

#: Files larger than this are refused rather than parsed (a 10 MB file is
#: a mistake in an editor, not a kernel).
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024


def language_of(path: str | Path) -> str:
    """"tvmscript" for Python files, "leir" for everything else."""
    return "tvmscript" if str(path).endswith((".py", ".pyi")) else "leir"


def decode(data: bytes, path: str | Path = "<input>") -> str:
    """UTF-8 text of a file, or a LeirError that says where it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LeirError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def read_text(path: str | Path) -> str:
    p = Path(path)
    try:
        size = p.stat().st_size
        if p.is_dir():
            raise LeirError(f"{path}: is a directory")
        if size > MAX_DOCUMENT_BYTES:
            raise LeirError(f"{path}: {size} bytes is larger than the {MAX_DOCUMENT_BYTES} bytes leir reads")
        data = p.read_bytes()
    except FileNotFoundError:
        raise LeirError(f"{path}: no such file") from None
    except PermissionError:
        raise LeirError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise LeirError(f"{path}: is a directory") from None
    return decode(data, path)


@dataclass
class LeirDocument:
    text: str
    parsed: ParseResult
    analysis: Analysis

    @property
    def source(self) -> SourceText:
        return self.parsed.source

    @property
    def program(self) -> Program:
        return self.parsed.program

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return sorted(self.parsed.diagnostics + self.analysis.diagnostics, key=lambda d: (d.span.start, d.span.end))

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def load_leir(text: str) -> LeirDocument:
    parsed = parse(text)
    return LeirDocument(text, parsed, analyze(parsed.program))


@dataclass
class CheckedFile:
    """Diagnostics of any document, LEIR or TVMScript."""

    text: str
    source: SourceText
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def check_text(text: str, language: str) -> CheckedFile:
    if language == "leir":
        doc = load_leir(text)
        return CheckedFile(text, doc.source, doc.diagnostics)
    from leir.bridge import tvmscript

    doc = tvmscript.load_document(text)
    return CheckedFile(text, SourceText(text), list(doc.diagnostics))


def load_program(path: str | Path, kernel: str | None = None) -> tuple[Analysis, str]:
    """The analysed LEIR program of a file and its name; a TVMScript file's
    kernel is raised to LEIR. Raises LeirError with the first error when the
    file does not check clean."""
    text = read_text(path)
    name = Path(path).stem.replace("-", "_").replace(".", "_") or "main"
    if not name.isidentifier():
        name = "main"
    if language_of(path) == "leir":
        doc = load_leir(text)
        _raise_first_error(path, doc.source, doc.diagnostics)
        return doc.analysis, name
    from leir.bridge import raise_tir, tvmscript

    doc = tvmscript.load_document(text)
    _raise_first_error(path, SourceText(text), doc.diagnostics)
    funcs = []
    for k in doc.kernels:
        funcs.extend(_prim_funcs(k))
    if not funcs:
        raise LeirError(f"{path}: no @T.prim_func kernel found")
    if kernel is None:
        if len(funcs) > 1:
            names = ", ".join(n for n, _ in funcs)
            raise LeirError(f"{path}: several kernels ({names}); choose one with --kernel")
        kernel_name, func = funcs[0]
    else:
        matches = [f for n, f in funcs if n == kernel]
        if not matches:
            raise LeirError(f"{path}: no kernel named {kernel} (found {', '.join(n for n, _ in funcs)})")
        kernel_name, func = kernel, matches[0]
    program = raise_tir.raise_func(func)
    analysis = analyze(program)
    if not analysis.ok:
        first = next(d for d in analysis.diagnostics if d.is_error)
        raise LeirError(f"{path}: kernel {kernel_name} raised to LEIR that does not check: {first.message}")
    return analysis, kernel_name


def _prim_funcs(kernel) -> list[tuple[str, object]]:
    """(name, PrimFunc) pairs of a loaded kernel (a prim_func or a module)."""
    import tvm

    out = []
    if kernel.module is None:
        return out
    for gv, f in kernel.module.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc):
            out.append((gv.name_hint, f))
    return out


def _raise_first_error(path, source: SourceText, diagnostics: list[Diagnostic]) -> None:
    for d in diagnostics:
        if d.is_error:
            raise LeirError(f"{path}:{source.format_location(d.span)}: error: {d.message}")

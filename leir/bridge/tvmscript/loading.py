"""Parsing screened kernels with TVM, and mapping TVM's errors back to the file."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from leir.ast import Span
from leir.diagnostics import Diagnostic, error
from leir.bridge.tvmscript.discovery import KernelKind, KernelSource, decorator_kind, find_kernels
from leir.bridge.tvmscript.lines import PythonLines, char_column
from leir.bridge.tvmscript.isolated import ParseFailure, Serialized, parse_source
from leir.bridge.tvmscript.screen import BUILTIN_NAMES, constant_refusal, docstrings, screen_kernel

if TYPE_CHECKING:
    import tvm

#: Where TVM's DiagnosticError text says the error is: `` --> <str>:LINE:COL``
#: with LINE 1-based and COL the 1-based UTF-8 byte column.
_LOCATION = re.compile(r"\n --> <str>:(\d+):(\d+)\n")
#: A source line of the snippet under it (`` 12 |  text``) and a marker line
#: (``    |     ^^^^``).
_SNIPPET_SOURCE = re.compile(r" *(\d+) \|  ")
_SNIPPET_MARKER = re.compile(r" +\|  ([ ^]*)$")

_WELL_FORMED_PREFIX = "Program is not well-formed."


@dataclass(frozen=True, eq=False)
class ParsedKernel:
    """A kernel and what TVM made of it: ``func`` is the PrimFunc of a
    ``prim_func`` kernel; ``module`` the IRModule of an ``ir_module`` kernel,
    or for a ``prim_func`` kernel a module holding it under its name. Both
    are None when the kernel was refused or did not parse.

    ``parsed`` is what the parse worker sent back (TVM's JSON of the IR,
    ``Serialized``) or, in a worker, the IR itself; it is loaded on first
    use of ``func`` or ``module``, so that checking a file (``leir check``,
    the editor's diagnostics) never imports TVM in the caller."""

    source: KernelSource
    parsed: Any = None

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def kind(self) -> KernelKind:
        return self.source.kind

    @property
    def ok(self) -> bool:
        """Whether TVM parsed the kernel (without loading what it parsed)."""
        return self.parsed is not None

    @cached_property
    def _values(self) -> tuple[Any, Any]:
        value = self.parsed.load() if isinstance(self.parsed, Serialized) else self.parsed
        if value is None:
            return None, None
        import tvm

        if isinstance(value, tvm.IRModule):
            return None, value
        if isinstance(value, tvm.tirx.PrimFunc):
            return value, tvm.IRModule({self.source.name: value})
        return None, None

    @property
    def func(self) -> "tvm.tirx.PrimFunc | None":
        return self._values[0]

    @property
    def module(self) -> "tvm.IRModule | None":
        return self._values[1]


@dataclass(frozen=True)
class TVMScriptDocument:
    """A Python file's kernels and every diagnostic about them, in order."""

    text: str
    kernels: tuple[ParsedKernel, ...]
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)

    def kernel(self, name: str) -> ParsedKernel | None:
        return next((k for k in self.kernels if k.name == name), None)


def load_document(text: str) -> TVMScriptDocument:
    """Find, screen and parse every kernel of a Python file.

    Never raises for the file's content and never runs any of it: a kernel
    that fails the screen is not given to TVM."""
    sources, diagnostics = find_kernels(text)
    kernels = []
    for source in sources:
        value, kernel_diagnostics = parse_kernel(source)
        diagnostics.extend(kernel_diagnostics)
        kernels.append(ParsedKernel(source, value))
    diagnostics.sort(key=lambda d: (d.span.start, d.span.end))
    return TVMScriptDocument(text, tuple(kernels), tuple(diagnostics))


def parse_kernel(kernel: KernelSource) -> tuple[Any, list[Diagnostic]]:
    """The PrimFunc or IRModule TVM parses from one kernel, after the screen.

    Returns (None, diagnostics) when the screen refuses the kernel (TVM
    never sees it) or TVM reports an error, mapped to the original file.
    TVM parses in a worker process with a time limit and a memory cap
    (``leir.bridge.tvmscript.isolated``)."""
    refused = screen_kernel(kernel) or _unreadable_decorators(kernel)
    if refused:
        return None, refused
    try:
        source = _TVMSource.of(kernel)
    except _Unblankable as e:
        return None, [error(kernel.lines.node_span(e.node), "untrusted-code",
                            "leir cannot read this docstring's quotes, so it does not give the kernel to TVM.")]
    # Only values the screen accepts reach TVM, used by the kernel or not.
    constants = {name: value for name, value in kernel.scope.constants.items()
                 if name not in kernel.scope.aliases and name not in BUILTIN_NAMES and constant_refusal(value) is None}
    value = parse_source(source.text, dict(kernel.scope.aliases), constants)
    if not isinstance(value, ParseFailure):
        return value, []
    if value.kind == "syntax":
        return None, [_syntax_error(kernel, source, value)]
    if value.kind == "limit":
        return None, [error(kernel.name_span, "tvmscript-limit", value.message)]
    return None, [_tvm_error(kernel, source, value)]


@dataclass(frozen=True)
class _Insertion:
    """Text leir added to the source TVM parses: ``length`` characters at
    character column ``column`` of (1-based) ``line``."""

    line: int
    column: int
    length: int


@dataclass(frozen=True)
class _TVMSource:
    """The kernel's text as TVM parses it: dedented to column 0, with
    ``s_tir=True`` added to pre-0.27 ``tir`` decorators, and the map back.

    Line ``n`` of ``text`` is line ``first_line + n - 1`` of the file with
    ``removed[n - 1]`` characters of indentation taken off."""

    text: str
    first_line: int
    removed: tuple[int, ...]
    insertions: tuple[_Insertion, ...]
    lines: PythonLines

    @staticmethod
    def of(kernel: KernelSource) -> "_TVMSource":
        lines = kernel.lines
        blanked = PythonLines(blanked_docstrings(kernel))
        first = lines.lineno(kernel.span.start)
        last = lines.lineno(kernel.span.end)
        texts, removed = [], []
        for lineno in range(first, last + 1):
            text = blanked.line(lineno)
            if lineno == first:
                text = text[kernel.span.start - lines.start(lineno) :]
                cut = kernel.span.start - lines.start(lineno)
            else:
                stripped = text[: len(kernel.indent)]
                cut = len(stripped) - len(stripped.lstrip())
                text = text[cut:]
            if lineno == last:
                text = text[: kernel.span.end - lines.start(lineno) - cut]
            texts.append(text)
            removed.append(cut)

        insertions = []
        for node, addition in _legacy_decorator_additions(kernel):
            line = node.end_lineno - first + 1
            original = lines.line(node.end_lineno)
            column = char_column(original, node.end_col_offset) - removed[line - 1]
            if isinstance(node, ast.Call):
                column -= 1  # before the closing parenthesis
            line_text = texts[line - 1]
            texts[line - 1] = line_text[:column] + addition + line_text[column:]
            insertions.append(_Insertion(line, column, len(addition)))
        return _TVMSource("\n".join(texts) + "\n", first, tuple(removed), tuple(insertions), lines)

    def line(self, line: int) -> str:
        """Line ``line`` (1-based) of ``text``."""
        tvm_lines = self.text.split("\n")
        return tvm_lines[line - 1] if 1 <= line <= len(tvm_lines) else ""

    def offset(self, line: int, column: int, *, in_bytes: bool) -> int:
        """Offset in the file of a position in ``text`` (1-based line,
        0-based column in UTF-8 bytes or characters)."""
        line = min(max(line, 1), len(self.removed))
        if in_bytes:
            column = char_column(self.line(line), column)
        shift = 0
        for insertion in sorted((i for i in self.insertions if i.line == line), key=lambda i: i.column):
            at = insertion.column + shift
            if column < at:
                break
            if column < at + insertion.length:
                column = at
                break
            shift += insertion.length
        column -= shift
        original = self.first_line + line - 1
        return self.lines.offset(original, column + self.removed[line - 1], in_bytes=False)


def blanked_docstrings(kernel: KernelSource) -> str:
    """The file's text with the kernel's docstrings blanked: every character
    between a string's quotes becomes a space (line breaks, and a backslash
    that continues a line, stay), so that no position moves and TVM gets
    none of the docstrings' text, which the screen does not check."""
    text = kernel.lines.text
    pieces, at = [], 0
    for node in docstrings(kernel):
        span = kernel.lines.node_span(node)
        for start, end in _string_bodies(text[span.start : span.end], node):
            start, end = span.start + start, span.start + end
            pieces.append(text[at:start])
            body = text[start:end]
            pieces.append("".join(
                c if c in "\r\n" or (c == "\\" and body[i + 1 : i + 2] in ("\n", "\r")) else " "
                for i, c in enumerate(body)
            ))
            at = end
    pieces.append(text[at:])
    return "".join(pieces)


_STRING_OPENING = re.compile(r"[rRuUbB]*('\'\'|\"\"\"|'|\")")


def _string_bodies(segment: str, node: ast.AST) -> list[tuple[int, int]]:
    """(start, end) offsets in ``segment`` (one string expression) of what
    lies between the quotes of each of its string tokens."""
    lines = PythonLines(segment)
    bodies = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(segment).readline):
            if token.type != tokenize.STRING:
                continue
            opening = _STRING_OPENING.match(token.string)
            start = lines.offset(*token.start, in_bytes=False) + opening.end()
            end = lines.offset(*token.end, in_bytes=False) - len(opening.group(1))
            bodies.append((start, end))
    except (tokenize.TokenError, SyntaxError, AttributeError) as e:
        raise _Unblankable(node) from e  # not expected for a segment that ast parsed
    return bodies


class _Unblankable(Exception):
    """A docstring whose string tokens could not be found: the kernel is refused."""

    def __init__(self, node: ast.AST):
        super().__init__("unreadable docstring")
        self.node = node


def _legacy_decorator_additions(kernel: KernelSource) -> list[tuple[ast.expr, str]]:
    """Pre-0.27 ``tir`` kernels are s_tir kernels, but TVM 0.27 reads
    ``s_tir`` from the decorator's syntax; add ``s_tir=True`` where a ``tir``
    ``prim_func`` decorator does not say.

    Added at the end of the decorator so that no position before it moves."""
    functions = _functions_of(kernel)
    additions = []
    for function in functions:
        for decorator in function.decorator_list:
            if decorator_kind(decorator, kernel.scope) != "prim_func":
                continue
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            resolved = kernel.scope.resolve(target)
            if resolved is None or resolved.namespace != "tir":
                continue
            if not isinstance(decorator, ast.Call):
                additions.append((decorator, "(s_tir=True)"))
            elif not any(k.arg == "s_tir" for k in decorator.keywords):
                has_arguments = bool(decorator.args or decorator.keywords)
                segment = ast.get_source_segment(kernel.lines.text, decorator) or ""
                trailing_comma = segment[:-1].rstrip().endswith(",")
                additions.append((decorator, ", s_tir=True" if has_arguments and not trailing_comma else "s_tir=True"))
    return additions


def _unreadable_decorators(kernel: KernelSource) -> list[Diagnostic]:
    """TVM 0.27 reads ``prim_func(...)`` arguments from the syntax tree as
    ``decorator.func.attr`` and fails obscurely on a bare name
    (``from tvm.script.tirx import prim_func``); say so at the decorator."""
    functions = _functions_of(kernel)
    return [
        error(
            kernel.lines.node_span(decorator),
            "tvmscript-error",
            "TVM reads prim_func(...) arguments only when written with its namespace, as in @T.prim_func(...).",
        )
        for function in functions
        for decorator in function.decorator_list
        if isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Name)
        and decorator_kind(decorator, kernel.scope) == "prim_func"
    ]


def _functions_of(kernel: KernelSource) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The kernel's function, or the functions of its module class."""
    node = kernel.node
    if isinstance(node, ast.ClassDef):
        return [s for s in node.body if isinstance(s, ast.FunctionDef)]
    return [node]


def _syntax_error(kernel: KernelSource, source: _TVMSource, e: ParseFailure) -> Diagnostic:
    if e.lineno is None:
        span = kernel.name_span
    else:
        start = source.offset(e.lineno, (e.offset or 1) - 1, in_bytes=False)
        span = Span(start, start)
    return error(span, "python-syntax", e.message)


def _tvm_error(kernel: KernelSource, source: _TVMSource, e: ParseFailure) -> Diagnostic:
    """A diagnostic for what TVM raised: its DiagnosticError text gives a
    line, a column and a caret underline; anything else is placed on the
    kernel's name."""
    text = e.message
    locations = list(_LOCATION.finditer(text))
    if not locations:
        first_line = text.strip().splitlines()[0] if text.strip() else ""
        return error(kernel.name_span, "tvmscript-error", f"TVM: {e.type_name}: {first_line}".rstrip(": "))
    location = locations[-1]
    message = text[: location.start()].removeprefix("error: ").strip()
    if message.startswith(_WELL_FORMED_PREFIX):
        detail = message.partition("Traceback:")[2].strip()
        return error(kernel.name_span, "tvmscript-error", f"TVM: the kernel is not well-formed: {detail}".rstrip(": "))

    line, column = int(location.group(1)), int(location.group(2)) - 1
    start = source.offset(line, column, in_bytes=True)
    end = start
    marked = _last_marked(text[location.end() :])
    if marked is not None:
        end_line, end_column = marked
        marked_text = source.line(end_line)
        if not marked_text.isascii() and end_column >= len(marked_text):
            # TVM draws one caret per character but counts columns in bytes,
            # so on a line with non-ASCII text the underline may stop short.
            end_line, end_column = _node_end(source.text, line, column, end_line, end_column)
        end = max(start, source.offset(end_line, end_column, in_bytes=True))
    span = Span(start, end)
    if span.start == span.end == kernel.span.start:
        span = kernel.name_span  # the error is about the kernel as a whole
    return error(span, "tvmscript-error", message or f"TVM: {e.type_name}")


def _node_end(text: str, line: int, column: int, end_line: int, min_end_column: int) -> tuple[int, int]:
    """The end of the smallest syntax node of ``text`` that starts at
    (``line``, ``column``) and ends on ``end_line`` at or after
    ``min_end_column`` (byte columns); (``end_line``, ``min_end_column``)
    when there is none."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return end_line, min_end_column
    ends = [
        node.end_col_offset
        for node in ast.walk(tree)
        if getattr(node, "lineno", None) == line
        and node.col_offset == column
        and node.end_lineno == end_line
        and node.end_col_offset is not None
        and node.end_col_offset >= min_end_column
    ]
    return end_line, min(ends, default=min_end_column)


def _last_marked(snippet: str) -> tuple[int, int] | None:
    """(line, exclusive end byte column) of the last ``^`` in TVM's snippet.

    TVM draws a ``^`` under columns ``start..end-1`` (1-based, in the same
    UTF-8 byte columns as the location line), so the last one is at string
    index ``end - 1`` of the marker text."""
    line = None
    found = None
    for row in snippet.split("\n"):
        source = _SNIPPET_SOURCE.match(row)
        if source:
            line = int(source.group(1))
            continue
        marker = _SNIPPET_MARKER.match(row)
        if marker and line is not None and "^" in marker.group(1):
            found = (line, marker.group(1).rfind("^") + 1)
    return found

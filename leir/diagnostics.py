"""Diagnostics with exact ranges, and offset <-> line/column conversion."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal

from leir.ast import Span

Severity = Literal["error", "warning", "info", "hint"]


@dataclass(frozen=True)
class Related:
    """A second location that explains a diagnostic ("first declared here")."""

    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    span: Span
    severity: Severity
    message: str
    #: A stable kebab-case identifier of the check ("unknown-loop-kind").
    code: str
    related: tuple[Related, ...] = field(default=())

    @property
    def is_error(self) -> bool:
        return self.severity == "error"


def error(span: Span, code: str, message: str, *related: Related) -> Diagnostic:
    return Diagnostic(span, "error", message, code, tuple(related))


def warning(span: Span, code: str, message: str, *related: Related) -> Diagnostic:
    return Diagnostic(span, "warning", message, code, tuple(related))


class SourceText:
    """A document's text with a line index.

    Lines and columns are 0-based and count Unicode code points; ``utf16``
    variants count UTF-16 code units, as LSP positions do by default."""

    def __init__(self, text: str):
        self.text = text
        # Lines end at "\n", "\r\n" or a lone "\r", as LSP counts them.
        self._line_starts = [0]
        if "\r" not in text:
            start = text.find("\n")
            while start >= 0:
                self._line_starts.append(start + 1)
                start = text.find("\n", start + 1)
        else:
            for i, ch in enumerate(text):
                if ch == "\n" or (ch == "\r" and text[i + 1 : i + 2] != "\n"):
                    self._line_starts.append(i + 1)

    @property
    def line_count(self) -> int:
        return len(self._line_starts)

    def line_start(self, line: int) -> int:
        return self._line_starts[line]

    def _line_end(self, line: int) -> int:
        """Offset just past the line's last character (before its break)."""
        if line + 1 >= len(self._line_starts):
            return len(self.text)
        end = self._line_starts[line + 1] - 1
        if end > self._line_starts[line] and self.text[end] == "\n" and self.text[end - 1] == "\r":
            end -= 1
        return end

    def line_text(self, line: int) -> str:
        return self.text[self._line_starts[line]:self._line_end(line)]

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column) of a character offset, clamped into the text."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line, offset - self._line_starts[line]

    def offset(self, line: int, column: int) -> int:
        """Character offset of (line, column), clamped into the text."""
        if line < 0:
            return 0
        if line >= len(self._line_starts):
            return len(self.text)
        return min(self._line_starts[line] + max(0, column), self._line_end(line))

    def position_utf16(self, offset: int) -> tuple[int, int]:
        line, col = self.position(offset)
        start = self._line_starts[line]
        prefix = self.text[start : start + col]
        # "surrogatepass": a lone surrogate (which a JSON "\ud800" gives) is
        # one UTF-16 unit in the editor, as in this count.
        return line, len(prefix.encode("utf-16-le", "surrogatepass")) // 2

    def offset_utf16(self, line: int, character: int) -> int:
        if line < 0:
            return 0
        if line >= len(self._line_starts):
            return len(self.text)
        text = self.line_text(line)
        units = 0
        for i, ch in enumerate(text):
            if units >= character:
                return self._line_starts[line] + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return self._line_starts[line] + len(text)

    def format_location(self, span: Span) -> str:
        """``line:col`` (1-based) of the span's start, as compilers print it."""
        line, col = self.position(span.start)
        return f"{line + 1}:{col + 1}"

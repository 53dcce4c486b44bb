"""Positions in Python source: from what ``ast`` reports to character offsets.

``ast`` numbers lines from 1, splits them where Python's tokenizer does
(``\\r\\n``, ``\\r`` and ``\\n``) and counts columns in UTF-8 bytes; a
``Span`` counts characters from the start of the document. ``PythonLines``
converts between the two."""

from __future__ import annotations

import ast
import bisect
import re

from leir.ast import Span

_NEWLINE = re.compile(r"\r\n|\r|\n")


def char_column(line: str, byte_column: int) -> int:
    """The character column of a UTF-8 byte column in ``line``."""
    if line.isascii():
        return min(max(byte_column, 0), len(line))
    # "surrogatepass": an editor may send lone surrogates; they still count
    # as one character each.
    prefix = line.encode("utf-8", "surrogatepass")[: max(byte_column, 0)]
    return len(prefix.decode("utf-8", "ignore"))


class PythonLines:
    """A text's lines as Python numbers them."""

    def __init__(self, text: str):
        self.text = text
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
        self._ends = [m.start() for m in _NEWLINE.finditer(text)] + [len(text)]

    @property
    def count(self) -> int:
        return len(self._starts)

    def start(self, lineno: int) -> int:
        """Offset of the first character of 1-based line ``lineno`` (clamped)."""
        return self._starts[min(max(lineno, 1), len(self._starts)) - 1]

    def lineno(self, offset: int) -> int:
        """The 1-based line an offset lies on."""
        return bisect.bisect_right(self._starts, offset)

    def line(self, lineno: int) -> str:
        """The text of 1-based line ``lineno`` without its newline."""
        if not 1 <= lineno <= len(self._starts):
            return ""
        return self.text[self._starts[lineno - 1] : self._ends[lineno - 1]]

    def offset(self, lineno: int, column: int, *, in_bytes: bool = True) -> int:
        """Offset of a position given as 1-based line and 0-based column
        (UTF-8 bytes, as ``ast`` counts, unless ``in_bytes`` is false),
        clamped into the text."""
        if lineno < 1:
            return 0
        if lineno > len(self._starts):
            return len(self.text)
        line = self.line(lineno)
        col = char_column(line, column) if in_bytes else min(max(column, 0), len(line))
        return self._starts[lineno - 1] + col

    def node_span(self, node: ast.AST) -> Span:
        """The exact range of an ``ast`` node that has a position."""
        start = self.offset(node.lineno, node.col_offset)
        end_lineno = getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        end = self.offset(end_lineno, end_col) if end_col is not None else start
        return Span(start, max(start, end))

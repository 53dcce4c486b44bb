"""Tokens of LEIR text. Never raises: unknown characters become ``error``
tokens that the parser reports."""

from __future__ import annotations

import re
from typing import NamedTuple

from leir.ast import Span


class Token(NamedTuple):
    #: "ident", "number", "comment", "sup" (``^{``), "sub" (``_{``), "op",
    #: "error" or "eof".
    kind: str
    text: str
    start: int
    end: int
    #: For comments: whether code precedes it on its line (a trailing comment).
    trailing: bool = False
    #: Whether a newline lies between the previous token and this one.
    newline_before: bool = False

    @property
    def span(self) -> Span:
        return Span(self.start, self.end)


# One match per token, with the whitespace before it. Only ASCII letters and
# digits make names and numbers: anything else (a Unicode digit, a
# non-breaking space, a lone ``^``) is one ``error`` character.
_TOKEN = re.compile(
    r"""
    [ \t\r\f\v\n]*
    (?:
      (?P<comment>\#[^\n]*)
    | (?P<number>(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)
    | (?P<sub>_\{)
      # ``C_{i}``: the underscore before ``{`` opens a subscript, it is not
      # part of the name (``C__{i}`` is tensor ``C_`` with a subscript).
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*?(?=_\{)|[A-Za-z_][A-Za-z0-9_]*)
    | (?P<sup>\^\{)
    | (?P<op>\*\*|//|<=|>=|==|!=|[-+*/%<>=&|!()\[\]{},;:@])
    | (?P<error>[^ \t\r\f\v\n])
    )
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    append = tokens.append
    count = text.count
    line_has_code = False
    prev_end = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        start, end = m.span(kind)
        newline = prev_end == 0 or count("\n", prev_end, start) > 0
        if newline:
            line_has_code = False
        if kind == "comment":
            append(Token("comment", m.group(kind).rstrip(), start, end, line_has_code, newline))
        else:
            append(Token(kind, m.group(kind), start, end, False, newline))
            line_has_code = True
        prev_end = end
    n = len(text)
    append(Token("eof", "", n, n, False, prev_end == 0 or count("\n", prev_end, n) > 0))
    return tokens

"""Tokens of LEIR text. Never raises: unknown characters become ``error``
tokens that the parser reports.

Two kinds of token stand for a whole construct, because they are most of
any program and matching them in one regular expression step halves the
time to read a file: ``loop``, a well-formed loop header ``L^{64}_{i=0}``,
and ``access``, a tensor access with a valid superscript and/or a subscript
of plain names and integers (``C_{i,j}``, ``X^{f32,g}_{tx,0}``,
``S^{f32}``). Anything else, including the same constructs with spaces
inside, comes as single tokens, which the parser reads the same way.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from leir.ast import DTYPES, LOOP_KINDS, SCOPES, Span


class Token(NamedTuple):
    #: "ident", "number", "comment", "sup" (``^{``), "sub" (``_{``), "op",
    #: "loop", "access", "error" or "eof".
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


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
# Integers in composite tokens are short enough to convert without checks.
_INT = r"[0-9]{1,18}"
_KINDS = "|".join(LOOP_KINDS)
_DTYPES = "|".join(sorted(DTYPES, key=len, reverse=True))
_SCOPES = "|".join(SCOPES)
# ``inf`` is a number even inside a subscript: leave it to the parser.
_INDEX = rf"(?:(?!inf\b){_NAME}|{_INT})"
_SUP = rf"\^\{{(?:{_DTYPES})(?:,(?:{_SCOPES}))?\}}"
_SUB = rf"_\{{{_INDEX}(?:,{_INDEX})*\}}"

#: A whole loop header; groups: kind, extent, var, start.
LOOP_HEADER = re.compile(rf"({_KINDS})\^\{{({_INT})\}}_\{{({_NAME})(?:=({_INT}))?\}}")
#: A whole simple access; groups: name, dtype, scope, subscript body.
SIMPLE_ACCESS = re.compile(
    rf"([A-Za-z_][A-Za-z0-9_]*?)"
    rf"(?:\^\{{({_DTYPES})(?:,({_SCOPES}))?\}}(?:_\{{({_INDEX}(?:,{_INDEX})*)\}}|(?!_\{{))"
    rf"|_\{{({_INDEX}(?:,{_INDEX})*)\}})"
)

_COMPOSITE = rf"""
    | (?P<loop>(?:{_KINDS})\^\{{{_INT}\}}_\{{{_NAME}(?:={_INT})?\}})
    | (?P<access>[A-Za-z_][A-Za-z0-9_]*?(?:{_SUP}(?:{_SUB}|(?!_\{{))|{_SUB}))
"""


def _token_pattern(composite: bool) -> re.Pattern:
    """One match per token, with the whitespace before it. Only ASCII
    letters and digits make names and numbers: anything else (a Unicode
    digit, a non-breaking space, a lone ``^``) is one ``error`` character."""
    return re.compile(
        rf"""
        [ \t\r\f\v\n]*
        (?:
          (?P<comment>\#[^\n]*)
        | (?P<number>(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?)
        {_COMPOSITE if composite else ""}
        | (?P<sub>_\{{)
          # ``C_{{i}}``: the underscore before ``{{`` opens a subscript, it is not
          # part of the name (``C__{{i}}`` is tensor ``C_`` with a subscript).
        | (?P<ident>[A-Za-z_][A-Za-z0-9_]*?(?=_\{{)|[A-Za-z_][A-Za-z0-9_]*)
        | (?P<sup>\^\{{)
        | (?P<op>\*\*|//|<=|>=|==|!=|\+=|-=|\*=|[-+*/%<>=&|!()\[\]{{}},;:@])
        | (?P<error>[^ \t\r\f\v\n])
        )
        """,
        re.VERBOSE | re.DOTALL,
    )


_TOKEN = _token_pattern(composite=True)
_FINE_TOKEN = _token_pattern(composite=False)


def tokenize(text: str, composite: bool = True) -> list[Token]:
    """The tokens of ``text``, ending with ``eof``. With ``composite``
    False, loop headers and accesses come in their single pieces too (for
    tools that colour each piece, such as semantic highlighting)."""
    tokens: list[Token] = []
    append = tokens.append
    count = text.count
    new = tuple.__new__  # Token(...) without the keyword-argument handling
    line_has_code = False
    prev_end = 0
    for m in (_TOKEN if composite else _FINE_TOKEN).finditer(text):
        kind = m.lastgroup
        start, end = m.span(kind)
        newline = prev_end == 0 or count("\n", prev_end, start) > 0
        if newline:
            line_has_code = False
        if kind == "comment":
            append(new(Token, ("comment", m.group(kind).rstrip(), start, end, line_has_code, newline)))
        else:
            append(new(Token, (kind, m.group(kind), start, end, False, newline)))
            line_has_code = True
        prev_end = end
    n = len(text)
    append(Token("eof", "", n, n, False, prev_end == 0 or count("\n", prev_end, n) > 0))
    return tokens

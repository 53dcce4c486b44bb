"""Tokens of LEIR text. Never raises: unknown characters become ``error``
tokens that the parser reports."""

from __future__ import annotations

import re
from dataclasses import dataclass

from leir.ast import Span


@dataclass(frozen=True, slots=True)
class Token:
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


_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<sup>\^\{)
  | (?P<op>\*\*|//|<=|>=|==|!=|[-+*/%<>=&|!()\[\]{},;:@])
    """,
    re.VERBOSE,
)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    n = len(text)
    newline = True  # start of text counts as a fresh line
    line_has_code = False
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            # One unknown character (or a lone ``^``) is an error token.
            tokens.append(Token("error", text[pos], pos, pos + 1, newline_before=newline))
            newline = False
            line_has_code = True
            pos += 1
            continue
        kind = m.lastgroup
        end = m.end()
        if kind == "ws":
            pos = end
            continue
        if kind == "nl":
            newline = True
            line_has_code = False
            pos = end
            continue
        if kind == "ident":
            word = m.group()
            # ``C_{i}``: the underscore before ``{`` opens a subscript; it is
            # not part of the name.
            if word.endswith("_") and end < n and text[end] == "{":
                word = word.rstrip("_")
                if not word:
                    tokens.append(Token("sub", "_{", pos, end + 1, newline_before=newline))
                    newline = False
                    line_has_code = True
                    pos = end + 1
                    continue
                stripped = len(m.group()) - len(word)
                tokens.append(Token("ident", word, pos, pos + len(word), newline_before=newline))
                newline = False
                # Extra underscores beyond the one that opens the subscript
                # belong to nothing: report them.
                under = pos + len(word)
                for k in range(stripped - 1):
                    tokens.append(Token("error", "_", under + k, under + k + 1))
                tokens.append(Token("sub", "_{", end - 1, end + 1))
                line_has_code = True
                pos = end + 1
                continue
            tokens.append(Token("ident", word, pos, end, newline_before=newline))
        elif kind == "comment":
            tokens.append(
                Token("comment", m.group().rstrip(), pos, end, trailing=line_has_code, newline_before=newline)
            )
            pos = end
            continue  # a comment does not make the line "have code"
        else:
            tokens.append(Token(kind, m.group(), pos, end, newline_before=newline))
        newline = False
        line_has_code = True
        pos = end
    tokens.append(Token("eof", "", n, n, newline_before=newline))
    return tokens

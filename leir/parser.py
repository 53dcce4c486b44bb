"""LEIR text -> syntax tree, with exact spans and error recovery.

``parse`` never raises: any text yields a ``Program`` (possibly partial) and
every problem found, each at its range. Recovery, in order of preference:

- a stray character is reported and ignored (``Y = X $ + 1;``);
- a missing ``;`` before a new line, a ``]`` or the end of the file, and a
  ``(`` or ``{`` still open at the end of the statement, are reported and
  the statement is completed as if they were there;
- a ``[`` that is never closed is reported at the ``[``; the nest ends at
  the end of the file or, when the file has fewer ``]`` than ``[``, where a
  new line starts a loop or a declaration no deeper than the nest;
- any other error skips to the next ``;`` or ``]`` at the same bracket depth
  (or to a new line that starts a loop or a declaration) and carries on.

So several errors in one file are all reported.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from leir import ast as A
from leir.ast import Span
from leir.cancel import checkpoint
from leir.diagnostics import Diagnostic, SourceText, error
from leir.lexer import LOOP_HEADER, SIMPLE_ACCESS, Token, tokenize
from leir.limits import MAX_EXPONENT, MAX_EXPR_NODES, MAX_EXTENT, MAX_LOOP_DEPTH, MAX_RANK, MAX_STATEMENTS, power_text

RESERVED = frozenset({"in", "out", "tmp", "where", "inf"})

#: Deepest expression tree accepted. Deeper trees (a sum of hundreds of
#: terms in one equation) are refused so that every recursive pass over the
#: tree (printer, analysis, equality) stays far from Python's stack limit.
MAX_EXPR_DEPTH = 200
#: Deepest nesting of parentheses, calls, subscripts and unary operators,
#: and of ``[...]`` bodies: the parser recurses once per level.
MAX_NESTING = 100

_PREC = A.BINARY_PRECEDENCE
_EXTENT_TOO_LARGE = f"a loop extent must be at most {MAX_EXTENT} ({power_text(MAX_EXTENT)}, TVM's int32 loop variables)"
_START_TOO_LARGE = (f"the loop's last value (start + extent - 1) must be at most {MAX_EXTENT} "
                    f"({power_text(MAX_EXTENT)}, TVM's int32 loop variables)")
_RANK_TOO_LARGE = f"an access has at most {MAX_RANK} indices (a tensor at most {MAX_RANK} dimensions)"
_INDEX_TOO_LARGE = f"an integer in an index must be at most {MAX_EXTENT} ({power_text(MAX_EXTENT)}, TVM's int32 index type)"
_STATEMENT_END = frozenset({";", "]"})


@dataclass
class ParseResult:
    program: A.Program
    diagnostics: list[Diagnostic]
    source: SourceText

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def parse(text: str) -> ParseResult:
    """Parse LEIR text (Step-TP one-line form or our file form)."""
    parser = _Parser(text)
    program = parser.program()
    return ParseResult(program, parser.sorted_diagnostics(), SourceText(text))


def parse_expression(text: str, loop_vars: frozenset[str] = frozenset()) -> tuple[A.Expr | None, list[Diagnostic]]:
    """Parse one expression (used by tools that take an index or guard).
    Returns None as the expression when the text is not one."""
    parser = _Parser(text)
    parser.loop_vars = list(loop_vars)
    try:
        expr = parser.expr()
    except _Recover:
        return None, parser.sorted_diagnostics()
    if parser.peek.kind != "eof":
        parser.report(parser.peek.span, "unexpected-token", f"unexpected {parser.describe(parser.peek)} after the expression")
    return expr, parser.sorted_diagnostics()


def _size(expr: A.Expr) -> int:
    """Nodes of an expression tree, an access counting as one (iteratively)."""
    n, stack = 0, [expr]
    while stack:
        e = stack.pop()
        n += 1
        t = type(e)
        if t is A.Binary:
            stack += (e.lhs, e.rhs)
        elif t is A.Unary:
            stack.append(e.operand)
        elif t is A.Call:
            stack += e.args
    return n


class _Recover(Exception):
    """Raised inside a statement after its error was reported; the statement
    loop catches it and re-synchronises."""


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.diagnostics: list[Diagnostic] = []
        self._reported: set[tuple[int, int, str]] = set()
        self.loop_vars: list[str] = []
        self.nesting = 0
        self.equations = 0  # parsed so far (``MAX_STATEMENTS``)

        # Significant tokens (ending with eof) and comments, apart. Stray
        # characters are reported here, a run of adjacent ones as one
        # diagnostic, and dropped.
        self.toks: list[Token] = []
        self.comments: list[Token] = []
        bad: list[Token] = []
        newline_carry = False
        for tok in tokenize(text):
            if tok.kind == "error":
                if bad and bad[-1].end == tok.start:
                    bad[-1] = bad[-1]._replace(text=bad[-1].text + tok.text, end=tok.end)
                else:
                    bad.append(tok)
                newline_carry = newline_carry or tok.newline_before
                continue
            if newline_carry and not tok.newline_before:
                tok = tok._replace(newline_before=True)
            newline_carry = False
            (self.comments if tok.kind == "comment" else self.toks).append(tok)
        for tok in bad:
            plural = "s" if len(tok.text) > 1 else ""
            self.report(tok.span, "unexpected-character", f"unexpected character{plural} {tok.text!r}")
        self._comment_starts = [c.start for c in self.comments]
        self._comment_taken = [False] * len(self.comments)
        self._comment_next = 0  # comments before this one are all attached
        self.pos = 0
        self.last = -1  # index of the last consumed token
        # ``[`` left unclosed in the whole text: only then may a new line
        # close a nest (see _closed_by_layout).
        opens = sum(1 for t in self.toks if t.kind == "op" and t.text == "[")
        closes = sum(1 for t in self.toks if t.kind == "op" and t.text == "]")
        self.unclosed_budget = max(0, opens - closes)

    def sorted_diagnostics(self) -> list[Diagnostic]:
        return sorted(self.diagnostics, key=lambda d: (d.span.start, d.span.end))

    # ----------------------------------------------------------- token access

    @property
    def peek(self) -> Token:
        return self.toks[self.pos]

    def peek_at(self, k: int) -> Token:
        """The k-th significant token from here."""
        i = self.pos + k
        return self.toks[i] if i < len(self.toks) else self.toks[-1]

    @property
    def prev_end(self) -> int:
        """End offset of the last consumed token (0 before any)."""
        return self.toks[self.last].end if self.last >= 0 else 0

    def advance(self) -> Token:
        tok = self.toks[self.pos]
        if tok.kind != "eof":
            self.last = self.pos
            self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.toks[self.pos]
        return tok.text == text and tok.kind in ("op", "sup", "sub")

    def expect(self, text: str, what: str | None = None) -> Token:
        tok = self.peek
        if tok.text == text and tok.kind in ("op", "sup", "sub"):
            return self.advance()
        self.fail(tok.span, "expected-token", f"expected '{text}'{' ' + what if what else ''}, found {self.describe(tok)}")

    def close(self, opener: Token, closer: str, what: str) -> int:
        """Consume ``closer`` and return its end. An opener still open when
        the statement ends is reported at the opener and treated as closed,
        so that the statement still parses."""
        tok = self.peek
        if tok.text == closer and tok.kind == "op":
            return self.advance().end
        if tok.kind == "eof" or (tok.kind == "op" and tok.text in _STATEMENT_END):
            self.report(opener.span, "unbalanced-bracket", f"'{opener.text}'{' ' + what if what else ''} is never closed")
            return self.prev_end
        self.fail(tok.span, "expected-token",
                  f"expected '{closer}' to close '{opener.text}'{' ' + what if what else ''}, found {self.describe(tok)}")

    def describe(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "end of file"
        return f"'{tok.text}'"

    def column(self, tok: Token) -> int:
        return tok.start - (self.text.rfind("\n", 0, tok.start) + 1)

    def trailing_comment(self) -> str | None:
        """A comment on the same line right after the token just consumed."""
        if self.last < 0 or not self.comments:
            return None
        k = bisect.bisect_left(self._comment_starts, self.toks[self.last].end)
        if k >= len(self.comments) or self._comment_taken[k]:
            return None
        comment = self.comments[k]
        if not comment.trailing or comment.start > self.toks[self.last + 1].start:
            return None
        self._comment_taken[k] = True
        return comment.text

    def take_pending(self) -> tuple[str, ...]:
        """Comments before the next token not yet attached to a node."""
        limit = self.toks[self.pos].start
        taken = []
        k = self._comment_next
        comments = self.comments
        while k < len(comments) and comments[k].start < limit:
            if not self._comment_taken[k]:
                self._comment_taken[k] = True
                taken.append(comments[k].text)
            k += 1
        self._comment_next = k
        return tuple(taken)

    @staticmethod
    def int_value(tok: Token) -> int | None:
        """The value of an integer literal, or None for a float literal or
        one too long to convert (Python refuses more than 4,300 digits)."""
        text = tok.text
        if not text.isdigit() or len(text) > 4000:
            return None
        return int(text)

    # ---------------------------------------------------------------- errors

    def report(self, span: Span, code: str, message: str) -> None:
        # Recovery can come back to the same place: report it once.
        key = (span.start, span.end, code)
        if key in self._reported:
            return
        self._reported.add(key)
        self.diagnostics.append(error(span, code, message))

    def fail(self, span: Span, code: str, message: str):
        self.report(span, code, message)
        raise _Recover()

    def synchronize(self) -> None:
        """Skip to just after the next ``;`` at bracket depth 0, or stop
        before a ``]`` that closes an enclosing body, or before a new line
        that starts a loop or a declaration."""
        depth = 0
        start = self.pos
        while True:
            tok = self.peek
            if tok.kind == "eof":
                return
            if tok.kind in ("sup", "sub"):
                depth += 1
            elif tok.kind == "op":
                text = tok.text
                if text == "(" or text == "[" or text == "{":
                    depth += 1
                elif text == ")" or text == "}":
                    depth = max(0, depth - 1)
                elif text == "]":
                    if depth == 0:
                        if self.pos == start:
                            # A stray ']' at statement start: consume it (and
                            # a following ';') so that we make progress.
                            self.advance()
                            if self.at(";"):
                                self.advance()
                        return
                    depth -= 1
                elif text == ";" and depth == 0:
                    self.advance()
                    return
            if tok.newline_before and self.pos != start and self._starts_statement():
                return
            self.advance()

    def _starts_statement(self) -> bool:
        return self._at_decl() or self._at_loop()

    def _at_decl(self) -> bool:
        tok = self.peek
        return tok.kind == "ident" and tok.text in ("in", "out", "tmp") and self.peek_at(1).kind == "ident"

    def _at_loop(self) -> bool:
        tok = self.peek
        if tok.kind == "loop":
            return True
        return tok.kind == "ident" and self.peek_at(1).kind == "sup" and self.peek_at(2).kind == "number"

    def _closed_by_layout(self, nest_column: int) -> bool:
        """Whether the next token shows that a ``]`` is missing: the text has
        fewer ``]`` than ``[``, and a new line starts a declaration, or a
        loop no deeper than the nest being parsed."""
        tok = self.peek
        if not self.unclosed_budget or not tok.newline_before:
            return False
        if self._at_decl():
            return True
        return (self._at_loop() or self.at("[")) and self.column(tok) <= nest_column

    # ------------------------------------------------------------ statements

    def program(self) -> A.Program:
        decls: list[A.Decl] = []
        units: list[A.Nest] = []
        while True:
            tok = self.peek
            if tok.kind == "eof":
                break
            checkpoint()
            if self.equations > MAX_STATEMENTS:
                self.report(Span(tok.start, len(self.text)), "too-many-equations",
                            f"more than {MAX_STATEMENTS} equations in one program; the rest of the file is not checked")
                break
            start = self.pos
            try:
                if self._at_decl():
                    decls.append(self.decl())
                elif tok.kind == "op" and tok.text == "]":
                    self.fail(tok.span, "unbalanced-bracket", "']' without a matching '['")
                else:
                    unit = self.unit()
                    if unit is not None:
                        units.append(unit)
            except _Recover:
                self.synchronize()
            if self.pos == start:  # never loop without progress
                self.advance()
        end_comments = A.Comments(before=self.take_pending())
        return A.Program(tuple(decls), tuple(units), Span(0, len(self.text)), end_comments)

    def decl(self) -> A.Decl:
        before = self.take_pending()
        role_tok = self.advance()
        name_tok = self.advance()
        if name_tok.text in RESERVED:
            self.fail(name_tok.span, "reserved-name", f"'{name_tok.text}' is a reserved word and cannot name a tensor")
        self.expect(":", f"after the name of tensor {name_tok.text}")
        dtype_tok = self.peek
        if dtype_tok.kind != "ident":
            self.fail(dtype_tok.span, "expected-dtype", f"expected a dtype ({', '.join(A.DTYPES)}), found {self.describe(dtype_tok)}")
        self.advance()
        if dtype_tok.text not in A.DTYPES:
            self.report(dtype_tok.span, "unknown-dtype", f"unknown dtype '{dtype_tok.text}'; expected one of {', '.join(A.DTYPES)}")
        shape: list[int] = []
        end = dtype_tok.end
        # ``tmp S: f32`` followed by a body ``[ ... ];`` is a scalar and a
        # nest: a shape starts with an extent, a body never does.
        if self.at("[") and self.peek_at(1).kind == "number":
            self.advance()
            while True:
                dim = self.peek
                value = self.int_value(dim) if dim.kind == "number" else None
                if value is None:
                    self.fail(dim.span, "expected-extent", f"expected a positive integer extent, found {self.describe(dim)}")
                self.advance()
                if value <= 0:
                    self.report(dim.span, "bad-extent", "a tensor dimension must be at least 1")
                elif value > MAX_EXTENT:
                    self.report(dim.span, "extent-too-large",
                                f"a tensor dimension must be at most {MAX_EXTENT} ({power_text(MAX_EXTENT)}, TVM's int32 index type)")
                    value = 1
                if len(shape) == MAX_RANK:
                    self.fail(dim.span, "rank-too-large", f"a tensor has at most {MAX_RANK} dimensions")
                shape.append(value)
                if self.at(","):
                    self.advance()
                    continue
                end = self.expect("]", "to close the shape").end
                break
        scope = "g"
        if self.at("@"):
            self.advance()
            scope_tok = self.peek
            if scope_tok.kind != "ident":
                self.fail(scope_tok.span, "expected-scope", f"expected a scope (g, s or l), found {self.describe(scope_tok)}")
            self.advance()
            scope = {"global": "g", "shared": "s", "local": "l"}.get(scope_tok.text, scope_tok.text)
            if scope not in A.SCOPES:
                self.report(scope_tok.span, "unknown-scope", f"unknown scope '{scope_tok.text}'; expected g, s or l")
            end = scope_tok.end
        after = self.trailing_comment()
        return A.Decl(
            role_tok.text,
            name_tok.text,
            dtype_tok.text,
            tuple(shape),
            scope,
            Span(role_tok.start, end),
            name_tok.span,
            A.Comments(before, after),
        )

    def _skip_nest(self) -> None:
        """Skip the rest of a nest refused whole: its remaining loop
        headers, its bracketed body (up to the matching ``]``) and the ``;``
        after it."""
        while self._at_loop():
            if self.advance().kind == "loop":
                continue
            # K ^{ N } _{ v [= N] }: up to the second '}'
            closed = 0
            while closed < 2 and self.peek.kind != "eof":
                if self.advance().text == "}":
                    closed += 1
        if not self.at("["):
            return
        depth = 0
        while self.peek.kind != "eof":
            tok = self.advance()
            if tok.kind == "op" and tok.text == "[":
                depth += 1
            elif tok.kind == "op" and tok.text == "]":
                depth -= 1
                if depth == 0:
                    break
        if self.at(";"):
            self.advance()

    def unit(self) -> A.Nest | None:
        if self._at_loop() or self.at("["):
            return self.nest()
        # A bare top-level equation (Step-TP allows ``A=B;`` outside brackets).
        eq = self.equation()
        return A.Nest((), (eq,), eq.span, bracketed=False)

    def nest(self) -> A.Nest | None:
        """A loop nest; None when it was refused whole (too many loops),
        reported and skipped."""
        first = self.peek
        start = first.start
        nest_column = self.column(first)
        loops: list[A.Loop] = []
        open_comments = A.NO_COMMENTS
        self.nesting += 1
        outer_vars = len(self.loop_vars)
        try:
            if self.nesting > MAX_NESTING:
                self.fail(first.span, "too-deep", f"loop bodies nested more than {MAX_NESTING} deep")
            while self._at_loop():
                loop = self.loop()
                if len(self.loop_vars) >= MAX_LOOP_DEPTH:
                    self.report(loop.span or first.span, "too-many-loops",
                                f"more than {MAX_LOOP_DEPTH} loops enclose this body; the nest is not checked")
                    self._skip_nest()
                    return None
                loops.append(loop)
                self.loop_vars.append(loop.var)
            before = () if loops else self.take_pending()
            open_tok = self.peek
            if not self.at("["):
                what = "'[' or another loop after the loop header" if loops else "'['"
                self.fail(open_tok.span, "expected-token", f"expected {what}, found {self.describe(open_tok)}")
            self.advance()
            if loops:
                # The canonical layout prints ``[`` on the last loop's line,
                # which holds one trailing comment: when the loop header has
                # its own, a comment after ``[`` goes to the first body item.
                last = loops[-1]
                if last.comments.after is None:
                    after = self.trailing_comment()
                    if after is not None:
                        loops[-1] = replace(last, comments=A.Comments(last.comments.before, after))
            else:
                open_comments = A.Comments(before, self.trailing_comment())
            body: list[A.Item] = []
            attempted = False
            while True:
                tok = self.peek
                if tok.kind == "eof" or self._closed_by_layout(nest_column):
                    # Keep what was parsed: the body's own errors are
                    # reported, and the analysis still sees its equations.
                    self.report(open_tok.span, "unbalanced-bracket", "'[' is never closed")
                    if tok.kind != "eof":
                        self.unclosed_budget -= 1
                    return A.Nest(tuple(loops), tuple(body), Span(start, max(self.prev_end, open_tok.end)),
                                  open_comments=open_comments)
                if tok.kind == "op" and tok.text == "]":
                    break
                attempted = True
                item_start = self.pos
                try:
                    if self._at_loop() or self.at("["):
                        inner = self.nest()
                        if inner is not None:
                            body.append(inner)
                    else:
                        body.append(self.equation())
                except _Recover:
                    self.synchronize()
                if self.pos == item_start:
                    self.advance()
            end_before = self.take_pending()
            close_tok = self.advance()  # ]
            end = close_tok.end
            if self.at(";"):
                end = self.advance().end
            else:
                self.report(Span(end, end), "expected-token", f"expected ';' after ']', found {self.describe(self.peek)}")
            end_after = self.trailing_comment()
            if not body and not attempted:
                self.report(Span(start, end), "empty-body", "a loop body needs at least one equation")
            return A.Nest(
                tuple(loops),
                tuple(body),
                Span(start, end),
                A.Comments(end_before, end_after),
                open_comments,
            )
        finally:
            self.nesting -= 1
            del self.loop_vars[outer_vars:]

    def loop(self) -> A.Loop:
        before = self.take_pending()
        if self.peek.kind == "loop":
            return self._loop_header(self.advance(), before)
        kind_tok = self.advance()
        if kind_tok.text not in A.LOOP_KINDS:
            self.report(
                kind_tok.span,
                "unknown-loop-kind",
                f"unknown loop kind '{kind_tok.text}'; expected L (serial), P (parallel), V (vectorized), U (unrolled) or B (thread-bound)",
            )
        self.advance()  # ^{ (_at_loop checked it)
        extent_tok = self.advance()  # a number (_at_loop checked it)
        extent = self.int_value(extent_tok)
        if extent is None:
            self.report(extent_tok.span, "bad-extent", f"a loop extent must be a positive integer, not {extent_tok.text}")
            extent = 1
        elif extent <= 0:
            self.report(extent_tok.span, "bad-extent", "a loop extent must be at least 1")
        elif extent > MAX_EXTENT:
            self.report(extent_tok.span, "extent-too-large", _EXTENT_TOO_LARGE)
            extent = 1
        self.expect("}", "after the loop extent")
        self.expect("_{", "(the loop variable, as in _{i})")
        var_tok = self.peek
        if var_tok.kind != "ident":
            self.fail(var_tok.span, "expected-loop-var", f"expected a loop variable name, found {self.describe(var_tok)}")
        self.advance()
        if var_tok.text in RESERVED:
            self.report(var_tok.span, "reserved-name", f"'{var_tok.text}' is a reserved word and cannot name a loop variable")
        start = 0
        if self.at("="):  # ``_{i=0}`` (Step-TP) or ``_{i}`` (start 0)
            self.advance()
            start_tok = self.peek
            start = self.int_value(start_tok) if start_tok.kind == "number" else None
            if start is None:
                self.fail(start_tok.span, "expected-loop-start", f"expected the loop's integer start (usually 0), found {self.describe(start_tok)}")
            self.advance()
            if start + extent - 1 > MAX_EXTENT:
                self.report(start_tok.span, "extent-too-large", _START_TOO_LARGE)
                start = 0
        end_tok = self.expect("}", "after the loop variable")
        after = self.trailing_comment()
        return A.Loop(
            kind_tok.text,
            extent,
            var_tok.text,
            start,
            Span(kind_tok.start, end_tok.end),
            kind_tok.span,
            extent_tok.span,
            var_tok.span,
            A.Comments(before, after),
        )

    def _loop_header(self, tok: Token, before: tuple[str, ...]) -> A.Loop:
        """A loop from one ``loop`` token (the lexer matched the header)."""
        m = LOOP_HEADER.fullmatch(tok.text)
        base = tok.start
        kind_span, extent_span, var_span = (Span(base + m.start(g), base + m.end(g)) for g in (1, 2, 3))
        extent = int(m.group(2))
        if extent <= 0:
            self.report(extent_span, "bad-extent", "a loop extent must be at least 1")
        elif extent > MAX_EXTENT:
            self.report(extent_span, "extent-too-large", _EXTENT_TOO_LARGE)
            extent = 1
        var = m.group(3)
        if var in RESERVED:
            self.report(var_span, "reserved-name", f"'{var}' is a reserved word and cannot name a loop variable")
        after = self.trailing_comment()
        start = int(m.group(4)) if m.group(4) is not None else 0
        if start + extent - 1 > MAX_EXTENT:
            self.report(Span(base + m.start(4), base + m.end(4)), "extent-too-large", _START_TOO_LARGE)
            start = 0
        return A.Loop(m.group(1), extent, var, start, tok.span, kind_span, extent_span, var_span,
                      A.Comments(before, after))

    def _simple_access(self, tok: Token) -> tuple[A.Access, int]:
        """An access from one ``access`` token (the lexer matched it)."""
        m = SIMPLE_ACCESS.fullmatch(tok.text)
        base = tok.start
        name = m.group(1)
        name_span = Span(base, base + len(name))
        if name in RESERVED:
            self.fail(name_span, "reserved-name", f"'{name}' is a reserved word and cannot name a tensor")
        group = 4 if m.group(4) is not None else 5
        body = m.group(group)
        if body is None:
            return A.Access(name, None, m.group(2), m.group(3), tok.span, name_span), 1
        indices = []
        offset = base + m.start(group)
        for item in body.split(","):
            span = Span(offset, offset + len(item))
            if len(indices) == MAX_RANK:
                self.fail(span, "rank-too-large", _RANK_TOO_LARGE)
            if item[0].isdigit():
                value = int(item)
                if value > MAX_EXTENT:
                    self.report(span, "index-too-large", _INDEX_TOO_LARGE)
                    value = 0
                indices.append(A.Num(value, item, span))
            else:
                indices.append(A.Var(item, span))
            offset += len(item) + 1
        return A.Access(name, tuple(indices), m.group(2), m.group(3), tok.span, name_span), 2

    def equation(self) -> A.Equation:
        before = self.take_pending()
        tok = self.peek
        if tok.kind != "ident" and tok.kind != "access":
            self.fail(tok.span, "expected-equation", f"expected a declaration, a loop or an equation, found {self.describe(tok)}")
        if tok.kind == "ident" and tok.text in self.loop_vars and self.peek_at(1).kind not in ("sup", "sub"):
            self.fail(tok.span, "assign-to-loop-var", f"cannot assign to loop variable '{tok.text}'")
        lhs = self.access()
        assign = self.peek
        if not (assign.kind == "op" and assign.text in ("=", "+=", "-=", "*=")):
            self.fail(assign.span, "expected-token", f"expected '=' after {lhs.tensor}, found {self.describe(assign)}")
        self.advance()
        rhs = self.expr()
        if assign.text != "=":
            # ``C += e`` is ``C = C + e``: one tree, so that everything
            # downstream sees a single form of a reduction.
            rhs = A.Binary(assign.text[0], lhs, rhs, lhs.span.cover(rhs.span))
        predicate = None
        if self.peek.kind == "ident" and self.peek.text == "where":
            self.advance()
            predicate = self.expr()
        end_tok = self.peek
        if self.at(";"):
            end = self.advance().end
        elif end_tok.kind == "eof" or end_tok.newline_before or (end_tok.kind == "op" and end_tok.text == "]"):
            # The equation is complete; only its ';' is missing.
            end = self.prev_end
            self.report(Span(end, end), "expected-token", f"expected ';' after the equation, found {self.describe(end_tok)}")
        else:
            self.fail(end_tok.span, "expected-token", f"expected ';' to end the equation, found {self.describe(end_tok)}")
        after = self.trailing_comment()
        self.equations += 1
        nodes = _size(rhs) + (_size(predicate) if predicate is not None else 0)
        if nodes > MAX_EXPR_NODES:
            # Kept in the tree (the checks are linear in it) but an error:
            # the steps' subexpression searches are quadratic or worse.
            self.report(rhs.span or Span(lhs.span.start, end), "expression-too-large",
                        f"this equation has {nodes} operations and operands, more than the {MAX_EXPR_NODES} "
                        f"leir analyses in one equation; split it into several equations")
        return A.Equation(lhs, rhs, predicate, Span(lhs.span.start, end), A.Comments(before, after))

    # ------------------------------------------------------------ expressions
    #
    # The _-prefixed methods return (node, depth of its tree).

    def access(self) -> A.Access:
        return self._access()[0]

    def expr(self, index: bool = False) -> A.Expr:
        return self._expr(index, 0)[0]

    def _access(self) -> tuple[A.Access, int]:
        name_tok = self.advance()
        if name_tok.kind == "access":
            return self._simple_access(name_tok)
        if name_tok.text in RESERVED:
            self.fail(name_tok.span, "reserved-name", f"'{name_tok.text}' is a reserved word and cannot name a tensor")
        end = name_tok.end
        dtype = scope = None
        depth = 1
        if self.peek.kind == "sup":
            sup = self.advance()
            dtype_tok = self.peek
            if dtype_tok.kind != "ident":
                self.fail(dtype_tok.span, "expected-dtype", f"expected a dtype in {name_tok.text}'s superscript, found {self.describe(dtype_tok)}")
            self.advance()
            if dtype_tok.text not in A.DTYPES:
                self.report(dtype_tok.span, "unknown-dtype", f"unknown dtype '{dtype_tok.text}'; expected one of {', '.join(A.DTYPES)}")
            dtype = dtype_tok.text
            if self.at(","):
                self.advance()
                scope_tok = self.peek
                if scope_tok.kind != "ident":
                    self.fail(scope_tok.span, "expected-scope", f"expected a scope (g, s or l), found {self.describe(scope_tok)}")
                self.advance()
                if scope_tok.text not in A.SCOPES:
                    self.report(scope_tok.span, "unknown-scope", f"unknown scope '{scope_tok.text}'; expected g, s or l")
                scope = scope_tok.text
            end = self.close(sup, "}", f"of {name_tok.text}'s superscript")
        indices = None
        if self.peek.kind == "sub":
            sub = self.advance()
            self.nesting += 1
            try:
                if self.nesting > MAX_NESTING:
                    self.fail(sub.span, "too-deep", f"expression nested more than {MAX_NESTING} deep")
                item, item_depth = self._expr(True, 0)
                items = [item]
                while self.at(","):
                    self.advance()
                    item, d = self._expr(True, 0)
                    if len(items) == MAX_RANK:
                        self.fail(item.span or sub.span, "rank-too-large", _RANK_TOO_LARGE)
                    items.append(item)
                    item_depth = max(item_depth, d)
            finally:
                self.nesting -= 1
            depth = item_depth + 1
            end = self.close(sub, "}", f"of {name_tok.text}'s subscript")
            indices = tuple(items)
        return A.Access(name_tok.text, indices, dtype, scope, Span(name_tok.start, end), name_tok.span), depth

    def _expr(self, index: bool, min_prec: int) -> tuple[A.Expr, int]:
        self.nesting += 1
        try:
            if self.nesting > MAX_NESTING:
                self.fail(self.peek.span, "too-deep", f"expression nested more than {MAX_NESTING} deep")
            lhs, depth = self._unary(index)
            while True:
                tok = self.peek
                if tok.kind != "op":
                    return lhs, depth
                prec = _PREC.get(tok.text)
                if prec is None or prec < min_prec:
                    return lhs, depth
                self.advance()
                # ``**`` is right associative: its right operand may hold
                # another ``**``; every other operator is left associative.
                rhs, rhs_depth = self._expr(index, prec if tok.text == "**" else prec + 1)
                depth = max(depth, rhs_depth) + 1
                if depth > MAX_EXPR_DEPTH:
                    self.fail(tok.span, "too-deep", f"expression more than {MAX_EXPR_DEPTH} operations deep; split the equation")
                if tok.text == "**":
                    self._check_exponent(rhs)
                lhs = A.Binary(tok.text, lhs, rhs, Span(lhs.span.start, rhs.span.end))
        finally:
            self.nesting -= 1

    def _check_exponent(self, e: A.Expr) -> None:
        """An integer exponent past ``MAX_EXPONENT`` is an error: the
        algebraic steps expand powers exactly (SymPy), and 0.7071**67811865476
        held a listing for ever."""
        if isinstance(e, A.Unary) and e.op == "-":
            e = e.operand
        if isinstance(e, A.Num) and isinstance(e.value, int) and e.value > MAX_EXPONENT:
            self.report(e.span, "exponent-too-large",
                        f"an integer exponent must be at most {MAX_EXPONENT}; write a float exponent "
                        f"({e.value}.0) if this is meant")

    def _unary(self, index: bool) -> tuple[A.Expr, int]:
        tok = self.peek
        if tok.kind == "op" and (tok.text == "-" or tok.text == "!"):
            self.advance()
            operand, depth = self._expr(index, A.UNARY_PRECEDENCE)
            return A.Unary(tok.text, operand, Span(tok.start, operand.span.end)), depth + 1
        return self._primary(index)

    def _primary(self, index: bool) -> tuple[A.Expr, int]:
        tok = self.peek
        kind = tok.kind
        if kind == "number":
            self.advance()
            value = self.int_value(tok)
            if value is None:
                if tok.text.isdigit():
                    self.report(tok.span, "bad-number", "integer literal too long")
                    value = 0
                else:
                    value = float(tok.text)
            if index and isinstance(value, int) and value > MAX_EXTENT:
                self.report(tok.span, "index-too-large", _INDEX_TOO_LARGE)
                value = 0
            return A.Num(value, tok.text, tok.span), 1
        if kind == "op" and tok.text == "(":
            self.advance()
            inner, depth = self._expr(index, 0)
            end = self.close(tok, ")", "")
            # Spans of parenthesised expressions cover the parentheses.
            return replace(inner, span=Span(tok.start, end)), depth
        if kind == "access":
            if index:
                self.fail(tok.span, "tensor-in-index", f"an index may only use loop variables and integers, not tensor {tok.text}")
            return self._access()
        if kind == "ident":
            nxt = self.peek_at(1)
            if nxt.kind == "op" and nxt.text == "(":
                return self._call()
            if tok.text == "inf" and nxt.kind not in ("sup", "sub"):
                self.advance()
                return A.Num(float("inf"), "inf", tok.span), 1
            if nxt.kind in ("sup", "sub"):
                if index:
                    self.fail(tok.span, "tensor-in-index", f"an index may only use loop variables and integers, not tensor {tok.text}")
                return self._access()
            if index or tok.text in self.loop_vars:
                self.advance()
                return A.Var(tok.text, tok.span), 1
            if tok.text in RESERVED:
                self.fail(tok.span, "reserved-name", f"'{tok.text}' is a reserved word here")
            self.advance()
            return A.Access(tok.text, None, None, None, tok.span, tok.span), 1
        self.fail(tok.span, "expected-expression", f"expected an expression, found {self.describe(tok)}")

    def _call(self) -> tuple[A.Call, int]:
        name_tok = self.advance()
        open_tok = self.advance()  # (
        args: list[A.Expr] = []
        depth = 0
        if not self.at(")"):
            arg, depth = self._expr(False, 0)
            args.append(arg)
            while self.at(","):
                self.advance()
                arg, d = self._expr(False, 0)
                args.append(arg)
                depth = max(depth, d)
        end = self.close(open_tok, ")", f"of the call of {name_tok.text}")
        span = Span(name_tok.start, end)
        func = name_tok.text
        if func == "pow" and len(args) == 2:
            self._check_exponent(args[1])
        if func in A.FUNCTIONS:
            arity = A.FUNCTIONS[func]
            if len(args) != arity:
                self.report(span, "wrong-arity", f"{func} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}")
        elif func in A.DTYPES:
            if len(args) != 1:
                self.report(span, "wrong-arity", f"the cast {func}(x) takes 1 argument, got {len(args)}")
        else:
            self.report(name_tok.span, "unknown-function", f"unknown function '{func}'; expected one of {', '.join(A.FUNCTIONS)} or a dtype cast")
        return A.Call(func, tuple(args), span, name_tok.span), depth + 1

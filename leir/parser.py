"""LEIR text -> syntax tree, with exact spans and error recovery.

``parse`` never raises: any text yields a ``Program`` (possibly partial) and
every problem found, each at its range. After an error the parser skips to
the next ``;`` or ``]`` at the same bracket depth and carries on, so several
errors in one file are all reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leir import ast as A
from leir.ast import Span
from leir.diagnostics import Diagnostic, SourceText, error
from leir.lexer import Token, tokenize

RESERVED = frozenset({"in", "out", "tmp", "where", "inf"})


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
    return ParseResult(program, parser.diagnostics, SourceText(text))


def parse_expression(text: str, loop_vars: frozenset[str] = frozenset()) -> tuple[A.Expr | None, list[Diagnostic]]:
    """Parse one expression (used by tools that take an index or guard)."""
    parser = _Parser(text)
    parser.loop_vars = list(loop_vars)
    expr = parser.expr()
    if parser.peek.kind != "eof":
        parser.report(parser.peek.span, "unexpected-token", f"unexpected {parser.describe(parser.peek)} after the expression")
    return expr, parser.diagnostics


class _Recover(Exception):
    """Raised inside a statement after its error was reported; the statement
    loop catches it and re-synchronises."""


@dataclass
class _Pending:
    comments: list[str] = field(default_factory=list)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = [t for t in tokenize(text)]
        self.pos = 0
        self.diagnostics: list[Diagnostic] = []
        self.loop_vars: list[str] = []
        # Comments not yet attached, with their token index.
        self.pending: list[tuple[int, str]] = []
        self.last = -1  # index of the last consumed token
        self._errors_at: set[int] = set()

    # ----------------------------------------------------------- token access

    @property
    def peek(self) -> Token:
        self._absorb_comments()
        return self.tokens[self.pos]

    def peek_at(self, k: int) -> Token:
        """The k-th significant token from here (comments skipped)."""
        self._absorb_comments()
        i = self.pos
        seen = 0
        while True:
            tok = self.tokens[i]
            if tok.kind != "comment":
                if seen == k or tok.kind == "eof":
                    return tok
                seen += 1
            i += 1

    def _absorb_comments(self) -> None:
        while self.tokens[self.pos].kind == "comment":
            self.pending.append((self.pos, self.tokens[self.pos].text))
            self.pos += 1

    def advance(self) -> Token:
        tok = self.peek
        if tok.kind != "eof":
            self.last = self.pos
            self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek
        return tok.kind in ("op", "sup", "sub") and tok.text == text

    def expect(self, text: str, what: str | None = None) -> Token:
        tok = self.peek
        if tok.kind in ("op", "sup", "sub") and tok.text == text:
            return self.advance()
        self.fail(tok.span, "expected-token", f"expected '{text}'{' ' + what if what else ''}, found {self.describe(tok)}")

    def describe(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "end of file"
        if tok.kind == "error":
            return f"unexpected character {tok.text!r}"
        return f"'{tok.text}'"

    def trailing_comment(self) -> str | None:
        """A comment on the same line right after the token just consumed."""
        k = self.last + 1
        tok = self.tokens[k] if k < len(self.tokens) else None
        if tok is None or tok.kind != "comment" or not tok.trailing:
            return None
        if self.pos == k:
            self.pos += 1
        else:  # already absorbed by a look-ahead
            self.pending = [(i, c) for i, c in self.pending if i != k]
        return tok.text

    def take_pending(self) -> tuple[str, ...]:
        self._absorb_comments()
        taken = tuple(c for _, c in self.pending)
        self.pending = []
        return taken

    # ---------------------------------------------------------------- errors

    def report(self, span: Span, code: str, message: str) -> None:
        # One error per position: recovery can otherwise repeat itself.
        if span.start in self._errors_at:
            return
        self._errors_at.add(span.start)
        self.diagnostics.append(error(span, code, message))

    def fail(self, span: Span, code: str, message: str):
        self.report(span, code, message)
        raise _Recover()

    def synchronize(self, depth_stop: bool = True) -> None:
        """Skip to just after the next ``;`` at bracket depth 0, or stop
        before a ``]`` that closes an enclosing body."""
        depth = 0
        start = self.pos
        while True:
            tok = self.peek
            if tok.kind == "eof":
                return
            if tok.kind == "op":
                if tok.text in "[({":
                    depth += 1
                elif tok.text in ")}":
                    depth = max(0, depth - 1)
                elif tok.text == "]":
                    if depth == 0:
                        if self.pos == start:
                            # Stray ']' at statement start: consume it (and
                            # a following ';') so that we make progress.
                            self.advance()
                            if self.at(";"):
                                self.advance()
                        return
                    depth -= 1
                elif tok.text == ";" and depth == 0:
                    self.advance()
                    return
            # A new line that starts like a declaration or a loop is a good
            # place to resume after an error on the previous line.
            if tok.newline_before and self.pos != start and depth == 0 and self._starts_statement():
                return
            self.advance()

    def _starts_statement(self) -> bool:
        tok = self.peek
        if tok.kind != "ident":
            return False
        nxt = self.peek_at(1)
        if tok.text in ("in", "out", "tmp") and nxt.kind == "ident":
            return True
        return nxt.kind == "sup" and self.peek_at(2).kind == "number"

    # ------------------------------------------------------------ statements

    def program(self) -> A.Program:
        decls: list[A.Decl] = []
        units: list[A.Nest] = []
        while True:
            tok = self.peek
            if tok.kind == "eof":
                break
            start = self.pos
            try:
                if tok.kind == "ident" and tok.text in ("in", "out", "tmp") and self.peek_at(1).kind == "ident":
                    decls.append(self.decl())
                elif tok.kind == "op" and tok.text == "]":
                    self.fail(tok.span, "unbalanced-bracket", "']' without a matching '['")
                else:
                    units.append(self.unit())
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
        if self.at("["):
            self.advance()
            while True:
                dim = self.peek
                if dim.kind != "number" or not dim.text.isdigit():
                    self.fail(dim.span, "expected-extent", f"expected a positive integer extent, found {self.describe(dim)}")
                self.advance()
                if int(dim.text) <= 0:
                    self.report(dim.span, "bad-extent", "a tensor dimension must be at least 1")
                shape.append(int(dim.text))
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

    def unit(self) -> A.Nest:
        tok = self.peek
        if self._at_loop() or self.at("["):
            return self.nest()
        # A bare top-level equation (Step-TP allows ``A=B;`` outside brackets).
        eq = self.equation()
        return A.Nest((), (eq,), eq.span, bracketed=False)

    def _at_loop(self) -> bool:
        tok = self.peek
        return tok.kind == "ident" and self.peek_at(1).kind == "sup" and self.peek_at(2).kind == "number"

    def nest(self) -> A.Nest:
        start = self.peek.start
        loops: list[A.Loop] = []
        pushed = 0
        open_comments = A.NO_COMMENTS
        try:
            while self._at_loop():
                loop = self.loop()
                loops.append(loop)
                self.loop_vars.append(loop.var)
                pushed += 1
            if not loops:
                before = self.take_pending()
            tok = self.peek
            if not self.at("["):
                if loops:
                    self.fail(tok.span, "expected-token", f"expected '[' or another loop after the loop header, found {self.describe(tok)}")
                self.fail(tok.span, "expected-token", f"expected '[', found {self.describe(tok)}")
            self.advance()
            after = self.trailing_comment()
            if loops:
                if after is not None:
                    last = loops[-1]
                    loops[-1] = _with_comments(last, A.Comments(last.comments.before, after))
            else:
                open_comments = A.Comments(before, after)
            body: list[A.Item] = []
            while True:
                tok = self.peek
                if tok.kind == "eof":
                    self.fail(Span(start, start + 1), "unbalanced-bracket", "'[' is never closed")
                if self.at("]"):
                    break
                item_start = self.pos
                try:
                    if self._at_loop() or self.at("["):
                        body.append(self.nest())
                    else:
                        body.append(self.equation())
                except _Recover:
                    self.synchronize()
                if self.pos == item_start:
                    self.advance()
            end_before = self.take_pending()
            self.advance()  # ]
            end_tok = self.expect(";", "after ']'")
            end_after = self.trailing_comment()
            if not body:
                self.report(Span(start, end_tok.end), "empty-body", "a loop body needs at least one equation")
            return A.Nest(
                tuple(loops),
                tuple(body),
                Span(start, end_tok.end),
                A.Comments(end_before, end_after),
                open_comments,
            )
        finally:
            for _ in range(pushed):
                self.loop_vars.pop()

    def loop(self) -> A.Loop:
        before = self.take_pending()
        kind_tok = self.advance()
        if kind_tok.text not in A.LOOP_KINDS:
            self.report(
                kind_tok.span,
                "unknown-loop-kind",
                f"unknown loop kind '{kind_tok.text}'; expected L (serial), P (parallel), V (vectorized), U (unrolled) or B (thread-bound)",
            )
        self.expect("^{")
        extent_tok = self.advance()  # a number: _at_loop checked it
        if not extent_tok.text.isdigit():
            self.report(extent_tok.span, "bad-extent", f"a loop extent must be a positive integer, not {extent_tok.text}")
            extent = 1
        else:
            extent = int(extent_tok.text)
            if extent <= 0:
                self.report(extent_tok.span, "bad-extent", "a loop extent must be at least 1")
        self.expect("}", "after the loop extent")
        self.expect("_{", "(the loop variable, as in _{i=0})")
        var_tok = self.peek
        if var_tok.kind != "ident":
            self.fail(var_tok.span, "expected-loop-var", f"expected a loop variable name, found {self.describe(var_tok)}")
        self.advance()
        if var_tok.text in RESERVED:
            self.report(var_tok.span, "reserved-name", f"'{var_tok.text}' is a reserved word and cannot name a loop variable")
        self.expect("=", "after the loop variable")
        start_tok = self.peek
        if start_tok.kind != "number" or not start_tok.text.isdigit():
            self.fail(start_tok.span, "expected-loop-start", f"expected the loop's integer start (usually 0), found {self.describe(start_tok)}")
        self.advance()
        end_tok = self.expect("}", "after the loop start")
        after = self.trailing_comment()
        return A.Loop(
            kind_tok.text,
            extent,
            var_tok.text,
            int(start_tok.text),
            Span(kind_tok.start, end_tok.end),
            kind_tok.span,
            extent_tok.span,
            var_tok.span,
            A.Comments(before, after),
        )

    def equation(self) -> A.Equation:
        before = self.take_pending()
        tok = self.peek
        if tok.kind != "ident":
            self.fail(tok.span, "expected-equation", f"expected a declaration, a loop or an equation, found {self.describe(tok)}")
        if tok.text in self.loop_vars and self.peek_at(1).kind not in ("sup", "sub"):
            self.fail(tok.span, "assign-to-loop-var", f"cannot assign to loop variable '{tok.text}'")
        lhs = self.access()
        if not self.at("="):
            found = self.peek
            self.fail(found.span, "expected-token", f"expected '=' after {lhs.tensor}, found {self.describe(found)}")
        self.advance()
        rhs = self.expr()
        predicate = None
        if self.peek.kind == "ident" and self.peek.text == "where":
            self.advance()
            predicate = self.expr()
        end_tok = self.peek
        if not self.at(";"):
            self.fail(end_tok.span, "expected-token", f"expected ';' to end the equation, found {self.describe(end_tok)}")
        self.advance()
        after = self.trailing_comment()
        return A.Equation(lhs, rhs, predicate, Span(lhs.span.start, end_tok.end), A.Comments(before, after))

    # ------------------------------------------------------------ expressions

    def access(self) -> A.Access:
        name_tok = self.advance()
        if name_tok.text in RESERVED:
            self.fail(name_tok.span, "reserved-name", f"'{name_tok.text}' is a reserved word and cannot name a tensor")
        end = name_tok.end
        dtype = scope = None
        if self.peek.kind == "sup":
            self.advance()
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
            end = self.expect("}", f"to close {name_tok.text}'s superscript").end
        indices = None
        if self.peek.kind == "sub":
            self.advance()
            items = [self.expr(index=True)]
            while self.at(","):
                self.advance()
                items.append(self.expr(index=True))
            end = self.expect("}", f"to close {name_tok.text}'s subscript").end
            indices = tuple(items)
        return A.Access(name_tok.text, indices, dtype, scope, Span(name_tok.start, end), name_tok.span)

    def expr(self, index: bool = False, min_prec: int = 0) -> A.Expr:
        lhs = self.unary(index)
        while True:
            tok = self.peek
            if tok.kind != "op" or tok.text not in A.BINARY_PRECEDENCE:
                return lhs
            prec = A.BINARY_PRECEDENCE[tok.text]
            if prec < min_prec:
                return lhs
            self.advance()
            next_min = prec if tok.text == "**" else prec + 1
            rhs = self.expr(index, next_min)
            lhs = A.Binary(tok.text, lhs, rhs, lhs.span.cover(rhs.span))

    def unary(self, index: bool) -> A.Expr:
        tok = self.peek
        if tok.kind == "op" and tok.text in ("-", "!"):
            self.advance()
            operand = self.expr(index, A.UNARY_PRECEDENCE)
            return A.Unary(tok.text, operand, Span(tok.start, operand.span.end))
        return self.primary(index)

    def primary(self, index: bool) -> A.Expr:
        tok = self.peek
        if tok.kind == "number":
            self.advance()
            is_int = tok.text.isdigit()
            return A.Num(int(tok.text) if is_int else float(tok.text), tok.text, tok.span)
        if tok.kind == "op" and tok.text == "(":
            self.advance()
            inner = self.expr(index)
            close = self.expect(")", "to close '('")
            # Spans of parenthesised expressions cover the parentheses.
            return _respan(inner, Span(tok.start, close.end))
        if tok.kind == "ident":
            nxt = self.peek_at(1)
            if nxt.kind == "op" and nxt.text == "(":
                return self.call()
            if tok.text == "inf" and nxt.kind not in ("sup", "sub"):
                self.advance()
                return A.Num(float("inf"), "inf", tok.span)
            if nxt.kind in ("sup", "sub"):
                if index:
                    self.fail(tok.span, "tensor-in-index", f"an index may only use loop variables and integers, not tensor {tok.text}")
                return self.access()
            if index or tok.text in self.loop_vars:
                self.advance()
                return A.Var(tok.text, tok.span)
            if tok.text in RESERVED:
                self.fail(tok.span, "reserved-name", f"'{tok.text}' is a reserved word here")
            self.advance()
            return A.Access(tok.text, None, None, None, tok.span, tok.span)
        self.fail(tok.span, "expected-expression", f"expected an expression, found {self.describe(tok)}")

    def call(self) -> A.Call:
        name_tok = self.advance()
        self.advance()  # (
        args: list[A.Expr] = []
        if not self.at(")"):
            args.append(self.expr())
            while self.at(","):
                self.advance()
                args.append(self.expr())
        close = self.expect(")", f"to close the call of {name_tok.text}")
        span = Span(name_tok.start, close.end)
        func = name_tok.text
        if func in A.FUNCTIONS:
            arity = A.FUNCTIONS[func]
            if len(args) != arity:
                self.report(span, "wrong-arity", f"{func} takes {arity} argument{'s' if arity > 1 else ''}, got {len(args)}")
        elif func in A.DTYPES:
            if len(args) != 1:
                self.report(span, "wrong-arity", f"the cast {func}(x) takes 1 argument, got {len(args)}")
        else:
            self.report(name_tok.span, "unknown-function", f"unknown function '{func}'; expected one of {', '.join(A.FUNCTIONS)} or a dtype cast")
        return A.Call(func, tuple(args), span, name_tok.span)


def _respan(expr: A.Expr, span: Span) -> A.Expr:
    from dataclasses import replace

    return replace(expr, span=span)


def _with_comments(loop: A.Loop, comments: A.Comments) -> A.Loop:
    from dataclasses import replace

    return replace(loop, comments=comments)

"""Syntax tree -> LEIR text, in the canonical multi-line form or the
Step-TP compact one-line form (docs/leir-syntax.md, "Canonical layout").

``print_program(parse(x).program) == x`` for canonical text ``x``.
"""

from __future__ import annotations

from leir import ast as A

INDENT = "  "
_SPACED = frozenset({"+", "-", "<", "<=", ">", ">=", "==", "!=", "&", "|"})


def print_program(program: A.Program, style: str = "canonical") -> str:
    if style == "canonical":
        return _Canonical(program).program()
    if style == "compact":
        return _Compact(program).program()
    raise ValueError(f"unknown style {style!r}; expected 'canonical' or 'compact'")


def print_expr(expr: A.Expr, *, compact: bool = False, index: bool = False,
               declared: frozenset[str] = frozenset(), types: dict[str, tuple[str, str]] | None = None) -> str:
    """One expression. ``declared`` names tensors whose superscripts the
    canonical form omits; ``types`` (name -> (dtype, scope)) supplies the
    superscripts the compact form needs for undeclared-superscript accesses."""
    return _ExprPrinter(compact, declared, types or {}).expr(expr, index)


def loop_header(loop: A.Loop, compact: bool = False) -> str:
    """``L^{64}_{i}`` in the canonical form (the start is written only when
    it is not 0); ``L^{64}_{i=0}`` in Step-TP's compact form."""
    if compact or loop.start != 0:
        return f"{loop.kind}^{{{loop.extent}}}_{{{loop.var}={loop.start}}}"
    return f"{loop.kind}^{{{loop.extent}}}_{{{loop.var}}}"


def decl_text(decl: A.Decl) -> str:
    shape = "[" + ",".join(str(d) for d in decl.shape) + "]" if decl.shape else ""
    scope = f" @{decl.scope}" if decl.scope != "g" else ""
    return f"{decl.role:<3} {decl.name}: {decl.dtype}{shape}{scope}"


class _ExprPrinter:
    def __init__(self, compact: bool, declared: frozenset[str], types: dict[str, tuple[str, str]]):
        self.compact = compact
        self.declared = declared
        self.types = types

    def expr(self, e: A.Expr, index: bool = False) -> str:
        tight = self.compact or index
        if isinstance(e, A.Num):
            return e.text
        if isinstance(e, A.Var):
            return e.name
        if isinstance(e, A.Access):
            return self.access(e)
        if isinstance(e, A.Call):
            sep = "," if tight else ", "
            return f"{e.func}(" + sep.join(self.expr(a, index) for a in e.args) + ")"
        if isinstance(e, A.Unary):
            operand = self.expr(e.operand, index)
            if _prec(e.operand) <= A.UNARY_PRECEDENCE:
                operand = f"({operand})"
            return f"{e.op}{operand}"
        if isinstance(e, A.Binary):
            prec = A.BINARY_PRECEDENCE[e.op]
            lhs = self.expr(e.lhs, index)
            rhs = self.expr(e.rhs, index)
            lp, rp = _prec(e.lhs), _prec(e.rhs)
            if e.op == "**":
                # Right associative: the left operand needs parentheses at
                # equal precedence, and so does a unary minus on the left.
                if lp <= prec:
                    lhs = f"({lhs})"
                if rp < prec and rp != A.UNARY_PRECEDENCE:
                    rhs = f"({rhs})"
            else:
                if lp < prec:
                    lhs = f"({lhs})"
                if rp <= prec:
                    rhs = f"({rhs})"
            if e.op in _SPACED and not tight:
                return f"{lhs} {e.op} {rhs}"
            return f"{lhs}{e.op}{rhs}"
        raise TypeError(f"not an expression: {e!r}")

    def access(self, a: A.Access) -> str:
        out = a.tensor
        if self.compact:
            dtype, scope = self.types.get(a.tensor, (a.dtype, a.scope))
            dtype = a.dtype or dtype
            scope = a.scope or scope or "g"
            if dtype:
                out += f"^{{{dtype},{scope}}}"
        elif a.dtype is not None and a.tensor not in self.declared:
            out += f"^{{{a.dtype},{a.scope}}}" if a.scope else f"^{{{a.dtype}}}"
        if a.indices is not None:
            out += "_{" + ",".join(self.expr(i, index=True) for i in a.indices) + "}"
        return out


def _same_access(a: A.Expr, b: A.Access) -> bool:
    # Node equality ignores spans but not superscripts: ``C = C^{f32} + e``
    # keeps its spelling.
    return isinstance(a, A.Access) and a == b


def _prec(e: A.Expr) -> int:
    if isinstance(e, A.Binary):
        return A.BINARY_PRECEDENCE[e.op]
    if isinstance(e, A.Unary):
        return A.UNARY_PRECEDENCE
    if isinstance(e, A.Num) and e.text.startswith("-"):
        # A negative literal built by a transformation reads back as a
        # unary minus: (-1)**2 must keep its parentheses.
        return A.UNARY_PRECEDENCE
    return 100


class _Canonical:
    def __init__(self, program: A.Program):
        self.program_node = program
        self.exprs = _ExprPrinter(False, frozenset(d.name for d in program.decls), {})
        self.lines: list[str] = []

    def emit(self, indent: int, text: str, comments: A.Comments | None = None) -> None:
        pad = INDENT * indent
        if comments is not None:
            for c in comments.before:
                self.lines.append(pad + c)
            if comments.after is not None:
                text = f"{text}  {comments.after}"
        self.lines.append(pad + text)

    def program(self) -> str:
        p = self.program_node
        for d in p.decls:
            self.emit(0, decl_text(d), d.comments)
        for unit in p.units:
            if self.lines:
                self.lines.append("")
            self.item(unit, 0, top=True)
        if p.end_comments.before:
            if self.lines:
                self.lines.append("")
            self.lines.extend(p.end_comments.before)
        return "\n".join(self.lines) + "\n" if self.lines else ""

    def equation(self, eq: A.Equation) -> str:
        rhs = eq.rhs
        if isinstance(rhs, A.Binary) and rhs.op in ("+", "-", "*") and _same_access(rhs.lhs, eq.lhs):
            # ``C = C + e`` prints as ``C += e``: e is the whole right operand,
            # so ``C = C - (a + b)`` is ``C -= a + b``.
            text = f"{self.exprs.expr(eq.lhs)} {rhs.op}= {self.exprs.expr(rhs.rhs)}"
        else:
            text = f"{self.exprs.expr(eq.lhs)} = {self.exprs.expr(rhs)}"
        if eq.predicate is not None:
            text += f" where {self.exprs.expr(eq.predicate)}"
        return text + ";"

    def item(self, item: A.Item, indent: int, top: bool = False) -> None:
        if isinstance(item, A.Equation):
            self.emit(indent, self.equation(item), item.comments)
            return
        if not item.bracketed:
            for eq in item.body:
                self.item(eq, indent)
            return
        n = len(item.loops)
        for k, loop in enumerate(item.loops):
            text = loop_header(loop) + (" [" if k == n - 1 else "")
            self.emit(indent + k, text, loop.comments)
        if n == 0:
            self.emit(indent, "[", item.open_comments)
        close = indent + max(n - 1, 0)
        for sub in item.body:
            self.item(sub, close + 1)
        for c in item.end_comments.before:
            self.lines.append(INDENT * (close + 1) + c)
        self.emit(close, "];", A.Comments((), item.end_comments.after))


class _Compact:
    def __init__(self, program: A.Program):
        types = {d.name: (d.dtype, d.scope) for d in program.decls}
        self.program_node = program
        self.exprs = _ExprPrinter(True, frozenset(), types)

    def program(self) -> str:
        return "".join(self.item(u) for u in self.program_node.units)

    def item(self, item: A.Item) -> str:
        if isinstance(item, A.Equation):
            text = f"{self.exprs.expr(item.lhs)}={self.exprs.expr(item.rhs)}"
            if item.predicate is not None:
                text += f" where {self.exprs.expr(item.predicate)}"
            return text + ";"
        if not item.bracketed:
            return "".join(self.item(e) for e in item.body)
        return "".join(loop_header(l, compact=True) for l in item.loops) + "[" + "".join(self.item(b) for b in item.body) + "];"


def equation_text(eq: A.Equation) -> str:
    """An equation on one line, without superscripts (for messages)."""
    names = frozenset(n.tensor for n in A.walk(eq) if isinstance(n, A.Access))
    text = f"{print_expr(eq.lhs, declared=names)} = {print_expr(eq.rhs, declared=names)}"
    if eq.predicate is not None:
        text += f" where {print_expr(eq.predicate, declared=names)}"
    return text


def access_text(access: A.Access) -> str:
    """An access on its own, without superscripts (for messages)."""
    return print_expr(access, declared=frozenset({access.tensor}))

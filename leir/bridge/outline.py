"""The outline of a document: its symbols (kernels, loop nests, loops,
tensors), the ranges an editor may fold, and a class for every token worth
colouring.

A ``.leir`` file is one kernel; its outline comes from the syntax tree, with
the spans the parser recorded, so it follows a file with syntax errors as far
as the parser recovered. A Python file's outline covers its TVMScript
kernels only (what ``find_kernels`` reads from the file's syntax tree: the
``@T.prim_func`` functions and ``@I.ir_module`` classes), with their loops
and buffers; nothing of the file runs and TVM is not imported.

Positions are character offsets (``Span``) and 0-based lines; converting
them to an editor's units is the caller's business.
"""

from __future__ import annotations

import ast as py
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal

from leir import ast as A
from leir.ast import Span
from leir.diagnostics import SourceText

SymbolKind = Literal["kernel", "module", "nest", "loop", "tensor"]


@dataclass(frozen=True)
class Symbol:
    """One entry of the outline. ``span`` covers the whole construct and
    contains ``selection``, the part to highlight (a name, a loop header)."""

    name: str
    kind: SymbolKind
    span: Span
    selection: Span
    detail: str = ""
    children: tuple["Symbol", ...] = ()


@dataclass(frozen=True)
class Fold:
    """Lines ``start_line`` to ``end_line`` (0-based, inclusive) may be folded
    under ``start_line``. ``kind`` is "region" or "comment"."""

    start_line: int
    end_line: int
    kind: Literal["region", "comment"] = "region"


#: Token classes, in the order an editor's legend lists them (the standard
#: LSP names, so every colour theme knows them). Loop variables are
#: "parameter" and tensors "variable", so a theme tells them apart.
TOKEN_TYPES = ("keyword", "parameter", "variable", "function", "number", "operator", "comment", "type")
#: "declaration": where a loop variable or tensor is introduced;
#: "readonly": an input tensor (the kernel never writes it).
TOKEN_MODIFIERS = ("declaration", "readonly")


@dataclass(frozen=True)
class Token:
    start: int
    end: int
    type: str  # one of TOKEN_TYPES
    modifiers: tuple[str, ...] = ()


# ------------------------------------------------------------------ symbols


def leir_symbols(text: str, kernel_name: str, program: A.Program, analysis=None) -> list[Symbol]:
    """The one kernel of a ``.leir`` file: its tensors, then its loop nests,
    each with its chain of loops and, under the innermost loop, the nests
    nested in its body. ``analysis`` (a ``leir.semantics.Analysis``) adds
    the tensors that are used without a declaration, with their inferred
    shapes."""
    tensors = _leir_tensors(program, analysis)
    nests = tuple(_nest_symbol(text, unit, index) for index, unit in enumerate(program.units, 1))
    whole = Span(0, len(text))
    selection = next((s.selection for s in nests), Span(0, 0))
    detail = f"{len(nests)} loop nest{'s' * (len(nests) != 1)}"
    if analysis is not None and analysis.outputs():
        detail += f", writes {', '.join(t.name for t in analysis.outputs())}"
    return [Symbol(kernel_name, "kernel", whole, selection, detail, tensors + nests)]


def _leir_tensors(program: A.Program, analysis) -> tuple[Symbol, ...]:
    infos = dict(analysis.tensors) if analysis is not None else {}
    first_access = {}
    for unit in program.units:
        for node in A.walk(unit):
            if isinstance(node, A.Access) and node.span is not None:
                first_access.setdefault(node.tensor, node)
    symbols = []
    seen = set()
    for decl in program.decls:
        if decl.span is None or decl.name in seen:
            continue
        seen.add(decl.name)
        info = infos.get(decl.name)
        shape = info.shape if info is not None else decl.shape
        detail = _tensor_detail(decl.role, decl.dtype, shape, decl.scope)
        symbols.append(Symbol(decl.name, "tensor", decl.span, decl.name_span or decl.span, detail))
    for name, info in infos.items():
        access = first_access.get(name)
        if name in seen or access is None:
            continue
        seen.add(name)
        detail = _tensor_detail(info.role, info.dtype, info.shape, info.scope) + " (inferred)"
        symbols.append(Symbol(name, "tensor", access.span, access.name_span or access.span, detail))
    return tuple(symbols)


def _tensor_detail(role: str, dtype: str, shape: tuple[int, ...], scope: str) -> str:
    dims = f"[{','.join(map(str, shape))}]" if shape else ""
    where = f" @{scope}" if scope != "g" else ""
    return f"{role} {dtype}{dims}{where}"


def _nest_symbol(text: str, nest: A.Nest, index: int) -> Symbol:
    span = nest.span or Span(0, 0)
    inner = tuple(_nest_symbol(text, item, i) for i, item in enumerate(_nests_in(nest.body), 1))
    written = _unique(item.lhs.tensor for item in _equations_under(nest))
    detail = f"writes {', '.join(written)}" if written else ""
    if not nest.loops:
        name = f"block {index}" if nest.bracketed else f"{', '.join(written) or 'equation'} ="
        return Symbol(name, "nest", span, _first_line(text, span), detail, inner)
    children = inner
    for loop in reversed(nest.loops):
        loop_span = Span(loop.span.start, max(loop.span.end, span.end)) if loop.span else span
        loop_detail = f"{loop.extent} iterations" + (f" from {loop.start}" if loop.start else "")
        kind = A.LOOP_KINDS.get(loop.kind, loop.kind)
        children = (Symbol(f"{kind} {loop.var}", "loop", loop_span, loop.span or span, loop_detail, children),)
    name = f"loop nest {', '.join(loop.var for loop in nest.loops)}"
    selection = children[0].selection
    return Symbol(name, "nest", span, selection, detail, children)


def _nests_in(body: Iterable[A.Item]) -> Iterator[A.Nest]:
    return (item for item in body if isinstance(item, A.Nest))


def _equations_under(nest: A.Nest) -> Iterator[A.Equation]:
    for item in nest.body:
        if isinstance(item, A.Equation):
            yield item
        else:
            yield from _equations_under(item)


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _first_line(text: str, span: Span) -> Span:
    end = text.find("\n", span.start, span.end)
    return Span(span.start, span.end if end < 0 else end)


def tvmscript_symbols(text: str) -> list[Symbol]:
    """The TVMScript kernels of a Python file: each ``@T.prim_func`` with its
    buffers and loops, each ``@I.ir_module`` with its functions. A file that
    is not valid Python has none."""
    from leir.bridge.tvmscript.discovery import find_kernels

    kernels, _ = find_kernels(text)
    symbols = []
    for kernel in kernels:
        if kernel.kind == "ir_module":
            functions = tuple(
                _python_function(kernel.lines, node)
                for node in kernel.node.body
                if isinstance(node, py.FunctionDef | py.AsyncFunctionDef)
            )
            symbols.append(Symbol(kernel.name, "module", kernel.span, kernel.name_span, "ir_module", functions))
        else:
            function = _python_function(kernel.lines, kernel.node)
            symbols.append(Symbol(kernel.name, "kernel", kernel.span, kernel.name_span, "prim_func", function.children))
    return symbols


def _python_function(lines, node: py.FunctionDef | py.AsyncFunctionDef) -> Symbol:
    span = lines.node_span(node)
    if node.decorator_list:
        span = Span(lines.node_span(node.decorator_list[0]).start - 1, span.end)  # from the "@"
    children = [
        Symbol(arg.arg, "tensor", lines.node_span(arg), _name_span(lines, arg, arg.arg), _unparse(arg.annotation))
        for arg in node.args.args
        if arg.annotation is not None and "Buffer" in _unparse(arg.annotation)
    ]
    children.extend(_python_body(lines, node.body))
    return Symbol(node.name, "kernel", span, _def_name_span(lines, node), "", tuple(children))


def _python_body(lines, statements: list[py.stmt]) -> Iterator[Symbol]:
    """Loops (``for``) and allocated buffers (``X = T.alloc_buffer(...)``)
    of a kernel body, as a tree of loops."""
    for statement in statements:
        if isinstance(statement, py.For):
            names = [n.id for n in py.walk(statement.target) if isinstance(n, py.Name)]
            span = lines.node_span(statement)
            header = Span(span.start, lines.node_span(statement.iter).end)
            children = tuple(_python_body(lines, statement.body))
            yield Symbol(", ".join(names) or "for", "loop", span, header, _unparse(statement.iter), children)
            continue
        if isinstance(statement, py.Assign) and isinstance(statement.value, py.Call):
            called = _unparse(statement.value.func)
            if called.endswith(("alloc_buffer", "decl_buffer")) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, py.Name):
                    yield Symbol(target.id, "tensor", lines.node_span(statement), lines.node_span(target),
                                 _unparse(statement.value))
            continue
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(statement, field, None)
            if isinstance(nested, list):
                yield from _python_body(lines, nested)


def _unparse(node: py.AST | None) -> str:
    if node is None:
        return ""
    try:
        return py.unparse(node)
    except (ValueError, RecursionError):  # pragma: no cover - a tree ast.parse built unparses
        return ""


def _name_span(lines, node: py.AST, name: str) -> Span:
    start = lines.node_span(node).start
    return Span(start, start + len(name))


def _def_name_span(lines, node: py.FunctionDef | py.AsyncFunctionDef) -> Span:
    """The span of the function's name in ``def name(``."""
    start = lines.offset(node.lineno, node.col_offset)
    at = lines.text.find(node.name, start)
    return Span(at, at + len(node.name)) if at >= 0 else Span(start, start)


# ------------------------------------------------------------------ folding


def leir_folds(text: str, program: A.Program, source: SourceText | None = None) -> list[Fold]:
    """Every loop's body (from the loop's line to the line before its
    closing ``];``), every bracketed block, and every run of two or more
    comment lines."""
    source = source or SourceText(text)
    folds: dict[int, Fold] = {}

    def add(start: int, close: int) -> None:
        start_line = source.position(start)[0]
        end_line = source.position(close)[0]
        if source.line_text(end_line).lstrip().startswith("]"):
            end_line -= 1  # keep the closing "];" in sight
        if end_line > start_line and start_line not in folds:
            folds[start_line] = Fold(start_line, end_line)

    def visit(nest: A.Nest) -> None:
        if nest.span is not None and nest.bracketed:
            close = text.rfind("]", nest.span.start, nest.span.end)
            close = close if close >= 0 else nest.span.end
            for loop in nest.loops:
                if loop.span is not None:
                    add(loop.span.start, close)
            if not nest.loops:
                add(nest.span.start, close)
        for item in _nests_in(nest.body):
            visit(item)

    for unit in program.units:
        visit(unit)
    return sorted(list(folds.values()) + comment_folds(source), key=lambda f: (f.start_line, f.end_line))


def comment_folds(source: SourceText) -> list[Fold]:
    """Runs of two or more lines that hold only a ``#`` comment."""
    folds = []
    run_start = None
    for line in range(source.line_count + 1):
        is_comment = line < source.line_count and source.line_text(line).lstrip().startswith("#")
        if is_comment and run_start is None:
            run_start = line
        elif not is_comment and run_start is not None:
            if line - 1 > run_start:
                folds.append(Fold(run_start, line - 1, "comment"))
            run_start = None
    return folds


def tvmscript_folds(text: str, source: SourceText | None = None) -> list[Fold]:
    """Each kernel, each multi-line loop inside one, and comment blocks."""
    source = source or SourceText(text)
    folds: dict[int, Fold] = {}

    def add(span: Span) -> None:
        start_line, end_line = source.position(span.start)[0], source.position(max(span.start, span.end - 1))[0]
        if end_line > start_line and start_line not in folds:
            folds[start_line] = Fold(start_line, end_line)

    def visit(symbol: Symbol) -> None:
        if symbol.kind in ("kernel", "module", "loop"):
            add(Span(symbol.selection.start, symbol.span.end) if symbol.kind != "loop" else symbol.span)
        for child in symbol.children:
            visit(child)

    for symbol in tvmscript_symbols(text):
        visit(symbol)
    return sorted(list(folds.values()) + comment_folds(source), key=lambda f: (f.start_line, f.end_line))


# ---------------------------------------------------------- semantic tokens

_OPERATORS = frozenset(A.BINARY_PRECEDENCE) | {"!", "=", "+=", "-=", "*="}


def semantic_tokens(text: str, program: A.Program | None = None, analysis=None) -> list[Token]:
    """A class for every loop kind, loop variable, tensor, function, dtype,
    scope, number, operator and comment of a ``.leir`` text, in order.

    The syntax tree decides what a name is where the parser understood it;
    elsewhere (text it could not parse) the token's neighbours do."""
    from leir.lexer import tokenize

    inputs = set()
    if analysis is not None:
        inputs = {t.name for t in analysis.tensors.values() if t.role == "in"}
    known: dict[int, tuple[str, tuple[str, ...]]] = {}
    if program is not None:
        known = _classes_from_tree(program, inputs)

    tokens = tokenize(text, composite=False)
    out: list[Token] = []
    previous = None
    for i, tok in enumerate(tokens):
        kind, word = tok.kind, tok.text
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        cls: tuple[str, tuple[str, ...]] | None = None
        if kind == "comment":
            cls = ("comment", ())
        elif kind == "number":
            cls = ("number", ())
        elif kind == "op" and word in _OPERATORS:
            cls = ("operator", ())
        elif kind == "ident":
            cls = known.get(tok.start) or _class_of_name(word, previous, following, tok.newline_before, inputs)
        if cls is not None:
            out.append(Token(tok.start, tok.end, cls[0], cls[1]))
        previous = tok
    return out


def _classes_from_tree(program: A.Program, inputs: set[str]) -> dict[int, tuple[str, tuple[str, ...]]]:
    known: dict[int, tuple[str, tuple[str, ...]]] = {}

    def tensor(name: str, declaration: bool = False) -> tuple[str, tuple[str, ...]]:
        mods = (("declaration",) if declaration else ()) + (("readonly",) if name in inputs else ())
        return ("variable", mods)

    for decl in program.decls:
        if decl.name_span is not None:
            known[decl.name_span.start] = tensor(decl.name, declaration=True)
    for unit in program.units:
        for node in A.walk(unit):
            if isinstance(node, A.Nest):
                for loop in node.loops:
                    if loop.kind_span is not None:
                        known[loop.kind_span.start] = ("keyword", ())
                    if loop.var_span is not None:
                        known[loop.var_span.start] = ("parameter", ("declaration",))
            elif isinstance(node, A.Var) and node.span is not None:
                known[node.span.start] = ("parameter", ())
            elif isinstance(node, A.Access) and node.name_span is not None:
                known[node.name_span.start] = tensor(node.tensor)
            elif isinstance(node, A.Call) and node.name_span is not None:
                known[node.name_span.start] = ("type", ()) if node.func in A.DTYPES else ("function", ())
    return known


def _class_of_name(word, previous, following, starts_line, inputs) -> tuple[str, tuple[str, ...]] | None:
    after = following.text if following is not None else ""
    before = previous.text if previous is not None else ""
    if word in A.ROLES and starts_line:
        return ("keyword", ())
    if word == "where":
        return ("keyword", ())
    if word == "inf":
        return ("number", ())
    if word in A.DTYPES and after != "_{":
        return ("type", ())
    if word in A.SCOPES and before in (",", "@"):
        return ("type", ())
    if word in A.FUNCTIONS and after == "(":
        return ("function", ())
    if word in A.LOOP_KINDS and after == "^{":
        return ("keyword", ())
    if following is not None and following.kind in ("sup", "sub"):
        return ("variable", ("readonly",) if word in inputs else ())
    return None

"""Finding the TVMScript kernels of a Python file from its text alone."""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field
from typing import Literal

from leir.ast import Span
from leir.diagnostics import Diagnostic, error
from leir.bridge.tvmscript.lines import PythonLines
from leir.bridge.tvmscript.namespaces import Resolved, import_bindings, resolve

KernelKind = Literal["prim_func", "ir_module"]

#: What ``T`` and ``I`` stand for in a file that does not bind them, as in
#: ``tvm.script.from_source`` and in TVM's printer output, which writes its
#: imports as comments.
DEFAULT_ALIASES = {"T": "tvm.script.tirx", "I": "tvm.script.ir"}

_DEF_KEYWORD = re.compile(r"(?:async\s+)?(?:def|class)\s+")


@dataclass(frozen=True)
class FileScope:
    """What a kernel may refer to outside itself, read from the file's text.

    ``aliases`` maps local names to the TVMScript paths they were imported
    as (``"T" -> "tvm.script.tirx"``). ``constants`` holds module-level
    names assigned exactly once to a literal (``N = 128``), with their
    values. ``bound_names`` is every name the file binds anywhere, so that
    the screen can say "defined outside the kernel" rather than "unknown"."""

    aliases: dict[str, str]
    constants: dict[str, object]
    bound_names: frozenset[str]

    def path_of(self, node: ast.expr) -> str | None:
        """The dotted path of ``T.axis.remap``-like expressions rooted at an
        alias, with the alias expanded; None for anything else."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.path_of(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def resolve(self, node: ast.expr) -> Resolved | None:
        path = self.path_of(node)
        return None if path is None else resolve(path)


@dataclass(frozen=True)
class KernelSource:
    """One kernel as written in the file.

    ``span`` covers the whole decorated definition, from the ``@`` of its
    first decorator to the end of its body, so that replacing ``span`` with
    new text replaces the kernel; ``text`` is exactly that slice of the
    document, and ``indent`` the whitespace before the ``@`` on its line."""

    name: str
    kind: KernelKind
    span: Span
    name_span: Span
    text: str
    indent: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef = field(compare=False, repr=False)
    scope: FileScope = field(compare=False, repr=False)
    lines: PythonLines = field(compare=False, repr=False)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (which an editor may send, and which
    Python's parser cannot encode) replaced by U+FFFD: one character for
    one, three UTF-8 bytes for three, so no position moves."""
    return _LONE_SURROGATE.sub("\ufffd", text) if _LONE_SURROGATE.search(text) else text


def parse_python(text: str) -> tuple[ast.Module | None, list[Diagnostic]]:
    """The syntax tree of a Python file, or a "python-syntax" diagnostic."""
    text = without_lone_surrogates(text)
    try:
        with warnings.catch_warnings():
            # "invalid escape sequence" and the like are the file's business,
            # not lines on the tool's stderr.
            warnings.simplefilter("ignore")
            return ast.parse(text), []
    except SyntaxError as e:
        return None, [error(_syntax_error_span(text, e), "python-syntax", _syntax_error_message(e))]
    except (ValueError, RecursionError, MemoryError) as e:
        # ValueError: null bytes (Python 3.11); RecursionError/MemoryError:
        # absurdly deep nesting. None of them carries a position.
        return None, [error(_fallback_span(text), "python-syntax", f"Python cannot parse this file: {e}")]


def find_kernels(text: str) -> tuple[list[KernelSource], list[Diagnostic]]:
    """Every ``@T.prim_func`` function and ``@I.ir_module`` class of a Python
    file, in the order they appear, without running any of it.

    Functions inside an ``@I.ir_module`` class belong to that module and are
    not listed separately. A file that is not valid Python has no kernels
    and one "python-syntax" diagnostic."""
    text = without_lone_surrogates(text)
    tree, diagnostics = parse_python(text)
    if tree is None:
        return [], diagnostics
    lines = PythonLines(text)
    bound_names = _bound_names(tree)
    aliases = {name: path for name, path in DEFAULT_ALIASES.items() if name not in bound_names}
    aliases.update(import_bindings(tree))
    scope = FileScope(aliases, module_constants(tree), bound_names)
    kernels = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        kind = kernel_kind(node, scope)
        if kind is not None:
            kernels.append(_kernel_source(node, kind, scope, lines))
        else:
            pending.extend(ast.iter_child_nodes(node))
    kernels.sort(key=lambda k: k.span.start)
    return kernels, diagnostics


def kernel_kind(node: ast.AST, scope: FileScope) -> KernelKind | None:
    """"prim_func" for a function with a ``prim_func`` decorator, "ir_module"
    for a class with an ``ir_module`` decorator, None otherwise."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        wanted: KernelKind = "prim_func"
    elif isinstance(node, ast.ClassDef):
        wanted = "ir_module"
    else:
        return None
    for decorator in node.decorator_list:
        if decorator_kind(decorator, scope) == wanted:
            return wanted
    return None


def decorator_kind(decorator: ast.expr, scope: FileScope) -> KernelKind | None:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    resolved = scope.resolve(target)
    if resolved is None:
        return None
    if resolved.namespace in ("tirx", "tir") and resolved.members == ("prim_func",):
        return "prim_func"
    if resolved.namespace == "ir" and resolved.members == ("ir_module",):
        return "ir_module"
    return None


def module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound exactly once, by a plain assignment of a
    literal (``N = 128``, ``SHAPE = (128, 64)``, ``DTYPE = "float32"``).

    Only ``ast.literal_eval`` computes the values, so nothing of the file
    runs. ``N = 2 * 64``, a name also assigned elsewhere (conditionally, in
    a loop, through ``global``) or imported is not a constant."""
    binding_count: dict[str, int] = {}
    for statement in _module_level_statements(tree):
        for name in _names_bound_by(statement):
            binding_count[name] = binding_count.get(name, 0) + 1
    rebound_elsewhere = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}

    constants: dict[str, object] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None and statement.simple:
            target, value = statement.target, statement.value
        else:
            continue
        if not isinstance(target, ast.Name) or binding_count.get(target.id) != 1:
            continue
        if target.id in rebound_elsewhere:
            continue
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if _is_plain_literal(literal):
            constants[target.id] = literal
    return constants


def _is_plain_literal(value: object) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, tuple | list):
        return all(_is_plain_literal(v) for v in value)
    return False


def _module_level_statements(tree: ast.Module):
    """Statements that run at module level: the module body and the bodies
    of its if/for/while/try/with/match blocks, not function or class bodies."""
    pending = list(tree.body)
    while pending:
        statement = pending.pop()
        yield statement
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for child in ast.iter_child_nodes(statement):
            if isinstance(child, ast.stmt):
                pending.append(child)
            elif isinstance(child, ast.excepthandler | ast.match_case):
                pending.extend(child.body)


def _names_bound_by(statement: ast.stmt) -> list[str]:
    """Names one statement binds in its own scope (not in nested bodies)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in statement.names]
    targets: list[ast.AST] = []
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        targets = [statement.target]
    elif isinstance(statement, ast.With | ast.AsyncWith):
        targets = [item.optional_vars for item in statement.items if item.optional_vars is not None]
    elif isinstance(statement, ast.Delete):
        targets = list(statement.targets)
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    # Walrus targets in any expression of the statement (not nested bodies).
    for child in ast.iter_child_nodes(statement):
        if isinstance(child, ast.expr):
            names.extend(n.target.id for n in ast.walk(child) if isinstance(n, ast.NamedExpr))
    return names


def _bound_names(tree: ast.Module) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
    return frozenset(names)


def _kernel_source(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
    kind: KernelKind,
    scope: FileScope,
    lines: PythonLines,
) -> KernelSource:
    text = lines.text
    definition = lines.node_span(node)  # from "def"/"class" to the end of the body
    start = definition.start
    if node.decorator_list:
        first = lines.node_span(node.decorator_list[0]).start
        at = text.rfind("@", 0, first)
        start = at if at >= 0 else first
    span = Span(start, definition.end)

    keyword = _DEF_KEYWORD.match(text, definition.start)
    name_start = keyword.end() if keyword else text.find(node.name, definition.start)
    if name_start < 0 or text[name_start : name_start + len(node.name)] != node.name:
        name_span = Span(definition.start, definition.start)
    else:
        name_span = Span(name_start, name_start + len(node.name))

    line_start = max(text.rfind("\n", 0, start), text.rfind("\r", 0, start)) + 1
    before = text[line_start:start]
    indent = before[: len(before) - len(before.lstrip())]
    return KernelSource(node.name, kind, span, name_span, text[span.start : span.end], indent, node, scope, lines)


def _syntax_error_span(text: str, e: SyntaxError) -> Span:
    if e.lineno is None:
        return _fallback_span(text)
    lines = PythonLines(text)
    # SyntaxError columns are 1-based and count characters.
    start = lines.offset(e.lineno, (e.offset or 1) - 1, in_bytes=False)
    end = start
    if e.end_lineno is not None and e.end_offset is not None and e.end_offset > 0:
        end = lines.offset(e.end_lineno, e.end_offset - 1, in_bytes=False)
    if end <= start:
        end = min(start + 1, len(text))
        # Never underline a newline alone at the end of a line; stay on it.
        if text[start:end] in ("\n", "\r"):
            end = start
    return Span(start, max(start, end))


def _syntax_error_message(e: SyntaxError) -> str:
    message = e.msg or "invalid syntax"
    return message[0].upper() + message[1:] if message else message


def _fallback_span(text: str) -> Span:
    null = text.find("\0")
    return Span(null, null + 1) if null >= 0 else Span(0, 0)

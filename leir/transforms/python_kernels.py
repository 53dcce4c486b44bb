"""The transformation catalogue on TVMScript kernels in Python files.

The same steps that transform a LEIR document transform a ``@T.prim_func``
kernel (or a function of an ``@I.ir_module`` class) in a Python file, and
the file comes back with only that kernel changed:

- The kernel is raised to LEIR (``leir.bridge.raise_tir``) and the catalogue lists
  its candidates there, with the same ``check`` deciding what is offered.
- A step with a TVM schedule primitive (``schedule``) runs on the user's
  own PrimFunc, so the kernel comes back as TVM prints it: ``T.grid``,
  ``k_0, k_1`` and the user's block names.
- A step without one (``rewrite``: operator, algebraic, algorithmic) is done
  on the LEIR program and lowered back (``leir.bridge.lower``); its blocks keep the
  user's names where they still exist.

Names. Steps name blocks as the user's TIR does (``{"block": "update"}``),
not as LEIR does (LEIR names a block after the tensor it writes: ``C``).
Each equation of the raised program remembers the TIR block and loops it
came from, so names translate both ways. A TIR block that raises to more
than one equation (an init LEIR cannot leave implied, a padding branch) has
no single LEIR counterpart, and steps that name it are not offered.

Ranges. A candidate's range is in the Python file: the ``for`` statement of
a loop, the buffer store of an equation (the buffer's subscript for an
access), a buffer parameter or ``T.alloc_buffer`` for a tensor.

Example:

    >>> new_text = tvmscript_apply(text, Step("split", {"block": "update", "loop": "k", "factors": [4, 32]}))
    >>> tvmscript_verify(text, new_text, "matmul").ok
    True
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from leir import ast as A
from leir.ast import Span
from leir.inputs import SEEDS, seed_inputs
from leir.bridge.raise_tir import RaiseError, Raiser
from leir.semantics import Analysis, analyze
from leir.transforms.base import Candidate, Context, NotApplicable, StaleStep, Step, TransformError, TvmRefused
from leir.transforms.verify import Verification

__all__ = [
    "KernelError", "NameNotTranslatable", "TVMScriptKernel", "load_kernel", "tvmscript_apply",
    "tvmscript_candidates", "tvmscript_replay", "tvmscript_verify",
]


class KernelError(TransformError):
    """No kernel to transform: the file has none, several and none was
    chosen, none of that name, or the kernel does not parse or raise."""

    code = "tvmscript-kernel"


class NameNotTranslatable(NotApplicable):
    """A step names a block or loop that has no one-to-one counterpart
    between the user's TIR and its LEIR form."""

    code = "tvmscript-name-not-translatable"


# ------------------------------------------------------------ the kernel


@dataclass(frozen=True)
class _Origin:
    """Where a raised equation came from: its TIR block (None for a store
    outside any block), whether it is the block's ``T.init`` store, and the
    enclosing loops as (TIR variable, LEIR variable), outermost first."""

    block: str | None
    init: bool
    loops: tuple[tuple[str, str], ...]


class _TrackingRaiser(Raiser):
    """``raise_func`` that remembers each equation's TIR block and loops."""

    def __init__(self, func):
        super().__init__(func)
        self.blocks: list = []
        self.origins: dict[int, _Origin] = {}
        self.keep: list[A.Equation] = []  # keeps ids in ``origins`` valid

    def stmt_SBlockRealize(self, s) -> None:
        self.blocks.append(s.block)
        try:
            super().stmt_SBlockRealize(s)
        finally:
            self.blocks.pop()

    def equations(self, s, *, allow_self_read: bool, guard=None):
        eqs = super().equations(s, allow_self_read=allow_self_read, guard=guard)
        block = self.blocks[-1] if self.blocks else None
        init = block is not None and block.init is not None and s.same_as(block.init)
        loops = tuple((str(f.stmt.loop_var.name), f.node.loop.var) for f in self.frames if f.node is not None)
        origin = _Origin(str(block.name_hint) if block is not None else None, init, loops)
        for eq in eqs:
            self.origins[id(eq)] = origin
            self.keep.append(eq)
        return eqs


@dataclass
class _PyLoop:
    var: str
    header: Span  # ``for ... in T.grid(...)`` up to the colon
    name: Span  # the variable in the for target


@dataclass
class _PyStore:
    span: Span
    init: bool
    #: (buffer name, span of ``B[...]``) in source order, target first.
    subscripts: list[tuple[str, Span]]


@dataclass
class _PyBlock:
    name: str
    header: Span  # ``with T.sblock("name")``
    whole: Span  # the whole with statement
    loops: list[_PyLoop]  # enclosing, outermost first
    stores: list[_PyStore] = field(default_factory=list)


@dataclass
class _PyKernel:
    """What the kernel function's Python syntax tree says about positions."""

    blocks: dict[str, _PyBlock]
    duplicate_blocks: set[str]
    loose_stores: list[_PyStore]  # stores outside any block
    fors: list[tuple[Span, list[_PyLoop]]]  # every for statement (whole span) and its loops
    buffers: dict[str, Span]  # parameter or allocation of each buffer


@dataclass(frozen=True)
class _Anchor:
    """A LEIR node and the Python range it was written as."""

    leir: Span
    python: Span
    kind: str  # "loop" | "equation" | "access" | "tensor"
    #: A narrower Python range that selects only this node with the cursor
    #: (a loop's variable in a ``T.grid`` target).
    select: Span | None = None


@dataclass
class TVMScriptKernel:
    """One kernel of a Python file, raised and ready to transform."""

    text: str
    name: str
    source: Any  # leir.bridge.tvmscript.KernelSource of the kernel (the module's, for a module function)
    func: Any  # the user's PrimFunc
    module: Any  # the IRModule of an ir_module kernel, else None
    ctx: Context
    origins: list[_Origin]  # per LEIR equation, program order
    anchors: list[_Anchor]
    python: _PyKernel

    # -------------------------------------------------------- names

    def tir_block(self, leir_block: str) -> str | None:
        """The TIR block of a LEIR block name (None: the store is in no block)."""
        k = self.ctx.block_names.index(leir_block)
        return self.origins[k].block

    def leir_blocks(self, tir_block: str) -> list[str]:
        return [b for b, o in zip(self.ctx.block_names, self.origins) if o.block == tir_block]

    def block_refusal(self, leir_block: str) -> str | None:
        """Why a LEIR block has no one-to-one TIR block, or None."""
        if leir_block not in self.ctx.block_names:
            return None  # stale: the module's check says so in its own words
        tir = self.tir_block(leir_block)
        if tir is None:
            return f"{leir_block} is a buffer store outside any T.sblock, which TVM's schedule cannot name"
        if tir in self.python.duplicate_blocks:
            return f"kernel {self.name} has several blocks named {tir!r}"
        siblings = self.leir_blocks(tir)
        if len(siblings) > 1:
            return (f"block {tir!r} computes {len(siblings)} LEIR equations ({', '.join(siblings)}: an explicit init "
                    f"or padding branches), so a step on one of them is not a step on the block")
        return None

    def loop_pairs(self, leir_block: str) -> tuple[tuple[str, str], ...]:
        return self.origins[self.ctx.block_names.index(leir_block)].loops

    def to_tir(self, args: dict, scheduled: bool) -> dict | None:
        """The step's arguments in the kernel's names, or None when a name
        has no one-to-one counterpart (the step is not offered)."""
        try:
            return _translate(args, self._block_to_tir, self._loop_to_tir(scheduled), self._tensor(scheduled), to_leir=False)
        except _Untranslatable:
            return None

    def to_leir(self, args: dict, scheduled: bool) -> dict:
        """The step's arguments in LEIR names; StaleStep for a block the
        kernel does not have, NameNotTranslatable for one that has no LEIR
        counterpart."""
        try:
            return _translate(args, self._block_to_leir, self._loop_to_leir(scheduled), self._tensor(scheduled), to_leir=True)
        except _Untranslatable as e:
            raise e.error from None

    def _block_to_tir(self, name: str) -> str:
        if name not in self.ctx.block_names:
            raise _Untranslatable(StaleStep(f"no block {name}"))
        refusal = self.block_refusal(name)
        if refusal is not None:
            raise _Untranslatable(NameNotTranslatable(refusal))
        return self.tir_block(name)

    def _block_to_leir(self, name: str) -> str:
        found = self.leir_blocks(name)
        if not found:
            known = sorted({o.block for o in self.origins if o.block is not None})
            raise _Untranslatable(StaleStep(f"no block {name} in kernel {self.name}",
                                            f"kernel {self.name} has blocks {', '.join(known) or 'none'}"))
        refusal = self.block_refusal(found[0])
        if refusal is not None:
            raise _Untranslatable(NameNotTranslatable(f"steps on block {name} are not offered: {refusal}"))
        return found[0]

    def _loop_to_tir(self, scheduled: bool):
        def translate(leir_block: str, var: str) -> str:
            pairs = self.loop_pairs(leir_block) if leir_block in self.ctx.block_names else ()
            tir = next((t for t, l in pairs if l == var), var)
            if scheduled and tir != var:
                # TVM's primitives find the loop by the variable's name.
                raise _Untranslatable(NameNotTranslatable(f"loop {tir} is called {var} in LEIR"))
            return tir

        return translate

    def _loop_to_leir(self, scheduled: bool):
        def translate(leir_block: str, var: str) -> str:
            pairs = self.loop_pairs(leir_block) if leir_block in self.ctx.block_names else ()
            leir = next((l for t, l in reversed(pairs) if t == var), var)
            if scheduled and leir != var:
                raise _Untranslatable(NameNotTranslatable(
                    f"loop {var} is called {leir} in LEIR, and TVM's primitives find loops by name"))
            return leir

        return translate

    def _tensor(self, scheduled: bool):
        def translate(name: str) -> str:
            if scheduled and name in self._renamed_tensors:
                raise _Untranslatable(NameNotTranslatable(f"buffer {name} is renamed in LEIR"))
            return name

        return translate

    @cached_property
    def _renamed_tensors(self) -> set[str]:
        """LEIR tensors whose name is not their buffer's (a reserved word)."""
        buffers = set(self.python.buffers)
        return {t for t in self.ctx.analysis.tensors if t not in buffers} | {b for b in buffers if b not in self.ctx.analysis.tensors}

    # -------------------------------------------------------- ranges

    def python_span(self, leir_span: Span | None) -> Span | None:
        """The Python range of a LEIR range (see the module docstring)."""
        if leir_span is None:
            return None
        exact = [a for a in self.anchors if a.leir == leir_span]
        if exact:
            return exact[0].python
        around = [a for a in self.anchors if a.leir.start <= leir_span.start and leir_span.end <= a.leir.end]
        if around:
            return min(around, key=lambda a: a.leir.end - a.leir.start).python
        inside = [a for a in self.anchors if leir_span.start <= a.leir.start and a.leir.end <= leir_span.end]
        if inside:
            return Span(min(a.python.start for a in inside), max(a.python.end for a in inside))
        return None

    def leir_offsets(self, at: int) -> list[int]:
        """LEIR offsets a Python cursor position selects (see ``loops_at``:
        a loop header, an equation, a declaration)."""
        for kinds, use_select in ((("loop",), True), (("loop",), False), (("access",), False),
                                  (("equation",), False), (("tensor",), False)):
            hits = [a for a in self.anchors if a.kind in kinds
                    and (a.select if use_select else a.python) is not None
                    and _holds(a.select if use_select else a.python, at)]
            if hits:
                return sorted({a.leir.start for a in hits})
        # Inside a block but not on a store (T.reads, T.axis...): its equations.
        for block in self.python.blocks.values():
            if _holds(block.whole, at):
                stores = {(s.span.start, s.span.end) for s in block.stores}
                return sorted({a.leir.start for a in self.anchors
                               if a.kind == "equation" and (a.python.start, a.python.end) in stores})
        # Inside a for body elsewhere: the innermost enclosing for statement's loops.
        enclosing = [(whole, loops) for whole, loops in self.python.fors if _holds(whole, at)]
        if enclosing:
            _, loops = min(enclosing, key=lambda e: e[0].end - e[0].start)
            headers = {(l.header.start, l.header.end) for l in loops}
            return sorted({a.leir.start for a in self.anchors
                           if a.kind == "loop" and (a.python.start, a.python.end) in headers})
        return []


class _Untranslatable(Exception):
    def __init__(self, error: TransformError):
        self.error = error


#: Argument keys that name a block, and those that name loops of the step's block.
_BLOCK_KEYS = ("block", "also")
_TENSOR_KEYS = ("tensor",)


def _translate(args: dict, block, loop, tensor, *, to_leir: bool) -> dict:
    """``args`` with block, loop and tensor names translated; loops are
    loops of the block named next to them, and ``loop`` takes that block's
    LEIR name."""

    def block_of(before: dict, after: dict) -> str | None:
        if not isinstance(before.get("block"), str):
            return None
        return after["block"] if to_leir else before["block"]

    out = dict(args)
    for key in _BLOCK_KEYS:
        if isinstance(args.get(key), str):
            out[key] = block(args[key])
    leir_block = block_of(args, out)
    if leir_block is not None:
        if isinstance(args.get("loop"), str):
            out["loop"] = loop(leir_block, args["loop"])
        for key in ("loops", "order"):  # reorder's "order" names loops as "loops" does
            if isinstance(args.get(key), list) and all(isinstance(v, str) for v in args[key]):
                out[key] = [loop(leir_block, v) for v in args[key]]
    at = args.get("at")
    if isinstance(at, dict) and isinstance(at.get("block"), str):
        new_at = dict(at)
        new_at["block"] = block(at["block"])
        at_block = block_of(at, new_at)
        if isinstance(at.get("loop"), str) and at_block is not None:
            new_at["loop"] = loop(at_block, at["loop"])
        out["at"] = new_at
    for key in _TENSOR_KEYS:
        if isinstance(args.get(key), str):
            out[key] = tensor(args[key])
    return out


def _holds(span: Span, at: int) -> bool:
    return span.start <= at <= span.end


# ---------------------------------------------------------- loading


def _kernel_functions(doc) -> list[tuple[str, Any, Any, Any]]:
    """(name, PrimFunc, parsed kernel, GlobalVar or None) for every prim_func
    of the document, a module's functions included."""
    import tvm

    out = []
    for k in doc.kernels:
        if k.kind == "prim_func":
            if k.func is not None:
                out.append((k.name, k.func, k, None))
        elif k.module is not None:
            for gv, f in k.module.functions.items():
                if isinstance(f, tvm.tirx.PrimFunc):
                    out.append((gv.name_hint, f, k, gv))
    return out


def _function_span(found) -> Span:
    """The file range of a kernel function (inside its module for a module's)."""
    name, _, parsed, gv = found
    if gv is None:
        return parsed.source.span
    node = next((s for s in parsed.source.node.body if isinstance(s, ast.FunctionDef) and s.name == name), None)
    return parsed.source.lines.node_span(node) if node is not None else parsed.source.span


def load_kernel(text: str, kernel: str | None = None, at: int | None = None) -> TVMScriptKernel:
    """The kernel ``kernel`` of a Python file (the only one when None, or
    the one holding offset ``at``), raised to LEIR. KernelError otherwise."""
    from leir.bridge import tvmscript
    from leir.diagnostics import SourceText

    doc = tvmscript.load_document(text)
    errors = [d for d in doc.diagnostics if d.is_error]
    found = _kernel_functions(doc)
    names = [n for n, *_ in found]
    if not found and errors:
        first = errors[0]
        raise KernelError(f"{SourceText(text).format_location(first.span)}: {first.message}")
    if kernel is None:
        if not found:
            raise KernelError("no @T.prim_func kernel in this file")
        if len(found) > 1 and at is not None:
            holding = [f for f in found if _function_span(f).start <= at <= _function_span(f).end]
            if len(holding) == 1:
                found = holding
        if len(found) > 1:
            raise KernelError(f"several kernels ({', '.join(names)}); choose one with --kernel")
        chosen = found[0]
    else:
        matches = [f for f in found if f[0] == kernel]
        if not matches:
            broken = [k for k in doc.kernels if k.name == kernel]
            if broken and errors:
                inside = [d for d in errors if broken[0].source.span.start <= d.span.start <= broken[0].source.span.end]
                first = (inside or errors)[0]
                raise KernelError(f"kernel {kernel} does not parse: "
                                  f"{SourceText(text).format_location(first.span)}: {first.message}")
            raise KernelError(f"no kernel named {kernel} (found {', '.join(names) or 'none'})")
        if len(matches) > 1:
            raise KernelError(f"several kernels are named {kernel}")
        chosen = matches[0]
    name, func, parsed, gv = chosen
    inside = [d for d in errors if parsed.source.span.start <= d.span.start <= parsed.source.span.end]
    if inside:
        first = inside[0]
        raise KernelError(f"kernel {name} has errors: {SourceText(text).format_location(first.span)}: {first.message}")
    return _prepare(text, name, func, parsed, gv)


def _prepare(text: str, name: str, func, parsed, gv) -> TVMScriptKernel:
    from leir.parser import parse
    from leir.printer import print_program

    raiser = _TrackingRaiser(func)
    try:
        raised = raiser.run()
    except RaiseError as e:
        raise KernelError(f"kernel {name} cannot be transformed: LEIR cannot express it ({e})") from None
    raised_origins = [raiser.origins.get(id(site.equation)) for site in A.equation_sites(raised)]
    leir_text = print_program(raised)
    parsed_leir = parse(leir_text)
    analysis = analyze(parsed_leir.program)
    written = [site.equation.lhs.tensor for site in A.equation_sites(raised)]
    if (not parsed_leir.ok or not analysis.ok or None in raised_origins
            or [info.equation.lhs.tensor for info in analysis.equations] != written):
        raise KernelError(f"kernel {name}: its LEIR form does not read back (a bug in leir, not in the kernel)")
    ctx = Context(analysis, name)
    node = parsed.source.node
    if gv is not None:
        node = next(s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == name)
    python = _read_python(node, parsed.source.lines)
    kernel = TVMScriptKernel(text, name, parsed.source, func, parsed.module if gv is not None else None,
                             ctx, raised_origins, [], python)
    kernel.anchors = _anchors(kernel)
    return kernel


# ------------------------------------------------------- Python positions


def _read_python(function: ast.FunctionDef, lines) -> _PyKernel:
    blocks: dict[str, _PyBlock] = {}
    duplicates: set[str] = set()
    loose: list[_PyStore] = []
    fors: list[tuple[Span, list[_PyLoop]]] = []
    buffers: dict[str, Span] = {}
    for arg in function.args.args + function.args.kwonlyargs:
        buffers[arg.arg] = lines.node_span(arg)

    def store(s: ast.stmt, target: ast.expr, init: bool) -> _PyStore:
        subscripts = []
        for node in [target] + ([s.value] if getattr(s, "value", None) is not None else []):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
                    subscripts.append((sub.value.id, lines.node_span(sub)))
        subscripts.sort(key=lambda x: x[1].start)
        # The target first: ``C[i] = C[i] + ...`` points at the write.
        subscripts.sort(key=lambda x: x[1] != lines.node_span(target))
        return _PyStore(lines.node_span(s), init, subscripts)

    def visit(statements, loops: list[_PyLoop], block: _PyBlock | None, init: bool) -> None:
        for s in statements:
            if isinstance(s, ast.For):
                names = [n for n in (s.target.elts if isinstance(s.target, ast.Tuple) else [s.target])]
                header = Span(lines.node_span(s).start, lines.node_span(s.iter).end)
                new = [_PyLoop(n.id, header, lines.node_span(n)) for n in names if isinstance(n, ast.Name)]
                fors.append((lines.node_span(s), new))
                visit(s.body, loops + new, block, init)
            elif isinstance(s, ast.With):
                call = s.items[0].context_expr if s.items else None
                block_name = _block_name(call)
                if block_name is not None:
                    b = _PyBlock(block_name, Span(lines.node_span(s).start, lines.node_span(call).end),
                                 lines.node_span(s), list(loops))
                    if block_name in blocks:
                        duplicates.add(block_name)
                    else:
                        blocks[block_name] = b
                    visit(s.body, loops, b, False)
                else:
                    visit(s.body, loops, block, init or _is_call_to(call, "init"))
            elif isinstance(s, ast.Assign | ast.AugAssign | ast.AnnAssign):
                target = s.targets[0] if isinstance(s, ast.Assign) else s.target
                if isinstance(target, ast.Subscript):
                    st = store(s, target, init)
                    (block.stores if block is not None else loose).append(st)
                elif isinstance(target, ast.Name) and _is_call_to(getattr(s, "value", None), "alloc_buffer", "sblock_alloc_buffer"):
                    buffers.setdefault(target.id, lines.node_span(s))
            elif isinstance(s, ast.If):
                visit(s.body, loops, block, init)
                visit(s.orelse, loops, block, init)
            elif isinstance(s, ast.While | ast.Try):
                visit(s.body, loops, block, init)

    visit(function.body, [], None, False)
    return _PyKernel(blocks, duplicates, loose, fors, buffers)


def _block_name(call) -> str | None:
    if (_is_call_to(call, "sblock", "block") and call.args and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)):
        return call.args[0].value
    if _is_call_to(call, "sblock", "block"):
        for kw in call.keywords:
            if kw.arg == "name_hint" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
    return None


def _is_call_to(node, *attrs: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in attrs


def _anchors(kernel: TVMScriptKernel) -> list[_Anchor]:
    ctx, py = kernel.ctx, kernel.python
    anchors: list[_Anchor] = []
    stores_of: dict[str, list[_PyStore]] = {}
    for k, info in enumerate(ctx.analysis.equations):
        origin = kernel.origins[k]
        block = py.blocks.get(origin.block) if origin.block is not None else None
        candidates = block.stores if block is not None else py.loose_stores
        same_kind = [s for s in candidates if s.init == origin.init] or candidates
        written = info.equation.lhs.tensor
        writing = [s for s in same_kind if s.subscripts and s.subscripts[0][0] == written] or same_kind
        if not writing:
            continue
        st = writing[0]
        eq = info.equation
        if eq.span is not None:
            anchors.append(_Anchor(eq.span, st.span, "equation"))
        for node in A.walk(eq):
            if isinstance(node, A.Access) and node.span is not None:
                sub = next((s for name, s in st.subscripts if name == node.tensor), None)
                anchors.append(_Anchor(node.span, sub or st.span, "access"))
        stores_of.setdefault(ctx.block_names[k], []).append(st)
    for site in ctx.loop_sites:
        k = site.equations[0]
        origin = kernel.origins[k]
        tir_var = next((t for t, l in origin.loops if l == site.loop.var), None)
        block = py.blocks.get(origin.block) if origin.block is not None else None
        loops = block.loops if block is not None else [l for _, ls in py.fors for l in ls]
        match = [l for l in loops if l.var == tir_var]
        if match and site.loop.span is not None:
            loop = match[-1]
            anchors.append(_Anchor(site.loop.span, loop.header, "loop", loop.name))
    for t in ctx.analysis.tensors.values():
        if t.span is not None and t.name in py.buffers:
            anchors.append(_Anchor(t.span, py.buffers[t.name], "tensor"))
    return anchors


# ----------------------------------------------------------- candidates


def tvmscript_candidates(text: str, kernel: str | None = None, at: int | None = None) -> list[Candidate]:
    """Every step that applies to a kernel of a Python file, at character
    offset ``at`` of the file (everywhere when None). The steps name blocks
    and loops as the kernel does; each range is in the Python file."""
    from leir import transforms

    k = load_kernel(text, kernel, at)
    if at is None:
        found = transforms.candidates(k.ctx, None)
    else:
        seen: dict[str, Candidate] = {}
        for offset in k.leir_offsets(at):
            for c in transforms.candidates(k.ctx, offset):
                seen.setdefault(c.step.key, c)
        order = {t.ID: i for i, t in enumerate(transforms.ALL)}
        found = sorted(seen.values(), key=lambda c: order[c.step.id])
    out = []
    for c in found:
        scheduled = hasattr(transforms.get(c.step.id), "schedule")
        args = k.to_tir(c.step.args, scheduled)
        if args is None:
            continue
        out.append(Candidate(Step(c.step.id, args), retitle(c.title, c.step.args, args), k.python_span(c.span)))
    return out


def retitle(title: str, leir_args: dict, tir_args: dict) -> str:
    """The title with the LEIR name of a block replaced by the kernel's."""
    for key in _BLOCK_KEYS:
        old, new = leir_args.get(key), tir_args.get(key)
        if isinstance(old, str) and isinstance(new, str) and old != new:
            # Only where the title says "block C": LEIR names a block after
            # the tensor it writes, so a bare "C" may mean the tensor.
            title = re.sub(rf"\bblock {re.escape(old)}\b", f"block {new}", title)
    return title


# ------------------------------------------------------------- applying


def tvmscript_apply(text: str, step: Step, kernel: str | None = None) -> str:
    """The Python file with ``step`` applied to the kernel; the rest of the
    file is unchanged byte for byte. Typed errors as ``leir.transforms.apply``."""
    from leir import transforms
    from leir.bridge.tvmscript import print_kernel, replace_kernel

    k = load_kernel(text, kernel)
    t = transforms.get(step.id)
    scheduled = hasattr(t, "schedule")
    args = k.to_leir(step.args, scheduled)
    t.check(k.ctx, args)
    if scheduled:
        func, names = _scheduled(k, t, step, args), {}
    else:
        func, names = _rewritten(k, t, step, args)
    value = func if k.module is None else _with_function(k.module, k.name, func)
    printed = _renamed_blocks(print_kernel(k.source, value), names)
    return replace_kernel(text, k.source, printed)


def tvmscript_replay(text: str, trace: list[Step], kernel: str | None = None) -> str:
    """Apply a trace of steps in order, each to the file the previous gave."""
    current = text
    if kernel is None:
        kernel = load_kernel(text).name  # the same kernel throughout
    for n, step in enumerate(trace):
        try:
            current = tvmscript_apply(current, step, kernel)
        except TransformError as e:
            raise type(e)(f"step {n + 1} ({step.id}): {e.short}", e.detail, e.span) from None
    return current


class _BlockNames:
    """A schedule that finds blocks by their LEIR names: the step's module
    names blocks as LEIR does; the user's PrimFunc names them otherwise.

    Every TVM primitive takes its block first (a ``SBlockRV`` or a name);
    ``consumer_blocks`` and the like are lists of blocks. Anything else goes
    to the schedule unchanged."""

    def __init__(self, sch, names: dict[str, str]):
        self._sch = sch
        self._names = names

    def _block(self, value):
        if isinstance(value, str):
            return self._names.get(value, value)
        if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
            return type(value)(self._names.get(v, v) for v in value)
        return value

    def __getattr__(self, attr: str):
        value = getattr(self._sch, attr)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            if args:
                args = (self._block(args[0]),) + tuple(
                    self._block(a) if isinstance(a, list | tuple) else a for a in args[1:])
            for key in ("block", "sblock", "consumer_blocks", "blocks"):
                if key in kwargs:
                    kwargs[key] = self._block(kwargs[key])
            return value(*args, **kwargs)

        return call


def _scheduled(k: TVMScriptKernel, t, step: Step, args: dict):
    """The step's schedule primitives run on the user's own PrimFunc."""
    import tvm

    from leir.transforms.applying import raised_by_tvm, schedule_error_message

    names = {b: o.block for b, o in zip(k.ctx.block_names, k.origins) if o.block is not None}
    sch = tvm.s_tir.Schedule(k.func)
    try:
        t.schedule(_BlockNames(sch, names), k.ctx, args)
    except Exception as e:
        if not raised_by_tvm(e):
            raise
        detail = schedule_error_message(e)
        raise TvmRefused(f"TVM refused {step.id}: {detail.splitlines()[0] if detail else 'schedule error'}", detail) from None
    return sch.mod["main"]


def _rewritten(k: TVMScriptKernel, t, step: Step, args: dict):
    """The step done on the LEIR program, lowered back to a PrimFunc with
    the kernel's attributes, and the names its blocks get in the file."""
    import tvm

    from leir.bridge.lower import lower

    program = t.rewrite(k.ctx, args)
    after = analyze(program)
    if not after.ok:
        first = next(d for d in after.diagnostics if d.is_error)
        raise TransformError(f"{step.id} produced a program that does not check: {first.message}",
                             "this is a bug in leir's transformation, not in your program")
    new = lower(after, k.name)
    return tvm.tirx.PrimFunc(new.params, new.body, new.ret_type, k.func.attrs), _user_block_names(k, after)


def _with_function(module, name: str, func):
    import tvm

    return tvm.IRModule({gv: (func if gv.name_hint == name else f) for gv, f in module.functions.items()},
                        attrs=module.attrs)


_SBLOCK_NAME = re.compile(r'(\.s?block\(")([^"\\]*)("\))')


def _user_block_names(k: TVMScriptKernel, after: Analysis) -> dict[str, str]:
    """The names the blocks of a lowered, rewritten kernel get: lowering
    names them as LEIR does (after the tensor written), but the user named
    them. A block keeps the user's name when its equation is unchanged, or
    when it is the only writer of its tensor before and after the step;
    the others keep LEIR's name (made unique)."""
    before = {b: info for b, info in zip(k.ctx.block_names, k.ctx.analysis.equations) if k.block_refusal(b) is None}
    new_names = Context(after).block_names
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name, info in zip(new_names, after.equations):
        match = next((b for b, old in before.items() if old.equation == info.equation and b not in out.values()), None)
        if match is not None:
            out[name] = k.tir_block(match)
            taken.add(out[name])
            del before[match]
    for name, info in zip(new_names, after.equations):
        if name in out:
            continue
        tensor = info.equation.lhs.tensor
        old_writers = [b for b, old in zip(k.ctx.block_names, k.ctx.analysis.equations) if old.equation.lhs.tensor == tensor]
        new_writers = [e for e in after.equations if e.equation.lhs.tensor == tensor]
        if len(old_writers) == 1 and len(new_writers) == 1 and old_writers[0] in before:
            tir = k.tir_block(old_writers[0])
            if tir not in taken:
                out[name] = tir
                taken.add(tir)
    for name in new_names:
        if name not in out:
            unique, n = name, 0
            while unique in taken:
                n += 1
                unique = f"{name}_{n}"
            out[name] = unique
            taken.add(unique)
    return out


def _renamed_blocks(printed: str, names: dict[str, str]) -> str:
    return _SBLOCK_NAME.sub(lambda m: m.group(1) + names.get(m.group(2), m.group(2)) + m.group(3), printed)


# ------------------------------------------------------------ verifying


def tvmscript_verify(text_before: str, text_after: str, kernel: str | None = None,
                     seeds: tuple[int, ...] = SEEDS) -> Verification:
    """Build the kernel of both files with TVM and run them on the same
    random inputs (the seeds of ``leir.transforms.verify``, the last one
    integer-valued); every output must match by Step-TP's rule.

    Thread-bound loops run as serial loops on the CPU (as ``leir run``
    does), which the notes say."""
    from leir.bridge.comparison import compare
    from leir.bridge.run import RunError
    from leir.transforms.verify import Verification

    before = load_kernel(text_before, kernel)
    after = load_kernel(text_after, before.name)
    inputs_analysis = before.ctx.analysis
    params_before = _signature(before.func)
    params_after = _signature(after.func)
    if params_before != params_after:
        return Verification(False, notes=[f"the kernel's parameters changed from {params_before} to {params_after}"])
    roles = _param_roles(before)
    result = Verification(True)
    try:
        run_before, notes = _compiled(before.func)
        run_after, notes_after = _compiled(after.func)
    except RunError as e:
        return Verification(False, notes=[str(e)])
    result.notes.extend(dict.fromkeys(notes + notes_after))
    for seed in seeds:
        inputs = seed_inputs(inputs_analysis, seed, seeds)
        try:
            out_before = run_before(roles, inputs)
            out_after = run_after(roles, inputs)
        except RunError as e:
            return Verification(False, result.comparisons, result.notes + [str(e)])
        per_seed = {}
        for name, dtype in ((name, dtype) for name, role, dtype in roles if role == "out"):
            c = compare(out_after[name], out_before[name], dtype)
            per_seed[name] = c
            result.ok &= c.ok
        result.comparisons[seed] = per_seed
    if not result.comparisons or not any(result.comparisons.values()):
        result.ok = False
        result.notes.append("the kernel writes no parameter, so nothing was compared")
    return result


def _signature(func) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of each parameter (a buffer, in TVM 0.27)."""
    return [(str(p.name), tuple(int(d) for d in p.shape), str(p.dtype)) for p in func.params]


def _param_roles(k: TVMScriptKernel) -> list[tuple[str, str, str]]:
    """(LEIR tensor name, role, LEIR dtype) of each parameter, in order: the
    raiser declares the parameters first, in order."""
    tensors = list(k.ctx.analysis.tensors.values())
    decls = [d for d in k.ctx.program.decls][: len(k.func.params)]
    if len(decls) == len(k.func.params):
        return [(d.name, d.role, k.ctx.analysis.tensors[d.name].dtype) for d in decls]
    return [(t.name, t.role, t.dtype) for t in tensors[: len(k.func.params)]]


_THREAD_BINDING = re.compile(r'T\.thread_binding\(([^()]*?),\s*thread="[^"]*"\)')


def _compiled(func):
    """A callable running ``func`` on the CPU: (roles, inputs) -> outputs."""
    import tvm

    from leir.inputs import numpy_dtype
    from leir.bridge.lower import tvm_error_message
    from leir.bridge.run import BuildError, RunError, _loaded, build, host_target

    notes = []
    script = func.script()
    if "T.thread_binding(" in script:
        from leir.bridge.tvmscript import load_document

        # Read back like any document: screened, then parsed in the worker.
        serial = load_document(_THREAD_BINDING.sub(r"T.serial(\1)", script))
        funcs = [k.func for k in serial.kernels if k.func is not None]
        if not serial.ok or len(funcs) != 1:
            problem = next((d.message for d in serial.diagnostics if d.is_error), "no kernel")
            raise BuildError(f"cannot run the thread-bound kernel on the CPU: {problem}")
        func = funcs[0]
        notes.append("thread-bound loops were run as serial loops on the CPU")
    module = _loaded(build(func.with_attr("global_symbol", "main"), host_target()))
    device = tvm.cpu(0)

    def run(roles, inputs):
        try:
            arrays, outputs = [], {}
            for (name, role, dtype), shape in zip(roles, (s for _, s, _ in _signature(func))):
                if role == "in":
                    arrays.append(tvm.runtime.tensor(np.ascontiguousarray(inputs[name]), device))
                else:
                    outputs[name] = tvm.runtime.tensor(np.zeros(shape, dtype=numpy_dtype(dtype)), device)
                    arrays.append(outputs[name])
            module["main"](*arrays)
            device.sync()
            return {name: value.numpy() for name, value in outputs.items()}
        except Exception as exc:  # noqa: BLE001 - a kernel fault surfaces as a TVM error
            raise RunError(f"running the kernel failed: {tvm_error_message(exc)}") from exc

    return run, notes

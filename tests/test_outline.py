"""leir.bridge.outline: symbols, folding ranges and token classes of LEIR and
TVMScript text, without a server."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from leir.bridge import outline
from leir.bridge.document import load_leir

MATMUL = """\
in A: f16[64,32]
L^{64}_{i}
  L^{64}_{j}
    L^{32}_{k} [
      C_{i,j} += f32(A_{i,k}) * B_{k,j};
    ];
"""

TWO_NESTS = """\
# first
# second
P^{8}_{i} [
  T_{i} = X_{i} * 2;
  L^{4}_{j} [
    Y_{i,j} = T_{i} + X_{i};
  ];
];
Z = 1;
"""


def _tree(symbols, depth=0):
    out = []
    for s in symbols:
        out.append(("  " * depth) + f"{s.kind} {s.name} | {s.detail}")
        out.extend(_tree(s.children, depth + 1))
    return out


def _leir_symbols(text, name="k"):
    doc = load_leir(text)
    return outline.leir_symbols(text, name, doc.program, doc.analysis)


def test_leir_symbols_are_kernel_tensors_nests_and_loops():
    assert _tree(_leir_symbols(MATMUL, "matmul")) == [
        "kernel matmul | 1 loop nest, writes C",
        "  tensor A | in f16[64,32]",
        "  tensor C | out f32[64,64] (inferred)",
        "  tensor B | in f32[32,64] (inferred)",
        "  nest loop nest i, j, k | writes C",
        "    loop serial i | 64 iterations",
        "      loop serial j | 64 iterations",
        "        loop serial k | 32 iterations",
    ]


def test_nested_nests_hang_under_the_innermost_loop_and_bare_equations_are_listed():
    tree = _tree(_leir_symbols(TWO_NESTS))
    assert tree[-5:] == [
        "  nest loop nest i | writes T, Y",
        "    loop parallel i | 8 iterations",
        "      nest loop nest j | writes Y",
        "        loop serial j | 4 iterations",
        "  nest Z = | writes Z",
    ]


def test_symbol_selections_lie_inside_their_ranges_and_name_the_construct():
    [kernel] = _leir_symbols(MATMUL)

    def check(symbol):
        assert symbol.span.start <= symbol.selection.start <= symbol.selection.end <= symbol.span.end
        for child in symbol.children:
            check(child)

    check(kernel)
    by_name = {s.name: s for s in kernel.children}
    a = by_name["A"]
    assert MATMUL[a.selection.start:a.selection.end] == "A"
    assert MATMUL[a.span.start:a.span.end] == "in A: f16[64,32]"
    loop_k = by_name["loop nest i, j, k"].children[0].children[0].children[0]
    assert MATMUL[loop_k.selection.start:loop_k.selection.end] == "L^{32}_{k}"
    assert MATMUL[loop_k.span.start:loop_k.span.end].endswith("];")


def test_symbols_of_a_file_with_syntax_errors_cover_what_parsed():
    text = MATMUL.replace("* B_{k,j}", "* B_{k,j} $") + "L^{2}_{q} [ W_{q} = ; ];\n"

    tree = _tree(_leir_symbols(text))

    assert "    loop serial i | 64 iterations" in tree


def test_leir_folds_cover_loop_bodies_and_comment_runs():
    folds = outline.leir_folds(TWO_NESTS, load_leir(TWO_NESTS).program)

    assert [(f.start_line + 1, f.end_line + 1, f.kind) for f in folds] == [
        (1, 2, "comment"),
        (3, 7, "region"),  # P^{8}_{i} [ ... up to the line before its "];"
        (5, 6, "region"),
    ]


def test_a_one_line_nest_does_not_fold():
    text = "L^{4}_{i} [ Y_{i} = X_{i}; ];\n# only one comment line\n"
    assert outline.leir_folds(text, load_leir(text).program) == []


def _classes(text, tokens):
    return [(text[t.start:t.end], t.type, t.modifiers) for t in tokens]


def test_semantic_tokens_from_the_tree():
    text = "in A: f16[4] @s\nV^{4}_{i=2} [ Y_{i} = exp(f32(A_{i})) where i < 3; ];  # c\n"
    doc = load_leir(text)

    assert _classes(text, outline.semantic_tokens(text, doc.program, doc.analysis)) == [
        ("in", "keyword", ()), ("A", "variable", ("declaration", "readonly")), ("f16", "type", ()),
        ("4", "number", ()), ("s", "type", ()),
        ("V", "keyword", ()), ("4", "number", ()), ("i", "parameter", ("declaration",)),
        ("=", "operator", ()), ("2", "number", ()),
        ("Y", "variable", ()), ("i", "parameter", ()), ("=", "operator", ()),
        ("exp", "function", ()), ("f32", "type", ()), ("A", "variable", ("readonly",)), ("i", "parameter", ()),
        ("where", "keyword", ()), ("i", "parameter", ()), ("<", "operator", ()), ("3", "number", ()),
        ("# c", "comment", ()),
    ]


def test_semantic_tokens_of_text_that_does_not_parse_come_from_their_neighbours():
    text = "L^{4}_{i} [ Y^{f32,g}_{i} = max(X_{i}, $ ; ];"

    classes = _classes(text, outline.semantic_tokens(text))  # no tree at all

    assert ("L", "keyword", ()) in classes
    assert ("Y", "variable", ()) in classes
    assert ("f32", "type", ()) in classes and ("g", "type", ()) in classes
    assert ("max", "function", ()) in classes
    assert not any(word == "$" for word, _, _ in classes)


def test_tokens_are_ordered_and_disjoint_on_every_example(examples_dir):
    for path in sorted(examples_dir.glob("*.leir")):
        text = path.read_text()
        doc = load_leir(text)
        tokens = outline.semantic_tokens(text, doc.program, doc.analysis)
        assert tokens, path.name
        for before, after in zip(tokens, tokens[1:]):
            assert before.end <= after.start, (path.name, before, after)
        assert all(t.type in outline.TOKEN_TYPES for t in tokens)


def test_the_server_legend_is_the_library_legend():
    from leir_server.api.requests import text_document_semantic_tokens_full as tokens

    assert tuple(tokens.TOKEN_TYPES) == outline.TOKEN_TYPES
    assert tuple(tokens.TOKEN_MODIFIERS) == outline.TOKEN_MODIFIERS


PYTHON = textwrap.dedent('''\
    from tvm.script import tirx as T
    from tvm.script import ir as I

    # helpers
    # for the demo
    def not_a_kernel():
        for i in range(3):
            pass

    @T.prim_func(s_tir=True)
    def scale(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
        for i in T.serial(128):
            with T.sblock("B"):
                vi = T.axis.spatial(128, i)
                B[vi] = A[vi] * T.float32(2)

    @I.ir_module
    class Module:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((8, 8), "float32")):
            tmp = T.alloc_buffer((8,), "float32")
            for i, j in T.grid(8, 8):
                with T.sblock("A"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    A[vi, vj] = T.float32(0)
    ''')


def test_tvmscript_symbols_are_kernels_with_buffers_and_loops():
    assert _tree(outline.tvmscript_symbols(PYTHON)) == [
        "kernel scale | prim_func",
        "  tensor A | T.Buffer((128,), 'float32')",
        "  tensor B | T.Buffer((128,), 'float32')",
        "  loop i | T.serial(128)",
        "module Module | ir_module",
        "  kernel main | ",
        "    tensor A | T.Buffer((8, 8), 'float32')",
        "    tensor tmp | T.alloc_buffer((8,), 'float32')",
        "    loop i, j | T.grid(8, 8)",
    ]
    [scale, module] = outline.tvmscript_symbols(PYTHON)
    assert PYTHON[scale.selection.start:scale.selection.end] == "scale"
    assert PYTHON[scale.span.start:scale.span.end].startswith("@T.prim_func(s_tir=True)\ndef scale(")
    main = module.children[0]
    assert PYTHON[main.span.start:main.span.end].startswith("@T.prim_func(s_tir=True)\n    def main(")


def test_tvmscript_folds_cover_kernels_loops_and_comments():
    folds = outline.tvmscript_folds(PYTHON)

    lines = PYTHON.split("\n")
    assert [(lines[f.start_line].strip(), f.end_line - f.start_line, f.kind) for f in folds] == [
        ("# helpers", 1, "comment"),
        ('def scale(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):', 4, "region"),
        ("for i in T.serial(128):", 3, "region"),
        ("class Module:", 7, "region"),
        ('def main(A: T.Buffer((8, 8), "float32")):', 5, "region"),
        ("for i, j in T.grid(8, 8):", 3, "region"),
    ]


@pytest.mark.parametrize("text", ["def f(:\n", "x = 1\n", ""])
def test_python_without_kernels_has_an_empty_outline(text):
    assert outline.tvmscript_symbols(text) == []
    assert outline.tvmscript_folds(text) == []


def test_the_outline_imports_neither_tvm_nor_numpy():
    probe = (
        "import sys\n"
        "from leir.bridge import outline\n"
        f"outline.tvmscript_symbols({PYTHON!r})\n"
        f"outline.tvmscript_folds({PYTHON!r})\n"
        "print(sorted(m for m in ('tvm', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_example_has_a_consistent_outline(examples_dir):
    for path in sorted(examples_dir.glob("*.leir")):
        text = path.read_text()
        doc = load_leir(text)
        [kernel] = outline.leir_symbols(text, path.stem, doc.program, doc.analysis)

        def check(symbol):
            assert symbol.name, path.name
            assert symbol.span.start <= symbol.selection.start <= symbol.selection.end <= symbol.span.end, path.name
            for child in symbol.children:
                assert symbol.span.start <= child.span.start and child.span.end <= symbol.span.end, path.name
                check(child)

        check(kernel)
        assert {s.name for s in kernel.children if s.kind == "tensor"} == set(doc.analysis.tensors), path.name
        lines = text.count("\n") + 1
        for fold in outline.leir_folds(text, doc.program):
            assert 0 <= fold.start_line < fold.end_line < lines, path.name

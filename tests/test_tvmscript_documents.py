"""Python files with TVMScript kernels: discovery, screening, parsing with
TVM, error ranges, and splicing a transformed kernel back."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leir.diagnostics import SourceText
from leir.bridge.tvmscript import find_kernels, load_document, print_kernel, replace_kernel, screen_kernel

HEADER = "from tvm.script import tirx as T\nfrom tvm.script import ir as I\n\n"

MATMUL = '''
@T.prim_func(s_tir=True)
def matmul(A: T.Buffer((128, 128), "float32"), B: T.Buffer((128, 128), "float32"), C: T.Buffer((128, 128), "float32")):
    for i, j, k in T.grid(128, 128, 128):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''

FILL = '''
@T.prim_func(s_tir=True)
def fill(A: T.Buffer((128,), "float32")):
    for i in range(128):
        with T.sblock("A"):
            vi = T.axis.spatial(128, i)
            A[vi] = T.float32(1)
'''


def python_file(*parts: str, header: str = HEADER) -> str:
    return header + "\n".join(textwrap.dedent(p).strip("\n") + "\n" for p in parts)


def covered(text: str, span) -> str:
    return text[span.start : span.end]


def where(text: str, span) -> str:
    """``line:col`` (1-based) of a span's start."""
    return SourceText(text).format_location(span)


def only(items):
    assert len(items) == 1, items
    return items[0]


def kernel_with(body_line: str, signature: str = 'A: T.Buffer((128,), "float32")') -> str:
    return python_file(
        f"""
        @T.prim_func(s_tir=True)
        def kernel({signature}):
            for i in range(128):
                with T.sblock("A"):
                    vi = T.axis.spatial(128, i)
                    {body_line}
        """
    )


# ----------------------------------------------------------------- discovery


def test_find_kernels_lists_functions_and_modules_in_file_order():
    text = python_file(
        MATMUL,
        """
        @I.ir_module
        class Module:
            @T.prim_func(s_tir=True)
            def first(A: T.Buffer((4,), "float32")):
                A[0] = T.float32(0)

            @T.prim_func(private=True)
            def second(A: T.Buffer((4,), "float32")):
                A[1] = T.float32(1)
        """,
        FILL,
    )
    kernels, diagnostics = find_kernels(text)

    assert diagnostics == []
    assert [(k.name, k.kind) for k in kernels] == [
        ("matmul", "prim_func"),
        ("Module", "ir_module"),
        ("fill", "prim_func"),
    ]
    for kernel in kernels:
        assert kernel.text == covered(text, kernel.span)
        assert kernel.text.startswith("@")
        assert covered(text, kernel.name_span) == kernel.name
    assert kernels[0].text.endswith("C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]")
    assert kernels[1].text.endswith("A[1] = T.float32(1)")


def test_find_kernels_in_indented_definitions():
    text = python_file(
        """
        class TestSplit:
            @T.prim_func(s_tir=True)
            def before(A: T.Buffer((8,), "float32")):
                A[0] = T.float32(0)  # a comment after the body


        def make():
            if True:
                @I.ir_module
                class Module:
                    @T.prim_func(s_tir=True)
                    def main(A: T.Buffer((8,), "float32")):
                        A[0] = T.float32(0)
            return Module
        """
    )
    before, module = find_kernels(text)[0]

    assert (before.name, before.indent) == ("before", "    ")
    assert before.text.endswith("A[0] = T.float32(0)")
    assert where(text, before.span) == "5:5"
    assert (module.name, module.indent, module.kind) == ("Module", " " * 8, "ir_module")


def test_find_kernels_recognises_every_spelling_of_the_decorators():
    text = python_file(
        """
        import tvm
        from tvm import script
        from tvm.script import tir as Tlegacy
        from tvm.script import ir_module

        @tvm.script.tir.prim_func
        def a(): pass

        @script.tirx.prim_func(private=True)
        def b(): pass

        @Tlegacy.prim_func
        def c(): pass

        @ir_module
        class D: pass

        @tvm.script.ir_module
        class E: pass
        """,
        header="",
    )
    kernels, _ = find_kernels(text)
    assert [(k.name, k.kind) for k in kernels] == [
        ("a", "prim_func"),
        ("b", "prim_func"),
        ("c", "prim_func"),
        ("D", "ir_module"),
        ("E", "ir_module"),
    ]


def test_find_kernels_ignores_comments_strings_and_other_decorators():
    text = python_file(
        '''
        # @T.prim_func
        # def commented(): pass
        DOC = """
        @T.prim_func
        def in_a_string(): pass
        """

        @T.macro
        def helper(): pass

        @I.ir_module
        def not_a_class(): pass

        @T.prim_func
        class NotAFunction: pass
        '''
    )
    assert find_kernels(text) == ([], [])


def test_a_python_syntax_error_is_one_diagnostic_and_no_kernels():
    text = python_file(MATMUL, "def broken(:\n    pass\n")
    kernels, diagnostics = find_kernels(text)

    assert kernels == []
    diagnostic = only(diagnostics)
    assert (diagnostic.code, diagnostic.severity) == ("python-syntax", "error")
    assert where(text, diagnostic.span) == "13:12"
    assert covered(text, diagnostic.span) == ":"
    assert load_document(text).diagnostics == (diagnostic,)


# ------------------------------------------------------------------- parsing


def test_load_document_parses_functions_and_modules():
    text = python_file(
        MATMUL,
        """
        @I.ir_module
        class Module:
            @T.prim_func(s_tir=True)
            def first(A: T.Buffer((4,), "float32")):
                A[0] = T.float32(0)

            @T.prim_func(s_tir=True)
            def second(A: T.Buffer((4,), "float32")):
                A[1] = T.float32(1)
        """,
    )
    doc = load_document(text)

    assert doc.diagnostics == ()
    matmul, module = doc.kernels
    assert matmul.func is not None and matmul.func.attrs["global_symbol"] == "matmul"
    assert [gv.name_hint for gv in matmul.module.functions] == ["matmul"]
    assert module.func is None
    assert sorted(gv.name_hint for gv in module.module.functions) == ["first", "second"]


def test_pre_027_tir_files_parse_as_s_tir():
    text = python_file(
        """
        @T.prim_func
        def fill(A: T.Buffer((128,), "float32")):
            for i in range(128):
                with T.block("A"):
                    vi = T.axis.spatial(128, i)
                    T.block_attr({"note": 1})
                    A[vi] = T.float32(1)

        @T.prim_func(private=True,)
        def broken(A: T.Buffer((128,), "float32")):
            A[0, 0] = T.float32(1)
        """,
        header="from tvm.script import tir as T\n\n",
    )
    doc = load_document(text)

    fill, broken = doc.kernels
    assert bool(fill.func.attrs["s_tir"])
    assert broken.func is None
    assert covered(text, only(doc.diagnostics).span) == "A[0, 0] = T.float32(1)"


def test_kernels_written_through_the_tvm_package_parse():
    text = python_file(
        """
        import tvm

        @tvm.script.tir.prim_func
        def fill(A: tvm.script.tir.Buffer((128,), "float32")):
            for i in range(128):
                with tvm.script.tir.block("A"):
                    vi = tvm.script.tir.axis.spatial(128, i)
                    A[vi] = tvm.script.tir.float32(1)
        """,
        header="",
    )
    doc = load_document(text)
    assert doc.diagnostics == ()
    assert only(doc.kernels).func is not None


def test_literal_module_constants_are_usable_and_others_are_refused():
    text = python_file(
        """
        N = 128
        DTYPE = "float32"
        M = N * 2

        @T.prim_func(s_tir=True)
        def uses_constants(A: T.Buffer((N,), DTYPE)):
            for i in range(N):
                with T.sblock("A"):
                    vi = T.axis.spatial(N, i)
                    A[vi] = T.float32(1)

        @T.prim_func(s_tir=True)
        def uses_computed(A: T.Buffer((M,), "float32")):
            A[0] = T.float32(1)
        """
    )
    doc = load_document(text)

    assert doc.kernels[0].func is not None
    assert doc.kernels[1].func is None
    diagnostic = only(doc.diagnostics)
    assert diagnostic.code == "untrusted-code"
    assert "defined outside the kernel" in diagnostic.message
    assert covered(text, diagnostic.span) == "M"


def test_a_kernel_with_everything_a_handwritten_kernel_contains_parses():
    text = python_file(
        '''
        N = 128

        @T.prim_func(s_tir=True)
        def everything(a: T.handle, B: T.Buffer((N,), "float32"), n: T.int32):
            """A docstring."""
            T.func_attr({"global_symbol": "everything", "tir.noalias": True})
            A = T.match_buffer(a, (N, 4), "float32")
            acc = T.alloc_buffer((N,), "float32", scope="local")
            for i, j in T.grid(N, 4):
                with T.sblock("sum"):
                    vi, vj = T.axis.remap("SR", [i, j])
                    T.where(i < n)
                    T.reads(A[vi, 0:4])
                    T.writes(acc[vi])
                    T.sblock_attr({"note": "x"})
                    with T.init():
                        acc[vi] = T.float32(0)
                    acc[vi] = acc[vi] + T.if_then_else(vj % 2 == 0, A[vi, vj], -A[vi, vj] * T.float32(2))
            for i in T.serial(N, annotations={"pragma_unroll_explicit": 1}):
                with T.sblock("out"):
                    vi = T.axis.spatial(N, i)
                    if vi < 64 and not vi > 100:
                        B[vi] = T.max(acc[vi], T.float32(0)) * T.exp(T.Cast("float32", vi))
                    else:
                        B[vi] = T.float32(1) if True else T.float32(2)
        '''
    )
    doc = load_document(text)
    assert doc.diagnostics == ()
    assert only(doc.kernels).func is not None


# ------------------------------------------------------------- error ranges


def test_tvm_error_maps_to_its_range_in_an_indented_kernel():
    text = python_file(
        """
        class Tests:
            @I.ir_module
            class Module:
                @T.prim_func(s_tir=True)
                def fill(A: T.Buffer((128,), "float32")):
                    for i in range(128):
                        with T.sblock("A"):
                            vi = T.axis.spatial(128, i)
                            A[vi, vi] = T.float32(1)
        """
    )
    diagnostic = only(load_document(text).diagnostics)

    assert (diagnostic.code, diagnostic.severity) == ("tvmscript-error", "error")
    assert "1-dimensional" in diagnostic.message
    assert where(text, diagnostic.span) == "12:21"
    assert covered(text, diagnostic.span) == "A[vi, vi] = T.float32(1)"


def test_tvm_error_range_counts_characters_on_a_non_ascii_line():
    text = kernel_with('vé = vi; A[vé, vé] = T.float32(1)  # é')
    diagnostic = only(load_document(text).diagnostics)
    assert covered(text, diagnostic.span) == "A[vé, vé] = T.float32(1)"


def test_undefined_name_is_reported_by_tvm_at_the_name():
    text = kernel_with("A[vi] = missing + T.float32(1)")
    diagnostic = only(load_document(text).diagnostics)

    assert diagnostic.code == "tvmscript-error"
    assert "missing" in diagnostic.message
    assert "A[vi] = missing + T.float32(1)" in covered(text, diagnostic.span)


def test_a_kernel_that_is_not_well_formed_is_reported_at_its_name():
    text = python_file(
        """
        @T.prim_func
        def no_s_tir(A: T.Buffer((128,), "float32")):
            for i in range(128):
                with T.sblock("A"):
                    vi = T.axis.spatial(128, i)
                    A[vi] = T.float32(1)
        """
    )
    diagnostic = only(load_document(text).diagnostics)
    assert "not well-formed" in diagnostic.message
    assert covered(text, diagnostic.span) == "no_s_tir"


# ------------------------------------------------------------------ security


def payload(path) -> str:
    """A Python expression that creates ``path`` when evaluated."""
    return f'__import__("os").system("touch {path}")'


def test_control_tvm_itself_runs_code_inside_a_kernel(tmp_path):
    """Why the screen exists: TVM's parser evaluates the payload."""
    import tvm.script

    marker = tmp_path / "pwned"
    source = kernel_with(f"A[vi] = T.float32(open({str(marker)!r}, 'w').close() is None)")
    try:
        tvm.script.from_source(source.removeprefix(HEADER))
    except Exception:  # noqa: BLE001 - whether TVM accepts the kernel does not matter here
        pass
    assert marker.exists()


@pytest.mark.parametrize(
    "place, kernel, underlined",
    [
        (
            "body",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")):
                x = T.int32(PAYLOAD)
            ''',
            "__import__",
        ),
        (
            "annotation",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((PAYLOAD,), "float32")):
                A[0] = T.float32(0)
            ''',
            "__import__",
        ),
        (
            "return annotation",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")) -> PAYLOAD:
                A[0] = T.float32(0)
            ''',
            "__import__",
        ),
        (
            "decorator",
            '''
            @T.prim_func(s_tir=PAYLOAD)
            def f(A: T.Buffer((1,), "float32")):
                A[0] = T.float32(0)
            ''',
            "PAYLOAD",
        ),
        (
            "second decorator",
            '''
            @(PAYLOAD)
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")):
                A[0] = T.float32(0)
            ''',
            "PAYLOAD",
        ),
        (
            "default argument",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32") = PAYLOAD):
                A[0] = T.float32(0)
            ''',
            "__import__",
        ),
        (
            "nested expression",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")):
                A[0] = T.float32(1) + T.max(T.float32(0), T.float32((1 if True else PAYLOAD)))
            ''',
            "__import__",
        ),
        (
            "func_attr dict",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")):
                T.func_attr({"global_symbol": "f", "evil": PAYLOAD})
                A[0] = T.float32(0)
            ''',
            "__import__",
        ),
        (
            "ir_module class body",
            '''
            @I.ir_module
            class M:
                x = PAYLOAD

                @T.prim_func(s_tir=True)
                def f(A: T.Buffer((1,), "float32")):
                    A[0] = T.float32(0)
            ''',
            "x = PAYLOAD",
        ),
        (
            "ir_module function",
            '''
            @I.ir_module
            class M:
                @T.prim_func(s_tir=True)
                def f(A: T.Buffer((1,), "float32")):
                    with T.sblock(PAYLOAD):
                        A[0] = T.float32(0)
            ''',
            "__import__",
        ),
        (
            "comm_reducer lambda",
            '''
            @T.prim_func(s_tir=True)
            def f(A: T.Buffer((1,), "float32")):
                T.attr(T.comm_reducer(lambda x, y: PAYLOAD, [T.float32(0)]), "reduce_scope", 0)
            ''',
            "__import__",
        ),
    ],
)
def test_payloads_are_refused_where_they_are_and_never_run(tmp_path, place, kernel, underlined):
    marker = tmp_path / "pwned"
    text = python_file(kernel.replace("PAYLOAD", payload(marker)))
    doc = load_document(text)

    assert not marker.exists(), place
    assert doc.kernels and all(k.func is None and k.module is None for k in doc.kernels), place
    diagnostic = doc.diagnostics[0]
    assert (diagnostic.code, diagnostic.severity) == ("untrusted-code", "error"), place
    assert covered(text, diagnostic.span) == underlined.replace("PAYLOAD", payload(marker)), place


@pytest.mark.parametrize(
    "line, underlined",
    [
        ("x = open(MARKER, 'w')", "open"),
        ("x = T.utils.os.system('touch ' + MARKER)", "T.utils.os.system"),
        ("x = T.macro(vi)", "T.macro"),
        ("x = T.call_extern('int32', 'system', 'touch ' + MARKER)", "T.call_extern"),
        ("x = vi.__class__", "vi.__class__"),
        ("x = T.__dict__", "T.__dict__"),
        ("x = [v for v in range(3)]", "[v for v in range(3)]"),
        ("x = (lambda: 0)()", "lambda: 0"),
        ("x = f'{vi!r:{vi}}'", "f'{vi!r:{vi}}'"),
        ("x = (y := 1)", "y := 1"),
        ("x = T.max(*[vi, vi])", "*[vi, vi]"),
        ("x = T.max(**{'a': vi})", "**{'a': vi}"),
        ("import os", "import os"),
        ("x = os.system", "os"),
        ("x = T", "T"),
        ("x = 2 ** 100000", "2 ** 100000"),
        ("x = 'a' * 100000", "'a' * 100000"),
        ("A[vi] = A.scope()", "A.scope"),
        ("x = '{0.__class__}'.format(vi)", "'{0.__class__}'"),
        ("x = 'a.b'.format(vi)", "'a.b'.format"),
        ("x = T.float32.mro()", "T.float32.mro"),
        ("x = range", "range"),
        ("del vi", "del vi"),
    ],
)
def test_refused_constructs_in_a_kernel_body(tmp_path, line, underlined):
    marker = repr(str(tmp_path / "pwned"))
    text = "import os\n" + kernel_with(line.replace("MARKER", marker))
    diagnostics = load_document(text).diagnostics

    assert not (tmp_path / "pwned").exists()
    assert diagnostics and diagnostics[0].code == "untrusted-code"
    assert covered(text, diagnostics[0].span) == underlined


def test_a_builtin_rebound_in_an_inner_scope_is_refused(tmp_path):
    """TVM falls back to Python's builtins for a name out of scope, so
    binding ``open`` in a loop body does not make a later ``open`` safe."""
    marker = tmp_path / "pwned"
    text = python_file(
        f"""
        @T.prim_func(s_tir=True)
        def f(A: T.Buffer((1,), "float32")):
            for i in range(1):
                open = T.int32(0)
            x = open({str(marker)!r}, "w")
        """
    )
    diagnostics = load_document(text).diagnostics

    assert not marker.exists()
    # The path is refused too: a kernel's strings are names, dtypes or scopes.
    assert [covered(text, d.span) for d in diagnostics] == ["open", "open", repr(str(marker))]


def test_the_tvm_package_is_not_reachable_through_its_alias(tmp_path):
    text = python_file(
        """
        import tvm

        @tvm.script.tirx.prim_func(s_tir=True)
        def f(A: tvm.script.tirx.Buffer((1,), "float32")):
            x = tvm.support.libinfo()
        """,
        header="",
    )
    diagnostic = only(load_document(text).diagnostics)
    assert covered(text, diagnostic.span) == "tvm.support.libinfo"


# -------------------------------------------- printed kernels pass the screen


def scheduled_modules():
    """TVM-printed modules after the schedule primitives leir applies."""
    import tvm

    matmul = only(load_document(python_file(MATMUL)).kernels).func

    def fresh():
        sch = tvm.s_tir.Schedule(matmul)
        block = sch.get_sblock("C")
        return sch, block, sch.get_loops(block)

    sch, block, (i, j, k) = fresh()
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, i1, j1)
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, j0)
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, j0)
    sch.bind(i0, "blockIdx.x")
    sch.bind(j0, "threadIdx.x")
    sch.decompose_reduction(block, k)
    sch.annotate(i1, "pragma_unroll_explicit", 1)
    sch.unroll(j1)
    yield "tiled for a GPU", sch.mod

    sch, block, (i, j, k) = fresh()
    k0, k1 = sch.split(k, [None, 4])
    rf = sch.rfactor(k1, 0)
    sch.parallel(sch.get_loops(rf)[0])
    yield "rfactor", sch.mod

    sch, block, (i, j, k) = fresh()
    sch.fuse(i, j)
    sch.blockize(sch.get_loops(block)[-1])
    yield "fuse and blockize", sch.mod


def test_printed_scheduled_kernels_pass_the_screen_and_parse_back():
    import tvm

    for name, module in scheduled_modules():
        printed = module.script()
        doc = load_document(printed)
        assert doc.diagnostics == (), (name, doc.diagnostics)
        tvm.ir.assert_structural_equal(only(doc.kernels).module, module)


def test_printed_cross_thread_reduction_passes_the_screen():
    """Lowered reductions print ``T.comm_reducer(lambda x0, y0: ...)``."""
    import tvm

    text = python_file(
        """
        @T.prim_func(s_tir=True)
        def row_max(A: T.Buffer((64, 256), "float32"), M: T.Buffer((64,), "float32")):
            for i in T.thread_binding(64, thread="blockIdx.x"):
                for k in T.thread_binding(256, thread="threadIdx.x"):
                    with T.sblock("max"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        with T.init():
                            M[vi] = T.min_value("float32")
                        M[vi] = T.max(M[vi], A[vi, vk])
        """
    )
    func = only(load_document(text).kernels).func
    lowered = tvm.s_tir.transform.LowerCrossThreadReduction()(tvm.IRModule({"main": func}))
    printed = lowered.script()
    assert "lambda" in printed
    kernel = only(find_kernels(printed)[0])
    assert screen_kernel(kernel) == []


# ------------------------------------------------------------------ splicing


def test_replace_kernel_splices_a_printed_kernel_at_the_original_indentation():
    import tvm

    text = python_file(
        """
        class Tests:
            @T.prim_func(s_tir=True)
            def fill(A: T.Buffer((128,), "float32")):
                for i in range(128):
                    with T.sblock("A"):
                        vi = T.axis.spatial(128, i)
                        A[vi] = T.float32(1)

            other = 1
        """
    )
    kernel = only(load_document(text).kernels)
    sch = tvm.s_tir.Schedule(kernel.func)
    sch.split(sch.get_loops(sch.get_sblock("A"))[0], [None, 32])
    scheduled = sch.mod["main"]

    new_text = replace_kernel(text, kernel, print_kernel(kernel, scheduled))

    assert new_text.startswith(text[: kernel.source.span.start])
    assert new_text.endswith("\n\n    other = 1\n")
    assert "    @T.prim_func(s_tir=True)\n    def fill(" in new_text
    assert "# from tvm.script" not in new_text
    reloaded = only(load_document(new_text).kernels)
    tvm.ir.assert_structural_equal(reloaded.func, scheduled)


def test_replace_kernel_refuses_a_kernel_from_another_version_of_the_text():
    text = python_file(FILL)
    kernel = only(find_kernels(text)[0])
    with pytest.raises(ValueError):
        replace_kernel("# edited\n" + text, kernel, kernel.text)


# ---------------------------------------------------------------------- fuzz

FRAGMENTS = [
    "@T.prim_func", "(s_tir=True)", "def ", "class ", "@I.ir_module\n", "T.sblock(", "T.axis.remap(",
    "__import__('os')", "open(MARKER, 'w')", "lambda: 0", "[x for x in y]", "T.", "(", ")", "[", "]",
    ":", ",", "=", "\n", "\r", "\r\n", "    ", "\t", "é", "\0", "#", '"', "'''", "\\", "**", "<<", "*",
    "range(", "A[vi]", "vi", "0", "1e400", "-", "with ", "for ", " in ", "if ", "else:", "return",
]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(0, 12), st.sampled_from(FRAGMENTS) | st.text(max_size=8)),
        max_size=6,
    )
)
def test_mutated_kernel_files_never_raise_and_spans_stay_in_the_text(tmp_path, edits):
    text = python_file(MATMUL, FILL)
    marker = repr(str(tmp_path / "pwned"))
    for position, deleted, inserted in edits:
        at = position % (len(text) + 1)
        text = text[:at] + inserted.replace("MARKER", marker) + text[at + deleted :]

    doc = load_document(text)

    assert not (tmp_path / "pwned").exists()
    for diagnostic in doc.diagnostics:
        assert 0 <= diagnostic.span.start <= diagnostic.span.end <= len(text)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_random_text_never_raises(text):
    doc = load_document(text)
    for diagnostic in doc.diagnostics:
        assert 0 <= diagnostic.span.start <= diagnostic.span.end <= len(text)

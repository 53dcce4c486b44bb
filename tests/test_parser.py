"""The LEIR parser: every Step-TP string reads unchanged, nodes carry exact
spans, and a file with several errors reports all of them, each at its
range, while the rest of the file still parses.

Ranges are written as ``(code, "line:col", text)``: the diagnostic's code,
where it starts (1-based, as a compiler prints it) and the text it covers.
"""

from __future__ import annotations

import pytest

from leir import ast as A
from leir.lexer import tokenize
from leir.parser import MAX_EXPR_DEPTH, ParseResult, parse, parse_expression
from leir.printer import print_program

# ------------------------------------------------------------------ fixtures

#: The matrix multiply of docs/reference/step-tp.md, bound to threadIdx.x.
MATMUL_STEP_TP = (
    "B^{512}_{tx=0}L^{256}_{a=0}L^{128}_{k=0}"
    "[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];"
)

#: Two real strings from the Step-TP repository (a layer norm, in parts).
LAYERNORM_STATS_STEP_TP = (
    "B^{96}_{tx=0}L^{94}_{a=0}L^{30}_{c=0}L^{89}_{d=0}[F^{f16,g}_{tx,a}=F^{f16,g}_{tx,a}+A^{f16,g}_{tx,a,c,d};];"
    "B^{96}_{tx=0}L^{94}_{a=0}[G^{f16,g}_{tx,a}=F^{f16,g}_{tx,a}/2670;];"
    "B^{96}_{tx=0}L^{94}_{a=0}L^{30}_{c=0}L^{89}_{d=0}"
    "[H^{f16,g}_{tx,a}=H^{f16,g}_{tx,a}+(A^{f16,g}_{tx,a,c,d}-G^{f16,g}_{tx,a})**2;];"
)
LAYERNORM_APPLY_STEP_TP = (
    "B^{96}_{tx=0}L^{94}_{a=0}[I^{f16,g}_{tx,a}=H^{f16,g}_{tx,a}/2670;];"
    "B^{96}_{tx=0}L^{94}_{a=0}L^{30}_{c=0}L^{89}_{d=0}"
    "[C^{f16,g}_{tx,a,c,d}=D^{f16,g}_{a}*((A^{f16,g}_{tx,a,c,d}-G^{f16,g}_{tx,a})/sqrt(I^{f16,g}_{tx,a}+1e-05))+E^{f16,g}_{a};];"
)

#: A scalar accumulator: no subscript, only the superscript.
SCALAR_SUM = "L^{64}_{i=0}[S^{f32,g}=S^{f32,g}+X^{f32,g}_{i};];"

#: Every thread axis bound by a B loop.
THREAD_AXES_NEST = (
    "B^{2}_{bz=0}B^{4}_{by=0}B^{8}_{bx=0}B^{2}_{tz=0}B^{4}_{ty=0}B^{8}_{tx=0}"
    "[Y^{f32,g}_{bz,by,bx,tz,ty,tx}=X^{f32,g}_{bz,by,bx,tz,ty,tx};];"
)

#: Every function, and conditions with comparisons, & and |.
EVERY_FUNCTION = (
    "L^{8}_{i=0}[Y^{f32,g}_{i}=exp(X^{f32,g}_{i})+log(X^{f32,g}_{i})+sqrt(X^{f32,g}_{i})+abs(X^{f32,g}_{i})"
    "+erf(X^{f32,g}_{i})+max(X^{f32,g}_{i},0.0)+min(X^{f32,g}_{i},1.0)+tanh(X^{f32,g}_{i})"
    "+if_then_else(X^{f32,g}_{i}<0.0&i>=2|X^{f32,g}_{i}==1.0,X^{f32,g}_{i},-X^{f32,g}_{i})"
    "+if_then_else(i<=3|i>5&i!=7,1.0,2.0);];"
)

#: A nest inside a nest, followed by an equation of the outer body.
NESTED_UNITS = "L^{4}_{i=0}[L^{3}_{j=0}[A^{f32,g}_{i,j}=X^{f32,g}_{i,j}*2;];B^{f32,g}_{i}=X^{f32,g}_{i,0};];"

#: Equations outside any brackets, as Step-TP writes initialisations.
BARE_EQUATIONS = "S^{f32,g}=0;L^{4}_{i=0}[S^{f32,g}=S^{f32,g}+X^{f32,g}_{i};];T^{f32,g}=S^{f32,g}*2;"

STEP_TP_STRINGS = {
    "matmul": MATMUL_STEP_TP,
    "layernorm_stats": LAYERNORM_STATS_STEP_TP,
    "layernorm_apply": LAYERNORM_APPLY_STEP_TP,
    "scalar_sum": SCALAR_SUM,
    "thread_axes": THREAD_AXES_NEST,
    "every_function": EVERY_FUNCTION,
    "nested_units": NESTED_UNITS,
    "bare_equations": BARE_EQUATIONS,
}


def _clean(text: str) -> ParseResult:
    result = parse(text)
    assert result.diagnostics == [], [(d.code, d.message) for d in result.diagnostics]
    return result


def _ranges(text: str, result: ParseResult) -> list[tuple[str, str, str]]:
    """Each diagnostic as (code, "line:col", covered text)."""
    return [
        (d.code, result.source.format_location(d.span), text[d.span.start : d.span.end])
        for d in result.diagnostics
    ]


def _equations(program: A.Program) -> list[A.Equation]:
    return [site.equation for site in A.equation_sites(program)]


# ------------------------------------------------------------ Step-TP input


@pytest.mark.parametrize("text", STEP_TP_STRINGS.values(), ids=STEP_TP_STRINGS.keys())
def test_step_tp_string_parses_and_prints_back_unchanged(text):
    result = _clean(text)
    assert print_program(result.program, "compact") == text


def test_step_tp_matmul_structure():
    program = _clean(MATMUL_STEP_TP).program
    (unit,) = program.units
    assert [(l.kind, l.extent, l.var, l.start) for l in unit.loops] == [("B", 512, "tx", 0), ("L", 256, "a", 0), ("L", 128, "k", 0)]
    (eq,) = unit.body
    assert eq.lhs == A.Access("C", (A.Var("tx"), A.Var("a")), "f32", "g")
    assert eq.rhs == A.Binary(
        "+",
        A.Access("C", (A.Var("tx"), A.Var("a")), "f32", "g"),
        A.Binary("*", A.Access("X", (A.Var("tx"), A.Var("k")), "f32", "g"), A.Access("W", (A.Var("k"), A.Var("a")), "f32", "g")),
    )


def test_layernorm_keeps_literals_as_written():
    program = _clean(LAYERNORM_APPLY_STEP_TP).program
    literals = [n for n in A.walk(program) if isinstance(n, A.Num)]
    assert [(n.text, n.value) for n in literals] == [("2670", 2670), ("1e-05", 1e-05)]


def test_one_line_program_of_many_units():
    units = [
        f"L^{{{n + 1}}}_{{i=0}}[T{n}^{{f32,g}}_{{i}}=X^{{f32,g}}_{{i}}*{n};];" for n in range(200)
    ]
    text = "".join(units)
    program = _clean(text).program
    assert len(program.units) == 200
    assert print_program(program, "compact") == text


def _tokens_joined(text: str, sep) -> str:
    """``text`` with ``sep(k)`` inserted before the k-th character wherever
    a token starts (never inside a name, a number or an operator)."""
    starts = {tok.start for tok in tokenize(text, composite=False)}
    return "".join((sep(k) if k in starts and k > 0 else "") + ch for k, ch in enumerate(text))


@pytest.mark.parametrize("text", STEP_TP_STRINGS.values(), ids=STEP_TP_STRINGS.keys())
def test_whitespace_between_any_two_tokens_is_insignificant(text):
    expected = _clean(text).program
    spaced = _tokens_joined(text, lambda k: " \n\t "[k % 4] * (1 + k % 3))
    assert spaced != text
    program = _clean(spaced).program
    assert program == expected
    assert print_program(program, "compact") == text


def test_space_after_commas_as_some_step_tp_generators_write():
    text = MATMUL_STEP_TP.replace(",", ", ")
    program = _clean(text).program
    assert program == _clean(MATMUL_STEP_TP).program
    assert print_program(program, "compact") == MATMUL_STEP_TP


def test_scalar_access_has_no_indices():
    eq = _equations(_clean(SCALAR_SUM).program)[0]
    assert eq.lhs == A.Access("S", None, "f32", "g")
    assert eq.lhs.rank == 0


@pytest.mark.parametrize("axis", ["tx", "ty", "tz", "bx", "by", "bz"])
def test_thread_bound_loop_names_its_axis(axis):
    program = _clean(f"B^{{32}}_{{{axis}=0}}[Y^{{f32,g}}_{{{axis}}}=X^{{f32,g}}_{{{axis}}};];").program
    (loop,) = program.units[0].loops
    assert (loop.kind, loop.var) == ("B", axis)


def test_every_function_parses_to_calls():
    program = _clean(EVERY_FUNCTION).program
    calls = [n.func for n in A.walk(program) if isinstance(n, A.Call)]
    assert calls == ["exp", "log", "sqrt", "abs", "erf", "max", "min", "tanh", "if_then_else", "if_then_else"]
    first_select = next(n for n in A.walk(program) if isinstance(n, A.Call) and n.func == "if_then_else")
    # & binds tighter than |: (X<0 & i>=2) | X==1
    cond = first_select.args[0]
    assert cond.op == "|" and cond.lhs.op == "&" and cond.rhs.op == "=="
    assert (cond.lhs.lhs.op, cond.lhs.rhs.op) == ("<", ">=")


def test_nested_unit_keeps_program_order():
    (unit,) = _clean(NESTED_UNITS).program.units
    inner, eq = unit.body
    assert isinstance(inner, A.Nest) and [l.var for l in inner.loops] == ["j"]
    assert isinstance(eq, A.Equation) and eq.lhs.tensor == "B"
    sites = list(A.equation_sites(_clean(NESTED_UNITS).program))
    assert [[l.var for l in s.loops] for s in sites] == [["i", "j"], ["i"]]
    assert [s.path for s in sites] == [(0, 0, 0), (0, 1)]


def test_bare_top_level_equations_are_unbracketed_units():
    units = _clean(BARE_EQUATIONS).program.units
    assert [(len(u.loops), u.bracketed) for u in units] == [(0, False), (1, True), (0, False)]


def test_loop_variable_in_an_expression_is_a_var_and_other_names_are_scalars():
    eq = _equations(_clean("L^{4}_{i=0}[Y_{i}=i*s;];").program)[0]
    assert eq.rhs == A.Binary("*", A.Var("i"), A.Access("s", None))


def test_file_form_with_declarations():
    text = "in  X: f32[4,8]\nout Y: f16[4] @g\ntmp T: f32 @s\n\nL^{4}_{i=0} [\n  Y_{i} = X_{i,0};\n];\n"
    program = _clean(text).program
    assert [(d.role, d.name, d.dtype, d.shape, d.scope) for d in program.decls] == [
        ("in", "X", "f32", (4, 8), "g"),
        ("out", "Y", "f16", (4,), "g"),
        ("tmp", "T", "f32", (), "s"),
    ]


def test_trailing_underscore_belongs_to_the_name():
    eq = _equations(_clean("L^{4}_{i=0}[Y__{i}=X_{i};];").program)[0]
    assert eq.lhs.tensor == "Y_"


# -------------------------------------------------------------- short forms


@pytest.mark.parametrize("header", ["L^{4}_{i}", "L^{4}_{i=0}", "L^{4}_{ i }", "L^{4}_{ i = 0 }"])
def test_loop_without_a_start_starts_at_0(header):
    # Composite loop tokens and loose pieces alike.
    program = _clean(header + "[Y_{i}=X_{i};];").program
    (loop,) = program.units[0].loops
    assert (loop.kind, loop.extent, loop.var, loop.start) == ("L", 4, "i", 0)
    assert program == _clean("L^{4}_{i=0}[Y_{i}=X_{i};];").program


@pytest.mark.parametrize("header", ["L^{4}_{i=3}", "L^{4}_{ i = 3 }"])
def test_loop_with_a_start(header):
    (loop,) = _clean(header + "[Y_{i}=X_{i};];").program.units[0].loops
    assert (loop.var, loop.start) == ("i", 3)


@pytest.mark.parametrize("op", ["+", "-", "*"])
@pytest.mark.parametrize(
    "lhs, rhs, guard",
    [
        ("C_{i,j}", "X_{i,k}*W_{k,j}", ""),
        ("C^{f32,g}_{i,j}", "X^{f32,g}_{i,k}", ""),
        ("S", "exp(X_{i,k})", " where i < 2"),
    ],
)
def test_compound_assignment_is_the_long_form(op, lhs, rhs, guard):
    loops = "L^{4}_{i}L^{4}_{j}L^{4}_{k}"
    short = _clean(f"{loops}[{lhs} {op}= {rhs}{guard};];").program
    long = _clean(f"{loops}[{lhs} = {lhs} {op} ({rhs}){guard};];").program
    assert short == long
    (eq,) = _equations(short)
    assert isinstance(eq.rhs, A.Binary) and eq.rhs.op == op and eq.rhs.lhs == eq.lhs


def test_compound_assignment_takes_the_whole_expression_as_right_operand():
    (eq,) = _equations(_clean("C -= a + b;").program)
    c, a, b = A.Access("C", None), A.Access("a", None), A.Access("b", None)
    assert eq.lhs == c
    assert eq.rhs == A.Binary("-", c, A.Binary("+", a, b))
    (eq,) = _equations(_clean("C *= a - b*c;").program)
    assert eq.rhs == A.Binary("*", A.Access("C", None), A.Binary("-", a, A.Binary("*", b, A.Access("c", None))))
    # The long form without parentheses is a different tree.
    (eq,) = _equations(_clean("C = C - a + b;").program)
    assert eq.rhs == A.Binary("+", A.Binary("-", c, a), b)


def test_compound_assignment_span_covers_the_equation():
    text = "L^{4}_{i}[C_{i} += X_{i}*2;];"
    (eq,) = _equations(_clean(text).program)
    at = lambda span: text[span.start : span.end]  # noqa: E731
    assert at(eq.span) == "C_{i} += X_{i}*2;"
    assert at(eq.rhs.span) == "C_{i} += X_{i}*2"
    assert at(eq.rhs.lhs.span) == at(eq.lhs.span) == "C_{i}"
    assert at(eq.rhs.rhs.span) == "X_{i}*2"


def test_compound_operator_only_assigns():
    text = "L^{4}_{i}[Y_{i} = X_{i} += 1;];"
    assert [code for code, _, _ in _ranges(text, parse(text))] == ["expected-token"]
    assert _ranges(text, parse(text))[0][2] == "+="


@pytest.mark.parametrize(
    "text, ops",
    [
        ("L^{4}_{i=0}[C^{f32,g}_{i}=C^{f32,g}_{i}+-1;];", ["=", "+", "-"]),
        ("L^{4}_{i=0}[C^{f32,g}_{i}=C^{f32,g}_{i}*-1;];", ["=", "*", "-"]),
        ("L^{4}_{i=0}[C^{f32,g}_{i}=C^{f32,g}_{i}--1;];", ["=", "-", "-"]),
        ("L^{4}_{i=0}[Y^{f32,g}_{i}=X^{f32,g}_{i}**-2;];", ["=", "**", "-"]),
        ("L^{4}_{i=0}[Y^{f32,g}_{i}=X^{f32,g}_{i}**2*X^{f32,g}_{i};];", ["=", "**", "*"]),
        ("L^{4}_{i=0}[Y^{f32,g}_{i}=-X^{f32,g}_{i};];", ["=", "-"]),
        ("L^{4}_{i=0}[Y^{f32,g}_{i}=X^{f32,g}_{i} where i>=-1&i<=2|i==-1|i!=3;];", ["=", ">=", "-", "&", "<=", "|", "==", "-", "|", "!="]),
    ],
)
def test_step_tp_operators_are_not_read_as_compound_assignments(text, ops):
    body = text.index("[")  # past the loop header's own ``=``
    for composite in (True, False):
        tokens = [t for t in tokenize(text, composite) if t.start > body]
        assert [t.text for t in tokens if t.kind == "op" and t.text not in "[];{}_^,"] == ops
    program = _clean(text).program
    assert print_program(program, "compact") == text
    (eq,) = _equations(program)
    assert eq.lhs.tensor in ("C", "Y")


# -------------------------------------------------------------------- spans


def test_spans_slice_the_source():
    text = "in  X: f32[4,8]\n\nL^{4}_{i=0}\n  L^{8}_{j=0} [\n    Y^{f32}_{i} = Y^{f32}_{i} + (X_{i, j*2} - 1)*2;\n  ];\n"
    program = _clean(text).program
    at = lambda span: text[span.start : span.end]  # noqa: E731
    decl = program.decls[0]
    assert (at(decl.span), at(decl.name_span)) == ("in  X: f32[4,8]", "X")
    unit = program.units[0]
    assert at(unit.span) == text[text.index("L^{4}") : text.rindex("];") + 2]
    i_loop, j_loop = unit.loops
    assert (at(i_loop.span), at(i_loop.kind_span), at(i_loop.extent_span), at(i_loop.var_span)) == ("L^{4}_{i=0}", "L", "4", "i")
    assert at(j_loop.span) == "L^{8}_{j=0}"
    (eq,) = unit.body
    assert at(eq.span) == "Y^{f32}_{i} = Y^{f32}_{i} + (X_{i, j*2} - 1)*2;"
    assert (at(eq.lhs.span), at(eq.lhs.name_span)) == ("Y^{f32}_{i}", "Y")
    product = eq.rhs.rhs
    assert at(product.span) == "(X_{i, j*2} - 1)*2"
    difference = product.lhs
    assert at(difference.span) == "(X_{i, j*2} - 1)"  # parentheses included
    x = difference.lhs
    assert (at(x.span), at(x.indices[0].span), at(x.indices[1].span)) == ("X_{i, j*2}", "i", "j*2")


def test_spans_of_composite_tokens_slice_the_source():
    program = _clean(MATMUL_STEP_TP).program
    at = lambda span: MATMUL_STEP_TP[span.start : span.end]  # noqa: E731
    loop = program.units[0].loops[1]
    assert (at(loop.span), at(loop.kind_span), at(loop.extent_span), at(loop.var_span)) == ("L^{256}_{a=0}", "L", "256", "a")
    eq = program.units[0].body[0]
    x = eq.rhs.rhs.lhs
    assert (at(x.span), at(x.name_span), [at(i.span) for i in x.indices]) == ("X^{f32,g}_{tx,k}", "X", ["tx", "k"])
    body = MATMUL_STEP_TP[MATMUL_STEP_TP.index("[") + 1 : MATMUL_STEP_TP.index("];")]
    assert at(eq.span) == body


def test_every_node_span_lies_in_the_document():
    text = LAYERNORM_STATS_STEP_TP + "\n# end\n"
    program = _clean(text).program
    for node in A.walk(program):
        span = node.span
        assert span is not None and 0 <= span.start <= span.end <= len(text)


# ----------------------------------------------------------- error recovery


def test_unknown_loop_kind_is_reported_at_the_letter():
    text = "Q^{4}_{i=0}[Y^{f32}_{i}=X^{f32}_{i};];"
    result = parse(text)
    assert _ranges(text, result) == [("unknown-loop-kind", "1:1", "Q")]
    assert _equations(result.program)[0].lhs.tensor == "Y"


def test_missing_closing_bracket_is_reported_at_the_open_bracket():
    text = "L^{4}_{i=0} [\n  Y_{i} = X_{i};\n\nL^{4}_{j=0} [\n  Z_{j} = X_{j};\n];\n"
    result = parse(text)
    assert _ranges(text, result) == [("unbalanced-bracket", "1:13", "[")]
    # The next unit, at the same indentation, is not swallowed by the first.
    assert [[l.var for l in u.loops] for u in result.program.units] == [["i"], ["j"]]


def test_missing_closing_bracket_at_end_of_one_line_program():
    text = "L^{4}_{i=0}[Y_{i}=X_{i};"
    result = parse(text)
    assert _ranges(text, result) == [("unbalanced-bracket", "1:12", "[")]
    assert len(_equations(result.program)) == 1


def test_missing_semicolon_after_an_equation_is_reported_after_it():
    text = "L^{4}_{i=0} [\n  Y_{i} = X_{i}\n  Z_{i} = Y_{i};\n];\n"
    result = parse(text)
    (diag,) = result.diagnostics
    assert (diag.code, result.source.format_location(diag.span), diag.span.start == diag.span.end) == ("expected-token", "2:16", True)
    assert text[: diag.span.start].endswith("X_{i}")
    assert [e.lhs.tensor for e in _equations(result.program)] == ["Y", "Z"]


def test_missing_semicolon_after_a_nest_is_reported_after_the_bracket():
    text = "L^{4}_{i=0}[Y_{i}=X_{i};]L^{4}_{j=0}[Z_{j}=X_{j};];"
    result = parse(text)
    (diag,) = result.diagnostics
    assert diag.code == "expected-token" and diag.span.start == diag.span.end == text.index("]L") + 1
    assert len(result.program.units) == 2


def test_unknown_dtype_is_reported_at_the_dtype():
    text = "in X: f31[4]\nL^{4}_{i=0}[Y^{f33,g}_{i}=X_{i};];"
    result = parse(text)
    assert _ranges(text, result) == [("unknown-dtype", "1:7", "f31"), ("unknown-dtype", "2:16", "f33")]


def test_garbage_characters_are_reported_and_skipped():
    text = "$L^{4}_{i=0}[Y_{i}=X_{i} §§ + 1;];\x07"
    result = parse(text)
    assert _ranges(text, result) == [
        ("unexpected-character", "1:1", "$"),
        ("unexpected-character", "1:26", "§§"),
        ("unexpected-character", "1:35", "\x07"),
    ]
    (eq,) = _equations(result.program)
    assert eq.rhs == A.Binary("+", A.Access("X", (A.Var("i"),)), A.Num(1, "1"))


def test_unclosed_parenthesis_is_reported_at_the_parenthesis():
    text = "L^{4}_{i=0}[Y_{i}=(X_{i}+1;Z_{i}=exp(X_{i};];"
    result = parse(text)
    assert _ranges(text, result) == [("unbalanced-bracket", "1:19", "("), ("unbalanced-bracket", "1:37", "(")]
    assert [e.lhs.tensor for e in _equations(result.program)] == ["Y", "Z"]


def test_several_errors_in_one_file_are_all_reported_in_place():
    text = (
        "in  X: f32[8]\n"
        "in  W: f33[8]\n"  # bad dtype
        "\n"
        "Q^{8}_{i=0} [\n"  # unknown loop kind
        "  A_{i} = X_{i} +$ W_{i};\n"  # garbage
        "];\n"
        "\n"
        "L^{8}_{i=0} [\n"
        "  B_{i} = (X_{i} + 1;\n"  # unclosed paren
        "  C_{i} = X_{i}\n"  # missing ;
        "];\n"
        "\n"
        "L^{8}_{i=0} [\n"  # missing ]
        "  D_{i} = X_{i};\n"
        "\n"
        "L^{8}_{i=0} [\n"
        "  E_{i} = X_{i}*2;\n"
        "];\n"
    )
    result = parse(text)
    assert _ranges(text, result) == [
        ("unknown-dtype", "2:8", "f33"),
        ("unknown-loop-kind", "4:1", "Q"),
        ("unexpected-character", "5:18", "$"),
        ("unbalanced-bracket", "9:11", "("),
        ("expected-token", "10:16", ""),
        ("unbalanced-bracket", "13:13", "["),
    ]
    # Parsing went on after each error: every equation is in the tree.
    assert [e.lhs.tensor for e in _equations(result.program)] == ["A", "B", "C", "D", "E"]


def test_error_inside_an_equation_skips_only_that_equation():
    text = "L^{4}_{i=0}[Y_{i}=X_{i}+*2;Z_{i}=X_{i};];L^{4}_{j=0}[W_{j}=X_{j};];"
    result = parse(text)
    assert _ranges(text, result) == [("expected-expression", "1:25", "*")]
    assert [e.lhs.tensor for e in _equations(result.program)] == ["Z", "W"]


def test_stray_closing_bracket():
    text = "L^{4}_{i=0}[Y_{i}=X_{i};];];L^{4}_{j=0}[Z_{j}=X_{j};];"
    result = parse(text)
    assert _ranges(text, result) == [("unbalanced-bracket", "1:27", "]")]
    assert len(result.program.units) == 2


def test_empty_body_is_an_error():
    text = "L^{4}_{i=0}[];"
    assert _ranges(text, parse(text)) == [("empty-body", "1:1", "L^{4}_{i=0}[];")]


def test_wrong_arity_and_unknown_function():
    text = "L^{4}_{i=0}[Y_{i}=max(X_{i})+frob(X_{i});];"
    assert _ranges(text, parse(text)) == [("wrong-arity", "1:19", "max(X_{i})"), ("unknown-function", "1:30", "frob")]


def test_tensor_in_an_index():
    text = "L^{4}_{i=0}[Y_{i}=X_{I_{i}};];"
    assert _ranges(text, parse(text)) == [("tensor-in-index", "1:22", "I_{i}")]


def test_assignment_to_a_loop_variable():
    text = "L^{4}_{i=0}[i=1;];"
    assert _ranges(text, parse(text)) == [("assign-to-loop-var", "1:13", "i")]


def test_bad_extents():
    text = "in X: f32[0]\nL^{0}_{i=0}[Y_{i}=X_{i};];L^{2.5}_{j=0}[Z_{j}=X_{j};];"
    assert [(c, t) for c, _, t in _ranges(text, parse(text))] == [("bad-extent", "0"), ("bad-extent", "0"), ("bad-extent", "2.5")]


def test_integer_literal_too_long_to_convert():
    digits = "7" * 5000
    text = f"L^{{4}}_{{i=0}}[Y_{{i}}={digits};];"
    assert _ranges(text, parse(text)) == [("bad-number", "1:19", digits)]


def test_reserved_words_cannot_name_tensors():
    text = "L^{4}_{i=0}[where_{i}=X_{i};];"
    assert _ranges(text, parse(text)) == [("reserved-name", "1:13", "where")]


# ------------------------------------------------------------ never raises


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "# only a comment",
        "[",
        "]",
        ";;;",
        "L^{",
        "L^{4}_{i=0}",
        "L^{4}_{i=0}[",
        "in",
        "in X:",
        "Y=",
        "\x00\x01\ufeff\u202e\ud800",
        "Y = " + "(" * 5000 + "1" + ")" * 5000 + ";",
        "Y = " + "-" * 5000 + "1;",
        "Y = " + "+".join(["a"] * 5000) + ";",
        "Y = " + "**".join(["a"] * 5000) + ";",
        "[" * 5000 + "Y=1;" + "];" * 5000,
        "L^{" + "9" * 5000 + "}_{i=0}[Y_{i}=" + "7" * 5000 + ";];",
    ],
    ids=lambda t: repr(t[:20]),
)
def test_parse_never_raises(text):
    result = parse(text)
    for d in result.diagnostics:
        assert 0 <= d.span.start <= d.span.end <= len(text)


def test_too_deep_expression_is_an_error_not_a_crash():
    text = "Y = " + "+".join(["a"] * (MAX_EXPR_DEPTH + 10)) + ";"
    result = parse(text)
    assert [d.code for d in result.diagnostics] == ["too-deep"]
    # A long but reasonable sum is fine.
    _clean("Y = " + "+".join(["a"] * 100) + ";")


# ------------------------------------------------------------- expressions


def test_parse_expression_binds_loop_variables():
    expr, diags = parse_expression("i*32+j", frozenset({"i", "j"}))
    assert diags == []
    assert expr == A.Binary("+", A.Binary("*", A.Var("i"), A.Num(32, "32")), A.Var("j"))


def test_parse_expression_reports_trailing_text():
    expr, diags = parse_expression("i+1 )", frozenset({"i"}))
    assert expr == A.Binary("+", A.Var("i"), A.Num(1, "1"))
    assert [d.code for d in diags] == ["unexpected-token"]


def test_parse_expression_of_garbage_returns_none():
    expr, diags = parse_expression("*")
    assert expr is None and [d.code for d in diags] == ["expected-expression"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a-b-c", A.Binary("-", A.Binary("-", A.Var("a"), A.Var("b")), A.Var("c"))),
        ("a**b**c", A.Binary("**", A.Var("a"), A.Binary("**", A.Var("b"), A.Var("c")))),
        ("-a**2", A.Unary("-", A.Binary("**", A.Var("a"), A.Num(2, "2")))),
        ("2**-a", A.Binary("**", A.Num(2, "2"), A.Unary("-", A.Var("a")))),
        ("a+b*c", A.Binary("+", A.Var("a"), A.Binary("*", A.Var("b"), A.Var("c")))),
        ("a//b%c", A.Binary("%", A.Binary("//", A.Var("a"), A.Var("b")), A.Var("c"))),
        ("a<b&b<c|!d", A.Binary("|", A.Binary("&", A.Binary("<", A.Var("a"), A.Var("b")), A.Binary("<", A.Var("b"), A.Var("c"))), A.Unary("!", A.Var("d")))),
        ("inf", A.Num(float("inf"), "inf")),
        ("f32(a)", A.Call("f32", (A.Var("a"),))),
    ],
)
def test_precedence_and_associativity(text, expected):
    expr, diags = parse_expression(text, frozenset("abcd"))
    assert diags == []
    assert expr == expected


# -------------------------------------------------------------------- lexer


def test_composite_tokens_cover_the_same_text_as_their_pieces():
    text = MATMUL_STEP_TP + "L^{4}_{i = 0}[Y_{i, 0}=S^{f32};];"
    composite = tokenize(text)
    fine = tokenize(text, composite=False)
    assert [t.kind for t in composite if t.kind in ("loop", "access")][:4] == ["loop", "loop", "loop", "access"]
    assert not any(t.kind in ("loop", "access") for t in fine)
    assert {t.start for t in composite} <= {t.start for t in fine}
    assert "".join(t.text for t in composite) == "".join(t.text for t in fine)


def test_positions_count_crlf_and_lone_cr_line_breaks():
    from leir.diagnostics import SourceText

    for text in ("ab\ncd\n", "ab\r\ncd\r\n", "ab\rcd"):
        source = SourceText(text)
        assert source.line_text(0) == "ab" and source.line_text(1) == "cd"
        assert source.position(text.index("d")) == (1, 1)
        assert source.offset(0, 9) == 2, "a column past the end stops before the line break"

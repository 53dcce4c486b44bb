"""The LEIR printer: canonical text prints back unchanged, comments stay
where they were written, formatting is idempotent, parentheses appear only
where precedence needs them, and the compact form is Step-TP's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leir import ast as A
from leir.parser import parse, parse_expression
from leir.printer import decl_text, loop_header, print_expr, print_program
from leir.semantics import analyze

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# ------------------------------------------------------------------ fixtures

MATMUL = """\
in  X: f32[512,128]
in  W: f32[128,256]
out C: f32[512,256]

L^{512}_{i}
  L^{256}_{j}
    L^{128}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""

#: A comment in every position the layout has one.
COMMENTED = """\
# file header
# second header line
in  X: f32[4,8]  # trailing on a declaration
# before a declaration
in  W: f32[8]
out Y: f32[4]
tmp T: f32[4] @s  # in shared memory

# before the first loop
L^{4}_{i}  # trailing on an outer loop
  # before an inner loop
  L^{8}_{j} [  # trailing on the line that opens the body
    # before an equation
    T_{i} += X_{i,j}*W_{j};  # trailing on an equation
    # at the end of a body
  ];  # trailing on the closing bracket

# a bare equation
S = 0;  # trailing on a bare equation

[  # trailing on a loop-less body
  Y_{0} = T_{0};
];

L^{4}_{i} [
  # before a nested nest
  L^{2}_{j} [
    Y_{i} = T_{i}*2;
  ];  # trailing on a nested closing bracket
  # at the end of an outer body
];

# end of file
# really the end
"""

GUARDED = """\
in  X: f32[100]
out Y: f32[100]

L^{4}_{io}
  L^{32}_{ii} [
    Y_{io*32+ii} = X_{io*32+ii}*2 where io*32 + ii < 100;
  ];
"""

SCALARS = """\
S = 0;

L^{64}_{i} [
  S += X^{f32,g}_{i};
];
"""

CANONICAL_TEXTS = {
    "matmul": MATMUL,
    "commented": COMMENTED,
    "guarded": GUARDED,
    "scalars": SCALARS,
    "only_comments": "# nothing but a comment\n",
    "empty": "",
    **{p.stem: p.read_text() for p in sorted(EXAMPLES.glob("*.leir"))},
}

#: Text that parses but is not in canonical layout.
MESSY_TEXTS = {
    "step_tp_matmul": "B^{512}_{tx=0}L^{256}_{a=0}L^{128}_{k=0}[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];",
    "step_tp_layernorm": (
        "B^{96}_{tx=0}L^{94}_{a=0}[I^{f16,g}_{tx,a}=H^{f16,g}_{tx,a}/2670;];B^{96}_{tx=0}L^{94}_{a=0}L^{30}_{c=0}"
        "L^{89}_{d=0}[C^{f16,g}_{tx,a,c,d}=D^{f16,g}_{a}*((A^{f16,g}_{tx,a,c,d}-G^{f16,g}_{tx,a})/sqrt(I^{f16,g}_{tx,a}+1e-05))+E^{f16,g}_{a};];"
    ),
    "comments_everywhere": (
        "# a\nin X: f32[4] # b\n in  # c\n Y: f32[4]\nL^{4} # d\n _{i=0} # e\n [ # f\n Y_{i} # g\n = X_{i} # h\n;Z_{i}=1;# i\n] # j\n; # k\n# l"
    ),
    "two_trailing_comments_on_a_loop_line": "L^{4}_{i=0}  # a\n[  # b\nY_{i}=X_{i};];",
    "odd_spacing": "in X:f32[4,4]@g\nL^{4}_{i=0}   L^{4}_{j=0}[Y_{ i , j }=(((X_{i,j})));  ] ;",
    "nested": "L^{4}_{i=0}[L^{3}_{j=0}[A_{i,j}=X_{i,j};];[B_{i}=1;];C_{i}=2;];",
}


def _program(text: str) -> A.Program:
    result = parse(text)
    assert result.ok, [(d.code, d.message) for d in result.diagnostics]
    return result.program


def _canonical(text: str) -> str:
    return print_program(_program(text))


def _expr_text(text: str) -> str:
    expr, diags = parse_expression(text, frozenset("abcdxyij"))
    assert diags == []
    return print_expr(expr)


# ----------------------------------------------------------------- round trip


@pytest.mark.parametrize("text", CANONICAL_TEXTS.values(), ids=CANONICAL_TEXTS.keys())
def test_canonical_text_prints_back_unchanged(text):
    assert _canonical(text) == text


def test_comments_stay_on_their_nodes():
    program = _program(COMMENTED)
    x, w, y, t = program.decls
    assert x.comments == A.Comments(("# file header", "# second header line"), "# trailing on a declaration")
    assert w.comments.before == ("# before a declaration",)
    assert t.comments.after == "# in shared memory"
    first = program.units[0]
    i_loop, j_loop = first.loops
    assert i_loop.comments == A.Comments(("# before the first loop",), "# trailing on an outer loop")
    assert j_loop.comments == A.Comments(("# before an inner loop",), "# trailing on the line that opens the body")
    (eq,) = first.body
    assert eq.comments == A.Comments(("# before an equation",), "# trailing on an equation")
    assert first.end_comments == A.Comments(("# at the end of a body",), "# trailing on the closing bracket")
    bare = program.units[1]
    assert bare.body[0].comments == A.Comments(("# a bare equation",), "# trailing on a bare equation")
    assert program.units[2].open_comments.after == "# trailing on a loop-less body"
    nested = program.units[3]
    assert nested.body[0].loops[0].comments.before == ("# before a nested nest",)
    assert nested.body[0].end_comments.after == "# trailing on a nested closing bracket"
    assert nested.end_comments.before == ("# at the end of an outer body",)
    assert program.end_comments.before == ("# end of file", "# really the end")


def test_no_comment_is_lost_from_messy_text():
    text = MESSY_TEXTS["comments_everywhere"]
    printed = _canonical(text)
    for letter in "abcdefghijkl":
        assert f"# {letter}" in printed


ALL_TEXTS = {**CANONICAL_TEXTS, **MESSY_TEXTS}


@pytest.mark.parametrize("text", ALL_TEXTS.values(), ids=ALL_TEXTS.keys())
def test_formatting_is_idempotent(text):
    once = _canonical(text)
    assert _canonical(once) == once


@pytest.mark.parametrize("text", ALL_TEXTS.values(), ids=ALL_TEXTS.keys())
def test_canonical_form_reads_back_as_the_same_program(text):
    program = _program(text)
    assert _program(print_program(program)).units == program.units


@pytest.mark.parametrize("text", ALL_TEXTS.values(), ids=ALL_TEXTS.keys())
def test_compact_form_reads_back_as_the_same_program(text):
    program = _program(text)
    compact = print_program(program, "compact")
    reread = _program(compact)
    if not program.decls:
        assert reread.units == program.units
    # With declarations, the compact form moves each tensor's type into
    # its accesses' superscripts: the same program, spelled differently.
    assert print_program(reread, "compact") == compact


def test_canonical_layout_of_step_tp_text():
    # Layout only: print_program keeps the superscripts (leir.format's
    # canonical_program is what moves them into declarations).
    assert _canonical(MESSY_TEXTS["step_tp_matmul"]) == """\
B^{512}_{tx}
  L^{256}_{a}
    L^{128}_{k} [
      C^{f32,g}_{tx,a} += X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};
    ];
"""


def test_canonical_layout_of_nested_nests():
    assert _canonical(MESSY_TEXTS["nested"]) == """\
L^{4}_{i} [
  L^{3}_{j} [
    A_{i,j} = X_{i,j};
  ];
  [
    B_{i} = 1;
  ];
  C_{i} = 2;
];
"""


def test_redundant_parentheses_and_spaces_are_dropped():
    assert _canonical(MESSY_TEXTS["odd_spacing"]) == """\
in  X: f32[4,4]

L^{4}_{i}
  L^{4}_{j} [
    Y_{i,j} = X_{i,j};
  ];
"""


# --------------------------------------------------------------- short forms


def test_loop_starting_at_0_prints_without_its_start_and_others_with_it():
    text = "L^{4}_{i=0}L^{8}_{j=3}[Y_{i,j}=X_{i,j};];"
    assert _canonical(text) == "L^{4}_{i}\n  L^{8}_{j=3} [\n    Y_{i,j} = X_{i,j};\n  ];\n"
    assert _canonical("L^{4}_{i}L^{8}_{j=3}[Y_{i,j}=X_{i,j};];") == _canonical(text)
    assert print_program(_program(_canonical(text)), "compact") == text


@pytest.mark.parametrize("op", ["+", "-", "*"])
def test_accumulation_prints_as_compound_assignment(op):
    short = f"L^{{4}}_{{i}}\n  L^{{8}}_{{j}} [\n    C_{{i}} {op}= exp(X_{{i,j}}) where j < 5;\n  ];\n"
    assert _canonical(f"L^{{4}}_{{i=0}}L^{{8}}_{{j=0}}[C_{{i}}=C_{{i}}{op}exp(X_{{i,j}}) where j<5;];") == short
    assert _canonical(short) == short
    # The compact form is Step-TP's: the long form, loops with their start.
    assert print_program(_program(short), "compact") == (
        f"L^{{4}}_{{i=0}}L^{{8}}_{{j=0}}[C_{{i}}=C_{{i}}{op}exp(X_{{i,j}}) where j<5;];"
    )


@pytest.mark.parametrize(
    "text, printed",
    [
        # The whole right operand follows the operator.
        ("C = C - (a + b);", "C -= a + b;"),
        ("C = C*(a + b);", "C *= a + b;"),
        ("C = C + (a < b);", "C += a < b;"),
        ("C = C + -a;", "C += -a;"),
        ("C^{f32,g}_{0} = C^{f32,g}_{0} + a;", "C^{f32,g}_{0} += a;"),
        # Not an accumulation of the whole right-hand side: the long form.
        ("C = C - a + b;", "C = C - a + b;"),
        ("C = C*a + b;", "C = C*a + b;"),
        ("C = a + C;", "C = a + C;"),
        ("C = C/a;", "C = C/a;"),
        ("C = max(C, a);", "C = max(C, a);"),
        ("C_{0} = C_{1} + a;", "C_{0} = C_{1} + a;"),
        ("C_{0} = C^{f32}_{0} + a;", "C_{0} = C^{f32}_{0} + a;"),
    ],
)
def test_compound_assignment_only_for_the_whole_right_operand(text, printed):
    assert _canonical(text) == printed + "\n"
    # and it reads back as the same tree
    assert _program(printed).units == _program(text).units


# --------------------------------------------------------------- parentheses


@pytest.mark.parametrize(
    "text, printed",
    [
        ("a-(b-c)", "a - (b - c)"),
        ("(a-b)-c", "a - b - c"),
        ("a/(b*c)", "a/(b*c)"),
        ("(a/b)*c", "a/b*c"),
        ("a*(b/c)", "a*(b/c)"),
        ("-(a*b)", "-(a*b)"),
        ("(-a)*b", "-a*b"),
        ("-(-a)", "-(-a)"),
        ("(-a)**2", "(-a)**2"),
        ("-(a**2)", "-a**2"),
        ("a**b**c", "a**b**c"),
        ("a**(b**c)", "a**b**c"),
        ("(a**b)**c", "(a**b)**c"),
        ("2**-x", "2**-x"),
        ("2**(-x)", "2**-x"),
        ("(2**-x)*y", "2**-x*y"),
        ("2**(x+1)", "2**(x + 1)"),
        ("(a+b)*(c-d)", "(a + b)*(c - d)"),
        ("a+(b*c)", "a + b*c"),
        ("(a<b)==(c<d)", "a < b == c < d"),
        ("a<(b==c)", "a < (b == c)"),
        ("(a|b)&c", "(a | b) & c"),
        ("a|(b&c)", "a | b & c"),
        ("!(a<b)", "!(a < b)"),
        ("(a//b)%c", "a//b%c"),
        ("a//(b%c)", "a//(b%c)"),
        ("max((a+b),(c))", "max(a + b, c)"),
        ("if_then_else((a<b)&(c>d),a,b)", "if_then_else(a < b & c > d, a, b)"),
    ],
)
def test_minimal_parentheses(text, printed):
    assert _expr_text(text) == printed
    # and the printed text means the same tree
    assert parse_expression(printed, frozenset("abcdxyij"))[0] == parse_expression(text, frozenset("abcdxyij"))[0]


def test_indices_print_without_spaces():
    program = _program("L^{4}_{i=0}L^{4}_{j=0}[Y_{i * 4 + j, (i - 1) // 2} = X_{ i }; ];")
    (eq,) = program.units[0].body
    assert print_expr(eq.lhs) == "Y_{i*4+j,(i-1)//2}"


def test_negative_literal_built_by_a_transformation_keeps_its_parentheses():
    minus_one = A.Num(-1, "-1")
    assert print_expr(A.Binary("**", minus_one, A.Num(2, "2"))) == "(-1)**2"
    assert print_expr(A.Binary("-", A.Var("a"), minus_one)) == "a - -1"
    assert print_expr(A.Binary("**", A.Num(2, "2"), minus_one)) == "2**-1"


# -------------------------------------------------------------- compact form


def test_compact_form_of_a_declared_program_has_full_superscripts():
    assert print_program(_program(MATMUL), "compact") == (
        "L^{512}_{i=0}L^{256}_{j=0}L^{128}_{k=0}"
        "[C^{f32,g}_{i,j}=C^{f32,g}_{i,j}+X^{f32,g}_{i,k}*W^{f32,g}_{k,j};];"
    )


def test_compact_form_of_a_shared_temporary_names_its_scope():
    text = "in  X: f32[4]\nout Y: f32[4]\ntmp T: f16[4] @s\n\nL^{4}_{i=0} [\n  T_{i} = X_{i};\n  Y_{i} = T_{i};\n];\n"
    assert print_program(_program(text), "compact") == (
        "L^{4}_{i=0}[T^{f16,s}_{i}=X^{f32,g}_{i};Y^{f32,g}_{i}=T^{f16,s}_{i};];"
    )


def test_compact_form_of_an_inferred_program_matches_the_step_tp_text():
    text = MESSY_TEXTS["step_tp_layernorm"]
    completed = analyze(_program(text)).complete_program()
    assert print_program(completed, "compact") == text


def test_compact_form_keeps_guards():
    assert print_program(_program(GUARDED), "compact") == (
        "L^{4}_{io=0}L^{32}_{ii=0}[Y^{f32,g}_{io*32+ii}=X^{f32,g}_{io*32+ii}*2 where io*32+ii<100;];"
    )


def test_declarations_and_loop_headers():
    assert decl_text(A.Decl("in", "X", "f32", (512, 128))) == "in  X: f32[512,128]"
    assert decl_text(A.Decl("tmp", "acc", "f32", (), "l")) == "tmp acc: f32 @l"
    assert loop_header(A.Loop("B", 32, "tx")) == "B^{32}_{tx}"
    assert loop_header(A.Loop("B", 32, "tx"), compact=True) == "B^{32}_{tx=0}"
    assert loop_header(A.Loop("L", 8, "j", 3)) == "L^{8}_{j=3}"
    assert loop_header(A.Loop("L", 8, "j", 3), compact=True) == "L^{8}_{j=3}"


def test_unknown_style_is_refused():
    with pytest.raises(ValueError):
        print_program(_program(MATMUL), "pretty")

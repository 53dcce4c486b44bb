"""The algorithmic transformations (Step-TP's algorithmic strategies):
running maximum, running sum of exponentials, online softmax and one-pass
attention. What each rewrites (names, loop orders, dtypes, nesting and the
compact form all vary), every precondition as a typed error, and every step
offered on the bundled examples applied and verified numerically."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir import transforms
from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.semantics import analyze
from leir.transforms import Step, apply, verify
from leir.transforms.steps import attention_without_scores, online_softmax, prefix_max, prefix_sum_exp
from leir.transforms.lib import rows as _rows
from leir.transforms.base import Context, NotApplicable, StaleStep
from leir.transforms.testing import check_action, check_not_applicable, check_offered_exactly_when_check_passes

from programs import SOFTMAX

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODULES = (prefix_max, prefix_sum_exp, online_softmax, attention_without_scores)
STEPTP_NAMES = ("normal_loop_max_to_prefix_max", "normal_loop_summation_on_exp_to_prefix_summation_on_exp",
                "online_softmax", "flashattention_wo_tiling")


def analysis(text: str):
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return doc.analysis


def nest(loops: str, *equations: str) -> str:
    """One unit, written on one line (the parser does not mind)."""
    return f"{loops} [ " + " ".join(e + ";" for e in equations) + " ];\n"


def test_registered_under_their_steptp_names():
    assert [m.STEPTP for m in MODULES] == list(STEPTP_NAMES)
    assert all(transforms.get(m.ID) is m for m in MODULES)
    assert _rows not in transforms.ALL


# ----------------------------------------------------------- prefix_max


SOFTMAX_TAIL = """
L^{16}_{i}
  L^{10}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""


def test_prefix_max_with_the_reduction_loop_outside_the_rows():
    # The running maximum runs over j in either loop order: j is serial.
    check_action(prefix_max, """\
L^{10}_{j}
  L^{16}_{i} [
    M_{i} = max(X_{i,j}, M_{i});$0
  ];
""", """\
L^{10}_{j}
  L^{16}_{i} [
    M_prefix_{i,j} = X_{i,j} where j == 0;
    M_prefix_{i,j} = max(M_prefix_{i,j-1}, X_{i,j}) where j > 0;
  ];

L^{16}_{i} [
  M_{i} = M_prefix_{i,9};
];
""")


def test_prefix_max_of_a_scalar_writes_a_bare_final_equation():
    check_action(prefix_max, """\
L^{10}_{j} [
  M = max(M, X_{j});$0
];

L^{10}_{j} [
  Y_{j} = X_{j} - M;
];
""", """\
L^{10}_{j} [
  M_prefix_{j} = X_{j} where j == 0;
  M_prefix_{j} = max(M_prefix_{j-1}, X_{j}) where j > 0;
];

M = M_prefix_{9};

L^{10}_{j} [
  Y_{j} = X_{j} - M;
];
""")


def test_prefix_max_declares_a_temporary_of_the_maximum_s_dtype():
    check_action(prefix_max, """\
in  X: f16[16,10]
out M: f16[16]

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});$0
  ];
""", """\
in  X: f16[16,10]
out M: f16[16]
tmp M_prefix: f16[16,10]

L^{16}_{i}
  L^{10}_{j} [
    M_prefix_{i,j} = X_{i,j} where j == 0;
    M_prefix_{i,j} = max(M_prefix_{i,j-1}, X_{i,j}) where j > 0;
  ];

L^{16}_{i} [
  M_{i} = M_prefix_{i,9};
];
""")


def test_prefix_max_keeps_the_superscripts_of_the_compact_form():
    doc = load_leir("L^{16}_{i=0}L^{10}_{j=0}[M^{f16,g}_{i}=max(M^{f16,g}_{i},X^{f16,g}_{i,j});];")
    result = apply(doc.analysis, Step("prefix_max", {"block": "M"}))
    assert print_program(result, "compact") == (
        "L^{16}_{i=0}L^{10}_{j=0}[M_prefix^{f16,g}_{i,j}=X^{f16,g}_{i,j} where j==0;"
        "M_prefix^{f16,g}_{i,j}=max(M_prefix^{f16,g}_{i,j-1},X^{f16,g}_{i,j}) where j>0;];"
        "L^{16}_{i=0}[M^{f16,g}_{i}=M_prefix^{f16,g}_{i,9};];")
    assert analyze(result).tensors["M_prefix"].dtype == "f16"


def test_prefix_max_inside_a_shared_loop_finishes_the_row_before_its_readers():
    check_action(prefix_max, """\
P^{4}_{b} [
  L^{16}_{i}
    L^{10}_{j} [
      M_{b,i} = max(M_{b,i}, X_{b,i,j});$0
    ];
  L^{16}_{i} [
    Y_{b,i} = M_{b,i}*2.0;
  ];
];
""", """\
P^{4}_{b} [
  L^{16}_{i}
    L^{10}_{j} [
      M_prefix_{b,i,j} = X_{b,i,j} where j == 0;
      M_prefix_{b,i,j} = max(M_prefix_{b,i,j-1}, X_{b,i,j}) where j > 0;
    ];
  L^{16}_{i} [
    M_{b,i} = M_prefix_{b,i,9};
  ];
  L^{16}_{i} [
    Y_{b,i} = M_{b,i}*2.0;
  ];
];
""")


def test_prefix_max_guards_pass_the_bounds_check_by_enumeration():
    # M_prefix_{i,j-1} reads index -1 at j == 0 unless the guard is taken
    # into account; the analysis infers the exact shape and reports nothing.
    result = apply(analysis(SOFTMAX), Step("prefix_max", {"block": "M"}))
    after = analyze(result)
    assert after.diagnostics == []
    assert after.tensors["M_prefix"].shape == (16, 10)


# ------------------------------------------------------- prefix_sum_exp


GPU_TAIL = """
B^{128}_{bx}
  B^{100}_{tx} [
    Y_{bx,tx} = exp(X_{bx,tx} - M_{bx})/Z_{bx};
  ];
"""


def test_prefix_sum_exp_on_thread_bound_rows():
    check_action(prefix_sum_exp, """\
B^{4}_{bx}
  B^{32}_{tx}
    L^{100}_{j} [
      M_{bx*32+tx} = max(M_{bx*32+tx}, X_{bx*32+tx,j});
    ];

B^{4}_{bx}
  B^{32}_{tx}
    L^{100}_{j} [
      Z_{bx*32+tx} += exp(X_{bx*32+tx,j} - M_{bx*32+tx});$0
    ];
""" + GPU_TAIL, """\
B^{4}_{bx}
  B^{32}_{tx}
    L^{100}_{j} [
      M_prefix_{bx*32+tx,j} = X_{bx*32+tx,j} where j == 0;
      M_prefix_{bx*32+tx,j} = max(M_prefix_{bx*32+tx,j-1}, X_{bx*32+tx,j}) where j > 0;
      Z_prefix_{bx*32+tx,j} = exp(X_{bx*32+tx,j} - M_prefix_{bx*32+tx,j}) where j == 0;
      Z_prefix_{bx*32+tx,j} = Z_prefix_{bx*32+tx,j-1}*exp(M_prefix_{bx*32+tx,j-1} - M_prefix_{bx*32+tx,j}) + exp(X_{bx*32+tx,j} - M_prefix_{bx*32+tx,j}) where j > 0;
    ];

B^{4}_{bx}
  B^{32}_{tx} [
    M_{bx*32+tx} = M_prefix_{bx*32+tx,99};
    Z_{bx*32+tx} = Z_prefix_{bx*32+tx,99};
  ];
""" + GPU_TAIL)


def test_prefix_sum_exp_keeps_a_maximum_nobody_reads_a_temporary():
    # Only the sum read M; after the step nothing does, and inference would
    # make M an output: a declaration keeps the outputs as they were.
    text = nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, X_{i,j})") + \
        nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i})")
    before = analysis(text)
    result = apply(before, Step("prefix_sum_exp", {"block": "Z"}))
    assert print_program(result).startswith("tmp M: f32[16]\n\nL^{16}_{i}")
    after = analyze(result)
    assert [t.name for t in after.outputs()] == ["Z"] and after.diagnostics == []
    assert verify(before, after).ok


def test_prefix_sum_exp_is_offered_from_the_max_as_well():
    text = SOFTMAX
    at = text.index("M_{i} = max")
    offered = prefix_sum_exp.candidates(Context(analysis(text)), at)
    assert [c.step.args for c in offered] == [{"block": "Z"}]
    assert prefix_sum_exp.candidates(Context(analysis(text)), text.index("Y_{i,j} =")) == []


# ------------------------------------------------------- online_softmax


ONLINE_ROWS = """\
L^{16}_{i} [
  M_{i} = -inf;
  Z_{i} = 0.0;
  L^{10}_{j} [
    M_new_{i} = max(M_{i}, X_{i,j});
    Z_{i} = Z_{i}*exp(M_{i} - M_new_{i}) + exp(X_{i,j} - M_new_{i});
    M_{i} = M_new_{i};
  ];
];
"""


def test_online_softmax_moves_the_reduction_loop_inside_the_rows():
    # The max runs j outside i; the sum names its loops r and k.
    check_action(online_softmax, """\
L^{10}_{j}
  L^{16}_{i} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{r}
  L^{10}_{k} [
    Z_{r} += exp(X_{r,k} - M_{r});$0
  ];
""" + SOFTMAX_TAIL, ONLINE_ROWS + SOFTMAX_TAIL)


def test_online_softmax_keeps_the_comments_before_the_max_unit_before_the_fused_nest():
    # The comment was on loop j, which moves inside the rows.
    check_action(online_softmax, """\
# the max, j outside
L^{10}_{j}
  L^{16}_{i} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});$0
  ];
""" + SOFTMAX_TAIL, "# the max, j outside\n" + ONLINE_ROWS + SOFTMAX_TAIL)


def test_online_softmax_of_scalars_is_a_bracketed_body():
    check_action(online_softmax, """\
L^{10}_{j} [
  M = max(M, X_{j});
];

L^{10}_{j} [
  Z += exp(X_{j} - M);$0
];

L^{10}_{j} [
  Y_{j} = exp(X_{j} - M)/Z;
];
""", """\
[
  M = -inf;
  Z = 0.0;
  L^{10}_{j} [
    M_new = max(M, X_{j});
    Z = Z*exp(M - M_new) + exp(X_{j} - M_new);
    M = M_new;
  ];
];

L^{10}_{j} [
  Y_{j} = exp(X_{j} - M)/Z;
];
""")


def test_online_softmax_inside_a_parallel_batch_loop():
    check_action(online_softmax, """\
P^{4}_{b} [
  L^{16}_{i}
    L^{10}_{j} [
      M_{b,i} = max(M_{b,i}, X_{b,i,j});
    ];
  L^{16}_{i}
    L^{10}_{j} [
      Z_{b,i} += exp(X_{b,i,j} - M_{b,i});$0
    ];
  L^{16}_{i}
    L^{10}_{j} [
      Y_{b,i,j} = exp(X_{b,i,j} - M_{b,i})/Z_{b,i};
    ];
];
""", """\
P^{4}_{b} [
  L^{16}_{i} [
    M_{b,i} = -inf;
    Z_{b,i} = 0.0;
    L^{10}_{j} [
      M_new_{b,i} = max(M_{b,i}, X_{b,i,j});
      Z_{b,i} = Z_{b,i}*exp(M_{b,i} - M_new_{b,i}) + exp(X_{b,i,j} - M_new_{b,i});
      M_{b,i} = M_new_{b,i};
    ];
  ];
  L^{16}_{i}
    L^{10}_{j} [
      Y_{b,i,j} = exp(X_{b,i,j} - M_{b,i})/Z_{b,i};
    ];
];
""")


def test_online_softmax_keeps_an_output_sum_an_output():
    # Z is the program's output; the fused pass reads M after writing it,
    # so M stays a temporary and Z an output without a declaration.
    text = nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, X_{i,j})") + \
        nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i})")
    before = analysis(text)
    after = analyze(apply(before, Step("online_softmax", {"block": "Z"})))
    assert [t.name for t in after.outputs()] == ["Z"]
    assert verify(before, after).ok


def test_online_softmax_declares_f16_running_values():
    result = check_action(online_softmax, """\
in  X: f16[16,10]
tmp M: f16[16]

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});$0
  ];
""" + SOFTMAX_TAIL, """\
in  X: f16[16,10]
tmp M: f16[16]
tmp M_new: f16[16]

""" + ONLINE_ROWS + SOFTMAX_TAIL)
    assert "tmp M_new: f16[16]" in result
    assert analysis(result).diagnostics == []


def test_the_fused_pass_checks_without_warnings():
    # M_new and M are written at every j and read at the next one: no
    # "only the last iteration's value remains".
    result = apply(analysis(SOFTMAX), Step("online_softmax", {"block": "Z"}))
    assert analyze(result).diagnostics == []


def test_a_value_read_inside_its_loop_is_not_a_repeated_write():
    read_inside = analysis(nest("L^{4}_{i} L^{8}_{j}", "T_{i} = X_{i,j}*2.0", "Y_{i,j} = T_{i} + 1.0"))
    assert read_inside.diagnostics == []
    read_after = analysis(nest("L^{4}_{i} L^{8}_{j}", "T_{i} = X_{i,j}*2.0") + nest("L^{4}_{i}", "Y_{i} = T_{i}"))
    assert [d.code for d in read_after.diagnostics] == ["repeated-write"]


# --------------------------------------------- attention_without_scores


def test_attention_recomputes_assigned_scores_and_keeps_weight_factors():
    # Scores written by a plain assignment, the weighted sum with its loops
    # in another order and its factors in another order, with a constant.
    check_action(attention_without_scores, """\
L^{16}_{i}
  L^{10}_{j} [
    S_{i,j} = X_{i,j}*0.5;
  ];

L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, S_{i,j});
  ];

L^{16}_{i}
  L^{10}_{j} [
    Z_{i} += exp(S_{i,j} - M_{i});
  ];

L^{10}_{k}
  L^{16}_{r}
    L^{4}_{d} [
      O_{r,d} += V_{k,d}*exp(S_{r,k} - M_{r})*2.0/Z_{r};$0
    ];
""", """\
L^{16}_{i} [
  M_{i} = -inf;
  Z_{i} = 0.0;
  L^{4}_{d} [
    O_{i,d} = 0.0;
  ];
  L^{10}_{j} [
    S_j_{i} = X_{i,j}*0.5;
    M_new_{i} = max(M_{i}, S_j_{i});
    Z_{i} = Z_{i}*exp(M_{i} - M_new_{i}) + exp(S_j_{i} - M_new_{i});
    L^{4}_{d} [
      O_{i,d} = O_{i,d}*exp(M_{i} - M_new_{i}) + exp(S_j_{i} - M_new_{i})*V_{j,d}*2.0;
    ];
    M_{i} = M_new_{i};
  ];
  L^{4}_{d} [
    O_{i,d} = O_{i,d}/Z_{i};
  ];
];
""")


def test_attention_reads_scores_that_something_else_reads_too():
    text = (nest("L^{16}_{i} L^{10}_{j} L^{8}_{e}", "S_{i,j} += Q_{i,e}*K_{j,e}")
            + nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, S_{i,j})")
            + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(S_{i,j} - M_{i})")
            + nest("L^{16}_{i} L^{4}_{d} L^{10}_{j}", "O_{i,d} += exp(S_{i,j} - M_{i})/Z_{i}*V_{j,d}")
            + nest("L^{16}_{i} L^{10}_{j}", "T_{i,j} = S_{i,j}*2.0"))
    (offered,) = attention_without_scores.candidates(Context(analysis(text)), None)
    assert "reading S_{i,j}" in offered.title
    result = print_program(apply(analysis(text), offered.step))
    assert result.startswith("L^{16}_{i}\n  L^{10}_{j}\n    L^{8}_{e} [\n      S_{i,j} += Q_{i,e}*K_{j,e};")
    assert "S_j" not in result
    assert verify(analysis(text), analyze(apply(analysis(text), offered.step))).ok


def test_attention_on_the_gpu_example_renames_the_thread_loop_it_nests():
    # The output's head dimension is thread axis tx there; inside the key
    # loop it becomes a serial loop with a fresh name.
    text = (EXAMPLES / "mha_attention_gpu.leir").read_text()
    result = print_program(apply(analysis(text), Step("attention_without_scores", {"block": "O"})))
    assert "L^{32}_{tx_1} [\n        O_{by,bx,tx,tx_1} = 0.0;" in result
    assert "S_j_{by,bx,tx} += Q_{by,bx,tx,d}*K_{by,bx,j,d}*0.17677669529663687;" in result


def test_attention_is_offered_from_any_of_its_units():
    text = (EXAMPLES / "mha_attention.leir").read_text()
    ctx = Context(analysis(text))
    for marker in ("S_{b,h,i,j} +=", "M_{b,h,i} = max", "Z_{b,h,i} +=", "O_{b,h,i,d} +="):
        offered = attention_without_scores.candidates(ctx, text.index(marker))
        assert [c.step.args for c in offered] == [{"block": "O"}], marker


# -------------------------------------------------------------- refusals

MAX = nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, X_{i,j})")
SUM = nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i})")
OUT = nest("L^{16}_{i} L^{4}_{d} L^{10}_{j}", "O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d}")
SQUARE_MAX = nest("L^{16}_{i} L^{16}_{j}", "M_{i} = max(M_{i}, X_{i,j})")
SQUARE_SUM = nest("L^{16}_{i} L^{16}_{j}", "Z_{i} += exp(X_{i,j} - M_{i})")
X_TWICE = nest("L^{16}_{i} L^{10}_{j}", "X_{i,j} = A_{i,j}*2.0")
X_AGAIN = nest("L^{16}_{i} L^{10}_{j}", "X_{i,j} = A_{i,j}*3.0")
INTEGER = "in X: i32[16,10]\ntmp M: i32[16]\n"
VECTOR_MAX = nest("L^{10}_{j} V^{16}_{i}", "M_{i} = max(M_{i}, X_{i,j})")
VECTOR_SUM = nest("L^{10}_{j} V^{16}_{i}", "Z_{i} += exp(X_{i,j} - M_{i})")

#: reason -> (program, names the detailed message must mention), per module.
PREFIX_MAX_REFUSALS = {
    "not-max": (nest("L^{16}_{i} L^{10}_{j}", "M_{i} += X_{i,j}"), ["M_{i}"]),
    # The max is block M_1: block M is the explicit initial value.
    "init-explicit": (nest("L^{16}_{i}", "M_{i} = -inf") + MAX, ["M_{i} = -inf"], "M_1"),
    "guarded": (nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, X_{i,j}) where j < 5"), ["M_{i}"]),
    "not-one-axis": (nest("L^{16}_{i} L^{2}_{ja} L^{5}_{jb}", "M_{i} = max(M_{i}, X_{i,ja*5+jb})"), ["ja, jb"]),
    "loop-start-not-zero": (nest("L^{16}_{i} L^{10}_{j=2}", "M_{i} = max(M_{i}, X_{i,j})"), ["loop j", "2"]),
    "not-alone": (nest("L^{16}_{i} L^{10}_{j}", "M_{i} = max(M_{i}, X_{i,j})", "W_{i,j} = X_{i,j}*2.0"),
                  ["loop j", "M_{i}"]),
    "rows-not-distinct": (nest("L^{16}_{i} L^{10}_{j}", "M_{i//2} = max(M_{i//2}, X_{i,j})"), ["M_{i//2}"]),
}

SOFTMAX_REFUSALS = {
    "not-sum-of-exp": (MAX + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += X_{i,j} - M_{i}"), ["Z_{i}"]),
    "no-max": (SUM, ["M_{i}", "input"]),
    "init-explicit": (nest("L^{16}_{i}", "M_{i} = -inf") + MAX + SUM, ["M_{i} = -inf"]),
    "guarded": (MAX + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i}) where j < 5"), ["Z_{i}"]),
    "not-one-axis": (nest("L^{16}_{i} L^{2}_{ja} L^{5}_{jb}", "M_{i} = max(M_{i}, X_{i,ja*5+jb})")
                     + nest("L^{16}_{i} L^{2}_{ja} L^{5}_{jb}", "Z_{i} += exp(X_{i,ja*5+jb} - M_{i})"), ["ja, jb"]),
    "loop-start-not-zero": (nest("L^{16}_{i} L^{10}_{j=2}", "M_{i} = max(M_{i}, X_{i,j})")
                            + nest("L^{16}_{i} L^{10}_{j=2}", "Z_{i} += exp(X_{i,j} - M_{i})"), ["loop j"]),
    "not-alone": (MAX + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i})", "W_{i,j} = X_{i,j}*2.0"),
                  ["loop j", "W_{i,j}"]),
    "rows-not-distinct": (nest("L^{16}_{i} L^{10}_{j}", "M_{i//2} = max(M_{i//2}, X_{i,j})")
                          + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{i//2})"), ["M_{i//2}"]),
    "not-siblings": (MAX + "L^{16}_{i} [ L^{10}_{j} [ Z_{i} += exp(X_{i,j} - M_{i}); ]; Y_{i} = Z_{i}*2.0; ];\n",
                     ["Z_{i}", "M_{i} = max"]),
    "different-axis": (SQUARE_MAX + nest("L^{16}_{i} L^{16}_{j}", "Z_{i} += exp(X_{j,i} - M_{i})"),
                       ["loop j", "M_{i} = max"]),
    "different-rows": (MAX + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(X_{i,j} - M_{0})"), ["M_{0}"]),
    "different-operand": (MAX + nest("L^{16}_{i} L^{10}_{j}", "Z_{i} += exp(W_{i,j} - M_{i})"), ["W_{i,j}", "X_{i,j}"]),
    "interleaved": (X_TWICE + MAX + X_AGAIN + SUM, ["X_{i,j} = A_{i,j}*3.0", "Z_{i}"]),
}

ONLINE_REFUSALS = {
    **SOFTMAX_REFUSALS,
    "integer-max": (INTEGER + MAX + SUM, ["M", "i32"]),
    "vectorized-row-loop": (VECTOR_MAX + VECTOR_SUM, ["loop i"]),
}


def _out(equation: str, loops: str = "L^{16}_{i} L^{4}_{d} L^{10}_{j}") -> str:
    return nest(loops, equation)


ATTENTION_REFUSALS = {
    "not-weighted-sum": (MAX + SUM + _out("O_{i,d} += exp(X_{i,j} - M_{i})*V_{j,d}"), ["O_{i,d}"]),
    "no-max": (SUM + OUT, ["M_{i}", "input"]),
    "init-explicit": (MAX + SUM + nest("L^{16}_{i} L^{4}_{d}", "O_{i,d} = 0.0") + OUT, ["O_{i,d} = 0.0"], "O_1"),
    "guarded": (MAX + SUM + _out("O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d} where j < 5"), ["O_{i,d}"]),
    "not-one-axis": (MAX + SUM + _out("O_{i,d} += exp(X_{i,ja*5+jb} - M_{i})/Z_{i}*V_{ja*5+jb,d}",
                                      "L^{16}_{i} L^{4}_{d} L^{2}_{ja} L^{5}_{jb}"), ["ja, jb"]),
    "loop-start-not-zero": (MAX + SUM + _out("O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d}",
                                             "L^{16}_{i} L^{4}_{d} L^{10}_{j=2}"), ["loop j"]),
    "not-alone": (MAX + SUM + nest("L^{16}_{i} L^{4}_{d} L^{10}_{j}", "O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d}",
                                   "W_{i,d,j} = V_{j,d}*2.0"), ["loop j", "W_{i,d,j}"]),
    "rows-not-distinct": (MAX + SUM + _out("O_{i//2,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d}"), ["O_{i//2,d}"]),
    "not-siblings": (MAX + SUM + "L^{16}_{i} [ L^{4}_{d} L^{10}_{j} [ O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*V_{j,d}; ];"
                     " Y_{i} = O_{i,0}*2.0; ];\n", ["O_{i,d}", "M_{i} = max"]),
    "different-axis": (SQUARE_MAX + SQUARE_SUM + _out("O_{i,d} += exp(X_{j,i} - M_{i})/Z_{i}*V_{j,d}",
                                                      "L^{16}_{i} L^{4}_{d} L^{16}_{j}"), ["loop j"]),
    "different-rows": (MAX + SUM + _out("O_{i,d} += exp(X_{i,j} - M_{i})/Z_{0}*V_{j,d}"), ["Z_{0}"]),
    "different-operand": (MAX + SUM + _out("O_{i,d} += exp(W_{i,j} - M_{i})/Z_{i}*V_{j,d}"), ["W_{i,j}", "X_{i,j}"]),
    "interleaved": (X_TWICE + MAX + SUM + X_AGAIN + OUT, ["X_{i,j} = A_{i,j}*3.0", "O_{i,d}"]),
    "integer-max": (INTEGER + MAX + SUM + OUT, ["M", "i32"]),
    "vectorized-row-loop": (VECTOR_MAX + VECTOR_SUM + OUT, ["loop i"]),
}

REFUSALS = {
    prefix_max: (PREFIX_MAX_REFUSALS, "M"),
    prefix_sum_exp: (SOFTMAX_REFUSALS, "Z"),
    online_softmax: (ONLINE_REFUSALS, "Z"),
    attention_without_scores: (ATTENTION_REFUSALS, "O"),
}


def _refused(module, reason: str) -> NotApplicable:
    table, block = REFUSALS[module]
    text, names, *other_block = table[reason]
    block = other_block[0] if other_block else block
    error = check_not_applicable(module, text, f"{module.ID}-{reason}", {"block": block})
    assert isinstance(error, module.ERRORS[reason])
    for name in names:
        assert name in error.detail, f"{name!r} not in {error.detail!r}"
    assert error.span is not None
    return error


def _refused_by_the_checker(module, reason: str) -> None:
    """The program for ``reason`` is one the checker refuses (``BY_THE_CHECKER``)."""
    from leir.bridge.document import load_leir

    table, _ = REFUSALS[module]
    text = table[reason][0].replace("$0", "")
    assert "reduction-not-injective" in [d.code for d in load_leir(text).diagnostics if d.is_error]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.ID)
def test_every_precondition_has_a_refusal_test(module):
    table, _ = REFUSALS[module]
    own = {reason for reason, error in module.ERRORS.items() if error.code == f"{module.ID}-{reason}"}
    assert set(table) == own


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.ID)
def test_every_typed_error_is_exported_under_its_name(module):
    """The errors are made from their reasons (``_rows.refusals``) and
    unpacked into names by position: each name must hold its own error, or
    ``module.NoMax`` raises another code and errors do not unpickle."""
    import pickle

    # attention_without_scores finds the softmax's sum from the divisor.
    aliases = {"not-sum-of-exp": "not-weighted-sum"} if module is attention_without_scores else {}
    for reason, error in module.ERRORS.items():
        assert getattr(module, error.__name__) is error
        assert error.__module__ == module.__name__
        assert error.code == f"{module.ID}-{aliases.get(reason, reason)}"
        assert type(pickle.loads(pickle.dumps(error("short", "detail", None)))) is error


#: Reasons whose program the checker already refuses (a reduction writing
#: one element from several iterations would be re-initialised by TVM), so
#: the step is never asked for.
BY_THE_CHECKER = {"rows-not-distinct"}


@pytest.mark.parametrize("module,reason", [(m, r) for m in MODULES for r in REFUSALS[m][0]],
                         ids=lambda x: getattr(x, "ID", x))
def test_each_precondition_refuses_its_program(module, reason):
    if reason in BY_THE_CHECKER:
        _refused_by_the_checker(module, reason)
    else:
        _refused(module, reason)


def test_attention_weights_that_read_the_running_maximum_are_refused():
    text = MAX + SUM + _out("O_{i,d} += exp(X_{i,j} - M_{i})/Z_{i}*M_{i}")
    error = check_not_applicable(attention_without_scores, text, attention_without_scores.NotWeightedSum, {"block": "O"})
    assert "reads M" in error.detail


def test_a_step_naming_a_missing_block_is_stale():
    for module in MODULES:
        with pytest.raises(StaleStep):
            apply(analysis(SOFTMAX), Step(module.ID, {"block": "Q"}))


# ------------------------------------------------------ bundled examples


def _examples():
    return sorted(EXAMPLES.glob("*.leir"))


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_offered_exactly_when_check_passes(path):
    ctx = Context(analysis(path.read_text()))
    for module in MODULES:
        check_offered_exactly_when_check_passes(module, ctx, [{"block": b} for b in ctx.block_names], NotApplicable)


def test_where_the_patterns_appear_in_the_examples():
    def offered(name):
        ctx = Context(analysis((EXAMPLES / f"{name}.leir").read_text()))
        return [len(m.candidates(ctx, None)) for m in MODULES]

    assert offered("softmax") == [1, 1, 1, 0]
    assert offered("softmax_gpu") == [1, 1, 1, 0]
    assert offered("max_axis1") == [1, 0, 0, 0]
    assert offered("max_pool2d") == [0, 0, 0, 0]  # a max over two loops
    for name in ("mha_attention", "mha_attention_gpu", "gqa_attention", "softmax_matmul"):
        assert offered(name) == [1, 1, 1, 1], name


#: At most this many steps per transformation and example are verified.
SAMPLE = 6


@pytest.mark.slow
@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.stem)
def test_every_offered_step_on_the_examples_verifies(path):
    before = analysis(path.read_text())
    rng = random.Random(path.stem)
    for module in MODULES:
        offered = module.candidates(Context(before), None)
        if len(offered) > SAMPLE:
            offered = rng.sample(offered, SAMPLE)
        for candidate in offered:
            after = analyze(apply(before, candidate.step))
            assert after.ok and not after.diagnostics, (candidate.title, [d.message for d in after.diagnostics])
            result = verify(before, after)
            assert result.ok, f"{path.stem}: {candidate.title}: {result.summary()}"

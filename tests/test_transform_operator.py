"""Operator-level transformations (issue 3): operator fusion and fission,
expression splitting, common subexpression elimination, dead code
elimination, expression reorder, tensor split and concat.

Each precondition has a ``test_<id>_fail_<reason>``; every step offered on
a bundled example is legal by ``check``, and a deterministic sample of them
is applied and verified numerically (``slow``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.printer import print_program
from leir.transforms import apply, verify
from leir.transforms.steps import (
    common_subexpression_elimination as cse,
    dead_code_elimination as dce,
    expression_reorder,
    expression_splitting,
    operator_fission,
    operator_fusion,
    tensor_concat,
    tensor_split,
)
from leir.transforms.base import Context, Step
from leir.transforms.testing import check_action, check_not_applicable

MODULES = (operator_fusion, operator_fission, expression_splitting, cse, dce, expression_reorder, tensor_split,
           tensor_concat)
EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.leir"))


def load(text: str):
    doc = load_leir(text)
    assert doc.ok, [d.message for d in doc.diagnostics if d.is_error]
    return doc.analysis


# ============================================================ operator_fusion


def test_operator_fusion_fuses_the_elementwise_tail_of_a_matmul_fully():
    check_action(operator_fusion, """\
L^{8}_{i}
  L^{6}_{j}$0 [
    C_{i,j} = X_{i,j}*2.0;
  ];

L^{8}_{i}
  L^{6}_{j} [
    Y_{i,j} = max(C_{i,j}, 0.0);
  ];
""", """\
L^{8}_{i}
  L^{6}_{j} [
    C_{i,j} = X_{i,j}*2.0;
    Y_{i,j} = max(C_{i,j}, 0.0);
  ];
""", args={"block": "C", "loop": "j"})


def test_operator_fusion_renames_a_clashing_inner_loop_of_the_second_nest():
    check_action(operator_fusion, """\
L^{4}_{i}$0
  L^{4}_{j} [
    A_{i,j} = X_{i,j}*2.0;
  ];

L^{4}_{j}
  L^{4}_{i} [
    B_{j,i} = A_{j,i} + 1.0;
  ];
""", """\
L^{4}_{i} [
  L^{4}_{j} [
    A_{i,j} = X_{i,j}*2.0;
  ];
  L^{4}_{i_1} [
    B_{i,i_1} = A_{i,i_1} + 1.0;
  ];
];
""", args={"block": "A", "loop": "i"})


def test_operator_fusion_is_offered_from_the_second_nest_too():
    text = """\
L^{8}_{i} [
  A_{i} = X_{i}*2.0;
];

L^{8}_{i}$0 [
  B_{i} = A_{i} + 1.0;
];
"""
    at = text.index("$0")
    found = operator_fusion.candidates(Context(load(text.replace("$0", ""))), at)
    assert [c.step.args for c in found] == [{"block": "A", "loop": "i"}]


def test_operator_fusion_proves_an_earlier_iteration_by_enumeration():
    # B_{i} reads A_{i//2}, written at iteration i//2 <= i: legal, but not by
    # the affine test (// is not affine). C reads A too, so TVM allocates A
    # outside the fused loop.
    check_action(operator_fusion, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{16}_{i} [
  B_{i} = A_{i//2} + 1.0;
];

L^{16}_{i} [
  C_{i} = A_{i}*3.0;
];
""", """\
L^{16}_{i} [
  A_{i} = X_{i}*2.0;
  B_{i} = A_{i//2} + 1.0;
];

L^{16}_{i} [
  C_{i} = A_{i}*3.0;
];
""", args={"block": "A", "loop": "i"})


def test_operator_fusion_fail_dependence_through_a_temporary_local_to_the_loop():
    # Legal in LEIR's order, but TVM allocates A inside the fused loop (all
    # its accesses are there), so A_{i//2} would not survive to iteration i.
    e = check_not_applicable(operator_fusion, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{16}_{i} [
  B_{i} = A_{i//2} + 1.0;
];
""", operator_fusion.DependenceViolated, {"block": "A", "loop": "i"})
    assert "TVM allocates" in e.detail and "A_{" in e.detail


def test_operator_fusion_keeps_the_second_nests_comment_on_its_part():
    result = check_action(operator_fusion, """\
# max
L^{8}_{i}$0
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

# sum
L^{8}_{i}
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];
""", """\
# max
L^{8}_{i} [
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];
  # sum
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];
];
""", args={"block": "M", "loop": "i"})
    assert result.count("#") == 2


def test_operator_fusion_fail_no_next_nest():
    e = check_not_applicable(operator_fusion, "L^{8}_{i}$0 [\n  Y_{i} = X_{i}*2.0;\n];\n",
                             operator_fusion.NoNextNest, {"block": "Y", "loop": "i"})
    assert "Y" in e.detail


def test_operator_fusion_fail_headers_differ():
    e = check_not_applicable(operator_fusion, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{8}_{r} [
  B_{r} = A_{r} + 1.0;
];
""", operator_fusion.HeadersDiffer, {"block": "A", "loop": "i"})
    assert "loop i" in e.detail and "r" in e.detail and "8 iterations" in e.detail


def test_operator_fusion_fail_dependence_on_a_later_iteration():
    e = check_not_applicable(operator_fusion, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{16}_{i} [
  B_{i} = A_{15 - i} + 1.0;
];
""", operator_fusion.DependenceViolated, {"block": "A", "loop": "i"})
    assert "reads A_{8} at i=7" in e.detail and "writes it at i=8" in e.detail


def test_operator_fusion_fail_dependence_across_parallel_iterations():
    # Serial, this fusion would be legal (see the enumeration test above);
    # parallel iterations are not ordered.
    e = check_not_applicable(operator_fusion, """\
P^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

P^{16}_{i} [
  B_{i} = A_{i//2} + 1.0;
];
""", operator_fusion.DependenceViolated, {"block": "A", "loop": "i"})
    assert "parallel loop i" in e.detail and "A" in e.detail


def test_operator_fusion_fail_unsynchronized_threads():
    e = check_not_applicable(operator_fusion, """\
B^{4}_{bx}$0
  B^{32}_{tx} [
    A_{bx*32+tx} = X_{bx*32+tx}*2.0;
  ];

B^{4}_{bx}
  B^{32}_{tx} [
    Y_{bx*32+tx} = A_{bx*32+31 - tx} + 1.0;
  ];
""", operator_fusion.UnsynchronizedThreads, {"block": "A", "loop": "bx"})
    assert "tx" in e.detail


def test_operator_fusion_fail_vectorized_temporary():
    e = check_not_applicable(operator_fusion, """\
L^{8}_{i}
  V^{4}_{j}$0 [
    T_{i,j} = X_{i,j}*3.0;
  ];

L^{8}_{i}
  V^{4}_{j} [
    Y_{i,j} = T_{i,j}*2.0;
  ];
""", operator_fusion.VectorizedTemporary, {"block": "T", "loop": "j"})
    assert "T" in e.detail and "loop j" in e.detail


# =========================================================== operator_fission


def test_operator_fission_splits_three_items_after_the_first():
    check_action(operator_fission, """\
L^{8}_{i}$0 [
  A_{i} = X_{i}*2.0;
  B_{i} = A_{i} + 1.0;
  C_{i} = B_{i}*A_{i};
];
""", """\
L^{8}_{i} [
  A_{i} = X_{i}*2.0;
];

L^{8}_{i} [
  B_{i} = A_{i} + 1.0;
  C_{i} = B_{i}*A_{i};
];
""", args={"block": "B", "loop": "i"})


def test_operator_fission_separates_two_accumulations_of_one_sum():
    # Both accumulate into C: reordering them is a reassociation.
    check_action(operator_fission, """\
L^{8}_{i}
  L^{16}_{k}$0 [
    C_{i} += X_{i,k};
    C_{i} += Y_{i,k};
  ];
""", """\
L^{8}_{i} [
  L^{16}_{k} [
    C_{i} += X_{i,k};
  ];
  L^{16}_{k} [
    C_{i} += Y_{i,k};
  ];
];
""", args={"block": "C_1", "loop": "k"})


def test_operator_fission_fail_nothing_before():
    e = check_not_applicable(operator_fission, """\
L^{8}_{i}$0 [
  A_{i} = X_{i}*2.0;
  B_{i} = A_{i} + 1.0;
];
""", operator_fission.NothingBefore, {"block": "A", "loop": "i"})
    assert "A" in e.detail and "loop i" in e.detail


def test_operator_fission_fail_dependence():
    e = check_not_applicable(operator_fission, """\
L^{8}_{i}
  L^{10}_{j}$0 [
    M_{i} = max(M_{i}, X_{i,j});
    Y_{i,j} = X_{i,j} - M_{i};
  ];
""", operator_fission.DependenceViolated, {"block": "Y", "loop": "j"})
    assert "M_{0}" in e.detail and "j=" in e.detail


def test_fusion_then_fission_gives_back_the_program_on_every_example():
    for path in EXAMPLES:
        doc = load_leir(path.read_text())
        original = print_program(doc.program)
        for c in operator_fusion.candidates(Context(doc.analysis), None):
            fused = load(print_program(apply(doc.analysis, c.step)))
            back = [print_program(apply(fused, f.step)) for f in operator_fission.candidates(Context(fused), None)]
            assert original in back, f"{path.name}: no fission undoes {c.title}"


# ======================================================= expression_splitting


def test_expression_splitting_a_constant_subexpression_becomes_a_scalar():
    check_action(expression_splitting, """\
L^{8}_{i} [
  Y_{i} = X_{i}*sqrt(W_{0} + 1.0)$0;
];
""", """\
sqrt_W = sqrt(W_{0} + 1.0);

L^{8}_{i} [
  Y_{i} = X_{i}*sqrt_W;
];
""", args={"block": "Y", "mode": "temporary", "expr": "sqrt(W_{0} + 1.0)"})


def test_expression_splitting_keeps_the_dtype_of_the_equation():
    check_action(expression_splitting, """\
out Y: f16[8]

L^{8}_{i} [
  Y_{i} = exp(X_{i})*2.0$0;
];
""", """\
out Y: f16[8]
tmp exp_X: f16[8]

L^{8}_{i} [
  exp_X_{i} = exp(X_{i});
  Y_{i} = exp_X_{i}*2.0;
];
""", args={"block": "Y", "mode": "temporary", "expr": "exp(X_{i})"})


def test_expression_splitting_a_difference_into_two_equations():
    check_action(expression_splitting, """\
L^{8}_{i} [
  Y_{i} = exp(X_{i}) - W_{i}$0;
];
""", """\
L^{8}_{i} [
  Y_{i} = exp(X_{i});
  Y_{i} -= W_{i};
];
""", args={"block": "Y", "mode": "accumulations"})


def test_expression_splitting_a_max_reduction_of_two_maxima():
    check_action(expression_splitting, """\
L^{8}_{i}
  L^{4}_{k} [
    M_{i} = max(M_{i}, max(X_{i,k}, W_{k}))$0;
  ];
""", """\
L^{8}_{i}
  L^{4}_{k} [
    M_{i} = max(M_{i}, X_{i,k});
    M_{i} = max(M_{i}, W_{k});
  ];
""", args={"block": "M", "mode": "accumulations"})


def test_expression_splitting_fail_reads_own_output():
    e = check_not_applicable(expression_splitting, """\
L^{8}_{i} [
  Y_{i} = X_{i};
];

L^{8}_{i} [
  Y_{i} = Y_{i}*2.0 + X_{i}$0;
];
""", expression_splitting.ReadsOwnOutput, {"block": "Y_1", "mode": "temporary", "expr": "Y_{i}*2.0"})
    assert "Y" in e.detail


def test_expression_splitting_fail_operand_changes():
    e = check_not_applicable(expression_splitting, """\
L^{8}_{i}
  L^{16}_{j} [
    S_{i} += X_{i,j};
    Y_{i,j} = X_{i,j} - S_{i}*2.0$0;
  ];
""", expression_splitting.OperandChanges, {"block": "Y", "mode": "temporary", "expr": "S_{i}*2.0"})
    assert "loop j" in e.detail and "S" in e.detail


def test_expression_splitting_fail_not_splittable():
    e = check_not_applicable(expression_splitting, "L^{8}_{i} [\n  Y_{i} = exp(X_{i})$0;\n];\n",
                             expression_splitting.NotSplittable, {"block": "Y", "mode": "accumulations"})
    assert "exp(X_{i})" in e.detail


def test_expression_splitting_fail_vectorized_temporary():
    e = check_not_applicable(expression_splitting, """\
L^{8}_{i}
  V^{4}_{j} [
    Y_{i,j} = exp(X_{i,j})*2.0$0;
  ];
""", expression_splitting.VectorizedTemporary, {"block": "Y", "mode": "temporary", "expr": "exp(X_{i,j})"})
    assert "loop j" in e.detail


# ========================================== common_subexpression_elimination


FUSED_SOFTMAX = """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i} [
  L^{10}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i})$0;
  ];
  L^{10}_{c} [
    Y_{i,c} = exp(X_{i,c} - M_{i})/Z_{i};
  ];
];
"""


def test_cse_across_nests_inside_one_fused_loop():
    check_action(cse, FUSED_SOFTMAX, """\
L^{16}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{16}_{i} [
  L^{10}_{j} [
    exp_X_{i,j} = exp(X_{i,j} - M_{i});
    Z_{i} += exp_X_{i,j};
  ];
  L^{10}_{c} [
    Y_{i,c} = exp_X_{i,c}/Z_{i};
  ];
];
""", args={"block": "Z", "expr": "exp(X_{i,j} - M_{i})", "also": "Y"})


def test_cse_fail_single_use():
    e = check_not_applicable(cse, "L^{8}_{i} [\n  Y_{i} = exp(X_{i})*2.0$0;\n];\n", cse.SingleUse,
                             {"block": "Y", "expr": "exp(X_{i})"})
    assert "exp(X_{i})" in e.detail and "also" in e.detail


def test_cse_fail_not_in_other():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  A_{i} = exp(X_{i})*2.0$0;
  B_{i} = A_{i} + 1.0;
];
""", cse.NotInOther, {"block": "A", "expr": "exp(X_{i})", "also": "B"})
    assert "exp(X_{i})" in e.detail


def test_cse_fail_other_not_later():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  A_{i} = exp(X_{i})*2.0$0;
  B_{i} = exp(X_{i}) + A_{i};
];
""", cse.OtherNotLater, {"block": "B", "expr": "exp(X_{i})", "also": "A"})
    assert "A" in e.detail and "later" in e.detail


def test_cse_fail_dtype_mismatch():
    e = check_not_applicable(cse, """\
out B: f16[8]

L^{8}_{i} [
  A_{i} = exp(X_{i})*2.0$0;
  B_{i} = exp(X_{i}) + 1.0;
];
""", cse.DtypeMismatch, {"block": "A", "expr": "exp(X_{i})", "also": "B"})
    assert "f16" in e.detail and "f32" in e.detail


def test_cse_fail_reads_own_output():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  S_{i} = X_{i}*2.0;
  Y_{i} = exp(S_{i})*2.0$0;
  S_{i} = exp(S_{i})*3.0;
];
""", cse.ReadsOwnOutput, {"block": "Y", "expr": "exp(S_{i})", "also": "S_1"})
    assert "S" in e.detail


def test_cse_fail_operand_changes():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  S_{i} = X_{i}*2.0;
];

L^{8}_{i} [
  A_{i} = exp(S_{i})*2.0$0;
];

L^{8}_{i} [
  S_{i} = S_{i} + 1.0;
];

L^{8}_{i} [
  B_{i} = exp(S_{i}) + A_{i};
];
""", cse.OperandChanges, {"block": "A", "expr": "exp(S_{i})", "also": "B"})
    assert "S_{i} = S_{i} + 1.0" in e.detail


def test_cse_fail_guarded():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  A_{i} = exp(X_{i})*2.0 where i < 4$0;
];

L^{8}_{i} [
  B_{i} = exp(X_{i}) + 1.0;
];
""", cse.Guarded, {"block": "A", "expr": "exp(X_{i})", "also": "B"})
    assert "guard" in e.detail


def test_cse_fail_index_mismatch():
    e = check_not_applicable(cse, """\
L^{8}_{i} [
  L^{8}_{j} [
    A_{i,j} = exp(X_{i,j})*2.0$0;
  ];
  L^{8}_{j} [
    B_{i,j} = exp(X_{j,i}) + 1.0;
  ];
];
""", cse.IndexMismatch, {"block": "A", "expr": "exp(X_{i,j})", "also": "B"})
    assert "loop i" in e.detail


def test_cse_fail_vectorized_temporary():
    e = check_not_applicable(cse, """\
L^{8}_{i}
  V^{4}_{j} [
    Y_{i,j} = exp(X_{i,j})*exp(X_{i,j})$0;
  ];
""", cse.VectorizedTemporary, {"block": "Y", "expr": "exp(X_{i,j})"})
    assert "loop j" in e.detail


# ======================================================= dead_code_elimination


def test_dce_removes_every_equation_of_a_dead_temporary_and_empty_nests():
    check_action(dce, """\
tmp T: f32[8]

L^{8}_{i}
  L^{4}_{k} [
    T_{i} += X_{i,k};
  ];

L^{8}_{i} [
  T_{i} = T_{i}*2.0$0;
  Y_{i} = W_{i} + 1.0;
];
""", """\
in  X: f32[8,4]

L^{8}_{i} [
  Y_{i} = W_{i} + 1.0;
];
""", args={"tensor": "T"})


def test_dce_fail_not_temporary():
    e = check_not_applicable(dce, "L^{8}_{i} [\n  Y_{i} = X_{i}*2.0$0;\n];\n", dce.NotTemporary, {"tensor": "Y"})
    assert "Y is an output" in e.detail


def test_dce_fail_tensor_read():
    e = check_not_applicable(dce, """\
tmp T: f32[8]

L^{8}_{i} [
  T_{i} = X_{i}*2.0$0;
  Y_{i} = T_{i} + 1.0;
];
""", dce.TensorRead, {"tensor": "T"})
    assert "T" in e.detail and "Y_{i}" in e.detail


def test_dce_fail_value_read():
    e = check_not_applicable(dce, """\
L^{8}_{i} [
  S_{i} = X_{i}*2.0$0;
  Y_{i} = S_{i} + 1.0;
  S_{i} = X_{i}*3.0;
];
""", dce.ValueRead, {"block": "S"})
    assert "S" in e.detail and "Y_{i}" in e.detail


def test_dce_fail_not_overwritten():
    e = check_not_applicable(dce, "L^{8}_{i} [\n  Y_{i} = X_{i}*2.0$0;\n];\n", dce.NotOverwritten, {"block": "Y"})
    assert "Y" in e.detail


def test_dce_fail_overwritten_only_inside_a_shared_loop():
    e = check_not_applicable(dce, """\
L^{8}_{i} [
  L^{8}_{j} [
    S_{j} = X_{i,j}$0;
  ];
  L^{8}_{j} [
    S_{j} = W_{j};
  ];
];
""", dce.NotOverwritten, {"block": "S"})
    # Conservative: the overwrite happens once per iteration of the shared loop i.
    assert "loop i" in e.detail


# ========================================================== expression_reorder


def test_expression_reorder_groups_the_scale_of_attention_scores():
    check_action(expression_reorder, """\
L^{4}_{i}
  L^{4}_{j}
    L^{8}_{d} [
      S_{i,j} += Q_{i,d}*K_{j,d}*0.125$0;
    ];
""", """\
L^{4}_{i}
  L^{4}_{j}
    L^{8}_{d} [
      S_{i,j} += Q_{i,d}*0.125*K_{j,d};
    ];
""", args={"block": "S", "expr": "Q_{i,d}*K_{j,d}*0.125", "loop": "j"})


def test_expression_reorder_divisors_are_divided_at_once():
    check_action(expression_reorder, """\
L^{4}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}/A_{i}/B_{i}$0;
  ];
""", """\
L^{4}_{i}
  L^{8}_{j} [
    Y_{i,j} = X_{i,j}/(A_{i}*B_{i});
  ];
""", args={"block": "Y", "expr": "X_{i,j}/A_{i}/B_{i}", "loop": "j"})


def test_expression_reorder_fail_too_few_invariant():
    e = check_not_applicable(expression_reorder, "L^{4}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = A_{i,j}*B_{i}*C_{j}$0;\n  ];\n",
                             expression_reorder.TooFewInvariant, {"block": "Y", "expr": "A_{i,j}*B_{i}*C_{j}", "loop": "j"})
    assert "loop j" in e.detail and "B_{i}" in e.detail


def test_expression_reorder_fail_all_invariant():
    e = check_not_applicable(expression_reorder, "L^{4}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = A_{i}*B_{i}*C_{i}$0;\n  ];\n",
                             expression_reorder.AllInvariant, {"block": "Y", "expr": "A_{i}*B_{i}*C_{i}", "loop": "j"})
    assert "loop j" in e.detail


def test_expression_reorder_fail_already_grouped():
    e = check_not_applicable(expression_reorder, "L^{4}_{i}\n  L^{8}_{j} [\n    Y_{i,j} = A_{i}*B_{i}*C_{j}$0;\n  ];\n",
                             expression_reorder.AlreadyGrouped, {"block": "Y", "expr": "A_{i}*B_{i}*C_{j}", "loop": "j"})
    assert "j" in e.detail


# ================================================================ tensor_split


def test_tensor_split_a_max_reduction_gets_minus_infinity_for_its_second_half():
    check_action(tensor_split, """\
L^{8}_{i}$0
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];
""", """\
L^{4}_{i}
  L^{10}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{4}_{i} [
  M_{i+4} = -inf;
];

L^{4}_{i}
  L^{10}_{j} [
    M_{i+4} = max(M_{i+4}, X_{i+4,j});
  ];
""", args={"block": "M", "loop": "i", "at": 4})


def test_tensor_split_fail_not_alone():
    e = check_not_applicable(tensor_split, "L^{16}_{i}$0 [\n  A_{i} = X_{i}*2.0;\n  B_{i} = A_{i} + 1.0;\n];\n",
                             tensor_split.NotAlone, {"block": "A", "loop": "i", "at": 8})
    assert "loop i" in e.detail and "A, B" in e.detail


def test_tensor_split_fail_thread_loop():
    e = check_not_applicable(tensor_split, "B^{64}_{tx}$0 [\n  Y_{tx} = X_{tx}*2.0;\n];\n",
                             tensor_split.ThreadLoop, {"block": "Y", "loop": "tx", "at": 32})
    assert "tx" in e.detail


def test_tensor_split_fail_bad_point():
    e = check_not_applicable(tensor_split, "L^{16}_{i}$0 [\n  Y_{i} = X_{i}*2.0;\n];\n",
                             tensor_split.BadPoint, {"block": "Y", "loop": "i", "at": 16})
    assert "loop i" in e.detail and "15" in e.detail


def test_tensor_split_fail_reads_own_output():
    e = check_not_applicable(tensor_split, """\
L^{16}_{i} [
  Y_{i} = X_{i};
];

L^{15}_{i}$0 [
  Y_{i+1} = Y_{i} + X_{i+1};
];
""", tensor_split.ReadsOwnOutput, {"block": "Y_1", "loop": "i", "at": 7})
    assert "Y_{i}" in e.detail and "Y_{i+1}" in e.detail


def test_tensor_split_fail_order():
    e = check_not_applicable(tensor_split, """\
L^{8}_{i} [
  Y_{i} = X_{i,0};
];

L^{4}_{k}
  L^{8}_{i}
    L^{6}_{j}$0 [
      Y_{i} = Y_{i}*0.5 + X_{i,j}*W_{k};
    ];
""", tensor_split.OrderMatters, {"block": "Y_1", "loop": "j", "at": 3})
    assert "k" in e.detail and "j" in e.detail


def test_tensor_split_fail_init():
    e = check_not_applicable(tensor_split, """\
in  X: i32[8,4]
out M: i32[8]

L^{8}_{i}$0
  L^{4}_{k} [
    M_{i} = max(M_{i}, X_{i,k});
  ];
""", tensor_split.NoInit, {"block": "M", "loop": "i", "at": 4})
    assert "i32" in e.detail


def test_tensor_split_fail_init_inside_a_reduction_loop():
    # Found by a random walk over the examples: the initial value of the
    # second half would be written at every iteration of c.
    e = check_not_applicable(tensor_split, """\
L^{8}_{i}
  L^{4}_{c} [
    L^{8}_{j}$0 [
      O_{i,j} += X_{c,j}*W_{i,c};
    ];
  ];
""", tensor_split.NoInit, {"block": "O", "loop": "j", "at": 4})
    assert "loop c" in e.detail


def test_tensor_split_then_concat_gives_back_the_program_on_every_example():
    for path in EXAMPLES:
        doc = load_leir(path.read_text())
        original = print_program(doc.program)
        for c in tensor_split.candidates(Context(doc.analysis), None):
            halves = load(print_program(apply(doc.analysis, c.step)))
            back = [print_program(apply(halves, m.step)) for m in tensor_concat.candidates(Context(halves), None)]
            assert original in back, f"{path.name}: no concat undoes {c.title}"


# =============================================================== tensor_concat


QK = """\
L^{16}_{i}
  L^{8}_{j}$0
    L^{32}_{k} [
      Q_{i,j} += X_{i,k}*Wq_{k,j};
    ];

L^{16}_{i}
  L^{8}_{j}
    L^{32}_{k} [
      K_{i,j} += X_{i,k}*Wk_{k,j};
    ];
"""


def test_tensor_concat_fail_not_alone():
    e = check_not_applicable(tensor_concat, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
  B_{i} = A_{i} + 1.0;
];

L^{16}_{i} [
  C_{i} = W_{i}*2.0;
];
""", tensor_concat.NotAlone, {"block": "A", "loop": "i"})
    assert "loop i" in e.detail and "A, B" in e.detail


def test_tensor_concat_fail_no_partner():
    e = check_not_applicable(tensor_concat, "L^{16}_{i}$0 [\n  A_{i} = X_{i}*2.0;\n];\n",
                             tensor_concat.NoPartner, {"block": "A", "loop": "i"})
    assert "A" in e.detail


def test_tensor_concat_fail_thread_loop():
    e = check_not_applicable(tensor_concat, """\
B^{16}_{tx}$0 [
  A_{tx} = X_{tx}*2.0;
];

B^{16}_{tx} [
  C_{tx} = W_{tx}*2.0;
];
""", tensor_concat.ThreadLoop, {"block": "A", "loop": "tx"})
    assert "tx" in e.detail


def test_tensor_concat_fail_different_computation():
    e = check_not_applicable(tensor_concat, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{16}_{i} [
  B_{i} = W_{i}*3.0;
];
""", tensor_concat.DifferentComputation, {"block": "A", "loop": "i"})
    assert "B_{i} = W_{i}*3.0" in e.detail


def test_tensor_concat_fail_order():
    e = check_not_applicable(tensor_concat, """\
L^{8}_{i} [
  Y_{i} = X_{i,0};
];

L^{4}_{k}
  L^{8}_{i}
    L^{4}_{j}$0 [
      Y_{i} = Y_{i}*0.5 + X_{i,j};
    ];

L^{4}_{k}
  L^{8}_{i}
    L^{4}_{j} [
      Y_{i} = Y_{i}*0.5 + X_{i,j+4};
    ];
""", tensor_concat.OrderMatters, {"block": "Y_1", "loop": "j"})
    assert "k" in e.detail and "j" in e.detail


def test_tensor_concat_fail_not_concatenable_along_a_reduction_loop():
    e = check_not_applicable(tensor_concat, QK, tensor_concat.NotConcatenable,
                             {"block": "Q", "loop": "k"})
    assert "k" in e.detail


def test_tensor_concat_fail_dependence():
    e = check_not_applicable(tensor_concat, """\
L^{16}_{i}$0 [
  A_{i} = X_{i}*2.0;
];

L^{16}_{i} [
  B_{i} = A_{i}*2.0;
];
""", tensor_concat.Dependent, {"block": "A", "loop": "i"})
    assert "B reads A" in e.detail


# ============================================================= all examples


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.ID)
def test_every_offered_step_passes_check_on_every_example(module):
    for path in EXAMPLES:
        ctx = Context(load_leir(path.read_text()).analysis)
        for c in module.candidates(ctx, None):
            module.check(ctx, c.step.args)


def _families(ctx: Context, module) -> list[dict]:
    """Arguments of the shape the module offers, whether offered or not."""
    sites = ctx.loop_sites
    if module in (operator_fusion, tensor_concat):
        return [ctx.loop_ref(s) for s in sites]
    if module is operator_fission:
        from leir.transforms.lib.nests import equations_under, nest_places

        places = nest_places(ctx.program)
        return [{"block": ctx.block_names[equations_under(ctx, places[id(s.nest)].path + (k,))[0].index], "loop": s.loop.var}
                for s in sites for k in range(len(s.nest.body))]
    if module is tensor_split:
        return [{**ctx.loop_ref(s), "at": s.loop.extent // 2} for s in sites if s.loop.extent >= 2]
    if module is dce:
        return [{"tensor": t} for t in ctx.analysis.tensors] + [{"block": b} for b in ctx.block_names]
    out = []
    for info in ctx.analysis.equations:
        block = ctx.block_names[info.index]
        subs = expression_splitting.subexpressions(ctx, info)
        if module is expression_splitting:
            out.append({"block": block, "mode": "accumulations"})
            out += [{"block": block, "mode": "temporary", "expr": o.text} for o in subs]
        elif module is cse:
            out += [{"block": block, "expr": o.text} for o in subs]
            out += [{"block": block, "expr": o.text, "also": b} for o in subs for b in ctx.block_names]
        elif module is expression_reorder:
            out += [{"block": block, "expr": ch.text, "loop": l.var}
                    for ch in expression_reorder.chains(ctx, info) for l in info.loops]
    return out


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.ID)
def test_a_step_of_the_offered_shape_is_offered_iff_check_passes(module):
    from leir.transforms.base import TransformError

    for path in EXAMPLES:
        ctx = Context(load_leir(path.read_text()).analysis)
        offered = {c.step for c in module.candidates(ctx, None)}
        for args in _families(ctx, module):
            try:
                module.check(ctx, args)
                passes = True
            except TransformError:
                passes = False
            if module is expression_reorder and passes:
                continue  # one step per grouping is offered, named by its innermost loop
            assert passes == (Step(module.ID, args) in offered), f"{path.name}: {args} offered={not passes}"


def test_the_operator_examples_get_operator_candidates():
    wanted = {
        "softmax": (operator_fusion, cse, expression_splitting, tensor_split),
        "layernorm": (operator_fusion, cse, expression_splitting, tensor_split),
        "mha_attention": (operator_fusion, cse, expression_reorder, expression_splitting, tensor_split),
        "conv_bn_relu": (operator_fusion, expression_reorder, expression_splitting, tensor_split),
        "gemm_bias_relu": (operator_fusion, expression_splitting, tensor_split),
        "log_softmax": (operator_fusion, cse, expression_reorder),
    }
    for name, modules in wanted.items():
        ctx = Context(load_leir((EXAMPLES[0].parent / f"{name}.leir").read_text()).analysis)
        for m in modules:
            assert m.candidates(ctx, None), f"{name}: no {m.ID} step"


# ---------------------------------------------------------- numerically

#: Steps applied and verified per transformation, across the examples
#: (one per example in a fixed shuffled order, then more): the budget that
#: keeps this whole file under a minute and a half on two busy cores. A
#: build of the program before the step is shared (``compiled_once``).
VERIFIED_PER_MODULE = 14

_COMPILED: dict = {}


@pytest.fixture
def compiled_once(monkeypatch):
    """``verify`` builds the program before the step each time; build each
    program once for the whole module."""
    import leir.bridge.run as run

    real = run.compile_program

    def cached(analysis, target="llvm"):
        key = (print_program(analysis.complete_program()), target)
        if key not in _COMPILED:
            _COMPILED[key] = real(analysis, target)
        return _COMPILED[key]

    monkeypatch.setattr(run, "compile_program", cached)


def _sample(module) -> list[tuple[str, object, Step]]:
    rng = random.Random(module.ID)
    per_example = []
    for path in EXAMPLES:
        analysis = load_leir(path.read_text()).analysis
        steps = [c.step for c in module.candidates(Context(analysis), None)]
        rng.shuffle(steps)
        if steps:
            per_example.append((path.name, analysis, steps))
    rng.shuffle(per_example)
    chosen = []
    rank = 0
    while len(chosen) < VERIFIED_PER_MODULE and any(rank < len(s) for _, _, s in per_example):
        for name, analysis, steps in per_example:
            if rank < len(steps) and len(chosen) < VERIFIED_PER_MODULE:
                chosen.append((name, analysis, steps[rank]))
        rank += 1
    return chosen


@pytest.mark.slow
@pytest.mark.parametrize("module", [m for m in MODULES if m is not dce], ids=lambda m: m.ID)
def test_offered_steps_on_the_examples_verify(module, compiled_once):
    for name, analysis, step in _sample(module):
        after = apply(analysis, step)
        reparsed = load(print_program(after))
        result = verify(analysis, reparsed)
        assert result.ok, f"{name}: {step.args}: {result.summary()}"


CHAINS = {
    # softmax: fuse the sum and the divide over rows, then share their exp.
    "softmax": [("operator_fusion", {"block": "Z", "loop": "i"}),
                ("common_subexpression_elimination", {"block": "Z", "expr": "exp(X_{i,j} - M_{i})", "also": "Y"})],
    # layernorm: one square for the variance, the row scale hoisted.
    "layernorm": [("common_subexpression_elimination", {"block": "var", "expr": "X_{i,j} - mean_{i}"}),
                  ("expression_splitting", {"block": "Y", "mode": "temporary", "expr": "rsqrt(var_{i} + 1e-05)"}),
                  ("operator_fusion", {"block": "mean", "loop": "i"})],
    # batch norm fused into the conv, its per-channel scale grouped, then
    # hoisted out of the pixel loops.
    "conv_bn_relu": [("operator_fusion", {"block": "C", "loop": "w"}),
                     ("expression_reorder", {"block": "Y", "loop": "w",
                                             "expr": "(C_{n,k,h,w} - rmean_{k})*rsqrt(rvar_{k} + 1e-05)*gamma_{k}"}),
                     ("expression_splitting", {"block": "Y", "mode": "temporary",
                                               "expr": "rsqrt(rvar_{k} + 1e-05)*gamma_{k}"})],
    # gemm: split-K, then the bias and relu fused into the rows of the first half.
    "gemm_bias_relu": [("tensor_split", {"block": "C", "loop": "k", "at": 128}),
                       ("operator_fusion", {"block": "C_1", "loop": "j"}),
                       ("expression_splitting", {"block": "Y", "mode": "accumulations"})],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chains_of_operator_steps_verify(name, compiled_once):
    analysis = load_leir((EXAMPLES[0].parent / f"{name}.leir").read_text()).analysis
    start = analysis
    for step_id, args in CHAINS[name]:
        ctx = Context(analysis)
        from leir.transforms import get

        module = get(step_id)
        assert Step(step_id, args) in {c.step for c in module.candidates(ctx, None)}, (step_id, args)
        analysis = load(print_program(apply(analysis, Step(step_id, args))))
    result = verify(start, analysis)
    assert result.ok, result.summary()


@pytest.mark.slow
def test_dce_steps_verify(compiled_once):
    # The examples have no dead code; these programs do.
    programs = ["""\
tmp T: f32[8,4]

L^{8}_{i}
  L^{4}_{k} [
    T_{i,k} = exp(X_{i,k});
  ];

L^{8}_{i}
  L^{4}_{k} [
    Y_{i} += X_{i,k};
  ];
""", """\
L^{8}_{i}
  L^{4}_{k} [
    S_{i} += X_{i,k};
  ];

L^{8}_{i} [
  S_{i} = X_{i,0}*3.0;
  Y_{i} = S_{i} + 1.0;
];
"""]
    for text in programs:
        analysis = load(text)
        steps = [c.step for c in dce.candidates(Context(analysis), None)]
        assert steps
        for step in steps:
            result = verify(analysis, load(print_program(apply(analysis, step))))
            assert result.ok, result.summary()


# ======================================================== malformed and stale


@pytest.mark.parametrize("step_id,args,error", [
    ("operator_fusion", {"block": "Q", "loop": "i"}, "stale-step"),
    ("operator_fission", {"block": "M", "loop": "k"}, "stale-step"),
    ("expression_splitting", {"block": "Y", "mode": "halves"}, "bad-step"),
    ("expression_splitting", {"block": "Y", "mode": "temporary", "expr": "exp(W_{i})"}, "stale-step"),
    ("common_subexpression_elimination", {"block": "Y", "expr": 3}, "bad-step"),
    ("dead_code_elimination", {"tensor": "T", "block": "Y"}, "bad-step"),
    ("dead_code_elimination", {"tensor": "T"}, "stale-step"),
    ("expression_reorder", {"block": "Y", "expr": "exp(X_{i,j} - M_{i})/Z_{i}", "loop": "q"}, "stale-step"),
    ("tensor_split", {"block": "Y", "loop": "i", "at": "half"}, "bad-step"),
    ("tensor_concat", {"block": "Y", "loop": 1}, "bad-step"),
])
def test_malformed_and_stale_steps_are_typed_errors(step_id, args, error):
    from leir.transforms.base import TransformError

    softmax = load((EXAMPLES[0].parent / "softmax.leir").read_text())
    with pytest.raises(TransformError) as e:
        apply(softmax, Step(step_id, args))
    assert e.value.code == error, e.value

"""Compute a sum of exponentials against a running maximum, in the pass that computes the maximum.

A softmax sums ``exp(x - M)`` where ``M`` is the row maximum, so the sum
waits for the whole max pass. Against the running (prefix) maximum
instead, element ``j`` of the prefix sum rescales element ``j-1`` by
``exp(Mp_{j-1} - Mp_{j})`` (1 unless the maximum grew) and adds
``exp(x_j - Mp_{j})``; its last element is the softmax denominator. The max
unit and the sum unit become one nest over the same loops, reading ``x``
once: the step between ``prefix_max`` and ``online_softmax``, which keeps
only the running values instead of every prefix.

It requires:

- a sum ``Z += exp(x - M)``;
- an M written once, by a max ``M = max(M, x)``;
- a max of the same ``x`` as the sum, over the same rows and the same loop
  (loop names and order may differ);
- both reductions the first write of their tensor;
- both reductions over one loop starting at 0;
- both reductions unguarded;
- both reductions alone under their loop;
- both reductions with affine indices that tell the rows apart;
- both units in the same loop body, with nothing between them writing what
  the sum reads.

Example: the max and the sum of a softmax become one pass

    step: {"block": "Z"}

    before:
    L^{128}_{i}
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{128}_{r}
      L^{100}_{k} [
        Z_{r} += exp(X_{r,k} - M_{r});$0
      ];

    L^{128}_{i}
      L^{100}_{j} [
        Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
      ];

    after:
    L^{128}_{i}
      L^{100}_{j} [
        M_prefix_{i,j} = X_{i,j} where j == 0;
        M_prefix_{i,j} = max(M_prefix_{i,j-1}, X_{i,j}) where j > 0;
        Z_prefix_{i,j} = exp(X_{i,j} - M_prefix_{i,j}) where j == 0;
        Z_prefix_{i,j} = Z_prefix_{i,j-1}*exp(M_prefix_{i,j-1} - M_prefix_{i,j}) + exp(X_{i,j} - M_prefix_{i,j}) where j > 0;
      ];

    L^{128}_{i} [
      M_{i} = M_prefix_{i,99};
      Z_{i} = Z_prefix_{i,99};
    ];

    L^{128}_{i}
      L^{100}_{j} [
        Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
      ];

Example: the max of another tensor is refused

    step: {"block": "Z"}

    before:
    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Z_{i} += exp(W_{i,j} - M_{i});$0
      ];

    refused: prefix_sum_exp-different-operand
"""

from __future__ import annotations

from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib import rows as R
from leir.transforms.base import Candidate, Context
from leir.transforms.lib.row_steps import prefix_max_items

ID = "prefix_sum_exp"
GROUP = "algorithmic"
TITLE = "Running sum of exponentials"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "normal_loop_summation_on_exp_to_prefix_summation_on_exp"


ERRORS = R.refusals(ID, __name__, ("not-sum-of-exp",) + R.SOFTMAX_REASONS)
(NotSumOfExp, NoMax, InitExplicit, Guarded, NotOneAxis, LoopStartNotZero, NotAlone, RowsNotDistinct, NotSiblings,
 DifferentAxis, DifferentRows, DifferentOperand, Interleaved) = ERRORS.values()


def _title(sm: R.Softmax) -> str:
    return f"Sum exp into {sm.sum.tensor} against the running maximum of {sm.max.tensor}, in one pass"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return R.candidates(ctx, at, ID, R.is_sum_of_exp, R.match_softmax, _title)


def check(ctx: Context, args: dict) -> None:
    R.check(ctx, args, ID, R.match_softmax, ERRORS)


def rewrite(ctx: Context, args: dict) -> A.Program:
    info: EquationInfo = R.block_arg(ctx, args, ID)
    sm = R.match_softmax(ctx, info)
    mx = sm.max
    build = R.Builder(ctx)
    maxes = prefix_max_items(build, mx)
    j, extent = mx.axis.var, mx.axis.extent
    z_shape = ctx.analysis.tensors[sm.sum.tensor].shape
    name = build.temporary(f"{sm.sum.tensor}_prefix", sm.sum.tensor, z_shape + (extent,))
    m_index = tuple(mx.lhs.indices or ())
    z_index = sm.sum_index
    j_var, previous = R.var(j), R.binary("-", R.var(j), R.num(1))
    m_here = build.access(maxes.name, m_index + (j_var,))
    m_before = build.access(maxes.name, m_index + (previous,))
    here = build.access(name, z_index + (j_var,))
    before = build.access(name, z_index + (previous,))
    term = R.call("exp", R.binary("-", sm.score, m_here))
    rescaled = R.binary("*", before, R.call("exp", R.binary("-", m_before, m_here)))
    sums = [
        R.equation(here, term, R.binary("==", j_var, R.num(0))),
        R.equation(here, R.binary("+", rescaled, term), R.binary(">", j_var, R.num(0))),
    ]
    final = R.equation(build.access(sm.sum.tensor, z_index), build.access(name, z_index + (R.num(extent - 1),)))
    original = R.item_at(ctx.program, mx.path)
    assert isinstance(original, A.Nest)
    scan = A.Nest(mx.chain, tuple(maxes.scan + sums), end_comments=original.end_comments)
    items = (scan,) + R.nest(R.copies(mx.rows), maxes.final + [final])
    program = R.replace_group(ctx.program, mx.parent, [mx.position, sm.sum.position], items)
    return build.program(program)


def prefix_sum_exp(program, block: str):
    """Apply the step (see the module docstring) and return the new program."""
    return R.apply_step(__name__, program, block)

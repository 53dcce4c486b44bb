"""Compute the row maximum and the sum of exponentials of a softmax in one pass, rescaling the sum when the maximum grows.

A softmax reads each row twice before it can normalise: once for the
maximum ``M``, once for ``Z = sum exp(x - M)``. The online softmax keeps a
running maximum and a running sum, initialised explicitly to -inf and 0;
at each ``j`` the new maximum is ``max(M, x_j)``, the sum so far is
rescaled by ``exp(M - M_new)`` (1 unless the maximum grew) and
``exp(x_j - M_new)`` is added. When the loop ends, ``M`` and ``Z`` hold
exactly what the two units computed, so what reads them later is
unchanged. One pass over ``x`` instead of two, and no temporary per
element (compare ``prefix_sum_exp``, which keeps every prefix). The fused
nest runs the max unit's row loops, with their kinds, around its
reduction loop.

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
  the sum reads;
- a floating-point M (it starts at -inf);
- no vectorized row loop (the reduction loop moves inside the row loops).

Example: the max and the sum of a softmax

    step: {"block": "Z"}

    before:
    # row max
    L^{128}_{i}
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    # row sum of exp(x - max)
    L^{128}_{i}
      L^{100}_{j} [
        Z_{i} += exp(X_{i,j} - M_{i});$0
      ];

    L^{128}_{i}
      L^{100}_{j} [
        Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
      ];

    after:
    # row max
    L^{128}_{i} [
      M_{i} = -inf;
      Z_{i} = 0.0;
      L^{100}_{j} [
        M_new_{i} = max(M_{i}, X_{i,j});
        Z_{i} = Z_{i}*exp(M_{i} - M_new_{i}) + exp(X_{i,j} - M_new_{i});
        M_{i} = M_new_{i};
      ];
    ];

    L^{128}_{i}
      L^{100}_{j} [
        Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
      ];

Example: the max and the sum over different loops are refused

    step: {"block": "Z"}

    before:
    L^{16}_{i}
      L^{16}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{16}_{j} [
        Z_{i} += exp(X_{j,i} - M_{i});$0
      ];

    refused: online_softmax-different-axis
"""

from __future__ import annotations

from leir import ast as A
from leir.transforms.lib import rows as R
from leir.transforms.base import Candidate, Context
from leir.transforms.lib.row_steps import RunningRow

ID = "online_softmax"
GROUP = "algorithmic"
TITLE = "Online softmax"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "online_softmax"


ERRORS = R.refusals(ID, __name__, ("not-sum-of-exp",) + R.SOFTMAX_REASONS + R.ONE_PASS_REASONS)
(NotSumOfExp, NoMax, InitExplicit, Guarded, NotOneAxis, LoopStartNotZero, NotAlone, RowsNotDistinct, NotSiblings,
 DifferentAxis, DifferentRows, DifferentOperand, Interleaved, IntegerMax, VectorizedRowLoop) = ERRORS.values()


def match(ctx: Context, info) -> R.Softmax:
    sm = R.match_softmax(ctx, info)
    R.one_pass_rows(ctx, sm)
    return sm


def _title(sm: R.Softmax) -> str:
    return f"Online softmax: compute {sm.max.tensor} and {sm.sum.tensor} in one pass over {sm.max.axis.var}"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return R.candidates(ctx, at, ID, R.is_sum_of_exp, match, _title)


def check(ctx: Context, args: dict) -> None:
    R.check(ctx, args, ID, match, ERRORS)


def rewrite(ctx: Context, args: dict) -> A.Program:
    info = R.block_arg(ctx, args, ID)
    sm = match(ctx, info)
    mx = sm.max
    build = R.Builder(ctx)
    row = RunningRow(build, sm)
    x = sm.score
    original = R.item_at(ctx.program, mx.path)
    assert isinstance(original, A.Nest)
    rows, axis, lead = R.placed(mx.rows, mx.axis, original)
    loop = A.Nest((axis,), (row.new_maximum(x), row.new_sum(x), row.advance()))
    body = tuple(row.init()) + (loop,)
    fused = A.Nest(rows, body, end_comments=original.end_comments, open_comments=lead)
    program = R.replace_group(ctx.program, mx.parent, [mx.position, sm.sum.position], (fused,))
    return build.program(program)


def online_softmax(program, block: str):
    """Apply the step (see the module docstring) and return the new program."""
    return R.apply_step(__name__, program, block)

"""Compute a row maximum as a running (prefix) maximum over its loop.

``M_{i} = max(M_{i}, X_{i,j})`` keeps one running value per row and needs
the implied initial value -inf. Written as a prefix maximum, element
``(i, j)`` of a temporary holds the maximum of ``X_{i,0..j}``: the first
element is ``X_{i,0}`` itself, every later one the maximum of its
predecessor and ``X_{i,j}``, and ``M_{i}`` is the last one. No initial value
is needed any more, and every intermediate maximum is kept: the first step
towards an online softmax (``prefix_sum_exp`` and ``online_softmax``), where
the sum of exponentials is rescaled each time the running maximum grows.

It requires:

- a max reduction ``M = max(M, x)``;
- a max that is the first write of M (its initial value implied);
- a max over exactly one loop;
- that loop starting at 0;
- a max without a guard;
- a max alone under that loop;
- every element of M the maximum of one row (an affine index that tells the
  rows apart).

Example: the row max of a softmax

    step: {"block": "M"}

    before:
    L^{128}_{i}
      L^{100}_{j} [
        M_{i} = max(M_{i}, X_{i,j});$0
      ];

    after:
    L^{128}_{i}
      L^{100}_{j} [
        M_prefix_{i,j} = X_{i,j} where j == 0;
        M_prefix_{i,j} = max(M_prefix_{i,j-1}, X_{i,j}) where j > 0;
      ];

    L^{128}_{i} [
      M_{i} = M_prefix_{i,99};
    ];

Example: a max over two loops is refused

    step: {"block": "Y"}

    before:
    L^{8}_{i}
      L^{3}_{r}
        L^{3}_{s} [
          Y_{i} = max(Y_{i}, X_{i,r,s});$0
        ];

    refused: prefix_max-not-one-axis
"""

from __future__ import annotations

from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib import rows as R
from leir.transforms.base import Candidate, Context
from leir.transforms.lib.row_steps import prefix_max_items

ID = "prefix_max"
GROUP = "algorithmic"
TITLE = "Running maximum"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "normal_loop_max_to_prefix_max"


ERRORS = R.refusals(ID, __name__, ("not-max",) + R.ROW_REDUCTION_REASONS)
NotMax, InitExplicit, Guarded, NotOneAxis, LoopStartNotZero, NotAlone, RowsNotDistinct = ERRORS.values()


def match(ctx: Context, info: EquationInfo) -> R.RowReduction:
    """The max reduction the step rewrites, or a Refusal."""
    eq = info.equation
    if info.combiner != "max":
        R.refuse("not-max", f"{R.text(eq)} is not a max reduction",
                 f"the step rewrites a reduction M = max(M, x); {R.text(eq)} is not of that shape", eq.span)
    return R.row_reduction(ctx, info, "max")


def _title(mx: R.RowReduction) -> str:
    return f"Compute {mx.tensor} as a running maximum over {mx.axis.var}"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return R.candidates(ctx, at, ID, lambda info: info.combiner == "max", match, _title)


def check(ctx: Context, args: dict) -> None:
    R.check(ctx, args, ID, match, ERRORS)


def rewrite(ctx: Context, args: dict) -> A.Program:
    info = R.block_arg(ctx, args, ID)
    mx = match(ctx, info)
    build = R.Builder(ctx)
    items = prefix_max_items(build, mx)
    original = R.item_at(ctx.program, mx.path)
    assert isinstance(original, A.Nest)
    scan = A.Nest(mx.chain, items.scan, end_comments=original.end_comments)
    program = R.replace_group(ctx.program, mx.parent, [mx.position], (scan,) + R.nest(R.copies(mx.rows), items.final))
    return build.program(program)


def prefix_max(program, block: str):
    """Apply the step (see the module docstring) and return the new program."""
    return R.apply_step(__name__, program, block)

"""Pieces of the row steps' rewrites that other row steps reuse:
``RunningRow``, the running maximum and sum of online softmax (attention
without scores keeps them too), and ``prefix_max_items``, the running
maximum of ``prefix_max`` (``prefix_sum_exp`` starts from it). Both build
on ``leir.transforms.lib.rows``.

Moved out of ``online_softmax`` and ``prefix_max``, which import them back.
"""

from __future__ import annotations

from dataclasses import replace

from leir import ast as A
from leir.transforms.lib import rows as R


class RunningRow:
    """The running maximum and sum of one row, as equations: ``init``
    before the reduction loop, ``step(...)`` inside it."""

    def __init__(self, build: R.Builder, sm: R.Softmax):
        mx = sm.max
        self.build, self.sm = build, sm
        shape = build.ctx.analysis.tensors[mx.tensor].shape
        self.new_max = build.temporary(f"{mx.tensor}_new", mx.tensor, shape)
        index = tuple(mx.lhs.indices or ())
        self.m = build.access(mx.tensor, index)
        self.m_new = build.access(self.new_max, index)
        self.z = build.access(sm.sum.tensor, sm.sum_index)

    def init(self) -> list[A.Equation]:
        z_dtype = self.build.ctx.analysis.tensors[self.sm.sum.tensor].dtype
        return [
            replace(R.equation(self.m, R.neg_inf()), comments=self.sm.max.equation.comments),
            replace(R.equation(self.z, R.zero(z_dtype)), comments=self.sm.sum.equation.comments),
        ]

    def rescale(self) -> A.Expr:
        """``exp(M - M_new)``: what the running values are multiplied by."""
        return R.call("exp", R.binary("-", self.m, self.m_new))

    def weight(self, score: A.Expr) -> A.Expr:
        """``exp(x - M_new)``: the weight of the current element."""
        return R.call("exp", R.binary("-", score, self.m_new))

    def new_maximum(self, score: A.Expr) -> A.Equation:
        return R.equation(self.m_new, R.call("max", self.m, score))

    def new_sum(self, score: A.Expr) -> A.Equation:
        return R.equation(self.z, R.binary("+", R.binary("*", self.z, self.rescale()), self.weight(score)))

    def advance(self) -> A.Equation:
        return R.equation(self.m, self.m_new)


class PrefixItems:
    """The equations of a prefix computation: ``scan`` runs in the
    reduction's loops, ``final`` in its row loops."""

    def __init__(self, scan: list[A.Equation], final: list[A.Equation], name: str):
        self.scan, self.final, self.name = scan, final, name


def prefix_max_items(build: R.Builder, mx: R.RowReduction) -> PrefixItems:
    """``P = x where j == 0; P = max(P_{j-1}, x) where j > 0`` and
    ``M = P_{last}``."""
    t = build.ctx.analysis.tensors[mx.tensor]
    j, extent = mx.axis.var, mx.axis.extent
    name = build.temporary(f"{mx.tensor}_prefix", mx.tensor, t.shape + (extent,))
    index = tuple(mx.lhs.indices or ())
    here = build.access(name, index + (R.var(j),))
    before = build.access(name, index + (R.binary("-", R.var(j), R.num(1)),))
    x = mx.info.operand
    first = replace(R.equation(here, x, R.binary("==", R.var(j), R.num(0))), comments=mx.equation.comments)
    rest = R.equation(here, R.call("max", before, x), R.binary(">", R.var(j), R.num(0)))
    final = R.equation(build.access(mx.tensor, index), build.access(name, index + (R.num(extent - 1),)))
    return PrefixItems([first, rest], [final], name)

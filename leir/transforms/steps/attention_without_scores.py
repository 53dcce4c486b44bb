"""Compute attention in one pass over the keys, with a running maximum, sum and output, without storing the scores.

Attention computes the scores ``S = Q K^T`` for a whole row, their maximum
``M``, the sum ``Z`` of ``exp(S - M)`` and then ``O = sum_j exp(S - M)/Z
* V``: four passes, and ``S`` is stored. The one-pass form (FlashAttention
without tiling) walks the keys ``j`` once per row, keeping a running
maximum, a running sum and an unnormalised running output; when the
maximum grows, the sum and the output are rescaled by ``exp(M - M_new)``.
The score of one key is computed where it is used, by a nested nest over
the dot product into a per-row temporary, so ``S`` is never stored. At the
end the output is divided by the sum.

When the scores are an input (or cannot be recomputed in place), the same
pass reads them instead: the softmax-weighted sum computed with an online
softmax (Step-TP's normal_matmul_to_prefix_matmul_based_on_online_softmax).

It requires:

- a weighted sum ``O += exp(x - M)/Z*v`` (the factors in any order) whose
  ``Z += exp(x - M)`` and ``M = max(M, x)`` form a softmax over the same
  rows and loop (see ``online_softmax``: same loop, first writes, one loop
  starting at 0, unguarded, alone under the loop, rows told apart,
  floating-point M, no vectorized row loop);
- the three units and the unit that computes the scores in the same loop
  body, with nothing between them writing what a later one reads;
- weights ``v`` that read none of M, Z and the scores.

The scores are recomputed in place when they are a temporary written once,
by an unguarded sum or plain assignment over the rows and the key loop, and
read only by the softmax and the weighted sum; otherwise the pass reads
them.

Example: attention for one head

    step: {"block": "O"}

    before:
    L^{64}_{i}
      L^{64}_{j}
        L^{32}_{d} [
          S_{i,j} += Q_{i,d}*K_{j,d}*0.17677669529663687;
        ];

    L^{64}_{i}
      L^{64}_{j} [
        M_{i} = max(M_{i}, S_{i,j});
      ];

    L^{64}_{i}
      L^{64}_{j} [
        Z_{i} += exp(S_{i,j} - M_{i});
      ];

    L^{64}_{i}
      L^{32}_{d}
        L^{64}_{j} [
          O_{i,d} += exp(S_{i,j} - M_{i})/Z_{i}*V_{j,d};$0
        ];

    after:
    L^{64}_{i} [
      M_{i} = -inf;
      Z_{i} = 0.0;
      L^{32}_{d} [
        O_{i,d} = 0.0;
      ];
      L^{64}_{j} [
        S_j_{i} = 0.0;
        L^{32}_{d} [
          S_j_{i} += Q_{i,d}*K_{j,d}*0.17677669529663687;
        ];
        M_new_{i} = max(M_{i}, S_j_{i});
        Z_{i} = Z_{i}*exp(M_{i} - M_new_{i}) + exp(S_j_{i} - M_new_{i});
        L^{32}_{d} [
          O_{i,d} = O_{i,d}*exp(M_{i} - M_new_{i}) + exp(S_j_{i} - M_new_{i})*V_{j,d};
        ];
        M_{i} = M_new_{i};
      ];
      L^{32}_{d} [
        O_{i,d} = O_{i,d}/Z_{i};
      ];
    ];

Example: a weighted sum that does not divide by the softmax sum is refused

    step: {"block": "O"}

    before:
    L^{16}_{i}
      L^{8}_{j} [
        M_{i} = max(M_{i}, S_{i,j});
      ];

    L^{16}_{i}
      L^{8}_{j} [
        Z_{i} += exp(S_{i,j} - M_{i});
      ];

    L^{16}_{i}
      L^{4}_{d}
        L^{8}_{j} [
          O_{i,d} += exp(S_{i,j} - M_{i})*V_{j,d};$0
        ];

    refused: attention_without_scores-not-weighted-sum
"""

from __future__ import annotations

from dataclasses import dataclass

from leir import ast as A
from leir.semantics import EquationInfo
from leir.transforms.lib import rows as R
from leir.transforms.base import Candidate, Context
from leir.transforms.lib.row_steps import RunningRow

ID = "attention_without_scores"
GROUP = "algorithmic"
TITLE = "One-pass attention"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "flashattention_wo_tiling"


_OWN = R.refusals(ID, __name__, ("not-weighted-sum",) + R.SOFTMAX_REASONS + R.ONE_PASS_REASONS)
(NotWeightedSum, NoMax, InitExplicit, Guarded, NotOneAxis, LoopStartNotZero, NotAlone, RowsNotDistinct, NotSiblings,
 DifferentAxis, DifferentRows, DifferentOperand, Interleaved, IntegerMax, VectorizedRowLoop) = _OWN.values()
ERRORS = {
    "not-weighted-sum": NotWeightedSum,
    # The softmax's sum is found from the weighted sum; its shape is
    # checked there, so "not-sum-of-exp" means the divisor is no softmax sum.
    "not-sum-of-exp": NotWeightedSum,
    **_OWN,
}

#: Loop kinds a loop nested inside the key loop keeps; parallel and
#: thread-bound loops become serial there.
_INNER_KINDS = frozenset({"L", "U", "V"})


@dataclass(frozen=True)
class Scores:
    """The unit that computes the scores, recomputed in place."""

    info: EquationInfo
    path: tuple[int, ...]
    #: Its loops inside the shared ones, and the reduction loops among them.
    chain: tuple[A.Loop, ...]
    reduce: tuple[A.Loop, ...]
    #: Its loop variables -> the max unit's.
    sigma: dict[str, str]

    @property
    def position(self) -> int:
        return self.path[-1]


@dataclass(frozen=True)
class Attention:
    softmax: R.Softmax
    out: R.RowReduction
    #: The weighted sum's loop variables -> the max unit's (rows, key loop).
    sigma: dict[str, str]
    #: The weighted sum's other loops (the output's own axes, ``d``).
    extra: tuple[A.Loop, ...]
    #: The weight factors: multiplied, and divided by.
    times: tuple[A.Expr, ...]
    divided: tuple[A.Expr, ...]
    scores: Scores | None

    @property
    def members(self) -> frozenset[int]:
        """The equations the step rewrites: the softmax's, the weighted
        sum, and the scores' when they are recomputed in place."""
        scores = {self.scores.info.index} if self.scores is not None else set()
        return self.softmax.members | {self.out.info.index} | scores


def _factors(e: A.Expr) -> tuple[list[A.Expr], list[A.Expr]]:
    """``e`` as numerator and denominator factors of ``*`` and ``/``."""
    if isinstance(e, A.Binary) and e.op in ("*", "/"):
        num_l, den_l = _factors(e.lhs)
        num_r, den_r = _factors(e.rhs)
        if e.op == "*":
            return num_l + num_r, den_l + den_r
        return num_l + den_r, den_l + num_r
    return [e], []


def match(ctx: Context, info: EquationInfo) -> Attention:
    eq = info.equation
    shape = ("the step rewrites a weighted sum O += exp(x - M)/Z*v, where M is the maximum of x and "
             "Z the sum of exp(x - M)")
    if info.combiner != "sum" or info.kind == "assign" or info.operand is None:
        R.refuse("not-weighted-sum", f"{R.text(eq)} is not a softmax-weighted sum",
                 f"{shape}; {R.text(eq)} is not a sum", eq.span)
    times, divided = _factors(info.operand)
    found = _softmax_factors(ctx, times, divided)
    if found is None:
        R.refuse("not-weighted-sum", f"{R.text(eq)} is not a softmax-weighted sum",
                 f"{shape}; {R.text(eq)} has no factor exp(x - M) divided by such a Z", eq.span)
    ke, kz = found
    a, b = R.exp_minus(times[ke])
    z_read = divided[kz]
    sum_info = next(w for w in R.writers(ctx, z_read.tensor) if _sums_exp_of(w, b.tensor))
    sm = R.match_softmax(ctx, sum_info)
    R.one_pass_rows(ctx, sm)
    mx = sm.max
    out = R.row_reduction(ctx, info, "sum")
    if out.parent != mx.parent:
        R.refuse("not-siblings", "the weighted sum and the softmax are in different nests",
                 f"{R.text(eq)} and {R.text(mx.equation)} must be in the same loop body (or both top level) "
                 f"to become one nest", eq.span)
    free = {l.var for l in out.chain}
    targets = {l.var for l in mx.chain}
    sigma = R.unify(b, mx.lhs, {}, free - {out.axis.var}, targets - {mx.axis.var})
    if sigma is None or out.axis.var in sigma:
        if R.unify(b, mx.lhs, {}, free, targets) is not None:
            R.refuse("different-axis", "the max is over another loop than the weighted sum",
                     f"{R.text(eq)} sums over {out.axis.var} but subtracts {R.text(b)}, which {out.axis.var} "
                     f"indexes: the max {R.text(mx.equation)} is not over the loop of the sum", b.span)
        R.refuse("different-rows", f"{R.text(b)} is not the max of the row summed",
                 f"{R.text(eq)} subtracts {R.text(b)}, which is not the element the max {R.text(mx.equation)} "
                 f"writes for the row being summed", b.span)
    sigma[out.axis.var] = mx.axis.var
    R.same_values(a, sm.score, sigma, out, mx, f"{R.text(eq)} weighs by exp({R.text(a)} - {b.tensor})")
    z_expected = A.Access(sm.sum.tensor, sm.sum_index)
    if R.unify(z_read, z_expected, sigma, set(), targets) is None:
        R.refuse("different-rows", f"{R.text(z_read)} is not the sum of the row",
                 f"{R.text(eq)} divides by {R.text(z_read)}, which is not the element the sum "
                 f"{R.text(sm.sum.equation)} writes for the row being summed", z_read.span or eq.span)
    R.check_extents(sigma, out.chain, mx.chain, mx.axis.var, "different-axis", "different-rows",
                    f"{R.text(eq)} and {R.text(mx.equation)}")
    rest_times = tuple(f for k, f in enumerate(times) if k != ke)
    rest_divided = tuple(f for k, f in enumerate(divided) if k != kz)
    weights = rest_times + rest_divided
    scores = _scores(ctx, sm, out, weights)
    state = {mx.tensor, sm.sum.tensor}
    for f in weights:
        touched = {n.tensor for n in A.walk(f) if isinstance(n, A.Access)} & state
        if touched:
            R.refuse("not-weighted-sum", f"the weight {R.text(f)} reads {', '.join(sorted(touched))}",
                     f"{R.text(eq)} weighs by {R.text(f)}, which reads {', '.join(sorted(touched))}: the one-pass "
                     f"form changes those while it runs", f.span or eq.span)
    members = [mx, sm.sum, out]
    R.between(ctx, members)
    extra = tuple(l for l in out.chain if l.var not in sigma)
    return Attention(sm, out, sigma, extra, rest_times, rest_divided, scores)


def _softmax_factors(ctx: Context, times: list[A.Expr], divided: list[A.Expr]) -> tuple[int, int] | None:
    """Positions of a factor ``exp(x - M)`` and of a divisor ``Z`` written
    by a sum of ``exp(... - M)``."""
    for ke, f in enumerate(times):
        parts = R.exp_minus(f)
        if parts is None:
            continue
        for kz, z in enumerate(divided):
            if isinstance(z, A.Access) and any(_sums_exp_of(w, parts[1].tensor) for w in R.writers(ctx, z.tensor)):
                return ke, kz
    return None


def _sums_exp_of(w: EquationInfo, m: str) -> bool:
    """Whether ``w`` is a sum of ``exp(... - m)``."""
    parts = R.exp_minus(w.operand) if w.combiner == "sum" and w.operand is not None else None
    return parts is not None and parts[1].tensor == m


def _scores(ctx: Context, sm: R.Softmax, out: R.RowReduction, weights: tuple[A.Expr, ...]) -> Scores | None:
    """The unit computing the scores, when they can be recomputed in place
    (None: the pass reads them)."""
    mx = sm.max
    x = sm.score
    if not isinstance(x, A.Access):
        return None
    if any(isinstance(n, A.Access) and n.tensor == x.tensor for f in weights for n in A.walk(f)):
        return None  # the weights read the scores too
    t = ctx.analysis.tensors[x.tensor]
    ws = R.writers(ctx, x.tensor)
    if t.role != "tmp" or len(ws) != 1:
        return None
    w = ws[0]
    group = {w.index, mx.info.index, sm.sum.info.index, out.info.index}
    if any(r.index not in group for r in R.readers(ctx, x.tensor)):
        return None
    eq = w.equation
    if eq.predicate is not None or not (w.kind == "assign" or (w.kind == "reduce" and w.combiner == "sum")):
        return None
    depth = len(mx.parent)
    if w.site.path[:depth] != mx.parent:
        return None
    path = w.site.path[: depth + 1]
    item = R.item_at(ctx.program, path)
    if not isinstance(item, A.Nest) or R.equation_count(item) != 1:
        return None
    shared = len(mx.outer)
    if w.loops[:shared] != mx.outer or any(l.var not in w.spatial for l in mx.outer):
        return None
    chain = w.loops[shared:]
    sigma = R.unify(eq.lhs, x, {}, {l.var for l in chain}, {l.var for l in mx.chain})
    if sigma is None:
        return None
    reduce = tuple(l for l in chain if l.var not in sigma)
    if any(l.var in sigma for l in chain if l.var in w.reduce_axes):
        return None
    by_var = R.loops_by_var(mx.chain)
    if any((l.extent, l.start) != (by_var[sigma[l.var]].extent, by_var[sigma[l.var]].start)
           for l in chain if l.var in sigma):
        return None
    scores = Scores(w, path, chain, reduce, sigma)
    members = [mx, sm.sum, out]
    pseudo = R.RowReduction(w, chain[0], path, chain, mx.outer)
    try:
        R.between(ctx, [pseudo] + members)
    except R.Refusal:
        return None
    return scores


def _weighted_sum_shaped(ctx: Context, info: EquationInfo) -> bool:
    """What ``match`` refuses first, without building its message."""
    return (info.combiner == "sum" and info.kind != "assign" and info.operand is not None
            and _softmax_factors(ctx, *_factors(info.operand)) is not None)


def _title(att: Attention) -> str:
    x = att.softmax.score
    how = f"recomputing {x.tensor} in place" if att.scores is not None else f"reading {R.text(x)}"
    return f"One-pass attention into {att.out.tensor}: online softmax over {att.softmax.max.axis.var}, {how}"


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    return R.candidates(ctx, at, ID, lambda info: _weighted_sum_shaped(ctx, info), match, _title)


def check(ctx: Context, args: dict) -> None:
    R.check(ctx, args, ID, match, ERRORS)


def rewrite(ctx: Context, args: dict) -> A.Program:
    info = R.block_arg(ctx, args, ID)
    att = match(ctx, info)
    sm, out = att.softmax, att.out
    mx = sm.max
    build = R.Builder(ctx)
    row = RunningRow(build, sm)
    in_scope = {l.var for l in mx.chain + mx.outer}

    def inner_loops(loops) -> tuple[tuple[A.Loop, ...], dict[str, str]]:
        """Loops to nest inside the key loop: serial unless unrolled or
        vectorized, renamed where a name is taken."""
        renamed, out_loops = {}, []
        for l in loops:
            name = l.var
            if name in in_scope or l.kind == "B":
                name = build.name(l.var)
            renamed[l.var] = name
            out_loops.append(R.fresh_loop(l, name, l.kind if l.kind in _INNER_KINDS else "L"))
        return tuple(out_loops), renamed

    body: list[A.Item] = []
    m_index = tuple(mx.lhs.indices or ())
    x = sm.score
    if att.scores is not None:
        sc = att.scores
        w = sc.info
        s_name = build.temporary(f"{x.tensor}_j", x.tensor, ctx.analysis.tensors[mx.tensor].shape)
        s = build.access(s_name, m_index)
        loops, renamed = inner_loops(sc.reduce)
        sigma = {**sc.sigma, **renamed}
        s_dtype = ctx.analysis.tensors[x.tensor].dtype
        if w.kind == "assign":
            body.append(R.equation(s, R.rename(w.equation.rhs, sigma)))
        else:
            body.append(R.equation(s, R.zero(s_dtype)))
            body.extend(R.nest(loops, [R.equation(s, R.binary("+", s, R.rename(w.operand, sigma)))]))
        x = s
    d_loops, renamed = inner_loops(att.extra)
    sigma = {**att.sigma, **renamed}
    o = build.access(out.tensor, [R.rename(i, sigma) for i in out.lhs.indices or ()])
    weight = row.weight(x)
    for f in att.times:
        weight = R.binary("*", weight, R.rename(f, sigma))
    for f in att.divided:
        weight = R.binary("/", weight, R.rename(f, sigma))
    o_dtype = ctx.analysis.tensors[out.tensor].dtype
    body += [row.new_maximum(x), row.new_sum(x)]
    body.extend(R.nest(d_loops, [R.equation(o, R.binary("+", R.binary("*", o, row.rescale()), weight))]))
    body.append(row.advance())
    # The fused nest takes the place of the first unit: the scores' when
    # they are recomputed, else the max's.
    first = R.item_at(ctx.program, att.scores.path if att.scores is not None else mx.path)
    assert isinstance(first, A.Nest)
    rows, axis, lead = R.placed(mx.rows, mx.axis, first)
    rows_body: list[A.Item] = list(row.init())
    rows_body.extend(R.nest(R.copies(d_loops), [R.equation(o, R.zero(o_dtype))]))
    rows_body.append(A.Nest((axis,), tuple(body)))
    rows_body.extend(R.nest(R.copies(d_loops), [R.equation(o, R.binary("/", o, row.z))]))
    fused = A.Nest(rows, tuple(rows_body), end_comments=first.end_comments, open_comments=lead)
    positions = [mx.position, sm.sum.position, out.position]
    if att.scores is not None:
        positions.append(att.scores.position)
    program = R.replace_group(ctx.program, mx.parent, positions, (fused,))
    return build.program(program)


def attention_without_scores(program, block: str):
    """Apply the step (see the module docstring) and return the new program."""
    return R.apply_step(__name__, program, block)

"""The catalogue of atomic transformations.

``ALL`` lists every transformation, in the order an editor shows them. Each
is a module with ``ID``, ``TITLE``, ``STEPTP`` (the Step-TP strategy name),
a function named like the module, ``candidates(ctx, at)`` (cheap: no
build, no run), ``check(ctx, args)`` (raises a typed ``NotApplicable`` per
failed precondition) and either ``schedule(sch, ctx, args)`` (the TVM
schedule primitives that perform it, optionally with ``tidy(ctx, args,
program)`` renaming what TVM named in the raised result) or
``rewrite(ctx, args)`` (a syntax tree rewrite, for steps TVM has no
primitive for).
"""

from __future__ import annotations

from types import ModuleType

from leir import ast as A
from leir.transforms.steps import split
from leir.transforms.steps import reorder
from leir.transforms.steps import tile
from leir.transforms.steps import fuse
from leir.transforms.steps import parallelize
from leir.transforms.steps import unroll
from leir.transforms.steps import vectorize
from leir.transforms.steps import bind
from leir.transforms.steps import rfactor
from leir.transforms.steps import decompose_reduction
from leir.transforms.steps import operator_fusion
from leir.transforms.steps import operator_fission
from leir.transforms.steps import expression_splitting
from leir.transforms.steps import common_subexpression_elimination
from leir.transforms.steps import dead_code_elimination
from leir.transforms.steps import expression_reorder
from leir.transforms.steps import tensor_split
from leir.transforms.steps import tensor_concat
from leir.transforms.steps import factorization
from leir.transforms.steps import expand_factorization
from leir.transforms.steps import cancellation
from leir.transforms.steps import expand_cancellation
from leir.transforms.steps import together
from leir.transforms.steps import apart
from leir.transforms.steps import powsimp
from leir.transforms.steps import expand_powsimp
from leir.transforms.steps import logsimp
from leir.transforms.steps import expand_log
from leir.transforms.steps import collect
from leir.transforms.steps import expand_collect
from leir.transforms.steps import cache_read
from leir.transforms.steps import cache_write
from leir.transforms.steps import set_scope
from leir.transforms.steps import transform_layout
from leir.transforms.steps import storage_align
from leir.transforms.steps import compute_at
from leir.transforms.steps import reverse_compute_at
from leir.transforms.steps import compute_inline
from leir.transforms.steps import reverse_compute_inline
from leir.transforms.steps import precompute
from leir.transforms.steps import prefix_max
from leir.transforms.steps import prefix_sum_exp
from leir.transforms.steps import online_softmax
from leir.transforms.steps import attention_without_scores
from leir.transforms.base import (
    BadStep,
    Candidate,
    Context,
    NotApplicable,
    StaleStep,
    Step,
    TransformError,
    TvmRefused,
    UnknownTransform,
    VerificationFailed,
    step_from_json,
)
from leir.transforms.applying import apply_transform, context_of
from leir.transforms.verify import Verification, verify

# Grouped as Step-TP groups them; loop and memory steps decide latency and
# come first.
ALL: tuple[ModuleType, ...] = (
    # --- loop
    split,
    tile,
    reorder,
    fuse,
    unroll,
    parallelize,
    vectorize,
    bind,
    rfactor,
    decompose_reduction,
    # --- memory
    cache_read,
    cache_write,
    set_scope,
    transform_layout,
    storage_align,
    compute_at,
    reverse_compute_at,
    compute_inline,
    reverse_compute_inline,
    precompute,
    # --- operator
    operator_fusion,
    operator_fission,
    expression_splitting,
    common_subexpression_elimination,
    dead_code_elimination,
    expression_reorder,
    tensor_split,
    tensor_concat,
    # --- algebraic
    factorization,
    expand_factorization,
    cancellation,
    expand_cancellation,
    together,
    apart,
    powsimp,
    expand_powsimp,
    logsimp,
    expand_log,
    collect,
    expand_collect,
    # --- algorithmic
    prefix_max,
    prefix_sum_exp,
    online_softmax,
    attention_without_scores,
)

_BY_ID = {t.ID: t for t in ALL}

#: Step-TP's groups, in the order ``ALL`` lists them; each step module says
#: its own (``GROUP``).
GROUPS = ("loop", "memory", "operator", "algebraic", "algorithmic")
#: The groups that change latency without changing what is computed: the
#: ones a search takes (``leir.tools.ranking.SEARCHED``). Operator, algebraic and
#: algorithmic rewrites change the computation itself; they are the user's
#: call.
SCHEDULE_GROUPS = ("loop", "memory")


def ids_in(*groups: str) -> tuple[str, ...]:
    """The ids of the steps of ``groups``, in ``ALL`` order."""
    return tuple(t.ID for t in ALL if t.GROUP in groups)

__all__ = [
    "ALL", "GROUPS", "SCHEDULE_GROUPS", "BadStep", "Candidate", "Context", "NotApplicable", "StaleStep", "Step",
    "TransformError",
    "TvmRefused", "UnknownTransform", "Verification", "VerificationFailed", "apply", "candidates", "get",
    "ids_in", "replay", "step_from_json", "verify",
]


def get(transform_id: str) -> ModuleType:
    try:
        return _BY_ID[transform_id]
    except KeyError:
        raise UnknownTransform(f"unknown transformation {transform_id!r}",
                               f"known transformations: {', '.join(_BY_ID)}") from None


def candidates(program, at: int | None = None, only: tuple[str, ...] | None = None) -> list[Candidate]:
    """Every step that applies at character offset ``at`` (everywhere when
    None), transformation by transformation in ``ALL`` order."""
    ctx = context_of(program)
    if not ctx.analysis.ok:
        return []
    from leir.cancel import checkpoint

    out: list[Candidate] = []
    for t in ALL:
        if only is None or t.ID in only:
            checkpoint()  # a request past its budget or overtaken stops here (leir.cancel)
            out.extend(t.candidates(ctx, at))
    return out


def apply(program, step: Step, name: str = "main") -> A.Program:
    """The program rewritten by exactly ``step``; typed errors otherwise."""
    return apply_transform(get(step.id), program, step, name)


def replay(program, trace: list[Step], name: str = "main") -> A.Program:
    """Apply a trace of steps in order, each to the previous result."""
    current = program if isinstance(program, A.Program) else context_of(program, name).program
    for k, step in enumerate(trace):
        try:
            current = apply(current, step, name)
        except TransformError as e:
            raise type(e)(f"step {k + 1} ({step.id}): {e.short}", e.detail, e.span) from None
    return current

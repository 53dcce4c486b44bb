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

import os
from types import ModuleType

from leir import ast as A
from leir.semantics import Analysis, analyze
from leir.transforms import split
from leir.transforms import reorder
from leir.transforms import tile
from leir.transforms import fuse
from leir.transforms import parallelize
from leir.transforms import unroll
from leir.transforms import vectorize
from leir.transforms import bind
from leir.transforms import rfactor
from leir.transforms import decompose_reduction
from leir.transforms import operator_fusion
from leir.transforms import operator_fission
from leir.transforms import expression_splitting
from leir.transforms import common_subexpression_elimination
from leir.transforms import dead_code_elimination
from leir.transforms import expression_reorder
from leir.transforms import tensor_split
from leir.transforms import tensor_concat
from leir.transforms import factorization
from leir.transforms import expand_factorization
from leir.transforms import cancellation
from leir.transforms import expand_cancellation
from leir.transforms import together
from leir.transforms import apart
from leir.transforms import powsimp
from leir.transforms import expand_powsimp
from leir.transforms import logsimp
from leir.transforms import expand_log
from leir.transforms import collect
from leir.transforms import expand_collect
from leir.transforms import cache_read
from leir.transforms import cache_write
from leir.transforms import set_scope
from leir.transforms import transform_layout
from leir.transforms import storage_align
from leir.transforms import compute_at
from leir.transforms import reverse_compute_at
from leir.transforms import compute_inline
from leir.transforms import reverse_compute_inline
from leir.transforms import precompute
from leir.transforms import prefix_max
from leir.transforms import prefix_sum_exp
from leir.transforms import online_softmax
from leir.transforms import attention_without_scores
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
from leir.transforms.verify import Verification, verify

# Grouped as Step-TP groups them; loop and memory steps decide latency and
# come first. Each group's helper adds its modules under its comment.
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

__all__ = [
    "ALL", "BadStep", "Candidate", "Context", "NotApplicable", "StaleStep", "Step", "TransformError",
    "TvmRefused", "UnknownTransform", "Verification", "VerificationFailed", "apply", "candidates", "get",
    "replay", "step_from_json", "verify",
]


def get(transform_id: str) -> ModuleType:
    try:
        return _BY_ID[transform_id]
    except KeyError:
        raise UnknownTransform(f"unknown transformation {transform_id!r}",
                               f"known transformations: {', '.join(_BY_ID)}") from None


def _context(program_or_ctx, name: str = "main") -> Context:
    if isinstance(program_or_ctx, Context):
        return program_or_ctx
    if isinstance(program_or_ctx, Analysis):
        return Context.of(program_or_ctx, name)
    if isinstance(program_or_ctx, A.Program):
        return Context(analyze(program_or_ctx), name)
    raise TypeError(f"expected a Program, Analysis or Context, got {type(program_or_ctx).__name__}")


def candidates(program, at: int | None = None, only: tuple[str, ...] | None = None) -> list[Candidate]:
    """Every step that applies at character offset ``at`` (everywhere when
    None), transformation by transformation in ``ALL`` order."""
    ctx = _context(program)
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
    ctx = _context(program, name)
    if not ctx.analysis.ok:
        raise NotApplicable("the program has errors; fix them before transforming it")
    t = get(step.id)
    t.check(ctx, step.args)
    if hasattr(t, "schedule"):
        result = _apply_schedule(t, ctx, step)
        if hasattr(t, "tidy"):
            # Names TVM invents (the ax0, ax1 of compute_at) given back.
            result = t.tidy(ctx, step.args, result)
    else:
        result = t.rewrite(ctx, step.args)
    after = analyze(result)
    if not after.ok:
        first = next(d for d in after.diagnostics if d.is_error)
        raise TransformError(f"{step.id} produced a program that does not check: {first.message}",
                             "this is a bug in leir's transformation, not in your program")
    return result


def _apply_schedule(t: ModuleType, ctx: Context, step: Step) -> A.Program:
    import tvm

    from leir.raise_tir import raise_func
    from leir.transforms.splice import splice

    sch = tvm.s_tir.Schedule(ctx.func)
    try:
        t.schedule(sch, ctx, step.args)
    except Exception as e:  # noqa: BLE001 - only TVM's refusals are mapped; anything else is re-raised
        if not _raised_by_tvm(e):
            raise
        detail = _schedule_error_message(e)
        raise TvmRefused(f"TVM refused {step.id}: {detail.splitlines()[0] if detail else 'schedule error'}", detail) from None
    before = raise_func(ctx.func)
    after = raise_func(sch.mod["main"])
    return splice(ctx.program, before, after)


def _raised_by_tvm(e: BaseException) -> bool:
    """Whether TVM refused (rather than our code failing). With apache-tvm-ffi,
    TVM 0.27 raises a ``ScheduleError`` for a schedule primitive's documented
    preconditions, but a failed ``ICHECK`` comes back as a plain ``ValueError``
    or ``InternalError``, a missing map key as ``KeyError`` (each marked with
    ``__tvm_ffi_error__``), and the argument checks of TVM's Python wrappers
    raise ``TypeError``/``AssertionError`` from TVM's own files."""
    import tvm

    if isinstance(e, tvm.s_tir.ScheduleError) or hasattr(e, "__tvm_ffi_error__"):
        return True
    if not isinstance(e, Exception):
        return False
    import traceback

    import tvm_ffi

    frames = traceback.extract_tb(e.__traceback__)
    packages = [os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (tvm, tvm_ffi)]
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(tuple(packages))


def _schedule_error_message(e: Exception) -> str:
    """The informative part of a TVM error: after "Error message:" for a
    ``ScheduleError``; else its last line, without an ``ICHECK``'s
    "Check failed: (...) is false:" prefix, named by its type when that says
    something ("KeyError: 'key is not in Map'")."""
    text = str(e)
    marker = "Error message:"
    if marker in text:
        return text.split(marker, 1)[1].strip()
    lines = [l for l in text.splitlines() if l.strip()]
    last = lines[-1].strip() if lines else ""
    if last.startswith("Check failed:") and " is false:" in last:
        last = last.split(" is false:", 1)[1].strip()
    if not last:
        return type(e).__name__
    # A failed check reads as it is; other kinds say what they are.
    return last if type(e) in (ValueError, RuntimeError) else f"{type(e).__name__}: {last}"


def replay(program, trace: list[Step], name: str = "main") -> A.Program:
    """Apply a trace of steps in order, each to the previous result."""
    current = program if isinstance(program, A.Program) else _context(program, name).program
    for k, step in enumerate(trace):
        try:
            current = apply(current, step, name)
        except TransformError as e:
            raise type(e)(f"step {k + 1} ({step.id}): {e.short}", e.detail, e.span) from None
    return current

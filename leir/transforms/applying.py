"""Applying one step of a given transformation: its check, then its TVM
schedule primitives (raised back to LEIR and spliced into the program) or
its syntax-tree rewrite, and the check of the result.

The step modules call ``apply_transform`` with themselves, so that no step
imports the catalogue (``leir.transforms``), which imports every step.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from leir import ast as A
from leir.semantics import Analysis, analyze
from leir.transforms.base import Context, NotApplicable, Step, TransformError, TvmRefused

__all__ = ["apply_transform", "context_of", "raised_by_tvm", "schedule_error_message"]


def context_of(program_or_ctx, name: str = "main") -> Context:
    if isinstance(program_or_ctx, Context):
        return program_or_ctx
    if isinstance(program_or_ctx, Analysis):
        return Context.of(program_or_ctx, name)
    if isinstance(program_or_ctx, A.Program):
        return Context(analyze(program_or_ctx), name)
    raise TypeError(f"expected a Program, Analysis or Context, got {type(program_or_ctx).__name__}")


def apply_transform(transform: ModuleType | str, program, step: Step, name: str = "main") -> A.Program:
    """The program rewritten by exactly ``step`` of ``transform`` (a step
    module of the catalogue, or its ``__name__``); typed errors otherwise."""
    t = sys.modules[transform] if isinstance(transform, str) else transform
    ctx = context_of(program, name)
    if not ctx.analysis.ok:
        raise NotApplicable("the program has errors; fix them before transforming it")
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

    from leir.bridge.raise_tir import raise_func
    from leir.transforms.splice import splice

    sch = tvm.s_tir.Schedule(ctx.func)
    try:
        t.schedule(sch, ctx, step.args)
    except Exception as e:  # noqa: BLE001 - only TVM's refusals are mapped; anything else is re-raised
        if not raised_by_tvm(e):
            raise
        detail = schedule_error_message(e)
        raise TvmRefused(f"TVM refused {step.id}: {detail.splitlines()[0] if detail else 'schedule error'}", detail) from None
    before = raise_func(ctx.func)
    after = raise_func(sch.mod["main"])
    return splice(ctx.program, before, after)


def raised_by_tvm(e: BaseException) -> bool:
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


def schedule_error_message(e: Exception) -> str:
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

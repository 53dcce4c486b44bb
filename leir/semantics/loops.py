"""Loop nests: too many iterations, shadowed loop variables
(``duplicate-loop-var``), vector loops that are not innermost
(``vector-not-innermost``), and, for GPU programs, the thread axes and
the kernels they form (``bad-thread-axis``, ``unbound-on-gpu``; each
kernel's launch limits are ``leir.semantics.gpu``'s)."""

from __future__ import annotations

from leir import ast as A
from leir.diagnostics import Related, error, warning
from leir.limits import MAX_ITERATIONS, power_text
from leir.semantics.context import NO_SPAN, Context
from leir.semantics.gpu import check_kernel


def check_loops(ctx: Context) -> None:
    """Shadowing, thread axes and launch limits, vector loop placement,
    and equations left on the host of a GPU program."""

    def visit(nest: A.Nest, outer: dict[str, A.Loop], kernel: list[A.Loop] | None, bound: bool,
              vector_loops: list[A.Loop], iterations: int | None = 1) -> None:
        scope = dict(outer)
        vector_loops = list(vector_loops)
        for loop in nest.loops:
            span = loop.var_span or loop.span or NO_SPAN
            if iterations is not None:  # None: reported further out
                iterations *= max(loop.extent, 1)
                if iterations > MAX_ITERATIONS:
                    ctx.report(error(loop.extent_span or span, "too-many-iterations",
                                     f"the loops down to {loop.var} run more than {power_text(MAX_ITERATIONS)} "
                                     f"iterations (their extents multiplied): more than TVM's and NumPy's "
                                     f"int64 counters hold"))
                    iterations = None
            if loop.var in scope:
                ctx.report(error(span, "duplicate-loop-var",
                                 f"loop variable {loop.var} is already bound by an enclosing loop",
                                 Related(scope[loop.var].var_span or NO_SPAN, "bound here")))
            if loop.kind == "B":
                bound = True
                if loop.var not in A.THREAD_AXES:
                    ctx.report(error(span, "bad-thread-axis",
                                     f"a B loop's variable names its thread axis: one of {', '.join(A.THREAD_AXES)}, not {loop.var}"))
                else:
                    # The outermost thread-bound loop starts a kernel:
                    # TVM splits the host code around it.
                    if kernel is None:
                        kernel = []
                        kernels.append(kernel)
                    kernel.append(loop)
            if loop.kind not in ("V", "U") and loop.kind in A.LOOP_KINDS:
                check_vector_contains(ctx, vector_loops, loop, warned_vector_loops)
            if loop.kind == "V":
                vector_loops.append(loop)
            scope[loop.var] = loop
        for item in nest.body:
            if isinstance(item, A.Nest):
                visit(item, scope, kernel, bound, vector_loops, iterations)
            elif not bound and ctx.has_thread_loops:
                ctx.report(warning(item.lhs.span or NO_SPAN, "unbound-on-gpu",
                                   f"this equation is under no B loop, but the program binds loops to GPU threads: "
                                   f"TVM runs it on the host, which cannot write {item.lhs.tensor} in device memory; "
                                   f"bind one of its loops (B^{{n}}_{{bx=0}}) or move it into a bound nest"))

    kernels: list[list[A.Loop]] = []
    warned_vector_loops: set[int] = set()
    for unit in ctx.program.units:
        visit(unit, {}, None, False, [])
    for kernel in kernels:
        check_kernel(ctx, kernel)


def check_vector_contains(ctx: Context, vector_loops: list[A.Loop], inner: A.Loop, warned: set[int]) -> None:
    """Warn, once per vector loop (``warned`` holds the ids of those warned
    about), that it contains ``inner``, a loop neither vectorized nor
    unrolled."""
    for vloop in vector_loops:
        if id(vloop) in warned:
            continue  # one warning per vector loop
        warned.add(id(vloop))
        ctx.report(warning(vloop.var_span or vloop.span or NO_SPAN, "vector-not-innermost",
                           f"vectorized loop {vloop.var} contains {A.KIND_WORDS.get(inner.kind, inner.kind)} loop {inner.var}: "
                           f"TVM keeps {inner.var} as a loop and vectorizes its body across {vloop.var}, one vector "
                           f"operation per iteration (strided wherever {vloop.var} does not index the last dimension); "
                           f"make {vloop.var} the innermost loop",
                           Related(inner.span or NO_SPAN, f"{A.KIND_WORDS.get(inner.kind, inner.kind)} loop {inner.var}")))

"""Move a temporary to another memory: global, shared or local.

On a GPU, a temporary that one thread block produces and consumes can live
in its shared memory, and one that each thread keeps to itself in local
memory (registers), instead of making a round trip through global memory;
on a CPU, a local temporary is one TVM keeps on the stack. The step changes
the temporary's declaration (``tmp S: f32[64] @s``) and nothing else: TVM's
``set_scope`` would also rename the buffer (``S_shared``), which LEIR does
not need, since the declaration says the scope.

LEIR indexes every tensor as one array, whatever its scope; on a GPU,
shared memory is private to a thread block and local memory to a thread,
and a temporary only lives as long as its kernel. So a temporary may move
to shared memory only when every element is written and read by the same
thread block of the same kernel, and to local memory only when by the same
thread. This is proved from the indices: along every block axis (for local
memory, every thread axis too) there is one dimension of the temporary that
says which block (thread) owns an element, ``index // c`` with the rest of
the index in ``0..c-1``, in every access (``S_{bx*32+tx,j}`` is owned by
block ``bx``).

It requires:

- a temporary (inputs and outputs are the kernel's interface and stay
  global);
- a scope other than its current one;
- shared memory only in a program with thread-bound (``B``) loops;
- for shared or local memory in such a program, every access inside one
  kernel (no host code, no second kernel);
- for shared or local memory in such a program, every access under the same
  block axes (for local, thread axes too), each owning its elements as
  described above.

Example: keep a row statistic in local memory on a CPU

    step: {"tensor": "M", "scope": "l"}

    before:
    L^{16}_{i}
      L^{10}_{j} [
        M$0_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Y_{i,j} = X_{i,j} - M_{i};
      ];

    after:
    tmp M: f32[16] @l

    L^{16}_{i}
      L^{10}_{j} [
        M_{i} = max(M_{i}, X_{i,j});
      ];

    L^{16}_{i}
      L^{10}_{j} [
        Y_{i,j} = X_{i,j} - M_{i};
      ];

Example: a tile each thread block writes and reads in one kernel

    step: {"tensor": "S", "scope": "s"}

    before:
    B^{4}_{bx} [
      B^{8}_{tx}
        L^{8}_{j} [
          S$0_{bx*8+tx,j} = X_{bx*8+tx,j}*2.0;
        ];
      B^{8}_{tx}
        L^{8}_{j} [
          Y_{bx*8+tx,j} = S_{bx*8+j,tx};
        ];
    ];

    after:
    tmp S: f32[32,8] @s

    B^{4}_{bx} [
      B^{8}_{tx}
        L^{8}_{j} [
          S_{bx*8+tx,j} = X_{bx*8+tx,j}*2.0;
        ];
      B^{8}_{tx}
        L^{8}_{j} [
          Y_{bx*8+tx,j} = S_{bx*8+j,tx};
        ];
    ];

Example: a temporary another kernel reads cannot be shared

    step: {"tensor": "C", "scope": "s"}

    before:
    B^{4}_{bx}
      B^{16}_{tx}
        L^{32}_{k} [
          C$0_{bx,tx} += X_{bx,k}*W_{k,tx};
        ];

    B^{4}_{bx}
      B^{16}_{tx} [
        Y_{bx,tx} = max(C_{bx,tx}, 0.0);
      ];

    refused: set_scope-not-one-kernel
"""

from __future__ import annotations

from dataclasses import replace

from leir import affine
from leir import ast as A
from leir.ast import SCOPES
from leir.semantics import EquationInfo
from leir.transforms.applying import apply_transform
from leir.transforms.base import (
    Candidate,
    Context,
    NotApplicable,
    Step,
)
from leir.transforms.lib.tensors import (
    BLOCK_AXES,
    is_gpu_program,
    not_temporary,
    scope_arg,
    tensor_arg,
    tensors_at,
    uses,
)
from leir.transforms.rewrite import map_equation, map_expr

ID = "set_scope"
GROUP = "memory"
TITLE = "Set storage scope"
#: The Step-TP strategy this is (dataset exports use it).
STEPTP = "set_storage_scope"


class NotTemporary(NotApplicable):
    """The tensor is an input or an output: the kernel's interface, which stays global."""

    code = "set_scope-not-temporary"


class SameScope(NotApplicable):
    """The tensor is already in that scope."""

    code = "set_scope-same-scope"


class SharedWithoutThreads(NotApplicable):
    """Shared memory asked for in a program without thread-bound (``B``) loops."""

    code = "set_scope-shared-without-threads"


class NotOneKernel(NotApplicable):
    """An access of the tensor is under no thread-bound loop (host code, which has no shared or
    local memory) or in a second kernel: every access must be inside one kernel."""

    code = "set_scope-not-one-kernel"


class NotPrivate(NotApplicable):
    """Accesses of the tensor run under different block axes (for local, thread axes): one may
    read elements another owns."""

    code = "set_scope-not-private"


# ------------------------------------------------------------------ the step


def candidates(ctx: Context, at: int | None) -> list[Candidate]:
    out = []
    for name in tensors_at(ctx, at):
        t = ctx.analysis.tensors.get(name)
        if t is None or t.role != "tmp":
            continue
        for scope in ("s", "l", "g"):
            if _refusal(ctx, name, scope) is None:
                title = f"Put {name} in {SCOPES[scope]} memory"
                out.append(Candidate(Step(ID, {"tensor": name, "scope": scope}), title, t.span))
    return out


def _refusal(ctx: Context, name: str, scope: str) -> NotApplicable | None:
    refusal = not_temporary(ctx, name, NotTemporary,
                            "inputs and outputs are the kernel's parameters, which the caller passes in global memory")
    if refusal is not None:
        return refusal
    t = ctx.analysis.tensors[name]
    if t.scope == scope:
        return SameScope(f"{name} is already in {SCOPES[scope]} memory",
                         f"{name} is already in {SCOPES[scope]} memory: putting it there again would change nothing",
                         t.span)
    gpu = is_gpu_program(ctx)
    if scope == "s" and not gpu:
        return SharedWithoutThreads(
            "shared memory needs thread-bound loops",
            f"shared memory is the memory of one GPU thread block, and this program binds no loop to GPU threads "
            f"(B loops); on a CPU, {name} can be local (l) or global (g)", t.span)
    if scope == "g" or not gpu:
        return None  # global memory is seen by everyone; a CPU has one memory
    return private_refusal(ctx, name, scope)


def private_refusal(ctx: Context, name: str, scope: str) -> NotApplicable | None:
    """Why ``name`` cannot live in shared (``s``) or local (``l``) memory
    of a GPU program: each element must be written and read by one thread
    block (one thread) of one kernel. None when that is proved."""
    word = "thread block" if scope == "s" else "thread"
    accesses = uses(ctx, name)
    owners: list[tuple[A.Access, EquationInfo, list[A.Loop]]] = []
    kernel = None
    for access, info in accesses:
        k = next((p for p, l in enumerate(info.loops) if l.kind == "B"), None)
        if k is None:
            return NotOneKernel(f"{name} is used outside the kernels",
                                f"this access of {name} is under no thread-bound loop: it runs on the host, which "
                                f"has no {SCOPES[scope]} memory", access.span)
        if kernel is None:
            kernel = info.loops[k]
        elif info.loops[k] is not kernel:
            return NotOneKernel(f"{name} is used by more than one kernel",
                                f"{SCOPES[scope]} memory lives only as long as its kernel, and this access of "
                                f"{name} is in another kernel than its first one (fuse them into one nest first)",
                                access.span)
        # Loops outside the kernel launch it again on every iteration: they
        # must own elements too.
        axes = list(info.loops[:k]) + [l for l in info.loops[k:] if l.kind == "B"
                                       and (scope == "l" or l.var in BLOCK_AXES)]
        owners.append((access, info, axes))
    first_access, _, first_axes = owners[0]
    names = [l.var for l in first_axes]
    for access, info, axes in owners[1:]:
        if sorted(l.var for l in axes) != sorted(names):
            return NotPrivate(f"{name} is accessed under different {word}s",
                              f"the first access of {name} runs under {', '.join(names) or 'no axis'}, this one "
                              f"under {', '.join(l.var for l in axes) or 'no axis'}: it may read elements another "
                              f"{word} wrote", access.span)
    for loop in first_axes:
        if loop.extent == 1:
            continue
        if _owning_dimension(loop.var, loop.extent, owners) is None:
            return NotPrivate(f"cannot show that each {word} keeps to its own elements of {name}",
                              f"no dimension of {name} says which {loop.var} owns an element in every access "
                              f"(the same dimension, indexed {loop.var}*c + r with r in 0..c-1 up to multiples of "
                              f"c*{loop.extent}): a {word} could read what another wrote", first_access.span)
    return None


def _owning_dimension(var: str, extent: int, owners) -> tuple[int, int] | None:
    """A dimension ``d`` and stride ``c`` such that, in every access,
    index ``d`` is ``var*c + low + high`` with ``low`` in ``0..c-1`` and
    ``high`` a multiple of ``c*extent``: the element's owner along ``var``
    is then ``index // c % extent`` (``bx*8+tx`` is owned by ``bx`` through
    ``// 8`` and by ``tx`` through ``% 8``)."""
    common: set[tuple[int, int]] | None = None
    for access, info, _ in owners:
        ranges = affine.loop_ranges(info.loops)
        found = set()
        for d, index in enumerate(access.indices or ()):
            form = affine.linearize(index)
            c = form.coeff(var) if form is not None else 0
            if c <= 0:
                continue
            period = c * extent
            low = {v: k for v, k in form.coeffs if v != var and k % period != 0}
            lo, hi = affine.Affine.of(low, form.const % period).bounds(ranges)
            if 0 <= lo and hi < c:
                found.add((d, c))
        common = found if common is None else common & found
        if not common:
            return None
    return min(common) if common else None


def check(ctx: Context, args: dict) -> None:
    name = tensor_arg(ctx, args, ID)
    scope = scope_arg(args, ID)
    refusal = _refusal(ctx, name, scope)
    if refusal is not None:
        raise refusal


def rewrite(ctx: Context, args: dict) -> A.Program:
    name, scope = args["tensor"], args["scope"]
    program = ctx.program

    def rescope(e: A.Expr):
        if isinstance(e, A.Access) and e.tensor == name and e.scope is not None:
            return replace(e, scope=scope)
        return None

    def visit(item):
        if isinstance(item, A.Equation):
            return map_equation(item, lambda e: map_expr(e, rescope))
        return replace(item, body=tuple(visit(b) for b in item.body))

    units = tuple(visit(u) for u in program.units)
    decls = tuple(replace(d, scope=scope) if d.name == name else d for d in program.decls)
    said = any(isinstance(n, A.Access) and n.tensor == name and n.scope is not None for n in A.walk(program))
    if name not in {d.name for d in decls} and not said:
        decls += (replace(ctx.analysis.tensors[name].as_decl(), scope=scope),)
    return replace(program, decls=decls, units=units)


def set_scope(program, tensor: str, scope: str):
    """Apply a set_scope (see the module docstring) and return the new program."""
    return apply_transform(__name__, program, Step(ID, {"tensor": tensor, "scope": scope}))

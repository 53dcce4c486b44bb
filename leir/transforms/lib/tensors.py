"""What the memory steps share about tensors and storage scopes: the
scope words and the scopes a stage is offered in, whether the program runs
on a GPU, the tensor and scope a step names, a tensor's accesses and
writers, the tensors a cursor selects, and whether a tensor is a
temporary. Moved from ``cache_read`` and ``set_scope``, which import them
back."""

from __future__ import annotations

from leir import affine
from leir import ast as A
from leir.ast import SCOPES
from leir.semantics import EquationInfo
from leir.transforms.base import BadStep, Context, NotApplicable, StaleStep, str_arg

#: LEIR scope letter -> the word titles and messages use.
#: Scopes a cache stage is offered in, in the editor's order: shared and
#: local memory on a GPU; on a CPU, which has no shared memory, local (a
#: stack buffer, for register-level reuse) and global (a heap buffer, for
#: packing).
GPU_SCOPES = ("s", "l")
CPU_SCOPES = ("l", "g")
BLOCK_AXES = ("bx", "by", "bz")


# ------------------------------------------------- helpers the memory steps share


def is_gpu_program(ctx: Context) -> bool:
    """Whether the program binds loops to GPU threads (``B`` loops)."""
    return any(site.loop.kind == "B" for site in ctx.loop_sites)


def offered_scopes(ctx: Context) -> tuple[str, ...]:
    return GPU_SCOPES if is_gpu_program(ctx) else CPU_SCOPES


def scope_refusal(ctx: Context, scope: str, error: type[NotApplicable], what: str, span) -> NotApplicable | None:
    """Why a ``scope`` stage does not suit this program (None if it does)."""
    if is_gpu_program(ctx):
        if scope == "g":
            return error(f"a global {what} gains nothing on a GPU",
                         "this program runs on a GPU (it has B loops): a copy in global memory is as far away as the "
                         "original; stage it in shared (s) or local (l) memory instead", span)
        return None
    if scope == "s":
        return error("shared memory needs thread-bound loops",
                     f"shared memory is the memory of one GPU thread block, and this program binds no loop to GPU "
                     f"threads (B loops); on a CPU, use a local (l) or global (g) {what}", span)
    return None


def scope_arg(args: dict, step_id: str) -> str:
    scope = str_arg(args, "scope", step_id)
    if scope not in SCOPES:
        raise BadStep(f"{step_id}: \"scope\" is one of g, s, l (global, shared, local), got {scope!r}")
    return scope


def tensor_arg(ctx: Context, args: dict, step_id: str) -> str:
    name = str_arg(args, "tensor", step_id)
    if name not in ctx.analysis.tensors:
        raise StaleStep(f"no tensor {name} in the program",
                        f"the program has tensors {', '.join(ctx.analysis.tensors)}")
    return name


def rhs_reads(eq: A.Equation) -> list[A.Access]:
    """The accesses the right-hand side reads, in source order."""
    return [n for n in A.walk(eq.rhs) if isinstance(n, A.Access)]


def guard_reads(eq: A.Equation) -> list[A.Access]:
    return [n for n in A.walk(eq.predicate) if isinstance(n, A.Access)] if eq.predicate is not None else []


def access_at(eq: A.Equation, at: int | None) -> A.Access | None:
    """The access (written or read) the cursor is on, if any."""
    if at is None:
        return None
    for node in A.walk(eq):
        if isinstance(node, A.Access) and node.span is not None and node.span.contains(at):
            return node
    return None


def writers(ctx: Context, tensor: str) -> list[EquationInfo]:
    return [info for info in ctx.analysis.equations if info.equation.lhs.tensor == tensor]


def cache_name(tensor: str, scope: str) -> str:
    """What TVM names the cache stage (before it avoids a clash)."""
    return f"{tensor}_{SCOPES[scope]}"


def affine_guard(guard: A.Expr) -> bool:
    """Whether every conjunct of ``guard`` compares affine index
    expressions (what TVM's region analysis can use)."""
    if isinstance(guard, A.Binary) and guard.op == "&":
        return affine_guard(guard.lhs) and affine_guard(guard.rhs)
    return (isinstance(guard, A.Binary) and guard.op in ("<", "<=", ">", ">=", "==")
            and affine.linearize(guard.lhs) is not None and affine.linearize(guard.rhs) is not None)


# --------------------------------------------------- which tensors the cursor selects


def tensors_at(ctx: Context, at: int | None) -> list[str]:
    """The tensors a cursor selects: the one whose declaration or access it
    is on; else every tensor the equation under it accesses; every tensor
    when no position is given."""
    if at is None:
        return list(ctx.analysis.tensors)
    for decl in ctx.program.decls:
        if decl.span is not None and decl.span.contains(at):
            return [decl.name]
    out: list[str] = []
    for info in ctx.equations_at(at):
        pointed = access_at(info.equation, at)
        if pointed is not None:
            return [pointed.tensor]
        out += [n.tensor for n in A.walk(info.equation) if isinstance(n, A.Access)]
    return list(dict.fromkeys(out))


def uses(ctx: Context, name: str) -> list[tuple[A.Access, EquationInfo]]:
    """Every access of ``name`` (written, read, read in a guard), with its
    equation, in program order."""
    return [(n, info) for info in ctx.analysis.equations for n in A.walk(info.equation)
            if isinstance(n, A.Access) and n.tensor == name]


def not_temporary(ctx: Context, name: str, error: type[NotApplicable], why: str) -> NotApplicable | None:
    t = ctx.analysis.tensors[name]
    if t.role == "tmp":
        return None
    role = {"in": "an input", "out": "an output"}[t.role]
    return error(f"{name} is {role}, not a temporary", f"{name} is {role}: {why}", t.span)

"""Raising TensorIR to LEIR (``leir.bridge.raise_tir``).

The laws:

(a) ``raise(lower(p))`` is ``p`` for canonical LEIR ``p`` (every bundled
    example, and programs that use every feature): the raiser declares every
    tensor (from the TIR signature), so the two have the same minimal
    canonical form, and the raised declarations are exactly what the
    analysis of ``p`` infers or reads from its declarations;
(b) ``lower(raise(f))`` computes what ``f`` computes, for TVMScript written by
    hand and after each schedule primitive;
(c) every raised program analyses without errors and survives a print/parse
    round trip;
(d) what LEIR cannot express raises ``RaiseError`` with a message that names
    the construct.

Named fixtures come in pairs: a TensorIR function and the LEIR it raises to.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm.script import tirx as T  # noqa: E402

from leir import ast as A  # noqa: E402
from leir.errors import LeirError  # noqa: E402
from leir.evaluate import evaluate  # noqa: E402
from leir.format import canonical_program  # noqa: E402
from leir.bridge.lower import lower  # noqa: E402
from leir.parser import parse  # noqa: E402
from leir.printer import print_program  # noqa: E402
from leir.bridge.raise_tir import RaiseError, raise_func, raise_module  # noqa: E402
from leir.bridge.run import build, run  # noqa: E402
from leir.semantics import analyze  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Schedule = tvm.s_tir.Schedule


# ------------------------------------------------------------------ kernels


@T.prim_func(s_tir=True)
def matmul(X: T.Buffer((64, 32), "float32"), W: T.Buffer((32, 48), "float32"), C: T.Buffer((64, 48), "float32")):
    for i, j, k in T.grid(64, 48, 32):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + X[vi, vk] * W[vk, vj]


MATMUL = """\
in  X: f32[64,32]
in  W: f32[32,48]
out C: f32[64,48]

L^{64}_{i}
  L^{48}_{j}
    L^{32}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


@T.prim_func(s_tir=True)
def softmax(X: T.Buffer((64, 50), "float32"), Y: T.Buffer((64, 50), "float32")):
    M = T.sblock_alloc_buffer((64,), "float32")
    Z = T.sblock_alloc_buffer((64,), "float32")
    for i, j in T.grid(64, 50):
        with T.sblock("M"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                M[vi] = T.float32("-inf")
            M[vi] = T.max(M[vi], X[vi, vj])
    for i, j in T.grid(64, 50):
        with T.sblock("Z"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                Z[vi] = T.float32(0)
            Z[vi] = Z[vi] + T.exp(X[vi, vj] - M[vi])
    for i, j in T.grid(64, 50):
        with T.sblock("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = T.exp(X[vi, vj] - M[vi]) / Z[vi]


SOFTMAX = """\
in  X: f32[64,50]
out Y: f32[64,50]
tmp M: f32[64]
tmp Z: f32[64]

L^{64}_{i}
  L^{50}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{64}_{i}
  L^{50}_{j} [
    Z_{i} += exp(X_{i,j} - M_{i});
  ];

L^{64}_{i}
  L^{50}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/Z_{i};
  ];
"""


@T.prim_func(s_tir=True)
def softmax_min_value(X: T.Buffer((64, 50), "float32"), Y: T.Buffer((64, 50), "float32")):
    # TOPI's max starts from the lowest finite float, not -inf.
    M = T.sblock_alloc_buffer((64,), "float32")
    for i, j in T.grid(64, 50):
        with T.sblock("M"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                M[vi] = T.min_value("float32")
            M[vi] = T.max(M[vi], X[vi, vj])
    for i, j in T.grid(64, 50):
        with T.sblock("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = X[vi, vj] - M[vi]


SOFTMAX_MIN_VALUE = """\
in  X: f32[64,50]
out Y: f32[64,50]
tmp M: f32[64]

L^{64}_{i} [
  M_{i} = -3.4028234663852886e+38;
  L^{50}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];
];

L^{64}_{i}
  L^{50}_{j} [
    Y_{i,j} = X_{i,j} - M_{i};
  ];
"""


@T.prim_func(s_tir=True)
def fused_chain(X: T.Buffer((32, 40), "float32"), b: T.Buffer((40,), "float32"), Y: T.Buffer((32, 40), "float32")):
    biased = T.sblock_alloc_buffer((32, 40), "float32")
    activated = T.sblock_alloc_buffer((32, 40), "float32")
    for i, j in T.grid(32, 40):
        with T.sblock("biased"):
            vi, vj = T.axis.remap("SS", [i, j])
            biased[vi, vj] = X[vi, vj] + b[vj]
    for i, j in T.grid(32, 40):
        with T.sblock("activated"):
            vi, vj = T.axis.remap("SS", [i, j])
            activated[vi, vj] = T.max(biased[vi, vj], T.float32(0)) * T.sigmoid(biased[vi, vj])
    for i, j in T.grid(32, 40):
        with T.sblock("Y"):
            vi, vj = T.axis.remap("SS", [i, j])
            Y[vi, vj] = activated[vi, vj] * T.float32(0.5) + T.Cast("float32", vj % 3)


FUSED_CHAIN = """\
in  X: f32[32,40]
in  b: f32[40]
out Y: f32[32,40]
tmp biased: f32[32,40]
tmp activated: f32[32,40]

L^{32}_{i}
  L^{40}_{j} [
    biased_{i,j} = X_{i,j} + b_{j};
  ];

L^{32}_{i}
  L^{40}_{j} [
    activated_{i,j} = max(biased_{i,j}, 0.0)*sigmoid(biased_{i,j});
  ];

L^{32}_{i}
  L^{40}_{j} [
    Y_{i,j} = activated_{i,j}*0.5 + f32(j%3);
  ];
"""


@T.prim_func(s_tir=True)
def rowsum_from_one(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 8):
        with T.sblock("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(1)
            C[vi] = C[vi] + A[vi, vk]


ROWSUM_FROM_ONE = """\
in  A: f32[16,8]
out C: f32[16]

L^{16}_{i} [
  C_{i} = 1.0;
  L^{8}_{k} [
    C_{i} += A_{i,k};
  ];
];
"""


@T.prim_func(s_tir=True)
def rowsum_reduction_outer(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16,), "float32")):
    for k, i in T.grid(8, 16):
        with T.sblock("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(1)
            C[vi] = C[vi] + A[vi, vk]


ROWSUM_REDUCTION_OUTER = """\
in  A: f32[16,8]
out C: f32[16]

L^{16}_{i} [
  C_{i} = 1.0;
];

L^{8}_{k}
  L^{16}_{i} [
    C_{i} += A_{i,k};
  ];
"""


@T.prim_func(s_tir=True)
def rowsum_recomputed(A: T.Buffer((16, 8), "float32"), C: T.Buffer((16,), "float32")):
    # The reduction runs three times, restarting each time: its init fires
    # on every iteration of r, which LEIR's implied init would not.
    for r, i, k in T.grid(3, 16, 8):
        with T.sblock("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi] = T.float32(0)
            C[vi] = C[vi] + A[vi, vk]


ROWSUM_RECOMPUTED = """\
in  A: f32[16,8]
out C: f32[16]

L^{3}_{r}
  L^{16}_{i}
    L^{8}_{k} [
      C_{i} = 0.0 where k == 0;
      C_{i} += A_{i,k};
    ];
"""


@T.prim_func(s_tir=True)
def rowsum_overwritten(A: T.Buffer((8, 4), "float32"), C: T.Buffer((4,), "float32")):
    # Rows 2c and 2c+1 both reduce into C[c]; TVM restarts C[c] for the
    # second, so only the odd rows count. An implied init would keep both.
    for i, k in T.grid(8, 4):
        with T.sblock("C"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                C[vi // 2] = T.float32(0)
            C[vi // 2] = C[vi // 2] + A[vi, vk]


ROWSUM_OVERWRITTEN = """\
in  A: f32[8,4]
out C: f32[4]

L^{8}_{i} [
  C_{i//2} = 0.0;
  L^{4}_{k} [
    C_{i//2} += A_{i,k};
  ];
];
"""

x = T.float32()  # the variable of the T.Let below (TVMScript looks it up here)


@T.prim_func(s_tir=True)
def mixed_types(N: T.Buffer((16,), "int32"), H: T.Buffer((16,), "float16"), F: T.Buffer((16,), "float32")):
    for i in T.unroll(16):
        with T.sblock("F"):
            vi = T.axis.remap("S", [i])
            T.where(i < 15)
            F[vi] = (T.Cast("float32", T.abs(N[vi]) + T.truncdiv(N[vi], 3)) + T.Cast("float32", H[vi] * H[vi])
                     + T.Select(H[vi] > T.float16(0.1), -T.Cast("float32", H[vi]), T.float32(1e-5))
                     + T.Let(x * x, where={x: T.Cast("float32", vi)}))


MIXED_TYPES = """\
in  N: i32[16]
in  H: f16[16]
out F: f32[16]

U^{16}_{i} [
  F_{i} = i32(abs(N_{i}) + N_{i}/3) + f16(H_{i}*H_{i}) + if_then_else(H_{i} > 0.099975586, H_{i}*-1.0, 1e-05) + f32(i)*f32(i) where i < 15;
];
"""

@T.prim_func(s_tir=True)
def padded_conv(X: T.Buffer((16,), "float32"), W: T.Buffer((3,), "float32"), Y: T.Buffer((16,), "float32")):
    for i, r in T.grid(16, 3):
        with T.sblock("Y"):
            vi, vr = T.axis.remap("SR", [i, r])
            with T.init():
                Y[vi] = T.float32(0)
            Y[vi] = Y[vi] + T.if_then_else(1 <= vi + vr and vi + vr < 17, X[vi + vr - 1], T.float32(0)) * W[vr]


# The padding read is out of bounds where the condition is false; LEIR says
# "only where" with guards, so the branches become two guarded equations.
PADDED_CONV = """\
in  X: f32[16]
in  W: f32[3]
out Y: f32[16]

L^{16}_{i} [
  Y_{i} = 0.0;
  L^{3}_{r} [
    Y_{i} += X_{i+r-1}*W_{r} where 1 <= i + r & i + r < 17;
    Y_{i} += 0.0*W_{r} where !(1 <= i + r & i + r < 17);
  ];
];
"""


@T.prim_func(s_tir=True)
def if_statement(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        if i < 8:
            C[i] = A_[i]
        else:
            C[i] = T.float32(0)


IF_STATEMENT = """\
in  A_: f32[16]
out C: f32[16]

L^{16}_{i} [
  C_{i} = A__{i} where i < 8;
  C_{i} = 0.0 where !(i < 8);
];
"""

PAIRS = {
    "matmul": (matmul, MATMUL),
    "softmax": (softmax, SOFTMAX),
    "softmax_min_value": (softmax_min_value, SOFTMAX_MIN_VALUE),
    "fused_chain": (fused_chain, FUSED_CHAIN),
    "rowsum_from_one": (rowsum_from_one, ROWSUM_FROM_ONE),
    "rowsum_reduction_outer": (rowsum_reduction_outer, ROWSUM_REDUCTION_OUTER),
    "rowsum_recomputed": (rowsum_recomputed, ROWSUM_RECOMPUTED),
    "rowsum_overwritten": (rowsum_overwritten, ROWSUM_OVERWRITTEN),
    "mixed_types": (mixed_types, MIXED_TYPES),
    "padded_conv": (padded_conv, PADDED_CONV),
    "if_statement": (if_statement, IF_STATEMENT),
}


# ---------------------------------------------------------------- schedules


def _loops(sch, block):
    return sch.get_loops(sch.get_sblock(block))


def sched_split():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    sch.split(j, [None, 10])  # 48 = 5*10 - 2: imperfect, guarded
    sch.split(k, [None, 8])
    return sch.mod["main"]


def sched_reorder():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    sch.reorder(k, i, j)
    return sch.mod["main"]


def sched_fuse():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    sch.fuse(i, j)
    return sch.mod["main"]


def sched_parallel_vectorize_unroll():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    jo, ji = sch.split(j, [None, 8])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(i, jo, ko, ki, ji)
    sch.parallel(i)
    sch.vectorize(ji)
    sch.unroll(ki)
    return sch.mod["main"]


def sched_cache_read_shared():
    sch = Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    cached = sch.cache_read(block, 0, "shared")
    sch.compute_at(cached, i)
    return sch.mod["main"]


def sched_cache_write_local():
    sch = Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    cached = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cached, i)
    return sch.mod["main"]


def sched_cache_write_shared():
    sch = Schedule(softmax)
    block = sch.get_sblock("Y")
    cached = sch.cache_write(block, 0, "shared")
    sch.reverse_compute_at(cached, sch.get_loops(block)[0])
    return sch.mod["main"]


def sched_cache_write_global():
    sch = Schedule(matmul)
    sch.cache_write(sch.get_sblock("C"), 0, "global")
    return sch.mod["main"]


def sched_decompose_reduction():
    sch = Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, 16])
    sch.reorder(io, j, ii)
    sch.parallel(io)
    cached = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cached, j)
    sch.decompose_reduction(block, k)
    return sch.mod["main"]


def sched_rfactor():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    ko, ki = sch.split(k, [None, 8])
    sch.rfactor(ki, 0)
    return sch.mod["main"]


def sched_softmax_compute_at():
    sch = Schedule(softmax)
    i, _ = _loops(sch, "Y")
    sch.compute_at(sch.get_sblock("Z"), i)
    sch.compute_at(sch.get_sblock("M"), i)
    return sch.mod["main"]


def sched_softmax_imperfect_reduction():
    sch = Schedule(softmax)
    _, j = _loops(sch, "Z")
    sch.split(j, [None, 16])  # 50 = 4*16 - 14
    return sch.mod["main"]


def sched_softmax_set_scope():
    sch = Schedule(softmax)
    sch.set_scope(sch.get_sblock("M"), 0, "local")
    sch.set_scope(sch.get_sblock("Z"), 0, "shared")
    return sch.mod["main"]


def sched_softmax_min_value_decompose():
    sch = Schedule(softmax_min_value)
    _, j = _loops(sch, "M")
    sch.decompose_reduction(sch.get_sblock("M"), j)
    return sch.mod["main"]


def sched_compute_inline():
    sch = Schedule(fused_chain)
    sch.compute_inline(sch.get_sblock("biased"))
    return sch.mod["main"]


def sched_reverse_compute_inline():
    sch = Schedule(fused_chain)
    sch.reverse_compute_inline(sch.get_sblock("Y"))
    return sch.mod["main"]


def sched_tiled_matmul():
    """Several primitives together, as a CPU schedule would."""
    sch = Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder(io, jo, ko, ii, ki, ji)
    fused = sch.fuse(io, jo)
    sch.parallel(fused)
    cached = sch.cache_write(block, 0, "global")
    sch.reverse_compute_at(cached, fused)
    sch.vectorize(ji)
    sch.unroll(ki)
    sch.decompose_reduction(block, ko)
    return sch.mod["main"]


def sched_softmax_recomputed():
    """compute_at under a loop the reduction does not depend on: it runs
    again (from its init) on every iteration of that loop."""
    sch = Schedule(softmax)
    _, j = _loops(sch, "Y")
    jo, _ = sch.split(j, [None, 10])
    sch.compute_at(sch.get_sblock("Z"), jo, preserve_unit_loops=True)
    return sch.mod["main"]


def sched_pad_einsum():
    sch = Schedule(matmul)
    sch.pad_einsum(sch.get_sblock("C"), [64, 50, 32])
    return sch.mod["main"]


def sched_blockize():
    sch = Schedule(matmul)
    _, j, _ = _loops(sch, "C")
    _, ji = sch.split(j, [None, 8])
    sch.blockize(ji)
    return sch.mod["main"]


def sched_loop_partition():
    sch = Schedule(fused_chain)
    _, j = _loops(sch, "Y")
    sch.loop_partition(j, [None, 16])
    return sch.mod["main"]


def sched_transform_layout():
    sch = Schedule(matmul)
    sch.transform_layout(sch.get_sblock("C"), ("read", 1), lambda k, j: (j // 16, k, j % 16))
    return sch.mod["main"]


SCHEDULED = {
    "split": sched_split,
    "reorder": sched_reorder,
    "fuse": sched_fuse,
    "parallel_vectorize_unroll": sched_parallel_vectorize_unroll,
    "cache_read_shared": sched_cache_read_shared,
    "cache_write_local": sched_cache_write_local,
    "cache_write_shared": sched_cache_write_shared,
    "cache_write_global": sched_cache_write_global,
    "decompose_reduction": sched_decompose_reduction,
    "rfactor": sched_rfactor,
    "softmax_compute_at": sched_softmax_compute_at,
    "softmax_imperfect_reduction": sched_softmax_imperfect_reduction,
    "softmax_set_scope": sched_softmax_set_scope,
    "softmax_min_value_decompose": sched_softmax_min_value_decompose,
    "compute_inline": sched_compute_inline,
    "reverse_compute_inline": sched_reverse_compute_inline,
    "tiled_matmul": sched_tiled_matmul,
    "softmax_recomputed": sched_softmax_recomputed,
    "pad_einsum": sched_pad_einsum,
    "blockize": sched_blockize,
    "loop_partition": sched_loop_partition,
    "transform_layout": sched_transform_layout,
}


# ------------------------------------------------------------------ helpers


def _without_comments(node):
    """``node`` with every comment dropped (they are not part of TIR)."""
    if isinstance(node, tuple):
        return tuple(_without_comments(x) for x in node)
    if not dataclasses.is_dataclass(node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, A.Comments):
            changes[f.name] = A.NO_COMMENTS
        elif isinstance(value, tuple) or dataclasses.is_dataclass(value):
            changes[f.name] = _without_comments(value)
    return dataclasses.replace(node, **changes)


def _check_raised(program: A.Program):
    """Law (c): analyses cleanly and survives print/parse. Returns the analysis."""
    analysis = analyze(program)
    errors = [d.message for d in analysis.diagnostics if d.is_error]
    assert not errors, errors
    text = print_program(program)
    reparsed = parse(text)
    assert reparsed.ok, [d.message for d in reparsed.diagnostics]
    assert reparsed.program == program
    assert print_program(reparsed.program) == text
    return analysis


def _inputs(func, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every parameter the function only reads."""
    written = {str(s.buffer.name) for s in _stores(func.body)}
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        if str(p.name) in written:
            continue
        shape = tuple(int(d) for d in p.shape)
        dtype = str(p.dtype)
        if dtype.startswith("int"):
            values = rng.integers(-50, 50, size=shape)
        else:
            values = rng.standard_normal(shape)
        out[str(p.name)] = values.astype(dtype)
    return out


def _stores(stmt) -> list:
    """Every buffer store under ``stmt``, block inits included."""
    if stmt is None:
        return []
    if isinstance(stmt, tvm.tirx.BufferStore):
        return [stmt]
    if isinstance(stmt, tvm.tirx.SeqStmt):
        return [s for sub in stmt.seq for s in _stores(sub)]
    if isinstance(stmt, tvm.s_tir.SBlockRealize):
        return _stores(stmt.block.init) + _stores(stmt.block.body)
    if isinstance(stmt, tvm.tirx.IfThenElse):
        return _stores(stmt.then_case) + _stores(stmt.else_case)
    return _stores(getattr(stmt, "body", None))


def _run(func, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Build a TensorIR function for the CPU, run it, return the written
    parameters (which start zeroed, as ``leir.bridge.run`` starts outputs)."""
    executable = build(func, "llvm")
    args, outputs = [], []
    for p in func.params:
        name = str(p.name)
        if name in inputs:
            args.append(tvm.runtime.tensor(inputs[name]))
        else:
            args.append(tvm.runtime.tensor(np.zeros(tuple(int(d) for d in p.shape), str(p.dtype))))
            outputs.append((name, len(args) - 1))
    executable(*args)
    return {name: args[k].numpy() for name, k in outputs}


def _assert_close(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


# ------------------------------------------------------------- law (a)


EXAMPLE_STEMS = sorted(p.stem for p in EXAMPLES.glob("*.leir"))


def _assert_raises_back(program: A.Program) -> A.Program:
    """Law (a) for ``program``; returns the raised program."""
    analysis = analyze(program)
    assert analysis.ok, [d.message for d in analysis.diagnostics]
    raised = raise_func(lower(analysis))
    # Nothing is lost: the raised declarations are the tensor table of p.
    table = {t.name: (t.dtype, t.shape, t.role, t.scope) for t in analysis.tensors.values()}
    declared = {d.name: (d.dtype, d.shape, d.role, d.scope) for d in raised.decls}
    assert len(declared) == len(raised.decls), "a tensor declared twice"
    assert declared == table
    # The same program: equal minimal canonical forms (AST equality ignores
    # comments; the printed texts compare them too, TIR has none).
    expected = canonical_program(analysis, minimal=True)
    actual = canonical_program(analyze(raised), minimal=True)
    assert actual == expected
    assert print_program(actual) == print_program(_without_comments(expected))
    return raised


@pytest.mark.parametrize("stem", EXAMPLE_STEMS)
def test_raise_of_lower_is_identity_on_examples(stem):
    text = (EXAMPLES / f"{stem}.leir").read_text()
    program = parse(text).program
    _assert_raises_back(program)


# Every construct the raiser maps back: guards, casts and mixed dtypes,
# unary minus, float // and %, integer abs and /, conditions and bool
# tensors, if_then_else, inf, loop kinds, loops not starting at 0, scalar
# temporaries, init written separately, nested nests.
FEATURES = [
    """\
in  X: f32[16,10]
in  N: i32[16]
in  H: f16[16]
out Y: f32[16,10]
out Z: i32[16]
out B: bool[16]
out F: f32[16]

P^{16}_{i}
  L^{2}_{jo}
    V^{5}_{ji} [
      Y_{i,jo*5+ji} = if_then_else(X_{i,jo*5+ji} > 0.0, -X_{i,jo*5+ji}, X_{i,jo*5+ji}//2.0 + X_{i,jo*5+ji}%3.0) where jo*5 + ji < 9;
    ];

U^{16}_{i} [
  Z_{i} = abs(N_{i}) + N_{i}/3 + N_{i}//2 - N_{i}%4;
  B_{i} = N_{i} > 0 & X_{i,0} < 0.5 | !(N_{i} == 3);
  F_{i} = f16(H_{i}*H_{i}) + H_{i}*f32(i) + exp(-1.5)*inf;
];
""",
    """\
in  X: f32[16,10]
out Y: f32[16]
tmp S: f32[16] @l
tmp acc: f32

L^{16}_{i} [
  S_{i} = 1.0;
  L^{8}_{j=2} [
    S_{i} *= X_{i,j};
  ];
];

acc = 0.0;

L^{16}_{i}
  L^{10}_{j} [
    acc = max(acc, X_{i,j});
  ];

L^{16}_{i} [
  Y_{i} = S_{i} + acc;
];
""",
    """\
in  X: f32[64,48]
out Y: f32[64,48]
tmp T: f32[64,48] @s

B^{4}_{bx}
  B^{16}_{ty}
    B^{48}_{tx} [
      T_{bx*16+ty,tx} = X_{bx*16+ty,tx}*2.0;
      Y_{bx*16+ty,tx} = min(T_{bx*16+ty,tx}, 1.0);
    ];
""",
]


@pytest.mark.parametrize("text", FEATURES, ids=["expressions", "inits_and_scalars", "threads"])
def test_raise_of_lower_is_identity_on_features(text):
    parsed = parse(text)
    assert parsed.ok, [d.message for d in parsed.diagnostics]
    raised = _assert_raises_back(parsed.program)
    # These declare every tensor, in the order the raiser does: the raised
    # text is the text itself.
    assert print_program(raised) == text


# ------------------------------------------------- named pairs, law (c)


@pytest.mark.parametrize("name", PAIRS)
def test_raise_pair(name):
    func, expected = PAIRS[name]
    raised = raise_func(func)
    assert print_program(raised) == expected
    _check_raised(raised)


def test_decompose_reduction_init_keeps_its_place():
    raised = raise_func(sched_decompose_reduction())
    assert print_program(raised) == """\
in  X: f32[64,32]
in  W: f32[32,48]
out C: f32[64,48]
tmp C_local: f32[64,48] @l

P^{4}_{i_0}
  L^{48}_{j} [
    L^{16}_{i_1} [
      C_local_{i_0*16+i_1,j} = 0.0;
      L^{32}_{k} [
        C_local_{i_0*16+i_1,j} += X_{i_0*16+i_1,k}*W_{k,j};
      ];
    ];
    L^{16}_{ax0} [
      C_{i_0*16+ax0,j} = C_local_{i_0*16+ax0,j};
    ];
  ];
"""
    info = analyze(raised).equations
    assert [e.kind for e in info] == ["assign", "update", "assign"]


def test_rfactor_raises_to_two_reductions_with_implied_inits():
    raised = raise_func(sched_rfactor())
    assert print_program(raised) == """\
in  X: f32[64,32]
in  W: f32[32,48]
out C: f32[64,48]
tmp C_rf: f32[8,64,48]

L^{64}_{i}
  L^{48}_{j}
    L^{4}_{k_0}
      L^{8}_{k_1} [
        C_rf_{k_1,i,j} += X_{i,k_0*8+k_1}*W_{k_0*8+k_1,j};
      ];

L^{64}_{i}
  L^{48}_{j}
    L^{8}_{k_1} [
      C_{i,j} += C_rf_{k_1,i,j};
    ];
"""
    assert [e.kind for e in analyze(raised).equations] == ["reduce", "reduce"]


def test_imperfect_split_becomes_a_guard():
    text = print_program(raise_func(sched_split()))
    assert "where j_0*10 + j_1 < 48;" in text


def sched_bind_matmul():
    sch = Schedule(matmul)
    i, j, k = _loops(sch, "C")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    return sch.mod["main"]


def sched_bind_softmax():
    sch = Schedule(softmax)
    for block in ("M", "Z", "Y"):
        i = _loops(sch, block)[0]
        outer, inner = sch.split(i, [None, 16])
        sch.bind(outer, "blockIdx.x")
        sch.bind(inner, "threadIdx.x")
    return sch.mod["main"]


def _softmax_reference(X):
    e = np.exp(X - X.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_thread_bound_loops_are_named_after_their_axis():
    raised = raise_func(sched_bind_matmul())
    loops = [n for n in A.walk(raised) if isinstance(n, A.Loop)]
    assert [(l.kind, l.var) for l in loops] == [("B", "bx"), ("B", "tx"), ("L", "k")]
    assert "C_{bx,tx} += X_{bx,k}*W_{k,tx};" in print_program(raised)


# Thread-bound functions do not build for the CPU; compare with NumPy (the
# raised program runs its thread loops serially there, and in the evaluator).
@pytest.mark.slow
@pytest.mark.parametrize("schedule, output, reference", [
    (sched_bind_matmul, "C", lambda inputs: inputs["X"] @ inputs["W"]),
    (sched_bind_softmax, "Y", lambda inputs: _softmax_reference(inputs["X"])),
], ids=["matmul", "softmax"])
def test_thread_bound_raise_computes_the_same(schedule, output, reference):
    func = schedule()
    analysis = _check_raised(raise_func(func))
    inputs = _inputs(func)
    expected = reference(inputs)
    np.testing.assert_allclose(run(analysis, inputs).outputs[output], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(evaluate(analysis, inputs)[output], expected, rtol=1e-4, atol=1e-5)


@T.prim_func(s_tir=True)
def name_clashes(tx: T.Buffer((8, 4), "float32"), i: T.Buffer((8, 4), "float32")):
    for i_ in T.thread_binding(8, thread="threadIdx.x"):
        for j in range(4):
            with T.sblock("copy"):
                vi, vj = T.axis.remap("SS", [i_, j])
                i[vi, vj] = tx[vi, vj]
    for tx_ in range(8):
        for j in range(4):
            for j_ in range(1):
                with T.sblock("again"):
                    vi, vj, vk = T.axis.remap("SSS", [tx_, j, j_])
                    i[vi, vj + vk] = tx[vi, vj] * T.float32(2)


def test_names_are_made_unique_and_valid():
    raised = raise_func(name_clashes)
    text = print_program(raised)
    # The tensor named like the thread axis is renamed, the loop keeps tx;
    # a serial loop named like a thread axis or a tensor is renamed.
    assert [d.name for d in raised.decls] == ["tx_1", "i"]
    assert "B^{8}_{tx}" in text
    loops = [(l.kind, l.var) for l in A.walk(raised) if isinstance(l, A.Loop)]
    assert ("B", "tx") in loops and ("L", "tx") not in loops
    assert "i" not in [var for _, var in loops]
    assert "L^{8}_{tx}" not in text and "_{i}\n" not in text and "_{i} [" not in text
    _check_raised(raised)


def test_raise_of_tvm_printed_script():
    func = sched_tiled_matmul()
    reparsed = tvm.script.from_source(func.script())
    assert raise_func(reparsed) == raise_func(func)


def test_raise_module_raises_every_prim_func():
    mod = tvm.IRModule({"matmul": matmul, "softmax": softmax})
    programs = raise_module(mod)
    assert sorted(programs) == ["matmul", "softmax"]
    assert print_program(programs["softmax"]) == SOFTMAX


# ------------------------------------------------------------- law (b)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PAIRS) + list(SCHEDULED))
def test_lower_of_raise_computes_the_same(name):
    func = PAIRS[name][0] if name in PAIRS else SCHEDULED[name]()
    raised = raise_func(func)
    analysis = _check_raised(raised)
    inputs = _inputs(func)
    expected = _run(func, inputs)
    if name == "mixed_types":
        expected["F"][15] = 0.0  # guarded off; both leave the zero there
    _assert_close(run(analysis, inputs).outputs, expected)


def _te_workloads():
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload as W

    return {
        "conv2d_padded": W.conv2d_nhwc(1, 8, 8, 4, 8, 3, padding=1),
        "conv2d_bn_relu": W.conv2d_nhwc_bn_relu(1, 8, 8, 4, 8, 3, 1, 1),
        "max_pool2d": W.max_pool2d_nchw(1, 4, 8, 8, padding=1),
        "norm": W.norm_bmn(1, 16, 16),
    }, te.create_prim_func


@pytest.mark.slow
@pytest.mark.parametrize("name", ["conv2d_padded", "conv2d_bn_relu", "max_pool2d", "norm"])
def test_te_generated_function_raises_and_computes_the_same(name):
    """TensorIR as TVM generates it from tensor expressions (padding,
    min_value inits, fused epilogues)."""
    workloads, create_prim_func = _te_workloads()
    func = create_prim_func(list(workloads[name]))
    analysis = _check_raised(raise_func(func))
    inputs = {k: np.abs(v) + 0.5 for k, v in _inputs(func).items()}  # norms and variances are positive
    _assert_close(run(analysis, inputs).outputs, _run(func, inputs))


# The NumPy evaluator is LEIR's reference semantics: inits placed, guarded
# or implied must mean there what TVM computed.
@pytest.mark.parametrize("name", ["rowsum_from_one", "rowsum_reduction_outer", "rowsum_recomputed", "rowsum_overwritten",
                                  "decompose_reduction", "rfactor", "softmax_imperfect_reduction",
                                  "softmax_min_value_decompose", "softmax_recomputed", "blockize",
                                  "pad_einsum", "padded_conv", "if_statement", "mixed_types"])
def test_evaluation_of_raise_computes_the_same(name):
    func = PAIRS[name][0] if name in PAIRS else SCHEDULED[name]()
    analysis = _check_raised(raise_func(func))
    inputs = _inputs(func)
    _assert_close(evaluate(analysis, inputs), _run(func, inputs))


# ------------------------------------------------------------- law (d)


@T.prim_func(s_tir=True)
def strided(a: T.handle, C: T.Buffer((16,), "float32")):
    A_ = T.match_buffer(a, (16,), "float32", strides=[2])
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def offset(a: T.handle, C: T.Buffer((16,), "float32")):
    A_ = T.match_buffer(a, (16,), "float32", elem_offset=4)
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def fragment(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    F = T.sblock_alloc_buffer((16,), "float32", scope="local.fragment")
    for i in range(16):
        with T.sblock("f"):
            vi = T.axis.remap("S", [i])
            F[vi] = A_[vi]
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = F[vi]


@T.prim_func(s_tir=True)
def extern_call(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            T.evaluate(T.call_extern("int32", "printf", 1))
            C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def while_loop(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    n = T.sblock_alloc_buffer((1,), "int32")
    with T.sblock("w"):
        n[0] = 0
        while n[0] < 16:
            C[n[0]] = A_[n[0]]
            n[0] = n[0] + 1


@T.prim_func(s_tir=True)
def scalar_param(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32"), s: T.float32):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = A_[vi] * s


@T.prim_func(s_tir=True)
def dynamic_shape(a: T.handle, c: T.handle):
    n = T.int32()
    A_ = T.match_buffer(a, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def sub_buffer(A_: T.Buffer((16, 4), "float32"), C: T.Buffer((16, 4), "float32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            row = T.match_buffer(A_[vi, 0:4], (4,))
            for j in range(4):
                C[vi, j] = row[j]


@T.prim_func(s_tir=True)
def cross_thread_reduction(A_: T.Buffer((16, 32), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        for k in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("c"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    C[vi] = T.float32(0)
                C[vi] = C[vi] + A_[vi, vk]


@T.prim_func(s_tir=True)
def in_place_accumulate(A_: T.Buffer((16, 8), "float32"), C: T.Buffer((16,), "float32")):
    for i, k in T.grid(16, 8):
        with T.sblock("c"):
            vi, vk = T.axis.remap("SR", [i, k])
            C[vi] = C[vi] + A_[vi, vk]


@T.prim_func(s_tir=True)
def virtual_thread(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in T.thread_binding(16, thread="vthread.x"):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def exp2(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = T.exp2(A_[vi])


@T.prim_func(s_tir=True)
def truncmod(A_: T.Buffer((16,), "int32"), C: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = T.truncmod(A_[vi], 3)


@T.prim_func(s_tir=True)
def inexact_comparison(A_: T.Buffer((16,), "int64"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            C[vi] = T.Select(A_[vi] > T.int64(3), T.float32(1), T.float32(0))


@T.prim_func(s_tir=True)
def attr_stmt(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("c"):
            vi = T.axis.remap("S", [i])
            with T.attr(0, "pragma_x", 1):
                C[vi] = A_[vi]


@T.prim_func(s_tir=True)
def aliasing(A_: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    with T.sblock("r"):
        B = T.decl_buffer((4, 4), "float32", data=A_.data)
        for i in range(16):
            C[i] = B[i // 4, i % 4]


def cooperative_fetch():
    """Threads that copy a tile to shared memory together, then compute
    from it: correct only with the barrier a GPU implies between the two."""
    sch = Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    bi, ti = sch.split(i, [None, 8])
    bj, tj = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 8])
    sch.reorder(bi, bj, ti, tj, ko, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    shared = sch.cache_read(block, 0, "shared")
    sch.compute_at(shared, ko)
    fused = sch.fuse(*sch.get_loops(shared)[-2:])
    sch.bind(sch.split(fused, [None, 16])[1], "threadIdx.x")
    return sch.mod["main"]


UNSUPPORTED = {
    "strided": (strided, "buffer A_ has explicit strides"),
    "offset": (offset, "buffer A_ starts at an element offset"),
    "fragment": (fragment, "buffer F is in local.fragment memory"),
    "extern_call": (extern_call, r"T.evaluate\(.*printf.*\) has side effects"),
    "while_loop": (while_loop, "while loops are not expressible"),
    "scalar_param": (scalar_param, "parameter s is a scalar"),
    "dynamic_shape": (dynamic_shape, "dimension 0 of buffer A_ is not a constant"),
    "sub_buffer": (sub_buffer, "block 'c' matches a sub-buffer region"),
    "cross_thread_reduction": (cross_thread_reduction, "cross-thread reduction"),
    "in_place_accumulate": (in_place_accumulate, "reads C before any block writes it"),
    "virtual_thread": (virtual_thread, "bound to vthread.x"),
    "exp2": (exp2, "T.exp2 has no LEIR counterpart"),
    "truncmod": (truncmod, "truncating modulo"),
    "inexact_comparison": (inexact_comparison, "compared in int64"),
    "attr_stmt": (attr_stmt, "T.attr statements"),
    "aliasing": (aliasing, "aliases memory"),
    "cooperative_fetch": (cooperative_fetch, "binds threadIdx.x inside a loop already bound to it"),
}


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_raise_fail(name):
    func, message = UNSUPPORTED[name]
    if not isinstance(func, tvm.tirx.PrimFunc):
        func = func()  # a schedule
    with pytest.raises(RaiseError, match=message) as caught:
        raise_func(func)
    assert isinstance(caught.value, LeirError)  # the CLI prints it as one line
    assert "\n" not in str(caught.value)


def test_raise_fail_not_a_prim_func():
    with pytest.raises(RaiseError, match="expected a PrimFunc"):
        raise_func(tvm.IRModule({"matmul": matmul}))


def test_raise_module_names_the_failing_function():
    with pytest.raises(RaiseError, match="^exp2: T.exp2"):
        raise_module(tvm.IRModule({"exp2": exp2}))

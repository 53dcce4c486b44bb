"""LEIR -> TensorIR: the structure of the lowered PrimFunc (blocks, iteration
variables, inits, loops, buffers). Whether it computes the right numbers is
tests/test_run.py's business."""

from __future__ import annotations

import math

import pytest

tvm = pytest.importorskip("tvm")

from leir.bridge.lower import LoweringError, lower, thread_loops, to_tvmscript  # noqa: E402
from leir.parser import parse  # noqa: E402
from leir.bridge.run import build  # noqa: E402
from leir.semantics import analyze  # noqa: E402
from leir.bridge.targets import cuda_build_target  # noqa: E402


def analysed(text: str):
    result = parse(text)
    analysis = analyze(result.program)
    errors = [d.message for d in result.diagnostics + analysis.diagnostics if d.is_error]
    assert errors == [], errors
    return analysis


def block(func, name: str):
    """The TensorIR block called ``name`` (through a schedule, which also
    checks that the function is schedulable)."""
    sch = tvm.s_tir.Schedule(func)
    return sch.get(sch.get_sblock(name))


def iteration_kinds(func, name: str) -> str:
    kinds = {0: "S", 2: "R"}
    return "".join(kinds[int(iv.iter_type)] for iv in block(func, name).iter_vars)


MATMUL = """
in  X: f32[16,8]
in  W: f32[8,12]
out C: f32[16,12]

L^{16}_{i=0}
  L^{12}_{j=0}
    L^{8}_{k=0} [
      C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j};
    ];
"""

GPU_MATMUL = "B^{64}_{tx=0}L^{32}_{a=0}L^{16}_{k=0}[C^{f32,g}_{tx,a}=C^{f32,g}_{tx,a}+X^{f32,g}_{tx,k}*W^{f32,g}_{k,a};];"


# ------------------------------------------------------------ the function


def test_matmul_is_one_reduction_block():
    func = lower(analysed(MATMUL))
    assert [p.name for p in func.params] == ["X", "W", "C"]
    assert [tuple(int(d) for d in p.shape) for p in func.params] == [(16, 8), (8, 12), (16, 12)]
    assert iteration_kinds(func, "C") == "SSR"
    assert block(func, "C").init is not None
    text = func.script()
    assert 'vi, vj, vk = T.axis.remap("SSR", [i, j, k])' in text
    assert "C[vi, vj] = C[vi, vj] + X[vi, vk] * W[vk, vj]" in text


def test_function_attributes_and_name():
    func = lower(analysed(MATMUL), "matmul")
    assert func.attrs["global_symbol"] == "matmul"
    # TVM 0.27's name (its MetaSchedule sets the same); with the older
    # "tir.noalias" LLVM kept no accumulator in a register (issue 14).
    assert bool(func.attrs["tirx.noalias"])
    assert "tir.noalias" not in func.attrs
    with pytest.raises(LoweringError, match="not an identifier"):
        lower(analysed(MATMUL), "my kernel")


def test_parameters_are_inputs_then_outputs_in_declaration_order():
    text = """
out D: f32[4]
in  B: f32[4]
out C: f32[4]
in  A: f32[4]
L^{4}_{i=0} [ C_{i} = A_{i} + B_{i}; D_{i} = A_{i} - B_{i}; ];
"""
    assert [p.name for p in lower(analysed(text)).params] == ["B", "A", "D", "C"]


def test_step_tp_one_line_form():
    func = lower(analysed(GPU_MATMUL))
    assert [p.name for p in func.params] == ["X", "W", "C"]
    assert 'T.thread_binding(64, thread="threadIdx.x")' in func.script()


def test_blocks_are_named_after_the_written_tensor_and_made_unique():
    text = """
in  A: f32[4,3]
in  B: f32[3,5]
out C: f32[4,5]
L^{4}_{i=0} L^{5}_{j=0} [ C_{i,j} = 0.0; ];
L^{4}_{i=0} L^{5}_{j=0} L^{3}_{k=0} [ C_{i,j} = C_{i,j} + A_{i,k}*B_{k,j}; ];
L^{4}_{i=0} L^{5}_{j=0} [ C_{i,j} = C_{i,j}*2.0; ];
"""
    func = lower(analysed(text))
    for name in ("C", "C_1", "C_2"):
        block(func, name)


def test_update_after_an_explicit_init_has_no_init():
    text = """
in  A: f32[4,3]
in  B: f32[3,5]
out C: f32[4,5]
L^{4}_{i=0} L^{5}_{j=0} [ C_{i,j} = 0.0; ];
L^{4}_{i=0} L^{5}_{j=0} L^{3}_{k=0} [ C_{i,j} = C_{i,j} + A_{i,k}*B_{k,j}; ];
"""
    func = lower(analysed(text))
    assert block(func, "C").init is None
    assert block(func, "C_1").init is None
    assert iteration_kinds(func, "C_1") == "SSR"
    # Without an init the block reads the value it accumulates onto.
    assert "C" in [r.source.name for r in block(func, "C_1").reads]


@pytest.mark.parametrize("dtype, combiner, expected", [
    ("f32", "max(M_{i}, X_{i,j})", -math.inf),
    ("f32", "min(M_{i}, X_{i,j})", math.inf),
    ("f32", "M_{i} + X_{i,j}", 0.0),
    ("f32", "M_{i}*X_{i,j}", 1.0),
    ("f16", "max(X_{i,j}, M_{i})", -math.inf),
    ("i32", "max(M_{i}, X_{i,j})", -(2**31)),
    ("i32", "min(M_{i}, X_{i,j})", 2**31 - 1),
    ("u8", "min(M_{i}, X_{i,j})", 255),
])
def test_reduction_init_is_the_combiners_identity(dtype, combiner, expected):
    text = f"in X: {dtype}[3,5]\nout M: {dtype}[3]\nL^{{3}}_{{i=0}} L^{{5}}_{{j=0}} [ M_{{i}} = {combiner}; ];"
    init = block(lower(analysed(text)), "M").init
    assert str(init.value.ty) == {"f32": "float32", "f16": "float16", "i32": "int32", "u8": "uint8"}[dtype]
    assert init.value.value == expected


def test_spatial_and_reduce_axes_follow_the_written_index():
    text = "in X: f32[4,5,6]\nout S: f32[5]\nL^{4}_{a=0} L^{5}_{b=0} L^{6}_{c=0} [ S_{b} = S_{b} + X_{a,b,c}; ];"
    assert iteration_kinds(lower(analysed(text)), "S") == "RSR"


# ------------------------------------------------------------ loops


def test_loop_kinds():
    text = """
in  X: f32[8,4,16]
out Y: f32[8,4,16]
P^{8}_{i=0} U^{4}_{j=0} V^{16}_{k=0} [ Y_{i,j,k} = X_{i,j,k}; ];
"""
    script = lower(analysed(text)).script()
    assert "for i in T.parallel(8):" in script
    assert "for j in T.unroll(4):" in script
    assert "for k in T.vectorized(16):" in script


def test_thread_loops_bind_their_axis():
    text = "in X: f32[4,32]\nout Y: f32[4,32]\nB^{4}_{bx=0} B^{32}_{tx=0} [ Y_{bx,tx} = X_{bx,tx}*2.0; ];"
    analysis = analysed(text)
    script = lower(analysis).script()
    assert 'for bx in T.thread_binding(4, thread="blockIdx.x"):' in script
    assert 'for tx in T.thread_binding(32, thread="threadIdx.x"):' in script
    assert thread_loops(analysis) == ["bx", "tx"]
    serial = lower(analysis, threads_as_serial=True).script()
    assert "thread_binding" not in serial
    assert "for bx, tx in T.grid(4, 32):" in serial


def test_nonzero_loop_start():
    text = "in X: f32[4]\nout Y: f32[6]\nL^{4}_{i=2} [ Y_{i} = X_{i-2}; ];"
    script = lower(analysed(text)).script()
    assert "for i in range(2, 6):" in script
    assert "Y[vi] = X[vi - 2]" in script


def test_nested_nest_keeps_its_structure():
    text = """
in  X: f32[6,10]
out Y: f32[6,10]
tmp M: f32[6]
L^{6}_{i=0} [
  L^{10}_{j=0} [ M_{i} = max(M_{i}, X_{i,j}); ];
  L^{10}_{j=0} [ Y_{i,j} = X_{i,j} - M_{i}; ];
];
"""
    lines = [line.strip() for line in lower(analysed(text)).script().splitlines()]
    loops = [line for line in lines if line.startswith("for ")]
    assert loops == ["for i in range(6):", "for j in range(10):", "for j in range(10):"]
    assert iteration_kinds(lower(analysed(text)), "M") == "SR"


def test_guard_becomes_the_block_predicate():
    text = "in X: f32[100]\nout Y: f32[100]\nL^{4}_{io=0}L^{32}_{ii=0}[Y_{io*32+ii}=X_{io*32+ii}*2 where io*32+ii<100;];"
    script = lower(analysed(text)).script()
    assert "T.where(io * 32 + ii < 100)" in script
    assert "Y[vio * 32 + vii] = X[vio * 32 + vii] * T.float32(2.0)" in script


# ------------------------------------------------------------ buffers and values


@pytest.mark.parametrize("scope, allocation", [("", "T.sblock_alloc_buffer((8,))"),
                                               (" @s", 'T.sblock_alloc_buffer((8,), scope="shared")'),
                                               (" @l", 'T.sblock_alloc_buffer((8,), scope="local")')])
def test_temporaries_are_allocated_in_their_scope(scope, allocation):
    text = f"in X: f32[8]\nout Y: f32[8]\ntmp S: f32[8]{scope}\nL^{{8}}_{{i=0}} [ S_{{i}} = X_{{i}}; Y_{{i}} = S_{{i}}; ];"
    func = lower(analysed(text))
    assert f"S = {allocation}" in func.script()
    assert [p.name for p in func.params] == ["X", "Y"]


def test_reads_of_another_dtype_are_cast():
    text = """
in  X: f16[8,64]
in  W: f16[64,4]
out C: f32[8,4]
L^{8}_{i=0} L^{4}_{j=0} L^{64}_{k=0} [ C_{i,j} = C_{i,j} + X_{i,k}*W_{k,j}; ];
"""
    script = lower(analysed(text)).script()
    assert 'T.Cast("float32", X[vi, vk]) * T.Cast("float32", W[vk, vj])' in script


def test_casts_functions_and_conditions():
    text = """
in  X: f32[8]
out Y: f16[8]
L^{8}_{i=0} [ Y_{i} = if_then_else(X_{i} > 0.0 & i < 4, f32(exp(X_{i})), -X_{i}) + i % 3; ];
"""
    script = lower(analysed(text)).script()
    assert "T.if_then_else(" in script
    # Inside f32(...) the exponential is computed in f32, then converted to Y's f16.
    assert 'T.Cast("float16", T.exp(X[vi]))' in script
    assert 'T.float16(0.0) - T.Cast("float16", X[vi])' in script
    assert 'T.Cast("float16", vi % 3)' in script
    assert "vi < 4" in script


def test_float_floor_division_and_modulo_are_written_with_floor():
    text = "in X: f32[5]\nout R: f32[5]\nL^{5}_{i=0} [ R_{i} = X_{i}%0.75 + X_{i}//0.5; ];"
    script = lower(analysed(text)).script()
    assert "T.floor(X[vi] / T.float32(0.75))" in script
    assert "T.floor(X[vi] / T.float32(0.5))" in script


def test_integer_division_truncates():
    text = "in X: i32[5]\nout Q: i32[5]\nL^{5}_{i=0} [ Q_{i} = X_{i}/3 + X_{i}//2; ];"
    script = lower(analysed(text)).script()
    assert "T.Div(X[vi], 3)" in script
    assert "X[vi] // 2" in script


def test_scalar_tensors():
    text = "in X: f32[4]\nout s: f32\nL^{4}_{i=0} [ s = s + X_{i}; ];"
    func = lower(analysed(text))
    assert tuple(func.params[1].shape) == ()
    assert iteration_kinds(func, "s") == "R"


# ------------------------------------------------------------ TVMScript


def test_tvmscript_parses_back_to_the_same_function():
    analysis = analysed(MATMUL)
    text = to_tvmscript(analysis)
    assert text.startswith("# from tvm.script import tirx as T")
    tvm.ir.assert_structural_equal(tvm.script.from_source(text), lower(analysis))


# ------------------------------------------------------------ errors


def test_a_program_with_errors_is_refused():
    analysis = analyze(parse("in X: f32[4]\nout Y: f32[4]\nL^{4}_{i=0} [ Y_{i} = X_{i+1}; ];").program)
    with pytest.raises(LoweringError, match="^the program has errors: index 0 of X"):
        lower(analysis)


def test_a_float_function_in_an_integer_equation_is_refused():
    text = "in X: i32[3]\nout Y: i32[3]\nL^{3}_{i=0} [ Y_{i} = exp(X_{i}); ];"
    analysis = analyze(parse(text).program)
    # The checker reports it (at the call), so lowering never sees it...
    [d] = [d for d in analysis.diagnostics if d.is_error]
    assert d.code == "type-rule" and d.message.startswith("exp computes in floating point")
    assert text[d.span.start:d.span.end] == "exp(X_{i})"
    with pytest.raises(LoweringError):
        lower(analysis)


def test_a_non_integer_index_is_refused():
    text = "in X: f32[8]\nout Y: f32[4]\nL^{4}_{i=0} [ Y_{i} = X_{i/2}; ];"
    with pytest.raises(LoweringError, match=r"index i/2 of X is not an integer expression"):
        lower(analysed(text))


# ------------------------------------------------------------ CUDA


def test_gpu_matmul_builds_for_cuda():
    executable = build(lower(analysed(GPU_MATMUL)), cuda_build_target("sm_90"))
    source = executable.mod.imports[0].inspect_source()
    assert "threadIdx.x" in source
    assert "__global__" in source


def test_gpu_softmax_with_minus_infinity_init_builds_for_cuda():
    text = """
in  X: f32[128,100]
out M: f32[128]
B^{4}_{bx=0} B^{32}_{tx=0} L^{100}_{j=0} [ M_{bx*32+tx} = max(M_{bx*32+tx}, X_{bx*32+tx,j}); ];
"""
    source = build(lower(analysed(text)), cuda_build_target("sm_90")).mod.imports[0].inspect_source()
    assert "-CUDART_INF_F" in source
    assert "blockIdx.x" in source and "threadIdx.x" in source

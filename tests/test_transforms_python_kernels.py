"""The transformation catalogue on TVMScript kernels in Python files: steps
named as the kernel names its blocks, ranges in the Python file, TVM's own
output for schedule steps, raise -> rewrite -> lower for the others, and the
rest of the file unchanged byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leir.transforms import Step
from leir.transforms.base import StaleStep
from leir.transforms.python_kernels import (
    KernelError,
    NameNotTranslatable,
    load_kernel,
    tvmscript_apply,
    tvmscript_candidates,
    tvmscript_replay,
    tvmscript_verify,
)

#: A file as people write them: imports, a constant, helpers, several
#: kernels, a main guard. The matmul's block is "update", not "C".
KERNELS = '''\
"""Kernels for the experiment."""
import numpy as np
from tvm.script import tirx as T

N = 128


def reference(a, b):
    return a @ b


@T.prim_func(s_tir=True)
def matmul(A: T.Buffer((N, N), "float32"), B: T.Buffer((N, N), "float32"), C: T.Buffer((N, N), "float32")):
    for i, j, k in T.grid(N, N, N):
        with T.sblock("update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


@T.prim_func(s_tir=True)
def mix(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), C: T.Buffer((N,), "float32"), Y: T.Buffer((N,), "float32")):
    for i in range(N):
        with T.sblock("combine"):
            vi = T.axis.spatial(N, i)
            Y[vi] = A[vi] * B[vi] + A[vi] * C[vi]


@T.prim_func(s_tir=True)
def scale_add(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32"), Y: T.Buffer((N,), "float32")):
    D = T.sblock_alloc_buffer((N,))
    for i in range(N):
        with T.sblock("double"):
            vi = T.axis.spatial(N, i)
            D[vi] = A[vi] * T.float32(2)
    for i in range(N):
        with T.sblock("add"):
            vi = T.axis.spatial(N, i)
            Y[vi] = D[vi] + B[vi]


@T.prim_func(s_tir=True)
def offset_sum(A: T.Buffer((N, N), "float32"), S: T.Buffer((N,), "float32")):
    for i, k in T.grid(N, N):
        with T.sblock("acc"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                S[vi] = T.float32(1)
            S[vi] = S[vi] + A[vi, vk]


if __name__ == "__main__":
    print(reference(np.ones((2, 2)), np.ones((2, 2))))
'''

MODULE = '''\
from tvm.script import ir as I
from tvm.script import tirx as T


@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def rowsum(A: T.Buffer((64, 48), "float32"), S: T.Buffer((64,), "float32")):
        for i, k in T.grid(64, 48):
            with T.sblock("total"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk]
'''

SPLIT_K = Step("split", {"block": "update", "loop": "k", "factors": [4, 32]})


def covered(text: str, candidate) -> str:
    return text[candidate.span.start : candidate.span.end]


def kernel_range(text: str, name: str) -> tuple[int, int]:
    span = load_kernel(text, name).source.span
    return span.start, span.end


def assert_only_kernel_changed(before: str, after: str, name: str) -> None:
    start, end = kernel_range(before, name)
    assert after[:start] == before[:start]
    assert after.endswith(before[end:])
    assert after != before


# ---------------------------------------------------------------- actions


def test_actions_name_the_kernels_blocks_and_loops():
    found = tvmscript_candidates(KERNELS, "matmul")
    ids = {c.step.id for c in found}
    assert {"split", "tile", "reorder", "fuse", "parallelize", "rfactor", "cache_read"} <= ids
    assert all(c.step.args.get("block") in (None, "update") for c in found)
    steps = [c.step for c in found]
    assert SPLIT_K in steps
    assert Step("reorder", {"block": "update", "loops": ["j", "k"]}) in steps
    # Titles say the user's block name too.
    assert any(c.title == "Cache A in local memory for block update" for c in found)


def test_action_ranges_are_in_the_python_file():
    found = {c.step: c for c in tvmscript_candidates(KERNELS, "matmul")}
    assert covered(KERNELS, found[SPLIT_K]) == "for i, j, k in T.grid(N, N, N)"
    cache_a = found[Step("cache_read", {"block": "update", "tensor": "A", "scope": "l"})]
    assert covered(KERNELS, cache_a) == "A[vi, vk]"
    split_expr = next(c for c in found.values() if c.step.id == "expression_splitting")
    assert covered(KERNELS, split_expr) == "C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]"
    scoped = [c for c in tvmscript_candidates(KERNELS, "scale_add") if c.step.id == "set_scope"]
    assert scoped and covered(KERNELS, scoped[0]) == "D = T.sblock_alloc_buffer((N,))"


def test_actions_at_a_loop_variable_of_a_grid_are_that_loops():
    at = KERNELS.index("k in T.grid(N, N, N)")
    found = tvmscript_candidates(KERNELS, None, at)  # the position chooses the kernel
    assert found
    splits = [c for c in found if c.step.id == "split"]
    assert splits and all(c.step.args["loop"] == "k" for c in splits)


def test_actions_at_a_store_are_the_equations_and_its_loops():
    at = KERNELS.index("A[vi] * B[vi] + A[vi] * C[vi]")
    ids = {c.step.id for c in tvmscript_candidates(KERNELS, "mix", at)}
    assert {"factorization", "expression_splitting", "parallelize"} <= ids


def test_a_block_with_several_equations_is_not_offered():
    # The init 1.0 is not the identity of +, so LEIR writes it as an
    # equation of its own: "acc" is two equations, and no step names it.
    found = tvmscript_candidates(KERNELS, "offset_sum")
    assert not any(c.step.args.get("block") == "acc" for c in found)
    with pytest.raises(NameNotTranslatable, match="acc"):
        tvmscript_apply(KERNELS, Step("split", {"block": "acc", "loop": "k", "factors": [4, 32]}), "offset_sum")


def test_every_candidate_has_json_args_and_a_range_in_its_kernel():
    for name in ("matmul", "mix", "scale_add"):
        start, end = kernel_range(KERNELS, name)
        for c in tvmscript_candidates(KERNELS, name):
            json.dumps(c.step.args)
            assert c.span is not None and start <= c.span.start <= c.span.end <= end, (name, c.step)


# ------------------------------------------------------------------ apply


def test_apply_split_prints_tvms_own_output_and_keeps_the_rest_of_the_file():
    after = tvmscript_apply(KERNELS, SPLIT_K, "matmul")
    assert_only_kernel_changed(KERNELS, after, "matmul")
    kernel = after[slice(*kernel_range(after, "matmul"))]
    assert "for i, j, k_0, k_1 in T.grid(128, 128, 4, 32):" in kernel
    assert "vk = T.axis.reduce(128, k_0 * 32 + k_1)" in kernel
    assert 'with T.sblock("update"):' in kernel
    # The other kernels are still there, as written.
    assert after.count("@T.prim_func") == 4
    assert KERNELS[slice(*kernel_range(KERNELS, "mix"))] in after


def test_apply_then_candidates_read_the_new_file():
    after = tvmscript_apply(KERNELS, SPLIT_K, "matmul")
    loops = {c.step.args.get("loop") for c in tvmscript_candidates(after, "matmul")}
    assert {"k_0", "k_1"} <= loops and "k" not in loops


def test_stale_step_is_refused():
    after = tvmscript_apply(KERNELS, SPLIT_K, "matmul")
    with pytest.raises(StaleStep, match="no loop k"):
        tvmscript_apply(after, SPLIT_K, "matmul")
    with pytest.raises(StaleStep, match="no block C in kernel matmul"):
        tvmscript_apply(KERNELS, Step("split", {"block": "C", "loop": "k", "factors": [4, 32]}), "matmul")


def test_algebraic_step_is_raised_rewritten_and_lowered():
    step = Step("factorization", {"block": "combine"})
    assert step in [c.step for c in tvmscript_candidates(KERNELS, "mix")]
    after = tvmscript_apply(KERNELS, step, "mix")
    assert_only_kernel_changed(KERNELS, after, "mix")
    kernel = after[slice(*kernel_range(after, "mix"))]
    assert "Y[vi] = A[vi] * (B[vi] + C[vi])" in kernel
    assert 'T.sblock("combine")' in kernel  # the block keeps the user's name


def test_operator_step_keeps_the_names_of_unchanged_blocks():
    step = Step("operator_fusion", {"block": "double", "loop": "i"})
    assert step in [c.step for c in tvmscript_candidates(KERNELS, "scale_add")]
    after = tvmscript_apply(KERNELS, step, "scale_add")
    kernel = after[slice(*kernel_range(after, "scale_add"))]
    assert kernel.count("for i in range(128):") == 1
    assert 'T.sblock("double")' in kernel and 'T.sblock("add")' in kernel


def test_replay_applies_steps_in_order():
    swap = Step("reorder", {"block": "update", "loops": ["k_0", "k_1"]})
    after = tvmscript_replay(KERNELS, [SPLIT_K, swap], "matmul")
    assert after == tvmscript_apply(tvmscript_apply(KERNELS, SPLIT_K, "matmul"), swap, "matmul")
    assert "for i, j, k_1, k_0 in T.grid(128, 128, 32, 4):" in after
    with pytest.raises(StaleStep, match="step 2 \\(split\\)"):
        tvmscript_replay(KERNELS, [SPLIT_K, SPLIT_K], "matmul")


def test_a_function_of_an_ir_module_is_transformed_in_its_module():
    step = Step("split", {"block": "total", "loop": "k", "factors": [3, 16]})
    assert step in [c.step for c in tvmscript_candidates(MODULE)]
    after = tvmscript_apply(MODULE, step, "rowsum")
    assert after.startswith("from tvm.script import ir as I\nfrom tvm.script import tirx as T\n\n\n@I.ir_module\nclass Module:")
    assert "for i, k_0, k_1 in T.grid(64, 3, 16):" in after
    assert load_kernel(after, "rowsum").name == "rowsum"


# ----------------------------------------------------------- kernel choice


def test_several_kernels_need_a_name():
    with pytest.raises(KernelError, match="several kernels \\(matmul, mix, scale_add, offset_sum\\); choose one with --kernel"):
        tvmscript_candidates(KERNELS)
    with pytest.raises(KernelError, match="no kernel named gemm \\(found matmul, mix, scale_add, offset_sum\\)"):
        tvmscript_candidates(KERNELS, "gemm")
    with pytest.raises(KernelError, match="no @T.prim_func kernel"):
        tvmscript_candidates("x = 1\n")


# ------------------------------------------------------------ verification


@pytest.mark.slow
def test_verify_schedule_and_rewrite_steps():
    split = tvmscript_apply(KERNELS, SPLIT_K, "matmul")
    result = tvmscript_verify(KERNELS, split, "matmul")
    assert result.ok, result.summary()
    assert set(result.comparisons[0]) == {"C"}
    factored = tvmscript_apply(KERNELS, Step("factorization", {"block": "combine"}), "mix")
    assert tvmscript_verify(KERNELS, factored, "mix").ok


@pytest.mark.slow
def test_verify_catches_a_wrong_kernel():
    wrong = KERNELS.replace("A[vi] * B[vi] + A[vi] * C[vi]", "A[vi] * B[vi] - A[vi] * C[vi]")
    result = tvmscript_verify(KERNELS, wrong, "mix")
    assert not result.ok
    assert "MISMATCH" in result.summary()


# -------------------------------------------------------------------- CLI


def leir(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leir.tools.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_cli_kernel_choice_errors(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    line = one_line_error(leir("actions", str(path)))
    assert line == f"leir: {path}: several kernels (matmul, mix, scale_add, offset_sum); choose one with --kernel"
    line = one_line_error(leir("apply", str(path), "--kernel", "gemm", "--step", json.dumps(SPLIT_K.to_json())))
    assert "no kernel named gemm (found matmul, mix, scale_add, offset_sum)" in line


@pytest.mark.slow
def test_cli_actions_apply_verify_and_stale_step(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    listed = leir("actions", str(path), "--kernel", "matmul", "--json")
    assert listed.returncode == 0, listed.stderr
    actions = json.loads(listed.stdout)
    split = next(a for a in actions if a["id"] == "split" and a["args"] == SPLIT_K.args)
    line = KERNELS[: KERNELS.index("for i, j, k in")].count("\n") + 1
    assert split["range"] == {"start": {"line": line, "column": 5}, "end": {"line": line, "column": 35}}

    applied = leir("apply", str(path), "--kernel", "matmul", "--step", json.dumps(split), "--verify")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == tvmscript_apply(KERNELS, SPLIT_K, "matmul")
    assert applied.stderr.startswith("verify: ok: C: ok")

    assert leir("apply", str(path), "--kernel", "matmul", "--step", json.dumps(split), "--write").returncode == 0
    assert path.read_text() == applied.stdout
    line = one_line_error(leir("apply", str(path), "--kernel", "matmul", "--step", json.dumps(split)))
    assert "stale step" in line

    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([{"id": "factorization", "args": {"block": "combine"}}]))
    replayed = leir("replay", str(path), str(trace), "--kernel", "mix")
    assert replayed.returncode == 0, replayed.stderr
    assert "Y[vi] = A[vi] * (B[vi] + C[vi])" in replayed.stdout
    assert "k_0 * 32 + k_1" in replayed.stdout  # the earlier --write is kept


def test_cli_kernel_option_on_a_leir_file_is_an_error(tmp_path):
    path = tmp_path / "mm.leir"
    path.write_text("L^{4}_{i} [ Y_{i} = X_{i}*2.0; ];\n")
    assert "--kernel chooses a kernel of a Python file" in one_line_error(leir("actions", str(path), "--kernel", "mm"))


GPU = '''\
from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def rowsum_gpu(A: T.Buffer((64, 96), "float32"), S: T.Buffer((64,), "float32")):
    for i_0 in T.thread_binding(4, thread="blockIdx.x"):
        for i_1 in T.thread_binding(16, thread="threadIdx.x"):
            for k in range(96):
                with T.sblock("total"):
                    vi = T.axis.spatial(64, i_0 * 16 + i_1)
                    vk = T.axis.reduce(96, k)
                    with T.init():
                        S[vi] = T.float32(0)
                    S[vi] = S[vi] + A[vi, vk]
'''


def test_thread_bound_loops_keep_the_kernels_names():
    # LEIR calls the loops bx and tx; steps say i_0 and i_1, or are not
    # offered when TVM would have to find the loop by its LEIR name.
    found = tvmscript_candidates(GPU)
    assert Step("split", {"block": "total", "loop": "k", "factors": [3, 32]}) in [c.step for c in found]
    loops = {c.step.args.get("loop") for c in found} | {v for c in found for v in c.step.args.get("loops", [])}
    assert not loops & {"bx", "tx"}
    split = tvmscript_apply(GPU, Step("split", {"block": "total", "loop": "k", "factors": [3, 32]}))
    assert 'for i_0 in T.thread_binding(4, thread="blockIdx.x"):' in split
    assert "for k_0, k_1 in T.grid(3, 32):" in split


@pytest.mark.slow
def test_thread_bound_kernel_is_verified_with_threads_run_serially():
    split = tvmscript_apply(GPU, Step("split", {"block": "total", "loop": "k", "factors": [3, 32]}))
    result = tvmscript_verify(GPU, split, "rowsum_gpu")
    assert result.ok, result.summary()
    assert "thread-bound loops were run as serial loops on the CPU" in result.notes

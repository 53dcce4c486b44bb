"""The ``leir`` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

MATMUL = """\
in  X: f32[16,8]
in  W: f32[8,4]
out C: f32[16,4]

L^{16}_{i}
  L^{4}_{j}
    L^{8}_{k} [
      C_{i,j} += X_{i,k}*W_{k,j};
    ];
"""


def leir(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leir.tools.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# ------------------------------------------------------------------- check


def test_check_clean_file_exits_0_and_prints_nothing(tmp_path):
    result = leir("check", str(write(tmp_path, "mm.leir", MATMUL)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_check_reports_every_error_as_path_line_col(tmp_path):
    bad = MATMUL.replace("L^{4}_{j}", "Q^{4}_{j}").replace("X_{i,k}", "X_{i,q}")
    path = write(tmp_path, "bad.leir", bad)
    result = leir("check", str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert f"{path}:6:3: error: unknown loop kind 'Q'" in lines[0]
    assert any(line.startswith(f"{path}:8:") and "unknown loop variable q" in line for line in lines)


def test_check_several_files_exit_status_is_worst(tmp_path):
    good = write(tmp_path, "good.leir", MATMUL)
    bad = write(tmp_path, "bad.leir", MATMUL.replace("C_{i,j} += X", "C_{i,j} = C_{i,j}*2 + X"))
    result = leir("check", str(good), str(bad))
    assert result.returncode == 1
    assert all(line.startswith(str(bad)) for line in result.stdout.splitlines())
    assert "cannot be implied" in result.stdout


def test_check_warns_of_a_program_over_the_memory_budget_without_failing(tmp_path):
    big = write(tmp_path, "big.leir", "L^{20000}_{i}\n  L^{20000}_{j} [\n    B_{i,j} = A_{i,j}*2.0;\n  ];\n")
    result = leir("check", str(big))
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith(f"{big}:3:5: warning: the tensors of this program take 3.2 GB")
    assert line.endswith("[memory-budget]") and "LEIR_MEMORY_BUDGET_MB" in line
    assert leir("check", str(write(tmp_path, "small.leir", "L^{4}_{i} [\n  B_{i} = A_{i}*2.0;\n];\n"))).stdout == ""


def test_check_missing_file_is_one_line_error(tmp_path):
    result = leir("check", str(tmp_path / "nope.leir"))
    assert_one_line_error(result, "nope.leir", "no such file")


def test_check_binary_file_is_one_line_error(tmp_path):
    path = write(tmp_path, "bin.leir", b"\x00\xff\xfe garbage")
    assert_one_line_error(leir("check", str(path)), "not UTF-8")


def test_check_all_examples_clean():
    files = sorted(str(p) for p in EXAMPLES.glob("*.leir"))
    result = leir("check", *files)
    assert result.returncode == 0, result.stdout
    assert result.stdout == ""


def test_unknown_subcommand_and_bad_option_are_one_line_errors():
    assert_one_line_error(leir("frobnicate"), "invalid choice")
    assert_one_line_error(leir("fmt"), "required")


# --------------------------------------------------------------------- fmt


STEP_TP_SOFTMAX = (
    "L^{8}_{i=0}L^{5}_{j=0}[M^{f32,g}_{i}=max(M^{f32,g}_{i},X^{f32,g}_{i,j});];"
    "L^{8}_{i=0}L^{5}_{j=0}[S^{f32,g}_{i}=S^{f32,g}_{i}+exp(X^{f32,g}_{i,j}-M^{f32,g}_{i});];"
    "L^{8}_{i=0}L^{5}_{j=0}[Y^{f32,g}_{i,j}=exp(X^{f32,g}_{i,j}-M^{f32,g}_{i})/S^{f32,g}_{i};];"
)


def test_fmt_moves_superscripts_into_declarations_only_where_needed(tmp_path):
    text = STEP_TP_SOFTMAX.replace("X^{f32,g}", "X^{f16,g}")
    path = write(tmp_path, "sm.leir", text)
    result = leir("fmt", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # X is f16, so it is declared; M, S and Y are f32 and fully inferred.
    assert lines[:3] == ["in  X: f16[8,5]", "", "L^{8}_{i}"]
    assert "M_{i} = max(M_{i}, X_{i,j});" in result.stdout
    assert "S_{i} += exp(X_{i,j} - M_{i});" in result.stdout
    # No access keeps a superscript: every ``^{...}`` left is a loop extent.
    superscripts = re.findall(r"\^\{([^}]*)\}", result.stdout)
    assert superscripts and all(s.isdigit() for s in superscripts), superscripts
    assert result.stdout == """\
in  X: f16[8,5]

L^{8}_{i}
  L^{5}_{j} [
    M_{i} = max(M_{i}, X_{i,j});
  ];

L^{8}_{i}
  L^{5}_{j} [
    S_{i} += exp(X_{i,j} - M_{i});
  ];

L^{8}_{i}
  L^{5}_{j} [
    Y_{i,j} = exp(X_{i,j} - M_{i})/S_{i};
  ];
"""


def test_fmt_keeps_the_declarations_a_user_wrote(tmp_path):
    path = write(tmp_path, "mm.leir", MATMUL)
    result = leir("fmt", str(path))
    assert result.stdout.splitlines()[:3] == MATMUL.splitlines()[:3]


def test_fmt_compact_gives_back_the_step_tp_string(tmp_path):
    path = write(tmp_path, "sm.leir", STEP_TP_SOFTMAX)
    result = leir("fmt", "--compact", str(path))
    assert result.stdout.strip() == STEP_TP_SOFTMAX


def test_fmt_is_idempotent_and_write_rewrites_in_place(tmp_path):
    path = write(tmp_path, "sm.leir", STEP_TP_SOFTMAX)
    assert leir("fmt", "--write", str(path)).returncode == 0
    once = path.read_text()
    assert leir("fmt", "--write", str(path)).returncode == 0
    assert path.read_text() == once
    assert leir("fmt", str(path)).stdout == once
    assert not [p for p in tmp_path.iterdir() if p.name != "sm.leir"], "no temporary file left behind"


def test_fmt_refuses_a_file_with_syntax_errors_and_keeps_it(tmp_path):
    text = MATMUL.replace("];", "]")
    path = write(tmp_path, "broken.leir", text)
    result = leir("fmt", "--write", str(path))
    assert_one_line_error(result, "broken.leir:", "not formatted")
    assert path.read_text() == text


# ------------------------------------------------------- convert and run


@pytest.mark.slow
def test_convert_to_tvmscript_and_back(tmp_path):
    path = write(tmp_path, "mm.leir", MATMUL)
    script = leir("convert", str(path), "--to", "tvmscript")
    assert script.returncode == 0, script.stderr
    assert "T.sblock" in script.stdout and "def mm(" in script.stdout
    py = write(tmp_path, "mm.py", "from tvm.script import tirx as T\n\n" + script.stdout)
    back = leir("convert", str(py), "--to", "leir")
    assert back.returncode == 0, back.stderr
    assert "C_{i,j} += X_{i,k}*W_{k,j};" in back.stdout


@pytest.mark.slow
def test_run_writes_every_output_and_matches_numpy(tmp_path):
    path = write(tmp_path, "mm.leir", MATMUL)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype("float32")
    w = rng.standard_normal((8, 4)).astype("float32")
    np.savez(tmp_path / "in.npz", X=x, W=w)
    result = leir("run", str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"))
    assert result.returncode == 0, result.stderr
    assert "matches the numpy reference" in result.stderr
    with np.load(tmp_path / "out.npz") as out:
        assert set(out.files) == {"C"}
        np.testing.assert_allclose(out["C"], x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_run_names_a_missing_or_misshaped_input(tmp_path):
    path = write(tmp_path, "mm.leir", MATMUL)
    np.savez(tmp_path / "missing.npz", X=np.zeros((16, 8), "float32"))
    assert_one_line_error(leir("run", str(path), "--inputs", str(tmp_path / "missing.npz")), "W")
    np.savez(tmp_path / "shape.npz", X=np.zeros((16, 9), "float32"), W=np.zeros((8, 4), "float32"))
    assert_one_line_error(leir("run", str(path), "--inputs", str(tmp_path / "shape.npz")), "X", "(16, 8)")


@pytest.mark.slow
def test_run_gpu_style_program_on_cpu_says_threads_ran_serially(tmp_path):
    result = leir("run", str(EXAMPLES / "softmax_gpu.leir"), "--random-inputs", "1")
    assert result.returncode == 0, result.stderr
    assert "serial" in result.stderr
    assert "Y: matches the numpy reference" in result.stderr


def test_run_without_inputs_is_a_usage_error(tmp_path):
    path = write(tmp_path, "mm.leir", MATMUL)
    assert_one_line_error(leir("run", str(path)), "--inputs")

"""A real editor as the client: Neovim 0.7 (Debian's), headless, starts
leir-lsp over stdio, opens a copy of an example, waits for its diagnostics,
hovers a loop, lists the code actions there, resolves the first and applies
its edit, and writes the file (tests/nvim/lsp_roundtrip.lua). The saved file
must equal what ``leir apply`` makes of the same step.

CI installs Neovim (.ci/run); there a missing ``nvim`` is a failure. On a
machine without it (and not in CI) the test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from programs import SCALE_TVMSCRIPT

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "nvim" / "lsp_roundtrip.lua"
LEIR = Path(sysconfig.get_path("scripts")) / "leir"


@pytest.fixture
def nvim() -> str:
    found = shutil.which("nvim")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("nvim is not installed, and CI must install it (.ci/run: DEBIAN_PACKAGES)")
        pytest.skip("nvim is not installed (apt-get install neovim)")
    return found


def position_of(text: str, needle: str) -> tuple[int, int]:
    """0-based (line, character) of the first ``needle`` (ASCII text)."""
    offset = text.index(needle)
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def run_neovim(nvim: str, file: Path, line: int, character: int, out: Path, filetype: str = "leir") -> dict:
    env = {
        **os.environ,
        "LEIR_FILETYPE": filetype,
        "LEIR_LSP_CMD": json.dumps([sys.executable, "-m", "leir_server"]),
        "LEIR_FILE": str(file),
        "LEIR_LINE": str(line),
        "LEIR_CHARACTER": str(character),
        "LEIR_OUT": str(out),
        "LEIR_TIMEOUT_MS": "120000",
        # Neovim keeps its state (LSP log, shada) under these: keep them out of $HOME.
        "XDG_STATE_HOME": str(out.parent / "state"),
        "XDG_DATA_HOME": str(out.parent / "data"),
        "XDG_CACHE_HOME": str(out.parent / "cache"),
    }
    proc = subprocess.run(
        [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {SCRIPT}"],
        env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert out.exists(), f"Neovim wrote no record (exit {proc.returncode}): {proc.stdout}\n{proc.stderr}"
    record = json.loads(out.read_text())
    assert record.get("ok") and proc.returncode == 0, (
        f"Neovim's session failed (exit {proc.returncode}): {record.get('error')}\nlog: {record.get('log')}")
    return record


def hover_text(hover: dict) -> str:
    contents = hover["contents"]
    if isinstance(contents, dict):
        return contents["value"]
    if isinstance(contents, list):
        return "\n".join(c if isinstance(c, str) else c["value"] for c in contents)
    return contents


def test_neovim_hovers_and_applies_a_code_action(nvim, tmp_path, examples_dir):
    original = (examples_dir / "matmul.leir").read_text()
    (tmp_path / "editor").mkdir()
    (tmp_path / "cli").mkdir()
    edited = tmp_path / "editor" / "matmul.leir"
    pristine = tmp_path / "cli" / "matmul.leir"  # same name: `leir apply` names the kernel after the file
    edited.write_text(original)
    pristine.write_text(original)
    line, character = position_of(original, "L^{256}_{k}")

    record = run_neovim(nvim, edited, line, character, tmp_path / "record.json")

    assert record["diagnostics"] == []  # the example checks clean
    hover = hover_text(record["hover"])
    assert "`k`" in hover or " k " in hover, hover
    assert "256" in hover, hover
    assert "reduction" in hover.lower(), hover

    actions = record["actions"]
    assert all(a["kind"] == "refactor.rewrite" for a in actions)
    assert all("edit" not in a for a in actions)  # computed lazily, in codeAction/resolve
    first, resolved = actions[0], record["resolved"]
    assert resolved["title"] == first["title"]
    step = first["data"]["step"]
    assert step["id"] and isinstance(step["args"], dict)

    expected = subprocess.run(
        [str(LEIR), "apply", str(pristine), "--step", json.dumps(step)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert edited.read_text() == expected
    assert expected != original


TVMSCRIPT = '"""A kernel in a Python file, among other code."""\n' + SCALE_TVMSCRIPT + """

def unrelated():
    return 42
"""


def test_neovim_applies_a_code_action_to_a_tvmscript_kernel(nvim, tmp_path):
    (tmp_path / "editor").mkdir()
    (tmp_path / "cli").mkdir()
    edited, pristine = tmp_path / "editor" / "kernels.py", tmp_path / "cli" / "kernels.py"
    edited.write_text(TVMSCRIPT)
    pristine.write_text(TVMSCRIPT)
    line, character = position_of(TVMSCRIPT, "for i, j in T.grid")

    record = run_neovim(nvim, edited, line, character + len("for "), tmp_path / "record.json", filetype="python")

    assert record["diagnostics"] == []
    hover = hover_text(record["hover"])  # on loop i of the kernel: 64 iterations
    assert "`i`" in hover and "64" in hover, hover
    first = record["actions"][0]
    assert first["kind"] == "refactor.rewrite" and "edit" not in first
    assert first["data"]["kernel"] == "scale"
    expected = subprocess.run(
        [str(LEIR), "apply", str(pristine), "--kernel", "scale", "--step", json.dumps(first["data"]["step"])],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert edited.read_text() == expected
    assert expected != TVMSCRIPT
    assert expected.endswith("def unrelated():\n    return 42\n")  # the rest of the file is untouched

"""The real ``leir-lsp`` process: it starts, answers ``initialize``, and
reports bad command lines in one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

LEIR_LSP = Path(sysconfig.get_path("scripts")) / "leir-lsp"
VERSION = version("leir-lsp")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "leir_server"]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_initialize_names_the_server(client: LanguageClient):
    result = await client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities())
    )

    assert result.server_info is not None
    assert result.server_info.name == "leir-lsp"
    assert result.server_info.version == VERSION


async def test_initialized_logs_name_and_version(client: LanguageClient):
    await client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))

    if not client.log_messages:
        await client.wait_for_notification(types.WINDOW_LOG_MESSAGE)

    assert f"leir-lsp {VERSION} ready" in [m.message for m in client.log_messages]


def test_starting_the_server_imports_neither_tvm_nor_numpy():
    probe = (
        "import sys\n"
        "from leir_server.server import build_server\n"
        "build_server()\n"
        "print(sorted(m for m in ('tvm', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_flag_prints_the_version():
    out = subprocess.run([str(LEIR_LSP), "--version"], capture_output=True, text=True, timeout=30)

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"leir-lsp {VERSION}"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tcp", "127.0.0.1:0"], "port must be between 1 and 65535, got 0"),
        (["--tcp", "127.0.0.1:99999"], "port must be between 1 and 65535, got 99999"),
        (["--tcp", "127.0.0.1"], "expected HOST:PORT, got '127.0.0.1'"),
        (["--tcp", ":2087"], "expected HOST:PORT, got ':2087'"),
        (["--tcp", "localhost:lsp"], "port must be a number, got 'lsp'"),
        (["--stdio", "--tcp", "127.0.0.1:2087"], "not allowed with argument --stdio"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_arguments_fail_in_one_line(args, message):
    out = subprocess.run([str(LEIR_LSP), *args], capture_output=True, text=True, timeout=30)

    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("leir-lsp: error: ")
    assert message in out.stderr


def test_unusable_log_file_fails_in_one_line(tmp_path):
    missing = tmp_path / "no-such-dir" / "server.log"

    out = subprocess.run(
        [str(LEIR_LSP), "--log-file", str(missing)],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )

    assert out.returncode == 1
    assert out.stderr == f"leir-lsp: error: cannot open log file {missing}: No such file or directory\n"


def test_busy_tcp_port_fails_in_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        out = subprocess.run(
            [str(LEIR_LSP), "--tcp", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30
        )

    assert out.returncode == 1
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"leir-lsp: error: cannot listen on 127.0.0.1:{port}: ")

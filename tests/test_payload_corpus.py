"""No payload of the corpus (tests/payloads.py) runs, through any way leir
reads a file: the library and the command line (check, convert, actions,
apply), the language server in a trusted and an untrusted workspace, and
watch mode. A positive control first shows that the payloads are real:
TVM's own parser, given the same kernels unscreened, runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types

import payloads
from lsp_fixtures import CAPABILITIES, LEIR_SETTINGS, LeirClient
from leir.tools import cli

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
#: A step for ``leir apply``: the file never gets as far as using it.
STEP = json.dumps({"id": "split", "args": {"block": "B", "loop": "i", "factors": [2, 2]}})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[payloads.Payload]:
    return payloads.files(tmp_path_factory.mktemp("payloads"))


def test_the_corpus_runs_under_tvms_own_parser(tmp_path):
    """The positive control: without leir's screen, TVM runs (or hangs on)
    exactly the payloads the corpus says."""
    done = subprocess.run([sys.executable, str(TESTS / "payloads.py"), "control", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=TESTS)
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert set(result["ran"]) == payloads.LIVE
    assert set(result["hung"]) == payloads.HANGS


def test_leir_check_convert_actions_apply_run_none_of_them(corpus, capsys):
    assert cli.main(["check", *(str(p.path) for p in corpus)]) != 0
    reported = capsys.readouterr().out

    for payload in corpus:
        for command in (["convert", str(payload.path), "--to", "leir"],
                        ["actions", str(payload.path), "--json"],
                        ["apply", str(payload.path), "--step", STEP]):
            status = cli.main(command)
            out, err = capsys.readouterr()
            assert "Traceback" not in err and "internal error" not in err, (payload.name, command, err)
            if payload.name not in payloads.CLEAN:
                assert status != 0, (payload.name, command)

    assert payloads.ran(corpus) == []
    for payload in corpus:
        errors = [line for line in reported.splitlines() if line.startswith(f"{payload.path}:") and ": error: " in line]
        if payload.name in payloads.CLEAN:
            assert errors == [], payload.name  # the kernel itself is fine, and parses
        else:
            assert errors, payload.name


@pytest.mark.parametrize("trusted", [True, False])
async def test_the_server_runs_none_of_them(bare_lsp: LeirClient, corpus, trusted):
    bare_lsp.set_configuration(dict(LEIR_SETTINGS), section="leir")
    await bare_lsp.initialize_session(types.InitializeParams(
        capabilities=CAPABILITIES, initialization_options={"trusted": trusted}))

    for payload in corpus:
        uri = await bare_lsp.open(payload.path.as_uri(), payload.text)
        published = await bare_lsp.wait_for_diagnostics(uri, version=1)
        errors = [d for d in published.diagnostics if d.severity == types.DiagnosticSeverity.Error]
        assert bool(errors) == (payload.name not in payloads.CLEAN), payload.name
        document = types.TextDocumentIdentifier(uri=uri)
        for line in range(payload.text.count("\n")):
            await bare_lsp.text_document_hover_async(types.HoverParams(
                text_document=document, position=types.Position(line=line, character=4)))
        at = types.Position(line=payload.text[: payload.text.index("def ")].count("\n"), character=5)
        await bare_lsp.text_document_code_action_async(types.CodeActionParams(
            text_document=document, range=types.Range(start=at, end=at),
            context=types.CodeActionContext(diagnostics=[])))
        await bare_lsp.text_document_document_symbol_async(types.DocumentSymbolParams(text_document=document))
        await bare_lsp.text_document_code_lens_async(types.CodeLensParams(text_document=document))
        try:
            await bare_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
                command="leir.convert", arguments=[{"uri": uri}]))
        except Exception as e:  # noqa: BLE001 - a refused file answers an error; that is fine here
            assert "Traceback" not in str(e)

    assert payloads.ran(corpus) == []


def test_watch_mode_runs_none_of_them(corpus):
    directory = corpus[0].path.parent
    done = subprocess.run([sys.executable, "-m", "leir_server", "watch", str(directory), "--once", "--budget", "4"],
                          capture_output=True, text=True, timeout=900)

    assert "Traceback" not in done.stderr
    assert all(p.path.name in done.stdout for p in corpus)  # every file was read and reported
    assert payloads.ran(corpus) == []

"""The memory budget in the editor: with ``leir.memoryBudgetMB`` set, a
program over it gets a warning diagnostic, and resolving a step on it or
measuring it is refused with the figures before any job starts."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_fixtures import LEIR_SETTINGS, LeirClient, initialize, marked

pytestmark = pytest.mark.slow  # a real server

BIG = """\
in X: f32[1024,512]
L^{512}_{$0i}
  L^{1024}_{j} [
    Y_{i,j} = X_{j,i};
  ];
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "cache"))


async def test_a_program_over_the_budget_is_warned_about_and_refused(bare_lsp: LeirClient):
    await initialize(bare_lsp, settings={**LEIR_SETTINGS, "memoryBudgetMB": 1})
    text, cursor = marked(BIG)
    uri = await bare_lsp.open("big.leir", text)

    published = await bare_lsp.wait_for_diagnostics(uri, version=1)
    [warning] = [d for d in published.diagnostics if d.code == "memory-budget"]
    assert warning.severity == types.DiagnosticSeverity.Warning
    assert warning.message.startswith("the tensors of this program take 4.2 MB; building and running it needs about 29 MB")
    assert "up to 1 MB (setting leir.memoryBudgetMB" in warning.message

    actions = await bare_lsp.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=cursor, end=cursor),
        context=types.CodeActionContext(diagnostics=[])))
    assert actions
    with pytest.raises(JsonRpcException) as raised:
        await bare_lsp.code_action_resolve_async(actions[0])
    message = str(raised.value)
    assert f"{actions[0].data['step']['id']} not applied: the tensors of this program take 4.2 MB" in message
    assert "leir builds and runs programs up to 1 MB" in message

    with pytest.raises(JsonRpcException) as raised:
        await bare_lsp.workspace_execute_command_async(
            types.ExecuteCommandParams(command="leir.measure", arguments=[{"uri": uri}]))
    assert "leir.measure refused: the tensors of this program take 4.2 MB" in str(raised.value)

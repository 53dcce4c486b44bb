"""Workspace trust: a client that says the workspace is not trusted
(``initializationOptions: {"trusted": false}``, as the VS Code extension
sends in Restricted Mode) gets checks, hover and conversion, and nothing
that compiles or runs a kernel."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from lsp_fixtures import CAPABILITIES, LEIR_SETTINGS, LeirClient, marked
from programs import SPLIT_I, TRANSPOSE


async def start(client: LeirClient, options) -> None:
    client.set_configuration(dict(LEIR_SETTINGS), section="leir")
    await client.initialize_session(types.InitializeParams(capabilities=CAPABILITIES,
                                                           initialization_options=options))


async def actions(client: LeirClient, uri: str, position: types.Position) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]))) or []


def command(name: str, uri: str) -> types.ExecuteCommandParams:
    return types.ExecuteCommandParams(command=name, arguments=[{"uri": uri}])


async def test_an_untrusted_workspace_checks_and_explains_but_runs_nothing(bare_lsp: LeirClient):
    await start(bare_lsp, {"trusted": False})
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await bare_lsp.open("untrusted.leir", text)

    published = await bare_lsp.wait_for_diagnostics(uri, version=1)
    assert list(published.diagnostics) == []
    broken = await bare_lsp.open("broken.leir", "L^{4}_{i} [ Y_{i} = X_{k}; ];\n")
    published = await bare_lsp.wait_for_diagnostics(broken, version=1)
    assert any("k" in d.message for d in published.diagnostics)  # checks still run
    hover = await bare_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=cursor))
    assert hover is not None and "loop `i`**: serial (L), 32 iterations" in hover.contents.value
    assert await actions(bare_lsp, uri, cursor) == []  # every step would be verified by running it
    for name in ("leir.measure", "leir.optimize"):
        with pytest.raises(JsonRpcException, match="untrusted workspace"):
            await bare_lsp.workspace_execute_command_async(command(name, uri))
    lenses = await bare_lsp.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert [lens.command.command for lens in lenses] == ["leir.showTrajectory"]
    converted = await bare_lsp.workspace_execute_command_async(command("leir.convert", uri))
    assert converted["language"] == "python" and "T.prim_func" in converted["text"]


async def test_an_untrusted_workspace_refuses_to_resolve_an_action_listed_elsewhere(bare_lsp: LeirClient):
    await start(bare_lsp, {"trusted": False})
    uri = await bare_lsp.open("untrusted.leir", TRANSPOSE)
    action = types.CodeAction(title="Split loop i by 8", kind=types.CodeActionKind.RefactorRewrite,
                              data={"uri": uri, "version": 1, "kernel": None, "step": SPLIT_I})

    with pytest.raises(JsonRpcException, match="untrusted workspace"):
        await bare_lsp.code_action_resolve_async(action)


@pytest.mark.parametrize("options", [None, {}, {"trusted": True}, {"other": 1}, ["trusted", False]])
async def test_a_client_that_does_not_say_untrusted_is_trusted(bare_lsp: LeirClient, options):
    await start(bare_lsp, options)
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await bare_lsp.open("trusted.leir", text)

    listed = await actions(bare_lsp, uri, cursor)

    assert any(a.data["step"] == SPLIT_I for a in listed)

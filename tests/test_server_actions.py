"""Code actions, resolve, hover, code lens and save hints over stdio, against
the real ``leir-lsp`` (pytest-lsp). Each test has its own measurement cache
(``LEIR_CACHE_DIR``), so what is "measured" was measured in the test."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from leir.explain.editor import latency_text
from lsp_fixtures import LeirClient, marked, show
from programs import SPLIT_I, TRANSPOSE

pytestmark = pytest.mark.slow  # resolve builds and runs kernels to verify them

@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The server (started after this fixture) measures into a fresh cache."""
    monkeypatch.setenv("LEIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


async def actions_at(client: LeirClient, uri: str, position: types.Position) -> list[types.CodeAction]:
    found = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[])))
    return found or []


def action_for(actions: list[types.CodeAction], step: dict) -> types.CodeAction:
    matching = [a for a in actions if a.data["step"] == step]
    assert matching, [a.data["step"] for a in actions]
    return matching[0]


def apply_edit(text: str, edit: types.WorkspaceEdit) -> str:
    """The text after a one-document WorkspaceEdit of one TextEdit."""
    from leir.diagnostics import SourceText

    [change] = edit.document_changes
    [e] = change.edits
    source = SourceText(text)
    start = source.offset_utf16(e.range.start.line, e.range.start.character)
    end = source.offset_utf16(e.range.end.line, e.range.end.character)
    return text[:start] + e.new_text + text[end:]


def leir_apply(tmp_path, text: str, step: dict) -> str:
    path = tmp_path / "doc.leir"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "leir.tools.cli", "apply", str(path), "--step", json.dumps(step)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_code_actions_at_a_loop_are_refactors_with_their_version(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("actions.leir", text, version=3)

    actions = await actions_at(leir_lsp, uri, cursor)

    assert actions
    assert {a.kind for a in actions} == {types.CodeActionKind.RefactorRewrite}
    assert all(a.edit is None for a in actions)  # computed on resolve
    split = action_for(actions, SPLIT_I)
    assert split.title == "Split loop i by 8"
    assert split.data == {"uri": uri, "version": 3, "kernel": None, "step": SPLIT_I}
    # Only steps on loop i are offered on i's header.
    loops = {a.data["step"]["args"].get("loop") for a in actions if "loop" in a.data["step"]["args"]}
    assert loops == {"i"}


async def test_code_actions_outside_leir_documents_are_none(leir_lsp: LeirClient):
    uri = await leir_lsp.open("notes.txt", "hello")

    assert await actions_at(leir_lsp, uri, types.Position(line=0, character=1)) == []


async def test_resolve_returns_the_verified_edit_that_leir_apply_prints(leir_lsp: LeirClient, tmp_path):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("resolve.leir", text, version=5)
    action = action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I)

    resolved = await leir_lsp.code_action_resolve_async(action)

    [change] = resolved.edit.document_changes
    assert change.text_document.uri == uri
    assert change.text_document.version == 5
    assert apply_edit(text, resolved.edit) == leir_apply(tmp_path, text, SPLIT_I)
    # The smallest changed range: the comment line is not rewritten.
    assert show(change.edits[0].range).startswith("2:1-")


async def test_resolve_against_an_old_version_is_refused_without_an_edit(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("stale.leir", text)
    action = action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I)

    leir_lsp.edit(uri, "1:1-1:1", "# edited\n")
    with pytest.raises(JsonRpcException) as raised:
        await leir_lsp.code_action_resolve_async(action)

    assert "document changed since this action was offered" in str(raised.value)
    assert "version 1" in str(raised.value) and "version 2" in str(raised.value)


async def test_resolve_with_malformed_data_is_an_error(leir_lsp: LeirClient):
    bogus = types.CodeAction(title="x", kind=types.CodeActionKind.RefactorRewrite, data={"nothing": 1})

    with pytest.raises(JsonRpcException) as raised:
        await leir_lsp.code_action_resolve_async(bogus)

    assert "no leir data" in str(raised.value)


async def test_a_refused_step_is_an_error_not_an_edit(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("refused.leir", text)
    action = action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I)
    # A step the document does not have (a forged or outdated client).
    action.data = {**action.data, "step": {"id": "split", "args": {"block": "Z", "loop": "i", "factors": [4, 8]}}}

    with pytest.raises(JsonRpcException) as raised:
        await leir_lsp.code_action_resolve_async(action)

    assert "split not applied: no block Z" in str(raised.value)


async def test_an_applied_step_enters_the_trajectory_once_the_document_shows_it(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("trajectory.leir", text)
    action = action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I)
    resolved = await leir_lsp.code_action_resolve_async(action)

    before = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.showTrajectory", arguments=[{"uri": uri}]))
    [change] = resolved.edit.document_changes
    leir_lsp.edit(uri, change.edits[0].range, change.edits[0].new_text)
    leir_lsp.edit(uri, "1:1-1:1", "# typed after the edit\n")  # the record was made on the edit's didChange
    after = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.showTrajectory", arguments=[{"uri": uri}]))

    assert before["steps"] == []  # resolved, not yet applied
    [step] = after["steps"]
    assert (step["id"], step["args"]) == (SPLIT_I["id"], SPLIT_I["args"])
    assert step["title"] == "Split loop i by 8"
    assert step["verified"].startswith("Y: ok")
    assert step["latency_before_ms"] is None  # nothing was measured


async def test_a_resolved_step_whose_edit_is_not_applied_is_not_recorded(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("not-applied.leir", text)
    await leir_lsp.code_action_resolve_async(action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I))

    leir_lsp.edit(uri, "1:1-1:1", "# another edit\n")
    shown = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.showTrajectory", arguments=[{"uri": uri}]))

    assert shown["steps"] == []


async def test_hover_on_a_loop_shows_its_facts_and_the_steps_there(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("L^{16}_{j}", "L^{16}_{$0j}"))
    uri = await leir_lsp.open("hover.leir", text)

    hover = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=cursor))

    value = hover.contents.value
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert "**loop `j`**" in value
    assert "16 iterations" in value
    assert "### " in value  # a suggested step on j, explained
    assert "measured" not in value  # nothing is in this test's cache


async def test_hover_on_an_access_shows_the_tensor(leir_lsp: LeirClient):
    text, cursor = marked(TRANSPOSE.replace("X_{j,i}", "$0X_{j,i}"))
    uri = await leir_lsp.open("access.leir", text)

    hover = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=cursor))

    assert "input `X`" in hover.contents.value
    assert "f32[16,32]" in hover.contents.value


async def test_hover_past_the_end_or_in_a_comment_has_nothing_to_say(leir_lsp: LeirClient):
    uri = await leir_lsp.open("nothing.leir", TRANSPOSE)

    past = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=99, character=5)))
    comment = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=3)))

    assert past is None
    assert comment is None


async def test_code_lens_offers_measure_optimize_and_the_step_count(leir_lsp: LeirClient):
    uri = await leir_lsp.open("lens.leir", TRANSPOSE)

    lenses = await leir_lsp.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))

    assert [(l.command.title, l.command.command) for l in lenses] == [
        ("measure", "leir.measure"), ("optimize…", "leir.optimize"), ("0 steps applied", "leir.showTrajectory")]
    assert [list(l.command.arguments) for l in lenses] == [[{"uri": uri}]] * 3
    assert lenses[0].range.start.line == 1  # the kernel's first loop


async def test_measured_steps_say_so_in_their_title_hover_and_lens(leir_lsp: LeirClient):
    """Measure the program, resolve and apply a step, measure the result,
    undo: the action now carries the measured speedup of both programs."""
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("measured.leir", text)

    before = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.measure", arguments=[{"uri": uri, "repeat": 1}]))
    action = action_for(await actions_at(leir_lsp, uri, cursor), SPLIT_I)
    resolved = await leir_lsp.code_action_resolve_async(action)
    leir_lsp.replace_all(uri, apply_edit(text, resolved.edit))
    after = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.measure", arguments=[{"uri": uri, "repeat": 1}]))
    leir_lsp.replace_all(uri, text)  # undo
    actions = await actions_at(leir_lsp, uri, cursor)
    lenses = await leir_lsp.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    hover = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=cursor))

    speedup = before["median_ms"] / after["median_ms"]
    assert actions[0].data["step"] == SPLIT_I  # measured steps come first
    assert actions[0].title == f"Split loop i by 8 (measured {speedup:.1f}x)"
    assert lenses[0].command.title == f"{latency_text(before['median_ms'])} on llvm ({before['device']})"
    assert "(measured" in hover.contents.value
    assert before["device"] in hover.contents.value


async def test_save_publishes_the_top_suggestions_as_hints_when_asked(leir_lsp: LeirClient):
    leir_lsp.set_configuration({"target": "llvm", "suggestionsOnSave": True}, section="leir")
    leir_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    uri = await leir_lsp.open("save.leir", TRANSPOSE)
    await leir_lsp.wait_for_diagnostics(uri, version=1)
    seen = len(leir_lsp.published)

    leir_lsp.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    published = await leir_lsp.wait_for_diagnostics(uri, version=1, after=seen)

    hints = [d for d in published.diagnostics if d.severity == types.DiagnosticSeverity.Hint]
    assert 1 <= len(hints) <= 3
    assert all(d.message.startswith("leir suggests: ") for d in hints)
    assert all(d.data["step"]["id"] == d.code for d in hints)


async def test_save_without_the_setting_publishes_nothing_new(leir_lsp: LeirClient):
    uri = await leir_lsp.open("nosave.leir", TRANSPOSE)
    await leir_lsp.wait_for_diagnostics(uri, version=1)
    seen = len(leir_lsp.published)

    leir_lsp.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    # A request after the notification: the server has handled the save.
    await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.showTrajectory", arguments=[{"uri": uri}]))

    assert len(leir_lsp.published) == seen


# ------------------------------------------------------------ Python files with TVMScript kernels


def transpose_python() -> str:
    from leir.bridge.document import load_leir
    from leir.bridge.lower import to_tvmscript

    return to_tvmscript(load_leir(TRANSPOSE).analysis, "transpose")


async def test_python_kernel_actions_resolve_to_what_leir_apply_prints(leir_lsp: LeirClient, tmp_path):
    text = transpose_python()
    uri = await leir_lsp.open("kernels.py", text)
    line = text[:text.index("for i, j")].count("\n")

    actions = await actions_at(leir_lsp, uri, types.Position(line=line, character=8))
    split = action_for(actions, SPLIT_I)
    resolved = await leir_lsp.code_action_resolve_async(split)

    assert split.data["kernel"] == "transpose"
    path = tmp_path / "kernels.py"
    path.write_text(text)
    out = subprocess.run([sys.executable, "-m", "leir.tools.cli", "apply", str(path), "--step", json.dumps(SPLIT_I)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert apply_edit(text, resolved.edit) == out.stdout


async def test_hover_in_a_python_kernel_explains_its_loop(leir_lsp: LeirClient):
    text = transpose_python()
    uri = await leir_lsp.open("hover_kernel.py", text)
    line = text[:text.index("for i, j")].count("\n")

    hover = await leir_lsp.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=8)))

    assert "**loop `i`**" in hover.contents.value
    assert "32 iterations" in hover.contents.value


async def test_auto_measure_on_save_measures_the_top_suggestions(leir_lsp: LeirClient, own_cache):
    leir_lsp.set_configuration({"target": "llvm", "autoMeasure": True}, section="leir")
    leir_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    uri = await leir_lsp.open("auto.leir", text)
    await leir_lsp.wait_for_diagnostics(uri, version=1)

    leir_lsp.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))

    def statuses():
        return [p for m, p in leir_lsp.leir_notifications if m == "leir/status"]

    async def finished():
        while not any(not s.measuring for s in statuses()):
            await leir_lsp.wait_for_notification("leir/status")
    await asyncio.wait_for(finished(), 600)  # a bound on a hang
    actions = await actions_at(leir_lsp, uri, cursor)

    assert statuses()[0].measuring is True
    assert statuses()[-1].lastLatencyMs > 0
    measured = [a.title for a in actions if "(measured " in a.title]
    assert measured, [a.title for a in actions]


async def test_python_kernels_get_lenses_and_measure_by_name(leir_lsp: LeirClient):
    text = transpose_python()
    uri = await leir_lsp.open("lens_kernel.py", text)
    kernel_line = text[:text.index("@T.prim_func")].count("\n")

    before = await leir_lsp.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    m = await leir_lsp.workspace_execute_command_async(types.ExecuteCommandParams(
        command="leir.measure", arguments=[{"uri": uri, "kernel": "transpose", "repeat": 1}]))
    after = await leir_lsp.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))

    assert [l.command.title for l in before] == ["measure", "optimize…", "0 steps applied"]
    assert [list(l.command.arguments) for l in before] == [[{"uri": uri, "kernel": "transpose"}]] * 3
    assert before[0].range.start.line == kernel_line
    assert m["verified"] is True and m["median_ms"] > 0
    assert after[0].command.title == f"{latency_text(m['median_ms'])} on llvm ({m['device']})"

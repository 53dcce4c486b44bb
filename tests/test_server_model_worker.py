"""The model worker (``leir_server.model_worker``): its ranking is used only
for the version it ranked, a crash or a hang replaces it and keeps the
heuristic, a newer version supersedes an older one, close stops it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from leir.tools.suggest import suggest
from leir_server.model_worker import ModelWorker, PrecomputedRanker, Request

pytestmark = pytest.mark.slow  # the child starts from the forkserver that imports TVM

TEXT = "L^{64}_{i} [ L^{32}_{j} [ Y_{i,j} = X_{i,j} + 1; ]; ];\n"
URI = "file:///m.leir"


def _wait(worker, version, kernel=None, target="llvm", timeout=120.0):
    deadline = time.monotonic() + timeout  # a bound on a hang, not a speed requirement
    while time.monotonic() < deadline:
        found = worker.ranking(URI, version, kernel, target)
        if found is not None:
            return found
        time.sleep(0.05)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_ranking_is_used_for_its_version_only():
    worker = ModelWorker(factory="model_worker_rankers:reversed_ranker", timeout=120)
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        found = _wait(worker, 1)
        assert found is not None and found.source == "reversed" and worker.active == "reversed"
        assert worker.ranking(URI, 2, None, "llvm") is None  # a newer version has no model ranking
        assert worker.ranking(URI, 1, None, "cuda") is None

        heuristic = [s.step.key for s in suggest(TEXT, "leir")]
        ranked = suggest(TEXT, "leir", ranker=PrecomputedRanker(found))
        scored = [s for s in ranked if s.score]
        assert scored and all(s.score <= 0 for s in scored)
        assert [s.step.key for s in ranked] != heuristic
        # The reasoning written in the background for the document's first steps comes with them.
        assert len(found.reasonings) == 3
        assert [s.reasoning for s in ranked[:3]] == [f"written for {s.step.key}" for s in ranked[:3]]
        assert all(s.reasoning is None for s in ranked[3:]) and ranked[0].reasoning_status == "predicted"
    finally:
        worker.close()


def test_a_newer_version_supersedes_the_pending_one():
    worker = ModelWorker(factory="model_worker_rankers:reversed_ranker", timeout=120)
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        worker.submit(Request(URI, 2, TEXT, "leir", None, "llvm"))
        assert _wait(worker, 2) is not None
        assert worker.ranking(URI, 1, None, "llvm") is None
    finally:
        worker.close()


@pytest.mark.parametrize("factory", ["model_worker_rankers:crashing_ranker", "model_worker_rankers:hanging_ranker"])
def test_a_dead_or_hung_worker_is_replaced(factory):
    worker = ModelWorker(factory=factory, timeout=20)
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        deadline = time.monotonic() + 120
        while (worker.started < 1 or worker.process is not None) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert worker.process is None  # killed (or found dead) and dropped
        assert worker.ranking(URI, 1, None, "llvm") is None  # the listing keeps the heuristic

        worker.factory = "model_worker_rankers:reversed_ranker"
        worker.submit(Request(URI, 2, TEXT, "leir", None, "llvm"))
        assert _wait(worker, 2) is not None
        assert worker.started == 2
    finally:
        worker.close()


def test_close_stops_the_process():
    worker = ModelWorker(factory="model_worker_rankers:reversed_ranker", timeout=120)
    worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
    assert _wait(worker, 1) is not None
    pid = worker.process.pid
    assert _alive(pid)

    worker.close()

    assert not _alive(pid)
    worker.submit(Request(URI, 2, TEXT, "leir", None, "llvm"))
    assert worker.started == 1


def test_without_a_model_the_worker_stops_and_never_restarts():
    said = []
    worker = ModelWorker(factory="model_worker_rankers:missing_model", timeout=120, on_active=lambda name, decoding: said.append(name))
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        deadline = time.monotonic() + 120
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said == ["heuristic"] and worker.active == "heuristic"
        while worker.process is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.process is None  # no idle child is kept for the heuristic

        worker.submit(Request(URI, 2, TEXT, "leir", None, "llvm"))
        time.sleep(1.0)
        assert worker.started == 1 and worker.process is None
        assert worker.ranking(URI, 2, None, "llvm") is None  # the listing uses its own heuristic
    finally:
        worker.close()


# ---------------------------------------------------------------- over stdio


@pytest.fixture
def model_installed(lm_model_dir, monkeypatch):
    """The tiny trained model as the installed one, for a server started after this fixture."""
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    monkeypatch.setenv("LEIR_MODEL_SHORTLIST", "0")  # the model orders every step (ranker.shortlist)
    return lm_model_dir


def _ranker_statuses(client) -> list[str]:
    return [getattr(p, "ranker", None) for m, p in client.leir_notifications if m == "leir/ranker"]


async def _actions(client, uri, position):
    from lsprotocol import types

    found = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[])))
    return [a.data["step"] for a in found or []]


async def test_code_actions_follow_the_model_once_it_has_ranked_the_version(model_installed, leir_lsp):
    import asyncio

    from leir.diagnostics import SourceText
    from leir_models.lm.ranker import ModelRanker
    from lsp_fixtures import marked
    from programs import TRANSPOSE

    text, cursor = marked(TRANSPOSE.replace("L^{32}_{i}", "L^{32}_{$0i}"))
    offset = SourceText(text).offset_utf16(cursor.line, cursor.character)
    # The model orders every step (model_installed sets LEIR_MODEL_SHORTLIST=0): with the default
    # shortlist the tiny model keeps the heuristic's first three in their order here.
    model = [s.step.to_json() for s in suggest(text, "leir", offset, ranker=ModelRanker.load(model_installed),
                                               limit=40)]
    heuristic = [s.step.to_json() for s in suggest(text, "leir", offset, limit=40)]
    assert model != heuristic  # else this test could not tell which ranked

    uri = await leir_lsp.open("ranked.leir", text)
    assert await _actions(leir_lsp, uri, cursor) in (heuristic, model)  # never waits for the model

    async def ranked():
        while await _actions(leir_lsp, uri, cursor) != model:
            await asyncio.sleep(0.2)
    await asyncio.wait_for(ranked(), 180)  # a bound on a hang (torch loads in the worker)
    assert _ranker_statuses(leir_lsp) == ["model"]
    assert any("ranked by the local model (model)" in m.message for m in leir_lsp.log_messages)

    # A new version is listed by the heuristic until the model has ranked it too.
    version = leir_lsp.replace_all(uri, text + "\n")
    assert version == 2
    assert await _actions(leir_lsp, uri, cursor) in (heuristic, model)

    # Turned off: the worker stops and the heuristic lists, even for a ranked version.
    from lsp_fixtures import LEIR_SETTINGS
    from lsprotocol import types

    leir_lsp.replace_all(uri, text)
    await ranked()
    leir_lsp.set_configuration({**LEIR_SETTINGS, "modelEnabled": False}, section="leir")
    leir_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def unranked():
        while await _actions(leir_lsp, uri, cursor) != heuristic:
            await asyncio.sleep(0.2)
    await asyncio.wait_for(unranked(), 60)


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_setting_decides_whether_a_model_process_starts(bare_lsp, enabled):
    """No model is installed here: with the setting on, the worker starts,
    finds none and says so; off, nothing starts and nothing is said."""
    import asyncio

    from lsp_fixtures import LEIR_SETTINGS, initialize

    assert not any(Path(os.environ["LEIR_MODEL_DIR"]).iterdir())  # tests/conftest.py: no model
    await initialize(bare_lsp, settings={**LEIR_SETTINGS, "modelEnabled": enabled})
    uri = await bare_lsp.open("plain.leir", TEXT)
    await bare_lsp.wait_for_diagnostics(uri, version=1)

    def said():
        return [m.message for m in bare_lsp.log_messages if "local model" in m.message]

    async def told():
        while not said():
            await asyncio.sleep(0.1)
    if enabled:
        await asyncio.wait_for(told(), 120)  # a bound on a hang
        assert said() == ["leir: the local model did not load (none installed?); suggestions are ranked by the "
                          "heuristic"]
        assert _ranker_statuses(bare_lsp) == ["heuristic"]
    else:
        await asyncio.sleep(5)  # what the enabled case needs to say it, with margin
        assert said() == [] and _ranker_statuses(bare_lsp) == []


def test_without_a_model_file_no_process_starts_at_all(tmp_path, monkeypatch):
    monkeypatch.setenv("LEIR_MODEL_DIR", str(tmp_path))  # an empty directory: no model
    said = []
    worker = ModelWorker(on_active=lambda name, decoding: said.append(name))  # the real factory
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        deadline = time.monotonic() + 60
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said == ["heuristic"] and worker.active == "heuristic"
        worker.submit(Request(URI, 2, TEXT, "leir", None, "llvm"))
        time.sleep(0.5)
        assert worker.started == 0 and worker.process is None and said == ["heuristic"]
    finally:
        worker.close()


# ---------------------------------------------------------------- the tier (model.tier)


@pytest.mark.parametrize(("section", "tier", "ranker"), [
    ({}, "embedded", "model"),
    ({"model": {"tier": "smollm2"}}, "smollm2", "smollm2"),
    ({"modelTier": "smollm2"}, "smollm2", "smollm2"),
    ({"model": {"enabled": False, "tier": "embedded"}}, "embedded", "model"),
])
def test_the_tier_setting_names_the_ranker(section, tier, ranker):
    from leir_server.session.settings import Settings

    settings, problems = Settings.from_json(section)
    assert (settings.model_tier, settings.model_ranker, problems) == (tier, ranker, [])


@pytest.mark.parametrize("section", [{"modelTier": "huge"}, {"model": {"tier": 3}}, {"modelTier": "Embedded"}])
def test_an_unknown_tier_is_a_settings_warning_and_the_default(section):
    from leir_server.session.settings import Settings

    settings, problems = Settings.from_json({**section, "target": "llvm"})
    assert settings.model_tier == "embedded" and settings.model_ranker == "model"
    (problem,) = problems
    assert problem.startswith("leir.modelTier: ignored") and "expected one of embedded, smollm2" in problem


def test_the_worker_asks_its_factory_for_its_ranker():
    worker = ModelWorker(factory="model_worker_rankers:named_ranker", timeout=120, ranker="smollm2")
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        found = _wait(worker, 1)
        assert found is not None and found.source == "asked for smollm2" and worker.active == "asked for smollm2"
    finally:
        worker.close()


def test_without_a_fine_tuned_smollm2_no_process_starts(lm_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(tmp_path))  # empty: the larger tier is not made
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))  # the embedded tier is: asking for it would start one
    said = []
    worker = ModelWorker(on_active=lambda name, decoding: said.append(name), ranker="smollm2")  # the real factory
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        deadline = time.monotonic() + 60
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        assert said == ["heuristic"] and worker.started == 0 and worker.process is None
    finally:
        worker.close()


def test_the_server_keeps_one_worker_per_tier(workers):
    embedded = workers.model_worker(ranker="model")
    assert workers.model_worker(ranker="model") is embedded and not embedded.closed
    larger = workers.model_worker(ranker="smollm2")
    assert larger is not embedded and larger.ranker == "smollm2" and workers.model is larger
    assert embedded.closed  # stopped: its process (had it one) is gone


@pytest.fixture
def both_tiers(lm_model_dir, monkeypatch):
    """The tiny trained model as both the embedded and the larger tier, for a server started after this fixture."""
    monkeypatch.setenv("LEIR_MODEL_DIR", str(lm_model_dir))
    monkeypatch.setenv("LEIR_SMOLLM2_MODEL_DIR", str(lm_model_dir))
    return lm_model_dir


async def test_changing_the_tier_restarts_the_worker_with_the_tiers_ranker(both_tiers, bare_lsp):
    import asyncio

    from lsp_fixtures import LEIR_SETTINGS, initialize
    from lsprotocol import types

    await initialize(bare_lsp, settings={**LEIR_SETTINGS, "model": {"enabled": True, "tier": "embedded"}})
    await bare_lsp.open("tiers.leir", TEXT)

    async def statuses(n):
        while len(_ranker_statuses(bare_lsp)) < n:
            await asyncio.sleep(0.1)
    await asyncio.wait_for(statuses(1), 180)  # a bound on a hang (torch loads in the worker)
    assert _ranker_statuses(bare_lsp) == ["model"]

    bare_lsp.set_configuration({**LEIR_SETTINGS, "model": {"enabled": True, "tier": "smollm2"}}, section="leir")
    bare_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.wait_for(statuses(2), 180)
    assert _ranker_statuses(bare_lsp) == ["model", "smollm2"]
    assert any("ranked by the local model (smollm2)" in m.message for m in bare_lsp.log_messages)

    bare_lsp.set_configuration({**LEIR_SETTINGS, "model": {"enabled": True, "tier": "tiny"}}, section="leir")
    bare_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))

    async def warned():
        while not any("modelTier: ignored 'tiny'" in m.message for m in bare_lsp.log_messages):
            await asyncio.sleep(0.1)
    await asyncio.wait_for(warned(), 60)  # a clear settings warning, then the default tier: the embedded model again
    await asyncio.wait_for(statuses(3), 180)
    assert _ranker_statuses(bare_lsp) == ["model", "smollm2", "model"]

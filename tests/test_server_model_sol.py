"""The model worker's reasoning under SOL (issue 16: "the server's model
worker uses the SOL runtime when it is enabled, the dense model
otherwise"): the ``model.sol`` settings, the SOL-decoded ``explain`` of
``leir_models.sol.reasoning`` on the shipped model and policy (the ranking
stays dense), the fallbacks to dense decoding and what they say, the worker
process and the server over stdio."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from leir.bridge.document import load_leir
from leir.tools.suggest import suggest
from leir_server.model_worker import ModelWorker, PrecomputedRanker, Ranking, Request
from leir_server.session.settings import SOL_BUDGET, Settings

ROOT = Path(__file__).resolve().parent.parent
MATMUL = (ROOT / "examples" / "matmul.leir").read_text()
TEXT = "L^{64}_{i} [ L^{32}_{j} [ Y_{i,j} = X_{i,j} + 1; ]; ];\n"
URI = "file:///sol.leir"


# ---------------------------------------------------------------- the settings


@pytest.mark.parametrize(("section", "sol"), [
    ({}, (SOL_BUDGET, "torch", "fp32")),
    ({"model": {"sol": {"budget": 0.7}}}, (0.7, "torch", "fp32")),
    ({"model": {"sol": {"budget": 1, "runtime": "onnx", "precision": "int8"}}}, (1.0, "onnx", "int8")),
    ({"modelSolBudget": 0.25, "modelSolRuntime": "onnx"}, (0.25, "onnx", "fp32")),
    ({"model": {"sol": {"budget": None, "runtime": "onnx"}}}, None),
    ({"modelSolBudget": None}, None),
    ({"model": {"enabled": True, "tier": "smollm2"}}, (SOL_BUDGET, "torch", "fp32")),
])
def test_the_sol_settings(section, sol):
    settings, problems = Settings.from_json(section)
    assert (settings.model_sol, problems) == (sol, [])


@pytest.mark.parametrize(("section", "key", "why", "sol"), [
    ({"modelSolBudget": 0}, "modelSolBudget", "expected a net keep in (0, 1], or null", (SOL_BUDGET, "torch", "fp32")),
    ({"model": {"sol": {"budget": 1.5}}}, "modelSolBudget", "expected a net keep", (SOL_BUDGET, "torch", "fp32")),
    ({"modelSolBudget": True}, "modelSolBudget", "expected a net keep", (SOL_BUDGET, "torch", "fp32")),
    ({"modelSolBudget": "0.5"}, "modelSolBudget", "expected a net keep", (SOL_BUDGET, "torch", "fp32")),
    ({"modelSolRuntime": "tensorrt"}, "modelSolRuntime", "expected one of torch, onnx", (SOL_BUDGET, "torch", "fp32")),
    ({"modelSolPrecision": "fp16", "modelSolRuntime": "onnx"}, "modelSolPrecision", "expected one of fp32, int8",
     (SOL_BUDGET, "onnx", "fp32")),
    ({"model": {"sol": {"precision": "int8"}}}, "modelSolPrecision", "int8 needs modelSolRuntime onnx",
     (SOL_BUDGET, "torch", "fp32")),
])
def test_an_unusable_sol_setting_is_a_warning_and_the_default(section, key, why, sol):
    settings, problems = Settings.from_json(section)
    (problem,) = problems
    assert problem.startswith(f"leir.{key}: ignored") and why in problem
    assert settings.model_sol == sol


def test_changing_the_sol_settings_replaces_the_worker(workers):
    dense = workers.model_worker(ranker="model", sol=None)
    assert workers.model_worker(ranker="model", sol=None) is dense
    sol = workers.model_worker(ranker="model", sol=(0.5, "torch", "fp32"))
    assert sol is not dense and sol.sol == (0.5, "torch", "fp32") and dense.closed
    assert workers.model_worker(ranker="model", sol=(0.5, "torch", "fp32")) is sol
    onnx = workers.model_worker(ranker="model", sol=(0.5, "onnx", "int8"))
    assert onnx is not sol and sol.closed


# ---------------------------------------------------------------- the SOL ranker, shipped model and policy


@pytest.fixture(scope="module")
def shipped():
    pytest.importorskip("transformers")
    import torch

    from leir_models.lm.ranker import ModelRanker
    from leir_models.lm.store import DATA_DIR

    torch.set_num_threads(1)
    return ModelRanker.load(DATA_DIR)


def _context(text: str):
    from leir.transforms.base import Context

    return Context.of(load_leir(text).analysis)


def test_the_reasoning_is_decoded_by_the_shipped_policy_and_the_ranking_stays_dense(shipped):
    from leir_models.sol import knobs
    from leir_models.sol.reasoning import SolRanker, with_sol

    sol = with_sol(shipped, 0.5)
    assert isinstance(sol, SolRanker) and sol.decoder.policy is not None and sol.decoder.budget == 0.5
    sol.max_tokens = 24  # enough passes to see the policy act; the test stays fast
    ctx = _context(MATMUL)
    steps = [s.step for s in suggest(MATMUL, "leir", None, ranker=shipped, explain_top=0, limit=5)]

    assert sol.score(ctx, steps, "llvm") == shipped.score(ctx, steps, "llvm")
    assert not any(isinstance(m, knobs.SlicedMLP) for m in shipped.model.modules())  # the ranker's model untouched
    assert any(isinstance(m, knobs.SlicedMLP) for m in sol.decoder.model.modules())

    first = sol.explain(ctx, steps[0], "llvm")
    out = sol.last
    assert out is not None and out.mode == "sol" and len(out.actions) >= 8
    assert out.net_keep < 0.8 and out.flops_per_token < 0.9 * out.flops_dense  # smaller MLPs really ran
    assert sol.net_keep == pytest.approx(out.net_keep)
    assert sol.explain(ctx, steps[0], "llvm") == first and sol.last.actions == out.actions  # seeded per explain
    said = sol.decoding()
    assert said["mode"] == "sol" and said["net_keep"] < 0.8 and said["providers"] == ["torch (cpu)"]
    assert said["text"] == f"reasoning decoded with SOL at budget 0.5 (net keep {sol.net_keep:.2f}, torch (cpu))"
    assert sol.reasoning_note == "decoded under SOL at budget 0.5"


def test_without_a_policy_beside_the_model_the_reasoning_is_dense_and_says_why(lm_model_dir):
    from leir_models.lm.ranker import ModelRanker
    from leir_models.sol.reasoning import with_sol

    ranker = ModelRanker.load(lm_model_dir)
    found = with_sol(ranker, 0.5)
    assert type(found) is ModelRanker and found.model is ranker.model and found.reasoning_note is None
    assert found.decoding() == {"mode": "dense", "why": f"no SOL policy in {lm_model_dir / 'sol'}",
                                "text": f"reasoning decoded densely (no SOL policy in {lm_model_dir / 'sol'})"}
    assert ranker.decoding()["text"] == "reasoning decoded densely"  # the original is not changed


def test_when_onnx_runtime_does_not_load_the_reasoning_is_dense_and_says_why(shipped, monkeypatch):
    from leir_models.sol import ort_step
    from leir_models.sol.reasoning import with_sol

    def broken(*args, **kwargs):
        raise ImportError("libonnxruntime.so: cannot open shared object file")

    monkeypatch.setattr(ort_step, "load", broken)
    found = with_sol(shipped, 0.5, "onnx", "int8")
    said = found.decoding()
    assert said["mode"] == "dense" and found.reasoning_note is None
    assert said["text"] == ("reasoning decoded densely (ONNX Runtime did not load: ImportError: "
                            "libonnxruntime.so: cannot open shared object file)")


def test_hover_says_the_reasoning_was_decoded_under_sol():
    from leir.explain.editor import step_text

    steps = suggest(TEXT, "leir", None, explain_top=0)
    ranking = Ranking(Request(URI, 1, TEXT, "leir", None, "llvm"), "model",
                      {s.step.key: (100.0 - k, ()) for k, s in enumerate(steps)},
                      {steps[0].step.key: "Written under SOL."}, "decoded under SOL at budget 0.5")
    first = suggest(TEXT, "leir", None, ranker=PrecomputedRanker(ranking))[0]
    assert (first.reasoning, first.reasoning_note) == ("Written under SOL.", "decoded under SOL at budget 0.5")
    text = step_text(load_leir(TEXT).analysis, first, "leir", "llvm", None)
    assert "reasoning (predicted, decoded under SOL at budget 0.5; only its sentences" in text


# ---------------------------------------------------------------- the worker process (the real factory)


@pytest.fixture(scope="module")
def sol_model_dir(lm_model_dir, tmp_path_factory):
    """The tiny trained model with an untrained SOL policy beside it (its
    budget bias alone favours the keep nearest the budget, docs/sol.md)."""
    pytest.importorskip("transformers")
    import torch

    from leir_models.lm.store import load_model
    from leir_models.sol import knobs
    from leir_models.sol.policy import PolicyConfig, SolPolicy

    out = tmp_path_factory.mktemp("sol-model")
    for path in lm_model_dir.iterdir():
        if path.is_file():
            shutil.copy(path, out / path.name)
    model, _ = load_model(out)
    generator = torch.Generator().manual_seed(0)
    orders = knobs.reorder_channels(model, [torch.rand(m.down_proj.in_features, generator=generator)
                                            for m in knobs.mlp_layers(model)])
    torch.manual_seed(0)
    SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).save(out / "sol", orders)
    return out


#: Loads the model of the directory the worker's ranker name gives (tests/model_worker_rankers.py).
IN_DIRECTORY = "model_worker_rankers:model_in_directory"


def _ranked(worker, version=1, timeout=180.0):
    deadline = time.monotonic() + timeout  # a bound on a hang (the child loads torch), not a speed requirement
    while time.monotonic() < deadline:
        found = worker.ranking(URI, version, None, "llvm")
        if found is not None:
            return found
        time.sleep(0.05)
    return None


@pytest.mark.slow
def test_a_worker_with_a_budget_decodes_the_reasoning_under_sol(sol_model_dir):
    active, updates = [], []
    worker = ModelWorker(factory=IN_DIRECTORY, ranker=str(sol_model_dir), sol=(0.5, "torch", "fp32"),
                         on_active=lambda *a: active.append(a), on_update=lambda *a: updates.append(a))
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        found = _ranked(worker)
        assert found is not None and found.source == "model"
        assert found.reasoning_note == "decoded under SOL at budget 0.5"
        [(name, ready)] = active
        assert name == "model" and ready["mode"] == "sol" and ready["net_keep"] is None
        assert ready["text"] == "reasoning decoded with SOL at budget 0.5 (torch (cpu))"
        decoding = worker.decoding
        assert decoding["mode"] == "sol" and decoding["passes"] > 0 and decoding["net_keep"] < 0.9
        assert updates and updates[-1] == ("model", decoding)
        assert decoding["text"].startswith(f"reasoning decoded with SOL at budget 0.5 (net keep "
                                           f"{decoding['net_keep']:.2f}")
    finally:
        worker.close()


@pytest.mark.slow
def test_a_worker_without_a_policy_decodes_densely_and_says_why(lm_model_dir):
    active = []
    worker = ModelWorker(factory=IN_DIRECTORY, ranker=str(lm_model_dir), sol=(0.5, "torch", "fp32"),
                         on_active=lambda *a: active.append(a))
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        found = _ranked(worker)
        assert found is not None and found.reasoning_note is None
        [(name, decoding)] = active
        assert name == "model" and decoding["mode"] == "dense"
        assert decoding["text"] == f"reasoning decoded densely (no SOL policy in {lm_model_dir / 'sol'})"
        assert worker.decoding == decoding
    finally:
        worker.close()


@pytest.mark.slow
def test_a_ranker_that_is_not_the_language_model_ignores_the_budget():
    worker = ModelWorker(factory="model_worker_rankers:reversed_ranker", sol=(0.5, "torch", "fp32"), timeout=120)
    try:
        worker.submit(Request(URI, 1, TEXT, "leir", None, "llvm"))
        found = _ranked(worker)
        assert found is not None and found.source == "reversed" and found.reasoning_note is None
        assert worker.decoding is None and all(text.startswith("written for ") for text in found.reasonings.values())
    finally:
        worker.close()


# ---------------------------------------------------------------- over stdio


@pytest.fixture
def sol_installed(sol_model_dir, monkeypatch):
    """The tiny model with its policy as the installed one, for a server started after this fixture."""
    monkeypatch.setenv("LEIR_MODEL_DIR", str(sol_model_dir))
    return sol_model_dir


def _plain(value):
    """A notification's params as dicts (pygls gives named tuples)."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return [_plain(v) for v in value] if isinstance(value, list) else value


def _rankers(client) -> list[dict]:
    return [_plain(p) for m, p in client.leir_notifications if m == "leir/ranker"]


@pytest.mark.slow
async def test_the_server_says_how_the_reasoning_is_decoded_and_restarts_on_a_change(sol_installed, bare_lsp):
    import asyncio

    from lsp_fixtures import LEIR_SETTINGS, initialize
    from lsprotocol import types

    def said(n):
        async def wait():
            while len(_rankers(bare_lsp)) < n:
                await asyncio.sleep(0.1)
        return asyncio.wait_for(wait(), 180)  # a bound on a hang (torch loads in the worker)

    await initialize(bare_lsp, settings={**LEIR_SETTINGS, "model": {"enabled": True, "sol": {"budget": 0.5}}})
    await bare_lsp.open("sol.leir", TEXT)
    await said(2)  # loaded, then the net keep its first ranking reached
    ready, ranked = _rankers(bare_lsp)[:2]
    assert ready["ranker"] == "model"
    assert ready["reasoning"] == "reasoning decoded with SOL at budget 0.5 (torch (cpu))"
    assert ready["decoding"]["mode"] == "sol" and ready["decoding"]["budget"] == 0.5
    keep = ranked["decoding"]["netKeep"]
    assert keep < 0.9
    assert ranked["reasoning"].startswith(f"reasoning decoded with SOL at budget 0.5 (net keep {keep:.2f}")
    assert any("ranked by the local model (model), reasoning decoded with SOL at budget 0.5" in m.message
               for m in bare_lsp.log_messages)

    count = len(_rankers(bare_lsp))
    bare_lsp.set_configuration({**LEIR_SETTINGS, "model": {"enabled": True, "sol": {"budget": None}}}, section="leir")
    bare_lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await said(count + 1)  # a new worker, decoding densely
    assert _rankers(bare_lsp)[count] == {"ranker": "model", "reasoning": "reasoning decoded densely",
                                         "decoding": {"mode": "dense", "why": None}}

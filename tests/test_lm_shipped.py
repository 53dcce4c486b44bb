"""The shipped model (``models/leir_models/lm/data``): it loads without
pickle as the ``model`` ranker, its weights are float16 in the file, it was
trained on the committed data (``models/data/dataset-20261204``, the
default of ``leir model train``), and on that data's test split, families
it never saw, the step it ranks first among the measured ones is faster
than the heuristic's (docs/model.md, "The shipped model")."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from leir.bridge.document import load_leir  # noqa: E402
from leir.tools.ranking import load_ranker, rank  # noqa: E402
from leir_models.lm.ranker import ModelRanker  # noqa: E402
from leir_models.lm.store import DATA_DIR, SHIPPED_FILES  # noqa: E402
from leir_models.lm.train import DEFAULT_DATA  # noqa: E402
from lm_fixtures import ROOT  # noqa: E402

pytestmark = pytest.mark.slow  # scores every candidate of 60 states


@pytest.fixture
def shipped(monkeypatch) -> ModelRanker:
    monkeypatch.delenv("LEIR_MODEL_DIR", raising=False)  # tests/conftest.py hides it from every other test
    found = load_ranker("model")
    assert isinstance(found, ModelRanker), "the shipped model did not load"
    return found


def test_the_shipped_model_is_float16_json_and_safetensors(shipped):
    from safetensors import safe_open

    assert {p.name for p in DATA_DIR.iterdir()} >= set(SHIPPED_FILES)
    assert not list(DATA_DIR.glob("*.bin")) and not list(DATA_DIR.glob("*.pt"))
    with safe_open(str(DATA_DIR / "model.safetensors"), "pt") as f:
        assert f.metadata()["dtype"] == "float16"
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float16"}
    training = json.loads((DATA_DIR / "training.json").read_text())
    assert training["data"]["dir"] == DEFAULT_DATA and (ROOT / DEFAULT_DATA / "data" / "train.parquet").is_file()


def test_it_scores_every_legal_candidate_of_an_example(shipped):
    analysis = load_leir((ROOT / "examples" / "matmul.leir").read_text()).analysis
    heuristic = rank(analysis)
    ranked = rank(analysis, ranker=ModelRanker(shipped.model, shipped.tokenizer))  # the model alone
    assert sorted(r.step.key for r in ranked) == sorted(r.step.key for r in heuristic)
    import math

    assert all(math.isfinite(r.score) and "probability" in r.facts[0] for r in ranked)
    assert len({round(r.score, 6) for r in ranked}) > len(ranked) // 2  # a ranking, not a constant


def test_on_unseen_families_its_first_step_beats_the_heuristics(shipped):
    from leir_models.lm.data import load_states
    from leir_models.lm.evaluate import HeuristicAll, evaluate

    states = [s for s in load_states(ROOT / DEFAULT_DATA)[0] if s.split == "test"]
    alone = ModelRanker(shipped.model, shipped.tokenizer)
    figures = evaluate({"model": alone, "shipped": shipped, "heuristic": HeuristicAll()}, states)
    model, heuristic = figures["rankers"]["model"], figures["rankers"]["heuristic"]
    assert figures["states"] == 60
    assert model["speedup_top1"] > heuristic["speedup_top1"]
    assert model["top1_measured"] > heuristic["top1_measured"]
    # What the entry point gives (the model ordering the heuristic's first
    # three) picks the best of all legal steps more often than either.
    shortlisted = figures["rankers"]["shipped"]
    assert shortlisted["top1_legal"] > max(model["top1_legal"], heuristic["top1_legal"])
    assert shortlisted["speedup_top1"] > heuristic["speedup_top1"]


def test_the_shipped_sol_policy_fits_the_shipped_model_and_saves_its_compute():
    """The SOL policy ships beside the model (``data/sol``, issue 16): its
    channel orders are permutations of the model's MLP channels, layer by
    layer, and decoding under it at a budget of 0.5 really runs smaller MLPs
    (fewer FLOPs per token, net keep below 1), while the same step is
    proposed as densely: the policy changes how much is computed, not which
    legal step comes first."""
    from leir_models.sol.generate import POLICY_SUBDIR, propose
    from leir_models.sol.policy import load_policy

    policy, orders = load_policy(DATA_DIR / POLICY_SUBDIR)
    config = json.loads((DATA_DIR / "config.json").read_text())
    assert policy.config.hidden_size == config["hidden_size"]
    assert len(orders) == config["num_hidden_layers"]
    assert all(sorted(o.tolist()) == list(range(config["intermediate_size"])) for o in orders)
    example = ROOT / "examples" / "matmul.leir"
    dense = propose(example, model_dir=DATA_DIR, budget=None, max_tokens=24)
    sol = propose(example, model_dir=DATA_DIR, budget=0.5, max_tokens=24)
    assert dense.net_keep == 1.0 and dense.flops_per_token == dense.flops_dense
    assert sol.net_keep < 0.8 and sol.flops_per_token < 0.9 * sol.flops_dense
    assert (sol.id, sol.args) == (dense.id, dense.args)

"""The XGBoost cost model (``leir_models.cost_model``): trained on measured
programs, saved in XGBoost's own format with a JSON sidecar (never pickle),
reloaded to the same predictions, refused when its features are not
``leir.tools.costs.FEATURE_NAMES``, updated online toward a search's own
measurements; and the shipped model loads through the entry point and
ranks the families it was not trained on better than chance."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest

xgb = pytest.importorskip("xgboost")

from leir.tools.costs import FEATURE_NAMES, CostModel, load_cost_model  # noqa: E402
from leir_models import cost_model as cm  # noqa: E402
from leir_models.cost_model import CostModelError, XGBoostCostModel, read_rows, sidecar_path  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
MEASURED = DATA / "costs" / "measured.jsonl"
SAMPLES = DATA / "dataset" / "samples.jsonl"


@pytest.fixture(scope="module")
def rows():
    found = read_rows([MEASURED])
    assert len(found) > 90
    return found


@pytest.fixture(scope="module")
def model(rows):
    return XGBoostCostModel.train(rows, "regression", rounds=40, seed=0)


def test_reading_both_formats(rows):
    assert {r.target for r in rows} == {"llvm"} and all(r.ms > 0 for r in rows)
    assert {"matmul", "softmax", "conv2d"} <= {r.family for r in rows}
    samples = read_rows([SAMPLES])
    # A sample gives two programs; programs repeated across samples of a
    # variant are one row, and each variant is its own group.
    assert len(samples) > 500
    assert len({(r.group, r.program) for r in samples}) == len(samples)
    assert {r.group for r in samples} >= {"matmul.leir/orig", "matmul.leir/v1"}
    assert {r.family for r in samples if r.workload == "matmul_cpu.leir"} == {"matmul"}
    # The machine the sample was measured on is the one its reasoning names.
    assert all(r.machine is not None and r.machine.cores == 2 for r in samples)


def test_saved_and_reloaded_the_predictions_are_identical(rows, model, tmp_path, monkeypatch):
    analyses = [r.analysis for r in rows]
    before = model.predict(analyses, "llvm")
    assert len(before) == len(rows) and all(p > 0 and math.isfinite(p) for p in before)
    assert isinstance(model, CostModel)

    def no_pickle(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "dump", no_pickle)
    monkeypatch.setattr(pickle, "dumps", no_pickle)
    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    for name in ("m.ubj", "m.json"):
        path = model.save(tmp_path / name)
        again = XGBoostCostModel.load(path)
        assert again.predict(analyses, "llvm") == before
        assert again.objective == "regression"
    raw = (tmp_path / "m.ubj").read_bytes()
    assert raw[:1] == b"{" and b"learner" in raw[:200]  # UBJSON: an object, XGBoost's own layout
    assert json.loads((tmp_path / "m.json").read_text())["learner"]["feature_names"] == list(FEATURE_NAMES)
    meta = json.loads(sidecar_path(tmp_path / "m.ubj").read_text())
    assert meta["feature_names"] == list(FEATURE_NAMES)
    assert meta["training"]["rows"] == len(rows) and "matmul" in meta["training"]["workloads"]
    assert meta["training"]["date"] and meta["objective"] == "regression"
    with pytest.raises(CostModelError):
        model.save(tmp_path / "m.pkl")


def test_a_model_of_other_features_is_refused(model, tmp_path):
    path = model.save(tmp_path / "m.ubj")
    meta_path = sidecar_path(path)
    meta = json.loads(meta_path.read_text())
    for names, said in ((list(FEATURE_NAMES)[:-1], "missing"), (list(FEATURE_NAMES) + ["eq9.new"], "unknown"),
                        (list(reversed(FEATURE_NAMES)), "another order")):
        meta_path.write_text(json.dumps(dict(meta, feature_names=names)))
        with pytest.raises(CostModelError, match=said):
            XGBoostCostModel.load(path)
    # A booster of other features with a sidecar that claims ours.
    import numpy as np

    other = xgb.train({"objective": "reg:squarederror"},
                      xgb.DMatrix(np.random.default_rng(0).random((20, 3)), label=np.arange(20.0),
                                  feature_names=["a", "b", "c"]), num_boost_round=2)
    other.save_model(str(tmp_path / "other.ubj"))
    sidecar_path(tmp_path / "other.ubj").write_text(json.dumps(meta))
    with pytest.raises(CostModelError, match="other features"):
        XGBoostCostModel.load(tmp_path / "other.ubj")
    # No sidecar, or no model: refused too.
    (tmp_path / "lone.ubj").write_bytes((tmp_path / "other.ubj").read_bytes())
    with pytest.raises(CostModelError):
        XGBoostCostModel.load(tmp_path / "lone.ubj")
    with pytest.raises(CostModelError):
        XGBoostCostModel.load(tmp_path / "absent.ubj")


def test_update_moves_predictions_toward_the_new_measurements(rows):
    model = XGBoostCostModel.train(rows, "regression", rounds=40, seed=0)
    batch = [r for r in rows if r.family == "matmul"]
    analyses = [r.analysis for r in batch]
    before = model.predict(analyses, "llvm")
    # This "machine" is 20x slower than the training data's, and orders them the other way.
    measured = [20 * p * (1 + k) for k, p in enumerate(before)]

    def error(pred):
        return sum(abs(math.log(p / m)) for p, m in zip(pred, measured))

    model.update(analyses, measured, "llvm")
    after = model.predict(analyses, "llvm")
    assert error(after) < 0.5 * error(before)
    model.update(analyses, measured, "llvm")  # more rounds on what it has seen: closer still
    assert error(model.predict(analyses, "llvm")) < error(after)
    # Other programs' predictions moved with it, but the model still predicts all of them.
    assert len(model.predict([r.analysis for r in rows], "llvm")) == len(rows)


def test_a_ranking_model_orders_and_updates_toward_a_search_order(rows):
    model = XGBoostCostModel.train(rows, "rank", rounds=40, seed=0)
    assert model.meta["calibration"]["scale"] < 0
    batch = [r for r in rows if r.family == "conv2d"]
    analyses = [r.analysis for r in batch]
    before = model.predict(analyses, "llvm")
    tau_before, _ = cm.kendall_tau(before, [r.ms for r in batch])
    # The measured order is learned: within a group, the order is what ranking fits.
    assert tau_before > 0.3
    reversed_ms = [1.0 / r.ms for r in batch]
    model.update(analyses, reversed_ms, "llvm", rounds=40)
    tau_after, _ = cm.kendall_tau(model.predict(analyses, "llvm"), reversed_ms)
    assert tau_after > cm.kendall_tau(before, reversed_ms)[0] + 0.5


def test_an_untrained_model_predicts_no_preference_then_learns():
    model = XGBoostCostModel()
    rows = read_rows([MEASURED])[:30]
    analyses = [r.analysis for r in rows]
    assert model.predict(analyses, "llvm") == [1.0] * 30
    model.update(analyses, [r.ms for r in rows], "llvm")
    assert model.booster is not None and len(set(model.predict(analyses, "llvm"))) > 1


def test_kendall_tau_and_top_k_recall():
    assert cm.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == (1.0, 6)
    assert cm.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10])[0] == -1.0
    assert cm.kendall_tau([1, 2, 3], [1, 3, 2])[0] == pytest.approx(1 / 3)
    assert cm.top_k_recall([1, 2, 3, 4], [4, 3, 2, 1], 2) == 0.0
    assert cm.top_k_recall([1, 2, 3, 4], [1, 3, 2, 4], 2) == 0.5
    assert cm.top_k_recall([2, 1, 3, 4], [1, 2, 5, 6], 2) == 1.0


def test_the_commands_train_and_evaluate_on_held_out_families(tmp_path, capsys):
    out = tmp_path / "model.ubj"
    assert cm.main(["train", "--data", str(MEASURED), "--out", str(out), "--heldout", "softmax,conv2d",
                    "--objective", "regression", "--rounds", "30"]) == 0
    printed = capsys.readouterr().out
    assert "holding out" in printed and "conv2d" in printed and "softmax" in printed
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["training"]["heldout"] == ["conv2d", "softmax"]
    assert "conv2d" not in meta["training"]["families"] and "--heldout softmax,conv2d" in meta["training"]["command"]
    assert cm.main(["evaluate", "--model", str(out), "--data", str(MEASURED), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["families"]) == {"conv2d", "softmax"}  # the families it was not trained on
    for e in result["families"].values():
        assert -1 <= e["kendall_tau"] <= 1 and e["programs"] >= 8


def test_the_shipped_model_loads_through_the_entry_point_and_ranks_held_out_families():
    model = cm.load_default()
    assert isinstance(model, CostModel) and model.meta["feature_names"] == list(FEATURE_NAMES)
    training = model.meta["training"]
    assert training["rows"] > 500 and training["command"].startswith("python -m leir_models.cost_model train")
    heldout = set(training["heldout"])
    assert heldout and not heldout & set(training["families"])
    # Installed (pip install -e .): found by leir through the entry point.
    found = load_cost_model()
    if found is None:
        pytest.skip("the leir.cost_models entry point is not installed (pip install -e .)")
    assert isinstance(found, XGBoostCostModel) and found.meta == model.meta
    # The families it never saw, from the committed data: better than chance.
    rows = [r for r in read_rows([MEASURED, SAMPLES]) if r.family in heldout]
    assert rows
    result = cm.evaluate(model, rows)
    assert cm.summary(result)["kendall_tau"] > 0.1, cm.format_evaluation(result)

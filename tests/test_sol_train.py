"""leir_models.sol.train and ``leir model train-sol`` on the tiny model: the
same seed gives the same policy bit for bit, only safetensors and JSON are
written, the static search covers what it claims, the evaluation reports
every comparison, and a user's mistake exits 2 with a message."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from leir_models.lm.cli import main as cli_main  # noqa: E402
from leir_models.sol import train as st  # noqa: E402
from leir_models.sol.policy import ACTIONS, load_policy  # noqa: E402

torch.set_num_threads(1)

FAST = st.SOL_TRAIN.with_(steps=2, sequences_per_step=1, episodes_per_sequence=1, group=3, calibration_sequences=2,
                          eval_sequences=2, eval_episodes=1, eval_random=1)


@pytest.fixture(scope="module")
def trained(lm_model_dir, lm_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sol-a")
    log = st.train_sol(lm_model_dir, lm_data, out, FAST, log=lambda line: None)
    return out, log


def test_writes_safetensors_and_json_only(trained):
    out, log = trained
    assert sorted(f.name for f in out.iterdir()) == ["policy.json", "policy.safetensors", "train_log.json"]
    assert json.loads((out / "train_log.json").read_text()) == json.loads(json.dumps(log))
    policy, orders = load_policy(out)
    assert len(orders) == 2 and policy.config.episode == 16  # TINY_MODEL has 2 layers


def test_same_seed_same_weights_other_seed_other_weights(trained, lm_model_dir, lm_data, tmp_path):
    out, _ = trained
    st.train_sol(lm_model_dir, lm_data, tmp_path / "b", FAST, log=lambda line: None, evaluate_after=False)
    st.train_sol(lm_model_dir, lm_data, tmp_path / "c", FAST.with_(seed=1), log=lambda line: None,
                 evaluate_after=False)
    a, b, c = (load_file(str(d / "policy.safetensors")) for d in (out, tmp_path / "b", tmp_path / "c"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if k.startswith("policy."))


def test_training_log_and_evaluation_figures(trained):
    _, log = trained
    assert [h["step"] for h in log["history"]] == [1, 2]
    assert all(h["entropy"] > 0 for h in log["history"])
    ev = log["evaluation"]
    assert ev["tokens"] == 2 * 16 and set(ev["targets"]) == {"0.5", "0.7"}
    for t, row in ev["targets"].items():
        for name in ("sol", "sol_greedy", "static_best", "random_matched"):
            assert row[name]["perplexity"] > 1
        # The static configuration meets the budget it was searched at.
        for static in ("static_best", "static_matched"):
            assert row[static]["net_keep"] <= row[static]["searched_at"] + 1e-9
        assert row["static_best"]["searched_at"] == float(t)
        assert row["static_matched"]["searched_at"] == pytest.approx(row["sol"]["net_keep"], abs=1e-4)
    # At 0.5 the only configuration is every token at 0.5.
    assert ev["targets"]["0.5"]["static_best"]["mix"] == "16x0.5"


def test_static_mixes_meet_the_budget_and_are_maximal():
    for budget in (0.5, 0.7, 0.85, 1.0):
        mixes = st.static_mixes(16, budget, 704)
        assert mixes and all(sum(m) == 16 for m in mixes)
        assert all(st.mix_net_keep(m, 704) <= budget + 1e-9 for m in mixes)
        singles = {ACTIONS[m.index(16)] for m in mixes if 16 in m}
        assert singles == {k for k in ACTIONS if k <= budget}
    assert (4, 4, 8) in st.static_mixes(16, 0.7, 704)  # 4x1 + 4x0.75 + 8x0.5 = 0.6875
    assert (0, 16, 0) not in st.static_mixes(16, 0.7, 704)


def test_interleave_keeps_the_counts_spread():
    s = st.interleave((6, 0, 10))
    assert len(s) == 16 and s.count(0) == 6 and s.count(2) == 10
    assert "0, 0" not in ", ".join(map(str, s))  # no two full-compute steps in a row


def test_group_advantages_are_relative():
    adv = st.group_advantages(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert abs(float(adv.mean())) < 1e-6 and adv.argmax() == 3
    assert torch.equal(st.group_advantages(torch.tensor([2.0, 2.0])), torch.zeros(2))


def test_budget_penalty_is_soft_past_the_tolerance():
    cfg = st.SOL_TRAIN
    assert st.budget_penalty(cfg, 0.51, 0.5) == 0.0
    assert st.budget_penalty(cfg, 0.6, 0.5) == pytest.approx(cfg.budget_weight * 16 * 0.08)


def test_cli_missing_model_dir_is_a_message_and_exit_2(lm_data, tmp_path, capsys):
    code = cli_main(["train-sol", "--model", str(tmp_path / "nope"), "--data", str(lm_data),
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "nope" in err and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_model_dir_without_a_model_is_a_message_and_exit_2(lm_data, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = cli_main(["train-sol", "--model", str(tmp_path / "empty"), "--data", str(lm_data),
                     "--out", str(tmp_path / "out")])
    assert code == 2 and "config.json is missing" in capsys.readouterr().err


def test_cli_trains(lm_model_dir, lm_data, tmp_path):
    code = cli_main(["train-sol", "--model", str(lm_model_dir), "--data", str(lm_data), "--out", str(tmp_path / "p"),
                     "--steps", "1", "--seed", "3", "--threads", "1", "--no-eval"])
    assert code == 0
    log = json.loads((tmp_path / "p" / "train_log.json").read_text())
    assert log["config"]["seed"] == 3 and log["config"]["steps"] == 1 and log["evaluation"] is None


TEXT = ("The quick brown fox jumps over the lazy dog. " * 40 + "Pack my box with five dozen liquor jugs. " * 40)


def test_text_sequences_cut_a_text_into_pieces_and_hold_every_fifth_out(lm_model_dir, monkeypatch):
    from leir_models.lm import tokenizer as tk
    from leir_models.lm.store import load_model

    _, tok = load_model(lm_model_dir)
    monkeypatch.setattr(st, "TEXT_SEQUENCE", 33)
    ids = tk.encode(tok, TEXT)
    train = st.text_sequences(TEXT, tok, "train", 1024)
    heldout = st.text_sequences(TEXT, tok, "heldout", 1024)
    pieces = len(ids) // 32
    assert len(train) + len(heldout) == pieces and len(heldout) == pieces // 5
    assert all(len(s) == 33 and s[0] == tk.BOS_ID for s in train + heldout)
    # in the text's order: pieces 0-3 train, 4 held out, ...
    assert train[0][1:] == ids[:32] and heldout[0][1:] == ids[4 * 32:5 * 32] and train[4][1:] == ids[5 * 32:6 * 32]
    assert len(st.text_sequences(TEXT, tok, "train", 17)[0]) == 17  # never past the model's context
    with pytest.raises(ValueError, match="'test'"):
        st.text_sequences(TEXT, tok, "test", 1024)


def test_cli_trains_on_a_text_file_and_a_missing_one_is_a_message(lm_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(st, "TEXT_SEQUENCE", 80)
    text = tmp_path / "general.txt"
    text.write_text(TEXT * 3, encoding="utf-8")
    code = cli_main(["train-sol", "--model", str(lm_model_dir), "--text", str(tmp_path / "nope.txt"),
                     "--out", str(tmp_path / "q")])
    err = capsys.readouterr().err
    assert code == 2 and "nope.txt does not exist" in err and "Traceback" not in err
    code = cli_main(["train-sol", "--model", str(lm_model_dir), "--text", str(text), "--out", str(tmp_path / "p"),
                     "--steps", "1", "--threads", "1", "--no-eval"])
    assert code == 0
    log = json.loads((tmp_path / "p" / "train_log.json").read_text())
    assert log["source"] == "text" and log["data"] == str(text) and log["train_sequences"] > 0

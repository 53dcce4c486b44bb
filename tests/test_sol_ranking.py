"""leir_models.sol.ranking on the tiny model (``lm_model_dir``) and a policy
with random weights: the dense mode's scores are the ranker's, a smaller
keep changes them, the matched and shuffled schedules keep SOL's own net
keep exactly, the figures count what they say, the same seed gives the same
figures, and ``leir model evaluate-sol`` runs and turns a missing directory
into a message."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from leir_models.lm import tokenizer as tk  # noqa: E402
from leir_models.lm.cli import main as cli_main  # noqa: E402
from leir_models.lm.data import candidate_text, load_states  # noqa: E402
from leir_models.lm.ranker import logprobs  # noqa: E402
from leir_models.lm.store import load_model  # noqa: E402
from leir_models.sol import knobs, ranking  # noqa: E402
from leir_models.sol.policy import ACTIONS, PolicyConfig, SolPolicy  # noqa: E402
from sol_fixtures import orders, prepared, seqs  # noqa: E402,F401

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(lm_model_dir, lm_data, orders):
    model = prepared(lm_model_dir, orders)
    _, tok = load_model(lm_model_dir)
    torch.manual_seed(0)
    policy = SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).eval()
    states = [s for s in load_states(lm_data)[0] if len(s.candidates) >= 2]
    return model, tok, policy, orders, states


def prompt_and_conts(model, tok, state):
    from leir.bridge.document import load_leir
    from leir_models.lm.ranker import ModelRanker

    prompt = ModelRanker(model, tok, machine=state.machine or None).prompt_ids(load_leir(state.before).analysis,
                                                                            state.target)
    return prompt, [tk.encode(tok, candidate_text(c.step)) for c in state.candidates]


def test_dense_scores_are_the_rankers_and_a_smaller_keep_changes_them(setup):
    model, tok, policy, _, states = setup
    prompt, conts = prompt_and_conts(model, tok, states[0])
    scored = ranking.candidate_scores(model, policy, prompt, conts, (0.5,), torch.Generator().manual_seed(0))
    assert set(scored) == set(ranking.mode_names((0.5,)))
    dense = [s for s, _ in scored["dense"]]
    assert dense == pytest.approx(logprobs(model, prompt, conts), abs=2e-3)
    assert all(k == 1.0 for _, k in scored["dense"])
    half = [s for s, _ in scored["static 0.5"]]
    assert max(abs(a - b) for a, b in zip(half, dense)) > 1e-3  # the knob acts on the scores
    inter = model.config.intermediate_size
    assert {k for _, k in scored["static 0.5"]} == {knobs.keep_width(inter, 0.5) / inter}


def test_matched_and_shuffled_schedules_keep_sols_net_keep(setup):
    model, tok, policy, _, states = setup
    prompt, conts = prompt_and_conts(model, tok, states[1])
    scored = ranking.candidate_scores(model, policy, prompt, conts, (0.5, 0.7), torch.Generator().manual_seed(1))
    for t in ("0.5", "0.7"):
        sol = [k for _, k in scored[f"sol {t}"]]
        assert [k for _, k in scored[f"static matched {t}"]] == pytest.approx(sol)
        assert [k for _, k in scored[f"random {t}"]] == pytest.approx(sol)
        assert all(min(ACTIONS) - 1e-6 <= k <= 1.0 for k in sol)


def test_figures_count_what_they_say_and_the_seed_fixes_them(setup):
    model, tok, policy, _, states = setup
    a = ranking.evaluate(model, tok, policy, states[:3], (0.5,), seed=4)
    b = ranking.evaluate(model, tok, policy, states[:3], (0.5,), seed=4)
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    assert a["states"] == 3 and a["skipped"] == 0
    assert a["candidates"] == sum(len(s.candidates) for s in states[:3])
    dense = a["modes"]["dense"]
    assert dense["same_top1_as_dense"] == 1.0 and dense["mean_abs_delta"] == 0.0 and dense["net_keep"] == 1.0
    for r in a["modes"].values():
        assert 0.0 <= r["top1_measured"] <= 1.0 and 0.0 <= r["same_top1_as_dense"] <= 1.0
        assert r["speedup_top1"] > 0
    assert a["modes"]["static 0.5"]["mean_abs_delta"] > 0
    assert a["modes"]["sol 0.5"]["net_keep"] == pytest.approx(a["modes"]["random 0.5"]["net_keep"])
    # top-1 among the measured, recomputed from the dense scores of each state
    hits = 0
    for st in states[:3]:
        prompt, conts = prompt_and_conts(model, tok, st)
        lps = logprobs(model, prompt, conts)
        best = min(range(len(st.candidates)), key=lambda i: st.candidates[i].latency_ms)
        hits += max(range(len(lps)), key=lambda i: lps[i]) == best
    assert dense["top1_measured"] == pytest.approx(hits / a["states"], abs=1e-4)  # rounded to 4 places


def test_cli_prints_the_table_and_json(lm_model_dir, lm_data, setup, tmp_path, capsys):
    _, _, policy, channel_orders, _ = setup
    policy.save(tmp_path / "sol", channel_orders)
    code = cli_main(["evaluate-sol", "--model", str(lm_model_dir), "--policy", str(tmp_path / "sol"),
                     "--data", str(lm_data), "--split", "heldout", "--states", "2", "--targets", "0.5", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    figures = json.loads(out)
    assert figures["split"] == "heldout" and figures["targets"] == [0.5] and figures["states"] >= 1
    assert list(figures["modes"]) == ranking.mode_names((0.5,))
    code = cli_main(["evaluate-sol", "--model", str(lm_model_dir), "--policy", str(tmp_path / "sol"),
                     "--data", str(lm_data), "--split", "heldout", "--states", "1", "--targets", "0.5"])
    assert code == 0 and "| sol 0.5 |" in capsys.readouterr().out


def test_cli_missing_policy_is_a_message_and_exit_2(lm_model_dir, lm_data, tmp_path, capsys):
    code = cli_main(["evaluate-sol", "--model", str(lm_model_dir), "--policy", str(tmp_path / "nope"),
                     "--data", str(lm_data)])
    err = capsys.readouterr().err
    assert code == 2 and "nope" in err and "Traceback" not in err


@pytest.mark.parametrize("flags, said", [(["--states", "-1"], "--states -1"), (["--targets", "0.5,1.5"], "(0, 1]"),
                                         (["--targets", "half"], "half")])
def test_cli_bad_numbers_are_a_message_and_exit_2(lm_model_dir, lm_data, flags, said, capsys):
    code = cli_main(["evaluate-sol", "--model", str(lm_model_dir), "--data", str(lm_data), *flags])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err

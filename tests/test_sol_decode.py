"""leir_models.sol.decode on the tiny trained model (``lm_model_dir``): dense
decoding is the plain model's greedy decoding, keep 0.5 runs smaller
matrix products, the FLOPs counted from the shapes are the ones that ran,
teacher-forced scoring at keep 1 is the dense model's, and the cache is
restored between rollouts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_sol_knobs import MatmulShapes  # noqa: E402

from leir_models.lm.data import load_records  # noqa: E402
from leir_models.lm.store import load_model  # noqa: E402
from leir_models.sol import decode, knobs  # noqa: E402
from leir_models.sol.policy import ACTIONS, PolicyConfig, SolPolicy  # noqa: E402
from leir_models.sol.train import sequences  # noqa: E402

torch.set_num_threads(1)

E = 16


@pytest.fixture(scope="module")
def loaded(lm_model_dir, lm_data):
    model, tok = load_model(lm_model_dir)
    seqs = sequences(load_records(lm_data)[0], tok, "train", model.config.max_position_embeddings)
    orders = knobs.reorder_channels(model, knobs.channel_importance(model, [torch.tensor([s]) for s in seqs[:4]]))
    decode.prepare(model)
    return model, seqs, orders


@pytest.fixture(scope="module")
def plain(lm_model_dir):
    return load_model(lm_model_dir)[0]


def greedy_reference(model, prompt, n):
    """The plain model's greedy decoding, the whole sequence re-read each token (no cache)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_dense_decode_is_the_plain_models_greedy_decode(loaded, plain):
    model, seqs, _ = loaded
    prompt = seqs[0][:40]
    out = decode.generate(model, prompt, 12, "dense", stop_ids=[])
    assert out.tokens == greedy_reference(plain, prompt, 12)
    assert out.actions == [0] * 11 and out.net_keep == 1.0
    assert out.flops_per_token == out.flops_dense > 0 and out.tokens_per_s > 0


def test_tokens_never_to_be_chosen_are_not(loaded, plain):
    model, seqs, _ = loaded
    prompt = seqs[0][:40]
    free = decode.generate(model, prompt, 12, "dense", stop_ids=[])
    banned = sorted(set(free.tokens))[:2]  # tokens greedy decoding does choose here
    out = decode.generate(model, prompt, 12, "dense", stop_ids=[], never_ids=banned)
    assert out.tokens and not set(out.tokens) & set(banned)
    # Up to the first banned token it is the same greedy decoding.
    first = min(free.tokens.index(t) for t in banned)
    assert out.tokens[:first] == free.tokens[:first]


def test_reordered_and_sliceable_model_keeps_the_dense_logits(loaded, plain):
    model, seqs, _ = loaded
    ids = torch.tensor([seqs[1][:50]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def decode_step_products(model, prompt, mode, action=0, n=5):
    """The (m, k, n) of every matrix product of the single-token passes."""
    with torch.no_grad(), MatmulShapes() as rec:
        out = decode.generate(model, prompt, n, mode, action=action, stop_ids=[])
    prods = []
    for _f, shapes in rec.calls:
        (m, k), (k2, n_) = shapes[-2], shapes[-1]
        assert k == k2
        if m == 1:  # the prefill reads len(prompt) > 1 rows at once
            prods.append((m, k, n_))
    return prods, out


@pytest.mark.parametrize("keep", [0.75, 0.5])
def test_static_keep_runs_smaller_products(loaded, keep):
    model, seqs, _ = loaded
    cfg = model.config
    hidden, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    n = knobs.keep_width(inter, keep)
    prompt = seqs[0][:30]
    dense, _ = decode_step_products(model, prompt, "dense")
    small, out = decode_step_products(model, prompt, "static", ACTIONS.index(keep))
    steps = len(out.actions)
    assert steps == 4 and len(small) == len(dense)
    # Dense: gate, up (H -> I) and down (I -> H) of every layer, every step.
    assert sum(1 for p in dense if p == (1, hidden, inter)) == 2 * layers * steps
    assert sum(1 for p in dense if p == (1, inter, hidden)) == layers * steps
    # Sliced: nothing of width I is left, and the multiply-adds drop by exactly
    # the channels cut, 3 x H x (I - n) per layer per step.
    assert all(inter not in p[1:] for p in small)
    macs = lambda ps: sum(m * k * n_ for m, k, n_ in ps)  # noqa: E731
    assert macs(dense) - macs(small) == 3 * hidden * (inter - n) * layers * steps
    if keep == 0.75:
        assert sum(1 for p in small if p == (1, hidden, n)) == 2 * layers * steps


def test_flops_per_token_are_the_products_that_ran(loaded):
    model, seqs, _ = loaded
    cfg = model.config
    prompt = seqs[0][:30]
    prods, out = decode_step_products(model, prompt, "static", ACTIONS.index(0.5))
    # Attention's QK and AV run in a fused kernel the mode does not record: add them.
    hd = cfg.hidden_size // cfg.num_attention_heads
    recorded = 2 * sum(m * k * n_ for m, k, n_ in prods)
    attention = sum(4 * cfg.num_attention_heads * hd * (len(prompt) + i + 1) * cfg.num_hidden_layers
                    for i in range(len(out.actions)))
    expected = sum(decode.flops_per_token(cfg, len(prompt) + i + 1, 0.5) for i in range(len(out.actions)))
    assert recorded + attention == expected
    assert out.flops_per_token == expected / len(out.actions)
    assert out.flops_per_token < out.flops_dense


def test_sol_mode_picks_actions_and_counts_the_policy(loaded):
    model, seqs, _ = loaded
    torch.manual_seed(0)
    policy = SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).eval()
    out = decode.generate(model, seqs[0][:30], 20, "sol", policy=policy, target=0.5, stop_ids=[])
    assert len(out.actions) == 19 and set(out.actions) <= {0, 1, 2}
    inter = model.config.intermediate_size
    assert out.net_keep == pytest.approx(sum(knobs.keep_width(inter, ACTIONS[a]) / inter for a in out.actions) / 19)
    assert out.flops_policy == policy.policy_flops()
    model_flops = sum(decode.flops_per_token(model.config, 30 + i + 1, ACTIONS[a]) for i, a in enumerate(out.actions))
    assert out.flops_per_token == pytest.approx(model_flops / 19 + policy.policy_flops())
    with pytest.raises(ValueError):
        decode.generate(model, seqs[0][:30], 4, "sol")


def episode(seqs, p=40):
    ids = seqs[0]
    assert len(ids) >= p + E + 1
    return ids, p, ids[p:p + E + 1]


def test_teacher_forced_at_keep_one_is_the_dense_model(loaded, plain):
    model, seqs, _ = loaded
    ids, p, tokens = episode(seqs)
    state = decode.prefill(model, ids[:p])
    r = decode.teacher_forced(model, state, tokens, [0] * E)
    ref = decode.dense_logprobs(plain, ids[:p + E + 1])[p:p + E]
    torch.testing.assert_close(r.token_logprobs, ref, rtol=0, atol=1e-4)
    assert r.net_keep == 1.0


def test_cache_is_restored_between_rollouts(loaded, plain):
    model, seqs, _ = loaded
    ids, p, tokens = episode(seqs)
    state = decode.prefill(model, ids[:p])
    cheap = [2] * E
    first = decode.teacher_forced(model, state, tokens, cheap)
    assert state.cache.get_seq_length() == p
    second = decode.teacher_forced(model, state, tokens, cheap)
    assert torch.equal(first.token_logprobs, second.token_logprobs)
    dense = decode.teacher_forced(model, state, tokens, [0] * E)
    ref = decode.dense_logprobs(plain, ids[:p + E + 1])[p:p + E]
    torch.testing.assert_close(dense.token_logprobs, ref, rtol=0, atol=1e-4)
    # The cheap schedule really scored something else (else this test proves nothing).
    assert not torch.allclose(first.token_logprobs, dense.token_logprobs, atol=1e-3)


def test_replay_dense_continues_the_clean_cache(loaded, plain):
    model, seqs, _ = loaded
    ids, p, tokens = episode(seqs)
    state = decode.prefill(model, ids[:p])
    decode.teacher_forced(model, state, tokens, [2] * E)
    nxt = decode.replay_dense(model, state, tokens[:-1])
    assert nxt.length == p + E and nxt.cache.get_seq_length() == p + E
    with torch.no_grad():
        ref = plain(input_ids=torch.tensor([ids[:p + E]])).logits[0, -1]
    torch.testing.assert_close(nxt.logits, ref, rtol=0, atol=1e-4)


def test_policy_rollout_records_what_training_needs(loaded):
    model, seqs, _ = loaded
    ids, p, tokens = episode(seqs)
    torch.manual_seed(0)
    policy = SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).eval()
    state = decode.prefill(model, ids[:p])
    g = torch.Generator().manual_seed(1)
    r = decode.teacher_forced(model, state, tokens, policy=policy, target=0.7, generator=g)
    assert r.features.shape == (E, policy.in_features)
    assert r.action_logprobs.shape == (E,) and bool(torch.all(r.action_logprobs <= 0))
    # Replaying the schedule it sampled gives the same token log-probabilities.
    again = decode.teacher_forced(model, state, tokens, r.actions)
    torch.testing.assert_close(again.token_logprobs, r.token_logprobs, rtol=0, atol=1e-6)
    # The position feature counts the episode's steps; the first step has no previous action.
    d = model.config.hidden_size
    assert r.features[:, 2 * d + 2].tolist() == [i / E for i in range(E)]
    assert r.features[0, -3:].sum() == 0 and r.features[1, -3:].sum() == 1


def test_prepare_applies_a_stored_order(loaded, lm_model_dir):
    model, _seqs, orders = loaded
    fresh = decode.prepare(load_model(lm_model_dir)[0], orders)
    for a, b in zip(knobs.mlp_layers(fresh), knobs.mlp_layers(model)):
        assert torch.equal(a.gate_proj.weight, b.gate_proj.weight)
        assert torch.equal(a.down_proj.weight, b.down_proj.weight)


def test_the_chooser_picks_the_most_likely_action_or_samples_the_policys_distribution():
    logits = torch.tensor([0.3, 1.7, -0.8])
    logp = torch.log_softmax(logits, -1)
    action, lp = decode.Chooser.pick(logits, True, None)
    assert action == 1 and lp == pytest.approx(float(logp[1]), abs=1e-6)
    generator = torch.Generator().manual_seed(0)
    draws = [decode.Chooser.pick(logits, False, generator) for _ in range(20000)]
    counts = torch.bincount(torch.tensor([a for a, _ in draws]), minlength=3).double() / len(draws)
    # 20,000 seeded draws: each share within 0.015 of its probability (about 4 standard errors)
    assert torch.allclose(counts, logp.exp().double(), atol=0.015)
    assert all(lp == pytest.approx(float(logp[a]), abs=1e-6) for a, lp in draws[:50])
    again = torch.Generator().manual_seed(0)
    assert [decode.Chooser.pick(logits, False, again)[0] for _ in range(200)] == [a for a, _ in draws[:200]]
    # an action the policy rules out is never drawn
    assert {decode.Chooser.pick(torch.tensor([0.0, -float("inf"), 0.0]), False, generator)[0]
            for _ in range(500)} == {0, 2}

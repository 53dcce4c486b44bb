"""leir_models.sol.policy: the policy's shapes, its budget bias, its cost
counted from its layers, and saving as safetensors + JSON."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from leir_models.sol import policy as pol  # noqa: E402

torch.set_num_threads(1)

D = 32


def make(seed=0, width=64):
    torch.manual_seed(seed)
    return pol.SolPolicy(pol.PolicyConfig(hidden_size=D, width=width)).eval()


def random_features(policy, target, n=32, seed=3):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        hidden, embed = torch.randn(D, generator=g) * 4, torch.randn(D, generator=g)
        previous = None if i % 4 == 0 else i % 3
        rows.append(policy.features(hidden, embed, target, float(torch.randn(1, generator=g)) * 0.1, (i % 16) / 16,
                                    previous))
    return torch.stack(rows)


def expected_keep(policy, target):
    with torch.no_grad():
        probs = torch.softmax(policy(random_features(policy, target)), -1)  # (N, A)
    return float((probs @ torch.tensor(pol.ACTIONS)).mean())


def test_features_and_logits_shapes():
    p = make()
    f = p.features(torch.randn(D), torch.randn(D), 0.7, 0.0, 0.0, None)
    assert f.shape == (p.in_features,) == (2 * D + 3 + len(pol.ACTIONS),)
    assert f[-3:].sum() == 0  # no previous action at an episode's start
    f2 = p.features(torch.randn(D), torch.randn(D), 0.7, 0.0, 0.5, 2)
    assert f2[-3:].tolist() == [0.0, 0.0, 1.0]
    assert p(f).shape == (3,)
    assert p(torch.stack([f, f2, f])).shape == (3, 3)


def test_budget_bias_favours_the_level_nearest_the_target_by_construction():
    p = make()
    for target, level in ((0.5, 0.5), (0.55, 0.5), (0.7, 0.75), (0.8, 0.75), (0.95, 1.0), (1.0, 1.0)):
        assert int(p.budget_bias(torch.tensor(target)).argmax()) == pol.ACTIONS.index(level), target


def test_untrained_policy_expected_keep_follows_the_target():
    p = make()
    targets = (0.5, 0.6, 0.7, 0.85, 1.0)
    keeps = [expected_keep(p, t) for t in targets]
    assert keeps == sorted(keeps) and keeps[0] < keeps[-1] - 0.3
    assert all(abs(k - t) < 0.08 for k, t in zip(keeps, targets)), keeps
    # It is the budget head that does it: without it the trend is gone
    # (the target still enters the network, whose output layer starts small).
    with torch.no_grad():
        p.budget_w.zero_()
        p.budget_b.zero_()
    flat = [expected_keep(p, t) for t in (0.5, 1.0)]
    assert abs(flat[1] - flat[0]) < 0.05


def test_net_keep_is_the_mlp_share_kept():
    assert [pol.net_keep(a) for a in range(3)] == [1.0, 0.75, 0.5]
    assert pol.net_keep(1, intermediate=704) == 528 / 704
    assert pol.net_keep(1, intermediate=10) == 8 / 10  # 7.5 channels round up


def test_policy_flops_are_counted_from_its_layers():
    p = make(width=48)
    linears = [m for m in p.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3
    assert p.policy_flops() == 2 * sum(m.weight.numel() for m in linears) + 2 * len(pol.ACTIONS)
    assert p.policy_flops() == 2 * ((2 * D + 6) * 48 + 48 * 48 + 48 * 3) + 6


def test_save_and_load_round_trip(tmp_path):
    p = make(seed=5)
    orders = [torch.randperm(64), torch.randperm(64)]
    p.save(tmp_path, orders)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["policy.json", "policy.safetensors"]
    q, loaded = pol.load_policy(tmp_path)
    assert q.config == p.config
    for (k, v), (k2, v2) in zip(p.state_dict().items(), q.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    assert len(loaded) == 2 and all(torch.equal(a, b) for a, b in zip(orders, loaded))
    f = random_features(p, 0.7, n=4)
    assert torch.equal(p(f), q(f))
    # safetensors, not a pickle: the file starts with its JSON header's length.
    raw = (tmp_path / "policy.safetensors").read_bytes()
    header = int.from_bytes(raw[:8], "little")
    assert raw[8:9] == b"{" and header < len(raw)


def test_load_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="policy.safetensors"):
        pol.load_policy(tmp_path)

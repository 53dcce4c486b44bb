"""leir_models.sol.knobs: channel importance, the function-preserving
reorder, and the sliced MLP forward as a physically smaller product.

Two tiny random Llamas: our own model's shape (``leir_models.lm.config``
with a test size) and a SmolLM2-like one (grouped-query attention, tied
embeddings), both ``transformers.LlamaForCausalLM``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from leir_models.lm.config import llama_config  # noqa: E402
from leir_models.sol import knobs  # noqa: E402

torch.set_num_threads(1)

VOCAB = 97
OURS = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 2,
        "intermediate_size": 128, "max_position_embeddings": 64}
SMOLLM2_LIKE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 160, "max_position_embeddings": 64, "rope_theta": 100000.0}


def make_model(shape):
    torch.manual_seed(0)
    config = llama_config(shape, vocab_size=VOCAB)
    model = transformers.LlamaForCausalLM(config).eval()
    # Random init gives every channel about the same scale; spread them so
    # that the importance order is far from the identity.
    with torch.no_grad():
        for mlp in knobs.mlp_layers(model):
            mlp.up_proj.weight.mul_(torch.rand(mlp.up_proj.out_features, 1) * 4)
    return model


@pytest.fixture(params=[OURS, SMOLLM2_LIKE], ids=["ours", "smollm2-like"])
def model(request):
    return make_model(request.param)


def batches(n=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (2, 12), generator=g) for _ in range(n)]


class MatmulShapes(TorchDispatchMode):
    """Records the operand shapes of every matrix product actually run."""

    OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.linear.default, torch.ops.aten.matmul.default}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.OPS:
            self.calls.append((func, [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def test_finds_one_mlp_per_layer(model):
    layers = knobs.mlp_layers(model)
    assert len(layers) == model.config.num_hidden_layers
    assert all(type(m).__name__ == "LlamaMLP" for m in layers)


def test_importance_is_the_mean_absolute_down_proj_input(model):
    data = batches()
    imp = knobs.channel_importance(model, data)
    # The same statistic computed by hand for layer 1, from its input.
    mlp = model.model.layers[1].mlp
    seen = []
    handle = model.model.layers[1].mlp.register_forward_pre_hook(lambda _m, a: seen.append(a[0]))
    with torch.no_grad():
        for b in data:
            model(input_ids=b)
    handle.remove()
    x = torch.cat([s.reshape(-1, s.shape[-1]) for s in seen])
    expected = (mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)).abs().mean(dim=0)
    assert len(imp) == model.config.num_hidden_layers
    torch.testing.assert_close(imp[1], expected, rtol=1e-4, atol=1e-7)


def test_importance_leaves_padding_out():
    model = make_model(OURS)
    ids = torch.randint(0, VOCAB, (1, 8))
    padded = torch.cat([ids, torch.zeros(1, 8, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 8), torch.zeros(1, 8)], dim=1).long()
    plain = knobs.channel_importance(model, [ids])
    masked = knobs.channel_importance(model, [{"input_ids": padded, "attention_mask": mask}])
    unmasked = knobs.channel_importance(model, [padded])
    torch.testing.assert_close(masked[0], plain[0], rtol=1e-4, atol=1e-7)
    assert not torch.allclose(unmasked[0], plain[0], rtol=1e-4, atol=1e-7)


def test_reorder_preserves_the_dense_logits(model):
    ids = batches(1, seed=5)[0]
    with torch.no_grad():
        before = model(input_ids=ids).logits
    orders = knobs.reorder_channels(model, knobs.channel_importance(model, batches()))
    with torch.no_grad():
        after = model(input_ids=ids).logits
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    # The permutation did move channels, and the importance is now decreasing.
    identity = torch.arange(len(orders[0]))
    assert all(not torch.equal(o, identity) for o in orders)
    for imp in knobs.channel_importance(model, batches()):
        assert torch.all(imp[:-1] >= imp[1:] - 1e-6)


def test_reorder_rejects_mismatched_importance(model):
    with pytest.raises(ValueError):
        knobs.reorder_channels(model, [torch.ones(3)] * model.config.num_hidden_layers)


def test_keep_one_is_the_dense_mlp_exactly(model):
    mlp = knobs.mlp_layers(model)[0]
    x = torch.randn(2, 5, model.config.hidden_size)
    with torch.no_grad():
        assert torch.equal(knobs.sliced_mlp_forward(mlp, x, 1.0), mlp(x))


@pytest.mark.parametrize("keep", knobs.MLP_LEVELS)
def test_sliced_forward_runs_a_smaller_product(model, keep):
    mlp = knobs.mlp_layers(model)[0]
    hidden, inter = model.config.hidden_size, model.config.intermediate_size
    n = knobs.keep_width(inter, keep)
    x = torch.randn(1, 4, hidden)
    with torch.no_grad(), MatmulShapes() as rec:
        knobs.sliced_mlp_forward(mlp, x, keep)
    shapes = [s for _f, s in rec.calls]
    # gate and up: [T, H] x [H, n]; down: [T, n] x [n, H]. Nothing of width I.
    assert shapes == [[(4, hidden), (hidden, n)], [(4, hidden), (hidden, n)], [(4, n), (n, hidden)]]
    if keep < 1:
        assert all(inter not in shape for s in shapes for shape in s)


def test_sliced_forward_equals_the_truncated_mlp_and_the_prefix(model):
    mlp = knobs.mlp_layers(model)[0]
    x = torch.randn(3, model.config.hidden_size)
    n = knobs.keep_width(model.config.intermediate_size, 0.5)
    with torch.no_grad():
        sliced = knobs.sliced_mlp_forward(mlp, x, 0.5)
        small = knobs.truncated_mlp(mlp, 0.5)
        h = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
        h[:, n:] = 0
        masked = mlp.down_proj(h)
        assert small.gate_proj.weight.shape == (n, model.config.hidden_size)
        assert small.down_proj.weight.shape == (model.config.hidden_size, n)
        torch.testing.assert_close(small(x), sliced, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sliced, masked, rtol=1e-5, atol=1e-6)


def test_reordering_keeps_more_of_the_output_than_no_reordering():
    model = make_model(OURS)
    x = torch.randn(64, model.config.hidden_size)
    raw = knobs.mlp_layers(model)[0]
    with torch.no_grad():
        dense = raw(x)
        err_raw = (knobs.sliced_mlp_forward(raw, x, 0.5) - dense).norm()
    knobs.reorder_channels(model, knobs.channel_importance(model, batches()))
    with torch.no_grad():
        err_sorted = (knobs.sliced_mlp_forward(knobs.mlp_layers(model)[0], x, 0.5) - dense).norm()
    assert err_sorted < 0.8 * err_raw


def test_installed_wrappers_change_the_model_with_keep(model):
    ids = batches(1, seed=7)[0]
    with torch.no_grad():
        dense = model(input_ids=ids).logits
        wrappers = knobs.install_sliced_mlps(model)
        assert len(wrappers) == model.config.num_hidden_layers
        assert knobs.mlp_layers(model) == [w.mlp for w in wrappers]
        assert torch.equal(model(input_ids=ids).logits, dense)
        knobs.set_keep(model, 0.5)
        assert all(w.keep == 0.5 for w in wrappers)
        assert not torch.allclose(model(input_ids=ids).logits, dense, atol=1e-3)


@pytest.mark.parametrize("keep", [0.0, 1.5, -0.1])
def test_keep_fraction_out_of_range_is_refused(keep):
    with pytest.raises(ValueError):
        knobs.keep_width(128, keep)


def test_keep_width_levels():
    assert [knobs.keep_width(1536, k) for k in knobs.MLP_LEVELS] == [1536, 1152, 768]
    assert knobs.keep_width(10, 0.01) == 1

"""leir_models.sol.ort_step: the whole single-token pass as one graph per
keep level. ``DecodeStep`` against the transformers model's own pass (with
grouped key/value heads too, and junk in the buffers' spare rows), every
exported graph against ``DecodeStep`` on the same inputs, the past read in
place (each buffer input feeds a product directly), a keep-0.5 graph
physically narrower, int8 graphs with integer products, ``decode.generate``
on ``OrtPasses`` token for token against torch, each token on its action's
session, through buffer growth up to the context's end, and the policy's
graph against the policy.

Tolerances: ``DecodeStep`` in torch within 1e-5 of the logits' scale (the
same arithmetic in another order); fp32 graphs within 1e-4 of the output's
scale; int8 graphs within ``INT8_REL_TOL`` of the logits' norm (dynamic
quantization of every product: measured below 5% here).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from leir_models.lm.store import load_model  # noqa: E402
from leir_models.sol import attention, decode, knobs, onnx_blocks, ort_step  # noqa: E402
from leir_models.sol.policy import ACTIONS, PolicyConfig, SolPolicy  # noqa: E402
from sol_fixtures import orders, seqs, torch_model  # noqa: E402,F401

torch.set_num_threads(1)

INT8_REL_TOL = 0.08
N = 12


def _random_llama(heads: int, kv_heads: int, tied: bool, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=64,
                         rope_theta=10000.0, tie_word_embeddings=tied)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("heads, kv_heads, tied", [(2, 2, True), (4, 1, False)])
@pytest.mark.parametrize("keep", ACTIONS)
def test_the_step_module_computes_the_transformers_pass(heads, kv_heads, tied, keep):
    model = decode.prepare(_random_llama(heads, kv_heads, tied))
    ids = [3, 17, 42, 8, 91, 5, 60]
    state = decode.prefill(model, ids)
    keys, values = ort_step.buffers(state.cache, len(ids) + 5)
    rng = np.random.default_rng(0)
    keys[..., len(ids):] = rng.normal(size=keys[..., len(ids):].shape) * 50  # spare rows: junk the mask must hide
    values[:, :, len(ids):] = rng.normal(size=values[:, :, len(ids):].shape) * 50
    token = 23
    hidden, logits, cache = decode.run_tokens(model, [token], len(ids), state.cache, keep)
    step = ort_step.DecodeStep(model, keep)
    with torch.no_grad():
        got_logits, got_hidden, k, v = step(model.get_input_embeddings().weight[[token]], torch.tensor([len(ids)]),
                                            *torch.from_numpy(keys), *torch.from_numpy(values))
    scale = float(logits.abs().max())
    assert torch.allclose(got_logits[0], logits[-1], atol=1e-5 * scale)
    assert torch.allclose(got_hidden[0], hidden[-1], atol=1e-5 * float(hidden.abs().max()))
    # The cache now holds the token's keys and values as its last position.
    want_k = torch.stack([layer.keys[0, :, -1] for layer in cache.layers])
    want_v = torch.stack([layer.values[0, :, -1] for layer in cache.layers])
    assert k.shape == want_k.shape and torch.allclose(k, want_k, atol=1e-6) and torch.allclose(v, want_v, atol=1e-6)
    mlp = step.layers[0].mlp
    assert mlp.gate_proj.weight.shape[0] == knobs.keep_width(48, keep)  # a physically narrower MLP


def test_buffers_refuse_a_capacity_below_the_cache():
    model = decode.prepare(_random_llama(2, 2, True))
    state = decode.prefill(model, [3, 4, 5])
    keys, values = ort_step.buffers(state.cache)
    assert keys.shape == (2, 2, 16, 3) and values.shape == (2, 2, 3, 16)
    with pytest.raises(ValueError, match="capacity 2 is below the cache's 3 positions"):
        ort_step.buffers(state.cache, 2)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sol-step-cache")


@pytest.fixture(scope="module")
def steps_fp32(torch_model, cache):
    return ort_step.load(torch_model, "fp32", cache)


@pytest.fixture(scope="module")
def steps_int8(torch_model, cache):
    return ort_step.load(torch_model, "int8", cache)


def _inputs(model, seq, length=20, spare=9):
    state = decode.prefill(model, seq[:length])
    keys, values = ort_step.buffers(state.cache, length + spare)
    return ort_step.feed(model.get_input_embeddings().weight[seq[length]].detach().numpy(), length, keys, values)


def test_every_step_graph_matches_the_torch_step(torch_model, steps_fp32, steps_int8, seqs):
    feed = _inputs(torch_model, seqs[0])
    names = ort_step.input_names(torch_model.config.num_hidden_layers)
    assert list(feed) == names == [i.name for i in steps_fp32.sessions[1.0].get_inputs()]
    for keep in ACTIONS:
        with torch.no_grad():
            want = ort_step.DecodeStep(torch_model, keep)(*(torch.from_numpy(feed[n]) for n in names))
        want = [w.numpy() for w in want]
        got = steps_fp32.sessions[keep].run(list(ort_step.OUTPUTS), feed)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert np.abs(g - w).max() <= 1e-4 * max(1.0, float(np.abs(w).max()))
        got8 = steps_int8.sessions[keep].run(list(ort_step.OUTPUTS), feed)
        assert np.linalg.norm(got8[0] - want[0]) <= INT8_REL_TOL * np.linalg.norm(want[0])


def test_the_graphs_read_the_past_in_place(torch_model, steps_fp32, steps_int8):
    """Every key/value buffer input is consumed by one product and nothing
    else (but a ``Shape``, which reads its capacity, not its data): no slice,
    transpose, concat or cast copies the past per token."""
    layers = torch_model.config.num_hidden_layers
    buffer_inputs = set(ort_step.input_names(layers)[2:])
    for steps in (steps_fp32, steps_int8):
        for keep in ACTIONS:
            path = ort_step.graph_path(steps.directory,
                                       knobs.keep_width(int(torch_model.config.intermediate_size), keep),
                                       steps.precision)
            graph = onnx.load(str(path)).graph
            consumers = {name: [n.op_type for n in graph.node if name in n.input and n.op_type != "Shape"]
                         for name in buffer_inputs}
            assert all(ops == ["MatMul"] for ops in consumers.values()), consumers


def _dims(path) -> set[int]:
    return {d for init in onnx.load(str(path)).graph.initializer for d in init.dims}


def test_a_smaller_keep_is_a_narrower_graph_and_int8_runs_integer_products(torch_model, steps_fp32, steps_int8):
    inter = int(torch_model.config.intermediate_size)
    full, half = (ort_step.graph_path(steps_fp32.directory, knobs.keep_width(inter, k), "fp32") for k in (1.0, 0.5))
    assert inter in _dims(full)
    assert inter not in _dims(half) and knobs.keep_width(inter, 0.5) in _dims(half)
    for keep in ACTIONS:
        ops = set(onnx_blocks.op_types(ort_step.graph_path(steps_int8.directory,
                                                           knobs.keep_width(inter, keep), "int8")))
        assert onnx_blocks.INT8_MATMUL_OPS & ops
        assert not onnx_blocks.INT8_MATMUL_OPS & set(
            onnx_blocks.op_types(ort_step.graph_path(steps_fp32.directory, knobs.keep_width(inter, keep), "fp32")))


def test_dense_greedy_decode_on_the_step_graphs_is_torchs(torch_model, steps_fp32, seqs):
    prompt = seqs[1][:40]
    want = decode.generate(torch_model, prompt, N, "dense", stop_ids=[])
    before = dict(steps_fp32.calls)
    got = decode.generate(torch_model, prompt, N, "dense", stop_ids=[],
                          passes=ort_step.OrtPasses(torch_model, steps_fp32))
    assert len(got.tokens) == N and got.tokens == want.tokens
    assert got.flops_per_token == want.flops_per_token
    # The prompt is read by torch; each of the N - 1 passes is one run of the keep-1 graph.
    assert steps_fp32.calls[1.0] - before[1.0] == N - 1
    assert all(steps_fp32.calls[k] == before[k] for k in (0.75, 0.5))


def test_static_half_keep_runs_the_half_keep_graph_past_a_growing_buffer(torch_model, steps_fp32, seqs, monkeypatch):
    monkeypatch.setattr(ort_step, "BUFFER_CHUNK", 4)  # the buffers grow twice within 12 tokens
    prompt = seqs[2][:5]
    half = ACTIONS.index(0.5)
    want = decode.generate(torch_model, prompt, N, "static", action=half, stop_ids=[])
    before = dict(steps_fp32.calls)
    passes = ort_step.OrtPasses(torch_model, steps_fp32)
    got = decode.generate(torch_model, prompt, N, "static", action=half, stop_ids=[], passes=passes)
    assert got.tokens == want.tokens and got.net_keep == 0.5
    assert steps_fp32.calls[0.5] - before[0.5] == N - 1 and steps_fp32.calls[1.0] == before[1.0]
    # 5 prompt positions: capacity 8 (two chunks); full at the fourth pass, 12; at the eighth, 16,
    # which the 11 passes fit.
    assert passes.length == len(prompt) + N - 1 == 16 and passes.capacity == 16 and passes.binds == 3


def test_decoding_to_the_contexts_end_caps_the_buffers_at_the_context(torch_model, steps_fp32, seqs, monkeypatch):
    limit = torch_model.config.max_position_embeddings
    monkeypatch.setattr(ort_step, "BUFFER_CHUNK", 3)
    prompt = (seqs[0] * (limit // len(seqs[0]) + 1))[:limit - 5]
    want = decode.generate(torch_model, prompt, 20, "dense", stop_ids=[])
    passes = ort_step.OrtPasses(torch_model, steps_fp32)
    got = decode.generate(torch_model, prompt, 20, "dense", stop_ids=[], passes=passes)
    assert got.stopped == want.stopped == "context" and got.tokens == want.tokens
    assert passes.length == passes.capacity == limit
    with pytest.raises(ValueError, match=f"the context is full \\({limit} positions\\)"):
        passes.step(got.tokens[-1], 1.0)


def test_the_capacity_is_chunked_and_capped_at_the_context():
    chunk = ort_step.BUFFER_CHUNK
    assert ort_step.chunked(1, 1024) == chunk
    assert ort_step.chunked(chunk - 1, 1024) == chunk and ort_step.chunked(chunk, 1024) == 2 * chunk
    assert ort_step.chunked(1020, 1024) == 1024 and ort_step.chunked(1024, 1024) == 1024
    assert ort_step.chunked(10, 8) == 10  # never below the positions held


def test_a_pass_before_the_prefill_is_refused(torch_model, steps_fp32):
    with pytest.raises(ValueError, match="prefill first"):
        ort_step.OrtPasses(torch_model, steps_fp32).step(3, 1.0)


def test_sol_decode_on_int8_step_graphs_runs_each_actions_graph(torch_model, steps_int8, seqs):
    torch.manual_seed(0)
    policy = SolPolicy(PolicyConfig(hidden_size=torch_model.config.hidden_size)).eval()
    before = dict(steps_int8.calls)
    got = decode.generate(torch_model, seqs[0][:32], 24, "sol", policy=policy, target=0.7, greedy_policy=False,
                          generator=torch.Generator().manual_seed(0), stop_ids=[],
                          passes=ort_step.OrtPasses(torch_model, steps_int8))
    assert len(got.actions) == 23 and len(set(got.actions)) > 1
    for a, keep in enumerate(ACTIONS):
        assert steps_int8.calls[keep] - before[keep] == got.actions.count(a)
    assert got.net_keep < 1.0


def test_the_policy_graph_gives_the_policys_logits_and_actions(torch_model, steps_fp32, seqs, cache):
    torch.manual_seed(1)
    policy = SolPolicy(PolicyConfig(hidden_size=torch_model.config.hidden_size)).eval()
    with torch.no_grad():
        policy.head.weight.normal_()  # an untrained head is 0.1x: make the network's part count
    ort_policy = ort_step.OrtPolicy(policy, cache)
    feats = torch.randn(5, policy.in_features)
    with torch.no_grad():
        for f in feats:
            assert torch.allclose(ort_policy(f), policy(f), atol=1e-5)
    assert ort_step.OrtPolicy(policy, cache).path == ort_policy.path  # cached by its weights

    def run(logits_of):
        return decode.generate(torch_model, seqs[1][:24], 16, "sol", policy=policy, target=0.6, greedy_policy=False,
                               generator=torch.Generator().manual_seed(3), stop_ids=[],
                               passes=ort_step.OrtPasses(torch_model, steps_fp32), policy_logits=logits_of)

    calls = ort_policy.calls
    on_torch, on_ort = run(None), run(ort_policy)
    assert on_ort.actions == on_torch.actions and len(set(on_ort.actions)) > 1
    assert ort_policy.calls - calls == len(on_ort.actions) == 15


def test_a_second_load_exports_nothing_and_other_weights_get_other_graphs(torch_model, steps_fp32, cache,
                                                                         lm_model_dir, monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("exported again")

    monkeypatch.setattr(ort_step, "export_step", refuse)
    again = ort_step.load(torch_model, "fp32", cache)
    assert again.directory == steps_fp32.directory
    assert again.providers == steps_fp32.providers and "CPUExecutionProvider" in again.providers
    unordered, _ = load_model(lm_model_dir)  # the trained channel order, not the policy's
    assert ort_step.fingerprint(decode.prepare(unordered)) != steps_fp32.directory.name


def test_the_attention_keep_is_refused_on_the_step_graphs(torch_model, steps_fp32, seqs):
    with pytest.raises(ValueError, match="torch passes only"):
        decode.generate(torch_model, seqs[0][:8], 2, "dense", stop_ids=[],
                        attention_keep=attention.AttentionKeep(0.5, min_context=0),
                        passes=ort_step.OrtPasses(torch_model, steps_fp32))


# ------------------------------------------------------------ the policy inside the step


@pytest.fixture(scope="module")
def policy(torch_model):
    torch.manual_seed(2)
    p = SolPolicy(PolicyConfig(hidden_size=torch_model.config.hidden_size)).eval()
    with torch.no_grad():
        p.head.weight.normal_()  # an untrained head is 0.1x: make the network's part count
    return p


@pytest.fixture(scope="module")
def fused_fp32(torch_model, cache, policy):
    return ort_step.load(torch_model, "fp32", cache, policy=policy)


@pytest.fixture(scope="module")
def fused_int8(torch_model, cache, policy):
    return ort_step.load(torch_model, "int8", cache, policy=policy)


def test_a_step_with_the_policy_chooses_the_next_token_and_the_policys_logits_for_it(
        torch_model, seqs, policy, fused_fp32, fused_int8):
    layers = torch_model.config.num_hidden_layers
    feed = _inputs(torch_model, seqs[0])
    plain = ort_step.DecodeStep(torch_model, 1.0)
    with torch.no_grad():
        steps_logits = plain(*(torch.from_numpy(feed[n]) for n in ort_step.input_names(layers)))[0][0]
    top = int(steps_logits.argmax())
    never = np.zeros((1, torch_model.config.vocab_size), np.float32)
    never[0, top] = -np.inf  # the unmasked choice is barred: the step must take the runner-up
    state = policy.state_features(0.6, -0.05, 0.25, 1)[None]
    fused_feed = {**feed, "policy_state": state, "never": never}
    names = ort_step.input_names(layers, fused=True)
    assert names[2:4] == ["policy_state", "never"] and list(ort_step.output_names(True))[-2:] == [
        "next_token", "policy_logits"]
    embedding = torch_model.get_input_embeddings().weight.detach()
    for steps in (fused_fp32, fused_int8):
        assert steps.fused and [i.name for i in steps.sessions[1.0].get_inputs()] == names
        for keep in ACTIONS:
            logits, hidden, _, _, next_token, policy_logits = steps.sessions[keep].run(
                ort_step.output_names(True), {n: fused_feed[n] for n in names})
            masked = logits[0].copy()
            masked[top] = -np.inf
            assert next_token.tolist() == [int(masked.argmax())] and next_token[0] != top
            with torch.no_grad():
                want = policy(policy.features(torch.from_numpy(hidden[0]), embedding[int(next_token[0])],
                                              0.6, -0.05, 0.25, 1))
            # The policy's part is fp32 in the int8 graph too: it matches the
            # torch policy on the graph's own hidden state.
            assert np.abs(policy_logits[0] - want.numpy()).max() <= 1e-4 * max(1.0, float(want.abs().max()))


def test_the_int8_step_keeps_the_policy_in_fp32(torch_model, fused_int8, policy):
    inter = int(torch_model.config.intermediate_size)
    tag = ort_step.policy_fingerprint(policy)
    for keep in ACTIONS:
        path = ort_step.graph_path(fused_int8.directory, knobs.keep_width(inter, keep), "int8", tag)
        graph = onnx.load(str(path)).graph
        weights = {i.name: i.data_type for i in graph.initializer if i.name.startswith("policy")}
        # (the exporter drops the head's bias, which is zero)
        assert {"policy.fc1.weight", "policy.fc2.weight", "policy.head.weight", "policy_embedding"} <= set(weights)
        assert set(weights.values()) == {onnx.TensorProto.FLOAT}
        readers = {n.op_type for n in graph.node if set(weights).intersection(n.input)}
        assert readers and not readers & (onnx_blocks.INT8_MATMUL_OPS | {"DynamicQuantizeLinear"})
        assert onnx_blocks.INT8_MATMUL_OPS & {n.op_type for n in graph.node}  # the model's products are int8


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sol_decoding_with_the_policy_in_the_step_decides_as_the_policy_graph_and_runs_it_once(
        torch_model, seqs, cache, policy, precision, request):
    plain = request.getfixturevalue("steps_fp32" if precision == "fp32" else "steps_int8")
    fused = request.getfixturevalue(f"fused_{precision}")
    ort_policy = ort_step.OrtPolicy(policy, cache)
    never = [int(t) for t in seqs[1][24:30]]  # tokens the prompt's continuation would use

    def run(steps):
        return decode.generate(torch_model, seqs[1][:24], 20, "sol", policy=policy, target=0.6, greedy_policy=False,
                               generator=torch.Generator().manual_seed(4), stop_ids=[], never_ids=never,
                               passes=ort_step.OrtPasses(torch_model, steps), policy_logits=ort_policy)

    calls = ort_policy.calls
    apart = run(plain)
    assert ort_policy.calls - calls == len(apart.actions) == 19
    before = dict(fused.calls)
    inside = run(fused)
    assert ort_policy.calls - calls == 19 + 1  # the first decoded token's choice only
    assert inside.tokens == apart.tokens and not set(inside.tokens) & set(never)
    assert inside.actions == apart.actions and len(set(inside.actions)) > 1
    for a, keep in enumerate(ACTIONS):
        assert fused.calls[keep] - before[keep] == inside.actions.count(a)


def test_the_policys_inputs_are_refused_by_plain_step_graphs(torch_model, steps_fp32, seqs):
    passes = ort_step.OrtPasses(torch_model, steps_fp32)
    with pytest.raises(ValueError, match="hold no policy"):
        passes.set_never([1])
    passes.prefill(seqs[0][:8])
    assert passes.policy_logits_for(3) is None

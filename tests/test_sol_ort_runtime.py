"""leir_models.sol.ort_runtime on the tiny trained model (``lm_model_dir``):
every exported graph (layer x keep x precision) against the torch MLP on the
inputs that layer really receives, the int8 graphs' integer operators, a
whole dense greedy decode on ONNX Runtime fp32 token for token against
torch, each token's action running its own keep's session, the cache reused
and keyed by the weights, and the providers reported.

Tolerances: fp32 graphs within 1e-4 of the output's scale (the largest
absolute value of the torch output; measured 1-2e-7 on a tiny model);
int8 graphs (dynamic quantization: int8 weights per tensor, uint8
activations per call) within ``INT8_REL_TOL`` = 5% of the output's norm
(as tests/test_sol_onnx.py; measured 2.0-2.5%).
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

import numpy as np  # noqa: E402

from leir_models.lm.store import load_model  # noqa: E402
from leir_models.sol import decode, knobs, onnx_blocks, ort_runtime  # noqa: E402
from leir_models.sol.policy import ACTIONS, PolicyConfig, SolPolicy  # noqa: E402
from sol_fixtures import orders, prepared, seqs, torch_model  # noqa: E402,F401

torch.set_num_threads(1)

INT8_REL_TOL = 0.05
N = 16


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sol-ort-cache")


@pytest.fixture(scope="module")
def ort_fp32(lm_model_dir, orders, cache):
    model = prepared(lm_model_dir, orders)
    return model, ort_runtime.install(model, "fp32", cache)


@pytest.fixture(scope="module")
def ort_int8(lm_model_dir, orders, cache):
    model = prepared(lm_model_dir, orders)
    return model, ort_runtime.install(model, "int8", cache)


@pytest.fixture(scope="module")
def layer_inputs(torch_model, seqs):
    """What every layer's MLP receives on a real sequence, ``[1, T, D]``."""
    seen = []
    handles = [w.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
               for w in ort_runtime.sliced_layers(torch_model)]
    try:
        decode.run_tokens(torch_model, seqs[0][:48], 0)
    finally:
        for h in handles:
            h.remove()
    return seen


def variants(runtime):
    return sorted(runtime.paths.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][2]))


def test_every_layer_keep_and_precision_is_exported_into_the_cache(ort_fp32, cache, torch_model):
    _, rt = ort_fp32
    layers = len(ort_runtime.sliced_layers(torch_model))
    assert layers == 2  # TINY_MODEL
    assert set(rt.paths) == {(i, k, p) for i in range(layers) for k in knobs.MLP_LEVELS for p in onnx_blocks.PRECISIONS}
    assert all(p.is_file() and p.parent == rt.directory for p in rt.paths.values())
    assert rt.directory.parent == cache
    assert rt.directory.name == ort_runtime.fingerprint([w.mlp for w in ort_runtime.sliced_layers(torch_model)])
    assert not list(rt.directory.glob(".*.tmp.onnx"))


def _against_torch(rt, torch_model, layer_inputs, precision):
    """(layer, keep, ORT's output, torch's) for every graph of ``precision``."""
    mlps = [w.mlp for w in ort_runtime.sliced_layers(torch_model)]
    for (layer, keep, p), path in variants(rt):
        if p != precision:
            continue
        x = layer_inputs[layer]
        session, _ = onnx_blocks.ort_session(path, threads=1)
        got = session.run(None, {onnx_blocks.INPUT_NAME: x.numpy()})[0]
        with torch.no_grad():
            want = knobs.sliced_mlp_forward(mlps[layer], x, keep).numpy()
        yield layer, keep, got, want


def test_every_fp32_graph_matches_torch(ort_fp32, torch_model, layer_inputs):
    _, rt = ort_fp32
    checked = list(_against_torch(rt, torch_model, layer_inputs, "fp32"))
    for layer, keep, got, want in checked:
        scale = np.abs(want).max()
        assert scale > 0
        assert np.abs(got - want).max() <= 1e-4 * scale, (layer, keep)
    assert len(checked) == 2 * len(knobs.MLP_LEVELS)


def test_every_int8_graph_is_within_its_tolerance(ort_fp32, torch_model, layer_inputs):
    _, rt = ort_fp32
    checked = list(_against_torch(rt, torch_model, layer_inputs, "int8"))
    for layer, keep, got, want in checked:
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert rel < INT8_REL_TOL, (layer, keep, rel)
        assert not np.array_equal(got, want)  # it is really another computation
    assert len(checked) == 2 * len(knobs.MLP_LEVELS)


def test_int8_graphs_run_integer_operators_and_fp32_graphs_do_not(ort_fp32):
    _, rt = ort_fp32
    for (layer, keep, precision), path in rt.paths.items():
        ops = onnx_blocks.op_types(path)
        if precision == "int8":
            assert ops.count("MatMulInteger") == 3, (layer, keep, ops)
            assert "DynamicQuantizeLinear" in ops
            assert "MatMul" not in ops
        else:
            assert ops.count("MatMul") == 3 and not onnx_blocks.INT8_MATMUL_OPS & set(ops)


def test_dense_greedy_decode_on_ort_fp32_is_torchs(ort_fp32, torch_model, seqs):
    model, rt = ort_fp32
    prompt = seqs[1][:40]
    want = decode.generate(torch_model, prompt, N, "dense", stop_ids=[])
    before = [dict(w.calls) for w in rt.wrappers]
    got = decode.generate(model, prompt, N, "dense", stop_ids=[])
    assert len(got.tokens) == N and got.tokens == want.tokens
    assert got.flops_per_token == want.flops_per_token
    for w, b in zip(rt.wrappers, before):  # the prefill and the N - 1 passes, all on the keep-1 session
        assert w.calls[1.0] - b[1.0] == N and w.calls[0.75] == b[0.75] and w.calls[0.5] == b[0.5]


def test_static_half_keep_runs_the_half_keep_graph(ort_fp32, torch_model, seqs):
    model, rt = ort_fp32
    prompt = seqs[2][:30]
    half = ACTIONS.index(0.5)
    want = decode.generate(torch_model, prompt, N, "static", action=half, stop_ids=[])
    before = [dict(w.calls) for w in rt.wrappers]
    got = decode.generate(model, prompt, N, "static", action=half, stop_ids=[])
    assert got.tokens == want.tokens and got.net_keep == want.net_keep == 0.5
    for w, b in zip(rt.wrappers, before):
        assert w.calls[0.5] - b[0.5] == N - 1 and w.calls[1.0] - b[1.0] == 1 and w.calls[0.75] == b[0.75]
    assert all(w.keep == 1.0 for w in rt.wrappers)  # generate resets the keep


def test_sol_decode_on_int8_calls_each_actions_session(ort_int8, seqs):
    model, rt = ort_int8
    torch.manual_seed(0)
    policy = SolPolicy(PolicyConfig(hidden_size=model.config.hidden_size)).eval()
    before = [dict(w.calls) for w in rt.wrappers]
    got = decode.generate(model, seqs[0][:32], 24, "sol", policy=policy, target=0.7, greedy_policy=False,
                          generator=torch.Generator().manual_seed(0), stop_ids=[])
    assert len(got.actions) == 23 and len(set(got.actions)) > 1
    for w, b in zip(rt.wrappers, before):
        for a, keep in enumerate(ACTIONS):
            assert w.calls[keep] - b[keep] == got.actions.count(a) + (keep == 1.0)
    assert got.net_keep < 1.0 and got.flops_per_token < got.flops_dense + got.flops_policy


def test_a_second_install_exports_nothing(lm_model_dir, orders, cache, ort_fp32, monkeypatch):
    _, first = ort_fp32

    def refuse(*_a, **_k):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_blocks, "export_mlp", refuse)
    monkeypatch.setattr(onnx_blocks, "quantize_int8", refuse)
    model = prepared(lm_model_dir, orders)
    rt = ort_runtime.install(model, "int8", cache)
    assert rt.directory == first.directory and rt.paths == first.paths


def test_the_cache_key_is_the_weights_in_their_order(lm_model_dir, orders):
    a = [w.mlp for w in ort_runtime.sliced_layers(prepared(lm_model_dir, orders))]
    b = [w.mlp for w in ort_runtime.sliced_layers(prepared(lm_model_dir, None))]  # the trained order
    assert ort_runtime.fingerprint(a) == ort_runtime.fingerprint(
        [w.mlp for w in ort_runtime.sliced_layers(prepared(lm_model_dir, orders))])
    assert any(not torch.equal(o, torch.arange(len(o))) for o in orders)
    assert ort_runtime.fingerprint(a) != ort_runtime.fingerprint(b)


def test_providers_in_use_are_reported(lm_model_dir, orders, cache, caplog):
    model = prepared(lm_model_dir, orders)
    with caplog.at_level(logging.WARNING):
        rt = ort_runtime.install(model, "fp32", cache)
    assert rt.requested == onnx_blocks.PROVIDERS and rt.requested[0] == "CUDAExecutionProvider"
    used = []
    for w in rt.wrappers:
        for s in w.sessions.values():
            used += [p for p in s.get_providers() if p not in used]
    assert rt.providers == used and "CPUExecutionProvider" in used
    assert len(rt.reports) == 2 * len(knobs.MLP_LEVELS)
    if "CUDAExecutionProvider" in used:
        assert not rt.cuda_missing
    else:  # this CPU-only machine: the GPU wheel lists CUDA, then falls back; said once, not per session
        assert rt.cuda_missing
        said = [r for r in caplog.records if "CUDAExecutionProvider was requested" in r.getMessage()]
        assert len(said) == 1 and "6 of 6 sessions" in said[0].getMessage()


def test_uninstall_puts_the_torch_mlps_back(lm_model_dir, orders, cache, torch_model, seqs):
    model = prepared(lm_model_dir, orders)
    torch_wrappers = ort_runtime.sliced_layers(model)
    rt = ort_runtime.install(model, "int8", cache)
    assert all(isinstance(w, ort_runtime.OrtMLP) for w in ort_runtime.sliced_layers(model))
    rt.uninstall()
    assert ort_runtime.sliced_layers(model) == torch_wrappers
    assert not any(isinstance(m, ort_runtime.OrtMLP) for m in model.modules())
    prompt = seqs[0][:20]
    assert decode.generate(model, prompt, 8, "dense", stop_ids=[]).tokens == \
        decode.generate(torch_model, prompt, 8, "dense", stop_ids=[]).tokens


def test_install_refuses_what_it_cannot_run(lm_model_dir, orders, cache):
    plain, _ = load_model(lm_model_dir)
    with pytest.raises(ValueError, match="not prepared"):
        ort_runtime.install(plain, "fp32", cache)
    model = prepared(lm_model_dir, orders)
    with pytest.raises(ValueError, match="precision"):
        ort_runtime.install(model, "fp16", cache)
    ort_runtime.install(model, "fp32", cache)
    with pytest.raises(ValueError, match="already"):
        ort_runtime.install(model, "int8", cache)

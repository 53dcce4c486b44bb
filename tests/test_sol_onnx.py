"""leir_models.sol.onnx_blocks: every exported MLP variant against torch
on the same inputs, the int8 graphs' integer operators, the smaller
weights of a smaller keep fraction, and the providers report.

Tolerances: fp32 graphs within 1e-4 relative (1e-5 absolute) of the torch
block; int8 graphs (dynamic quantization: int8 weights per tensor, uint8
activations per call) within 5% of the output's norm, and still closer to
their own keep level's torch output than a random block would be.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import numpy as np  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaMLP  # noqa: E402

from leir_models.sol import knobs, onnx_blocks  # noqa: E402

torch.set_num_threads(1)

HIDDEN, INTER = 64, 160
INT8_REL_TOL = 0.05


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return LlamaMLP(LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER, hidden_act="silu")).eval()


@pytest.fixture(scope="module")
def variants(mlp, tmp_path_factory):
    return onnx_blocks.export_mlp_variants(mlp, tmp_path_factory.mktemp("sol_onnx"))


@pytest.fixture(scope="module")
def x():
    return torch.randn(2, 7, HIDDEN, generator=torch.Generator().manual_seed(3))


def run(path, x):
    session, _report = onnx_blocks.ort_session(path, threads=1)
    return session.run(None, {onnx_blocks.INPUT_NAME: x.numpy()})[0]


def weights(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def test_every_variant_is_exported(variants):
    assert set(variants) == {(k, p) for k in knobs.MLP_LEVELS for p in onnx_blocks.PRECISIONS}
    assert len({p.name for p in variants.values()}) == len(variants)


@pytest.mark.parametrize("keep", knobs.MLP_LEVELS)
def test_fp32_graph_matches_torch(mlp, variants, x, keep):
    got = run(variants[(keep, "fp32")], x)
    with torch.no_grad():
        want = knobs.sliced_mlp_forward(mlp, x, keep).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("keep", knobs.MLP_LEVELS)
def test_int8_graph_matches_torch_within_tolerance(mlp, variants, x, keep):
    got = run(variants[(keep, "int8")], x)
    with torch.no_grad():
        want = knobs.sliced_mlp_forward(mlp, x, keep).numpy()
        other = knobs.sliced_mlp_forward(mlp, x.flip(1), keep).numpy()
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < INT8_REL_TOL, rel
    assert np.linalg.norm(got - want) < 0.2 * np.linalg.norm(other - want)
    assert not np.allclose(got, want, rtol=1e-6, atol=1e-7), "int8 output identical to fp32: not quantized?"


@pytest.mark.parametrize("keep", knobs.MLP_LEVELS)
def test_int8_graph_runs_integer_matmuls_only(variants, keep):
    ops = onnx_blocks.op_types(variants[(keep, "int8")])
    assert sum(op in onnx_blocks.INT8_MATMUL_OPS for op in ops) == 3, ops
    assert "MatMul" not in ops and "Gemm" not in ops, ops
    assert {w.dtype for w in weights(variants[(keep, "int8")]).values() if w.ndim == 2} == {np.dtype(np.int8)}


def test_fp32_graph_has_float_matmuls_only(variants):
    ops = onnx_blocks.op_types(variants[(1.0, "fp32")])
    assert ops.count("MatMul") == 3 and not set(ops) & onnx_blocks.INT8_MATMUL_OPS, ops


@pytest.mark.parametrize("precision", onnx_blocks.PRECISIONS)
@pytest.mark.parametrize("keep", knobs.MLP_LEVELS)
def test_smaller_keep_has_physically_smaller_weights(variants, keep, precision):
    n = knobs.keep_width(INTER, keep)
    shapes = sorted(w.shape for w in weights(variants[(keep, precision)]).values() if w.ndim == 2)
    # MatMul weights are [in, out]: gate and up [H, n], down [n, H].
    assert shapes == sorted([(HIDDEN, n), (HIDDEN, n), (n, HIDDEN)]), shapes


def test_dynamic_batch_and_tokens(variants, mlp):
    x = torch.randn(3, 1, HIDDEN)
    got = run(variants[(0.5, "fp32")], x)
    with torch.no_grad():
        np.testing.assert_allclose(got, knobs.sliced_mlp_forward(mlp, x, 0.5).numpy(), rtol=1e-4, atol=1e-5)


def test_providers_in_use_on_this_machine(variants, caplog):
    import onnxruntime as ort

    with caplog.at_level(logging.WARNING, logger=onnx_blocks.__name__):
        session, report = onnx_blocks.ort_session(variants[(1.0, "fp32")])
    assert report.requested == onnx_blocks.PROVIDERS
    assert report.used == tuple(session.get_providers())
    assert "CPUExecutionProvider" in report.used
    if "CUDAExecutionProvider" in report.used:
        assert not report.cuda_missing and report.primary == "CUDAExecutionProvider"
    else:
        # A CPU-only machine: the GPU wheel still lists CUDA as available.
        assert report.cuda_missing and report.primary == "CPUExecutionProvider"
        assert "CUDAExecutionProvider was requested but is not in use" in caplog.text
    assert "CUDAExecutionProvider" in ort.get_available_providers(), "onnxruntime-gpu is not the installed runtime"


class FakeSession:
    def __init__(self, providers):
        self.providers = providers

    def get_providers(self):
        return list(self.providers)


def test_cuda_requested_but_absent_is_reported(caplog):
    with caplog.at_level(logging.WARNING, logger=onnx_blocks.__name__):
        report = onnx_blocks.provider_report(FakeSession(["CPUExecutionProvider"]))
    assert report.cuda_missing and report.primary == "CPUExecutionProvider"
    assert "CUDAExecutionProvider was requested but is not in use; running on CPUExecutionProvider" in caplog.text


def test_cuda_in_use_is_not_reported(caplog):
    with caplog.at_level(logging.WARNING, logger=onnx_blocks.__name__):
        report = onnx_blocks.provider_report(FakeSession(["CUDAExecutionProvider", "CPUExecutionProvider"]))
    assert not report.cuda_missing and report.primary == "CUDAExecutionProvider"
    assert caplog.text == ""
    assert not onnx_blocks.provider_report(FakeSession(["CPUExecutionProvider"]), ["CPUExecutionProvider"]).cuda_missing


def test_unknown_precision_is_refused(mlp, tmp_path):
    with pytest.raises(ValueError):
        onnx_blocks.export_mlp_variants(mlp, tmp_path, precisions=("fp16",))

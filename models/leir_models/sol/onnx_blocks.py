"""MLP blocks exported to ONNX, one graph per (keep fraction, precision),
run with ONNX Runtime.

The runtime picks among precompiled variants per token, so each variant is
its own graph: the fp32 graph of a keep level is ``knobs.truncated_mlp``
exported, whose weights are the kept prefix only (``n`` wide, not the full
matrices behind a slice), and the int8 graph is that one after ONNX
Runtime's dynamic quantization (int8 weights; activations quantized per
call; the products become ``MatMulInteger``).

Export uses ``torch.onnx.export(..., dynamo=True)`` (torch 2.13 with onnx
1.23.1, onnxscript 0.7.2, onnx_ir 1.0.0: it works, no TorchScript
fallback). The example input is 3-D, ``[batch, tokens, hidden]``, with both
leading dimensions dynamic: with a 2-D input the exporter emits ``Gemm``,
which ``quantize_dynamic`` does not quantize (and whose shape inference it
fails on), while 3-D gives ``MatMul`` with pre-transposed weights, which it
does.

Sessions ask for ``["CUDAExecutionProvider", "CPUExecutionProvider"]``. The
onnxruntime-gpu wheel lists CUDA as available even where its libraries or
the device are missing and then silently runs on the CPU, so
``ort_session`` returns the providers really in use
(``session.get_providers()``) and logs when CUDA was asked for and is not
among them.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch
from torch import nn

from leir_models.sol.knobs import MLP_LEVELS, keep_width, truncated_mlp

log = logging.getLogger(__name__)

#: Providers every session asks for, in order of preference.
PROVIDERS: tuple[str, ...] = ("CUDAExecutionProvider", "CPUExecutionProvider")
#: The precisions of a block.
PRECISIONS: tuple[str, ...] = ("fp32", "int8")
#: ONNX operators that compute an integer matrix product.
INT8_MATMUL_OPS = frozenset({"MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "MatMulIntegerToFloat"})
INPUT_NAME, OUTPUT_NAME = "hidden", "out"


@torch.no_grad()
def export_mlp(mlp: nn.Module, path: str | Path, keep: float = 1.0) -> Path:
    """Export ``mlp`` at keep fraction ``keep`` (its first channels) to ``path``.

    Input ``hidden`` ``[batch, tokens, hidden_size]`` float32, output ``out``
    of the same shape; the weights are stored inside the file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    block = truncated_mlp(mlp, keep).float()
    x = torch.zeros(1, 2, mlp.gate_proj.in_features)
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("tokens")}
    torch.onnx.export(block, (x,), str(path), dynamo=True, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                      dynamic_shapes=(dims,), external_data=False, verbose=False)
    return path


def quantize_int8(fp32_path: str | Path, int8_path: str | Path, exclude: Sequence[str] = ()) -> Path:
    """ONNX Runtime's dynamic quantization of ``fp32_path``: int8 weights,
    in 7 bits (``reduce_range``). On an x86 CPU without VNNI (AVX2 only: this
    machine's AMD EPYC since 2026-12-07) ORT's u8 x s8 ``MatMulInteger``
    adds pairs of products in 16-bit lanes that saturate with full 8-bit
    weights: 23% relative error on tests/test_sol_onnx.py's MLP, where an
    earlier session's machine measured 2.8% (docs/sol.md); with 7-bit
    weights the test's 5% bound holds here again.

    The exporter's shape annotations (``value_info``) are dropped first: on
    a graph that uses one weight twice (a tied embedding and output head,
    ``ort_step``'s graphs) the quantizer's shape inference finds them in
    conflict with its own rewriting and stops; without them it infers
    every shape itself. ``exclude``: names of nodes left in fp32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    int8_path = Path(int8_path)
    graph = onnx.load(str(fp32_path))
    del graph.graph.value_info[:]
    bare = int8_path.with_name(f".{int8_path.stem}.bare.onnx")
    try:
        onnx.save(graph, str(bare))
        quantize_dynamic(str(bare), str(int8_path), weight_type=QuantType.QInt8, reduce_range=True,
                         nodes_to_exclude=list(exclude))
    finally:
        bare.unlink(missing_ok=True)
    return int8_path


def export_mlp_variants(mlp: nn.Module, out_dir: str | Path, keeps: Iterable[float] = MLP_LEVELS,
                        precisions: Sequence[str] = PRECISIONS, stem: str = "mlp") -> dict[tuple[float, str], Path]:
    """Every (keep, precision) graph of ``mlp`` under ``out_dir``.

    Files are ``{stem}_k{n}_{precision}.onnx``, ``n`` the channels kept.
    """
    unknown = set(precisions) - set(PRECISIONS)
    if unknown:
        raise ValueError(f"unknown precision(s) {sorted(unknown)}; known: {PRECISIONS}")
    out_dir = Path(out_dir)
    paths: dict[tuple[float, str], Path] = {}
    for keep in keeps:
        n = keep_width(mlp.down_proj.in_features, keep)
        fp32 = export_mlp(mlp, out_dir / f"{stem}_k{n}_fp32.onnx", keep)
        if "fp32" in precisions:
            paths[(keep, "fp32")] = fp32
        if "int8" in precisions:
            paths[(keep, "int8")] = quantize_int8(fp32, out_dir / f"{stem}_k{n}_int8.onnx")
    return paths


def op_types(path: str | Path) -> list[str]:
    """The operator of every node of the ONNX graph at ``path``, in order."""
    return [node.op_type for node in onnx.load(str(path)).graph.node]


@dataclass(frozen=True)
class ProviderReport:
    """What a session asked for and what it really runs on."""

    requested: tuple[str, ...]
    used: tuple[str, ...]

    @property
    def primary(self) -> str:
        """The provider that runs the graph's nodes first (ORT's order)."""
        return self.used[0] if self.used else "none"

    @property
    def cuda_missing(self) -> bool:
        """CUDA was requested but the session does not use it."""
        return "CUDAExecutionProvider" in self.requested and "CUDAExecutionProvider" not in self.used


def provider_report(session, requested: Sequence[str] = PROVIDERS) -> ProviderReport:
    """The providers ``session`` really uses, logging a CUDA fall-back.

    ``session`` is anything with ``get_providers()`` (an
    ``onnxruntime.InferenceSession``).
    """
    report = ProviderReport(tuple(requested), tuple(session.get_providers()))
    if report.cuda_missing:
        log.warning("CUDAExecutionProvider was requested but is not in use; running on %s",
                    ", ".join(report.used) or "no provider")
    return report


def providers_in_use(reports: Iterable[ProviderReport]) -> list[str]:
    """The providers some sessions really use, in ORT's order, each once."""
    seen: list[str] = []
    for r in reports:
        for p in r.used:
            if p not in seen:
                seen.append(p)
    return seen


def ort_session(path: str | Path, providers: Sequence[str] = PROVIDERS, threads: int | None = None):
    """An ONNX Runtime session for ``path`` and its ``ProviderReport``.

    ``threads``: intra-op threads (None: ONNX Runtime's default, the cores);
    inter-op is one thread, the graphs being a chain of products.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=list(providers))
    return session, provider_report(session, providers)


# ------------------------------------------------------------ the graphs' cache, and quiet


def default_cache_dir() -> Path:
    env = os.environ.get("LEIR_SOL_CACHE")
    if env:
        return Path(env)
    from leir.files import user_cache_home

    return user_cache_home() / "leir-lsp" / "sol-onnx"


def write_graph(path: Path, make) -> Path:
    """``path``, made by ``make(temporary path)`` unless it is already there:
    written under a temporary name beside it and renamed, so an interrupted
    export leaves no half-written graph behind."""
    if not path.is_file():
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.onnx")
        try:
            make(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


@contextmanager
def quiet_export():
    """The exporter's and the quantizer's advice (torchvision not installed,
    "consider pre-processing", deprecations) held back: the graphs are
    checked by the tests, not by these messages."""
    import warnings

    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


@contextmanager
def quiet_sessions(quiet: bool):
    """ONNX Runtime's own log (a CUDA library that fails to load prints two
    lines per session) and ``provider_report``'s warning per session held
    back: the caller (``ort_runtime.install``, ``ort_step.load``) logs one
    summary instead."""
    if not quiet:
        yield
        return
    import onnxruntime as ort

    blocks_log = logging.getLogger(__name__)
    level = blocks_log.level
    blocks_log.setLevel(logging.ERROR)
    ort.set_default_logger_severity(4)  # fatal only
    try:
        yield
    finally:
        ort.set_default_logger_severity(2)  # ORT's default: warnings
        blocks_log.setLevel(level)

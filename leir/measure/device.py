"""Devices: their names, their peak figures, and where a program stands
against them (a roofline).

**Device names** are computed without TVM, since they are part of the cache
key: the CPU's model name and the threads kernels run on (``kernel_threads``:
``TVM_NUM_THREADS``, else the CPUs the process may use), the GPU's name from ``nvidia-smi``, or ``rpc:<key>``
for the devices a tracker pools under one key (TVM's convention: one key, one
kind of device).

**Peak figures** are measured once per device and kept in
``device-peaks.json`` in the cache directory (``leir bench-device``). On a
CPU: FLOP/s is the best of several float32 NumPy matrix products (n = 2048,
2n^3 operations each), run by the BLAS NumPy was built with, on the threads
that BLAS uses (reported with the figures); memory bandwidth is the best of
several copies of a 256 MiB array, counting the bytes read and written
(2 x 256 MiB; the write-allocate traffic a cache may add is not counted, so
this is the bandwidth a program sees, not the bus's).

**Cost of a program** (``program_cost``), from its analysis:

- FLOPs: for each equation, the iterations of its enclosing loops times the
  operations in its right-hand side (each binary or unary operator and each
  function call counts one; casts and index arithmetic count none; a guard's
  iterations are counted as if it always held, so this is an upper bound for
  guarded equations). ``C += X*W`` is 2 per iteration: 2MNK for a matmul.
- Bytes: the sizes of the inputs and outputs (compulsory traffic: each read
  once and written once); temporaries are assumed to stay in cache.

The roofline latency is ``max(FLOPs / peak FLOP/s, bytes / peak bandwidth)``:
no kernel can beat it, so ``roofline_ms / median_ms`` is the fraction of the
device's peak a kernel reaches.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from leir import ast as A
from leir.files import write_atomic
from leir.semantics import Analysis
from leir.bridge.targets import kernel_threads

PEAKS_FILE = "device-peaks.json"


# ------------------------------------------------------------------ names


def cpu_name() -> str:
    """``AMD EPYC (2 threads)``: the model and the threads kernels run on."""
    threads = kernel_threads()
    return f"{_cpu_model()} ({threads} thread{'' if threads == 1 else 's'})"


@functools.lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


@functools.lru_cache(maxsize=1)
def gpu_name() -> str | None:
    """The first NVIDIA GPU's name (``nvidia-smi``), or None when there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else None


# ------------------------------------------------------------------ peaks


@dataclass(frozen=True)
class DevicePeaks:
    device: str
    flops_per_s: float
    bytes_per_s: float
    #: Unix time of the measurement.
    measured_at: float
    #: How the figures were measured.
    method: str
    #: The library that reached them (BLAS and its threads).
    library: str

    def describe(self) -> str:
        return f"{self.flops_per_s / 1e9:.1f} GFLOP/s, {self.bytes_per_s / 1e9:.1f} GB/s"


def measure_cpu_peaks(device: str | None = None, *, quick: bool = False) -> DevicePeaks:
    """Measure this CPU's peak float32 FLOP/s and copy bandwidth with NumPy
    (see the module docstring); ``quick`` uses smaller sizes and fewer
    repeats (a rougher, lower estimate, in about a second)."""
    import numpy as np

    from leir.measure.vendor import blas_description

    n = 1024 if quick else 2048
    copy_bytes = (64 if quick else 256) << 20
    repeats = 3 if quick else 5
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: BLAS thread start-up, page faults
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    flops = 2.0 * n**3 / best
    src = np.ones(copy_bytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_seconds(lambda: np.copyto(dst, src)) for _ in range(repeats))
    bandwidth = 2.0 * src.nbytes / best
    method = (f"best of {repeats}: float32 {n}x{n} matmul (numpy), copy of {copy_bytes >> 20} MiB "
              f"(read + write counted)")
    return DevicePeaks(device or cpu_name(), flops, bandwidth, time.time(), method, blas_description())


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def peaks_path(directory: str | os.PathLike | None = None) -> Path:
    from leir.measure.cache import cache_directory

    return cache_directory(directory) / PEAKS_FILE


def load_peaks(device: str, directory: str | os.PathLike | None = None) -> DevicePeaks | None:
    """The stored peaks of ``device``, or None when it was never measured."""
    entry = _read_peaks(peaks_path(directory)).get(device)
    if not isinstance(entry, dict):
        return None
    try:
        return DevicePeaks(**{k: entry[k] for k in DevicePeaks.__dataclass_fields__})
    except (KeyError, TypeError):
        return None


def save_peaks(peaks: DevicePeaks, directory: str | os.PathLike | None = None) -> Path:
    """Store ``peaks`` under its device name (other devices' entries are
    kept); the file is replaced atomically."""
    path = peaks_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_peaks(path)
    data[peaks.device] = asdict(peaks)
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    return path


def _read_peaks(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------ cost


@dataclass(frozen=True)
class ProgramCost:
    flops: int
    bytes_moved: int


def program_cost(analysis: Analysis) -> ProgramCost:
    """FLOPs and compulsory bytes of a program (see the module docstring)."""
    flops = 0
    for info in analysis.equations:
        flops += info.iterations * _operations(info.equation.rhs)
    moved = 0
    for t in analysis.tensors.values():
        if t.role in ("in", "out"):
            moved += (t.size * dtype_bits(t.dtype) + 7) // 8
    return ProgramCost(flops, moved)


def _operations(e: A.Expr) -> int:
    if isinstance(e, A.Binary):
        return 1 + _operations(e.lhs) + _operations(e.rhs)
    if isinstance(e, A.Unary):
        return 1 + _operations(e.operand)
    if isinstance(e, A.Call):
        own = 0 if e.func in A.DTYPES else 1  # a cast is a conversion, not arithmetic
        return own + sum(_operations(a) for a in e.args)
    return 0  # literals, loop variables, tensor reads (their indices are address arithmetic)


def dtype_bits(dtype: str) -> int:
    """Storage bits of a LEIR dtype (``bool`` takes a byte)."""
    if dtype == "bool":
        return 8
    match = re.search(r"\d+", dtype)
    return int(match.group()) if match else 32


def roofline_ms(cost: ProgramCost, peaks: DevicePeaks) -> float:
    """The least latency the device's peaks allow for the program."""
    return 1e3 * max(cost.flops / peaks.flops_per_s, cost.bytes_moved / peaks.bytes_per_s)

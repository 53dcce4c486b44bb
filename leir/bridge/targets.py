"""The TVM targets programs are built for, and what a program needs to run
on a GPU.

TVM 0.27 refuses target strings with options (``"llvm -mcpu=..."``); targets
are built from dictionaries. Plain ``llvm`` emits generic x86-64, so the host
target names the host CPU (measured 2.1x faster on the same kernel).
"""

from __future__ import annotations

import functools
import os
import subprocess
from typing import TYPE_CHECKING

from leir import ast as A
from leir.semantics import Analysis

if TYPE_CHECKING:
    import tvm

#: The architecture CUDA code is built for when no GPU says otherwise
#: (the H100/H200 generation).
#: The targets a program is built for: the host CPU and NVIDIA GPUs.
TARGETS = ("llvm", "cuda")
DEFAULT_CUDA_ARCH = "sm_90"


def kernel_threads() -> int:
    """The threads a CPU kernel runs on: ``TVM_NUM_THREADS`` when set, else
    every CPU this process may use. TVM's own default is half the hardware
    threads (it assumes hyperthreading) and it pins the process to the CPUs
    it uses: on a 2-vCPU machine, one thread on CPU 0, so a parallel loop
    gained nothing. The measurement worker and ``leir.bridge.run`` set ``TVM_NUM_THREADS``
    to this before TVM starts its thread pool."""
    threads = os.environ.get("TVM_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        return int(threads)
    return _usable_cpus()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def host_target() -> "tvm.target.Target":
    """LLVM for this machine's CPU."""
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()})


@functools.lru_cache(maxsize=1)
def cuda_target() -> "tvm.target.Target | None":
    """CUDA for the GPU of this machine, or None when there is none."""
    arch = _gpu_arch()
    return None if arch is None else cuda_build_target(arch)


def cuda_build_target(arch: str = DEFAULT_CUDA_ARCH) -> "tvm.target.Target":
    """CUDA for a given architecture; building needs nvcc, not a GPU."""
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch})


def _gpu_arch() -> str | None:
    import tvm

    try:
        if not tvm.cuda(0).exist:
            return None
    except Exception:  # a TVM built without CUDA raises instead of saying "no"
        return None
    try:
        return "sm_" + tvm.cuda(0).compute_version.replace(".", "")
    except Exception:  # the runtime sees the device but cannot query it
        return _nvidia_smi_arch()


def _nvidia_smi_arch() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    return "sm_" + first.replace(".", "") if first.replace(".", "").isdigit() else None


def gpu_problems(analysis: Analysis) -> list[str]:
    """Why the program cannot run on a GPU as written: every equation must
    sit inside a thread-bound (``B``) loop, since TVM puts whatever is
    outside one in host code, which cannot touch device memory."""
    from leir.bridge.lower import equation_text

    problems = []
    for info in analysis.equations:
        if not any(loop.kind == "B" for loop in info.loops):
            problems.append(f"{equation_text(info.equation)} is not inside a thread-bound (B) loop; "
                            f"on a GPU every equation runs in a kernel: bind an outer loop to bx/by/bz or tx/ty/tz")
    return problems


def has_thread_loops(analysis: Analysis) -> bool:
    return any(isinstance(n, A.Loop) and n.kind == "B" for n in A.walk(analysis.program))

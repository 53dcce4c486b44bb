"""A dataset built through a TVM RPC tracker (issue 7's way to scale): a
tracker and two servers on 127.0.0.1, as in test_measure_rpc."""

from __future__ import annotations

from pathlib import Path

import pytest

from leir.tools.dataset.build import BuildConfig, build, read_samples
from test_measure_rpc import KEY, LOOPBACK, tracker  # noqa: F401 - the module's fixture

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_build_measures_on_the_tracker_devices(tracker, tmp_path):  # noqa: F811
    cfg = BuildConfig(workloads=str(EXAMPLES), out=str(tmp_path / "out"), variants=0, steps=2, budget=2,
                      only=["matmul.leir"], cache_dir=str(tmp_path / "cache"), rpc=f"{LOOPBACK}:{tracker}:{KEY}")
    summary = build(cfg, progress=False)
    samples = list(read_samples(tmp_path / "out"))
    assert summary.samples_written == len(samples) > 0
    for s in samples:
        assert (s["target"], s["device"]) == ("rpc-llvm", f"rpc:{KEY}")
    verified = [s for s in samples if s["verified"]]
    assert verified and all(s["latency_after_ms"] > 0 for s in verified)

"""Measuring programs: build with TVM, check against the NumPy evaluation,
time, and remember.

- ``engine``: ``MeasurementEngine`` (worker processes, queue, futures,
  cancellation, progress);
- ``worker``: what runs in a worker process;
- ``timing``: ``time_evaluator`` protocol and statistics;
- ``key`` and ``cache``: the structural key and the SQLite measurement database;
- ``rpc``: devices pooled behind a TVM RPC tracker;
- ``device``: device names, peak figures, program cost and roofline;
- ``vendor``: the latency of a vendor implementation of the same workload.

Importing this package imports none of them (the names below load their
module on first use), so ``leir.measure.timing``'s thresholds cost nothing;
only the workers import TVM.
"""

import importlib
from typing import TYPE_CHECKING

#: Each public name and the module it lives in.
_HOMES = {
    "CacheError": "cache",
    "MeasurementCache": "cache",
    "cache_directory": "cache",
    "DevicePeaks": "device",
    "ProgramCost": "device",
    "program_cost": "device",
    "EngineBusy": "engine",
    "EngineClosed": "engine",
    "MeasurementEngine": "engine",
    "MeasurementFuture": "engine",
    "Progress": "engine",
    "measurement_key": "key",
    "structural_text": "key",
    "Measurement": "measurement",
    "PairedMeasurement": "measurement",
    "VendorResult": "measurement",
    "RPC": "rpc",
    "RPCError": "rpc",
    "vendor_latency": "vendor",
}

__all__ = sorted(_HOMES)

if TYPE_CHECKING:
    from leir.measure.cache import CacheError, MeasurementCache, cache_directory
    from leir.measure.device import DevicePeaks, ProgramCost, program_cost
    from leir.measure.engine import EngineBusy, EngineClosed, MeasurementEngine, MeasurementFuture, Progress
    from leir.measure.key import measurement_key, structural_text
    from leir.measure.measurement import Measurement, PairedMeasurement, VendorResult
    from leir.measure.rpc import RPC, RPCError
    from leir.measure.vendor import vendor_latency


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'leir.measure' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"leir.measure.{home}"), name)
    globals()[name] = value
    return value

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

Importing this package does not import TVM; the workers do.
"""

from leir.measure.cache import CacheError, MeasurementCache, cache_directory
from leir.measure.device import DevicePeaks, ProgramCost, program_cost
from leir.measure.engine import EngineBusy, EngineClosed, MeasurementEngine, MeasurementFuture, Progress
from leir.measure.key import measurement_key, structural_text
from leir.measure.measurement import Measurement, PairedMeasurement, VendorResult
from leir.measure.rpc import RPC, RPCError
from leir.measure.vendor import vendor_latency

__all__ = [
    "RPC", "CacheError", "DevicePeaks", "EngineBusy", "EngineClosed", "Measurement", "MeasurementCache",
    "MeasurementEngine", "MeasurementFuture", "PairedMeasurement", "ProgramCost", "Progress", "RPCError", "VendorResult",
    "cache_directory", "measurement_key", "program_cost", "structural_text", "vendor_latency",
]

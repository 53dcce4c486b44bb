"""What a measurement is: latency statistics of a verified kernel, or the
reason there are none."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from leir.bridge.comparison import Comparison


@dataclass(frozen=True)
class VendorResult:
    """The latency of a vendor implementation of the same workload, and
    what was run to get it."""

    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    #: Calls per run.
    number: int
    #: The call, e.g. ``np.einsum('ik,kj->ij', X, W, optimize=True)``.
    what: str
    #: "blas-contraction" (a recognised contraction run by NumPy's BLAS) or
    #: "bundled-reference" (examples/references.py).
    kind: str
    #: The library and its configuration, e.g. ``numpy 2.4.6, OpenBLAS 0.3.31
    #: (SkylakeX kernels, 2 threads)``.
    library: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "VendorResult":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Measurement:
    """One measurement of one program on one device.

    On success ``error`` is None, ``verified`` is True and the latency fields
    are set; on failure ``error`` says why ("crashed (signal 11, SIGSEGV)
    while timing", "timed out after 60 s while building", "out of memory (cap
    8 GiB)", "wrong result: ...", "build failed: ...") and they are None: a
    wrong kernel has no latency.
    """

    median_ms: float | None
    min_ms: float | None
    max_ms: float | None
    #: Timed runs (each of ``number`` calls).
    runs: int
    #: (max - min) / median.
    spread: float | None
    #: "llvm", "cuda", or "rpc-llvm"/"rpc-cuda" for a device behind a tracker.
    target: str
    #: "AMD EPYC (2 threads)", "NVIDIA H200", "rpc:<key>".
    device: str
    #: Every output matched the NumPy evaluation of the program (Step-TP's
    #: rule), or of the reference program named by ``checked_against``.
    verified: bool
    comparisons: dict[str, Comparison]
    #: Read from the measurement cache rather than measured now.
    cached: bool
    #: Median latency of the vendor reference, when one exists.
    vendor_ms: float | None
    error: str | None
    mean_ms: float | None = None
    number: int = 0
    results_ms: tuple[float, ...] = ()
    vendor: VendorResult | None = None
    #: Arithmetic operations and compulsory bytes of the program (``device.program_cost``).
    flops: int | None = None
    bytes_moved: int | None = None
    #: The fastest the device could run the program by its measured peaks
    #: (``leir bench-device``); None when the peaks are unknown.
    roofline_ms: float | None = None
    #: Unix time of the measurement (for a cached one, when it was measured).
    measured_at: float | None = None
    #: The cache key (``key.measurement_key``).
    key: str = ""
    label: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: ``key.reference_key`` of the reference program the kernel was
    #: checked against, on each of its seeds (``submit(reference=...)``);
    #: None when it was checked against the program's own evaluation.
    checked_against: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def vendor_fraction(self) -> float | None:
        """Vendor latency / our latency: 0.5 means "50% of vendor" (twice as slow)."""
        if self.vendor_ms is None or not self.median_ms:
            return None
        return self.vendor_ms / self.median_ms

    @property
    def roofline_fraction(self) -> float | None:
        """Roofline latency / our latency: the fraction of the device's peak reached."""
        if self.roofline_ms is None or not self.median_ms:
            return None
        return self.roofline_ms / self.median_ms

    def to_json(self) -> dict:
        """The fields ``leir measure --json`` prints."""
        return {
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "runs": self.runs,
            "spread": self.spread,
            "target": self.target,
            "device": self.device,
            "verified": self.verified,
            "cached": self.cached,
            "vendor_ms": self.vendor_ms,
            "roofline_ms": self.roofline_ms,
            "error": self.error,
        }


@dataclass(frozen=True)
class PairedMeasurement:
    """Two programs timed alternately in one worker (``MeasurementEngine.
    compare``): ``rounds`` rounds, each timing ``before`` then ``after``
    (``repeat`` runs each), from fresh builds, never from the cache. Timing
    them turn about, in one process, on the same inputs, puts both under the
    same load: a gain seen in every round is the program's, not the
    moment's. ``before``/``after`` summarise every run of each; the per-round
    medians say whether the order held in each round."""

    before: Measurement
    after: Measurement
    rounds: int
    #: The median of each round's runs, in order.
    before_rounds_ms: tuple[float, ...] = ()
    after_rounds_ms: tuple[float, ...] = ()

    @property
    def error(self) -> str | None:
        """Why there is no comparison (the first failure of the two), or None."""
        return self.before.error or self.after.error

    @property
    def ok(self) -> bool:
        return self.error is None


def failure(error: str, *, target: str, device: str, key: str = "", label: str | None = None,
            comparisons: dict[str, Comparison] | None = None, notes: tuple[str, ...] = ()) -> Measurement:
    """A measurement that has no latency, only a reason."""
    return Measurement(None, None, None, 0, None, target, device, False, dict(comparisons or {}), False, None, error,
                       key=key, label=label, notes=notes)

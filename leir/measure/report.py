"""How ``leir measure`` and ``leir bench-device`` show their results: a
small table per program, and a progress bar on a terminal."""

from __future__ import annotations

import time
from typing import TextIO

from leir.measure.device import DevicePeaks
from leir.measure.engine import Progress
from leir.measure.measurement import Measurement


def format_measurement(m: Measurement, name: str) -> str:
    rows = [("target", f"{m.target} on {m.device}")]
    if m.error is not None:
        rows.append(("error", m.error))
        rows += [("output", f"{out}: {c.describe()}") for out, c in m.comparisons.items()]
        return _table(name, rows)
    calls = f" x {m.number} calls" if m.number > 1 else ""
    rows.append(("latency", f"{_ms(m.median_ms)} median (min {m.min_ms:.4g}, max {m.max_ms:.4g}, "
                            f"spread {100 * (m.spread or 0):.1f}%; {m.runs} runs{calls})"))
    for out, c in m.comparisons.items():
        rows.append(("verified", f"{out}: {c.describe()}"))
    if m.vendor is not None:
        v = m.vendor
        rows.append(("vendor", f"{_ms(v.median_ms)} ({_percent(m.vendor_fraction)} of vendor): {v.what}; {v.library}"))
    else:
        rows.append(("vendor", "none for this workload"))
    if m.roofline_ms is not None:
        rows.append(("roofline", f"{_ms(m.roofline_ms)} ({_percent(m.roofline_fraction)} of roofline): "
                                 f"{_count(m.flops, 'FLOP')}, {_count(m.bytes_moved, 'B')} moved"))
    else:
        rows.append(("roofline", f"{_count(m.flops, 'FLOP')}, {_count(m.bytes_moved, 'B')} moved; the device's peaks "
                                 f"are unknown: run `leir bench-device` once"))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.measured_at)) if m.measured_at else "?"
    rows.append(("cached", f"yes (measured {when})" if m.cached else "no"))
    rows += [("note", note) for note in m.notes]
    return _table(name, rows)


def format_peaks(peaks: DevicePeaks, path) -> str:
    return _table(peaks.device, [
        ("compute", f"{peaks.flops_per_s / 1e9:.1f} GFLOP/s (float32 matmul)"),
        ("memory", f"{peaks.bytes_per_s / 1e9:.1f} GB/s (copy)"),
        ("library", peaks.library),
        ("method", peaks.method),
        ("saved in", str(path)),
    ])


def _table(title: str, rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join([title] + [f"  {k:<{width}}  {v}" for k, v in rows])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def _count(n: int | None, unit: str) -> str:
    if n is None:
        return f"? {unit}"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n} {unit}"


class ProgressBar:
    """``[#####.....] 1/3 matmul.leir: timing`` on one line of a terminal,
    redrawn in place; ``clear()`` removes it before the results print."""

    WIDTH = 20

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.shown = False

    def __call__(self, p: Progress) -> None:
        filled = self.WIDTH * p.done // max(p.total, 1)
        line = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {p.done}/{p.total}"
        if p.current:
            line += f" {p.current}: {p.phase}"
        self.stream.write(f"\r\x1b[K{line}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

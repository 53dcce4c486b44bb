"""The CPU the reasoning compares working sets and vectors with: cache
sizes from /sys, the vector width from the CPU flags, the cores this process
may use. A value the OS does not report is a named fallback (``assumed``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from leir.explain.facts import human_bytes


@dataclass(frozen=True)
class Machine:
    """The CPU the reasoning compares working sets and vectors with.

    ``assumed`` names the fields that are fallbacks (the OS did not report
    them); sentences that use such a field say "assumed"."""

    l1d: int = 32 * 1024
    l2: int = 1024 * 1024
    l3: int = 32 * 1024 * 1024
    #: Bytes of the widest vector register the CPU flags announce.
    vector_bytes: int = 32
    vector_isa: str = "AVX2"
    cores: int = 1
    #: Bytes of one cache line (L1d's coherency line size).
    line_bytes: int = 64
    assumed: tuple[str, ...] = ()

    @staticmethod
    def detect() -> "Machine":
        """This machine, read from /sys and /proc (cached)."""
        return _detect_machine()

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 (zmm0-31) and on
        AArch64 (v0-31), 16 with AVX2 and SSE."""
        return 32 if self.vector_isa in ("AVX-512", "NEON") else 16

    def caches(self) -> list[tuple[str, int]]:
        return [("L1d", self.l1d), ("L2", self.l2), ("L3", self.l3)]

    def level_of(self, nbytes: float) -> tuple[str, int] | None:
        """The smallest cache level that holds ``nbytes``, or None."""
        for name, size in self.caches():
            if nbytes <= size:
                return name, size
        return None

    def cache_text(self, name: str) -> str:
        size = dict(self.caches())[name]
        field_name = {"L1d": "l1d", "L2": "l2", "L3": "l3"}[name]
        return f"the {human_bytes(size)} {name}" + (" (size assumed)" if field_name in self.assumed else "")

    def vector_text(self) -> str:
        assumed = ", assumed" if "vector_bytes" in self.assumed else ""
        return f"{self.vector_bytes}-byte vectors ({self.vector_isa}{assumed})"

    def to_json(self) -> dict[str, Any]:
        return {"l1d": self.l1d, "l2": self.l2, "l3": self.l3, "vector_bytes": self.vector_bytes,
                "vector_isa": self.vector_isa, "cores": self.cores, "line_bytes": self.line_bytes,
                "assumed": list(self.assumed)}


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]


@lru_cache(maxsize=1)
def _detect_machine() -> Machine:
    default = Machine()
    found: dict[str, int] = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(root.glob("index*")):
            try:
                level = (index / "level").read_text().strip()
                kind = (index / "type").read_text().strip()
                size = _parse_size((index / "size").read_text())
            except OSError:
                continue
            if size is None:
                continue
            if level == "1" and kind == "Data":
                found["l1d"] = size
                try:
                    found["line_bytes"] = int((index / "coherency_line_size").read_text().strip())
                except (OSError, ValueError):
                    pass
            elif level == "2" and kind in ("Unified", "Data"):
                found["l2"] = size
            elif level == "3" and kind in ("Unified", "Data"):
                found["l3"] = size
    except OSError:
        pass
    assumed = [k for k in ("l1d", "l2", "l3", "line_bytes") if k not in found]
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512f" in flags:
        vector_bytes, isa = 64, "AVX-512"
    elif "avx2" in flags:
        vector_bytes, isa = 32, "AVX2"
    elif flags & {"sse2", "asimd", "neon"}:
        vector_bytes, isa = 16, "NEON" if flags & {"asimd", "neon"} else "SSE2"
    else:
        vector_bytes, isa = 16, "16-byte SIMD"
        assumed.append("vector_bytes")
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return Machine(found.get("l1d", default.l1d), found.get("l2", default.l2), found.get("l3", default.l3),
                   vector_bytes, isa, cores, found.get("line_bytes", default.line_bytes), tuple(assumed))



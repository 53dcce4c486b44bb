"""The cache key of a measurement, computed without TVM.

A measurement is looked up by the **structural text** of the program, the
target, the device and the toolchain. The structural text is

- the program in Step-TP's compact form, printed from the program with every
  tensor declared (``Analysis.complete_program``): one line, no comments, no
  layout, every access with its ``^{dtype,scope}``;
- then one line per tensor: role, name, dtype, shape, scope; inputs, then
  outputs, then temporaries, each in the analysis' order (which is the order
  of the lowered function's parameters).

Two programs with the same structural text are the same program: the text is
parsed back to the same syntax tree (the printer and parser are inverse for
it), and lowering, building and the reference evaluation are deterministic
functions of that tree. Given the same target, device and toolchain (TVM and
leir-lsp versions, which fix the code TVM generates), they build to the same
kernel, so a latency measured for one is a latency of the other. Layout and
comments, which do not change the kernel, are not in the text.

The key is stricter than TVM's ``structural_equal``, which maps variables by
position: renaming a loop variable or a tensor, or writing a literal
differently (``2`` vs ``2.0``), gives another key. Such a miss costs one
measurement; it never returns the latency of a different program. The input
shapes are part of the text (the tensor lines), so a program is never matched
with a measurement at other shapes.

Computing a key prints the program once and hashes it: well under a
millisecond for the bundled examples, and TVM is never imported.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading

from leir.printer import print_program
from leir.semantics import Analysis

#: Bumped when the structural text changes meaning, or when the same text
#: builds to another kernel, so that old keys miss. 2 (2026-12-03): the
#: lowering marks the buffers as not aliasing under the attribute name TVM
#: 0.27 reads (``tirx.noalias``; ``tir.noalias`` was ignored), which changes
#: the code of every kernel (a tiled 512^3 matmul: 3.8 ms -> 2.2 ms).
KEY_FORMAT = 2


def structural_text(analysis: Analysis) -> str:
    """The compact program followed by its tensor table (see the module
    docstring). Requires an analysis without errors. Remembered for the last
    few analyses: the key of the program, its digest and the outcomes of its
    steps all ask for it on every hover and listing of one version, and it
    prints the whole program (8 ms on a 1,000-line file)."""
    with _TEXTS_LOCK:
        for held, text in _TEXTS:
            if held is analysis:
                return text
    text = _structural_text(analysis)
    with _TEXTS_LOCK:
        _TEXTS.insert(0, (analysis, text))
        del _TEXTS[_TEXTS_HELD:]
    return text


#: Analyses whose structural text is remembered (held by identity: an
#: analysis is not changed once built).
_TEXTS_HELD = 8
_TEXTS: list[tuple[Analysis, str]] = []
_TEXTS_LOCK = threading.Lock()


def _structural_text(analysis: Analysis) -> str:
    program = print_program(analysis.complete_program(), "compact")
    # By role, keeping the order within each: the order of the inputs, and of
    # the outputs, is the order of the lowered function's parameters; how
    # they interleave with each other and with temporaries means nothing.
    ordered = sorted(analysis.tensors.values(), key=lambda t: _ROLE_ORDER[t.role])
    tensors = [f"{t.role} {t.name}: {t.dtype}[{','.join(map(str, t.shape))}] @{t.scope}" for t in ordered]
    return "\n".join([program, *tensors])


_ROLE_ORDER = {"in": 0, "out": 1, "tmp": 2}


def measurement_key(analysis: Analysis, target: str, device: str, toolchain: str | None = None) -> str:
    """The SHA-256 (hex) of the structural text, target, device and toolchain."""
    material = {
        "format": KEY_FORMAT,
        "program": structural_text(analysis),
        "target": target,
        "device": device,
        "toolchain": toolchain if toolchain is not None else default_toolchain(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


def workload_key(analysis: Analysis, device: str) -> str:
    """The key of a vendor reference: the program and the device it ran on
    (the vendor library does not depend on our target or toolchain)."""
    material = {"format": KEY_FORMAT, "program": structural_text(analysis), "device": device, "kind": "vendor"}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


def reference_key(analysis: Analysis, seeds: tuple[int, ...]) -> str:
    """The key of a check against a reference program
    (``MeasurementEngine.submit(reference=...)``): its structural text and
    the seeds of the inputs. A measurement's ``checked_against`` is this
    key, so a reader can tell which check a cached measurement passed."""
    material = {"format": KEY_FORMAT, "program": structural_text(analysis), "seeds": list(seeds), "kind": "reference"}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def default_toolchain() -> str:
    """``tvm <version>, leir-lsp <version>``, read from the installed
    distributions' metadata (TVM is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist, name in (("apache-tvm", "tvm"), ("leir-lsp", "leir-lsp")):
        try:
            parts.append(f"{name} {version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{name} unknown")
    return ", ".join(parts)

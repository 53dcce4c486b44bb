"""Putting a transformed kernel back into its file."""

from __future__ import annotations

import re
import textwrap
from typing import Any

from leir.bridge.tvmscript.discovery import KernelSource
from leir.bridge.tvmscript.loading import ParsedKernel
from leir.bridge.tvmscript.namespaces import resolve

#: The import comments TVM's printer puts above a kernel
#: (``# from tvm.script import tirx as T``).
_PRINTER_HEADER = re.compile(r"#\s*(?:from|import)\s+tvm\b.*")


def print_kernel(kernel: KernelSource | ParsedKernel, value: Any) -> str:
    """TVMScript for a PrimFunc or IRModule, printed under the kernel's name
    with the namespace names the kernel's file imports (``T``/``I`` unless
    the file says otherwise)."""
    kernel = _source(kernel)
    tir_prefix, ir_prefix = "T", "I"
    # The file's imports come after the defaults in ``aliases``: theirs win.
    for name, path in kernel.scope.aliases.items():
        resolved = resolve(path)
        if resolved is None or resolved.members:
            continue
        if resolved.namespace in ("tirx", "tir"):
            tir_prefix = name
        else:
            ir_prefix = name
    return value.script(name=kernel.name, ir_prefix=ir_prefix, extra_config={"tirx.prefix": tir_prefix})


def replace_kernel(text: str, kernel: KernelSource | ParsedKernel, new_kernel_source: str) -> str:
    """``text`` with ``kernel`` replaced by ``new_kernel_source``, re-indented
    to the kernel's indentation.

    ``new_kernel_source`` may be TVM printer output: its import comments and
    surrounding blank lines are dropped. Raises ValueError when ``kernel`` was
    found in another version of the text: an edit computed on one version is
    never applied to the next."""
    kernel = _source(kernel)
    if text[kernel.span.start : kernel.span.end] != kernel.text:
        raise ValueError(f"kernel {kernel.name!r} is not at {kernel.span.start}..{kernel.span.end} of this text")
    body = new_kernel_source.splitlines()
    while body and (not body[0].strip() or _PRINTER_HEADER.fullmatch(body[0].strip())):
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    body = textwrap.dedent("\n".join(body)).split("\n") if body else []
    newline = "\r\n" if "\r\n" in kernel.text else "\n"
    indented = body[:1] + [kernel.indent + line if line.strip() else "" for line in body[1:]]
    return text[: kernel.span.start] + newline.join(indented) + text[kernel.span.end :]


def _source(kernel: KernelSource | ParsedKernel) -> KernelSource:
    return kernel.source if isinstance(kernel, ParsedKernel) else kernel

"""Python files with TVMScript kernels as documents leir can check.

``find_kernels`` reads a file's ``@T.prim_func`` functions and ``@I.ir_module``
classes from its syntax tree; ``load_document`` screens each kernel and
parses it with TVM (``tvm.script.from_source``), mapping every error to its
range in the file; ``replace_kernel`` puts a transformed kernel back.

Opening or checking a file never runs code from it. TVM's parser evaluates
the Python expressions inside a kernel, and parses some of its strings as
Python (a quoted ``T.Buffer`` shape), so each kernel first passes the
allow-list in ``screen`` (TVMScript names, the kernel's own variables,
literals, arithmetic, the statements of a kernel body; strings that are
names, dtypes or scopes; integer constants of at most 64 bits, bounded
before anything folds them); a kernel with anything else gets an
"untrusted-code" error where it is and is not given to TVM. TVM sees only
the kernel's own text (docstrings blanked), with the file's TVMScript
aliases bound to TVMScript namespaces and nothing else: not the file's
other names, not the real ``tvm`` package. It parses that text in a worker
process with a time limit and a memory cap (``isolated``); a kernel past
either gets a "tvmscript-limit" error. docs/security.md has the whole
threat model.

Module-level constants. A kernel often uses ``N = 128`` from the top of its
file. Running the module to get ``N`` is exactly what must not happen, so a
module-level name is usable in a kernel only when it is assigned exactly
once, at the top level, to a literal that ``ast.literal_eval`` reads (a
number, string, bool, None, or a tuple or list of them); TVM gets its value.
Anything else defined outside the kernel (``N = 2 * 64``, an imported name,
a function, a name assigned in a loop or rebound through ``global``) is an
"untrusted-code" error at its use that says so.

A file that binds neither ``T`` nor ``I`` (TVM's printer output writes its
imports as comments) gets what ``tvm.script.from_source`` assumes: ``T`` is
``tvm.script.tirx`` and ``I`` is ``tvm.script.ir``.

Pre-0.27 files. ``from tvm.script import tir as T`` is parsed as TVM 0.27's
``tirx`` with ``T.block`` read as ``T.sblock`` (and ``T.block_attr`` as
``T.sblock_attr``) and ``s_tir=True`` added to its ``prim_func`` decorators,
which is what a ``tir`` kernel meant (TVM 0.27 itself cannot import
``tvm.script.tir``).

Importing this package does not import TVM; ``load_document`` does, on
first use."""

from leir.bridge.tvmscript.discovery import FileScope, KernelKind, KernelSource, find_kernels
from leir.bridge.tvmscript.loading import ParsedKernel, TVMScriptDocument, load_document, parse_kernel
from leir.bridge.tvmscript.screen import screen_kernel
from leir.bridge.tvmscript.replace import print_kernel, replace_kernel

__all__ = [
    "FileScope",
    "KernelKind",
    "KernelSource",
    "ParsedKernel",
    "TVMScriptDocument",
    "find_kernels",
    "load_document",
    "parse_kernel",
    "print_kernel",
    "replace_kernel",
    "screen_kernel",
]

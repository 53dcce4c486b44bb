"""LEIR: the language core, the TVM bridge, the transformations, the
measurement engine and the tools (docs/).

Importing ``leir`` imports nothing heavy. One thing is set up here, before
any ``leir`` module can import TVM: TVM (``tvm.relax.base_py_module``) and
its FFI package (``tvm_ffi``) import torch at their own import whenever
torch is installed (for DLPack exchange with torch tensors, which leir never
passes), and that adds 2-3 s to every process that imports TVM (measured on
this 2-core machine: ``import tvm`` 3.4 s without, 6-7 s with torch 2.13
installed for the ``lm`` extra). So ``tvm`` and ``tvm_ffi`` are imported
with torch hidden, unless torch is already loaded or
``LEIR_TVM_WITH_TORCH=1``; torch stays importable afterwards (the language
model, ``leir_models.lm``, loads it in processes that also use TVM).
"""

from __future__ import annotations

import os
import sys


class _TvmWithoutTorch:
    """A meta-path finder for the ``tvm`` and ``tvm_ffi`` packages alone: the
    real spec, whose loader runs the package's code (and the submodules it
    imports) with ``sys.modules["torch"] = None``."""

    def find_spec(self, name, path=None, target=None):
        if name not in ("tvm", "tvm_ffi") or "torch" in sys.modules:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _HidingTorch(spec.loader)
        return spec


class _HidingTorch:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        hidden = "torch" not in sys.modules
        if hidden:
            sys.modules["torch"] = None  # `import torch` raises ImportError meanwhile
        try:
            self.loader.exec_module(module)
        finally:
            if hidden and sys.modules.get("torch", 0) is None:
                del sys.modules["torch"]

    def __getattr__(self, name):
        return getattr(self.loader, name)


if os.environ.get("LEIR_TVM_WITH_TORCH") != "1" and "tvm" not in sys.modules:
    sys.meta_path.insert(0, _TvmWithoutTorch())

"""Imports from several threads at once without the import system's deadlock.

The server imports lazily from many threads (request threads, the check
threads, the warm-up, the optimize and model drivers): TVM, the
transformations, ``leir.bridge.tvmscript`` load when a request first needs
them. CPython before 3.15 takes a submodule's import lock *before* its
parent package's (``import a.b`` locks ``a.b``, then imports ``a``). When
one thread imports ``a.b`` while another imports ``a`` and ``a``'s
``__init__`` imports ``a.b``, each holds the lock the other waits for, and
the import system raises ``_DeadlockError`` into one of them
(python/cpython#83065, fixed in 3.15 by python/cpython#137196: locks taken
parent first). CI saw exactly that: a hover importing
``leir.bridge.tvmscript`` while the check thread imported
``leir.bridge.tvmscript.discovery`` failed with "deadlock detected by
_ModuleLock('leir.bridge.tvmscript.discovery')".

``install()`` makes every ``import`` statement of the process import a
dotted name's missing parents first, one at a time, so every thread takes
a package's lock before any of its submodules' locks: the order CPython
3.15 uses. A parent that another thread is importing right now (already in
``sys.modules``, still initializing) is left to the import system, as
CPython 3.15 does, which waits for it where that cannot deadlock.
``load(name)`` is ``importlib.import_module`` with the same order
(``import_module`` does not go through ``builtins.__import__``).

Installed once, by ``leir_server.server.build_server``; nothing else
changes: the wrapper calls the original ``__import__`` with the same
arguments, and a name already imported costs one dictionary lookup more.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_original_import = builtins.__import__
_installing = threading.Lock()


def _absolute(name: str, globals: Any, level: int) -> str | None:
    if level == 0:
        return name
    package = (globals or {}).get("__package__")
    if not package:
        return None  # let the import system raise its own error
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def _parents_first(name: str) -> None:
    """Import the packages above ``name`` that no thread has started
    importing, from the top down."""
    dot = name.find(".")
    while dot != -1:
        parent = name[:dot]
        if parent not in sys.modules:
            _original_import(parent)
        dot = name.find(".", dot + 1)


def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> ModuleType:
    if name not in sys.modules or level:
        absolute = _absolute(name, globals, level)
        if absolute is not None and absolute not in sys.modules:
            _parents_first(absolute)
    return _original_import(name, globals, locals, fromlist, level)


def install() -> None:
    """Make ``import`` statements lock parents before children (idempotent)."""
    with _installing:
        if builtins.__import__ is not _import:
            builtins.__import__ = _import


def installed() -> bool:
    return builtins.__import__ is _import


def load(name: str) -> ModuleType:
    """``importlib.import_module(name)`` (an absolute name), parents first."""
    if name not in sys.modules:
        _parents_first(name)
    return importlib.import_module(name)

"""TVM's TVMScript parser, run in a worker process with limits.

The screen (``leir.bridge.tvmscript.screen``) decides what text TVM may see; this
module decides where TVM reads it. Parsing a screened kernel still costs
what the kernel asks for (TVM builds its IR, checks it, folds what it
folds), so the parse runs in a worker process with a memory cap
(``MEMORY_CAP``) and a time limit (``PARSE_TIMEOUT_S``): a kernel that asks
for more fails with a diagnostic, the worker is killed and replaced, and
the caller (the editor's check thread, ``leir check``) never waits longer
than the limit. The worker sends back the parsed IR as TVM's own JSON
serialization (``tvm.ir.save_json``), which the caller loads with
``tvm.ir.load_json`` when it needs the IR (data, not code): checking a
file needs only the diagnostics, and imports no TVM in the caller.

A process that already runs under such limits (a measurement or job worker,
``leir.sandbox.isolated()``) parses in place.
"""

from __future__ import annotations

import atexit
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from leir import sandbox

#: Longest a kernel's parse may take, once the worker is up. A kernel of a
#: few thousand lines parses in well under a second; past this it is a
#: kernel built to keep TVM busy.
PARSE_TIMEOUT_S = 20.0
#: The parse worker's memory cap.
MEMORY_CAP = 2 * 1024**3

#: Modules the worker starts with (its forkserver imports them once).
PRELOAD = ["tvm", "tvm.script", "leir.bridge.tvmscript.isolated"]


@dataclass(frozen=True)
class ParseFailure:
    """Why TVM did not parse a kernel. ``kind`` is "syntax" (a SyntaxError
    at ``lineno``/``offset`` of the parsed text), "tvm" (TVM raised
    ``type_name`` with ``message``) or "limit" (the parse went past the
    time limit or the memory cap, or its worker died)."""

    kind: str
    message: str
    type_name: str = ""
    lineno: int | None = None
    offset: int | None = None


@dataclass(frozen=True)
class Serialized:
    """What the worker parsed, as TVM's JSON (``tvm.ir.save_json``)."""

    text: str

    def load(self) -> Any:
        import tvm

        return tvm.ir.load_json(self.text)


def parse_source(text: str, aliases: dict[str, str], constants: dict[str, Any]) -> Any:
    """What ``tvm.script.from_source(text)`` makes of a screened kernel,
    with ``aliases`` (local name -> TVMScript path) bound to TVMScript's
    namespaces and ``constants`` (literal module constants) to their
    values: ``Serialized`` from the worker, the IR itself when parsed in
    place, a ``ParseFailure`` when it does not parse."""
    if sandbox.isolated():
        return _parse(text, aliases, constants)
    from pebble import ProcessExpired

    pool = _pool()
    future = pool.schedule(_parse_to_json, args=(text, aliases, constants), timeout=PARSE_TIMEOUT_S)
    try:
        outcome = future.result()
    except TimeoutError:
        return ParseFailure("limit", f"TVM's parser took longer than {PARSE_TIMEOUT_S:.0f} s on this kernel and was stopped")
    except ProcessExpired as e:
        return ParseFailure("limit", f"TVM's parser stopped on this kernel: its worker process died ({e})")
    except Exception as e:  # noqa: BLE001 - a pool that cannot start workers raises; the next parse starts a new one
        _discard(pool)
        return ParseFailure("limit", f"TVM's parser could not run: {type(e).__name__}: {e}")
    return outcome if isinstance(outcome, ParseFailure) else Serialized(outcome)


def _parse(text: str, aliases: dict[str, str], constants: dict[str, Any]) -> Any:
    from leir.bridge.tvmscript.namespaces import namespace_values

    extra_vars = namespace_values(aliases)
    for name, value in constants.items():
        extra_vars.setdefault(name, value)
    import tvm.script

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tvm.script.from_source(text, extra_vars=extra_vars)
    except SyntaxError as e:
        return ParseFailure("syntax", e.msg or "invalid syntax", "SyntaxError", e.lineno, e.offset)
    except MemoryError:
        cap = sandbox.memory_cap()
        given = f"the {cap // 1024**2} MiB" if cap else "the memory"
        return ParseFailure("limit", f"TVM's parser needed more than {given} leir gives it for this kernel")
    except RecursionError:
        return ParseFailure("limit", "TVM's parser recursed too deeply on this kernel")
    except Exception as e:  # noqa: BLE001 - TVM reports a user's mistakes by raising anything
        return ParseFailure("tvm", str(e), type(e).__name__)


def _parse_to_json(text: str, aliases: dict[str, str], constants: dict[str, Any]) -> "str | ParseFailure":
    """``_parse`` in the worker, its IR as TVM's JSON."""
    value = _parse(text, aliases, constants)
    if isinstance(value, ParseFailure):
        return value
    import tvm

    try:
        return tvm.ir.save_json(value)
    except Exception as e:  # noqa: BLE001 - what TVM parsed is not an IR node it can serialize
        return ParseFailure("tvm", f"the parsed kernel is not TVM IR ({type(value).__name__}): {e}", type(e).__name__)


_lock = threading.Lock()
_workers = None


def _pool():
    global _workers
    import pebble

    with _lock:
        if _workers is None or not _workers.active:
            _workers = pebble.ProcessPool(
                max_workers=1,
                initializer=sandbox.worker_initializer,
                initargs=(MEMORY_CAP,),
                context=sandbox.worker_context(PRELOAD),
            )
            atexit.register(_close, _workers)
        return _workers


def _discard(pool) -> None:
    """Forget ``pool`` (if it is still the current one) and stop it; ``None`` is
    a pool already discarded (a worker that died takes its pool with it)."""
    global _workers
    if pool is None:
        return
    with _lock:
        if _workers is pool:
            _workers = None
    _close(pool)


def _close(pool) -> None:
    pool.stop()
    pool.join(timeout=5)

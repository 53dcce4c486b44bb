"""Import what the first requests need, in the background, once the client
is told the server is ready.

``initialize`` is answered before any of this loads (the reply must come
in well under a second), but the first hover or code-action menu would
otherwise pay for importing the transformations and SymPy (half a second
to seconds on a loaded machine). A daemon thread imports them while the
editor is still opening its first document; a request that needs a module
being imported waits for that import only. TVM is not imported here: only
Python documents with kernels need it in this process, and they load it
when one is opened.

Then ``gc.freeze()``: the hundreds of thousands of objects those imports
create live as long as the server, and a frozen heap is not walked again
by every full collection (pauses an editor user would feel as latency).
And a higher threshold for the youngest generation (``GC_THRESHOLDS``):
checking a 1,000-line file allocates some 10^5 objects, which at Python's
default (700) set off dozens of collections per check, and every tenth
promotes survivors into older generations that are collected again.
``python bench/gc_thresholds.py`` (40 edits of such a file: re-parse, check
and rank at the cursor, two versions alive) measured the p95 of one change
at 157-211 ms with the defaults and 52-56 ms with these (2026-11-30, load
about 1). The collector still runs; it runs less often, over more garbage at a time.
"""

from __future__ import annotations

import gc
import logging
import threading

from leir_server import imports

logger = logging.getLogger(__name__)

#: gc.set_threshold after the warm-up (Python's default is 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 100)

#: In the order the first requests use them.
MODULES = ("leir.bridge.document", "leir.bridge.outline", "leir.transforms", "leir.tools.suggest", "leir.explain", "sympy")


def _warm_up() -> None:
    for name in MODULES:
        try:
            imports.load(name)
        except Exception as e:  # a broken optional import must not stop the server
            logger.warning("warm-up: importing %s failed: %s", name, e)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    logger.info("warm-up done: %d objects frozen", gc.get_freeze_count())


def start() -> threading.Thread:
    thread = threading.Thread(target=_warm_up, name="leir-warm-up", daemon=True)
    thread.start()
    return thread

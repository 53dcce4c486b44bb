"""The model worker: the local model ranks a document's steps in a process
of its own, in the background, so that listing never waits for it.

Loading the model imports torch (seconds) and ranking a large program takes
100-600 ms, which the protocol loop and a code-action listing (milliseconds)
cannot afford. So, when ``model_enabled`` is set, each new version of a
document (``didOpen``/``didChange``) is queued here; one child process
(started on the first request, from the job pool's context) loads the ranker
once (``RANKER_FACTORY`` called with the worker's ``ranker`` name:
``leir.tools.ranking.load_ranker(name)``, the name the ``model.tier``
setting picks, "model" for the embedded tier and "smollm2" for the larger
one) and scores every step of the version, and has a ranker that writes
reasoning (``explain``) write it for the version's first few steps, which
hover shows as predicted. The listing uses those
scores only when they are for the document's current version (and kernel
and target), and the heuristic otherwise (``PrecomputedRanker``).

- A newer version of a document replaces its pending ranking (the older one
  is never sent; one already running finishes unseen).
- A child that dies, or does not answer within ``RANK_TIMEOUT_S`` (the
  larger tier: ``RANK_TIMEOUT_S_OF``), is killed and replaced on the next
  request; that version keeps the heuristic.
- When no model is installed (``leir.tools.ranking.ranker_missing``, which
  reads no weights), no child starts at all; a child whose ranker fell back
  to the heuristic anyway (the model failed to load) says so and is stopped; no other starts (``active`` stays "heuristic", which
  the server logs and reports), so a server without a model holds no
  process for it.
- ``close`` stops the child (shutdown, exit, ``leir.restart``, a change of
  ``model.tier`` or of the SOL settings: the server then starts a worker
  for the new ones).
- ``sol`` (the ``model.sol`` settings: budget, runtime, precision; None:
  dense) has the child decode the reasoning under the SOL policy shipped
  beside the model (``SOL_DECODING``, in ``leir_models``); the ranking
  stays dense. When it cannot (no policy, ORT does not load) the child
  decodes densely and says why. What the ranker
  reports of its decoding (its optional ``decoding()``: a ``text`` clause
  such as "reasoning decoded with SOL at budget 0.5 (net keep 0.53, torch
  (cpu))") is ``ModelWorker.decoding``, handed to ``on_active`` with the
  ranker's name when it loads and to ``on_update`` when the clause changes
  after a ranking (the net keep reached so far).

Nothing from a document is executed: the child parses and analyses it as
the request threads do.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

logger = logging.getLogger(__name__)

#: "module:function" returning the ``Ranker`` the child uses, called with the
#: ranker's name (``ModelWorker.ranker``). A test points it at a fake ranker;
#: nothing outside the server's own code sets it.
RANKER_FACTORY = "leir_server.model_worker:load_model_ranker"
#: "module:function" that gives the child's ranker its reasoning decoded
#: under SOL: called with (ranker, budget, runtime, precision), it returns
#: the ranker to use (``leir_models.sol.reasoning.with_sol``; the model's
#: own ranker class cannot offer it as a method, see there). Named, not
#: imported, as ``RANKER_FACTORY``: the server imports no model.
SOL_DECODING = "leir_models.sol.reasoning:with_sol"
#: Seconds a ranking may take (the first includes loading torch and the
#: model) before the child is taken for hung, killed and replaced.
RANK_TIMEOUT_S = 60.0
#: The same for the rankers that need longer: SmolLM2-135M (the larger
#: tier) took 9 s to load and 35 s to rank examples/gqa_attention.leir's
#: 208 candidates on one busy core here (docs/model.md), too close to 60 s.
RANK_TIMEOUT_S_OF = {"smollm2": 240.0}
#: Seconds more the child may take to load with ``model.sol.runtime``
#: "onnx": the first time, the MLP graphs are exported (36 for the
#: embedded model, about 20 s on an idle core; docs/sol.md).
SOL_ONNX_LOAD_S = 180.0


def load_model_ranker(name: str = "model"):
    """The ranker called ``name`` in ``leir.rankers``, or the heuristic when it cannot load (logged)."""
    from leir.tools.ranking import load_ranker

    return load_ranker(name)


def _factory(path: str) -> Callable:
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"ranker factory {path!r}: expected 'module:function'")
    return getattr(importlib.import_module(module), name)


class _Recording:
    """Wraps a ranker and keeps every (step key -> score, facts) it gives:
    the scores are keyed by the LEIR steps ``suggest`` ranks, which are what
    a listing's ranker is asked about again."""

    def __init__(self, ranker):
        self.ranker, self.name = ranker, ranker.name
        self.reasoning_note = getattr(ranker, "reasoning_note", None)
        self.scores: dict[str, tuple[float, tuple[str, ...]]] = {}
        #: step key -> the reasoning the ranker wrote (``Ranker.explain``), grounded already.
        self.reasonings: dict[str, str] = {}

    def score(self, ctx, steps, target):
        out = self.ranker.score(ctx, steps, target)
        for step, (score, facts) in zip(steps, out):
            self.scores[step.key] = (float(score), tuple(facts))
        return out

    def explain(self, ctx, step, target):
        explain = getattr(self.ranker, "explain", None)
        text = explain(ctx, step, target) if callable(explain) else None
        if text:
            self.reasonings[step.key] = text
        return text


def with_decoding(ranker, sol: tuple[float, str, str] | None):
    """``ranker`` with its reasoning decoded as ``sol`` asks (module doc):
    ``SOL_DECODING``'s when SOL is asked for and the ranker writes
    reasoning; else itself."""
    if sol is None or ranker.name == "heuristic" or not callable(getattr(ranker, "explain", None)):
        return ranker
    try:
        with_sol = _factory(SOL_DECODING)
    except ImportError as e:  # the models without their SOL part: the reasoning stays dense
        logger.warning("SOL decoding is not installed (%s): the reasoning is decoded densely", e)
        return ranker
    budget, runtime, precision = sol
    return with_sol(ranker, budget, runtime, precision)


def decoding_of(ranker) -> dict | None:
    """What ``ranker`` says of how it decodes its reasoning (plain data), or None."""
    decoding = getattr(ranker, "decoding", None)
    return decoding() if callable(decoding) else None


def child_main(conn, factory: str, name: str = "model", sol: tuple[float, str, str] | None = None) -> None:
    """The worker process: load the ranker ``name`` once (its reasoning
    decoded as ``sol`` asks), say which it is and how it decodes, then
    answer each (uri, version, text, language, kernel, target) with the
    scores of every step of that version and how it decodes now."""
    from leir.tools.suggest import suggest

    ranker = with_decoding(_factory(factory)(name), sol)
    conn.send(("ready", ranker.name, decoding_of(ranker)))
    while True:
        try:
            uri, version, text, language, kernel, target = conn.recv()
        except EOFError:  # the server is gone
            return
        recording = _Recording(ranker)
        try:
            suggest(text, language, None, kernel=kernel, target=target, ranker=recording)
            conn.send(("ranked", uri, version, (recording.scores, recording.reasonings, recording.reasoning_note,
                                                decoding_of(ranker))))
        except Exception as e:  # noqa: BLE001 - one document's failure is that ranking's, not the worker's
            conn.send(("failed", uri, version, f"{type(e).__name__}: {e}"))


@dataclass(frozen=True)
class Request:
    uri: str
    version: int | None
    text: str
    language: str
    kernel: str | None
    target: str


@dataclass(frozen=True)
class Ranking:
    """The model's scores of one version's steps (LEIR step key -> score, facts)."""

    request: Request
    source: str
    scores: dict
    #: LEIR step key -> the reasoning the model wrote for it (the document's
    #: first ``leir.tools.suggest.EXPLAIN_TOP`` steps), checked against its facts.
    reasonings: dict = field(default_factory=dict)
    #: Said beside that reasoning ("decoded under SOL at budget 0.5"), or None.
    reasoning_note: str | None = None


class PrecomputedRanker:
    """A ``leir.tools.ranking.Ranker`` that answers from a ``Ranking`` and
    asks the heuristic about any step it does not hold (no waiting)."""

    def __init__(self, ranking: Ranking):
        self.ranking, self.name = ranking, ranking.source
        self.reasoning_note = ranking.reasoning_note

    def score(self, ctx, steps, target):
        from leir.tools.ranking import HEURISTIC

        missing = [s for s in steps if s.key not in self.ranking.scores]
        rest = dict(zip((s.key for s in missing), HEURISTIC.score(ctx, missing, target))) if missing else {}
        return [self.ranking.scores.get(s.key) or rest[s.key] for s in steps]

    def explain(self, ctx, step, target):
        """What the model wrote for ``step`` in the background, or None."""
        return self.ranking.reasonings.get(step.key)


class ModelWorker:
    """The server's one model process and its queue (see the module docstring)."""

    def __init__(self, factory: str | None = None, timeout: float | None = None, on_active=None, context=None,
                 ranker: str = "model", sol: tuple[float, str, str] | None = None, on_update=None):
        self.factory = factory or RANKER_FACTORY
        #: The name of the ranker the child loads (``leir.rankers``; the ``model.tier`` setting's).
        self.ranker = ranker
        #: (budget, runtime, precision) of the reasoning's SOL decoding (the ``model.sol`` settings); None: dense.
        self.sol = sol
        #: Returns the multiprocessing context the child starts from (the
        #: server passes its job pool's forkserver; by default leir's sandbox
        #: forkserver with the measurement modules preloaded).
        self.context = context
        self.timeout = RANK_TIMEOUT_S_OF.get(ranker, RANK_TIMEOUT_S) if timeout is None else timeout
        #: Called (from the driver thread) with the ranker's name and ``decoding`` once a child has loaded it.
        self.on_active = on_active
        #: Called (from the driver thread) with the same when ``decoding``'s text changed after a ranking.
        self.on_update = on_update
        #: The name of the ranker the child loaded ("heuristic" after a fallback); None before.
        self.active: str | None = None
        #: How the child's ranker decodes its reasoning (its ``decoding()``: plain data with a ``text``
        #: clause), as of its last answer; None before, or when the ranker does not say.
        self.decoding: dict | None = None
        #: How many child processes were started (the tests read it).
        self.started = 0
        self.process = None
        self._conn = None
        self._cond = threading.Condition()
        self._pending: dict[str, Request] = {}
        self._ready: dict[str, Ranking] = {}
        self._thread: threading.Thread | None = None
        self.closed = False

    # ---- asked from the server

    def submit(self, request: Request) -> None:
        """Rank ``request``'s version in the background, replacing any
        pending ranking of the same document."""
        with self._cond:
            if self.closed:
                return
            self._pending[request.uri] = request
            if self._thread is None:
                self._thread = threading.Thread(target=self._drive, name="leir-model-driver", daemon=True)
                self._thread.start()
            self._cond.notify()

    def ranking(self, uri: str, version: int | None, kernel: str | None, target: str) -> Ranking | None:
        """The finished ranking of exactly this version, kernel and target, or None."""
        with self._cond:
            found = self._ready.get(uri)
        if found is None:
            return None
        r = found.request
        return found if (r.version, r.kernel, r.target) == (version, kernel, target) else None

    def forget(self, uri: str) -> None:
        with self._cond:
            self._pending.pop(uri, None)
            self._ready.pop(uri, None)

    def close(self) -> None:
        """Stop the child and the driver; nothing is ranked afterwards."""
        with self._cond:
            self.closed = True
            self._pending.clear()
            self._cond.notify()
        self._kill()
        if self._thread is not None:
            self._thread.join(10)

    # ---- the driver thread

    def _drive(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self.closed:
                    self._cond.wait()
                if self.closed:
                    return
                uri = next(iter(self._pending))
                request = self._pending.pop(uri)
            try:
                answer = self._ask(request)
            except Exception as e:  # noqa: BLE001 - the worker is replaced; listing keeps the heuristic
                if self.closed:
                    return
                logger.warning("model ranking of %s (version %s) failed: %s; the child is replaced", uri,
                               request.version, e)
                self._kill()
                continue
            if answer is None:
                continue
            kind, _, version, payload = answer
            if kind == "failed":
                logger.info("model ranking of %s (version %s) failed: %s", uri, version, payload)
                continue
            scores, reasonings, note, decoding = payload
            with self._cond:
                if not self.closed and uri not in self._pending:  # not superseded meanwhile
                    self._ready[uri] = Ranking(request, self.active or "model", scores, reasonings, note)
            self._decoded(decoding)

    def _decoded(self, decoding: dict | None) -> None:
        """Keep what the child said of its decoding after a ranking; tell
        ``on_update`` when its text changed (the net keep reached so far)."""
        said = (self.decoding or {}).get("text")
        self.decoding = decoding
        if decoding is not None and decoding.get("text") != said and self.on_update is not None and not self.closed:
            self.on_update(self.active, decoding)

    def _start(self) -> None:
        if self.context is not None:
            ctx = self.context()
        else:
            from leir import sandbox

            ctx = sandbox.worker_context(sandbox.MEASUREMENT_PRELOAD)
        conn, child = ctx.Pipe()
        process = ctx.Process(target=child_main, args=(child, self.factory, self.ranker, self.sol),
                              name="leir-model", daemon=True)
        process.start()
        child.close()
        with self._cond:  # close() may run meanwhile, from another thread: it must find a started child or none
            closed = self.closed
            if not closed:
                self.process, self._conn = process, conn
                self.started += 1
        if closed:
            process.kill()
            process.join(5)
            conn.close()
            raise RuntimeError("the worker was closed while its child started")
        load = self.timeout + (SOL_ONNX_LOAD_S if self.sol is not None and self.sol[1] == "onnx" else 0.0)
        if not conn.poll(load):
            raise RuntimeError(f"the ranker did not load within {load:g} s")
        kind, name, decoding = conn.recv()
        self.active, self.decoding = name, decoding
        if name == "heuristic":
            logger.warning("the model did not load (see the model worker's log): suggestions use the heuristic")
        else:
            logger.info("model worker ready: suggestions ranked by %s%s", name,
                        f", {decoding['text']}" if decoding else "")
        if self.on_active is not None:
            self.on_active(name, decoding)
        if name == "heuristic":
            self._kill()  # nothing for it to do: the listing's own heuristic is the same ranking

    def _ask(self, request: Request):
        """Send one request and wait for its answer; raises when the child
        dies or hangs (the caller replaces it)."""
        if self.active == "heuristic":
            return None  # the model did not load: no child is kept, and none is started again
        if self.process is None or not self.process.is_alive():
            if self.started == 0 and self.factory == RANKER_FACTORY and self._missing():
                return None
            self._kill()
            self._start()
            if self.active == "heuristic":
                return None
        conn = self._conn
        if conn is None:
            raise RuntimeError("the worker was closed")
        conn.send((request.uri, request.version, request.text, request.language, request.kernel, request.target))
        if not conn.poll(self.timeout):
            raise RuntimeError(f"no answer within {self.timeout:g} s")
        return conn.recv()  # EOFError when the child died (or was killed by close)

    def _missing(self) -> bool:
        """Whether the model is known missing before any child starts
        (``leir.tools.ranking.ranker_missing``: no model file, nothing
        installed); then the heuristic is said to be in use, once, and no
        process is ever started."""
        from leir.tools.ranking import ranker_missing

        reason = ranker_missing(self.ranker)
        if reason is None:
            return False
        self.active = "heuristic"
        logger.warning("no local model %r (%s): suggestions use the heuristic", self.ranker, reason)
        if self.on_active is not None:
            self.on_active("heuristic", None)
        return True

    def _kill(self) -> None:
        with self._cond:
            process, conn = self.process, self._conn
            self.process = self._conn = None
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(5)
        if conn is not None:
            conn.close()

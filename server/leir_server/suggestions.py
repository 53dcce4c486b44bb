"""What hover, code actions, code lenses and save hints share: the ranked
suggestions of a snapshot and the cached latencies of its program, computed
in a thread (a Python file's kernel is parsed by TVM, which takes seconds to
import the first time) and never by building anything.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leir.semantics import Analysis
    from leir.tools.suggest import Suggestion

    from leir_server.session.snapshot import DocumentSnapshot


def compute(server, snapshot: "DocumentSnapshot", offset: int | None, limit: int | None = None,
            kernel: str | None = None, only: tuple[str, ...] | None = None) -> list["Suggestion"]:
    """The suggestions at ``offset`` (blocking; run it in a thread);
    ``only``: these transformations."""
    from leir.tools.suggest import suggest

    if snapshot.too_large:
        return []
    doc = None
    if snapshot.language == "leir":
        doc = snapshot.leir  # parsed once per version, shared by every request on it
        if doc is None or not doc.ok:
            return []
    lookup = server.session.workers.lookup()
    return suggest(snapshot.text, snapshot.language, offset, kernel=kernel,
                   target=server.session.settings.target, measured=lookup, limit=limit, document=doc, only=only,
                   ranker=ready_ranker(server, snapshot, kernel))


def ready_ranker(server, snapshot: "DocumentSnapshot", kernel: str | None):
    """The model's ranking of this very version (``leir_server.model_worker``)
    when it is finished, else None (the heuristic): listing never waits."""
    model = server.session.workers.model  # once: a settings change may stop it meanwhile
    settings = server.session.settings
    if not settings.model_enabled or model is None or not _serves(model, settings):
        return None
    from leir_server.model_worker import PrecomputedRanker

    found = model.ranking(snapshot.uri, snapshot.version, kernel, server.session.settings.target)
    return PrecomputedRanker(found) if found is not None else None


def queue_ranking(server, uri: str) -> None:
    """After didOpen/didChange: have the model worker rank the document's
    new version in the background, when ``model_enabled`` is set (the
    worker's process starts with the first one)."""
    session = server.session
    if not session.settings.model_enabled or session.workers.closed or session.settings_pending:
        return
    snapshot = session.snapshot(uri)
    if snapshot is None or snapshot.too_large:
        return
    from leir_server.model_worker import Request

    worker = session.workers.model_worker(on_active=lambda name, decoding: _say_active(server, name, decoding),
                                          ranker=session.settings.model_ranker, sol=session.settings.model_sol,
                                          on_update=lambda name, decoding: _say_ranker(server, name, decoding))
    worker.submit(Request(uri, snapshot.version, snapshot.text, snapshot.language, None, session.settings.target))


def settings_changed(server) -> None:
    """The settings are (re)read: with ``model_enabled`` off, the model
    worker stops (its process goes); on, every open document is queued for
    it. A worker of another ``model.tier`` or other ``model.sol`` settings
    is stopped first, and one for the new ones loads its model as the first
    ranking asks for it."""
    session = server.session
    if session.settings_pending:
        return
    model = session.workers.model
    if not session.settings.model_enabled or (model is not None and not _serves(model, session.settings)):
        session.workers.stop_model()
    if not session.settings.model_enabled:
        return
    for uri in list(session.languages):
        queue_ranking(server, uri)


def _serves(model, settings) -> bool:
    """Whether the model worker ``model`` is the one ``settings`` ask for (tier and SOL decoding)."""
    return (model.ranker, model.sol) == (settings.model_ranker, settings.model_sol)


def _say_active(server, name: str, decoding: dict | None) -> None:
    """Tell the client which ranker the model worker loaded, and how it
    decodes its reasoning (from its driver thread)."""
    from lsprotocol import types

    if name == "heuristic":
        message = "leir: the local model did not load (none installed?); suggestions are ranked by the heuristic"
    else:
        message = f"leir: suggestions are ranked by the local model ({name})"
        if decoding is not None:
            message += f", {decoding['text']}"
    try:
        server.window_log_message(types.LogMessageParams(type=types.MessageType.Info, message=message))
    except Exception:  # noqa: BLE001 - the client is gone; nothing to tell
        return
    _say_ranker(server, name, decoding)


def _say_ranker(server, name: str, decoding: dict | None) -> None:
    """``leir/ranker``: the ranker's name and, when it says, how its
    reasoning is decoded (``reasoning``, one clause; ``decoding``, the data)."""
    params: dict = {"ranker": name}
    if decoding is not None:
        params["reasoning"] = decoding["text"]
        params["decoding"] = {_camel(k): v for k, v in decoding.items() if k != "text"}
    try:
        # Its own notification: a leir/status here would say "not measuring" in the middle of a measurement.
        server.protocol.notify("leir/ranker", params)
    except Exception:  # noqa: BLE001 - the client is gone; nothing to tell
        pass


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


async def at(server, snapshot: "DocumentSnapshot", offset: int | None, limit: int | None = None,
             kernel: str | None = None) -> list["Suggestion"]:
    return await asyncio.to_thread(compute, server, snapshot, offset, limit, kernel)


def kernel_analysis(snapshot: "DocumentSnapshot", kernel: str | None) -> "Analysis | None":
    """The LEIR analysis of a document's program (a ``.leir`` file) or of
    one of its Python kernels (raised; blocking: TVM parses it); None when it
    has errors."""
    if snapshot.language == "leir":
        doc = snapshot.leir
        return doc.analysis if doc is not None and doc.ok else None
    from leir.tools.suggest import kernel_at
    from leir.transforms import TransformError

    try:
        return kernel_at(snapshot.text, kernel).ctx.analysis
    except TransformError:
        return None


def kernel_names(snapshot: "DocumentSnapshot") -> list[tuple[str | None, object]]:
    """(kernel, span) of each kernel: the one program of a ``.leir``
    document (kernel None, span of its first loop nest), or each function
    of a Python file (from its syntax tree; nothing runs)."""
    import ast

    from leir.ast import Span

    if snapshot.language == "leir":
        doc = snapshot.leir
        if doc is None or not doc.program.units:
            return []
        first = doc.program.units[0].span
        return [(None, first if first is not None else Span(0, 0))]
    out = []
    for k in snapshot.kernels:
        if isinstance(k.node, ast.ClassDef):  # an ir_module: each of its functions
            for node in k.node.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((node.name, k.span))
        else:
            out.append((k.name, k.span))
    return out

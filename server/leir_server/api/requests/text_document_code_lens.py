"""``textDocument/codeLens``: over each kernel, its latency on the current
target from the measurement cache (or "measure"), "optimize…", and how many
steps were applied to it through this server.

Every lens carries its command (the contract's names: ``leir.measure``,
``leir.optimize``, ``leir.showTrajectory``) with ``{uri, kernel}``.
Latencies are read from the cache only; a Python kernel is raised to LEIR
in a thread to compute its cache key.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import suggestions
from leir_server.schedule import Background

OPTIONS = types.CodeLensOptions(resolve_provider=False)


def _latencies(server, snapshot, kernels) -> dict:
    lookup = server.session.workers.lookup()
    out = {}
    for kernel, _ in kernels:
        if lookup is None:
            out[kernel] = None
            continue
        analysis = suggestions.kernel_analysis(snapshot, kernel)
        out[kernel] = lookup.measured(analysis) if analysis is not None else None
    return out


async def handle(server: LanguageServer, params: types.CodeLensParams,
                 request: Background) -> list[types.CodeLens] | None:
    from leir.explain.editor import latency_text  # leir.explain: the first request pays for it, not the start-up

    snapshot = request.snapshot
    if snapshot is None or snapshot.too_large:
        return None
    kernels = await request.run(suggestions.kernel_names, snapshot,
                                what="listing the kernels")  # parses a .leir file: off the loop
    if not kernels:
        return []
    measured = await request.run(_latencies, server, snapshot, kernels, what="reading the cached latencies")
    target = server.session.settings.target
    lenses = []
    for kernel, span in kernels:
        start = snapshot.position(span.start)
        rng = types.Range(start=start, end=start)
        args = [{"uri": snapshot.uri} if kernel is None else {"uri": snapshot.uri, "kernel": kernel}]
        m = measured.get(kernel)
        if m is not None and m.median_ms:
            title = f"{latency_text(m.median_ms)} on {target} ({m.device})"
        else:
            title = "measure"
        steps = len(server.session.trajectory(snapshot.uri, kernel))
        shown = ((title, "leir.measure"), ("optimize…", "leir.optimize"),
                 (f"{steps} step{'' if steps == 1 else 's'} applied", "leir.showTrajectory"))
        if not server.session.trusted:  # measuring and optimizing run kernels
            shown = shown[2:]
        for text, command in shown:
            lenses.append(types.CodeLens(range=rng, command=types.Command(title=text, command=command,
                                                                          arguments=args)))
    return lenses

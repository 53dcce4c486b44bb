"""``textDocument/foldingRange``: loop bodies, comment blocks and, in
Python files, TVMScript kernels (``leir.bridge.outline``)."""

from __future__ import annotations

from lsprotocol import types

from leir_server.schedule import Background

_KIND = {"region": types.FoldingRangeKind.Region, "comment": types.FoldingRangeKind.Comment}


async def handle(server, params: types.FoldingRangeParams, request: Background) -> list[types.FoldingRange] | None:
    snapshot = request.snapshot
    if snapshot is None or snapshot.too_large:
        return None
    return await request.run(snapshot.once, "foldingRange", lambda: folding_ranges(snapshot),
                             what="folding ranges")  # parses: off the protocol loop


def folding_ranges(snapshot) -> list[types.FoldingRange]:
    from leir.bridge import outline

    if snapshot.language == "leir":
        folds = outline.leir_folds(snapshot.text, snapshot.leir.program, snapshot.source)
    else:
        folds = outline.tvmscript_folds(snapshot.text, snapshot.source)
    return [types.FoldingRange(start_line=f.start_line, end_line=f.end_line, kind=_KIND[f.kind]) for f in folds]

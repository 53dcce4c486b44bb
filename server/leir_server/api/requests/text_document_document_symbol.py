"""``textDocument/documentSymbol``: the outline of a document, as a tree:
kernel -> loop nests -> loops, with tensors as variables (``leir.bridge.outline``)."""

from __future__ import annotations

import re

from lsprotocol import types

from leir_server.schedule import Background
from leir_server.session.snapshot import uri_to_path

_KIND = {
    "kernel": types.SymbolKind.Function,
    "module": types.SymbolKind.Module,
    "nest": types.SymbolKind.Namespace,
    "loop": types.SymbolKind.Operator,
    "tensor": types.SymbolKind.Variable,
}


async def handle(server, params: types.DocumentSymbolParams, request: Background):
    snapshot = request.snapshot
    if snapshot is None or snapshot.too_large:
        return None
    # A parse of a big file takes a while: never on the protocol loop.
    tree = await request.run(snapshot.once, "documentSymbol", lambda: symbols(snapshot), what="the outline")
    if _hierarchical(server):
        return tree
    return list(_flat(snapshot.uri, tree, None))


def _hierarchical(server) -> bool:
    capabilities = server.client_capabilities
    text_document = capabilities.text_document if capabilities is not None else None
    symbol = text_document.document_symbol if text_document is not None else None
    return bool(symbol is not None and symbol.hierarchical_document_symbol_support)


def _flat(uri: str, tree: list[types.DocumentSymbol], container: str | None):
    """The tree as the flat list a client without hierarchical support reads."""
    for symbol in tree:
        yield types.SymbolInformation(name=symbol.name, kind=symbol.kind, container_name=container,
                                      location=types.Location(uri=uri, range=symbol.range))
        yield from _flat(uri, symbol.children or [], symbol.name)


#: Most symbols in one outline, kept breadth first (kernels, then nests,
#: then their loops): an outline of 100,000 lines had 60,000, which took
#: the protocol loop seconds to serialise and no editor shows usefully.
MAX_SYMBOLS = 5000


def symbols(snapshot) -> list[types.DocumentSymbol]:
    from leir.bridge import outline

    if snapshot.language == "leir":
        doc = snapshot.leir
        found = outline.leir_symbols(snapshot.text, kernel_name(snapshot.uri), doc.program, doc.analysis)
    else:
        found = outline.tvmscript_symbols(snapshot.text)
    kept: set[int] = set()
    level = list(found)
    while level and len(kept) < MAX_SYMBOLS:
        level = level[:MAX_SYMBOLS - len(kept)]
        kept.update(id(s) for s in level)
        level = [c for s in level for c in s.children]
    return [_lsp(snapshot, s, kept) for s in found if id(s) in kept]


def kernel_name(uri: str) -> str:
    """A ``.leir`` file's one kernel is named after the file, as ``leir
    convert`` names it."""
    path = uri_to_path(uri) or uri
    stem = re.sub(r"\.leir$", "", path.rsplit("/", 1)[-1])
    name = re.sub(r"\W", "_", stem)
    return name if name.isidentifier() else "main"


def _lsp(snapshot, symbol, kept: set[int]) -> types.DocumentSymbol:
    range_ = snapshot.range(symbol.span)
    selection = snapshot.range(symbol.selection)
    if not (symbol.span.start <= symbol.selection.start and symbol.selection.end <= symbol.span.end):
        selection = types.Range(start=range_.start, end=range_.start)  # LSP requires it inside the range
    return types.DocumentSymbol(
        name=symbol.name or "?",  # an empty name is invalid in LSP
        kind=_KIND[symbol.kind],
        range=range_,
        selection_range=selection,
        detail=symbol.detail or None,
        children=[_lsp(snapshot, c, kept) for c in symbol.children if id(c) in kept],
    )

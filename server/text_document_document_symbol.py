"""``textDocument/documentSymbol``: the outline of a document, as a tree:
kernel -> loop nests -> loops, with tensors as variables (``leir.outline``)."""

from __future__ import annotations

import re

from lsprotocol import types

from leir_server.requests import BUDGET_S, off_loop
from leir_server.session import uri_to_path

_KIND = {
    "kernel": types.SymbolKind.Function,
    "module": types.SymbolKind.Module,
    "nest": types.SymbolKind.Namespace,
    "loop": types.SymbolKind.Operator,
    "tensor": types.SymbolKind.Variable,
}


async def handle(server, params: types.DocumentSymbolParams):
    snapshot = server.session.snapshot(params.text_document.uri)
    if snapshot is None or snapshot.too_large:
        return None
    # A parse of a big file takes a while: never on the protocol loop.
    tree = await off_loop(snapshot, symbols, snapshot, budget_s=BUDGET_S["documentSymbol"], what="the outline")
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


def symbols(snapshot) -> list[types.DocumentSymbol]:
    from leir import outline

    if snapshot.language == "leir":
        doc = snapshot.leir
        found = outline.leir_symbols(snapshot.text, kernel_name(snapshot.uri), doc.program, doc.analysis)
    else:
        found = outline.tvmscript_symbols(snapshot.text)
    return [_lsp(snapshot, s) for s in found]


def kernel_name(uri: str) -> str:
    """A ``.leir`` file's one kernel is named after the file, as ``leir
    convert`` names it."""
    path = uri_to_path(uri) or uri
    stem = re.sub(r"\.leir$", "", path.rsplit("/", 1)[-1])
    name = re.sub(r"\W", "_", stem)
    return name if name.isidentifier() else "main"


def _lsp(snapshot, symbol) -> types.DocumentSymbol:
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
        children=[_lsp(snapshot, c) for c in symbol.children],
    )

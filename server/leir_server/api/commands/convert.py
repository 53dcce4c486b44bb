"""``leir.convert`` {uri, kernel?}: the document's program as a TVMScript
kernel, or a Python file's kernel as LEIR, as ``leir convert`` prints them:
``{language: "python"|"leir", text, title}``. The client opens the text as
a new untitled document. Runs in a job process (it imports TVM)."""

from __future__ import annotations

from leir_server.workers import RequestFailed


def _stem(uri: str) -> str:
    from urllib.parse import unquote, urlparse

    name = unquote(urlparse(uri).path).rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name or "main"


async def run(server, call) -> dict:
    from leir.tools.jobs import Failure, convert

    snapshot = call.snapshot(server)
    kernel = call.string("kernel")
    if snapshot.language == "leir" and kernel is not None:
        raise RequestFailed(f"{call.name}: 'kernel' chooses a kernel of a Python file; a .leir file is one program")
    result = await server.session.workers.run(convert, snapshot.text, snapshot.language, kernel,
                                              _stem(snapshot.uri), what="converting")
    if isinstance(result, Failure):
        raise RequestFailed(f"{call.name}: {result.message}")
    return {"language": result.language, "text": result.text, "title": result.title}

"""``shutdown``: stop the worker processes, optimize searches and the
measurement engine before the client's ``exit``, so that none outlives the
server. (pygls then marks the server shut down and answers.)"""

from __future__ import annotations

import asyncio

from pygls.lsp.server import LanguageServer


async def handle(server: LanguageServer, params) -> None:
    await asyncio.to_thread(server.session.workers.close)

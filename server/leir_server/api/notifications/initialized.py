"""``initialized``: the client has the server's capabilities and is ready.

Say which server and version answered, in the client's log (in VS Code, the
"leir-lsp" output channel), so a bug report can name them; then read the
``leir`` settings section when the client can answer
``workspace/configuration``; until it is read, the model worker (which the
settings may turn off) is not started.
"""

from __future__ import annotations

import logging

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from leir_server import suggestions, warm_up
from leir_server.session.settings import client_can_pull, pull

logger = logging.getLogger(__name__)


async def handle(server: LanguageServer, params: types.InitializedParams) -> None:
    message = f"{server.name} {server.version} ready"
    logger.info(message)
    server.window_log_message(types.LogMessageParams(type=types.MessageType.Info, message=message))
    warm_up.start()
    if client_can_pull(server):
        server.session.settings_pending = True
        try:
            await pull(server)
        finally:
            server.session.settings_pending = False
    suggestions.settings_changed(server)  # the model ranks the documents opened meanwhile, when enabled

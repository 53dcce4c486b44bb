"""``initialize``: read the client's ``initializationOptions``.

pygls builds the reply (capabilities, ``serverInfo``) after this handler.
The one option is ``trusted``: VS Code's extension sends ``false`` in a
workspace the user has not trusted (Restricted Mode), and the server then
compiles and runs nothing: a kernel in a cloned repository is code, and
verifying or measuring a step runs it. A client that sends nothing is
trusted, as an editor that starts a language server by hand is.
"""

from __future__ import annotations

import logging

from lsprotocol import types
from pygls.lsp.server import LanguageServer

logger = logging.getLogger(__name__)


def handle(server: LanguageServer, params: types.InitializeParams) -> None:
    options = params.initialization_options
    if isinstance(options, dict) and options.get("trusted") is False:
        server.session.trusted = False
        logger.info("untrusted workspace: no step is verified, measured or searched")

"""How the server answers messages it cannot read.

pygls drops a request whose params do not match the method's type, without
an answer (the client waits for ever), and pops an error up in the editor
for it and for a body that is not UTF-8 or not JSON. Here a request the
server cannot read gets an error response (``InvalidParams`` with where the
params are wrong, or ``ParseError``), a notification it cannot read is
ignored, and each is reported once in the client's log as a warning, not in
a pop-up: a client's malformed message is not the user's problem.

It also makes the workspace split lines as LSP does. pygls splits a
document's lines with ``str.splitlines``, which also breaks at form feeds,
``\x1c``-``\x1e``, ``\x85`` and U+2028/U+2029; the client counts only
``\n``, ``\r\n`` and ``\r``, so in a file with any of those characters an
incremental edit would land on the wrong line.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcParseError
from pygls.protocol import LanguageServerProtocol
from pygls.workspace import TextDocument

logger = logging.getLogger(__name__)


class _Unreadable:
    """Stands for a message that could not be read and has been dealt with."""

    jsonrpc = None


UNREADABLE = _Unreadable()


#: A line and its break, as LSP counts lines.
_LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class LspLinesDocument(TextDocument):
    """pygls's document, with lines broken only where LSP breaks them."""

    @property
    def lines(self):
        return tuple(_LSP_LINE.findall(self.source))


def _create_text_document(workspace, doc_uri, source=None, version=None, language_id=None):
    return LspLinesDocument(doc_uri, source=source, version=version, language_id=language_id,
                            sync_kind=workspace._sync_kind, position_codec=workspace._position_codec)


class LeirProtocol(LanguageServerProtocol):
    # pygls creates its workspace on ``initialize``; each one it sets here
    # makes LspLinesDocument documents.
    @property
    def _workspace(self):
        return self.__dict__.get("_leir_workspace")

    @_workspace.setter
    def _workspace(self, workspace) -> None:
        if workspace is not None:
            workspace._create_text_document = functools.partial(_create_text_document, workspace)
        self.__dict__["_leir_workspace"] = workspace

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as error:
            if not isinstance(data, dict) or "jsonrpc" not in data:
                raise
            method = data.get("method")
            reason = _why(error)
            if "id" in data and method is not None:
                self._send_response(data["id"], error=JsonRpcInvalidParams(
                    f"invalid params for {method}: {reason}").to_response_error())
            warn(self._server, f"ignored a malformed {method or 'message'}: {reason}")
            return UNREADABLE

    def handle_message(self, message):
        if message is UNREADABLE:
            return None
        return super().handle_message(message)


def _why(error: JsonRpcException) -> str:
    """Where the params are wrong, in one line (cattrs' own paths)."""
    cause = error.__cause__
    try:
        from cattrs import transform_error

        reasons = transform_error(cause) if cause is not None else []
    except Exception:  # noqa: BLE001 - a best-effort description
        reasons = []
    text = "; ".join(reasons[:3]) or str(cause or error)
    return text.replace("\n", " ")


def report_unreadable_body(server, error: Exception) -> bool:
    """Answer a request whose body is not UTF-8 or not JSON, when its id can
    still be read; report it in the client's log. True when ``error`` was
    such a failure."""
    if isinstance(error, UnicodeDecodeError) and isinstance(error.object, bytes | bytearray):
        what = f"not UTF-8 (byte 0x{error.object[error.start]:02x} at offset {error.start})"
        text = bytes(error.object).decode("utf-8", "replace")
    elif isinstance(error, json.JSONDecodeError):
        what, text = f"not JSON ({error.msg} at offset {error.pos})", error.doc
    else:
        return False
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        message = None
    if isinstance(message, dict) and "id" in message and "method" in message:
        server.protocol._send_response(
            message["id"], error=JsonRpcParseError(f"the message body is {what}").to_response_error())
    warn(server, f"ignored a message whose body is {what}")
    return True


def warn(server, message: str) -> None:
    logger.warning(message)
    try:
        server.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=message))
    except Exception:  # noqa: BLE001 - reporting must never fail the reader loop
        logger.warning("could not send a log message to the client")

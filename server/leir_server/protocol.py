"""How the server reads a message, and what it answers to one it cannot
serve.

``framing.FrameReader`` cuts the client's byte stream into bodies;
``LeirProtocol.handle_body`` reads one body and hands it to pygls, or
answers it itself. pygls (2.1) would answer nothing to much of what a
client can send: a request whose params do not match the method's type, a
batch, a message without ``jsonrpc`` or without ``method``, a request for a
notification method, a request after ``shutdown``; it would serve requests
before ``initialize``; and it pops "Error in server" up in the editor for a
body that is not UTF-8, not JSON or not an object. Here:

- every request whose id can be read gets exactly one answer: ``ParseError``
  (-32700) for a body that is not UTF-8 or not JSON, ``InvalidRequest``
  (-32600) for one that is not a JSON-RPC request (a batch, a missing
  ``jsonrpc`` or ``method``, a notification method sent with an id, a
  second ``initialize``, any request after ``shutdown``),
  ``ServerNotInitialized`` (-32002) before ``initialize``, ``InvalidParams``
  (-32602, with where the params are wrong) and, from pygls,
  ``MethodNotFound`` (-32601). An error that cannot name a request (a body
  that is not JSON, an id that is neither an integer nor a string) is
  answered with a null id, as JSON-RPC says;
- a notification that cannot be read is dropped (so are notifications
  before ``initialize`` and after ``shutdown``, except ``exit``);
- each of these is one warning line in the server's log and in the
  client's (``window/logMessage``), never a pop-up: a client's malformed
  message is not the user's problem;
- ``exit`` ends the server with status 0 after ``shutdown`` and 1 without
  (``handle_body`` returns the status; ``server.LeirServer`` exits with it).

A handler that refuses a request by raising a ``JsonRpcException``
(``RequestFailed``, ``InvalidParams``...) is logged as one line; only an
unexpected exception, a bug, is logged with its traceback.

It also gives the workspace ``LspLinesDocument``, which splits lines and
applies incremental edits as LSP does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import inspect
import re
from typing import Any, Optional, Union
from urllib.parse import unquote

import attrs
from lsprotocol import types
from pygls.exceptions import (
    FeatureNotificationError,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcRequestCancelled,
)
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage
from pygls.protocol.language_server import lsp_method
from pygls.workspace import TextDocument

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
SERVER_NOT_INITIALIZED = -32002


class _Unreadable:
    """Stands for a message that could not be read and has been dealt with."""

    jsonrpc = None


UNREADABLE = _Unreadable()


# ------------------------------------------------------------------ documents

#: A line and its break, as LSP counts lines.
_LSP_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_BREAK = re.compile(r"\r\n|\r|\n")


def _units(ch: str) -> int:
    """UTF-16 code units of one character (a lone surrogate is one)."""
    return 2 if ch > "\uffff" else 1


def lsp_position_to_offset(text: str, line: int, character: int) -> tuple[int, bool]:
    """Where an LSP position (UTF-16 ``character``) is in ``text``: a
    character offset, and whether the position falls between the two
    UTF-16 units of the character at that offset (a character outside the
    BMP). As LSP says, a ``character`` past the end of its line is the end of
    that line (before its ``\\r\\n``, ``\\r`` or ``\\n``) and a ``line`` past
    the last is the end of the text."""
    if line < 0:
        return 0, False
    start = 0
    if "\r" not in text:
        for _ in range(line):
            found = text.find("\n", start)
            if found < 0:
                return len(text), False
            start = found + 1
        found = text.find("\n", start)
        end = len(text) if found < 0 else found
    else:
        for _ in range(line):
            found = _BREAK.search(text, start)
            if found is None:
                return len(text), False
            start = found.end()
        found = _BREAK.search(text, start)
        end = len(text) if found is None else found.start()
    units = 0
    offset = start
    character = max(0, character)
    while offset < end and units < character:
        units += _units(text[offset])
        offset += 1
    if units > character:  # inside a surrogate pair
        return offset - 1, True
    return offset, False


def _split_pair(ch: str) -> tuple[str, str]:
    """The two UTF-16 units of a character outside the BMP, as lone surrogates."""
    code = ord(ch) - 0x10000
    return chr(0xD800 + (code >> 10)), chr(0xDC00 + (code & 0x3FF))


def _is_surrogate(s: str) -> bool:
    return bool(s) and "\ud800" <= s <= "\udfff"


def apply_lsp_edit(text: str, start: types.Position, end: types.Position, new_text: str) -> str:
    """``text`` with the range replaced by ``new_text``, as an LSP client has
    it: positions clamped as ``lsp_position_to_offset`` says; a position
    between the two units of a surrogate pair splits the pair, as in the
    editor's UTF-16 string (and halves that meet again are one character)."""
    a = lsp_position_to_offset(text, start.line, start.character)
    b = lsp_position_to_offset(text, end.line, end.character)
    if b < a:  # a reversed range, as VS Code reads it
        a, b = b, a
    left = text[:a[0]] + (_split_pair(text[a[0]])[0] if a[1] else "")
    right = (_split_pair(text[b[0]])[1] if b[1] else "") + text[b[0] + b[1]:]
    result = left + new_text + right
    seams = (left[-1:], new_text[:1], new_text[-1:], right[:1])
    if any(_is_surrogate(s) for s in seams):
        # Lone surrogates on either side of a seam may be one pair now.
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return result


class LspLinesDocument(TextDocument):
    """pygls's document, with lines broken and edits applied as LSP says.

    pygls splits lines with ``str.splitlines``, which also breaks at form
    feeds, ``\\x1c``-``\\x1e``, ``\\x85`` and U+2028/U+2029 (the client counts
    only ``\\n``, ``\\r\\n`` and ``\\r``), and puts an edit whose ``character``
    is past the end of its line after the line break (or between ``\\r`` and
    ``\\n``): the server's text would no longer be the editor's, and a later
    formatting edit would rewrite the user's file wrongly."""

    @property
    def lines(self):
        return tuple(_LSP_LINE.findall(self.source))

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        self._source = apply_lsp_edit(self.source, change.range.start, change.range.end, change.text)


def _create_text_document(workspace, doc_uri, source=None, version=None, language_id=None):
    return LspLinesDocument(doc_uri, source=source, version=version, language_id=language_id,
                            sync_kind=workspace._sync_kind, position_codec=workspace._position_codec)


# ------------------------------------------------------------------ messages


@functools.lru_cache(maxsize=512)  # bounded: a client may send any method name
def _kind(method: str) -> str | None:
    """"request" or "notification" for an LSP method; None for another."""
    entry = types.METHOD_TO_TYPES.get(method)
    if entry is None or not attrs.has(entry[0]):
        return None
    return "request" if "id" in attrs.fields_dict(entry[0]) else "notification"


def _int_or_str(value: Any, _type=None) -> int | str:
    if _readable_id(value):
        return value
    raise TypeError(f"expected an integer or a string, not {_shown(value)}")


def _int_or_str_or_none(value: Any, _type=None) -> int | str | None:
    return None if value is None else _int_or_str(value)


def _readable_id(value: Any) -> bool:
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any, limit: int = 40) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."


class LeirProtocol(LanguageServerProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initialize_received = False
        self.shutdown_received = False
        #: Whether the log already says the client has gone (a broken pipe): said once.
        self._told_gone = False
        # lsprotocol's converter lets anything through as an ``integer |
        # string`` (a request id in $/cancelRequest, a progress token): a
        # list there made pygls raise a TypeError (unhashable) with a
        # traceback. Here it is invalid params, like any other wrong type.
        self._converter.register_structure_hook(Union[int, str], _int_or_str)
        self._converter.register_structure_hook(Optional[Union[int, str]], _int_or_str_or_none)

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

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        # Positions are UTF-16 (what every client must support): leir's
        # position code (leir.diagnostics.SourceText) counts UTF-16 units.
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            if types.PositionEncodingKind.Utf16 not in general.position_encodings:
                logger.info("the client offers positions in %s; leir-lsp uses UTF-16",
                            ", ".join(map(str, general.position_encodings)))
            general.position_encodings = None
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        # pygls raises a KeyError (an "Error in server" pop-up) for a change
        # to a document that is not open: the client's mistake, one warning.
        uri = params.text_document.uri
        if unquote(uri) not in self.workspace.text_documents:
            warn(self._server, f"ignored textDocument/didChange for {uri}: the document is not open")
            return None
        return (yield from super().lsp_text_document__did_change(params))

    # ---- reading one body

    def handle_body(self, body: bytes) -> int | None:
        """Read and dispatch one message body; the exit status when it was
        ``exit``, else None. Never raises for what the client sent."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            what = f"not UTF-8 (byte 0x{body[error.start]:02x} at offset {error.start})"
            self._refuse_unparsable(body.decode("utf-8", "replace"), what)
            return None
        try:
            data = json.loads(text)
        except RecursionError:
            self._refuse_unparsable(None, "not JSON (nested too deeply)")
            return None
        except json.JSONDecodeError as error:
            self._refuse_unparsable(None, f"not JSON ({error.msg} at offset {error.pos})")
            return None
        except ValueError as error:  # e.g. an integer of more than 4300 digits
            self._refuse_unparsable(None, f"not JSON ({error})")
            return None
        return self.dispatch(data)

    def _refuse_unparsable(self, text: str | None, what: str) -> None:
        """Answer a body that is not UTF-8 or not JSON: with its id when the
        rest of it can still be read, else with a null id."""
        message = None
        if text is not None:
            try:
                message = json.loads(text)
            except (ValueError, RecursionError):
                message = None
        msg_id = None
        if isinstance(message, dict) and "method" in message and _readable_id(message.get("id")):
            msg_id = message["id"]
        self._error(msg_id, PARSE_ERROR, f"the message body is {what}")
        warn(self._server, f"ignored a message whose body is {what}")

    def _refuse(self, msg_id: Any, code: int, reason: str, *, answer: bool = True) -> None:
        """Answer (when ``answer``) and log a message that is not a JSON-RPC one."""
        if answer:
            self._error(msg_id, code, reason)
        warn(self._server, f"ignored a message: {reason}")

    def _error(self, msg_id: Any, code: int, message: str) -> None:
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def dispatch(self, data: Any) -> int | None:
        """What ``handle_body`` does with a parsed body."""
        if isinstance(data, list):
            ids = [m["id"] for m in data if isinstance(m, dict) and "method" in m and _readable_id(m.get("id"))]
            reason = ("a batch (JSON array) of messages: LSP does not use JSON-RPC batches"
                      if data else "an empty JSON array is not a message")
            for msg_id in ids or [None]:
                self._error(msg_id, INVALID_REQUEST, reason)
            warn(self._server, f"ignored {reason}")
            return None
        if not isinstance(data, dict):
            self._refuse(None, INVALID_REQUEST, f"a message must be a JSON object, not {_shown(data)}")
            return None
        has_id, msg_id = "id" in data, data.get("id")
        method = data.get("method")
        is_response = "method" not in data and ("result" in data or "error" in data)
        if has_id and not _readable_id(msg_id):
            reason = f"the id must be an integer or a string, not {_shown(msg_id)}"
            self._refuse(None, INVALID_REQUEST, reason, answer=not is_response)
            return None
        if data.get("jsonrpc") != "2.0":
            reason = ("'jsonrpc' is missing" if "jsonrpc" not in data
                      else f"'jsonrpc' must be \"2.0\", not {_shown(data['jsonrpc'])}")
            self._refuse(msg_id if has_id else None, INVALID_REQUEST, reason,
                         answer=has_id and not is_response)
            return None
        if is_response and has_id:
            return self._deliver(data)
        if "method" not in data:
            reason = "a request without a 'method'" if has_id else "a message without 'method' or 'id'"
            self._refuse(msg_id, INVALID_REQUEST, reason, answer=has_id)
            return None
        if not isinstance(method, str):
            self._refuse(msg_id, INVALID_REQUEST, f"'method' must be a string, not {_shown(method)}", answer=has_id)
            return None
        if method == types.EXIT:
            status = 0 if self.shutdown_received else 1
            logger.info("exit%s: exiting with status %d", "" if status == 0 else " without shutdown", status)
            return status
        if not self.initialize_received and method != types.INITIALIZE:
            if has_id:
                self._error(msg_id, SERVER_NOT_INITIALIZED, f"{method}: the server is not initialized yet "
                                                            f"(initialize comes first)")
            warn(self._server, f"ignored {method}: it came before initialize")
            return None
        if self.shutdown_received:
            if has_id:
                self._error(msg_id, INVALID_REQUEST, f"{method}: the server is shut down (only exit may follow)")
            warn(self._server, f"ignored {method}: it came after shutdown")
            return None
        kind = _kind(method)
        if has_id and kind == "notification":
            self._refuse(msg_id, INVALID_REQUEST, f"{method} is a notification, sent with an id")
            return None
        if not has_id and kind == "request":
            warn(self._server, f"ignored {method}: it is a request, sent without an id")
            return None
        if method == types.INITIALIZE:
            if not has_id:
                warn(self._server, "ignored initialize: it is a request, sent without an id")
                return None
            if self.initialize_received:
                self._refuse(msg_id, INVALID_REQUEST, "initialize may be sent only once")
                return None
        message = self.structure_message(data)
        if message is UNREADABLE:
            return None
        if method == types.INITIALIZE:
            self.initialize_received = True
        elif method == types.SHUTDOWN:
            self.shutdown_received = True
        self.handle_message(message)
        return None

    def _deliver(self, data: dict) -> None:
        """A response from the client to one of the server's requests."""
        message = self.structure_message(data)
        if message is not UNREADABLE:
            self.handle_message(message)
        return None

    def structure_message(self, data: dict[str, Any]):
        """pygls's, without an ERROR and a traceback in the log for params
        that do not match the method's type: that request is answered with
        InvalidParams (with where they are wrong), a response that cannot be
        read fails the request it answers, and either is one warning."""
        method = data.get("method")
        try:
            if "id" in data:
                # With a method, a request (whatever else it has), as dispatch reads it.
                if "method" in data:
                    return self._converter.structure(data, self.get_message_type(method) or JsonRPCRequestMessage)
                if "error" in data:
                    return self._converter.structure(data, types.ResponseErrorMessage)
                response_type = self._result_types.pop(data["id"], None) or JsonRPCResponseMessage
                return self._converter.structure(data, response_type)
            return self._converter.structure(data, self.get_message_type(method) or JsonRPCNotification)
        except Exception as error:  # noqa: BLE001 - cattrs' errors, for what the client sent
            reason = _why(error)
            if "id" in data and method is not None:
                self._send_response(data["id"], error=JsonRpcInvalidParams(
                    f"invalid params for {method}: {reason}").to_response_error())
            elif "id" in data:
                future = self._request_futures.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_exception(JsonRpcInvalidParams(f"the client's response could not be read: {reason}"))
            warn(self._server, f"ignored a malformed {method or 'response'}: {reason}")
            return UNREADABLE

    def handle_message(self, message):
        if message is UNREADABLE:
            return None
        return super().handle_message(message)

    # ---- answers and their logs

    def _send_handler_result(self, future, *, msg_id) -> None:
        """pygls's, logging a refusal (a ``JsonRpcException`` raised by a
        handler: a user's mistake, a step that does not apply, a stale
        version) as one line, and only a bug with its traceback."""
        self._request_futures.pop(msg_id, None)
        if future.cancelled():
            self._send_response(msg_id, error=JsonRpcRequestCancelled(
                f'Request with id "{msg_id}" is canceled').to_response_error())
            return
        error = future.exception()
        if error is None:
            self._send_response(msg_id, result=future.result())
        elif isinstance(error, JsonRpcException) and not isinstance(error, JsonRpcInternalError):
            logger.info("request %s refused (%d): %s", msg_id, error.code, str(error.message).replace("\n", " "))
            self._send_response(msg_id, error=error.to_response_error())
        else:
            logger.error("request %s failed", msg_id, exc_info=error)
            internal = JsonRpcInternalError.of((type(error), error, error.__traceback__))
            self._send_response(msg_id, error=internal.to_response_error())

    def _check_handler_result(self, future) -> None:
        """pygls's, for notification handlers: a refusal is one line; a bug
        is logged with its traceback and reported as pygls does."""
        if future.cancelled() or (error := future.exception()) is None:
            return
        if isinstance(error, JsonRpcException) and not isinstance(error, JsonRpcInternalError):
            logger.info("notification refused (%d): %s", error.code, str(error.message).replace("\n", " "))
            return
        logger.error("a notification handler failed", exc_info=error)
        internal = JsonRpcInternalError.of((type(error), error, error.__traceback__))
        self._server._report_server_error(internal, FeatureNotificationError)

    def _send_data(self, data: Any) -> None:
        """pygls's, with the ``Content-Length`` counted in bytes, and a client
        that has gone (a broken pipe) logged as one line."""
        if not data or self.writer is None:
            return
        try:
            body = json.dumps(data, default=self._serialize_message).encode("utf-8")
        except Exception:  # noqa: BLE001 - a result the server built wrongly: a bug
            logger.exception("could not serialize a message to the client")
            if isinstance(data, dict) and "id" in data or hasattr(data, "id"):
                msg_id = data["id"] if isinstance(data, dict) else data.id
                self._error(msg_id, JsonRpcInternalError.CODE, "the server could not serialize its answer")
            return
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("sending %s", body[:1000])
        frame = body
        if self._include_headers:
            frame = (b"Content-Length: %d\r\nContent-Type: %s; charset=%s\r\n\r\n"
                     % (len(body), self.CONTENT_TYPE.encode(), self.CHARSET.encode())) + body
        try:
            written = self.writer.write(frame)
            if inspect.isawaitable(written):  # a websocket's writer
                asyncio.ensure_future(written)
        except (BrokenPipeError, ConnectionError, ValueError) as error:  # ValueError: a closed file
            if not self._told_gone:
                self._told_gone = True
                logger.warning("cannot write to the client any more (%s)", type(error).__name__)


def _why(error: Exception) -> str:
    """Where the params are wrong, in one line (cattrs' own paths)."""
    try:
        from cattrs import transform_error
        from cattrs.errors import BaseValidationError

        reasons = transform_error(error) if isinstance(error, BaseValidationError) else []
    except Exception:  # noqa: BLE001 - a best-effort description
        reasons = []
    text = "; ".join(reasons[:3]) or f"{type(error).__name__}: {error}"
    return text.replace("\n", " ")


def warn(server, message: str) -> None:
    """One warning line in the server's log and in the client's."""
    logger.warning(message)
    try:
        server.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=message))
    except Exception:  # noqa: BLE001 - reporting must never fail the reader loop
        logger.warning("could not send a log message to the client")


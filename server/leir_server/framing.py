"""Reading LSP frames (``Content-Length`` headers, a blank line, a body)
from the client's byte stream, bounded, in place of pygls's reader loop.

pygls's reader keeps a whole header line and a whole body in memory however
large the client says it is (a ``Content-Length`` of 10^12 is a
MemoryError that kills the server), and waits for ever on a frame it cannot
read (no ``Content-Length``, a lowercase or negative one, one larger than
the body sent): the editor's requests are never answered again.

Here every frame is read within bounds, and a frame that cannot be read
raises ``BrokenStream`` with the reason in one line. There is no
resynchronizing a byte stream whose framing is wrong: the next frame starts
wherever this one really ended, which nothing says. The server logs the
reason and exits non-zero, and the editor restarts it (rust-analyzer does
the same). What is unrecoverable:

- a header line that is not ``Name: value`` (RFC 7230 token names), or
  longer than ``MAX_HEADER_LINE``, or more than ``MAX_HEADER_LINES``;
- no ``Content-Length``, two different ones, one that is not a decimal
  number of bytes, or one above ``MAX_BODY`` (64 MiB);
- the input ending inside a frame;
- a body that is already a complete JSON value and then nothing more
  arrives for ``COMPLETE_STALL_S``: the ``Content-Length`` is larger than
  the body the client sent, and the client is waiting for an answer;
- nothing more arriving in the middle of a frame for ``STALL_S``.

Header names are case-insensitive (as HTTP's, which LSP's headers follow),
blank lines between frames are skipped, and ``Content-Type`` is not
checked (LSP bodies are UTF-8 whatever it says). What a body says is
``protocol.LeirProtocol.handle_body``'s business: a body that is not
UTF-8 or not JSON is answered, and the stream goes on.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading

#: The largest body read (bytes). A 10 MB document is refused by the checks
#: (leir.bridge.document.MAX_DOCUMENT_BYTES), but still has to be read to be answered.
MAX_BODY = 64 * 1024 * 1024
#: The longest header line and the most header lines in one frame.
MAX_HEADER_LINE = 8 * 1024
MAX_HEADER_LINES = 32
#: Seconds without a byte in the middle of a frame before giving up on it
#: (a client that is alive writes a frame at once). Tests shorten it with
#: the environment variable ``LEIR_LSP_FRAME_STALL_S``.
def _stall_s(default: float = 30.0) -> float:
    try:
        value = float(os.environ.get("LEIR_LSP_FRAME_STALL_S", default))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


STALL_S = _stall_s()
#: The same, when the body read so far is already a complete JSON value.
COMPLETE_STALL_S = min(2.0, STALL_S)

#: Bytes read from the input at a time, and how many such chunks may wait
#: to be parsed (the input is not read further until they are).
CHUNK = 64 * 1024
QUEUED_CHUNKS = 64

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_HEADER = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(.*?)[ \t]*\r?\n")
#: What a header line can start with (checked before its end has arrived,
#: so that a body sent without headers fails at once).
_HEADER_PREFIX = re.compile(rb"(?:" + _TOKEN + rb"(?::[^\r\n]*)?)?\r?")
_DECIMAL = re.compile(rb"[0-9]{1,20}")


class BrokenStream(Exception):
    """The input cannot be read as LSP frames any more; the message says why."""


def _shown(data: bytes, limit: int = 60) -> str:
    text = repr(bytes(data[:limit]))
    return text + ("..." if len(data) > limit else "")


class FrameReader:
    """LSP frames from a stream of byte chunks (``feed``; ``b""`` at the end).

    ``read_frame`` returns the next body, or None when the input ended
    between frames; it raises ``BrokenStream`` as the module says."""

    def __init__(self) -> None:
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue(QUEUED_CHUNKS)
        self._buffer = bytearray()
        self._eof = False

    # ---- the producing side

    async def feed(self, chunk: bytes) -> None:
        await self._chunks.put(chunk)

    def pump_file(self, fd: int) -> threading.Thread:
        """Feed the reader from a file descriptor, in a daemon thread (a
        blocking ``os.read`` works on pipes, terminals and files alike)."""
        loop = asyncio.get_running_loop()

        def pump() -> None:
            while True:
                try:
                    chunk = os.read(fd, CHUNK)
                except OSError:
                    chunk = b""
                try:
                    asyncio.run_coroutine_threadsafe(self.feed(chunk), loop).result()
                except BaseException:  # noqa: BLE001 - the loop has stopped (closed, or the feed cancelled)
                    return
                if not chunk:
                    return

        thread = threading.Thread(target=pump, name="leir-lsp stdin", daemon=True)
        thread.start()
        return thread

    async def pump_stream(self, reader: asyncio.StreamReader) -> None:
        """Feed the reader from an asyncio stream (a TCP connection)."""
        while True:
            try:
                chunk = await reader.read(CHUNK)
            except (ConnectionError, OSError):
                chunk = b""
            await self.feed(chunk)
            if not chunk:
                return

    # ---- the reading side

    async def _fill(self, timeout: float | None) -> bool:
        """Append the next chunk to the buffer; False at the end of the input.
        Raises ``asyncio.TimeoutError`` when none arrives within ``timeout``."""
        if self._eof:
            return False
        chunk = await asyncio.wait_for(self._chunks.get(), timeout)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    async def _line(self, first: bool) -> bytes | None:
        """The next header line with its ending; None at the end of the input
        before any byte of it (or of the frame, when ``first``)."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                if len(line) > MAX_HEADER_LINE:
                    raise BrokenStream(f"a header line is longer than {MAX_HEADER_LINE} bytes")
                return line
            searched = len(self._buffer)
            if searched > MAX_HEADER_LINE:
                raise BrokenStream(f"a header line is longer than {MAX_HEADER_LINE} bytes: "
                                   f"{_shown(self._buffer)}")
            if self._buffer and not _HEADER_PREFIX.fullmatch(self._buffer):
                raise BrokenStream(f"expected a header line ('Content-Length: N'), got {_shown(self._buffer)}")
            mid_frame = not first or bool(self._buffer)
            try:
                more = await self._fill(STALL_S if mid_frame else None)
            except asyncio.TimeoutError:
                raise BrokenStream(f"the input stopped inside a frame's headers for {STALL_S:g} s: "
                                   f"{_shown(self._buffer)}") from None
            if not more:
                if mid_frame:
                    raise BrokenStream("the input ended inside a frame's headers")
                return None

    async def _body(self, length: int) -> bytes:
        waited = 0.0
        while len(self._buffer) < length:
            try:
                more = await self._fill(COMPLETE_STALL_S)
            except asyncio.TimeoutError:
                waited += COMPLETE_STALL_S
                if _is_complete_json(self._buffer):
                    raise BrokenStream(
                        f"the Content-Length ({length}) is larger than the body sent: {len(self._buffer)} bytes "
                        f"of complete JSON, then nothing for {waited:g} s") from None
                if waited >= STALL_S:
                    raise BrokenStream(f"the input stopped {len(self._buffer)} bytes into a body of {length} "
                                       f"for {waited:g} s") from None
                continue
            waited = 0.0
            if not more:
                raise BrokenStream(f"the input ended {len(self._buffer)} bytes into a body of {length}")
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body

    async def read_frame(self) -> bytes | None:
        length: int | None = None
        lines = 0
        while True:
            line = await self._line(first=lines == 0)
            if line is None:
                return None  # the input ended between frames
            if line in (b"\r\n", b"\n"):
                if lines == 0:
                    continue  # a blank line between frames
                break
            lines += 1
            if lines > MAX_HEADER_LINES:
                raise BrokenStream(f"more than {MAX_HEADER_LINES} header lines in one frame")
            match = _HEADER.fullmatch(line)
            if match is None:
                raise BrokenStream(f"expected a header line ('Content-Length: N'), got {_shown(line)}")
            name, value = match[1].lower(), match[2]
            if name != b"content-length":
                continue  # Content-Type, or a header of a newer protocol
            if not _DECIMAL.fullmatch(value):
                raise BrokenStream(f"the Content-Length is not a number of bytes: {_shown(value)}")
            if length is not None and int(value) != length:
                raise BrokenStream(f"two different Content-Length headers ({length} and {int(value)})")
            length = int(value)
            if length > MAX_BODY:
                raise BrokenStream(f"the Content-Length ({length}) is more than the {MAX_BODY} bytes "
                                   f"leir-lsp reads in one message")
        if length is None:
            raise BrokenStream("a frame without a Content-Length header")
        return await self._body(length)


_WHITESPACE = b" \t\r\n"


def _is_complete_json(data: bytearray) -> bool:
    """Whether ``data`` is one whole JSON object or array (and whitespace):
    then a body that waits for more bytes was overstated by its header."""
    text = bytes(data).strip(_WHITESPACE)
    if not text or text[:1] not in b"{[" or text[-1:] not in b"}]":
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True

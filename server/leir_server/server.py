"""The leir-lsp language server object: its session, its transports, and
its exit status.

What it answers, one module per LSP method, and where each handler runs
are in ``leir_server.api`` (the ``HANDLERS`` table). The server reads its
input itself (``framing.FrameReader``, bounded;
``protocol.LeirProtocol.handle_body``, which answers what pygls would not
and handles ``exit``), and
``start_io``/``start_tcp`` return the exit status: 0 after ``shutdown`` and
``exit``, 1 for an ``exit`` without ``shutdown`` or an input that ends
without ``exit``, ``EXIT_BROKEN_STREAM`` (2) for an input that cannot be
read as LSP frames any more (logged in one line: the editor restarts the
server).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from importlib.metadata import PackageNotFoundError, version

from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from leir_server import api
from leir_server.framing import BrokenStream, FrameReader
from leir_server.protocol import LeirProtocol
from leir_server.session.session import Session

logger = logging.getLogger(__name__)

SERVER_NAME = "leir-lsp"

#: The exit status when the input cannot be read as LSP frames any more.
EXIT_BROKEN_STREAM = 2
#: Seconds the process may take to exit once the protocol loop has ended
#: (a check or a compile still running in a thread) before it is ended.
EXIT_GRACE_S = 10.0


class LeirServer(LanguageServer):
    """A pygls server with the leir session attached."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("protocol_cls", LeirProtocol)  # answers what it cannot read
        super().__init__(*args, **kwargs)
        self.session = Session(self)

    # ---- transports: the protocol loop, and the exit status

    def start_io(self, stdin=None, stdout=None) -> int:
        """Serve one client on standard input/output; the exit status."""
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        fd = (stdin or sys.stdin.buffer).fileno()

        async def serve() -> int:
            frames = FrameReader()
            frames.pump_file(fd)
            return await self.serve_frames(frames)

        return self._run(serve)

    def start_tcp(self, host: str, port: int) -> int:
        """Listen on ``host:port`` and serve the first client that connects;
        the exit status. (An OSError from binding propagates.)"""

        async def serve() -> int:
            done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

            async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                if done.done() or self.protocol.writer is not None:
                    writer.close()  # one client per server
                    return
                self.protocol.set_writer(writer)
                frames = FrameReader()
                pump = asyncio.ensure_future(frames.pump_stream(reader))
                try:
                    status = await self.serve_frames(frames)
                finally:
                    pump.cancel()
                    writer.close()
                if not done.done():
                    done.set_result(status)

            listener = await asyncio.start_server(connection, host, port)
            logger.info("listening on %s:%s", host, port)
            async with listener:
                return await done

        return self._run(serve)

    def _run(self, serve) -> int:
        self._stop_event = threading.Event()

        async def serve_and_exit() -> int:
            status = await serve()
            # Armed before stopping the workers and before asyncio.run waits
            # for the threads of its default executor.
            _exit_within(EXIT_GRACE_S, status)
            self._stop()
            return status

        try:
            return asyncio.run(serve_and_exit())
        except KeyboardInterrupt:
            return 1

    async def serve_frames(self, frames: FrameReader) -> int:
        """Read and handle messages until ``exit``, the end of the input or
        an input that cannot be read; the exit status."""
        protocol: LeirProtocol = self.protocol  # type: ignore[assignment]
        while True:
            try:
                body = await frames.read_frame()
            except BrokenStream as error:
                logger.error("cannot read the client's messages any more, exiting: %s", error)
                status = EXIT_BROKEN_STREAM
                break
            if body is None:
                status = 0 if protocol.shutdown_received else 1
                if status:
                    logger.warning("the client closed the connection without shutdown and exit")
                break
            try:
                exit_status = protocol.handle_body(body)
            except Exception:  # noqa: BLE001 - a bug in reading one message must not stop the next
                logger.exception("could not handle a message")
                exit_status = None
            if exit_status is not None:
                status = exit_status
                break
            await asyncio.sleep(0)  # let the handlers run between messages
        return status

    def _stop(self) -> None:
        """Stop what the server started: its thread pool, and (after an exit
        without shutdown, where the shutdown handler did not) its workers."""
        if self._stop_event is not None:
            self._stop_event.set()
        if self._thread_pool is not None:
            self._thread_pool.shutdown(wait=False, cancel_futures=True)
        if not self.protocol.shutdown_received:
            try:
                self.session.workers.close()
            except Exception:  # noqa: BLE001 - exiting anyway
                logger.warning("could not stop the worker processes", exc_info=True)


def _exit_within(seconds: float, status: int) -> None:
    """End the process with ``status`` if it has not exited ``seconds`` from
    now (a thread still busy with a check would otherwise keep it)."""

    def end() -> None:
        try:
            logger.warning("still running %g s after the protocol ended; exiting", seconds)
            sys.stderr.flush()
        finally:
            os._exit(status)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()


def server_version() -> str:
    """The installed distribution's version, as ``serverInfo.version`` reports it."""
    try:
        return version(SERVER_NAME)
    except PackageNotFoundError:
        # Imported from a source tree that was never installed.
        return "0+unknown"


def build_server() -> LeirServer:
    """A server with every handler of ``leir_server.api.HANDLERS``
    registered, not yet started."""
    from leir import sandbox
    from leir_server import imports
    from leir_server.workers import PRELOAD_EXTRA

    # The server's threads import lazily and at once: parents before children.
    imports.install()

    # Every worker pool of the server (TVMScript parsing, jobs, measuring)
    # forks from one forkserver; whichever starts it first starts it with all.
    sandbox.want_preloaded(sandbox.MEASUREMENT_PRELOAD + PRELOAD_EXTRA)
    server = LeirServer(SERVER_NAME, server_version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
    api.register(server)
    return server

"""``workspace/executeCommand``: the leir commands (``leir_server.api.commands.COMMANDS``).

pygls answers ``workspace/executeCommand`` itself and calls the handler
registered for the command's name (an unknown name gets an InvalidParams
error naming it), so ``register`` registers one handler per command rather
than a handler for the method. Each handler reads the one argument object,
runs the command, and turns a user's mistake or a failure into a one-line
error response; nothing a client sends crashes the server. Every command
runs on the protocol loop (``leir_server.schedule.Schedule.LOOP``): it awaits
the worker processes, the measurement engine or a thread.

Cancellation: pygls answers ``$/cancelRequest`` for a command by cancelling
the request's future (the client gets "cancelled" at once), without telling
the running handler; the handler watches that future and stops its work.
"""

from __future__ import annotations

import logging

from pygls.exceptions import JsonRpcException

from leir_server.api.commands import COMMANDS, call_of
from leir_server.workers import RequestFailed

logger = logging.getLogger(__name__)


def _request_future(server):
    """The future pygls answers the current request with (None if unknown)."""
    protocol = server.protocol
    futures = getattr(protocol, "_request_futures", None)
    msg_id = protocol.msg_id
    return futures.get(msg_id) if futures is not None and msg_id is not None else None


def _handler(name: str, module):
    async def execute(ls, *arguments):
        from leir.errors import LeirError

        call = call_of(name, arguments)
        request = _request_future(ls)
        if request is not None:
            request.add_done_callback(lambda f: f.cancelled() and call.cancelled.set())
        try:
            return await module.run(ls, call)
        except JsonRpcException:
            raise
        except LeirError as e:
            raise RequestFailed(f"{name}: {e}") from None
        except Exception as e:  # noqa: BLE001 - a bug is reported as the command's error, not a crash
            logger.exception("%s failed", name)
            raise RequestFailed(f"{name} failed: {type(e).__name__}: {e}") from None

    execute.__name__ = f"command_{name.replace('.', '_')}"
    return execute


def register(server) -> None:
    """Register every leir command with ``server``."""
    for name, module in COMMANDS.items():
        server.command(name)(_handler(name, module))

"""The ``workspace/executeCommand`` commands, one module each, and what
they share: reading the one JSON-object argument, finding the document,
and cancellation.

``COMMANDS`` maps each command name (the contract's) to its module, whose
``async def run(server, call)`` returns the command's JSON result or raises
``RequestFailed``/``InvalidParams`` with a one-line message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from leir_server.api.commands import convert, measure, optimize, restart, show_trajectory
from leir_server.workers import InvalidParams, RequestFailed

COMMANDS: dict[str, ModuleType] = {
    "leir.measure": measure,
    "leir.optimize": optimize,
    "leir.convert": convert,
    "leir.showTrajectory": show_trajectory,
    "leir.restart": restart,
}


@dataclass
class Call:
    """One command call: its name, its argument object, and an event set when
    the client cancels it (``$/cancelRequest``)."""

    name: str
    args: dict[str, Any]
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    # -------------------------------------------------------- arguments

    def _bad(self, key: str, expected: str) -> InvalidParams:
        return InvalidParams(f"{self.name}: argument {key!r} must be {expected}, got {self.args.get(key)!r}")

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.args.get(key)
        if value is None:
            if required:
                raise InvalidParams(f"{self.name}: missing argument {key!r}")
            return None
        if not isinstance(value, str) or not value:
            raise self._bad(key, "a non-empty string")
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.args.get(key)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise self._bad(key, f"a whole number from {low} to {high}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.args.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.args.get(key)
        if value is None:
            return default
        if value not in choices:
            raise self._bad(key, f"one of {', '.join(choices)}")
        return value

    def snapshot(self, server):
        """The snapshot of the open document ``uri`` names."""
        uri = self.string("uri", required=True)
        snapshot = server.session.snapshot(uri)
        if snapshot is None:
            raise RequestFailed(f"{self.name}: {uri} is not an open LEIR or Python document")
        if snapshot.too_large:
            raise RequestFailed(f"{self.name}: the document is too large for leir")
        return snapshot


def call_of(name: str, arguments: tuple) -> Call:
    """The call's one argument object (none means ``{}``)."""
    if not arguments:
        return Call(name, {})
    if len(arguments) != 1 or not isinstance(arguments[0], dict):
        raise InvalidParams(f"{name} takes one JSON object argument, e.g. {{\"uri\": \"file:///...\"}}; "
                            f"got {len(arguments)} argument(s)")
    return Call(name, dict(arguments[0]))

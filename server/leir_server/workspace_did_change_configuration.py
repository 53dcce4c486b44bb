"""``workspace/didChangeConfiguration``: read the ``leir`` settings again.

A client that answers ``workspace/configuration`` is asked (the
notification's own ``settings`` is often null then); otherwise the section
is taken from the notification, ``{"leir": {...}}``."""

from __future__ import annotations

from lsprotocol import types

from leir_server import configuration
from leir_server.session import CONFIG_SECTION


async def handle(server, params: types.DidChangeConfigurationParams) -> None:
    if configuration.client_can_pull(server):
        await configuration.pull(server)
        return
    settings = params.settings
    if isinstance(settings, dict) and CONFIG_SECTION in settings:
        configuration.apply(server, settings[CONFIG_SECTION])

"""``workspace/didChangeConfiguration``: read the ``leir`` settings again.

A client that answers ``workspace/configuration`` is asked (the
notification's own ``settings`` is often null then); otherwise the section
is taken from the notification, ``{"leir": {...}}``."""

from __future__ import annotations

from lsprotocol import types

from leir_server.session.settings import CONFIG_SECTION, apply, client_can_pull, pull


async def handle(server, params: types.DidChangeConfigurationParams) -> None:
    if client_can_pull(server):
        await pull(server)
        return
    settings = params.settings
    if isinstance(settings, dict) and CONFIG_SECTION in settings:
        apply(server, settings[CONFIG_SECTION])

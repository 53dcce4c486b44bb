"""``workspace/didChangeConfiguration``: read the ``leir`` settings again.

A client that answers ``workspace/configuration`` is asked (the
notification's own ``settings`` is often null then); otherwise the section
is taken from the notification, ``{"leir": {...}}``. Then the model worker
follows ``model.enabled``: stopped when it is off, ranking the open
documents when it is on."""

from __future__ import annotations

from lsprotocol import types

from leir_server import suggestions
from leir_server.session.settings import CONFIG_SECTION, apply, client_can_pull, pull


async def handle(server, params: types.DidChangeConfigurationParams) -> None:
    if client_can_pull(server):
        await pull(server)
    else:
        settings = params.settings
        if isinstance(settings, dict) and CONFIG_SECTION in settings:
            apply(server, settings[CONFIG_SECTION])
    suggestions.settings_changed(server)

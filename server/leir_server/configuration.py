"""The ``leir`` settings section: pulled from the client with
``workspace/configuration`` (on ``initialized`` and on every
``workspace/didChangeConfiguration``), or taken from the notification
itself for clients that only push. Values that cannot be used are reported
in the client's log and left at their defaults; a client
that fails the request leaves the settings as they were."""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types

from leir_server.session import CONFIG_SECTION, Settings

logger = logging.getLogger(__name__)

#: How long to wait for the client's answer. A client that never answers
#: must not leave a task waiting for ever.
PULL_TIMEOUT_S = 10.0


def client_can_pull(server) -> bool:
    capabilities = server.client_capabilities
    workspace = capabilities.workspace if capabilities is not None else None
    return bool(workspace is not None and workspace.configuration)


async def pull(server) -> None:
    """Ask the client for the ``leir`` section and apply it."""
    params = types.ConfigurationParams(items=[types.ConfigurationItem(section=CONFIG_SECTION)])
    try:
        result = await asyncio.wait_for(server.workspace_configuration_async(params), PULL_TIMEOUT_S)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - the client's failure is not ours to crash on
        _log(server, types.MessageType.Warning,
             f"could not read the '{CONFIG_SECTION}' settings from the editor ({type(e).__name__}: {e}); "
             "keeping the current ones")
        return
    section = result[0] if isinstance(result, (list, tuple)) and result else None
    apply(server, section)


def apply(server, section) -> None:
    """Replace the session's settings with ``section`` (the client's JSON)."""
    settings, problems = Settings.from_json(section)
    server.session.settings = settings
    for problem in problems:
        _log(server, types.MessageType.Warning, problem)


def _log(server, kind: types.MessageType, message: str) -> None:
    logger.warning(message)
    server.window_log_message(types.LogMessageParams(type=kind, message=message))

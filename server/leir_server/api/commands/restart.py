"""``leir.restart`` {}: stop every job, optimize search and measurement,
drop the cached lookups, and start fresh worker processes on next use
(after a TVM upgrade, a change of cache directory, a stuck device)."""

from __future__ import annotations

import asyncio


async def run(server, call) -> dict:
    await asyncio.to_thread(server.session.workers.restart)
    return {"restarted": True}

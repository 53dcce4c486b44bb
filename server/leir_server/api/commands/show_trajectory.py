"""``leir.showTrajectory`` {uri, kernel?}: the steps applied to the
document (or one Python kernel) through this server, in order, each with
its latencies before and after when measured:
``{uri, kernel, steps: [{id, args, title, latency_before_ms, latency_after_ms, speedup, reasoning}]}``.
(See ``leir_server.session.session`` for when a step counts as applied.)"""

from __future__ import annotations


async def run(server, call) -> dict:
    uri = call.string("uri", required=True)
    kernel = call.string("kernel")
    server.session.snapshot(uri)  # records a resolved step whose edit the document now shows
    return {"uri": uri, "kernel": kernel, "steps": list(server.session.trajectories.get((uri, kernel or ""), []))}

"""A standby replica, until it leads: its health endpoint answers (the pod is Ready and live while it stands
by), then the endpoint is handed to kopf's liveness probe and the process acts.

Once leading, SIGCONT (a process resumed after SIGSTOP) is answered by ``fence.check`` in the main thread,
kopf's: a process frozen past its renew deadline exits before its event loop writes anything. Threads
that write are held by the same check in ``Kube.call`` and ``SlurmRest``.
"""

from __future__ import annotations

import http.server
import logging
import os
import signal
import threading
import urllib.parse
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

from kubernetes import client

from warden.leader import fence
from warden.leader.decide import Timing
from warden.leader.elector import Elector
from warden.leader.lease import Leases

log = logging.getLogger(__name__)


class _Health(http.server.BaseHTTPRequestHandler):
    elector: Elector

    def do_GET(self) -> None:
        body = f"standby {self.elector.identity}; leader: {self.elector.holder or 'none'}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the kubelet's probes every few seconds are no news


def serve_health(url: str, elector: Elector) -> http.server.ThreadingHTTPServer | None:
    """Answer 200 on ``url``'s host and port (any path) while standing by; None when there is no endpoint."""
    if not url:
        return None
    where = urllib.parse.urlsplit(url)
    handler = type("StandbyHealth", (_Health,), {"elector": elector})
    server = http.server.ThreadingHTTPServer((where.hostname or "0.0.0.0", where.port or 80), handler)
    threading.Thread(target=server.serve_forever, name="warden-standby-health", daemon=True).start()
    return server


def _on_continue(signum: int, frame: FrameType | None) -> None:
    if not fence.resigned():  # resigning (SIGTERM's handler, below): it ends the process itself
        fence.check("going on after SIGCONT")


def resign_on_sigterm(elector: Elector) -> Callable[..., Coroutine[Any, Any, None]]:
    """A kopf startup handler: once kopf has set its own signal handlers, SIGTERM (the pod deleted, evicted,
    upgraded) makes this replica stop acting at once and hand the Lease back, then exit, instead of kopf's
    graceful stop, during which it would still act and renew (tens of seconds: handlers in flight, the sync
    threads). What it leaves half done, the next leader does, as after any crash."""

    def resign(signum: int, frame: FrameType | None) -> None:
        log.info("leader election: %s stops (signal %d): acts no more and hands its lease back", elector.identity,
                 signum)  # fmt: skip
        fence.resign()  # a write of another thread from now on waits for this one to end the process
        elector.release()
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(0)

    async def take_sigterm(**_: Any) -> None:
        signal.signal(signal.SIGTERM, resign)  # kopf's loop still hears of it (the wakeup fd): no matter

    return take_sigterm


def lead(api: client.ApiClient, namespace: str, name: str, identity: str, liveness: str, timing: Timing) -> Elector:
    """Stand by until this process holds the Lease ``namespace/name``; returns its elector, renewing."""
    elector = Elector(Leases(api, namespace, name), identity, timing, fencing=True)
    server = serve_health(liveness, elector)
    log.info("leader election: %s stands by for the lease %s/%s", identity, namespace, name)
    elector.start()
    elector.wait_leading()
    if server is not None:
        server.shutdown()
        server.server_close()
    signal.signal(signal.SIGCONT, _on_continue)
    return elector

"""``warden-bridge``: the bridge's process (its Deployment is in the operator chart, ``bridge.enabled``).

It schedules the pods whose ``spec.schedulerName`` is ``--scheduler-name``, in every namespace opted in
to a SlurmCluster with ``spec.bridge.enabled`` (``warden.bridge``). ``/healthz`` on ``--liveness-port``
answers 200 while rounds run to their end.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from warden.bridge.controller import Bridge, Settings
from warden.kube.client import Kube, api_client

log = logging.getLogger("warden.bridge")

#: a round that has not ended for this long makes the liveness probe fail (the kubelet restarts the pod)
STUCK_SECONDS = 120.0


def serve_liveness(port: int, bridge: Bridge) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stuck = time.monotonic() - bridge.last_round > STUCK_SECONDS
            self.send_response(500 if stuck or self.path != "/healthz" else 200)
            self.end_headers()
            self.wfile.write(b"stuck\n" if stuck else b"ok\n")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="liveness", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Warden's bridge: Slurm schedules Kubernetes pods.")
    parser.add_argument("--scheduler-name", default="warden-slurm", help="the pods' spec.schedulerName it takes")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between rounds (1)")
    parser.add_argument(
        "--slurmrestd-url", default=None, metavar="TEMPLATE",
        help="where each cluster's slurmrestd answers, {namespace} and {name} standing for the SlurmCluster's"
        " (default: its Service's in-cluster URL)",
    )  # fmt: skip
    parser.add_argument("--liveness-port", type=int, default=8081, metavar="PORT", help="/healthz (0: none)")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be above 0")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = Settings(scheduler_name=args.scheduler_name, interval=args.interval, restapi_url=args.slurmrestd_url)
    bridge = Bridge(Kube(api_client("warden-bridge")), settings)
    if args.liveness_port:
        serve_liveness(args.liveness_port, bridge)
    bridge.start()
    log.info("scheduling pods with spec.schedulerName=%s through Slurm", settings.scheduler_name)
    bridge.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`warden-read-gate`: the exporter's four reads of Slurm, asked as SlurmUser, and nothing else.

Why a gate: Slurm has no read-only administrator. ``spec.slurmConfig.privateData`` (by default ``jobs``
and ``usage``) hides other users' jobs and the scheduler statistics from everyone but root, SlurmUser
and Slurm's operators and administrators, and each of those may also cancel any job and drain any node.
The exporter must count every job, yet whoever gets into the pod Prometheus scrapes must be able to do
neither. So the exporter holds a token for ``warden-reader`` (``warden.tokens``): with it slurmrestd lets
it read what any user may read, and Slurm refuses its jobs. This gate (Deployment ``<cluster>-read-gate``,
which only the exporter may reach: docs/security.md) holds the cluster's one other token, SlurmUser's,
and answers these requests of the exporter with it::

    GET /slurm/<naming.RESTAPI_VERSION>/{ping,nodes,jobs,diag}   X-SLURM-USER-TOKEN: <the exporter's token>

slurmrestd's answer is passed on as it is, as it arrives. Any other method is refused (405), any other
path too (404), any other token (401). Both tokens are files the kubelet keeps current (Secrets
``<cluster>-exporter-token`` and ``<cluster>-read-gate-token``, which the operator writes anew before they
expire), read at each request.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import urllib3

from warden import naming

log = logging.getLogger("warden.readgate")

#: what the exporter reads (``warden.exporter.main.SlurmCollector``)
READS = frozenset({"ping", "nodes", "jobs", "diag"})
#: the Slurm user the gate asks as (its token's)
GATE_USER = "slurm"
#: bytes passed on at a time
PIECE = 65536


def refusal(method: str, path: str, presented: str, expected: str) -> tuple[int, str] | None:
    """Why a request is refused, as (HTTP status, words); None when the gate asks slurmrestd for it."""
    if method != "GET":
        return 405, f"{method} refused: the read gate only reads"
    prefix = f"/slurm/{naming.RESTAPI_VERSION}/"
    if not path.startswith(prefix) or path.removeprefix(prefix) not in READS:
        return 404, f"{path} refused: the read gate answers {prefix}{{{','.join(sorted(READS))}}} only"
    if not presented or not expected or not hmac.compare_digest(presented.encode(), expected.encode()):
        return 401, "Authentication failure: not the exporter's token"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Gate:
    """The gate of one cluster: slurmrestd at ``restapi``, the exporter's token (``caller_token``) that
    callers must present, SlurmUser's (``own_token``) that it asks with."""

    restapi: str
    caller_token: Path
    own_token: Path
    timeout: float = 10.0

    def serve(self, listen: str, port: int) -> ThreadingHTTPServer:
        """Serve in a thread; ``shutdown()`` the server returned to stop."""
        gate = self
        http = urllib3.PoolManager(retries=False)
        timeout = urllib3.Timeout(connect=min(3.0, self.timeout), read=self.timeout)

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                presented = self.headers.get("X-SLURM-USER-TOKEN") or ""
                refused = refusal(self.command, self.path, presented, _read(gate.caller_token))
                if refused is not None:
                    log.info("refused %s %s from %s: %s", self.command, self.path, self.client_address[0], refused[1])
                    self._send_errors(*refused)
                    return
                headers = {
                    "X-SLURM-USER-NAME": GATE_USER,
                    "X-SLURM-USER-TOKEN": _read(gate.own_token),
                    "Accept": "application/json",
                }
                try:
                    answer = http.request("GET", gate.restapi.rstrip("/") + self.path, headers=headers,
                                          timeout=timeout, preload_content=False)  # fmt: skip
                except urllib3.exceptions.HTTPError as e:
                    self._send_errors(502, f"slurmrestd did not answer the read gate: {e}")
                    return
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
                    self.end_headers()
                    for chunk in answer.stream(PIECE):
                        self.wfile.write(chunk)
                except (urllib3.exceptions.HTTPError, OSError) as e:  # cut short: the caller sees a broken answer
                    log.warning("%s: answer cut short: %s", self.path, e)
                finally:
                    answer.release_conn()

            def _send_errors(self, status: int, words: str) -> None:
                data = json.dumps({"errors": [{"description": words, "error": words}]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

            def log_message(self, *args: Any) -> None:  # refusals are logged above; reads are not
                pass

        server = ThreadingHTTPServer((listen, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="read-gate", daemon=True).start()
        return server


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warden-read-gate", description=__doc__.split("\n\n")[0])
    p.add_argument("--restapi", required=True, help="slurmrestd's base URL (http://<cluster>-restapi:6820)")
    p.add_argument("--caller-token", type=Path, default=Path(naming.token_dir("exporter")) / naming.TOKEN_KEY,
                   help="the token callers must present (Secret <cluster>-exporter-token)")  # fmt: skip
    p.add_argument("--token", type=Path, default=Path(naming.token_dir("read-gate")) / naming.TOKEN_KEY,
                   help="SlurmUser's token, asked with (Secret <cluster>-read-gate-token)")  # fmt: skip
    p.add_argument("--listen", default="0.0.0.0", help="address to serve on")
    p.add_argument("--port", type=int, default=naming.READ_GATE_PORT, help="port to serve on")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for slurmrestd per request")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    gate = Gate(args.restapi, args.caller_token, args.token, args.timeout)
    server = gate.serve(args.listen, args.port)
    log.info("reading %s for the exporter on %s:%d", args.restapi, args.listen, args.port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`warden-slurm-exporter`: Slurm's state in Prometheus format, read through slurmrestd at each scrape.

One per SlurmCluster (Deployment ``<cluster>-exporter``, port ``naming.EXPORTER_PORT``, path
``/metrics``). At each scrape it asks slurmrestd (``warden.slurm.rest``, as ``warden-reader`` with the
token the operator keeps fresh in Secret ``<cluster>-exporter-token``: no signing key, ``warden.tokens``)
for the nodes, the jobs and the scheduler statistics, tries slurmdbd's port
when the cluster keeps accounting, and serves ``warden.exporter.metrics.families`` plus the process's
own figures (``process_resident_memory_bytes``...). Nothing is cached: a scrape shows Slurm as it is.

Why not a maintained exporter: the public Slurm exporters are not served by the Go module proxy here,
Debian packages none, and Slurm 24.11's slurmctld has no metrics endpoint of its own (that came in
25.11). slurmrestd already runs in every cluster and answers in JSON the operator parses anyway.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warden import naming
from warden.exporter.metrics import Snapshot, families
from warden.slurm.model import SlurmError
from warden.slurm.rest import SlurmRest, SlurmUnreachable

log = logging.getLogger("warden.exporter")


def tcp_answers(host: str, port: int, timeout: float) -> bool:
    """Whether something accepts a TCP connection at host:port within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class SlurmCollector(Collector):
    """Reads Slurm at each ``collect`` (one scrape) and yields every family of ``warden.exporter.metrics``."""

    def __init__(
        self,
        rest: SlurmRest,
        cluster: str,
        slurmdbd: tuple[str, int] | None = None,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rest = rest
        self.cluster = cluster
        self.slurmdbd = slurmdbd
        self.timeout = timeout
        self.clock = clock

    def snapshot(self) -> Snapshot:
        start = self.clock()
        errors: dict[str, int] = {}
        try:
            self.rest.ping()
            up = True
        except SlurmError as e:
            log.warning("slurmctld did not answer: %s", e)
            up, errors["ping"] = False, 1
        read: dict[str, Any] = {}
        readers: dict[str, Callable[[], Any]] = {
            "nodes": self.rest.nodes,
            "jobs": self.rest.jobs,
            "diag": self.rest.diag,
        }
        for what, reader in readers.items() if up else ():
            try:
                read[what] = reader()
            except SlurmUnreachable as e:
                # pings answer but reads do not (a stuck lock): down for users; the next reads would
                # only wait as long again
                log.warning("slurmctld did not answer a read of its %s: %s", what, e)
                up, errors[what] = False, 1
                read.clear()
                break
            except SlurmError as e:
                log.warning("reading Slurm's %s failed: %s", what, e)
                errors[what] = 1
        dbd = None if self.slurmdbd is None else tcp_answers(*self.slurmdbd, timeout=self.timeout)
        return Snapshot(
            cluster=self.cluster,
            up=up,
            nodes=read.get("nodes", []),
            jobs=read.get("jobs", []),
            diag=read.get("diag", {}),
            slurmdbd_reachable=dbd,
            collect_seconds=self.clock() - start,
            errors=errors,
        )

    def collect(self) -> Iterable[Metric]:
        return families(self.snapshot())


def token_reader(path: Path) -> Callable[[], str]:
    """The token in the file, read at each call: the operator writes a new one before the old expires,
    and the kubelet replaces the file."""

    def token() -> str:
        try:
            return path.read_text().strip()
        except OSError as e:
            raise SlurmUnreachable(f"no token to ask slurmrestd with: {path}: {e.strerror}") from e

    return token


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not host:port")
    return host, int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warden-slurm-exporter", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, help="the SlurmCluster as <namespace>/<name> (label slurm_cluster)")
    p.add_argument("--restapi", required=True,
                   help="where to read Slurm: its read gate, http://<cluster>-read-gate:6830")  # fmt: skip
    p.add_argument("--token-file", type=Path, default=Path(naming.token_dir("exporter")) / naming.TOKEN_KEY,
                   help="the token to read with, read at each request (Secret <cluster>-exporter-token)")  # fmt: skip
    p.add_argument("--user", default=naming.READER_USER, help="the Slurm user the token is for")
    p.add_argument("--slurmdbd", type=_host_port, default=None, help="host:port of slurmdbd (accounting only)")
    p.add_argument("--listen", default="0.0.0.0", help="address to serve /metrics on")
    p.add_argument("--port", type=int, default=naming.EXPORTER_PORT, help="port to serve /metrics on")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for slurmrestd per request")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.token_file.is_file():  # the operator writes it in its next Slurm sync round
        log.warning("no token at %s yet (Secret <cluster>-exporter-token): scrapes say slurm_up 0 until it comes",
                    args.token_file)  # fmt: skip
    rest = SlurmRest(args.restapi, token_reader(args.token_file), user=args.user, timeout=args.timeout)
    registry = CollectorRegistry()
    registry.register(SlurmCollector(rest, args.cluster, args.slurmdbd, timeout=min(args.timeout, 5.0)))
    ProcessCollector(registry=registry)
    server, thread = start_http_server(args.port, addr=args.listen, registry=registry)
    log.info("serving %s's metrics on %s:%d/metrics (slurmrestd %s)", args.cluster, args.listen, args.port,
             args.restapi)  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    thread.join(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

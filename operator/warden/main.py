"""`warden-operator`: run the kopf operator with Warden's handlers."""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import re
import socket

import kopf
from prometheus_client import start_http_server

from warden import handlers, naming, opmetrics  # handlers: registers them
from warden.kube.client import api_client
from warden.leader import standby
from warden.leader.decide import Timing
from warden.model import DNS_SUBDOMAIN, IMAGE_REGISTRY, IMAGE_REGISTRY_ENV, default_image
from warden.naming import Names
from warden.render.context import ServiceAccountRef
from warden.slurmsync import Settings


def _restapi_url(template: str) -> str:
    if not template.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"not an http:// or https:// URL: {template!r}")
    return template


#: a Kubernetes namespace name (a DNS-1123 label)
NAMESPACE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def service_account(text: str) -> ServiceAccountRef:
    """``<namespace>/<name>`` of a ServiceAccount (``--bridge-service-account``)."""
    namespace, sep, name = text.partition("/")
    if not sep or not re.match(NAMESPACE, namespace) or len(namespace) > 63:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give <namespace>/<name> of the bridge's ServiceAccount, e.g. warden-system/warden-bridge"
        )
    if not re.match(DNS_SUBDOMAIN, name) or len(name) > 253:
        raise argparse.ArgumentTypeError(f"{text!r}: {name!r} is no ServiceAccount name (a DNS subdomain)")
    return ServiceAccountRef(namespace=namespace, name=name)


#: glibc's mallopt parameter: how many malloc arenas threads may spread over (glibc's malloc.h)
M_ARENA_MAX = -8
#: two arenas: the operator's threads (pod writers, watch caches, the Slurm sync) share them
MALLOC_ARENAS = 2


def few_malloc_arenas() -> None:
    """By default glibc gives threads up to eight malloc arenas per core, each keeping the memory its
    thread freed: the sixteen pod writers, decoding the API server's answers, grew the operator by
    megabytes of free pages it never gave back. Called before any thread starts (``MALLOC_ARENA_MAX=2``
    in effect). Elsewhere than glibc, nothing to do."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is not None and mallopt(M_ARENA_MAX, MALLOC_ARENAS) != 1:
        logging.getLogger(__name__).warning("mallopt(M_ARENA_MAX, %d) refused", MALLOC_ARENAS)


def main(argv: list[str] | None = None) -> int:
    few_malloc_arenas()
    parser = argparse.ArgumentParser(description="Warden: Slurm clusters with a shared root on Kubernetes.")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=[], help="watch only these namespaces")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    parser.add_argument(
        "--metrics-port", type=int, default=naming.OPERATOR_METRICS_PORT, metavar="PORT",
        help=f"serve Prometheus metrics on this port, path /metrics (default {naming.OPERATOR_METRICS_PORT}; 0: off)",
    )  # fmt: skip
    parser.add_argument("--log-format", choices=["plain", "full", "json"], default="full")
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument(
        "--slurm-sync-interval", type=float, default=5.0, metavar="S",
        help="seconds between looks at Slurm's node states through slurmrestd (default 5; 0: never, and Ready"
        " then does not wait for slurmctld's word that the workers registered)",
    )  # fmt: skip
    parser.add_argument(
        "--register-timeout", type=float, default=300.0, metavar="S",
        help="a worker pod whose slurmd runs this long without registering is recreated (default 300)",
    )  # fmt: skip
    parser.add_argument(
        "--slurmrestd-url", type=_restapi_url, default=None, metavar="TEMPLATE",
        help="where the Slurm sync reaches each cluster's slurmrestd, {namespace} and {name} standing for the"
        " SlurmCluster's: for an operator outside the cluster, e.g. http://127.0.0.1:6820 with kubectl"
        " port-forward svc/<cluster>-restapi 6820 (default: the Service's in-cluster URL,"
        f" {Names(cluster='{name}', namespace='{namespace}').restapi_url})",
    )  # fmt: skip
    parser.add_argument(
        "--bridge-service-account", type=service_account, default=None, metavar="NAMESPACE/NAME",
        help="the bridge's ServiceAccount (warden-bridge, the operator chart's bridge.enabled): each SlurmCluster"
        " with spec.bridge.enabled gets a Role and RoleBinding letting it read the cluster's bridge token Secret"
        " (default: none, and no such Role)",
    )  # fmt: skip
    election = parser.add_argument_group("leader election (several replicas, one acting)")
    election.add_argument(
        "--leader-elect", action="store_true",
        help="act only while holding the Lease --leader-election-lease in --leader-election-namespace; until then"
        " stand by, the liveness endpoint answering (the operator chart turns this on)",
    )  # fmt: skip
    election.add_argument(
        "--leader-election-namespace", default=os.environ.get("POD_NAMESPACE", ""), metavar="NAMESPACE",
        help="namespace of the Lease (default: $POD_NAMESPACE, the operator's own)",
    )  # fmt: skip
    election.add_argument("--leader-election-lease", default="warden-operator", metavar="NAME",
                          help="name of the Lease (default warden-operator)")  # fmt: skip
    election.add_argument(
        "--leader-election-identity", default=os.environ.get("POD_NAME") or socket.gethostname(), metavar="ID",
        help="this replica's name in the Lease, the logs and warden_operator_leading (default: $POD_NAME, else"
        " the host name)",
    )  # fmt: skip
    election.add_argument(
        "--leader-election-lease-duration", type=float, default=15.0, metavar="S",
        help="seconds a standby waits, after the leader's last renewal, before it takes over (default 15; the"
        " leader renews every third of it and stops acting after two thirds without a renewal)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.leader_elect and not args.leader_election_namespace:
        parser.error("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE)")
    registry = os.environ.get(IMAGE_REGISTRY_ENV, "")
    if registry and not re.match(IMAGE_REGISTRY, registry):
        parser.error(f"{IMAGE_REGISTRY_ENV}={registry!r} is not host[:port]/path (the operator chart's image.registry)")
    handlers.STATE.namespaces = list(args.namespace)
    handlers.STATE.bridge_account = args.bridge_service_account
    handlers.STATE.sync_settings = Settings(
        interval=args.slurm_sync_interval, register_timeout=args.register_timeout, restapi_url=args.slurmrestd_url
    )
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=opmetrics.REGISTRY)
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[args.log_format.upper()])
    log = logging.getLogger(__name__)
    log.info("images a SlurmCluster does not name: %s", default_image("<name>"))
    elector = None
    if args.leader_elect:  # kopf, its handlers and every sync thread start only on the leader
        elector = standby.lead(api_client(handlers.USER_AGENT), args.leader_election_namespace,
                               args.leader_election_lease, args.leader_election_identity, args.liveness,
                               Timing.for_lease(args.leader_election_lease_duration))  # fmt: skip
        log.info("leader election: %s acts from now on", args.leader_election_identity)
        kopf.on.startup()(standby.resign_on_sigterm(elector))
    try:
        kopf.run(
            standalone=True,  # the election is ours (warden.leader): kopf's peering is no lease
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness or None,
        )
    finally:
        if elector is not None:  # a clean stop (SIGTERM): the standby takes over at its next look
            elector.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``warden-health-check``: run the NCCL check once and print its JSON summary (see ``check``).

Every option has an environment variable, so a CronJob can set them without a command line:

=========================  ==================================  =========
option                     environment                         default
=========================  ==================================  =========
``--min-busbw``            ``WARDEN_HEALTH_THRESHOLD_GBPS``    100 (GB/s; ``--threshold`` too)
``--min-bytes``            ``WARDEN_HEALTH_MIN_BYTES``         512M (``512Mi`` reads as 512M)
``--max-bytes``            ``WARDEN_HEALTH_MAX_BYTES``         8G
``--time-limit``           ``WARDEN_HEALTH_TIME_LIMIT_MIN``    10 (minutes per node)
``--time-limit-seconds``   ``WARDEN_HEALTH_TIME_LIMIT_S``      (overrides minutes; for tests)
``--immediate``            ``WARDEN_HEALTH_IMMEDIATE_S``       60
``--concurrency``          ``WARDEN_HEALTH_CONCURRENCY``       4
``--nodes``                ``WARDEN_HEALTH_NODES``             every node with GPUs
``--partition``            ``WARDEN_HEALTH_PARTITION``         each node's own partitions
``--binary``               ``WARDEN_HEALTH_BINARY``            all_reduce_perf
``--extra-args``           ``WARDEN_HEALTH_EXTRA_ARGS``        (none; split like a shell would)
``--dry-run``              ``WARDEN_HEALTH_DRY_RUN=1``         off
``--report-configmap``     ``WARDEN_HEALTH_REPORT_CONFIGMAP``  (none) NAMESPACE/NAME to write the
                                                               summary into (``report.json``)
=========================  ==================================  =========

Exit status: 0 when the run completed (whatever it found: the findings are in the summary and in
Slurm), 1 when Slurm could not even list its nodes or the report could not be written, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence

from warden.health.check import CheckConfig, run_checks
from warden.health.report import ApiTarget, ReportError, in_cluster, write_report
from warden.slurm.cli import Slurm
from warden.slurm.model import SlurmError

_SIZE = re.compile(r"^(\d+)([KMGkmg]i?)?$")


def _env(name: str, default: str) -> str:
    return os.environ.get(name, "") or default


def _size(text: str) -> str:
    """all_reduce_perf reads K/M/G as powers of 1024, so Kubernetes' Mi/Gi mean the same."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size like 512M or 8G: {text!r}")
    return m[1] + (m[2] or "")[:1].upper()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="warden-health-check",
        description="Run NCCL all_reduce_perf on GPU nodes; drain slow or broken ones, resume recovered.",
    )
    p.add_argument(
        "--min-busbw",
        "--threshold",
        dest="threshold",
        type=_positive_float,
        default=_env("WARDEN_HEALTH_THRESHOLD_GBPS", "100"),
        help="minimum average bus bandwidth, GB/s",
    )
    p.add_argument("--min-bytes", type=_size, default=_env("WARDEN_HEALTH_MIN_BYTES", "512M"))
    p.add_argument("--max-bytes", type=_size, default=_env("WARDEN_HEALTH_MAX_BYTES", "8G"))
    p.add_argument(
        "--time-limit",
        type=_positive_int,
        default=_env("WARDEN_HEALTH_TIME_LIMIT_MIN", "10"),
        help="minutes one node's test may run (srun --time)",
    )
    p.add_argument(
        "--time-limit-seconds",
        type=_positive_int,
        default=os.environ.get("WARDEN_HEALTH_TIME_LIMIT_S") or None,
        help="the same in seconds, overriding --time-limit (short runs in tests)",
    )
    p.add_argument(
        "--immediate",
        type=_positive_int,
        default=_env("WARDEN_HEALTH_IMMEDIATE_S", "60"),
        help="seconds srun waits for a node before reporting it taken",
    )
    p.add_argument(
        "--concurrency",
        type=_positive_int,
        default=_env("WARDEN_HEALTH_CONCURRENCY", "4"),
        help="nodes tested at once",
    )
    p.add_argument(
        "--nodes",
        default=_env("WARDEN_HEALTH_NODES", ""),
        help="comma-separated node names (default: every node with GPUs)",
    )
    p.add_argument("--partition", default=_env("WARDEN_HEALTH_PARTITION", ""))
    p.add_argument("--binary", default=_env("WARDEN_HEALTH_BINARY", "all_reduce_perf"))
    p.add_argument(
        "--extra-args",
        default=_env("WARDEN_HEALTH_EXTRA_ARGS", ""),
        help="more all_reduce_perf arguments, e.g. '-n 50 -w 10'",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=_env("WARDEN_HEALTH_DRY_RUN", "") in ("1", "true", "yes"),
        help="test and report, but neither drain nor resume",
    )
    p.add_argument(
        "--report-configmap",
        default=_env("WARDEN_HEALTH_REPORT_CONFIGMAP", ""),
        help="NAMESPACE/NAME of a ConfigMap to write the summary into (in-cluster credentials)",
    )
    return p


def config_from_args(args: argparse.Namespace) -> CheckConfig:
    return CheckConfig(
        threshold_gbps=float(args.threshold),
        min_bytes=str(args.min_bytes),
        max_bytes=str(args.max_bytes),
        time_limit_s=int(args.time_limit_seconds or int(args.time_limit) * 60),
        immediate_s=int(args.immediate),
        concurrency=int(args.concurrency),
        binary=str(args.binary),
        extra_args=tuple(shlex.split(str(args.extra_args))),
        partition=str(args.partition) or None,
        reservation_user=getpass.getuser(),
        dry_run=bool(args.dry_run),
    )


def main(argv: Sequence[str] | None = None, slurm: Slurm | None = None, report_target: ApiTarget | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = config_from_args(args)  # argparse runs `type` on string defaults too: env values are checked
    nodes = [n.strip() for n in str(args.nodes).split(",") if n.strip()] or None
    try:
        summary = run_checks(slurm or Slurm(), cfg, nodes)
    except SlurmError as e:
        print(f"warden-health-check: {e}", file=sys.stderr)
        return 1
    doc = summary.to_json()
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    if args.report_configmap:
        try:
            write_report(report_target or in_cluster(), str(args.report_configmap), doc)
        except ReportError as e:
            print(f"warden-health-check: report not written: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

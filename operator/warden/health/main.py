"""``warden-health-check``: run the NCCL check once and print its JSON summary (see ``check``).

Every option has an environment variable, so a CronJob can set them without a command line:

=========================  ==================================  =========
option                     environment                         default
=========================  ==================================  =========
``--threshold``            ``WARDEN_HEALTH_THRESHOLD_GBPS``    100
``--min-bytes``            ``WARDEN_HEALTH_MIN_BYTES``         512M
``--max-bytes``            ``WARDEN_HEALTH_MAX_BYTES``         8G
``--time-limit``           ``WARDEN_HEALTH_TIME_LIMIT_S``      600
``--immediate``            ``WARDEN_HEALTH_IMMEDIATE_S``       60
``--concurrency``          ``WARDEN_HEALTH_CONCURRENCY``       4
``--nodes``                ``WARDEN_HEALTH_NODES``             every node with GPUs
``--partition``            ``WARDEN_HEALTH_PARTITION``         the default partition
``--binary``               ``WARDEN_HEALTH_BINARY``            all_reduce_perf
``--extra-args``           ``WARDEN_HEALTH_EXTRA_ARGS``        (none; split like a shell would)
``--dry-run``              ``WARDEN_HEALTH_DRY_RUN=1``         off
=========================  ==================================  =========

Exit status: 0 when the run completed (whatever it found: the findings are in the summary and in
Slurm), 1 when Slurm could not even list its nodes, 2 on bad arguments.
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
from warden.slurm import Slurm, SlurmError

_SIZE = re.compile(r"^\d+[KMGkmg]?$")


def _env(name: str, default: str) -> str:
    return os.environ.get(name, "") or default


def _size(text: str) -> str:
    if not _SIZE.match(text):
        raise argparse.ArgumentTypeError(f"not a size like 512M or 8G: {text!r}")
    return text.upper()


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
        "--threshold",
        type=_positive_float,
        default=_env("WARDEN_HEALTH_THRESHOLD_GBPS", "100"),
        help="minimum average bus bandwidth, GB/s",
    )
    p.add_argument("--min-bytes", type=_size, default=_env("WARDEN_HEALTH_MIN_BYTES", "512M"))
    p.add_argument("--max-bytes", type=_size, default=_env("WARDEN_HEALTH_MAX_BYTES", "8G"))
    p.add_argument(
        "--time-limit",
        type=_positive_int,
        default=_env("WARDEN_HEALTH_TIME_LIMIT_S", "600"),
        help="seconds one node's test may run",
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
    return p


def config_from_args(args: argparse.Namespace) -> CheckConfig:
    return CheckConfig(
        threshold_gbps=float(args.threshold),
        min_bytes=str(args.min_bytes),
        max_bytes=str(args.max_bytes),
        time_limit_s=int(args.time_limit),
        immediate_s=int(args.immediate),
        concurrency=int(args.concurrency),
        binary=str(args.binary),
        extra_args=tuple(shlex.split(str(args.extra_args))),
        partition=str(args.partition) or None,
        reservation_user=getpass.getuser(),
        dry_run=bool(args.dry_run),
    )


def main(argv: Sequence[str] | None = None, slurm: Slurm | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg = config_from_args(args)  # argparse runs `type` on string defaults too: env values are checked
    nodes = [n.strip() for n in str(args.nodes).split(",") if n.strip()] or None
    try:
        summary = run_checks(slurm or Slurm(), cfg, nodes)
    except SlurmError as e:
        print(f"warden-health-check: {e}", file=sys.stderr)
        return 1
    json.dump(summary.to_json(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

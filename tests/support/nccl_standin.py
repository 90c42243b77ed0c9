#!/usr/bin/python3
"""STAND-IN for nccl-tests' ``all_reduce_perf``, for the dataplane tier only: no GPU and no NCCL exist
on the machines that run it, so this prints what the real program prints, with a bus bandwidth the
test chose for the node it runs on. It never measures anything.

The dataplane health tests copy it into the jail as ``/usr/local/bin/all_reduce_perf``, where the
health check's ``srun`` finds it (the SPANK plugin runs every step inside the jail). What it does on a
node is read from ``SETTINGS_DIR/<short host name>`` (a file on the shared jail volume, so the test can
make a node slow, and fast again, between two runs; ``WARDEN_NCCL_STANDIN_DIR`` overrides the directory):

``<number>``  print a complete run whose average bus bandwidth is that many GB/s
``hang``      print the header and the first half of a row, then hang (a stuck collective)
(missing)     exit 1 with a message on stderr, like a program that cannot start

Every call is appended to ``SETTINGS_DIR/calls.jsonl`` (host, argv, ``CUDA_VISIBLE_DEVICES``, whether
``/etc/warden-jail-release`` exists, i.e. whether it runs inside the jail), so a test can tell which
nodes were tested and with what.

The output follows nccl-tests' layout (``src/util.cu``, see tests/unit/fixtures/nccl/README.md):
``# nThread`` line, ``#  Rank`` device lines, the two-line column header, one row per size from
``-b`` to ``-e`` multiplying by ``-f``, with out-of-place and in-place halves,
``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : X``. ``-g`` is the number of GPUs;
inside a Slurm job (``SLURM_JOB_ID``) the visible devices are those of the step's gres
(``CUDA_VISIBLE_DEVICES``, none when the step asked for no GPUs); when fewer are visible than ``-g``
asks for, it fails the way the real program does.

Standard library only: it runs on the jail's own ``python3``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time

SETTINGS_DIR = os.environ.get("WARDEN_NCCL_STANDIN_DIR", "/var/lib/warden-nccl-standin")
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}")
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="all_reduce_perf", add_help=False)
    p.add_argument("-b", "--minbytes", type=size, default=32 * 1024**2)
    p.add_argument("-e", "--maxbytes", type=size, default=32 * 1024**2)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-g", "--ngpus", type=int, default=1)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    args, _unknown = p.parse_known_args(argv)  # the real program ignores nothing, but we need nothing else
    return args


def visible_gpus() -> list[str] | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [] if "SLURM_JOB_ID" in os.environ else None
    return [d for d in value.split(",") if d.strip()]


def sizes(args: argparse.Namespace) -> list[int]:
    out: list[int] = []
    n = args.minbytes
    while n <= args.maxbytes and len(out) < 64:
        out.append(n)
        if args.stepfactor <= 1:
            break
        n *= args.stepfactor
    return out


def header(args: argparse.Namespace, host: str, devices: list[str]) -> str:
    lines = [
        "# nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703  (STAND-IN, no GPU)",
        "# Collective test starting: all_reduce_perf",
        f"# nThread 1 nGpus {args.ngpus} minBytes {args.minbytes} maxBytes {args.maxbytes} "
        f"step: {args.stepfactor}(factor) warmup iters: {args.warmup_iters} iters: {args.iters} "
        f"agg iters: 1 validation: {args.check} graph: 0 unalign: 0",
        "#",
        "# Using devices",
    ]
    pid = os.getpid()
    for rank in range(args.ngpus):
        dev = devices[rank] if rank < len(devices) else str(rank)
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10s} device {int(dev):2d} "
            f"[0000:{0x18 + 0x10 * rank:02x}:00] STAND-IN fake GPU"
        )
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "     time   algbw   busbw  #wrong ",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
        "     (us)  (GB/s)  (GB/s)         ",
    ]
    return "\n".join(lines) + "\n"


def fmt_time(us: float) -> str:
    if us >= 1e5:
        return f"{us:7.0f}"
    if us >= 1e4:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def half(nbytes: int, busbw: float, ngpus: int, check: int) -> str:
    factor = 2 * (ngpus - 1) / ngpus if ngpus > 1 else 1.0
    algbw = busbw / factor if ngpus > 1 else busbw
    shown_busbw = busbw if ngpus > 1 else 0.0
    time_us = nbytes / (algbw * 1e3)
    wrong = "0" if check else "N/A"
    return f"  {fmt_time(time_us)}  {algbw:6.2f}  {shown_busbw:6.2f}  {wrong:>6s}"


def row_start(nbytes: int) -> str:
    return f"{nbytes:12d}  {nbytes // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    host = socket.gethostname().split(".")[0]
    call = {
        "host": host,
        "argv": argv,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "in_jail": os.path.exists("/etc/warden-jail-release"),
    }
    try:
        with open(os.path.join(SETTINGS_DIR, "calls.jsonl"), "a") as log:
            log.write(json.dumps(call) + "\n")
    except OSError:
        pass
    try:
        with open(os.path.join(SETTINGS_DIR, host)) as f:
            setting = f.read().strip()
    except OSError as e:
        print(f"all_reduce_perf (stand-in): no setting for {host}: {e}", file=sys.stderr)
        return 1
    visible = visible_gpus()
    devices = visible if visible is not None else [str(i) for i in range(args.ngpus)]
    if visible is not None and len(visible) < args.ngpus:
        # what nccl-tests prints when -g asks for more GPUs than the process can see
        print(f"{host}: Test CUDA failure common.cu:892 'invalid device ordinal'", flush=True)
        print(f" .. {host} pid {os.getpid()}: Test failure common.cu:1021", flush=True)
        return 1
    out = sys.stdout
    out.write(header(args, host, devices))
    out.flush()
    if setting == "hang":
        out.write(row_start(args.minbytes))
        out.flush()
        while True:
            time.sleep(3600)
    target = float(setting)
    values: list[float] = []
    for i, nbytes in enumerate(sizes(args)):
        # bandwidth grows a little with the message size, as on real links; the average stays `target`
        spread = (i - (len(sizes(args)) - 1) / 2) * 0.01 * target
        oop, inp = target + spread + 0.001 * target, target + spread - 0.001 * target
        values += [oop if args.ngpus > 1 else 0.0, inp if args.ngpus > 1 else 0.0]
        out.write(row_start(nbytes) + half(nbytes, oop, args.ngpus, args.check))
        out.write(half(nbytes, inp, args.ngpus, args.check) + "\n")
    avg = sum(values) / len(values) if values else 0.0
    out.write("# Out of bounds values : 0 OK\n")
    out.write(f"# Avg bus bandwidth    : {avg:g} \n")
    out.write("#\n# Collective test concluded: all_reduce_perf\n\n#\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

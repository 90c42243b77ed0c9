"""``warden-node``: the Slurm files of every Slurm pod, and the worker container's node lifecycle (see
``warden.node``).

warden-node config [--jwt-key] [--print-hash DIR]...
                     slurm.conf and friends from WARDEN_CONFIG_DIR, then the auth key, into SLURM_ETC
                     (images/slurm-base/warden-lib.sh: warden_slurm_config); --jwt-key: then the JWT
                     key, when SLURM_ETC/slurm.conf asks for auth/jwt (slurmctld);
                     --print-hash: print the hash of the DIRs (warden_dirs_hash's) taken before copying.
                     One start for what an entrypoint does first: under a starved node each Python start
                     took seconds (docs/local-cluster.md)
warden-node key      the auth key alone (warden_slurm_key: the accounting image)
warden-node client-config
                     SLURM_ETC without its secrets, for the jail (warden_client_config)
warden-node files    install the worker's Slurm files (its entrypoint, before its mounts); prints the
                     hash of the mounted config taken before copying it, for ``run --config-hash``
warden-node run [--config-hash H] [--also-stop PID]... [-- SLURMD_ARGS...]
                     start slurmd and stay its supervisor (``exec``'d by the worker's entrypoint: PID 1)

An error goes to stderr as the entrypoints' warden_die says it (``[component] error: ...``), and the
status is 1. Log lines are ``[$WARDEN_COMPONENT] ...`` (``[worker]`` without it)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from warden.node import lifecycle
from warden.node.dirhash import dirs_hash
from warden.node.files import FilesError, NodeFiles, SlurmFiles
from warden.node.lifecycle import FileSettings, Settings, SettingsError
from warden.node.supervisor import Children, Supervisor, log_line

#: the subcommands of every Slurm image but ``config`` (its options: ``main``), and what each one does
_SLURM_FILES: dict[str, Callable[[SlurmFiles], None]] = {
    "key": SlurmFiles.auth_key,
    "client-config": SlurmFiles.client_config,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    slurmd_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, slurmd_args = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="warden-node", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    config = sub.add_parser("config", help="slurm.conf and friends, then the auth key, into SLURM_ETC")
    config.add_argument("--jwt-key", action="store_true",
                        help="then the JWT key, when slurm.conf asks for auth/jwt (slurmctld)")  # fmt: skip
    config.add_argument("--print-hash", type=Path, action="append", default=[], metavar="DIR",
                        help="print the hash of these directories, taken before copying")  # fmt: skip
    sub.add_parser("key", help="the auth key into SLURM_ETC")
    sub.add_parser("client-config", help="SLURM_ETC without its secrets into WARDEN_CLIENT_CONFIG")
    sub.add_parser("files", help="install the worker's Slurm files; print the config hash taken before")
    run = sub.add_parser("run", help="start slurmd and supervise it (arguments after -- go to slurmd)")
    run.add_argument("--config-hash", default=None, help="hash of the mounted config the files came from")
    run.add_argument("--also-stop", type=int, action="append", default=[], help="a PID to stop when leaving")
    opts = parser.parse_args(args)

    log = log_line(os.environ.get("WARDEN_COMPONENT") or "worker")
    try:
        if opts.command == "config":
            before = dirs_hash(opts.print_hash) if opts.print_hash else None
            files = SlurmFiles(FileSettings.from_env(), log)
            files.install()
            if opts.jwt_key:
                files.jwt_key()
            if before is not None:
                print(before)
            return 0
        if opts.command in _SLURM_FILES:
            _SLURM_FILES[opts.command](SlurmFiles(FileSettings.from_env(), log))
            return 0
        settings = Settings.from_env()
        if opts.command == "files":
            before = lifecycle.dirs_hash([settings.config_dir])
            NodeFiles(settings, log).install()
            print(before)
            return 0
        sup = Supervisor(settings, Children(), log=log, config_hash=opts.config_hash, also_stop=opts.also_stop)
    except (SettingsError, FilesError, OSError) as e:
        log(f"error: {e}")
        return 1
    install_signal_handlers(sup)
    return sup.run(slurmd_args)


def install_signal_handlers(sup: Supervisor) -> Callable[[], None]:
    """SIGTERM and SIGINT make the node leave Slurm; returns what puts the previous handlers back."""
    sigs = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda *_: sup.terminate()) for sig in sigs}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore

"""The worker node's life in Slurm, as values and pure decisions (no process, no Slurm, no file here).

``FileSettings`` is where every Slurm pod's files come from and go (``warden.node.files``);
``Settings``, the worker container's environment (the variables documented at the top of
images/worker/entrypoint.sh and in docs/images.md), adds the worker's own; the functions below plan what
``warden.node.supervisor`` then does: slurmd's command line, the gres line of this node, the drain
reasons (``warden.slurm.reasons``), whether a node registered without its gres must register again,
and the hash that tells a changed ConfigMap.
"""

from __future__ import annotations

import enum
import os
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from warden.node import dirhash
from warden.slurm import reasons

#: the hash of the regular files of directories (one definition: ``warden.node.dirhash``)
dirs_hash = dirhash.dirs_hash
#: seconds a terminating pod gives its running jobs after draining (``WARDEN_LEAVE_TIMEOUT``)
DEFAULT_LEAVE_TIMEOUT_S = 40
#: what the leave needs beyond that wait: the drain, the squeue rounds, the delete, slurmd's stop.
#: The worker pod's terminationGracePeriodSeconds must hold both (tests/unit/test_node_lifecycle.py).
LEAVE_OVERHEAD_S = 15
#: seconds between looks at the mounted config (``WARDEN_CONFIG_POLL``)
DEFAULT_CONFIG_POLL_S = 2.0
#: the reason of the drain on SIGTERM
LEAVE_REASON = reasons.POD_TERMINATING
#: where the jail sees this pod's client configuration (WARDEN_CLIENT_CONFIG; images/slurm-base/warden-lib.sh's
#: warden_jail_binds mounts it)
CLIENT_CONFIG_DIR = "/run/warden/slurm-client"
#: the client configuration never holds these (the keys, slurmdbd.conf)
CLIENT_CONFIG_SECRETS = frozenset({"slurm.key", "slurm.jwks", "jwt_hs256.key", "slurmdbd.conf"})

_GRES = re.compile(r"(?:^|\s)Gres=(\S*)")
_DEVICE = re.compile(r"nvidia([0-9]+)")


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, kw_only=True)
class FileSettings:
    """Where the Slurm files of every Slurm pod come from and go (images/slurm-base/warden-lib.sh's
    variables, with its defaults): the ConfigMap, the keys' Secrets, Slurm's directory, the jail's copy."""

    config_dir: Path = Path("/etc/warden/slurm")
    auth_key: Path = Path("/etc/warden/auth/slurm.key")
    jwt_key: Path = Path("/etc/warden/jwt/jwt_hs256.key")
    slurm_etc: Path = Path("/etc/slurm")
    client_config_dir: Path = Path(CLIENT_CONFIG_DIR)
    #: owner of the installed Slurm files (Slurm wants its key owned by SlurmUser); None: leave it
    #: (WARDEN_FILE_OWNER set and empty: a test run by a user without a ``slurm`` account)
    file_owner: str | None = "slurm"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FileSettings:
        env = os.environ if env is None else env
        return FileSettings(
            config_dir=Path(env.get("WARDEN_CONFIG_DIR") or "/etc/warden/slurm"),
            auth_key=Path(env.get("WARDEN_AUTH_KEY") or "/etc/warden/auth/slurm.key"),
            jwt_key=Path(env.get("WARDEN_JWT_KEY") or "/etc/warden/jwt/jwt_hs256.key"),
            slurm_etc=Path(env.get("SLURM_ETC") or "/etc/slurm"),
            client_config_dir=Path(env.get("WARDEN_CLIENT_CONFIG") or CLIENT_CONFIG_DIR),
            file_owner=env.get("WARDEN_FILE_OWNER", "slurm") or None,
        )


@dataclass(frozen=True, kw_only=True)
class Settings(FileSettings):
    """The worker container's environment, with the entrypoint's defaults."""

    slurmd_conf: str
    node: str
    #: WARDEN_NODE_NAME was given: slurmd gets ``-N node`` (otherwise it takes the hostname itself)
    node_name_given: bool = False
    slurmd_args: tuple[str, ...] = ()
    worker_group: str = ""
    leave_timeout_s: float = DEFAULT_LEAVE_TIMEOUT_S
    config_poll_s: float = DEFAULT_CONFIG_POLL_S
    dev_dir: Path = Path("/dev")
    #: WARDEN_DRIVER_PROBLEM: why job steps of this GPU worker cannot get the NVIDIA driver ("" when they can)
    driver_problem: str = ""
    gpus: int = 0
    # how often the watchers look (seconds); the entrypoint's values, shorter in tests
    registered_poll_s: float = 1.0
    #: how long a SIGHUP'd slurmd has to start again with the new files before it gets another
    config_confirm_s: float = 60.0
    gres_poll_s: float = 5.0
    jobs_poll_s: float = 1.0
    reap_poll_s: float = 0.5

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        conf = env.get("WARDEN_SLURMD_CONF", "")
        if not conf:
            raise SettingsError("WARDEN_SLURMD_CONF is empty (the node line for slurmd -Z --conf)")
        name = env.get("WARDEN_NODE_NAME", "")
        files = FileSettings.from_env(env)
        return cls(
            **{f.name: getattr(files, f.name) for f in fields(FileSettings)},
            slurmd_conf=conf,
            node=name or socket.gethostname().split(".")[0],
            node_name_given=bool(name),
            slurmd_args=tuple(env.get("WARDEN_SLURMD_ARGS", "").split()),
            worker_group=env.get("WARDEN_WORKER_GROUP", ""),
            leave_timeout_s=_number(env, "WARDEN_LEAVE_TIMEOUT", DEFAULT_LEAVE_TIMEOUT_S),
            config_poll_s=_number(env, "WARDEN_CONFIG_POLL", DEFAULT_CONFIG_POLL_S),
            driver_problem=env.get("WARDEN_DRIVER_PROBLEM", ""),
            gpus=int(_number(env, "WARDEN_GPUS", 0)),
        )

    @property
    def gres_spec(self) -> str:
        """The node line's gres (``gpu:h100:8``), or ""."""
        return node_gres_spec(self.slurmd_conf)


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise SettingsError(f"{name}={raw!r} is negative")
    return value


def slurmd_argv(settings: Settings, extra: Sequence[str] = ()) -> list[str]:
    """``slurmd -D -Z [-N node] --conf LINE $WARDEN_SLURMD_ARGS ARGS...``: a dynamic node, in the foreground."""
    argv = ["slurmd", "-D", "-Z"]
    if settings.node_name_given:
        argv += ["-N", settings.node]
    return [*argv, "--conf", settings.slurmd_conf, *settings.slurmd_args, *extra]


def node_gres_spec(slurmd_conf: str) -> str:
    m = _GRES.search(slurmd_conf)
    return m.group(1) if m else ""


def gres_names(gres: str) -> list[str]:
    """The gres names of a gres string, sorted: ``gpu:h100:8(S:0-1),shard:4`` -> ``["gpu", "shard"]``."""
    names = {item.split(":", 1)[0].strip() for item in re.split(r",(?![^(]*\))", gres)}
    return sorted(n for n in names if n and n != "(null)")


def device_files(dev_dir: Path) -> list[Path]:
    """The GPU device files the pod was given (``/dev/nvidia<N>``), in their numbers' order. Device
    plugins keep the host's numbers, so a 4-GPU pod may hold /dev/nvidia4-7."""
    try:
        entries = [p for p in dev_dir.iterdir() if _DEVICE.fullmatch(p.name)]
    except OSError:
        return []
    return sorted(entries, key=lambda p: int(p.name[len("nvidia") :]))


def gres_conf_line(node: str, gres_spec: str, files: Sequence[Path], dev_dir: Path = Path("/dev")) -> str | None:
    """This node's line of gres.conf (the ConfigMap's has none): its first gres with the device files
    its pod was given, ``NodeName=n Name=gpu Type=h100 File=/dev/nvidia4,/dev/nvidia5``. None without
    gres or without files."""
    if not gres_spec or gres_spec == "(null)" or not files:
        return None
    fields = gres_spec.split(",", 1)[0].split(":")
    kind = f" Type={fields[1]}" if len(fields) > 2 else ""
    paths = ",".join(str(dev_dir / f.name) for f in files)
    return f"NodeName={node} Name={fields[0]}{kind} File={paths}"


def driver_drain_reason(problem: str) -> str:
    """The reason a GPU worker without a complete driver is drained with (``sinfo -R``)."""
    return f"{reasons.WORKER} {problem}"


class GresStep(enum.Enum):
    #: not registered yet, or slurmctld does not know the gres types yet: look again later
    WAIT = "wait"
    #: the node carries every gres of its line: nothing more to do, ever
    DONE = "done"
    #: registered without its gres although slurmctld knows them: delete the node, SIGHUP slurmd
    REREGISTER = "reregister"


def gres_step(want: Iterable[str], registered_gres: str | None, gres_types: str | None) -> GresStep:
    """A dynamic node's gres are fixed when it first registers, and a slurmctld whose slurm.conf lacks
    the gres type drops them: the node would stay ``Gres=(null)`` for good. That happens when a GPU
    group is added to a running cluster: its pods start while slurmctld still restarts with the new
    GresTypes. ``registered_gres``: the node's gres in slurmctld (None: not registered);
    ``gres_types``: slurmctld's GresTypes (None: unknown)."""
    wanted = set(want)
    if registered_gres is None:
        return GresStep.WAIT
    if wanted <= set(gres_names(registered_gres)):
        return GresStep.DONE
    if gres_types is None or not wanted <= set(gres_names(gres_types)):
        return GresStep.WAIT
    return GresStep.REREGISTER


def exit_status(wait_status: int) -> int:
    """A wait status as a shell's ``$?`` says it: the exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code

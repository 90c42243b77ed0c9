"""The Slurm files of a pod: the mounted ConfigMap and keys copied where Slurm reads them, with the
ownership it requires (the pod contract of docs/architecture.md), at start and on every reload.

``SlurmFiles`` is what every Slurm image installs: the controller, login, accounting and health-check
entrypoints call it through images/slurm-base/warden-lib.sh (warden_slurm_config, warden_slurm_key,
warden_client_config: ``warden-node config`` (``--jwt-key``), ``key``, ``client-config``).
``NodeFiles`` adds the worker's own: its group's plugstack.conf and its line of gres.conf.
Every file is written next to its target and renamed over it, so no daemon reads half a file.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from warden.node import lifecycle
from warden.node.lifecycle import FileSettings, Settings

Log = Callable[[str], None]

#: slurm.conf asks for auth/jwt (AuthAltTypes=auth/jwt): slurmctld then needs the JWT key
_AUTH_JWT = re.compile(r"^[ \t]*AuthAltTypes[ \t]*=.*auth/jwt", re.IGNORECASE | re.MULTILINE)


class FilesError(Exception):
    """A file Slurm needs is missing or cannot be written (at start: the container stops)."""


class SlurmFiles:
    """The files every Slurm pod installs, from ``FileSettings`` alone."""

    def __init__(self, settings: FileSettings, log: Log) -> None:
        self.s = settings
        self.log = log

    def install(self) -> None:
        """slurm.conf and friends from the ConfigMap, then the auth key (warden_slurm_config)."""
        s = self.s
        if self._copy_dir(s.config_dir, s.slurm_etc, 0o644):
            names = " ".join(sorted(p.name for p in s.slurm_etc.iterdir() if not p.name.startswith(".")))
            self.log(f"config: {s.config_dir} -> {s.slurm_etc} ({names})")
        else:
            self.log(f"config: {s.config_dir} missing; using {s.slurm_etc} as it is")
        if not (s.slurm_etc / "slurm.conf").is_file():
            raise FilesError(f"no {s.slurm_etc}/slurm.conf (mount the ConfigMap at {s.config_dir})")
        self.auth_key()

    def auth_key(self) -> None:
        """The auth/slurm key, owned by SlurmUser, mode 0600: slurmctld, slurmd, sackd and slurmdbd refuse
        a key others can read (warden_slurm_key). A copy already there does when the Secret is missing."""
        s = self.s
        try:
            s.slurm_etc.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as e:
            raise FilesError(f"cannot make {s.slurm_etc}: {e}") from e
        if s.auth_key.is_file():
            self._install(s.auth_key, s.slurm_etc / "slurm.key", 0o600, s.file_owner)
        elif not (s.slurm_etc / "slurm.key").is_file():
            raise FilesError(f"no auth key at {s.auth_key} (Secret <cluster>-slurm-key)")

    def jwt_key(self) -> None:
        """auth/jwt (slurm.conf: AuthAltTypes=auth/jwt, AuthAltParameters=jwt_key=SLURM_ETC/jwt_hs256.key):
        slurmctld alone reads the HS256 key, to sign ``scontrol token`` and check the tokens slurmrestd
        passes on; a copy owned by SlurmUser, mode 0600, like slurm.key, made again on every reload
        (warden_jwt_key). Nothing to do for a slurm.conf without auth/jwt (images/smoke.sh)."""
        s = self.s
        try:
            conf = (s.slurm_etc / "slurm.conf").read_text(errors="replace")
        except OSError:
            return
        if not _AUTH_JWT.search(conf):
            return
        if s.jwt_key.is_file():
            self._install(s.jwt_key, s.slurm_etc / "jwt_hs256.key", 0o600, s.file_owner)
        elif not (s.slurm_etc / "jwt_hs256.key").is_file():
            raise FilesError(
                f"no JWT key at {s.jwt_key} (Secret <cluster>-jwt-key, key jwt_hs256.key): slurmctld needs it"
                " for AuthAltTypes=auth/jwt"
            )

    def client_config(self) -> None:
        """The client configuration the jail sees at /etc/slurm (warden_client_config): slurm.conf and
        friends without the secrets (the keys, slurmdbd.conf), copied as ``cp -p`` does (mode, owner, times)."""
        dst = self.s.client_config_dir
        dst.mkdir(mode=0o755, parents=True, exist_ok=True)
        for entry in sorted(os.scandir(self.s.slurm_etc), key=lambda e: e.name):
            if entry.name in lifecycle.CLIENT_CONFIG_SECRETS or not entry.is_file(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
            write_whole(dst / entry.name, Path(entry.path).read_bytes(), st.st_mode & 0o7777, (st.st_uid, st.st_gid),
                   (st.st_atime_ns, st.st_mtime_ns))  # fmt: skip

    def _copy_dir(self, src: Path, dst: Path, mode: int) -> bool:
        """Every regular file of a ConfigMap/Secret volume (symbolic links into ``..data``) to ``dst``;
        hidden entries (``..data``, ``..2024_...``) are skipped. False when ``src`` is missing."""
        if not src.is_dir():
            return False
        dst.mkdir(mode=0o755, parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            if f.name.startswith(".") or not f.is_file():
                continue
            self._install(f, dst / f.name, mode, self.s.file_owner)
        return True

    def _install(self, src: Path, dst: Path, mode: int, owner: str | None) -> None:
        """``install -m MODE [-o OWNER -g OWNER] SRC DST``."""
        ids = None
        if owner is not None:
            try:
                ids = (pwd.getpwnam(owner).pw_uid, grp.getgrnam(owner).gr_gid)
            except KeyError:
                raise FilesError(f"no user or group {owner!r} to give {dst} to") from None
        try:
            data = src.read_bytes()
        except OSError as e:
            raise FilesError(f"cannot read {src}: {e}") from e
        write_whole(dst, data, mode, ids)


class NodeFiles(SlurmFiles):
    """The worker's files: ``SlurmFiles``' plus its group's plugstack.conf and its line of gres.conf."""

    s: Settings

    def __init__(self, settings: Settings, log: Log) -> None:
        super().__init__(settings, log)
        self.s = settings

    def install(self) -> None:
        """slurm.conf and friends from the ConfigMap, the auth key, the group's plugstack.conf and this
        node's gres.conf line (warden_slurm_config, group_plugstack and node_gres of the entrypoint)."""
        super().install()
        self._group_plugstack()
        self._node_gres()

    def _group_plugstack(self) -> None:
        group = self.s.worker_group
        source = self.s.slurm_etc / f"plugstack.{group}.conf"
        if group and source.is_file():
            self._install(source, self.s.slurm_etc / "plugstack.conf", 0o644, None)
            self.log(f"plugstack: worker group {group}")

    def _node_gres(self) -> None:
        s = self.s
        spec = s.gres_spec
        if not spec or spec == "(null)":
            return
        files = lifecycle.device_files(s.dev_dir)
        line = lifecycle.gres_conf_line(s.node, spec, files, s.dev_dir)
        if line is None:
            self.log(f"gres: warning: no /dev/nvidia<N> device files for {spec} (no GPU given to this pod?)")
            return
        conf = s.slurm_etc / "gres.conf"
        # the ConfigMap's gres.conf has no node lines: the copy of it gets this node's line, once
        kept = [x for x in _read_lines(conf) if not x.startswith(f"NodeName={s.node} ")]
        if kept and not kept[-1].endswith("\n"):
            kept[-1] += "\n"
        try:
            st = conf.stat()
            mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
        except FileNotFoundError:
            mode, owner = 0o644, None
        write_whole(conf, "".join([*kept, line + "\n"]).encode(), mode, owner)
        name = spec.split(",", 1)[0].split(":")[0]
        self.log(f"gres: {s.node} has {name} {','.join(str(s.dev_dir / p.name) for p in files)}")


def write_whole(
    dst: Path, data: bytes, mode: int, owner: tuple[int, int] | None, times: tuple[int, int] | None = None
) -> None:
    """Write ``dst`` whole: a temporary file beside it, with its mode, owner and times, renamed over it."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(tmp, mode)
            if owner is not None:
                os.chown(tmp, *owner)
            if times is not None:
                os.utime(tmp, ns=times)
            os.replace(tmp, dst)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise FilesError(f"cannot write {dst}: {e}") from e


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise FilesError(f"cannot read {path}: {e}") from e

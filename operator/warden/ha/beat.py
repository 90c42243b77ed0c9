"""Who is in charge among backup controllers, decided where Slurm decides it: the heartbeat file.

slurmctld in charge rewrites ``<StateSaveLocation>/heartbeat`` every few seconds: two big-endian 64-bit
words, the time of the beat and the writer's index in slurm.conf's SlurmctldHost list (0: the primary,
pod ``<cluster>-controller-0``; 1, 2: its backups). A backup takes control only when the one before it
stopped answering AND that file stopped changing for SlurmctldTimeout seconds. So the controller in
charge is the writer of a beat at most SlurmctldTimeout old; nobody is while the last beat is older
(the one that wrote it hangs or died, and no backup took over yet).

This module is the one decider: the controller pod acts on it (``warden.ha.ctld``: a returning primary
stands by, the fence, the handover on SIGTERM, a reload reaching the one in charge) and serves its
verdict to the operator, which only relays it (``warden.ha.verdict``, ``warden.ha.incharge``).
Pure functions, standard library only (the controller image installs the package without its
dependencies).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

#: the file's name in StateSaveLocation
HEARTBEAT = "heartbeat"
#: slurm.conf's SlurmctldTimeout when it does not say (Slurm's default)
DEFAULT_TIMEOUT_S = 120
_FORMAT = ">QQ"
_SIZE = struct.calcsize(_FORMAT)
_TIMEOUT = re.compile(r"^\s*SlurmctldTimeout\s*=\s*(\d+)", re.IGNORECASE | re.MULTILINE)
_HOST = re.compile(r"^\s*SlurmctldHost\s*=\s*([^\s(#]+)", re.IGNORECASE | re.MULTILINE)
_PING = re.compile(r"^Slurmctld\([^)]*\) at (\S+) is (\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Beat:
    at: int  # the time of the beat, seconds since the epoch
    writer: int  # the writer's index in the SlurmctldHost list


def parse(data: bytes) -> Beat | None:
    """A heartbeat file's content as Slurm writes it; None for anything shorter (being written, torn)."""
    if len(data) < _SIZE:
        return None
    at, writer = struct.unpack(_FORMAT, data[:_SIZE])
    return Beat(at, writer)


def encode(beat: Beat) -> bytes:
    return struct.pack(_FORMAT, beat.at, beat.writer)


def read(state: Path) -> Beat | None:
    """The heartbeat in StateSaveLocation ``state``; None when there is none (yet) or it cannot be read."""
    try:
        return parse((state / HEARTBEAT).read_bytes())
    except OSError:
        return None


def dated_back(writer: int) -> bytes:
    """The beat a backup leaves when it stopped in charge: dated 1970, so that a primary standing by
    takes control at once rather than after SlurmctldTimeout (the file stays: a standby backup starts
    answering only once it exists)."""
    return encode(Beat(1, writer))


def ctld_timeout(slurm_conf: str) -> int:
    """slurm.conf's SlurmctldTimeout (the last line that sets it), Slurm's default when none does."""
    found = _TIMEOUT.findall(slurm_conf)
    return int(found[-1]) if found else DEFAULT_TIMEOUT_S


def controllers(slurm_conf: str) -> list[str]:
    """slurm.conf's SlurmctldHost names, in order: the index of a beat's writer is its place here."""
    return _HOST.findall(slurm_conf)


def in_charge(beat: Beat | None, now: float, timeout_s: int) -> int | None:
    """The index of the controller in charge: the beat's writer while the beat is fresh; None when there
    is no beat or it is older than SlurmctldTimeout."""
    if beat is None or now - beat.at > timeout_s:
        return None
    return beat.writer


def index_of(hostname: str) -> int | None:
    """A controller pod's index: the StatefulSet ordinal ending its (short) hostname."""
    tail = hostname.split(".", 1)[0].rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


@dataclass
class Fence:
    """Watches the heartbeat while this pod's slurmctld runs: once that slurmctld was in charge (a beat of
    this index dated after it started, not one an earlier run of this pod left) and the beat then names
    another writer while it still runs, it lost control and must die before it writes the queue it holds
    over the new one's (SIGKILL: it writes nothing)."""

    me: int
    started: int
    mine: bool = False

    def lost_control(self, beat: Beat | None) -> bool:
        if beat is None:
            return False
        if beat.writer == self.me:
            if beat.at >= self.started:
                self.mine = True
            return False
        return self.mine


def takeover_target(ping: str, me: int) -> int | None:
    """From ``scontrol ping``'s answer: the first controller after this one (a higher index) that is UP,
    to hand control to on SIGTERM; None when none answers."""
    for host, state in _PING.findall(ping):
        idx = index_of(host)
        if state == "UP" and idx is not None and idx > me:
            return idx
    return None


def self_conf(slurm_conf: str, me: str) -> str:
    """slurm.conf naming only this pod's slurmctld, by loopback, for the probe (it asks this slurmctld,
    not whichever answers first; the pod's Service address would need the pod to reach itself through
    it). Raises ValueError when ``me`` is not in the SlurmctldHost list."""
    if me not in controllers(slurm_conf):
        raise ValueError(f"{me} is not in slurm.conf's SlurmctldHost list")
    kept = [line for line in slurm_conf.splitlines() if not re.match(r"\s*SlurmctldHost\s*=", line, re.IGNORECASE)]
    return "\n".join([*kept, f"SlurmctldHost={me}(localhost)"]) + "\n"

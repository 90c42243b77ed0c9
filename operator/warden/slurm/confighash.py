"""Which rendering of a cluster's Slurm files a daemon runs (standard library only: the worker image uses it).

The operator stamps slurm.conf's first line with a hash of every file of the ``<cluster>-slurm-config``
ConfigMap (``stamped``). A worker's supervisor, once its slurmd executed itself again after the files were
installed (its ``SlurmdStartTime`` moved past their installation), records the stamp it runs in its Slurm
node's ``Extra`` field (``extra``); the operator's Slurm sync reads every node's Extra and compares it with
the ConfigMap's stamp (``warden.nodesync``): a slurmd that runs another configuration than the one rendered
is said so in status, never silently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

#: the first line of slurm.conf, then the hash
PREFIX = "# warden-config-hash: "
#: the node's Extra as the supervisor writes it: this, then the hash
EXTRA_PREFIX = "warden-config="
SLURM_CONF = "slurm.conf"


def compute(files: Mapping[str, str]) -> str:
    """12 hex digits of SHA-256 over every file's name and text (slurm.conf without its stamp)."""
    digest = hashlib.sha256()
    for name, text in sorted(files.items()):
        if name == SLURM_CONF:
            text = unstamped(text)
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()[:12]


def unstamped(text: str) -> str:
    first, _, rest = text.partition("\n")
    return rest if first.startswith(PREFIX) else text


def stamped(files: Mapping[str, str]) -> dict[str, str]:
    """``files`` with slurm.conf's first line naming their hash."""
    out = dict(files)
    out[SLURM_CONF] = f"{PREFIX}{compute(files)}\n{unstamped(files[SLURM_CONF])}"
    return out


def of_text(slurm_conf: str) -> str:
    """The stamp of a slurm.conf; "" when it has none (written by an operator before the stamp)."""
    first = slurm_conf.partition("\n")[0]
    return first[len(PREFIX) :].strip() if first.startswith(PREFIX) else ""


def extra(stamp: str) -> str:
    return f"{EXTRA_PREFIX}{stamp}"


def from_extra(text: str) -> str:
    """The stamp a node's Extra records; "" when none (a slurmd whose supervisor has not recorded one yet)."""
    for word in text.replace(",", " ").split():
        if word.startswith(EXTRA_PREFIX):
            return word[len(EXTRA_PREFIX) :]
    return ""

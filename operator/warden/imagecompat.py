"""What a cluster's images can do: a cluster held on an older release's images gets only the files and
pod fields those images understand.

Upgrading the operator keeps a cluster on the images it was made with (``spec.images.version``, pinned
from ``status.imagesVersion`` by ``reconcile.pin_images``) and replaces no pod. The renderers then still
run this release's code, so what needs this release's images is rendered only where the cluster's images
are this release's or newer, or a tag that names no release (a build of one's own): the SPANK plugin of an
older release refuses arguments it does not know (and with it every job step), an older login image has no
per-user session limits, an older controller image no config check. Moving ``spec.images.version`` to this
release turns them on, as every other change of the images does (workers drained and replaced one idle
node at a time).
"""

from __future__ import annotations

import re

#: the first release of Warden's images with each job's own /tmp and /dev/shm and the process limit
#: (the plugin's jobtmpfs= and nproc=), login sessions' per-user limits, the /proc switch,
#: Slurm's check of a configuration change (warden-config-check in the controller image) and the
#: workers' sshd (spec.workerSsh)
LIMITS_RELEASE = (0, 2, 0)

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


def release_of(version: str | None) -> tuple[int, int, int] | None:
    """The release a tag of Warden's images names (``0.1.0``, ``v0.2.0-rc1``); None for a tag that names
    none (``dev``, a commit): taken as this release's."""
    match = _RELEASE.match(version or "")
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def has_limits(version: str | None) -> bool:
    """Whether images of ``version`` carry LIMITS_RELEASE's features. A pre-release of that release
    (``0.2.0-rc1``) counts as it."""
    release = release_of(version)
    return release is None or release >= LIMITS_RELEASE

"""``python -m warden.node.dirhash DIR...``: the hash of the regular files in the directories, as every Slurm
image's follow loop takes it every few seconds (images/slurm-base/warden-lib.sh: warden_dirs_hash) and the
worker's supervisor does in-process (``warden.node.lifecycle.dirs_hash`` is this one). A module of its own,
importing only what the hash needs: the loop starts it anew at each look, so its start is its cost."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path


def dirs_hash(dirs: Iterable[Path]) -> str:
    """A hash of the regular files in ``dirs`` (ConfigMap and Secret volumes: the kubelet swaps their
    ``..data`` link atomically, so one read sees one version); ``..``-entries are skipped."""
    h = hashlib.sha256()
    for d in dirs:
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir(), key=lambda p: p.name):
            if p.name.startswith("..") or not p.is_file():
                continue
            try:
                h.update(p.read_bytes())
            except OSError:
                continue
    return h.hexdigest()


if __name__ == "__main__":
    print(dirs_hash(Path(d) for d in sys.argv[1:]))

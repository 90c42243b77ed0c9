"""The jail's Slurm client tools upgraded in place (issue 28): the populate-jail Job of a newer Slurm
series, run over a jail populated from an older one, installs only Slurm's packages into it, with
the jail's own dpkg; users' accounts, homes and the software they installed stay. An image with an
older Slurm than the jail's is refused. Needs both series' images (`make images images-24.11`)."""

from __future__ import annotations

import uuid

import pytest

from warden_dev.dockercluster import DockerCluster, docker

SLURM_CLIENT = "chroot /v dpkg-query -W -f '${Version}' slurm-client"


def _series_image(cluster: DockerCluster, series: str) -> str:
    image = cluster.image("populate-jail") + ("" if series == "26.05" else f"-slurm{series}")
    if docker("image", "inspect", image, check=False).returncode != 0:
        pytest.fail(f"{image} is missing: build it with `make images-{series}` (make dataplane/e2e build both series)")
    return image


def test_a_jails_slurm_is_upgraded_in_place_and_never_downgraded(cluster: DockerCluster) -> None:
    old, new = _series_image(cluster, "24.11"), _series_image(cluster, "26.05")
    vol = f"{cluster.prefix}-slurmup-{uuid.uuid4().hex[:6]}"
    cluster.create_volume(vol)

    cluster.run_populate(vol, image=old)
    assert cluster.volume_sh(vol, SLURM_CLIENT).out.startswith("24.11.5-"), "the jail did not start on 24.11"
    # what users made in the jail before the upgrade: an account, a home, software of their own
    cluster.volume_sh(
        vol,
        "echo 'dana:x:10003:10003::/home/dana:/bin/bash' >> /v/etc/passwd && mkdir -p /v/home/dana "
        "&& echo results > /v/home/dana/run.log && mkdir -p /v/opt/tool && echo v1 > /v/opt/tool/VERSION",
    )

    dev_before = cluster.volume_sh(vol, "ls -lA /v/dev").out

    up = cluster.run_populate(vol, image=new)
    assert "upgrading the jail's Slurm in place: 24.11.5-" in up.logs and "-> 26.05.5-" in up.logs, up.logs
    after = cluster.volume_sh(
        vol,
        f"{SLURM_CLIENT}; echo; grep -c '^dana:' /v/etc/passwd; cat /v/home/dana/run.log /v/opt/tool/VERSION; "
        "grep '^slurm=' /v/.warden-populated; chroot /v dpkg --audit && echo dpkg-consistent; "
        "chroot /v ldd /usr/bin/srun /usr/bin/sbatch | grep -c 'not found'; "
        "cmp -s /v/usr/lib/warden/spank_jail.so /jail-rootfs/usr/lib/warden/spank_jail.so && echo plugin-of-26.05",
    ).out.split("\n")
    assert after[0].startswith("26.05.5-"), after  # the jail's srun, sbatch, squeue ... are 26.05's
    assert after[1:4] == ["1", "results", "v1"], after  # dana's account, home and software kept
    assert after[4].startswith("slurm=26.05.5-"), after
    assert "dpkg-consistent" in after, after  # every package configured, none half-installed
    assert after[after.index("dpkg-consistent") + 1] == "0", after  # the clients find every library
    assert "plugin-of-26.05" in after, after  # the SPANK plugin the clients load is built for 26.05 too
    # a /dev/null made for the maintainer scripts is gone again
    assert cluster.volume_sh(vol, "ls -lA /v/dev").out == dev_before

    again = cluster.run_populate(vol, image=new)
    assert "already populated" in again.logs, again.logs

    down = cluster.run_populate(vol, image=old, check=False)
    assert down.rc == 1, down.logs
    assert "Slurm cannot be downgraded" in down.logs and "26.05.5-" in down.logs, down.logs
    assert cluster.volume_sh(vol, SLURM_CLIENT).out.startswith("26.05.5-"), "the refused downgrade touched the jail"

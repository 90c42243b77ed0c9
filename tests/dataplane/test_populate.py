"""populate-jail (the rendered Job's pod) against a fresh volume: a second run returns at once
without copying; `overwrite` copies again, once, removes what the image does not have, keeps users'
homes, /root and accounts; a copy started again after an interrupted one keeps them too."""

from __future__ import annotations

import uuid

from warden_dev.dockercluster import DockerCluster

RELEASE = "etc/warden-jail-release"
DOC = "etc/debian_version"


def test_populate_once_then_sentinel_then_overwrite(cluster: DockerCluster) -> None:
    vol = f"{cluster.prefix}-populate-{uuid.uuid4().hex[:6]}"
    cluster.create_volume(vol)

    first = cluster.run_populate(vol)
    assert "populating" in first.logs
    out = cluster.volume_sh(vol, f"stat -c '%u %a' /v; cat /v/.warden-populated; cat /v/{RELEASE}").out
    assert out.startswith("0 755\n"), out  # sshd's ChrootDirectory needs it
    assert "WARDEN_JAIL_VERSION=" in out and "populated_at=" in out

    # users' state and local damage, made between the runs
    cluster.volume_sh(
        vol,
        f"mkdir -p /v/home/bob && echo data > /v/home/bob/data && echo 'bob:x:10001:10001::/home/bob:/bin/bash' "
        f">> /v/etc/passwd && echo mine > /v/root/notes && echo damaged > /v/{DOC} "
        "&& echo stray > /v/usr/local/bin/stray",
    )

    second = cluster.run_populate(vol)
    assert "already populated" in second.logs, second.logs
    print(f"populate: first run {first.seconds:.1f} s, the second (sentinel found) {second.seconds:.1f} s")
    assert cluster.volume_sh(vol, f"cat /v/{DOC}").out == "damaged\n", "the second run copied"

    again = cluster.run_populate(vol, overwrite=True)
    assert "overwrite" in again.logs, again.logs
    after = cluster.volume_sh(
        vol,
        f"cat /v/{DOC}; cat /v/home/bob/data; grep -c '^bob:' /v/etc/passwd; cat /v/root/notes; "
        "test -e /v/usr/local/bin/stray && echo stray-left; test -f /v/.warden-populated && echo sentinel",
    ).out.split("\n")
    assert after[0] != "damaged" and after[0][:2].isdigit(), after  # the image's debian_version again
    assert after[1:4] == ["data", "1", "mine"], after  # bob's home and account, root's files kept
    assert "stray-left" not in after
    assert "sentinel" in after

    # the same request again (the Job deleted and made again, the operator restarted): nothing copied
    cluster.volume_sh(vol, f"echo damaged-later > /v/{DOC}")
    repeat = cluster.run_populate(vol, overwrite=True)
    assert "already overwritten" in repeat.logs, repeat.logs
    assert cluster.volume_sh(vol, f"cat /v/{DOC}").out == "damaged-later\n", "the same overwrite ran twice"

    # a copy interrupted before its sentinel was written starts again and still keeps the accounts
    cluster.volume_sh(
        vol, "rm /v/.warden-populated && echo 'carol:x:10002:10002::/home/carol:/bin/bash' >> /v/etc/passwd"
    )
    cluster.run_populate(vol)
    assert cluster.volume_sh(vol, "grep -c '^carol:' /v/etc/passwd").out == "1\n"

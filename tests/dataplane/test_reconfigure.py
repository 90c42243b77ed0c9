"""A Slurm config change reaches slurmctld, every slurmd and the login node in place: the ConfigMap's
files change in every pod (as the kubelet shows them), and slurmctld, slurmd and the login node's clients
take them without any daemon being replaced; a job running across the change finishes.
"""

from __future__ import annotations

import re
import time

from tests.support.jailuser import JailUser
from warden.slurm import confighash
from warden_dev.dockercluster import DockerCluster, wait_for


def _config_value(cluster: DockerCluster, pod: str, key: str) -> str | None:
    out = cluster.exec(pod, "scontrol show config", check=False).out
    m = re.search(rf"^{key}\s*=\s*(.*?)\s*$", out, re.M)
    return m.group(1) if m else None


def _daemon_pid(cluster: DockerCluster, pod: str, daemon: str) -> str:
    """The daemon's PID (by its command line: a reconfigured daemon re-executes itself in place, under
    the same PID, as /proc/self/exe, so its process name is no longer the daemon's)."""
    return cluster.exec(pod, f"pgrep -of '^{daemon} '").out.strip()


def test_a_config_change_is_taken_live_by_every_daemon(cluster: DockerCluster, alice: JailUser) -> None:
    controller = cluster.names.controller_pod
    worker = cluster.worker_pods("cpu")[0]
    started = {p: cluster.inspect(cluster.container(p))["State"]["StartedAt"] for p in cluster.pods}
    ctld_pid = _daemon_pid(cluster, controller, "slurmctld")
    slurmd_pid = _daemon_pid(cluster, worker, "slurmd")
    job = alice.ssh(f"cd && sbatch -p cpu -w {worker} --mem=50M --parsable --wrap 'sleep 20; echo survived'").strip()

    files = dict(cluster.manifest("ConfigMap", cluster.names.slurm_config)["data"])
    before = files["slurm.conf"]
    assert "MessageTimeout=" not in files["slurm.conf"]
    files["slurm.conf"] += "MessageTimeout=17\n"
    files = confighash.stamped(files)  # as the operator renders it
    changed_at = time.monotonic()
    assert controller in cluster.update_configmap(cluster.names.slurm_config, files)

    wait_for("slurmctld to show MessageTimeout=17",
             lambda: _config_value(cluster, controller, "MessageTimeout") == "17 sec", 60, interval=0.5)  # fmt: skip
    took = time.monotonic() - changed_at
    # the login node's clients and the worker's slurmd read their own copies of the files
    wait_for("the login pod's slurm.conf to have the line",
             lambda: "MessageTimeout=17" in cluster.exec(f"{cluster.names.login}-0", "cat /etc/slurm/slurm.conf").out,
             60, interval=1)  # fmt: skip
    wait_for(
        "slurmd to run with the new config",
        lambda: "MessageTimeout=17" in cluster.exec(worker, "cat /etc/slurm/slurm.conf").out,
        60,
        interval=1,
    )
    print(f"\nCR-free config change to slurmctld's running config: {took:.1f}s")

    # nothing was replaced: same containers, same daemons
    assert {p: cluster.inspect(cluster.container(p))["State"]["StartedAt"] for p in cluster.pods} == started
    assert _daemon_pid(cluster, controller, "slurmctld") == ctld_pid
    assert _daemon_pid(cluster, worker, "slurmd") == slurmd_pid
    # what each slurmd runs: the stamp of the new files, recorded once slurmd started again with them
    stamp = confighash.of_text(cluster.exec(worker, "cat /etc/slurm/slurm.conf").out)
    assert stamp and stamp != confighash.of_text(before)

    # the controller read back that slurmctld loaded the files (its "Configuration data as of" moved)
    wait_for("the controller saying slurmctld runs the new files",
             lambda: f"runs {stamp} since" in cluster.logs(controller, tail=400), 30, interval=1)  # fmt: skip

    def recorded(pod: str) -> bool:
        return f"Extra=warden-config={stamp}" in cluster.exec(controller, f"scontrol show node {pod}").out

    for pod in cluster.worker_pods("cpu"):
        wait_for(f"{pod}'s Extra naming {stamp}", lambda pod=pod: recorded(pod), 90, interval=1)  # type: ignore[misc]

    # the job that ran across the change finishes
    wait_for(f"job {job} to end",
             lambda: "survived" in alice.ssh(f"cat ~/slurm-{job}.out 2>/dev/null || true"), 90, interval=2)  # fmt: skip
    assert alice.ssh(f"srun -p cpu -w {worker} --mem=50M hostname").strip() == worker


#: in the worker container: SIGHUP to slurmd (a reconfigure begins, as slurmctld pushes one to every slurmd),
#: then, while slurmd executes itself anew, the supervisor's own reload as it sends it
_SECOND_RELOAD = r"""
import os, signal, subprocess, time
from warden.node.supervisor import Children
pid = int(subprocess.run(["pgrep", "-of", "^slurmd "], capture_output=True, text=True).stdout)
os.kill(pid, signal.SIGHUP)
# slurmd executes itself anew: until its new image has set its handlers it catches no SIGHUP
start, window = time.monotonic(), False
while time.monotonic() - start < 5:
    if not Children().catches(pid, signal.SIGHUP):
        window = True
        break
waited = time.monotonic()
while not Children().catches(pid, signal.SIGHUP):
    time.sleep(0.001)
os.kill(pid, signal.SIGHUP)  # the supervisor's, once slurmd catches it
print(pid, window, round((time.monotonic() - waited) * 1000))
"""


def test_a_second_reload_waits_for_slurmd_to_catch_sighup_again(cluster: DockerCluster) -> None:
    """Two reconfigures of a slurmd a few ms apart (slurmctld's, pushed to every slurmd, and the worker's own
    SIGHUP for its new files). A slurmd executing itself anew catches no SIGHUP until its new image set its
    handlers (SigCgt), and a SIGHUP then ends it (status 129, with the container: two SIGHUPs 5 ms apart do
    it). The supervisor's SIGHUP waits for the handler, and slurmd, reconfigured twice, runs on under its PID."""
    worker = cluster.worker_pods("cpu")[-1]
    started = cluster.inspect(cluster.container(worker))["State"]["StartedAt"]
    out = cluster.exec(worker, f"/opt/warden/bin/python -I - <<'EOF'\n{_SECOND_RELOAD}\nEOF").out.split()
    pid, window, waited_ms = out[0], out[1] == "True", int(out[2])
    assert window, "slurmd never stopped catching SIGHUP: no reconfigure seen in progress"
    wait_for(f"{worker}'s slurmd responding", lambda: cluster.exec(worker, "scontrol show slurmd", check=False).rc == 0,
             30, interval=0.5)  # fmt: skip
    assert _daemon_pid(cluster, worker, "slurmd") == pid
    assert cluster.inspect(cluster.container(worker))["State"]["StartedAt"] == started, "the worker restarted"
    print(f"\nthe second SIGHUP waited {waited_ms} ms for slurmd to catch it again")

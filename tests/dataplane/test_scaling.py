"""Worker groups scale as their WorkerSets make and delete pods: a new pod joins Slurm by itself (dynamic node,
no slurm.conf change), and a terminated pod leaves — drained, then deleted from slurmctld — instead
of lingering as a DOWN node."""

from __future__ import annotations

from warden_dev.dockercluster import DockerCluster, docker, wait_for


def sinfo_state(cluster: DockerCluster, node: str) -> str:
    r = cluster.exec(cluster.names.controller_pod, f"sinfo -h -N -n {node} -o %T", check=False)
    return r.out.strip()


def test_new_worker_pod_joins_and_terminated_one_leaves(cluster: DockerCluster) -> None:
    sts = cluster.manifest("WorkerSet", cluster.names.worker("cpu"))
    ordinal = sts["spec"]["replicas"]  # the pod a scale-up by one would create
    node = f"{sts['metadata']['name']}-{ordinal}"
    pod = cluster.pod_of(node, sts["spec"]["template"], sts["spec"]["template"]["spec"]["subdomain"], set())
    docker("run", "-d", *pod.args, pod.image, timeout=120)
    try:
        wait_for(f"{node} to register idle", lambda: sinfo_state(cluster, node) == "idle", 90)
        features = cluster.exec(cluster.names.controller_pod, f"sinfo -h -N -n {node} -o %f").out.strip()
        assert "warden-group-cpu" in features.split(","), "the node joined its group's NodeSet"
        ran = cluster.exec(cluster.names.controller_pod, f"srun -w {node} hostname").out.strip()
        assert ran == node

        # Scale-in: Kubernetes sends SIGTERM and waits terminationGracePeriodSeconds.
        grace = str(sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
        docker("stop", "-t", grace, pod.container, timeout=int(grace) + 30)
        logs = docker("logs", pod.container, check=False)
        assert "leaving: draining" in logs.stdout + logs.stderr
        try:
            wait_for(f"{node} to leave Slurm", lambda: sinfo_state(cluster, node) == "", 30)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}") from None
        nodes = cluster.exec(cluster.names.controller_pod, "scontrol show nodes --oneliner").out
        assert f"NodeName={node} " not in nodes
    finally:
        docker("rm", "-f", pod.container, check=False)

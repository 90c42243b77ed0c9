"""Containers in jobs (docs/containers.md): what a user of pyxis and enroot types, on a cluster with
spec.containers on, against a real registry on the cluster's network (tests/support/registry.py): the
image's OS on every node of a step, batch jobs in a container writing into the jail, jail paths mounted,
named containers reused across steps, the seccomp filter inside, and bad images, credentials and
references failing the job with pyxis' message while the node takes the next job."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import pytest

from tests.support import registry as reg
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, wait_for

IMAGE_OS = 'PRETTY_NAME="Warden test image 1.0"'


@pytest.fixture(scope="module")
def registry(cluster: DockerCluster) -> Iterator[reg.Registry]:
    with reg.running(cluster) as r:
        yield r


@pytest.fixture(scope="module")
def bob(cluster: DockerCluster, registry: reg.Registry) -> JailUser:
    """A user of his own for containers: his enroot credentials and named containers are his alone."""
    return JailUser.added_by_root(cluster, "bob")


def _srun(user: JailUser, args: str, command: str, check: bool = True) -> str:
    return user.ssh(f"srun {args} {command}", check=check, timeout=300)


def test_a_step_on_two_nodes_runs_in_the_image(cluster: DockerCluster, registry: reg.Registry, bob: JailUser) -> None:
    """`srun -N2 --container-image=...` from a directory in bob's home: both tasks see the image's
    /etc/os-release and its marker file, as bob, in that directory (his home from the jail), with the
    job's own /tmp (the group's per-job node-local mount: the plugin's tmpfs, named after the job) and
    Slurm's environment; steps without the option still run in the jail."""
    script = "echo host=$(hostname) user=$(id -un) cwd=$(pwd) job=${SLURM_JOB_ID:-none}; " \
             "grep PRETTY_NAME /etc/os-release; cat /etc/warden-test-image; " \
             "test -f /etc/warden-jail-release && echo in-jail; cat ~/where; " \
             "grep -q \"^warden-job-$SLURM_JOB_ID /tmp tmpfs \" /proc/self/mounts && echo node-local-tmp"  # fmt: skip
    bob.ssh("mkdir -p ~/work && echo bobs-home > ~/where")
    step = f"srun -p cpu -N2 --container-image={registry.reference()} bash -c {shlex.quote(script)}"
    out = bob.ssh(f"cd ~/work && {step}", timeout=300)
    tasks = re.findall(r"^host=(\S+) user=bob cwd=/home/bob/work job=(\d+)$", out, re.M)
    assert {host for host, _ in tasks} == set(cluster.worker_pods("cpu")), out
    assert out.count(IMAGE_OS) == 2 and out.count("made for Warden's container tests") == 2, out
    assert out.count("bobs-home") == 2 and out.count("node-local-tmp") == 2 and "in-jail" not in out, out
    # the same user, the same nodes, no option: the jail, as before
    jail = _srun(bob, "-p cpu -N2", "bash -c 'test -f /etc/warden-jail-release && echo in-jail'")
    assert jail.split() == ["in-jail", "in-jail"], jail


def test_a_batch_job_in_a_container_writes_into_the_jail(cluster: DockerCluster, registry: reg.Registry,
                                                       bob: JailUser) -> None:  # fmt: skip
    """`#SBATCH --container-image`: the batch script runs in the image; its output file and what it
    writes under the home land in the jail, owned by bob. (In a `#SBATCH` line sbatch reads `#` as a
    comment's start: the reference takes enroot's `REGISTRY/IMAGE` form.)"""
    script = f"""#!/bin/bash
#SBATCH -p cpu -N1 -o {{out}}
#SBATCH --container-image={registry.reference(sep="/")}
grep PRETTY_NAME /etc/os-release
cat /etc/warden-test-image > ~/from-batch.txt
"""
    bob.ssh(
        "rm -f ~/batch-ctr.out ~/from-batch.txt; cat > ~/ctr.sbatch", input=script.replace("{out}", "batch-ctr.out")
    )
    job = bob.ssh("cd ~ && sbatch -W --parsable ctr.sbatch; echo rc=$?", timeout=300)
    output = bob.ssh("cat ~/batch-ctr.out", check=False)
    assert job.split()[-1] == "rc=0", f"{job}\n{output}"
    assert IMAGE_OS in output, f"the batch script did not run in the image:\n{output}"
    assert bob.ssh("cat ~/from-batch.txt").strip() == "made for Warden's container tests"
    assert bob.ssh("stat -c %U ~/batch-ctr.out ~/from-batch.txt").split() == ["bob", "bob"]


def test_a_plain_batch_job_from_home_and_its_sruns_see_no_container_setting(bob: JailUser) -> None:
    """The default container working directory (a step started under the home) is pyxis' alone: a batch
    script without a container, submitted from the home on a containers-on group, and the `srun` in it
    see no PYXIS_ variable, and the job's output holds only what the script printed (no pyxis warning
    from the nested srun)."""
    script = "#!/bin/bash\n#SBATCH -p cpu -N1 -o plain-%j.out\n" \
             "echo batch=${PYXIS_CONTAINER_WORKDIR:-unset}\n" \
             "srun -N1 sh -c 'echo step=${PYXIS_CONTAINER_WORKDIR:-unset} cwd=$(pwd)'\n"  # fmt: skip
    bob.ssh("mkdir -p ~/plain && cat > ~/plain/job.sbatch", input=script)
    job = bob.ssh("cd ~/plain && sbatch -W --parsable job.sbatch", timeout=300).strip().split(";")[0]
    assert bob.ssh(f"cat ~/plain/plain-{job}.out").splitlines() == ["batch=unset", "step=unset cwd=/home/bob/plain"]


def test_container_mounts_bind_a_jail_path(registry: reg.Registry, bob: JailUser) -> None:
    bob.ssh("mkdir -p ~/dataset && echo row-1 > ~/dataset/part-0")
    out = _srun(bob, f"-p cpu -N1 --container-image={registry.reference()} --container-mounts=$HOME/dataset:/data:ro",
                "bash -c 'cat /data/part-0; touch /data/x 2>&1 || echo read-only'")  # fmt: skip
    assert "row-1" in out and "read-only" in out, out


def test_a_named_container_is_reused_by_the_jobs_next_step(registry: reg.Registry, bob: JailUser) -> None:
    """--container-name: the second step of the job finds what the first wrote into the container's
    (writable) root file system; no image named the second time."""
    steps = (
        f"srun -N1 --container-name=work --container-image={registry.reference()} --container-writable "
        "bash -c 'echo step-one > /kept'; "
        "srun -N1 --container-name=work bash -c 'cat /kept; grep PRETTY_NAME /etc/os-release'"
    )
    out = bob.ssh(f"salloc -p cpu -N1 bash -c {shlex.quote(steps)}", timeout=300)
    assert "step-one" in out and IMAGE_OS in out, out


def test_a_jobs_containers_leave_the_nodes_store_with_the_job(cluster: DockerCluster, registry: reg.Registry) -> None:
    """pyxis' job epilog lists the user's containers on each node of the job (`enroot list`, as the user,
    in the worker container) and removes the job's. Where the user has none, the worker's enroot answers
    the list at once (images/worker/enroot-list); where the job made one, enroot's own list finds it and
    it goes. Either way the node takes the next job."""
    erin = JailUser.added_by_root(cluster, "erin")
    node = cluster.worker_pods("cpu")[0]
    ctl = cluster.names.controller_pod
    data = "/var/lib/warden/containers/$(id -u erin)/data"
    _srun(erin, f"-p cpu -N1 -w {node}", "true")  # no container of erin's on the node yet
    steps = f"srun -N1 --container-name=keep --container-image={registry.reference()} true && srun -N1 ls {data}"
    during = erin.ssh(f"salloc -p cpu -N1 -w {node} bash -c {shlex.quote(steps)}", timeout=300)
    assert re.search(r"^pyxis_\d+_keep$", during, re.M), during
    wait_for(
        f"the job's container gone from erin's store on {node}",
        lambda: cluster.exec(node, f"ls -A {data}").out.strip() == "",
        timeout=60,
    )
    # the node takes erin's next job (not "idle": another test's job may hold CPUs of it, as it did under
    # CI's load); if it cannot, the node's state, Slurm's reason and its jobs say why
    after = erin.ssh(f"srun -p cpu -N1 -w {node} hostname", check=False, timeout=300).strip()
    assert after == node, (after, cluster.exec(ctl, f"sinfo -h -n {node} -o '%t|%E'; squeue -h -w {node}").out)


def test_remap_root_is_root_in_the_container_and_bob_in_the_jail(registry: reg.Registry, bob: JailUser) -> None:
    """--container-remap-root: uid 0 inside the container (a user namespace maps it), yet what the step
    writes into the home belongs to bob in the jail, and the step is as confined as any other."""
    bob.ssh("rm -f ~/remapped.txt")
    script = "id -u; echo made-as-root > ~/remapped.txt; unshare -m true 2>&1; echo mntns=$?"
    out = _srun(bob, f"-p cpu -N1 --container-image={registry.reference()} --container-remap-root",
                f"bash -c {shlex.quote(script)}")  # fmt: skip
    assert out.splitlines()[0] == "0" and re.search(r"^mntns=[1-9]", out, re.M), out
    assert bob.ssh("stat -c %U ~/remapped.txt; cat ~/remapped.txt").split() == ["bob", "made-as-root"]


def test_inside_a_container_users_still_cannot_make_namespaces_or_mount(registry: reg.Registry,
                                                                       bob: JailUser) -> None:  # fmt: skip
    script = (
        "unshare -U true 2>&1; echo userns=$?; unshare -m true 2>&1; echo mntns=$?; "
        "mount -t tmpfs none /tmp 2>&1; echo mount=$?; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status"
    )
    out = _srun(bob, f"-p cpu -N1 --container-image={registry.reference()}", f"bash -c {shlex.quote(script)}")
    codes = dict(re.findall(r"^(userns|mntns|mount)=(\d+)$", out, re.M))
    assert set(codes) == {"userns", "mntns", "mount"} and "0" not in codes.values(), out
    assert "Operation not permitted" in out and re.search(r"^Seccomp:\s+2$", out, re.M), out


def test_enroot_import_on_the_login_node_makes_an_image_file_steps_run(registry: reg.Registry, bob: JailUser) -> None:
    """On the login node (chrooted into the jail) bob imports the image himself: a squashfs file in his
    home, which a step then runs on a worker without asking the registry again."""
    sqsh = "warden-test+image+1.0.sqsh"
    out = bob.ssh(f"cd ~ && rm -f {sqsh} && enroot import docker://{registry.reference()} 2>&1 | tail -2; "
                  f"stat -c '%U %s' {sqsh}", timeout=300)  # fmt: skip
    owner_size = out.splitlines()[-1].split()
    assert owner_size[0] == "bob" and int(owner_size[1]) > 1_000_000, out
    run = _srun(bob, f"-p cpu -N1 --container-image=$HOME/{sqsh}", "grep PRETTY_NAME /etc/os-release")
    assert IMAGE_OS in run, run


def _fails_with_pyxis_message(user: JailUser, image: str, node: str) -> str:
    out = user.ssh(f"srun -p cpu -N1 -w {node} --container-image={shlex.quote(image)} true 2>&1; echo rc=$?",
                   timeout=300)  # fmt: skip
    assert re.search(r"^rc=[1-9]\d*$", out, re.M), out
    assert "pyxis:" in out, out
    return out


def test_bad_images_credentials_and_references_fail_the_job_not_the_node(
    cluster: DockerCluster, registry: reg.Registry, bob: JailUser
) -> None:
    node = cluster.worker_pods("cpu")[0]
    out = _fails_with_pyxis_message(bob, registry.reference(image="warden-test/no-such-image"), node)
    assert "failed to import docker image" in out, out
    out = _fails_with_pyxis_message(bob, "registry:5000#Not A Reference!", node)
    assert "Invalid image reference" in out, out
    # the private registry: no credentials, then wrong ones, refused; bob's right ones in his home work
    _fails_with_pyxis_message(bob, registry.reference(private=True), node)
    creds = (
        "mkdir -p ~/.config/enroot && chmod 700 ~/.config/enroot && "
        "printf 'machine private-registry login %s password %s\\n' {} {} > ~/.config/enroot/.credentials"
    )
    bob.ssh(creds.format(reg.USER, "wrong-password"))
    out = _fails_with_pyxis_message(bob, registry.reference(private=True), node)
    bob.ssh(creds.format(reg.USER, reg.PASSWORD))
    ok = _srun(bob, f"-p cpu -N1 -w {node} --container-image={registry.reference(private=True)}",
               "grep PRETTY_NAME /etc/os-release")  # fmt: skip
    assert IMAGE_OS in ok, ok
    # the node was never drained and takes the next job
    reasons = cluster.exec(cluster.names.controller_pod, f"sinfo -R -h -N -n {node} -o '%N %E'").out.strip()
    assert reasons == "", reasons
    assert _srun(bob, f"-p cpu -N1 -w {node}", "hostname").strip() == node


def test_a_group_with_containers_off_refuses_a_container_step(registry: reg.Registry, bob: JailUser) -> None:
    """Group `plain` has `containers: false`: a step there that asks for an image fails, saying why,
    instead of running in the jail as if the option had not been given."""
    out = bob.ssh(f"srun -p plain -N1 --container-image={registry.reference()} cat /etc/os-release 2>&1; echo rc=$?",
                  timeout=300)  # fmt: skip
    assert re.search(r"^rc=[1-9]\d*$", out, re.M), out
    assert "warden: containers are off on this worker group" in out and "Warden test image" not in out, out
    assert "Debian" in _srun(bob, "-p plain -N1", "cat /etc/os-release")


def test_images_live_in_the_node_local_store_not_the_jail(cluster: DockerCluster, registry: reg.Registry) -> None:
    """What enroot keeps for a step (the image, the container; the layers only while importing) is under
    the worker's store, the user's directory there theirs and private, the image imported once per node;
    nothing of it reaches the shared jail, nor their home."""
    dave = JailUser.added_by_root(cluster, "dave")
    node = cluster.worker_pods("cpu")[0]
    _srun(dave, f"-p cpu -N1 -w {node} --container-image={registry.reference()}", "true")
    mine = "/var/lib/warden/containers/$(id -u dave)"
    store = cluster.exec(node, f"stat -c '%U %a' /var/lib/warden/containers {mine} && find {mine}/cache -type f").out
    lines = store.splitlines()
    assert lines[:2] == ["root 755", "dave 700"], store
    # the layers enroot downloaded go once the image's squashfs file holds them (docs/containers.md)
    assert len(lines) == 2, f"layers left in dave's store after the import:\n{store}"
    # imported once: the next step on the node starts from the same image file (same inode), not a new import
    images = f"{mine}/images"
    first = cluster.exec(node, f"stat -c '%i %n' {images}/*.sqsh").out.split()
    _srun(dave, f"-p cpu -N1 -w {node} --container-image={registry.reference()}", "true")
    assert cluster.exec(node, f"stat -c '%i %n' {images}/*.sqsh").out.split() == first and len(first) == 2, first
    in_jail = cluster.exec(node, "find /mnt/jail/var/lib/warden/containers /mnt/jail/home/dave/.cache "
                                 "/mnt/jail/home/dave/.local -mindepth 1 2>/dev/null; true").out  # fmt: skip
    assert in_jail.strip() == "", in_jail


#: In the container, what a CUDA program does first (tests/dataplane/test_gpu_driver.py's probe, with
#: the devices it may open): load libcuda.so.1 by soname, ask it, say which file the loader mapped. The
#: GPU devices are stand-ins (tests/dataplane/test_isolation.py): where the step's devices cgroup allows
#: one, opening it fails with ENXIO (no driver owns it), elsewhere with EPERM.
GPU_PROBE = r"""
import ctypes, errno, glob, os
cuda = ctypes.CDLL("libcuda.so.1")
version, count = ctypes.c_int(), ctypes.c_int()
init = cuda.cuInit(0)
cuda.cuDriverGetVersion(ctypes.byref(version))
name = (ctypes.c_char * 40).in_dll(cuda, "warden_fake_driver_version").value.decode()
path = next(l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l)
allowed = []
for dev in sorted(glob.glob("/dev/nvidia[0-9]*")):
    try:
        os.close(os.open(dev, os.O_RDWR))
        allowed.append(dev)
    except OSError as e:
        if e.errno == errno.ENXIO:  # the devices cgroup let it through; no driver behind a stand-in
            allowed.append(dev)
print("libcuda", name, version.value, init, path, os.environ.get("CUDA_VISIBLE_DEVICES", "-"), ",".join(allowed) or "-")
print(open("/etc/os-release").readline().strip())
"""


def test_a_gpu_step_in_a_container_gets_its_gpu_and_the_nodes_driver(
    cluster: DockerCluster, registry: reg.Registry, bob: JailUser
) -> None:
    """`--gpus=1` in a container: exactly one stand-in GPU opens (Slurm's devices cgroup), and CUDA's
    loader finds the node's own stand-in driver through the container's cache, with no LD_LIBRARY_PATH
    and nothing of the driver in the image (GPU and driver are stand-ins: no GPU here)."""
    (node,) = cluster.worker_pods("gpu")
    driver = cluster.pod_drivers[node]
    assert driver is not None
    bob.ssh("cat > ~/gpu_probe.py", input=GPU_PROBE)
    out = _srun(bob, f"-p gpu -N1 --gpus=1 --container-image={registry.reference()}", "python3 ~/gpu_probe.py")
    line = next((row.split() for row in out.splitlines() if row.startswith("libcuda ")), None)
    assert line is not None and len(line) == 7, out
    _, version, cuda, init, path, visible, allowed = line
    assert version == driver.version and int(cuda) == driver.cuda_version and init == "0", out
    assert path == f"/usr/lib/warden/driver/lib/libcuda.so.{driver.version}", out
    assert visible in ("0", "1") and len(allowed.split(",")) == 1 and allowed != "-", out
    assert IMAGE_OS in out, out
    # the image itself carries no driver, and nvidia-smi is the node's
    smi = _srun(bob, f"-p gpu -N1 --gpus=1 --container-image={registry.reference()}", "nvidia-smi")
    assert f"Driver Version: {driver.version}" in smi, smi

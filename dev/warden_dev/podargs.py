"""A rendered pod as `docker run` arguments: the translation of `warden_dev.dockercluster`, kept pure.

Nothing here runs Docker or writes a file. ``Translator.pod`` turns one pod template (of a StatefulSet,
WorkerSet, Deployment or Job the operator rendered) into a ``PodPlan``: the container's ``docker run``
arguments (``Pod.args``, everything between ``docker run -d`` and the image, and ``Pod.argv`` after it)
and what must exist before they can run: the files of its ConfigMap and Secret volumes, its termination
message file, the Docker volumes of its claims and ``emptyDir``s, the shared volumes of its ``hostPath``s.
``warden_dev.dockercluster`` makes those and runs the container; tests/unit/test_warden_dev_podargs.py
checks the translation against the renderers' output without Docker.

What is translated (the pod contract the dataplane tier runs):

- ConfigMap and Secret volumes: read-only bind mounts of ``<files_dir>/volumes/<pod>/<volume>`` holding the
  data (``items`` picked and renamed, ``defaultMode`` applied), whatever the mount says;
- the jail claim: the run's jail volume; other claims (``volumeClaimTemplates``) and ``emptyDir``: a
  Docker volume of the pod (``medium: Memory``: a tmpfs with the ``sizeLimit``); ``hostPath`` (a
  directory): one Docker volume per path, shared by every pod;
- hostname = the pod's name; network aliases = the DNS names Kubernetes gives the pod
  (``<pod>.<serviceName>.<ns>.svc.cluster.local``) and the Services that select it; Kubernetes' search
  domains plus the pod's ``dnsConfig.searches``;
- ``env`` (values only), capabilities (add and drop), ``runAsUser``/``runAsGroup`` (``--user``), the
  pod's ``fsGroup`` (``--group-add``, and the group of its ConfigMap/Secret files),
  ``readOnlyRootFilesystem``, ``allowPrivilegeEscalation: false`` (no-new-privileges), the seccomp
  profile (``Localhost``: the worker's profile file) and AppArmor ``Unconfined``; a privileged container
  is refused;
- ``*/gpu`` limits: stand-in devices numbered as on one host (the k-th GPU pod of n GPUs gets
  /dev/nvidia{k*n}..{k*n+n-1}) and a stand-in driver, alternately mounted as GKE lays it out and as
  NVIDIA's container toolkit does;
- with ``command=True`` (Deployments, Jobs) ``command[0]`` becomes the entrypoint and the rest of
  ``command`` and ``args`` follow the image; otherwise a container with a command is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from warden import naming
from warden.render.pods import Manifest

#: the labels of every Docker object of a run
LABEL_RUN = "dev.warden.dataplane.run"
LABEL_PID = "dev.warden.dataplane.pid"
LABEL_HOST = "dev.warden.dataplane.host"
LABEL_POD = "dev.warden.dataplane.pod"
GPU_RESOURCE_SUFFIX = "/gpu"
#: Kubernetes' default terminationMessagePath.
TERMINATION_LOG = "/dev/termination-log"
#: The init container that holds a pod until the jail is populated (warden.render.pods).
WAIT_FOR_JAIL = "wait-for-jail"
#: Kubernetes' own search domains for a pod in namespace NS (before the pod's dnsConfig.searches).
CLUSTER_DOMAIN = "svc.cluster.local"
COMPONENT_LABEL = "app.kubernetes.io/component"
STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


class TranslationError(RuntimeError):
    """A rendered pod asks for something this translation does not (or must not) do."""


class Driver(Protocol):
    """A stand-in GPU driver (warden_dev.fakedriver.FakeDriver): where its files are mounted."""

    def gke_mounts(self) -> list[tuple[Path, str]]: ...

    def toolkit_mounts(self) -> list[tuple[Path, str]]: ...


D = TypeVar("D", bound=Driver)


@dataclass
class Pod:
    """One pod of a rendered workload, run as one container."""

    name: str  # the pod's name: hostname, Slurm node name for workers
    component: str  # app.kubernetes.io/component
    container: str  # the Docker container's name
    image: str
    args: list[str]  # everything between `docker run -d` and the image
    labels: dict[str, str]
    spec: Manifest  # the container's spec from the manifest
    group: str | None = None  # worker group
    argv: list[str] = field(default_factory=list)  # after the image: the container's command[1:] + args
    waits_for_jail: bool = False  # has the wait-for-jail init container: starts after populate-jail
    volumes: list[Manifest] = field(default_factory=list)  # the pod's volumes (as in its spec)


@dataclass(frozen=True)
class VolumeFile:
    """A file of a ConfigMap or Secret volume, as the kubelet writes it."""

    path: Path
    text: str
    mode: int


@dataclass
class PodPlan:
    """A pod's container and what has to exist before ``docker run`` of it."""

    pod: Pod
    #: ConfigMap/Secret volume files (their directories included in the paths)
    files: list[VolumeFile] = field(default_factory=list)
    #: volume directories that start empty (an optional Secret that does not exist yet)
    empty_dirs: list[Path] = field(default_factory=list)
    #: the termination message file: an empty, world-writable file
    termination_log: Path | None = None
    #: Docker volumes of this pod alone (claims, emptyDirs), labelled with the pod
    volumes: list[str] = field(default_factory=list)
    #: Docker volumes standing in for host directories (hostPath), shared by every pod
    host_volumes: list[str] = field(default_factory=list)
    #: the pod's fsGroup: the group of its ConfigMap/Secret files
    fs_group: int | None = None


def labels_args(labels: Mapping[str, str]) -> list[str]:
    return [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]


def containers(obj: Manifest) -> Iterable[Manifest]:
    """The containers of a workload's pod template (a CronJob's too)."""
    spec = obj.get("spec") or {}
    for tpl in (spec.get("template"), (spec.get("jobTemplate") or {}).get("spec", {}).get("template")):
        if tpl:
            yield from tpl["spec"].get("containers", [])


def tmpfs_size(size: str) -> str:
    """A Kubernetes quantity (``64Mi``) as tmpfs's ``size=`` (``64m``)."""
    return size.replace("i", "").lower()


def configmap_data(
    objects: Iterable[Manifest], overrides: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, dict[str, str]]:
    """Every rendered ConfigMap's data by name, with ``overrides[name]`` adding or replacing files."""
    out = {}
    for cm in objects:
        if cm["kind"] == "ConfigMap":
            name = cm["metadata"]["name"]
            out[name] = {**dict(cm.get("data") or {}), **dict((overrides or {}).get(name, {}))}
    return out


@dataclass
class Translator(Generic[D]):
    """Translates the pods of one cluster's rendered objects; numbers GPUs across the pods it translated."""

    prefix: str  # of every Docker name of the run (`wdp-<run id>`)
    network: str
    namespace: str
    jail_claim: str  # the claim name of the jail (every other claim is per pod)
    jail_volume: str  # the Docker volume that holds the jail
    files_dir: Path  # where ConfigMap/Secret volume files and termination logs go
    services: Sequence[Manifest]  # the rendered Services (network aliases)
    configmaps: Mapping[str, Mapping[str, str]]  # ConfigMap name -> data
    secrets: Mapping[str, Mapping[str, str]]  # Secret name -> data (generated)
    labels: Mapping[str, str]  # of every Docker object of the run
    seccomp_profile: Path  # the file a `Localhost` seccomp profile names
    gpu_device: Callable[[int], Path]  # host device file of stand-in GPU number N
    drivers: Callable[[], Sequence[D | None]]  # the driver each GPU pod gets in turn (None: no driver)
    #: containers of StatefulSets' pods start again when they exit, as the kubelet's restartPolicy Always
    #: does (`docker run --restart always`; `docker stop` still stops one for good, as a pod's deletion)
    restart_containers: bool = False
    #: a name the test network does not hold fails at once, as a cluster DNS answers NXDOMAIN for a
    #: deleted pod's name (Docker's embedded DNS would ask the host's resolvers and wait out their timeouts)
    names_fail_fast: bool = False
    gpu_pods: int = 0  # GPU pods translated so far
    pod_drivers: dict[str, D | None] = field(default_factory=dict)

    def labels_args(self, pod: str = "") -> list[str]:
        return labels_args({**self.labels, **({LABEL_POD: pod} if pod else {})})

    def aliases(self, pod: str, service_name: str | None, labels: Mapping[str, str]) -> list[str]:
        """The names Kubernetes' DNS gives the pod: its own under its headless Service, and those of the
        Services that select it."""
        ns = self.namespace
        out = [pod]
        if service_name:
            out.append(f"{pod}.{service_name}.{ns}.{CLUSTER_DOMAIN}")
        for svc in self.services:
            selector = svc["spec"].get("selector") or {}
            if svc["spec"].get("clusterIP") == "None" or not selector:
                continue
            if all(labels.get(k) == v for k, v in selector.items()):
                s = svc["metadata"]["name"]
                out += [s, f"{s}.{ns}", f"{s}.{ns}.{CLUSTER_DOMAIN}"]
        return out

    def host_volume(self, path: str) -> str:
        """The Docker volume standing in for the host directory ``path``."""
        return f"{self.prefix}-host{path.rstrip('/').replace('/', '-')}"

    def claim_volume(self, claim: str) -> str:
        """The Docker volume standing in for the shared claim ``claim`` (not the jail's)."""
        return f"{self.prefix}-claim-{claim}"

    def volume_dir(self, pod: str, volume: str) -> Path:
        return self.files_dir / "volumes" / pod / volume

    def mount(self, plan: PodPlan, volume: Manifest, mount: Manifest, claims: set[str]) -> list[str]:
        """The arguments mounting ``volume`` as ``mount`` says; what the mount needs goes into ``plan``."""
        pod = plan.pod.name
        target = mount["mountPath"]
        ro = ",readonly" if mount.get("readOnly") else ""
        vname = volume["name"]
        if "configMap" in volume or "secret" in volume:
            if "configMap" in volume:
                source = volume["configMap"]
                data = self.configmaps[source["name"]]
            else:
                source = volume["secret"]
                # an optional Secret not made yet: the kubelet mounts an empty directory, filled later
                data = (
                    self.secrets.get(source["secretName"], {})
                    if source.get("optional")
                    else self.secrets[source["secretName"]]
                )
            items, mode = source.get("items"), source.get("defaultMode", 0o644)
            d = self.volume_dir(pod, vname)
            if not data:
                plan.empty_dirs.append(d)
            files = {i["path"]: data[i["key"]] for i in items} if items else dict(data)
            plan.files += [VolumeFile(d / path, text, mode) for path, text in files.items()]
            # ConfigMap and Secret volumes are read-only whatever the mount says
            return ["--mount", f"type=bind,source={d},target={target},readonly"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if claim == self.jail_claim:
                return ["--mount", f"type=volume,source={self.jail_volume},target={target}{ro}"]
            # any other claim a pod template names (the backup controllers' shared state): one Docker
            # volume per claim, shared by every pod that mounts it, as a ReadWriteMany volume is
            src = self.claim_volume(claim)
            plan.host_volumes.append(src)
            return ["--mount", f"type=volume,source={src},target={target}{ro}"]
        if vname in claims or "emptyDir" in volume:
            if volume.get("emptyDir", {}).get("medium") == "Memory":
                opts = "rw,nosuid,nodev,exec"
                if size := volume["emptyDir"].get("sizeLimit"):
                    opts += f",size={tmpfs_size(size)}"
                return ["--tmpfs", f"{target}:{opts}"]
            docker_vol = f"{self.prefix}-{pod}-{vname}"
            plan.volumes.append(docker_vol)
            return ["--mount", f"type=volume,source={docker_vol},target={target}{ro}"]
        if "hostPath" in volume:
            if volume["hostPath"].get("type", "") not in ("", "Directory", "DirectoryOrCreate"):
                raise TranslationError(f"pod {pod}: hostPath volume {vname} is not a directory: {volume}")
            src = self.host_volume(volume["hostPath"]["path"])
            plan.host_volumes.append(src)
            return ["--mount", f"type=volume,source={src},target={target}{ro}"]
        raise TranslationError(f"pod {pod}: volume {vname} of an unsupported type: {volume}")

    def security_args(self, pod: str, sec: Manifest) -> list[str]:
        """The container's securityContext as `docker run` options."""
        if sec.get("privileged"):
            raise TranslationError(f"pod {pod}: the renderer asks for a privileged container")
        args: list[str] = []
        for cap in (sec.get("capabilities") or {}).get("add", []):
            args += ["--cap-add", cap]
        for cap in (sec.get("capabilities") or {}).get("drop", []):
            args += ["--cap-drop", cap]
        if "runAsUser" in sec:
            args += ["--user", f"{sec['runAsUser']}" + (f":{sec['runAsGroup']}" if "runAsGroup" in sec else "")]
        if sec.get("readOnlyRootFilesystem"):
            args += ["--read-only"]
        if sec.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        seccomp = (sec.get("seccompProfile") or {}).get("type")
        if seccomp == "Localhost":
            args += ["--security-opt", f"seccomp={self.seccomp_profile}"]
        elif seccomp == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        if (sec.get("appArmorProfile") or {}).get("type") == "Unconfined":
            args += ["--security-opt", "apparmor=unconfined"]
        return args

    def gpu_args(self, pod: str, count: int) -> list[str]:
        """Devices and driver of the next GPU pod: numbered as a device plugin numbers one node's GPUs
        (the k-th GPU pod of n GPUs gets /dev/nvidia{k*n} .. /dev/nvidia{k*n+n-1}), `rw` as NVIDIA's device
        plugin gives them (no mknod); the drivers in turn, laid out as GKE does for even turns and as
        NVIDIA's container toolkit does for odd ones."""
        turn = self.gpu_pods
        self.gpu_pods += 1
        args = []
        for i in range(turn * count, turn * count + count):
            args += ["--device", f"{self.gpu_device(i)}:/dev/nvidia{i}:rw"]
        drivers = self.drivers()
        driver = drivers[turn % len(drivers)] if drivers else None
        self.pod_drivers[pod] = driver
        if driver is not None:
            mounts = driver.gke_mounts() if turn % 2 == 0 else driver.toolkit_mounts()
            args += [a for src, dst in mounts for a in ("--volume", f"{src}:{dst}:ro")]
        return args

    def pod(
        self,
        pod: str,
        template: Manifest,
        service_name: str | None,
        claims: set[str],
        container_name: str | None = None,
        command: bool = False,
        resolvable: bool = True,
    ) -> PodPlan:
        """The plan of pod ``pod`` from a pod ``template``. ``claims``: the names of its per-pod claims
        (a StatefulSet's volumeClaimTemplates); ``command``: translate the container's command/args
        (Kubernetes semantics: ``command[0]`` replaces the image's entrypoint, the rest and ``args``
        follow the image); ``resolvable=False``: no network alias, as for a Job's pod, whose name no DNS
        record carries."""
        spec = template["spec"]
        labels = dict(template["metadata"].get("labels") or {})
        (container,) = spec["containers"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in claims:
            volumes.setdefault(c, {"name": c})
        cname = container_name or f"{self.prefix}-{pod}"
        plan = PodPlan(
            Pod(
                name=pod,
                component=labels.get(COMPONENT_LABEL, ""),
                container=cname,
                image=container["image"],
                args=[],
                labels=labels,
                spec=container,
                group=labels.get(naming.WORKER_GROUP_LABEL),
                waits_for_jail=any(c["name"] == WAIT_FOR_JAIL for c in spec.get("initContainers", [])),
                volumes=list(spec.get("volumes", [])),
            )
        )
        args = ["--name", cname, "--hostname", pod, "--network", self.network, *self.labels_args(pod)]
        for alias in self.aliases(pod, service_name, labels) if resolvable else []:
            args += ["--network-alias", alias]
        searches = [f"{self.namespace}.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN, "cluster.local"]
        searches += (spec.get("dnsConfig") or {}).get("searches", [])
        for s in dict.fromkeys(searches):
            args += ["--dns-search", s]
        if self.names_fail_fast:
            args += ["--dns", "127.0.0.1"]  # nothing answers there: the embedded DNS fails the lookup at once
        for env in container.get("env", []):
            args += ["--env", f"{env['name']}={env['value']}"]
        for m in container.get("volumeMounts", []):
            args += self.mount(plan, volumes[m["name"]], m, claims)
        # as the kubelet does: a world-writable file of the pod's bound at the container's
        # terminationMessagePath (Kubernetes' default: /dev/termination-log)
        plan.termination_log = self.files_dir / "termination" / cname
        target = container.get("terminationMessagePath", TERMINATION_LOG)
        args += ["--mount", f"type=bind,source={plan.termination_log},target={target}"]
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        if fs_group is not None:
            # as the kubelet does: ConfigMap and Secret files get the pod's fsGroup, the container the group
            plan.fs_group = int(fs_group)
            args += ["--group-add", str(fs_group)]
        args += self.security_args(pod, container.get("securityContext") or {})
        limits = (container.get("resources") or {}).get("limits") or {}
        for res, count in limits.items():
            if res.endswith(GPU_RESOURCE_SUFFIX):
                args += self.gpu_args(pod, int(count))
        if command:
            if container.get("command"):
                first, *rest = container["command"]
                args += ["--entrypoint", first]
                plan.pod.argv += rest
            plan.pod.argv += list(container.get("args") or [])
        elif container.get("command") or container.get("args"):
            raise TranslationError(f"pod {pod}: command/args are not translated")
        plan.pod.args = args
        return plan

    def workloads(self, objects: Sequence[Manifest]) -> dict[str, PodPlan]:
        """Every pod of the rendered StatefulSets, WorkerSets and Deployments, by pod name: StatefulSets'
        and WorkerSets' pods are ``<name>-<i>`` (resolvable under their service / subdomain), a
        Deployment's replicas ``<name>-<i>`` too (Kubernetes adds a hash and a random suffix instead),
        with their command and args."""
        plans: dict[str, PodPlan] = {}
        for sts in (o for o in objects if o["kind"] == "StatefulSet"):
            claims = {c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])}
            for i in range(sts["spec"]["replicas"]):
                pod = f"{sts['metadata']['name']}-{i}"
                # the label the StatefulSet controller gives each pod (per-pod Services select by it)
                template = copy.deepcopy(sts["spec"]["template"])
                template["metadata"].setdefault("labels", {})[STS_POD_NAME_LABEL] = pod
                plans[pod] = self.pod(pod, template, sts["spec"].get("serviceName"), claims)
                if self.restart_containers:
                    plans[pod].pod.args += ["--restart", "always"]
        for ws in (o for o in objects if o["kind"] == "WorkerSet"):
            # the operator makes a WorkerSet's pods `<name>-<i>`, each resolvable under its `subdomain`
            template = ws["spec"]["template"]
            for i in range(ws["spec"]["replicas"]):
                pod = f"{ws['metadata']['name']}-{i}"
                plans[pod] = self.pod(pod, template, template["spec"].get("subdomain"), set())
        for deployment in (o for o in objects if o["kind"] == "Deployment"):
            # a Deployment's pods have no stable names and no per-pod DNS record of their own; the
            # Services that select them (the alias set of `aliases`) are how anyone reaches them
            for i in range(deployment["spec"].get("replicas", 1)):
                pod = f"{deployment['metadata']['name']}-{i}"
                plans[pod] = self.pod(pod, deployment["spec"]["template"], None, set(), command=True)
        return plans

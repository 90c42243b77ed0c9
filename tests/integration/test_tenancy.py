"""What a tenant may ask of a SlurmCluster or a WorkerSet is the platform admin's choice: the operator chart's
ValidatingAdmissionPolicies (templates/tenancy.yaml, values `tenancy.*`), rendered by the real helm and
enforced by the real kube-apiserver, refuse each field that reaches the Kubernetes node, naming the field
and the chart value that would allow it; with that value set, the same request is accepted. The admin
(system:masters) and the operator's ServiceAccount are not checked; a namespace the release does not
manage is not checked either.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cases.malformed import BASE
from warden_dev.controlplane import ControlPlane, wait_for

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_CHART = ROOT / "charts" / "slurm-operator"
TENANT = "alice"
#: never among the registries a test allows: a request naming it is refused once the policy is in force
PROBE_IMAGE = "registry.invalid/probe/worker:1"


def cluster(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slurm.warden.dev/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def with_spec(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec.update(copy.deepcopy(changes))
    return spec


def with_group(**changes: Any) -> dict[str, Any]:
    return with_spec(workerGroups=[{"name": "cpu", "replicas": 1, **changes}])


WORKERSET = {
    "apiVersion": "slurm.warden.dev/v1alpha1",
    "kind": "WorkerSet",
    "metadata": {"name": "mine"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "mine"}},
        "template": {
            "metadata": {"labels": {"app": "mine"}},
            "spec": {"containers": [{"name": "root", "image": "busybox", "securityContext": {"privileged": True}}]},
        },
    },
}


@dataclass
class Release:
    """The operator chart's tenancy objects of one release, applied, managing ``namespace``."""

    cp: ControlPlane
    namespace: str
    name: str

    def request(self, verb: str, obj: dict[str, Any], as_user: str | None = TENANT) -> subprocess.CompletedProcess[str]:
        who = [f"--as={as_user}"] if as_user else []
        return self.cp.kubectl(verb, "--dry-run=server", "-n", self.namespace, *who, "-f", "-",
                               input=json.dumps(obj), check=False)  # fmt: skip

    def refused(self, obj: dict[str, Any], as_user: str | None = TENANT) -> str:
        proc = self.request("create", obj, as_user)
        assert proc.returncode != 0, f"accepted: {proc.stdout}"
        assert "ValidatingAdmissionPolicy" in proc.stderr, proc.stderr
        return proc.stderr

    def accepted(self, obj: dict[str, Any], as_user: str | None = TENANT) -> None:
        proc = self.request("create", obj, as_user)
        assert proc.returncode == 0, proc.stderr


def _helm(cp: ControlPlane, *args: str) -> str:
    proc = subprocess.run([cp.binary("helm"), *args], env=cp.env(), capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def chart_built(controlplane: ControlPlane) -> None:
    _helm(controlplane, "dependency", "build", str(OPERATOR_CHART))


@pytest.fixture
def install(
    controlplane: ControlPlane, crd_installed: None, chart_built: None, namespace: str
) -> Iterator[Callable[..., Release]]:
    """``install(*sets)``: the tenancy objects of a release managing the test's namespace, with ``--set``
    values; the tenant may create SlurmClusters and WorkerSets there (a Role)."""
    made: list[list[dict[str, Any]]] = []
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "tenant", "namespace": namespace},
            "rules": [{"apiGroups": ["slurm.warden.dev"], "resources": ["slurmclusters", "workersets"],
                       "verbs": ["get", "list", "create", "update", "patch"]}]}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "tenant", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": "system:authenticated"}]}  # fmt: skip
    controlplane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": [role, binding]}))  # fmt: skip

    def make(*sets: str) -> Release:
        release = Release(controlplane, namespace, f"t{uuid.uuid4().hex[:6]}")
        args = [a for s in (f"watchNamespaces[0]={namespace}", *sets) for a in ("--set", s)]
        out = _helm(controlplane, "template", release.name, str(OPERATOR_CHART), "-n", namespace,
                    "-s", "templates/tenancy.yaml", *args)  # fmt: skip
        docs = [d for d in yaml.safe_load_all(out) if d]
        policies = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2
        assert sorted(d["kind"] for d in docs) == sorted(["ConfigMap", *policies])
        controlplane.kubectl("apply", "-f", "-", input=out)
        made.append(docs)
        # in force once the apiserver loaded policy, binding and params: a probe's image is refused
        probe = cluster("probe", with_spec(images={"worker": PROBE_IMAGE}))
        wait_for("the tenancy policy in force", lambda: release.request("create", probe).returncode != 0, 30)
        return release

    yield make
    for docs in made:
        for d in docs:
            controlplane.kubectl("delete", "--ignore-not-found", "-n", namespace, d["kind"], d["metadata"]["name"],
                                 check=False)  # fmt: skip


@dataclass(frozen=True)
class Field:
    id: str
    spec: dict[str, Any]
    #: what the refusal names: the field, the chart value
    words: tuple[str, ...]
    #: the --set that allows it
    allow: str


FIELDS = [
    Field("image", with_spec(images={"worker": "evil.example.com/root:1"}),
          ("spec.images.worker", "evil.example.com/root:1", "tenancy.allowedRegistries"),
          "tenancy.allowedRegistries[0]=evil.example.com"),
    Field("populate-image", with_spec(jail={"populate": {"image": "evil.example.com/jail:1"}}),
          ("spec.jail.populate.image", "tenancy.allowedRegistries"), "tenancy.allowedRegistries[0]=evil.example.com"),
    Field("store-etc", with_spec(containers={"store": {"hostPath": "/etc"}}),
          ("spec.containers.store.hostPath", "/etc", "tenancy.allowedHostPaths: none"),
          "tenancy.allowedHostPaths[0]=/etc"),
    Field("store-kubelet", with_spec(containers={"store": {"hostPath": "/var/lib/kubelet"}}),
          ("spec.containers.store.hostPath", "/var/lib/kubelet", "tenancy.allowedHostPaths"),
          "tenancy.allowedHostPaths[0]=/var/lib"),
    Field("dcgm", with_spec(metrics={"dcgmJobMapping": {"enabled": True, "hostPath": "/root"}}),
          ("spec.metrics.dcgmJobMapping.hostPath", "/root", "tenancy.allowedHostPaths"),
          "tenancy.allowedHostPaths[0]=*"),
    Field("seccomp", with_spec(security={"workerSeccompProfile": {"type": "Unconfined"}}),
          ("spec.security.workerSeccompProfile.type", "tenancy.allowUnconfinedSeccomp"),
          "tenancy.allowUnconfinedSeccomp=true"),
    Field("toleration", with_group(tolerations=[{"key": "node-role.kubernetes.io/control-plane",
                                                 "operator": "Exists", "effect": "NoSchedule"}]),
          ("spec.workerGroups[name=cpu].tolerations", "node-role.kubernetes.io/control-plane",
           "tenancy.allowedTolerationKeys: nvidia.com/gpu"),
          "tenancy.allowedTolerationKeys[0]=node-role.kubernetes.io/control-plane"),
    Field("toleration-all", with_group(tolerations=[{"operator": "Exists"}]),
          ("spec.workerGroups[name=cpu].tolerations", "every taint", "tenancy.allowedTolerationKeys"),
          "tenancy.allowedTolerationKeys[0]=*"),
    Field("login-toleration", with_spec(login={"tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                                              "operator": "Exists"}]}),
          ("spec.login.tolerations", "node-role.kubernetes.io/control-plane", "tenancy.allowedTolerationKeys"),
          "tenancy.allowedTolerationKeys[0]=*"),
    Field("controller-selector", with_spec(controller={"nodeSelector": {"node-role.kubernetes.io/master": ""}}),
          ("spec.controller.nodeSelector", "node-role.kubernetes.io/master", "tenancy.deniedNodeSelectorKeys"),
          "tenancy.deniedNodeSelectorKeys[0]=node-role.kubernetes.io/control-plane"),
    Field("populate-toleration", with_spec(jail={"populate": {"tolerations": [{"key": "dedicated", "value": "infra",
                                                                               "operator": "Equal"}]}}),
          ("spec.jail.populate.tolerations", "dedicated", "tenancy.allowedTolerationKeys"),
          "tenancy.allowedTolerationKeys[0]=dedicated"),
    Field("directory", with_spec(identity={"ldap": {"uris": ["ldaps://169.254.169.254:80"], "searchBase": "dc=x"}}),
          ("spec.identity.ldap.uris", "ldaps://169.254.169.254:80", "tenancy.allowedDirectoryHosts: ldap.example.com"),
          "tenancy.allowedDirectoryHosts[0]=169.254.169.254"),
    Field("node-selector", with_group(nodeSelector={"node-role.kubernetes.io/control-plane": ""}),
          ("spec.workerGroups[name=cpu].nodeSelector", "node-role.kubernetes.io/control-plane",
           "tenancy.deniedNodeSelectorKeys"),
          "tenancy.deniedNodeSelectorKeys=null"),
]  # fmt: skip


#: the chart's defaults, but one: the directory a platform's tenants share
STRICT = "tenancy.allowedDirectoryHosts[0]=ldap.example.com"


@pytest.mark.parametrize("field", FIELDS, ids=[f.id for f in FIELDS])
def test_a_field_that_reaches_the_node_is_refused_until_the_chart_allows_it(
    install: Callable[..., Release], field: Field
) -> None:
    strict = install(STRICT)
    message = strict.refused(cluster("mine", field.spec))
    for word in field.words:
        assert word in message, message
    strict.accepted(cluster("mine", field.spec), as_user=None)  # the admin (system:masters) is not checked


@pytest.mark.parametrize("field", FIELDS, ids=[f.id for f in FIELDS])
def test_the_same_field_is_accepted_where_the_chart_allows_it(install: Callable[..., Release], field: Field) -> None:
    install(field.allow).accepted(cluster("mine", field.spec))


def test_apparmor_unconfined_is_the_admins_choice(install: Callable[..., Release]) -> None:
    unconfined = cluster("mine", BASE)  # the CRD's default: workerAppArmorUnconfined true
    strict = install("tenancy.allowUnconfinedAppArmor=false")
    message = strict.refused(unconfined)
    assert "spec.security.workerAppArmorUnconfined" in message and "tenancy.allowUnconfinedAppArmor" in message
    strict.accepted(cluster("mine", with_spec(security={"workerAppArmorUnconfined": False})))
    # Warden's own profiles confine (they must be loaded on the nodes: docs/nodes.md); Unconfined does not
    strict.accepted(cluster("mine", with_spec(security={"appArmorProfile": "Warden"})))
    message = strict.refused(cluster("mine", with_spec(security={"appArmorProfile": "Unconfined",
                                                                 "workerAppArmorUnconfined": False})))  # fmt: skip
    assert "spec.security.appArmorProfile: Unconfined is not allowed" in message, message


def test_the_defaults_let_a_tenant_make_an_ordinary_cluster(install: Callable[..., Release]) -> None:
    """The chart's defaults: Warden's own images, a GPU group tolerating nvidia.com/gpu, an emptyDir store."""
    release = install()
    gpu = {"name": "gpu", "replicas": 1, "gpus": {"count": 8}, "nodeSelector": {"nvidia.com/gpu.present": "true"},
           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip
    spec = with_spec(images={"worker": "warden/worker:9.9.9"}, containers={"enabled": True},
                     workerGroups=[{"name": "cpu", "replicas": 1}, gpu])  # fmt: skip
    release.accepted(cluster("mine", spec))


def test_directory_hosts_are_names_or_a_domains_hosts(install: Callable[..., Release]) -> None:
    release = install(
        "tenancy.allowedDirectoryHosts[0]=ldap.example.com", "tenancy.allowedDirectoryHosts[1]=*.corp.example"
    )
    for uri in ("ldaps://ldap.example.com", "ldap://dc1.corp.example:389"):
        release.accepted(cluster("mine", with_spec(identity={"ldap": {"uris": [uri], "searchBase": "dc=x"}})))
    for uri in ("ldaps://ldap.example.com.evil.io", "ldaps://corp.example", "ldaps://[fe80::1]:636"):
        spec = with_spec(identity={"ldap": {"uris": ["ldaps://ldap.example.com", uri], "searchBase": "dc=x"}})
        assert f"spec.identity.ldap.uris: {uri} is not" in release.refused(cluster("mine", spec))


def test_a_registry_is_matched_as_a_whole_path_prefix(install: Callable[..., Release]) -> None:
    release = install("tenancy.allowedRegistries[0]=registry.example.com/hpc")
    release.accepted(cluster("mine", with_spec(images={"login": "registry.example.com/hpc/login:1"})))
    for image in ("registry.example.com.evil.io/hpc/login:1", "registry.example.com/hpcevil/login:1",
                  "registry.example.com/login:1"):  # fmt: skip
        assert "spec.images.login" in release.refused(cluster("mine", with_spec(images={"login": image})))


def test_a_namespace_the_release_does_not_manage_is_not_checked(
    install: Callable[..., Release], controlplane: ControlPlane
) -> None:
    install()
    other = Release(controlplane, controlplane.create_namespace(f"o-{uuid.uuid4().hex[:8]}"), "none")
    other.accepted(cluster("mine", with_spec(containers={"store": {"hostPath": "/etc"}})), as_user=None)
    proc = controlplane.kubectl("create", "--dry-run=server", "-n", other.namespace, f"--as={TENANT}", "-f", "-",
                                input=json.dumps(cluster("x", BASE)), check=False)  # fmt: skip
    assert "forbidden" in proc.stderr  # RBAC, not the policy, answers there
    controlplane.kubectl("delete", "namespace", other.namespace, "--wait=false")


def test_a_workerset_is_the_operators_to_write(install: Callable[..., Release], controlplane: ControlPlane) -> None:
    strict = install()
    message = strict.refused(WORKERSET)
    assert "a WorkerSet: WorkerSet pod templates are the operator's to write" in message, message
    assert "tenancy.allowWorkerSetTemplates" in message
    # one the operator made (here: the admin) keeps its template; the tenant may change its replicas
    controlplane.kubectl("create", "-n", strict.namespace, "-f", "-", input=json.dumps(WORKERSET))
    scaled = controlplane.kubectl("patch", "-n", strict.namespace, f"--as={TENANT}", "workerset", "mine",
                                  "--type=merge", "-p", '{"spec": {"replicas": 3}}', check=False)  # fmt: skip
    assert scaled.returncode == 0, scaled.stderr
    edited = controlplane.kubectl("patch", "-n", strict.namespace, f"--as={TENANT}", "workerset", "mine",
                                  "--type=json", "-p", json.dumps([{"op": "replace",
                                  "path": "/spec/template/spec/containers/0/image", "value": "evil/root"}]),
                                  check=False)  # fmt: skip
    assert edited.returncode != 0 and "spec.template: WorkerSet pod templates" in edited.stderr, edited.stderr


def test_a_workerset_of_the_tenants_own_where_the_chart_allows_it(install: Callable[..., Release]) -> None:
    install("tenancy.allowWorkerSetTemplates=true").accepted(WORKERSET)


def test_the_operators_service_account_is_not_checked(install: Callable[..., Release]) -> None:
    release = install("serviceAccount.name=warden-op")
    spec = with_spec(containers={"store": {"hostPath": "/etc"}})
    release.accepted(cluster("mine", spec), as_user=f"system:serviceaccount:{release.namespace}:warden-op")
    release.refused(cluster("mine", spec), as_user=f"system:serviceaccount:{release.namespace}:someone")


def test_the_bridge_writes_only_its_pods_in_namespaces_an_admin_opted_in(
    controlplane: ControlPlane, crd_installed: None, chart_built: None, namespace: str
) -> None:
    """The bridge's ClusterRole may patch, delete and bind any pod (RBAC cannot select by a namespace's label
    or a pod's scheduler): the chart's policy narrows its identity to pods of its scheduler in namespaces
    labelled slurm.warden.dev/bridge. Asked as the bridge's ServiceAccount of a real install's RBAC."""
    release = f"b{uuid.uuid4().hex[:6]}"
    out = _helm(controlplane, "template", release, str(OPERATOR_CHART), "-n", namespace, "--set", "bridge.enabled=true",
                "--set", f"watchNamespaces[0]={namespace}")  # fmt: skip
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
             "ValidatingAdmissionPolicyBinding")  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] in kinds and "bridge" in d["metadata"]["name"]]
    assert sorted(d["kind"] for d in docs) == sorted(kinds)
    opted, other = (controlplane.create_namespace(f"{n}-{uuid.uuid4().hex[:6]}") for n in ("opted", "other"))
    try:
        controlplane.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
        controlplane.kubectl("label", "namespace", opted, f"slurm.warden.dev/bridge={namespace}.cpu")
        (sa,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
        bridge = f"--as=system:serviceaccount:{namespace}:{sa}"
        for ns in (opted, other):
            for name, scheduler in (("mine", "warden-slurm"), ("theirs", "default-scheduler")):
                spec = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "busybox"}]}
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
                controlplane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod))

        def delete(ns: str, pod: str) -> subprocess.CompletedProcess[str]:
            return controlplane.kubectl("delete", "pod", pod, "-n", ns, "--dry-run=server", bridge, check=False)

        # in force once loaded: the bridge may not delete its scheduler's pod outside opted-in namespaces
        wait_for("the bridge's policy in force", lambda: delete(other, "mine").returncode != 0, 30)
        assert "namespaces an admin opted in (label slurm.warden.dev/bridge), not in " + other in (
            delete(other, "mine").stderr
        )
        assert delete(opted, "mine").returncode == 0, delete(opted, "mine").stderr
        refused = delete(opted, "theirs")
        assert refused.returncode != 0 and "whose spec.schedulerName is warden-slurm, not theirs" in refused.stderr, (
            refused.stderr
        )
        label = controlplane.kubectl("label", "pod", "mine", "-n", other, "slurm.warden.dev/slurm-job=7", bridge,
                                     "--dry-run=server", check=False)  # fmt: skip
        assert label.returncode != 0, label.stdout
        # why a pod waits it may say anywhere ("this namespace is not opted in"), for its scheduler's pods only
        condition = {"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                                "reason": "NamespaceNotOptedIn"}]}}  # fmt: skip
        as_bridge = controlplane.new_api_client(token=controlplane.service_account_token(namespace, sa))
        try:
            core = client.CoreV1Api(as_bridge)
            core.patch_namespaced_pod_status("mine", other, condition, dry_run="All")
            with pytest.raises(ApiException) as err:
                core.patch_namespaced_pod_status("theirs", other, condition, dry_run="All")
            assert "whose spec.schedulerName is warden-slurm, not theirs" in str(err.value.body)
        finally:
            as_bridge.close()
        node = controlplane.add_fake_nodes(1, prefix="bridge-policy")[0]
        binding = json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "mine"},
                              "target": {"apiVersion": "v1", "kind": "Node", "name": node}})  # fmt: skip
        for ns, allowed in ((other, False), (opted, True)):
            with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                f.write(binding)
                f.flush()
                bound = controlplane.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/mine/binding", "-f",
                                             f.name, bridge, check=False)  # fmt: skip
            assert (bound.returncode == 0) is allowed, (ns, bound.stderr)
    finally:
        for d in docs:
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                             "ValidatingAdmissionPolicyBinding"):  # fmt: skip
                controlplane.kubectl("delete", d["kind"], d["metadata"]["name"], "--ignore-not-found", check=False)
        for ns in (opted, other):
            controlplane.kubectl("delete", "namespace", ns, "--wait=false", check=False)

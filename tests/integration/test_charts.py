"""The Helm charts against the real helm binary and the real control plane.

- `helm lint --strict` of the three charts;
- what `helm template` renders (default values, examples/gpu-values.yaml, the operator's variants) is
  accepted by the API server (server-side apply, dry run) with the SlurmCluster CRD installed;
- wrong values fail `helm template` with helm's message naming the value;
- a real `helm install` of both charts, and `helm uninstall` of the CRD chart keeping the CRD;
- the operator chart's RBAC is enough: the REAL operator, authenticated as the chart's ServiceAccount
  (a bound token, nothing else), brings a SlurmCluster rendered by the slurm-cluster chart to Ready, and
  the same ServiceAccount is refused what an operator has no business doing.
"""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cases.malformed import SHARED_RESOURCES
from tests.support.operator import SERVICE_MONITOR_CRD, OperatorProcess, get_cluster, owned_objects, wait_ready
from warden.kube.kinds import BRIDGE_RULES
from warden_dev.controlplane import ControlPlane, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
OPERATOR_CHART = CHARTS / "slurm-operator"
CLUSTER_CHART = CHARTS / "slurm-cluster"
CRDS_CHART = CHARTS / "slurm-operator-crds"
GPU_VALUES = CLUSTER_CHART / "examples" / "gpu-values.yaml"
ALL_CHARTS = [CRDS_CHART, OPERATOR_CHART, CLUSTER_CHART]


class Helm:
    """The helm binary built next to kube-apiserver, with its own cache/config dirs, pointed at the
    control plane."""

    def __init__(self, cp: ControlPlane, home: Path) -> None:
        self.binary = cp.binary("helm")
        self.env = cp.env()
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            path = home / var.lower()
            path.mkdir(parents=True, exist_ok=True)
            self.env[var] = str(path)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def template(self, chart: Path, *args: str, release: str = "demo", namespace: str = "default") -> list[Any]:
        out = self.run("template", release, str(chart), "--namespace", namespace, *args).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="session")
def helm(controlplane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    if not Path(controlplane.binary("helm")).is_file():
        pytest.fail(f"no helm in {controlplane.bin_dir}: run make k8s-bins", pytrace=False)
    h = Helm(controlplane, tmp_path_factory.mktemp("helm"))
    # The CRD chart is the operator chart's dependency: vendor it (charts/*/charts/ is git-ignored).
    h.run("dependency", "build", str(OPERATOR_CHART))
    return h


def dry_run_apply(cp: ControlPlane, docs: list[Any]) -> str:
    """Server-side apply, dry run: admission, schema and CEL validation, nothing stored."""
    text = "\n---\n".join(yaml.safe_dump(d) for d in docs)
    proc = cp.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=helm-test", "-f", "-", input=text, check=False
    )
    assert proc.returncode == 0, f"API server refused the rendered chart:\n{proc.stderr}\n{text}"
    return proc.stdout


def by_kind(docs: list[Any], kind: str) -> list[Any]:
    return [d for d in docs if d["kind"] == kind]


# --- lint and render ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chart", ALL_CHARTS, ids=lambda c: c.name)
def test_lint_strict(helm: Helm, chart: Path) -> None:
    out = helm.run("lint", "--strict", str(chart))
    assert "0 chart(s) failed" in out.stdout, out.stdout


def test_lint_strict_gpu_example(helm: Helm) -> None:
    helm.run("lint", "--strict", str(CLUSTER_CHART), "-f", str(GPU_VALUES))


@pytest.mark.parametrize("values", [None, GPU_VALUES], ids=["defaults", "gpu-values"])
def test_cluster_chart_accepted_by_apiserver(
    helm: Helm, controlplane: ControlPlane, admission_namespace: str, values: Path | None
) -> None:
    args = ["-f", str(values)] if values else []
    docs = helm.template(CLUSTER_CHART, *args, namespace=admission_namespace)
    (sc,) = docs
    assert sc["kind"] == "SlurmCluster" and sc["metadata"]["name"] == "demo"
    labels = sc["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "Helm" and labels["app.kubernetes.io/part-of"] == "warden"
    assert labels["helm.sh/chart"] == "slurm-cluster-0.2.0"
    out = dry_run_apply(controlplane, docs)
    assert "slurmcluster.slurm.warden.dev/demo serverside-applied (server dry run)" in out, out
    if values is None:
        assert [(g["name"], g["replicas"]) for g in sc["spec"]["workerGroups"]] == [("cpu", 2)]
        assert sc["spec"]["login"]["replicas"] == 1
        assert "storageClassName" not in sc["spec"]["jail"], "null values must not reach the SlurmCluster"


def test_gpu_values_mirror_the_gpu_example(helm: Helm) -> None:
    (sc,) = helm.template(CLUSTER_CHART, "-f", str(GPU_VALUES))
    example = yaml.safe_load((ROOT / "docs/examples/gpu-two-groups.yaml").read_text())

    def subset(want: Any, have: Any, path: str) -> None:
        if isinstance(want, dict):
            for k, v in want.items():
                assert k in have, f"{path}.{k} missing in the chart's rendering"
                subset(v, have[k], f"{path}.{k}")
        elif isinstance(want, list):
            assert len(want) == len(have), path
            for i, (w, h) in enumerate(zip(want, have, strict=True)):
                subset(w, h, f"{path}[{i}]")
        else:
            assert want == have, f"{path}: example {want!r}, chart {have!r}"

    subset(example["spec"], sc["spec"], "spec")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--set", "metrics.enabled=false", "--set", "dashboards.enabled=false", "--set", "verbose=true"],
        ["--set", "crds.enabled=false"],
    ],
    ids=["defaults", "no-metrics", "no-crds"],
)
def test_operator_chart_accepted_by_apiserver(
    helm: Helm, controlplane: ControlPlane, admission_namespace: str, args: list[str]
) -> None:
    docs = helm.template(OPERATOR_CHART, *args, release="warden", namespace=admission_namespace)
    kinds = sorted(d["kind"] for d in docs)
    # the cluster-wide reads (discovery); the operator's rules in its own namespace alone (no watchNamespaces)
    expected = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
    expected += ["ServiceAccount"]
    # leader election: the Lease's Role and RoleBinding; two replicas: a PodDisruptionBudget
    expected += ["Role", "RoleBinding", "PodDisruptionBudget"]
    # what tenants may ask (templates/tenancy.yaml): its params, two policies and their bindings
    expected += ["ConfigMap", *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2]
    if "crds.enabled=false" not in args:
        expected += ["CustomResourceDefinition", "CustomResourceDefinition"]
    if "metrics.enabled=false" not in args:
        expected += ["Service", "ConfigMap"]  # the metrics Service, the Grafana dashboard
    assert kinds == sorted(expected)
    dry_run_apply(controlplane, docs)

    (deploy,) = by_kind(docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 2 and spec["strategy"] == {"type": "Recreate"}
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == "warden/operator:0.2.0"
    # one replica acts, the holder of the Lease the chart's Role names; the other stands by
    assert {"--leader-elect", "--leader-election-lease=warden-slurm-operator"} <= set(container["args"])
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}  # fmt: skip
    (role,) = [r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-leader-election")]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["warden-slurm-operator"],
            "verbs": ["get", "update"]} in role["rules"]  # fmt: skip
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": spec["selector"]}
    assert "--log-format=json" in container["args"] and f"--namespace={admission_namespace}" in container["args"]
    assert "--all-namespaces" not in container["args"]
    (manager,) = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "warden-slurm-operator"]
    assert manager["metadata"]["namespace"] == admission_namespace
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001 and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]


def test_operator_chart_namespaced_rbac_accepted(
    helm: Helm, controlplane: ControlPlane, admission_namespace: str
) -> None:
    docs = helm.template(
        OPERATOR_CHART, "--set", f"watchNamespaces={{{admission_namespace}}}", "--set", "crds.enabled=false",
        release="warden", namespace=admission_namespace,
    )  # fmt: skip
    (role,) = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert role["metadata"]["namespace"] == admission_namespace
    (manager,) = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-discovery")]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in manager["rules"]
    assert [d for d in docs if d["kind"] == "ClusterRole" and not d["metadata"]["name"].endswith("-discovery")] == []
    (deploy,) = by_kind(docs, "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={admission_namespace}" in args and "--all-namespaces" not in args
    dry_run_apply(controlplane, docs)


def test_operator_chart_with_the_bridge_accepted_by_apiserver(
    helm: Helm, controlplane: ControlPlane, admission_namespace: str
) -> None:
    """bridge.enabled: the bridge's Deployment, ServiceAccount and ClusterRole (exactly BRIDGE_RULES), and
    the operator told the ServiceAccount, so each cluster with spec.bridge lets it read its token."""
    ns = admission_namespace
    docs = helm.template(OPERATOR_CHART, "--set", "bridge.enabled=true", "--set", "bridge.schedulerName=slurm",
                         "--set", "bridge.interval=2", "--set", "crds.enabled=false", release="warden",
                         namespace=ns)  # fmt: skip
    bridge = [d for d in docs if d["metadata"]["name"] == "warden-slurm-operator-bridge"]
    assert sorted(d["kind"] for d in bridge) == ["ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount"]
    dry_run_apply(controlplane, docs)

    (role,) = [d for d in bridge if d["kind"] == "ClusterRole"]
    rules = {(g, r, v, "") for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
             for v in rule["verbs"]}  # fmt: skip
    assert rules == BRIDGE_RULES
    (binding,) = [d for d in bridge if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "warden-slurm-operator-bridge", "namespace": ns}]
    (deploy,) = [d for d in bridge if d["kind"] == "Deployment"]
    spec = deploy["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "warden-slurm-operator-bridge"
    (container,) = pod["containers"]
    assert container["image"] == "warden/operator:0.2.0" and container["command"] == ["warden-bridge"]
    assert container["args"] == ["--scheduler-name=slurm", "--interval=2", "--liveness-port=8081"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # the two Deployments never select each other's pods
    (operator,) = [d for d in by_kind(docs, "Deployment") if d is not deploy]
    assert operator["spec"]["selector"]["matchLabels"] != spec["selector"]["matchLabels"]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--bridge-service-account={ns}/warden-slurm-operator-bridge" in args
    assert not any("slurmrestd-url" in a for a in args + container["args"])

    plain = helm.template(OPERATOR_CHART, "--set", "crds.enabled=false", release="warden", namespace=ns)
    assert not [d for d in plain if "bridge" in d["metadata"]["name"]]
    (plain_operator,) = by_kind(plain, "Deployment")
    assert not any("bridge" in a for a in plain_operator["spec"]["template"]["spec"]["containers"][0]["args"])


def test_one_registry_value_moves_the_operators_image_and_the_clusters_default_images(helm: Helm) -> None:
    docs = helm.template(OPERATOR_CHART, "--set", "image.registry=registry.example.com:5000/hpc/warden",
                         "--set", "imagePullSecrets[0].name=regcred", release="warden")  # fmt: skip
    (deploy,) = by_kind(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com:5000/hpc/warden/operator:0.2.0"
    registry = [e for e in container["env"] if e["name"] == "WARDEN_IMAGE_REGISTRY"]
    assert registry == [{"name": "WARDEN_IMAGE_REGISTRY", "value": "registry.example.com:5000/hpc/warden"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (plain,) = by_kind(helm.template(OPERATOR_CHART, release="warden"), "Deployment")
    # the replica's own name and namespace only (leader election), no registry
    assert [e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]] == [
        "POD_NAME",
        "POD_NAMESPACE",
    ]


def test_rbac_has_no_wildcards_and_same_rules_in_both_modes(helm: Helm) -> None:
    wide = helm.template(OPERATOR_CHART, "--set", "watchAllNamespaces=true", release="warden")
    narrow = helm.template(OPERATOR_CHART, "--set", "watchNamespaces={a,b}", release="warden")
    for doc in wide + narrow:
        for rule in doc.get("rules", []):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), (doc["metadata"]["name"], rule)
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert doc["roleRef"]["name"] not in ("cluster-admin", "admin", "edit"), doc
    (cluster_role,) = [r for r in by_kind(wide, "ClusterRole") if not r["metadata"]["name"].endswith("-discovery")]
    roles = [r for r in by_kind(narrow, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]
    for role in roles:
        assert role["rules"] == cluster_role["rules"]


# --- wrong values ------------------------------------------------------------------------------------

WRONG_CLUSTER_VALUES = [
    # (args, words helm's error must contain: the value's path, and the offending value where shown)
    (["--set-json", 'workerGroups=[{"name":"cpu","replicas":-1}]'], ["/workerGroups/0/replicas", "-1"]),
    (["--set", "login.service.type=Ingress"], ["/login/service/type", "NodePort"]),
    (["--set", "workerGroup=oops"], ["additional properties 'workerGroup'"]),
    (["--set", "jail.sise=10Gi"], ["/jail", "'sise'"]),
    (["--set", "login.sshAuthorizedKeys[0]=hello"], ["/login/sshAuthorizedKeys/0", "'hello'"]),
    (["--set", "accounting.mode=Sometimes"], ["/accounting/mode", "InCluster"]),
    (["--set", "jail.size=lots"], ["/jail/size", "'lots'"]),
    (["--set", "images.pullPolicy=Sometimes"], ["/images/pullPolicy"]),
    (["--set", "login.service.nodePort=22"], ["/login/service/nodePort", "30,000"]),
    (["--set", "healthChecks.nccl.schedule=hourly"], ["/healthChecks/nccl/schedule", "'hourly'"]),
    (["--set", "healthChecks.nccl.minBusBandwidthGbps=0"], ["/healthChecks/nccl/minBusBandwidthGbps"]),
    (["--set-json", 'slurmConfig.extraLines=["NodeName=evil"]'], ["/slurmConfig/extraLines/0"]),
    (["--set-json", 'workerGroups=[{"name":"GPU_nodes"}]'], ["/workerGroups/0/name", "'GPU_nodes'"]),
    (["--set", "nameOverride=a-name-longer-than-twenty-four"], ["/nameOverride"]),
    (["--set", "login.replicas=many"], ["/login/replicas", "want integer"]),
    # cross-field rules, checked by the chart's templates
    (["--set", "jail.existingClaim=mine", "--set", "jail.storageClassName=fast"], ["jail.existingClaim"]),
    (["--set", "accounting.mode=External"], ["accounting.external"]),
    (["--set-json", 'partitions=[{"name":"p","workerGroups":["gpu"]}]'], ["partitions[0].workerGroups", '"gpu"']),
    (
        ["--set-json", 'workerGroups=[{"name":"a"},{"name":"a"}]'],
        ["workerGroups[1].name", "duplicate"],
    ),
]

WRONG_OPERATOR_VALUES = [
    (["--set", "replicaCount=6"], ["/replicaCount", "maximum"]),
    (["--set", "leaderElection.leaseDurationSeconds=1"], ["/leaderElection/leaseDurationSeconds", "minimum"]),
    (["--set", "rbac.create=yes"], ["/rbac/create", "want boolean"]),
    (["--set", "image.pullPolicy=Sometimes"], ["/image/pullPolicy"]),
    (["--set", "logFormat=xml"], ["/logFormat"]),
    (["--set", "watchNamespaces={Not_A_Namespace}"], ["/watchNamespaces/0", "'Not_A_Namespace'"]),
    (["--set", "securityContext.runAsNonRoot=false"], ["/securityContext/runAsNonRoot"]),
    (["--set", "metrics.service.type=Ingress"], ["/metrics/service/type"]),
    (["--set", "crds.enabeld=true"], ["/crds", "'enabeld'"]),
    (["--set", "image.registry=https://registry.example.com"], ["/image/registry", "does not match"]),
    (["--set", "bridge.interval=0"], ["/bridge/interval", "exclusiveMinimum"]),
    (["--set", "bridge.schedulerName=Warden_Slurm"], ["/bridge/schedulerName", "'Warden_Slurm'"]),
    (["--set", "bridge.enable=true"], ["/bridge", "'enable'"]),
]


@pytest.mark.parametrize(
    ("args", "words"), WRONG_CLUSTER_VALUES, ids=[" ".join(a)[:60] for a, _ in WRONG_CLUSTER_VALUES]
)
def test_wrong_cluster_values_rejected(helm: Helm, args: list[str], words: list[str]) -> None:
    proc = helm.run("template", "demo", str(CLUSTER_CHART), *args, check=False)
    assert proc.returncode != 0, f"helm accepted {args}:\n{proc.stdout}"
    for word in words:
        assert word in proc.stderr, f"{word!r} not in helm's error for {args}:\n{proc.stderr}"


@pytest.mark.parametrize(
    ("args", "words"), WRONG_OPERATOR_VALUES, ids=[" ".join(a)[:60] for a, _ in WRONG_OPERATOR_VALUES]
)
def test_wrong_operator_values_rejected(helm: Helm, args: list[str], words: list[str]) -> None:
    proc = helm.run("template", "warden", str(OPERATOR_CHART), *args, check=False)
    assert proc.returncode != 0, f"helm accepted {args}:\n{proc.stdout}"
    for word in words:
        assert word in proc.stderr, f"{word!r} not in helm's error for {args}:\n{proc.stderr}"


# --- real installs -----------------------------------------------------------------------------------


@pytest.fixture
def release_namespace(controlplane: ControlPlane, crd_installed: None) -> Iterator[str]:
    name = controlplane.create_namespace(f"h-{uuid.uuid4().hex[:8]}")
    yield name
    client.CoreV1Api(controlplane.api_client()).delete_namespace(name)


def test_helm_install_both_charts(helm: Helm, controlplane: ControlPlane, release_namespace: str) -> None:
    ns = release_namespace
    # The session's CRD is already installed (not by Helm): install the operator without it.
    out = helm.run("install", "warden", str(OPERATOR_CHART), "-n", ns, "--set", "crds.enabled=false")
    assert "crds.enabled is false" in out.stdout
    apps = client.AppsV1Api(controlplane.api_client())
    deploy = apps.read_namespaced_deployment("warden-slurm-operator", ns)
    assert deploy.spec.template.spec.service_account_name == "warden-slurm-operator"

    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0T3ikGxaWcqlsYzQJ1vAPvpmFn3aCVdHtpHqUxZHdb alice@example"
    out = helm.run("install", "demo", str(CLUSTER_CHART), "-n", ns, "--set", f"login.sshAuthorizedKeys[0]={key}")
    notes = out.stdout
    assert f"kubectl -n {ns} get slurmcluster demo -w" in notes
    assert f"kubectl -n {ns} get service demo-login -o jsonpath='{{.spec.ports[?(@.name==\"ssh\")].nodePort}}'" in notes
    assert 'sinfo -R -o "%100E %9u %19H %N"' in notes
    assert "nobody can log in" not in notes
    sc = get_cluster(controlplane.api_client(), ns, "demo")
    assert sc["spec"]["login"]["sshAuthorizedKeys"] == [key]
    assert sc["spec"]["workerGroups"][0]["name"] == "cpu"

    for svc_type, words in [("LoadBalancer", ".status.loadBalancer.ingress[0]"), ("ClusterIP", "port-forward")]:
        out = helm.run("upgrade", "demo", str(CLUSTER_CHART), "-n", ns, "--set", f"login.service.type={svc_type}")
        assert words in out.stdout, out.stdout
    helm.run("uninstall", "demo", "-n", ns)
    helm.run("uninstall", "warden", "-n", ns)
    with pytest.raises(ApiException) as e:
        apps.read_namespaced_deployment("warden-slurm-operator", ns)
    assert e.value.status == 404


def test_crd_chart_uninstall_keeps_the_crd(helm: Helm, controlplane: ControlPlane, release_namespace: str) -> None:
    ext = client.ApiextensionsV1Api(controlplane.api_client())
    helm.run("install", "crds", str(CRDS_CHART), "-n", release_namespace, "--take-ownership")
    crd = ext.read_custom_resource_definition("slurmclusters.slurm.warden.dev")
    assert crd.metadata.annotations["meta.helm.sh/release-name"] == "crds"
    out = helm.run("uninstall", "crds", "-n", release_namespace)
    assert "slurmclusters.slurm.warden.dev" in out.stdout + out.stderr  # helm says what it kept
    ext.read_custom_resource_definition("slurmclusters.slurm.warden.dev")  # still there


# --- the chart's RBAC runs the real operator ---------------------------------------------------------


def _sa_kubeconfig(cp: ControlPlane, token: str, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cp", "cluster": {"server": cp.server, "certificate-authority": str(cp.pki.ca_crt)}}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "cp", "user": "operator"}}],
        "current-context": "operator",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def _serves_service_monitors(api_client: Any) -> bool:
    try:
        found = client.ApisApi(api_client).get_api_versions().groups
    except client.exceptions.ApiException:
        return False
    return any(g.name == "monitoring.coreos.com" for g in found)


def test_chart_rbac_is_enough_for_the_real_operator(
    helm: Helm,
    controlplane: ControlPlane,
    cluster_namespace: str,
    api_client: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    # The operator's own namespace (where the chart puts its ServiceAccount), apart from the clusters'.
    op_ns = controlplane.create_namespace(f"op-{uuid.uuid4().hex[:8]}")
    request.addfinalizer(lambda: client.CoreV1Api(api_client).delete_namespace(op_ns))
    release = f"w{uuid.uuid4().hex[:6]}"
    docs = helm.template(
        OPERATOR_CHART, "--set", "crds.enabled=false", "--set", f"watchNamespaces={{{cluster_namespace}}}",
        "--set", "bridge.enabled=true", release=release, namespace=op_ns,
    )  # fmt: skip
    rbac_kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    rbac = [d for d in docs if d["kind"] in rbac_kinds]
    text = "\n---\n".join(yaml.safe_dump(d) for d in rbac)
    controlplane.kubectl("apply", "--server-side", "-f", "-", input=text)
    cluster_scoped = [(d["kind"], d["metadata"]["name"]) for d in rbac if d["kind"].startswith("Cluster")]

    def cleanup() -> None:
        for kind, name in cluster_scoped:
            controlplane.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)

    request.addfinalizer(cleanup)
    (deploy, bridge) = sorted(by_kind(docs, "Deployment"), key=lambda d: d["metadata"]["name"].endswith("-bridge"))
    (sa,) = [d for d in by_kind(docs, "ServiceAccount") if not d["metadata"]["name"].endswith("-bridge")]
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    bridge_sa = bridge["spec"]["template"]["spec"]["serviceAccountName"]
    (bridge_flag,) = [a for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"] if "bridge" in a]
    assert bridge_flag == f"--bridge-service-account={op_ns}/{bridge_sa}"
    token = controlplane.service_account_token(op_ns, sa["metadata"]["name"])
    kubeconfig = _sa_kubeconfig(controlplane, token, tmp_path / "operator.kubeconfig")

    # A ServiceMonitor CRD (stand-in), so the exporter's ServiceMonitor is made too (spec default: Auto).
    ext = client.ApiextensionsV1Api(api_client)
    crd: Any = copy.deepcopy(SERVICE_MONITOR_CRD)  # the API client takes plain dicts as well as its models
    try:
        ext.create_custom_resource_definition(crd)
        request.addfinalizer(lambda: ext.delete_custom_resource_definition(crd["metadata"]["name"]))
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    wait_for("servicemonitors served", lambda: _serves_service_monitors(api_client), 30)
    # The operator as the chart runs it (watching the namespaces of watchNamespaces), as nothing but the SA.
    # as the chart runs it, electing its leader on the chart's Lease with nothing but the chart's Role
    election = ["--leader-elect", f"--leader-election-namespace={op_ns}",
                f"--leader-election-lease={deploy['metadata']['name']}"]  # fmt: skip
    op = OperatorProcess(kubeconfig, cluster_namespace, controlplane.log_dir, extra_args=[bridge_flag, *election])
    op.start()
    request.addfinalizer(op.stop)

    # Every kind the operator can make: a GPU group with the NCCL check (CronJob, its ServiceAccount, Role
    # and RoleBinding) and in-cluster accounting (MariaDB, its generated password Secret) besides the
    # chart's default CPU group, whose nodes the bridge shares (the bridge's Role and RoleBinding).
    gpu_label = {"warden.dev/charts-rbac-gpu": "true"}
    controlplane.add_fake_nodes(1, gpu_label, gpu=8, prefix="kwok-charts-gpu")
    values = {
        "workerGroups": [
            {"name": "cpu", "replicas": 2, "resources": SHARED_RESOURCES},
            {"name": "gpu", "replicas": 1, "gpus": {"count": 8, "type": "h100"}, "nodeSelector": gpu_label},
        ],
        "healthChecks": {"nccl": {"enabled": True}},
        "accounting": {"mode": "InCluster"},
        "bridge": {"enabled": True, "workerGroups": ["cpu"]},
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    (sc,) = helm.template(CLUSTER_CHART, "-f", str(values_file), release="demo", namespace=cluster_namespace)
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "slurm.warden.dev", "v1alpha1", cluster_namespace, "slurmclusters", sc
    )
    obj = wait_ready(api_client, cluster_namespace, "demo", op)
    assert obj["status"]["workers"] == "3/3" and obj["status"]["login"] == "1/1"
    made = owned_objects(api_client, cluster_namespace, obj["metadata"]["uid"])
    for kind in ("CronJob", "Role", "RoleBinding", "ServiceAccount", "Secret", "NetworkPolicy", "Job"):
        assert any(key.startswith(f"{kind}/") for key in made), f"no {kind} made: {sorted(made)}"
    assert {"Role/demo-bridge", "RoleBinding/demo-bridge"} <= set(made), sorted(made)
    monitor = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", cluster_namespace, "servicemonitors", "demo-exporter"
    )
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    # the jail (kept by default, so owned by nobody): its volume labelled for a later claim of its name
    core = client.CoreV1Api(api_client)

    def jail_volume_kept() -> bool:
        claim = core.read_namespaced_persistent_volume_claim("demo-jail", cluster_namespace)
        volume = core.read_persistent_volume(claim.spec.volume_name) if claim.spec.volume_name else None
        return volume is not None and (volume.metadata.labels or {}).get("slurm.warden.dev/jail-claim") == "demo-jail"

    wait_for("the jail's volume labelled as kept", jail_volume_kept, 60, on_fail=op.log_tail)

    # Events come from the operator (kopf posts core/v1 Events as the SA).
    def reconciled_event() -> bool:
        events = client.CoreV1Api(api_client).list_namespaced_event(cluster_namespace).items
        return any(e.reason == "Reconciled" and e.involved_object.name == "demo" for e in events)

    wait_for("a Reconciled Event", reconciled_event, 30, on_fail=op.log_tail)
    events = client.CoreV1Api(api_client).list_namespaced_event(cluster_namespace).items
    failures = [e.message for e in events if e.reason == "ApplyFailed"]
    assert failures == [], failures
    log = op.log_path.read_text(errors="replace")
    # kopf's fallbacks ("Not enough permissions to ..."), the API's refusals, and urllib3's request lines.
    for refusal in ("Not enough permissions", "Forbidden", "is forbidden", 'HTTP/1.1" 403'):
        assert refusal not in log, f"the operator was refused something ({refusal!r}):\n{op.log_tail(80)}"

    # Least privilege: the same identity cannot touch what an operator has no business with.
    sa_api = controlplane.new_api_client(token=token)
    try:
        core = client.CoreV1Api(sa_api)
        # the API client takes plain dicts as well as its models
        pod: Any = {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}}
        binding: Any = {
            "metadata": {"name": f"{release}-escalate"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": op_ns}],
        }
        refused: dict[str, Callable[[], object]] = {
            # it lists nodes (which are cordoned), never changes one
            "cordon a node": lambda: core.patch_node("kwok-node-1", {"spec": {"unschedulable": True}}, dry_run="All"),
            "delete a namespace": lambda: core.delete_namespace(cluster_namespace, dry_run="All"),
            "read secrets outside watched namespaces": lambda: core.list_namespaced_secret(op_ns),
            # Secrets of the watched namespace are listed and watched (a deleted generated Secret is made
            # again), but never changed or deleted: the operator creates them once.
            "delete a secret in the watched namespace": lambda: core.delete_collection_namespaced_secret(
                cluster_namespace, dry_run="All"
            ),
            # worker pods are the operator's to make (WorkerSets), in the namespaces it watches only
            "create pods outside watched namespaces": lambda: core.create_namespaced_pod(op_ns, pod, dry_run="All"),
            "bind cluster-admin": lambda: client.RbacAuthorizationV1Api(sa_api).create_cluster_role_binding(
                binding, dry_run="All"
            ),
        }
        for what, call in refused.items():
            with pytest.raises(ApiException) as e:
                call()
            assert e.value.status == 403, f"{what}: expected 403, got {e.value.status}"
    finally:
        sa_api.close()

    # The bridge, as its own ServiceAccount, reads its token Secret in the cluster's namespace and no other
    # Secret (the Slurm sync, which writes the token, is off here: the Secret is made by hand).
    token_secret: Any = {"metadata": {"name": "demo-bridge-token"}, "data": {"token": "dG9rZW4="}}
    client.CoreV1Api(api_client).create_namespaced_secret(cluster_namespace, token_secret)
    bridge_api = controlplane.new_api_client(token=controlplane.service_account_token(op_ns, bridge_sa))
    try:
        bridge_core = client.CoreV1Api(bridge_api)
        assert bridge_core.read_namespaced_secret("demo-bridge-token", cluster_namespace).data == {"token": "dG9rZW4="}
        for read in (lambda: bridge_core.read_namespaced_secret("demo-jwt-key", cluster_namespace),
                     lambda: bridge_core.list_namespaced_secret(cluster_namespace)):  # fmt: skip
            with pytest.raises(ApiException) as e:
                read()
            assert e.value.status == 403
    finally:
        bridge_api.close()

"""The operator chart's RBAC reaches the namespaces the operator manages and no other, by default: the rules
the chart renders, applied to the real API server, asked with `kubectl auth can-i --as` the operator's
ServiceAccount in a namespace inside and outside that scope (kube-system among them)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from warden_dev.controlplane import ControlPlane

OPERATOR_CHART = Path(__file__).resolve().parents[2] / "charts" / "slurm-operator"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: what makes an identity that holds it in a namespace the master of that namespace and of whatever runs there
POWERS = [("create", "pods"), ("get", "secrets"), ("create", "roles"), ("delete", "services")]


def _helm(cp: ControlPlane, *args: str) -> str:
    proc = subprocess.run([cp.binary("helm"), *args], env=cp.env(), capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def chart_rbac(controlplane: ControlPlane, crd_installed: None) -> Iterator[Callable[..., str]]:
    """``chart_rbac(*sets)``: the chart's RBAC objects applied for a release in a namespace of its own;
    returns the ServiceAccount's user name."""
    _helm(controlplane, "dependency", "build", str(OPERATOR_CHART))
    made: list[tuple[str, str]] = []
    namespaces: list[str] = []

    def install(*sets: str) -> str:
        ns = controlplane.create_namespace(f"op-{uuid.uuid4().hex[:8]}")
        namespaces.append(ns)
        release = f"r{uuid.uuid4().hex[:6]}"
        args = [a for s in sets for a in ("--set", s)]
        out = _helm(controlplane, "template", release, str(OPERATOR_CHART), "-n", ns, "--set", "crds.enabled=false",
                    *args)  # fmt: skip
        docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] in RBAC_KINDS]
        controlplane.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
        made.extend((d["kind"], d["metadata"]["name"]) for d in docs if d["kind"].startswith("Cluster"))
        (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
        return f"system:serviceaccount:{ns}:{sa['metadata']['name']}"

    yield install
    for kind, name in made:
        controlplane.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
    for ns in namespaces:
        client.CoreV1Api(controlplane.api_client()).delete_namespace(ns)


def can(cp: ControlPlane, who: str, verb: str, resource: str, namespace: str) -> bool:
    proc = cp.kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={who}", check=False)
    assert proc.stdout.strip() in ("yes", "no"), proc.stdout + proc.stderr
    return proc.stdout.strip() == "yes"


def test_by_default_the_operator_holds_its_own_namespace_alone(
    controlplane: ControlPlane, chart_rbac: Callable[..., str], namespace: str
) -> None:
    who = chart_rbac()
    own = who.split(":")[2]
    for verb, resource in POWERS:
        assert can(controlplane, who, verb, resource, own), f"cannot {verb} {resource} in {own}"
        for other in (namespace, "kube-system", "default"):
            assert not can(controlplane, who, verb, resource, other), f"may {verb} {resource} in {other}"
    # cluster-wide, only reads (and the jail's volumes): never a node changed, a namespace made
    assert can(controlplane, who, "list", "nodes", "default") and not can(controlplane, who, "patch", "nodes", "")
    assert can(controlplane, who, "watch", "nodes", "default")  # their conditions (spec.nodeConditionDrains)
    assert not can(controlplane, who, "create", "namespaces", "")
    assert not can(controlplane, who, "create", "clusterrolebindings", "")


def test_watched_namespaces_are_held_and_no_other(
    controlplane: ControlPlane, chart_rbac: Callable[..., str], namespace: str
) -> None:
    outside = controlplane.create_namespace(f"o-{uuid.uuid4().hex[:8]}")
    try:
        who = chart_rbac(f"watchNamespaces[0]={namespace}")
        for verb, resource in POWERS:
            assert can(controlplane, who, verb, resource, namespace), f"cannot {verb} {resource} in {namespace}"
            for other in (outside, "kube-system", who.split(":")[2]):
                assert not can(controlplane, who, verb, resource, other), f"may {verb} {resource} in {other}"
    finally:
        client.CoreV1Api(controlplane.api_client()).delete_namespace(outside)


def test_every_namespace_only_when_asked(
    controlplane: ControlPlane, chart_rbac: Callable[..., str], namespace: str
) -> None:
    """watchAllNamespaces: the rules everywhere, kube-system included (docs/helm.md says what that amounts to)."""
    who = chart_rbac("watchAllNamespaces=true")
    for ns in (namespace, "kube-system"):
        assert can(controlplane, who, "create", "pods", ns) and can(controlplane, who, "get", "secrets", ns)

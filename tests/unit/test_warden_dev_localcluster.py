"""warden_dev.localcluster's registry parts: the registry's and containerd's configuration, and where
install_charts takes the charts from (the working tree's charts/ or a registry hack/push.sh pushed to)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from warden_dev.localcluster import (
    CHARTS_DIR,
    REGISTRY,
    REGISTRY_ADDRESS,
    Kube,
    chart_args,
    containerd_config,
    install_charts,
    plain_http,
    project_version,
    registry_config,
    registry_hosts_toml,
)


def test_the_registry_is_on_loopback_under_warden() -> None:
    assert REGISTRY_ADDRESS == "127.0.0.1:5000"
    assert REGISTRY == "127.0.0.1:5000/warden"


def test_registry_config_serves_the_storage_on_loopback_alone(tmp_path: Path) -> None:
    conf = yaml.safe_load(registry_config(tmp_path / "registry", secret="s3cret"))
    assert conf["version"] == 0.1
    assert conf["storage"]["filesystem"] == {"rootdirectory": str(tmp_path / "registry")}
    assert conf["http"] == {"addr": "127.0.0.1:5000", "secret": "s3cret"}
    # nothing else: no auth, no redis, no notifications, no storage health check
    assert set(conf) == {"version", "log", "storage", "http"}
    assert "redis" not in conf["storage"]["cache"].values()
    assert yaml.safe_load(registry_config(tmp_path))["http"]["secret"]  # a random one by default


def test_containerd_pulls_from_the_registry_over_plain_http(tmp_path: Path) -> None:
    cri = tomllib.loads(containerd_config(tmp_path))["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"] == {"config_path": str(tmp_path / "certs.d")}
    hosts = tomllib.loads(registry_hosts_toml())
    assert hosts == {
        "server": "http://127.0.0.1:5000",
        "host": {"http://127.0.0.1:5000": {"capabilities": ["pull", "resolve"]}},
    }


def test_plain_http_for_loopback_registries_or_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_REGISTRY_PLAIN_HTTP", raising=False)
    assert plain_http("127.0.0.1:5000/warden")
    assert plain_http("localhost:5000/warden")
    assert plain_http("localhost/warden")
    assert not plain_http("registry.example.com/warden")
    assert not plain_http("registry.example.com:5000/warden")
    monkeypatch.setenv("WARDEN_REGISTRY_PLAIN_HTTP", "1")
    assert plain_http("registry.example.com:5000/warden")


def test_chart_args_name_a_directory_or_an_oci_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_REGISTRY_PLAIN_HTTP", raising=False)
    assert chart_args(Path("/src/charts"), "slurm-cluster") == ["/src/charts/slurm-cluster"]
    assert chart_args("127.0.0.1:5000/warden", "slurm-operator") == [
        "oci://127.0.0.1:5000/warden/charts/slurm-operator", "--version", project_version(), "--plain-http",
    ]  # fmt: skip
    assert chart_args("registry.example.com/warden", "slurm-operator-crds", "1.2.3") == [
        "oci://registry.example.com/warden/charts/slurm-operator-crds", "--version", "1.2.3",
    ]  # fmt: skip


@dataclass(frozen=True)
class RecordingKube(Kube):
    """Kube that records every helm and kubectl call and answers nothing (no CRD there yet)."""

    calls: list[tuple[str, ...]] = field(default_factory=list)

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        self.calls.append(("helm", *args))
        return ""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        self.calls.append(("kubectl", *args))
        return ""


def helm_installs(kube: RecordingKube) -> list[tuple[str, ...]]:
    return [c[1:] for c in kube.calls if c[:3] == ("helm", "upgrade", "--install")]


def test_install_charts_from_the_registry_the_kube_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_REGISTRY_PLAIN_HTTP", raising=False)
    kube = RecordingKube(tmp_path / "kubeconfig", tmp_path, REGISTRY)
    install_charts(kube, "ns", "ns", {"nameOverride": "demo"}, tmp_path / "values.json", operator_release="op",
                   crds="chart", operator_set={"slurmSync.registerTimeoutSeconds": "90"})  # fmt: skip
    crds, operator, cluster = helm_installs(kube)
    version = project_version()
    oci = f"oci://{REGISTRY}/charts"
    assert crds[2:6] == ("slurm-operator-crds", f"{oci}/slurm-operator-crds", "--version", version)
    assert operator[2:7] == ("op", f"{oci}/slurm-operator", "--version", version, "--plain-http")
    sets = [operator[i + 1] for i, a in enumerate(operator) if a == "--set"]
    assert sets == ["crds.enabled=false", "watchNamespaces[0]=ns", f"image.registry={REGISTRY}",
                    "slurmSync.registerTimeoutSeconds=90"]  # fmt: skip
    assert cluster[2:7] == ("demo", f"{oci}/slurm-cluster", "--version", version, "--plain-http")
    assert not any(c[:3] == ("helm", "dependency", "build") for c in kube.calls)  # packaged with its subchart


def test_install_charts_from_a_directory(tmp_path: Path) -> None:
    kube = RecordingKube(tmp_path / "kubeconfig", tmp_path, REGISTRY)  # a directory given wins over the registry
    install_charts(kube, "ns", "ns", {}, tmp_path / "values.json", cluster=False, charts=CHARTS_DIR)
    (operator,) = helm_installs(kube)
    assert operator[2:4] == ("slurm-operator", str(CHARTS_DIR / "slurm-operator"))
    assert not any(a.startswith("image.registry=") for a in operator)
    assert ("helm", "dependency", "build", str(CHARTS_DIR / "slurm-operator")) in kube.calls
    plain = RecordingKube(tmp_path / "kubeconfig", tmp_path)  # no registry: the working tree's charts, as before
    install_charts(plain, "ns", "ns", {}, tmp_path / "values.json")
    assert [c[3] for c in helm_installs(plain)] == [
        str(CHARTS_DIR / "slurm-operator"),
        str(CHARTS_DIR / "slurm-cluster"),
    ]

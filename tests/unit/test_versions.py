"""One version for the whole release: the operator, its images' tag, its charts and their dependency."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from warden import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_the_operator_the_charts_and_the_images_carry_one_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == version
    for chart in ("slurm-operator-crds", "slurm-operator", "slurm-cluster"):
        meta = yaml.safe_load((ROOT / "charts" / chart / "Chart.yaml").read_text())
        assert (meta["version"], meta["appVersion"]) == (version, version), chart
        for dependency in meta.get("dependencies") or []:
            assert dependency["version"] == version, (chart, dependency)
    lock = yaml.safe_load((ROOT / "charts" / "slurm-operator" / "Chart.lock").read_text())
    assert [d["version"] for d in lock["dependencies"]] == [version]
    dockerfiles = [*ROOT.glob("images/*/Dockerfile"), ROOT / "jail/Dockerfile", ROOT / "jail/gpu/Dockerfile"]
    defaults = {line.split("=", 1)[1] for f in dockerfiles for line in f.read_text().splitlines()
                if line.startswith("ARG WARDEN_VERSION=")}  # fmt: skip
    assert defaults == {version}


def test_the_changelog_names_the_release_and_the_previous_one_is_tagged() -> None:
    """The previous release an upgrade starts from (hack/versions.env) is in the changelog; the version
    in the works has its own section."""
    pinned = dict(
        line.split("=", 1) for line in (ROOT / "hack/versions.env").read_text().splitlines() if "=" in line
        and not line.startswith("#")
    )  # fmt: skip
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {pinned['WARDEN_PREVIOUS_RELEASE']}\n" in changelog
    assert f"## {__version__} " in changelog or f"## {__version__}\n" in changelog
    assert len(pinned["WARDEN_PREVIOUS_RELEASE_COMMIT"]) == 40

"""SchedMD's own test suite for Slurm 24.11 run against a dataplane cluster: the archive, the exclusion
list, the suite's Python dependencies, the run in the jail and its results (docs/conformance.md).

The suite's code never enters the repository: the pristine release archive (../shared/thirdparty/,
checked by sha256) is unpacked in the jail at test time. Its Python dependencies are pinned in
requirements.txt; their wheels are downloaded on the host (the only machine that reaches a package
index) into the cache and installed in the jail from there.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden_dev.controlplane import cache_dir
from warden_dev.dockercluster import REPO, DockerCluster, DockerError, docker

HERE = Path(__file__).resolve().parent
EXCLUDED = HERE / "excluded.txt"
REQUIREMENTS = HERE / "requirements.txt"
PLUGIN = HERE / "report_plugin.py"
DRIVER = HERE / "jail_driver.py"

ARCHIVE_NAME = "slurm-testsuite-24.11.5.tar.gz"
ARCHIVE_SHA256 = "9f988d884f2b84174fa37aa0989beb4e24aeb93b7bf7a297bf5c81aeab9428fb"
#: the suite inside the archive (its rootdir: tox.ini, conftest.py, lib/atf.py, tests/)
SUITE_PATH = "slurm-testsuite-24.11.5/testsuite/python"

#: why a test may be excluded; `warden-defect` only for a defect not fixed yet (and reported)
CATEGORIES = {
    "auto-config": "needs the suite to rewrite slurm.conf or restart daemons (auto-config mode)",
    "sudo": "needs sudo (or root) for the test user",
    "nodes": "needs more, or bigger, nodes than the dataplane cluster has",
    "config": "needs a Slurm setting the cluster does not have, and does not skip itself",
    "daemon": "needs a daemon or tool the cluster does not run or ship",
    "debian": "Debian's packaging differs from upstream's (version string, paths)",
    "kubernetes": "needs the Kubernetes side (the e2e tier's), not the Docker dataplane",
    "slow": "too slow for the tier's time budget",
    "warden-defect": "fails because of a Warden defect that is not fixed yet",
}

#: the tier's default budgets (seconds): per suite test (pytest-timeout) and for the whole run
TEST_TIMEOUT = int(os.environ.get("WARDEN_CONFORMANCE_TEST_TIMEOUT", "120"))
RUN_TIMEOUT = int(os.environ.get("WARDEN_CONFORMANCE_RUN_TIMEOUT", "900"))
#: more options for the suite's pytest, after the tier's (`-k`, another `--basetemp`: the last one wins)
EXTRA_ARGS = shlex.split(os.environ.get("WARDEN_CONFORMANCE_ARGS", ""))
#: the suite's test files or node ids to run (all when empty)
SELECTED = shlex.split(os.environ.get("WARDEN_CONFORMANCE_TESTS", ""))


class ConformanceError(RuntimeError):
    pass


# --- the archive ------------------------------------------------------------------------------
def archive_path() -> Path:
    """The release archive: $WARDEN_SLURM_TESTSUITE_ARCHIVE, else ../shared/thirdparty/ beside the repo."""
    default = REPO.parent / "shared" / "thirdparty" / ARCHIVE_NAME
    return Path(os.environ.get("WARDEN_SLURM_TESTSUITE_ARCHIVE", default))


def check_archive(path: Path) -> None:
    if not path.is_file():
        raise ConformanceError(f"no {ARCHIVE_NAME} at {path} (set WARDEN_SLURM_TESTSUITE_ARCHIVE)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != ARCHIVE_SHA256:
        raise ConformanceError(f"{path}: sha256 {digest}, expected {ARCHIVE_SHA256}")


def suite_files(path: Path) -> list[str]:
    """The suite's test files, as its node ids start (`tests/test_101_1.py`), from the archive's listing."""
    prefix = f"{SUITE_PATH}/"
    with tarfile.open(path) as tar:
        names = [m.name.removeprefix(prefix) for m in tar.getmembers() if m.name.startswith(prefix)]
    return sorted((n for n in names if re.fullmatch(r"tests/test_[^/]+\.py", n)), key=_natural)


def _natural(name: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# --- the exclusion list -----------------------------------------------------------------------
@dataclass(frozen=True)
class Exclusion:
    """One line of excluded.txt: a test file or node id (prefix) and why it is not run."""

    target: str
    reason: str
    line: int

    @property
    def category(self) -> str:
        return self.reason.split(":", 1)[0]

    @property
    def file(self) -> str:
        return self.target.split("::", 1)[0]

    def covers(self, nodeid: str) -> bool:
        """As pytest's --deselect matches: the node id starts with the target."""
        return nodeid.startswith(self.target)


def parse_exclusions(text: str) -> list[Exclusion]:
    """`TARGET  CATEGORY: reason` per line; `#` comments and blank lines are ignored. Raises on a line
    without a known category or with a target listed twice."""
    out: list[Exclusion] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise ConformanceError(f"excluded.txt:{number}: no reason: {raw!r}")
        target, reason = parts
        category = reason.split(":", 1)[0]
        if category not in CATEGORIES or ":" not in reason or not reason.split(":", 1)[1].strip():
            raise ConformanceError(
                f"excluded.txt:{number}: reason must be `CATEGORY: why` with CATEGORY one of "
                f"{', '.join(CATEGORIES)}: {raw!r}"
            )
        if not re.fullmatch(r"tests/test_[^/:]+\.py(::\S+)?", target):
            raise ConformanceError(f"excluded.txt:{number}: not a suite test file or node id: {target!r}")
        if target in seen:
            raise ConformanceError(f"excluded.txt:{number}: {target} listed twice")
        seen.add(target)
        out.append(Exclusion(target, reason, number))
    return out


def load_exclusions(path: Path = EXCLUDED) -> list[Exclusion]:
    return parse_exclusions(path.read_text())


# --- the suite's Python dependencies ----------------------------------------------------------
def wheel_dir(python_version: str, requirements: Path = REQUIREMENTS) -> Path:
    """The pinned wheels (requirements.txt) in the cache, downloaded once per requirements file: pure
    Python (`py3-none-any`) wheels for the jail's `python_version` ("3.13"), hashes checked."""
    key = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    target = cache_dir() / "conformance" / f"wheels-{key}-py{python_version}"
    marker = target / ".complete"
    if marker.is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    cmd += ["--no-deps", "--require-hashes", "-r", str(requirements), "-d", str(target)]
    cmd += ["--only-binary=:all:", "--platform", "any", "--implementation", "py", "--abi", "none"]
    cmd += ["--python-version", python_version]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise ConformanceError(
            f"downloading the suite's wheels failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr[-3000:]}"
        )
    marker.write_text(key + "\n")
    return target


# --- the run in the jail ----------------------------------------------------------------------
def jail_mount(cluster: DockerCluster, pod: str) -> str:
    """Where a pod's container mounts the jail volume (the login pod: the root its sessions chroot to)."""
    p = cluster.pods[pod]
    volumes = {
        v["name"] for v in p.volumes if (v.get("persistentVolumeClaim") or {}).get("claimName") == cluster.names.jail
    }
    for m in p.spec.get("volumeMounts", []):
        if m["name"] in volumes:
            return str(m["mountPath"])
    raise ConformanceError(f"pod {pod} does not mount the jail")


def testsuite_conf(suite_dir: str) -> str:
    """The suite's testsuite.conf for the jail: Debian's Slurm (binaries in /usr/bin and /usr/sbin),
    the cluster's config in /etc/slurm; no Slurm source or build tree (the suite's own dir stands in)."""
    return f"SlurmSourceDir={suite_dir}\nSlurmBuildDir={suite_dir}\nSlurmInstallDir=/usr\nSlurmConfigDir=/etc/slurm\n"


@dataclass(frozen=True)
class Layout:
    """Where everything lives in the jail for one run: /var/tmp/conformance-<run>/ (one volume shared
    by every node, outside /home), owned by the test user."""

    root: str

    @property
    def archive(self) -> str:
        return f"{self.root}/{ARCHIVE_NAME}"

    @property
    def suite(self) -> str:
        return f"{self.root}/{SUITE_PATH}"

    @property
    def venv(self) -> str:
        return f"{self.root}/venv"

    @property
    def conf(self) -> str:
        return f"{self.root}/testsuite.conf"

    @property
    def plugins(self) -> str:
        """report_plugin.py and jail_driver.py (the tier's own code, on the suite's PYTHONPATH)."""
        return f"{self.root}/plugins"

    @property
    def config(self) -> str:
        return f"{self.root}/driver.json"


def driver_config(
    layout: Layout,
    exclusions: Sequence[Exclusion],
    test_timeout: int = TEST_TIMEOUT,
    budget: int = RUN_TIMEOUT,
    args: Sequence[str] = (),
    tests: Sequence[str] = (),
) -> dict[str, Any]:
    """What jail_driver.py runs: the suite in local-config mode, every excluded test deselected."""
    return {
        "suite": layout.suite,
        "out": layout.root,
        "budget": budget,
        "test_timeout": test_timeout,
        "deselect": [e.target for e in exclusions],
        "args": list(args),
        "tests": list(tests),
        "env": {"SLURM_TESTSUITE_CONF": layout.conf, "PYTHONPATH": layout.plugins},
    }


def stage(cluster: DockerCluster, layout: Layout, archive: Path, wheels: Path, owner: str, config: Any) -> None:
    """Copy the archive, the wheels, requirements.txt, testsuite.conf, the driver, its config and the
    report plugin into the jail (through the login pod's jail mount), owned by `owner`."""
    login = f"{cluster.names.login}-0"
    with tempfile.TemporaryDirectory(prefix="warden-conformance-stage-") as tmp:
        d = Path(tmp)
        (d / ARCHIVE_NAME).write_bytes(archive.read_bytes())
        (d / "wheels").mkdir()
        for w in wheels.glob("*.whl"):
            (d / "wheels" / w.name).write_bytes(w.read_bytes())
        (d / "requirements.txt").write_text(REQUIREMENTS.read_text())
        (d / Path(layout.conf).name).write_text(testsuite_conf(layout.suite))
        (d / Path(layout.config).name).write_text(json.dumps(config, indent=1))
        plugins = d / Path(layout.plugins).name
        plugins.mkdir()
        for f in (PLUGIN, DRIVER):
            (plugins / f.name).write_text(f.read_text())
        target = jail_mount(cluster, login) + layout.root
        cluster.exec(login, f"mkdir -p {shlex.quote(target)}")
        docker("cp", f"{d}/.", f"{cluster.container(login)}:{target}", timeout=300)
    # as root in the jail (a session on the login node), so the name resolves in the jail's passwd
    cluster.ssh("root", f"chown -R {owner}: {shlex.quote(layout.root)}")


def install_script(layout: Layout) -> str:
    """The test user's commands: unpack the suite, a venv with the pinned wheels, nothing from a network."""
    q = shlex.quote
    return (
        f"set -e; cd {q(layout.root)}; tar -xzf {q(layout.archive)}; python3 -m venv {q(layout.venv)}; "
        f"{q(layout.venv)}/bin/python -m pip install --quiet --disable-pip-version-check --no-index "
        f"--find-links wheels --require-hashes -r requirements.txt"
    )


def run_script(layout: Layout) -> str:
    """The test user's command running the driver (with the suite's venv)."""
    q = shlex.quote
    return f"{q(layout.venv)}/bin/python {q(layout.plugins)}/{DRIVER.name} {q(layout.config)}"


# --- results ----------------------------------------------------------------------------------
@dataclass
class TestResult:
    nodeid: str
    outcome: str  # passed, failed, error, skipped
    seconds: float
    reason: str = ""
    output: str = ""

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]


@dataclass
class Results:
    """The suite's run, read back from the report plugin's JSON."""

    collected: int
    deselected: list[str]
    tests: dict[str, TestResult]
    collect_errors: dict[str, str]
    exitstatus: int | None
    seconds: float
    #: per suite file the driver ran (or did not): exitstatus, seconds, note (why it stopped)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    out_dir: Path | None = None
    exclusions: list[Exclusion] = field(default_factory=list)

    @classmethod
    def from_report(cls, report: Mapping[str, Any], exclusions: Sequence[Exclusion] = ()) -> Results:
        tests = {
            nodeid: TestResult(nodeid, t["outcome"], float(t["seconds"]), t.get("reason", ""), t.get("output", ""))
            for nodeid, t in report["tests"].items()
        }
        return cls(
            collected=int(report["collected"]),
            deselected=list(report["deselected"]),
            tests=tests,
            collect_errors=dict(report["collect_errors"]),
            exitstatus=report.get("exitstatus"),
            seconds=float(report["seconds"]),
            files=dict(report.get("files", {})),
            exclusions=list(exclusions),
        )

    def count(self, *outcomes: str) -> int:
        return sum(1 for t in self.tests.values() if t.outcome in outcomes)

    @property
    def failed(self) -> list[TestResult]:
        return [t for t in self.tests.values() if t.outcome in ("failed", "error")]

    def in_file(self, file: str) -> list[TestResult]:
        return [t for t in self.tests.values() if t.file == file]

    def note(self, file: str) -> str:
        """Why the driver stopped a file or did not run it ("" when it ran to its end)."""
        return str(self.files.get(file, {}).get("note", ""))

    def summary_line(self) -> str:
        failed = self.count("failed", "error") + len(self.collect_errors)
        failed += sum(1 for f in self.files if self.note(f) and not self.in_file(f))
        return (
            f"conformance: {self.count('passed')} passed, {failed} failed, {self.count('skipped')} skipped, "
            f"{len(self.deselected)} excluded (of {self.collected} collected) in {self.seconds:.0f} s"
        )

    def skip_reasons(self) -> list[tuple[int, str]]:
        """(count, reason) of the suite's own skips, most frequent first."""
        c = collections.Counter(_short(t.reason) for t in self.tests.values() if t.outcome == "skipped")
        return [(n, r) for r, n in c.most_common()]

    def excluded_by_category(self) -> list[tuple[str, int]]:
        """(category, deselected tests) over the exclusion list."""
        c: collections.Counter[str] = collections.Counter()
        for nodeid in self.deselected:
            e = next((e for e in self.exclusions if e.covers(nodeid)), None)
            c[e.category if e else "?"] += 1
        return sorted(c.items())

    def slowest(self, n: int = 10) -> list[TestResult]:
        return sorted(self.tests.values(), key=lambda t: -t.seconds)[:n]

    def report_lines(self) -> list[str]:
        """What the tier prints at its end: the summary line, skips by reason, exclusions by category,
        the slowest tests and every failure's id."""
        lines = [self.summary_line()]
        if self.out_dir:
            lines.append(f"  suite log, report and junit: {self.out_dir}")
        lines.append("  excluded by category: " + ", ".join(f"{c} {n}" for c, n in self.excluded_by_category()))
        lines.append("  skipped by the suite itself:")
        lines += [f"    {n:4d}  {r}" for n, r in self.skip_reasons()]
        lines.append("  slowest: " + ", ".join(f"{t.nodeid} {t.seconds:.0f}s" for t in self.slowest(8)))
        for nodeid in self.collect_errors:
            lines.append(f"  COLLECTION ERROR {nodeid}")
        lines += [f"  {self.note(f).upper()}: {f}" for f in self.files if self.note(f)]
        lines += [f"  {t.outcome.upper()} {t.nodeid}" for t in self.failed]
        return lines


def _short(reason: str, width: int = 110) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= width else reason[: width - 3] + "..."


def read_back(cluster: DockerCluster, layout: Layout, out_dir: Path) -> dict[str, Any]:
    """The driver's report.json, with the suite's log, the per-file reports and junit files, copied from
    the jail into `out_dir` (kept after the run)."""
    login = f"{cluster.names.login}-0"
    base = jail_mount(cluster, login) + layout.root
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("report.json", "suite.log", "reports", "junit"):
        r = docker("cp", f"{cluster.container(login)}:{base}/{name}", str(out_dir), check=False, timeout=120)
        if r.returncode != 0 and name == "report.json":
            raise DockerError(f"copying {name} out of the jail: {r.stderr.strip()}")
    report: dict[str, Any] = json.loads((out_dir / "report.json").read_text())
    return report


def write_summary(lines: Iterable[str]) -> None:
    """Append the tier's summary to $WARDEN_TIER_SUMMARY (.ci/run prints it after the stage table)."""
    path = os.environ.get("WARDEN_TIER_SUMMARY")
    if path:
        with open(path, "a") as f:
            f.writelines(f"{line}\n" for line in lines)

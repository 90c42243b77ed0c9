"""Runs SchedMD's test suite in the jail, as the test user, one pytest process per test file (as Slurm's
own testsuite/run-tests does), and merges what report_plugin wrote into one report.

    python3 jail_driver.py CONFIG.json

One process per file, not one for the whole suite: in local-config mode the suite cancels, at the end of
every module, every job the run has submitted so far and waits for each to be DONE, failing when
slurmctld no longer knows one (MinJobAge, 300 s by default): a single long run fails every module that
ends more than five minutes after the first job, and asks slurmctld about hundreds of jobs per module.

CONFIG (written by the tier, tests/conformance/suite.py): suite (the suite's directory), out (where the
reports, junit files and the log go), budget (seconds for everything), test_timeout (pytest-timeout per
test), deselect (node ids or prefixes), args (more pytest options), tests (files or node ids to run; all
when empty), env (for pytest). Runs only with the standard library and the suite's venv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PLUGIN = "report_plugin"


def pytest_cmd(cfg: dict[str, Any], out: Path) -> list[str]:
    """The options run-tests-python passes, in local-config mode, with the tier's."""
    cmd = [sys.executable, "-m", "pytest", "--local-config", "--no-color", "-p", "no:cacheprovider"]
    cmd += ["-v", "-rfE", "--disable-warnings", f"--timeout={cfg['test_timeout']}", "-p", PLUGIN]
    cmd += [f"--basetemp={out / 'basetemp'}"]
    return cmd + list(cfg["args"])


def run(cmd: list[str], env: dict[str, str], log: Path, cwd: str, timeout: float) -> tuple[int, bool]:
    """Run a pytest, its output appended to `log`; SIGINT at `timeout` (pytest then still reports),
    SIGKILL 60 s later. Returns (exit status, timed out)."""
    with log.open("a") as f:
        f.write(f"\n\n##### {' '.join(cmd[3:])}\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=max(timeout, 1)), False
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                return proc.wait(timeout=60), True
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait(), True


def read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def main(argv: list[str]) -> int:
    cfg: dict[str, Any] = json.loads(Path(argv[1]).read_text())
    out = Path(cfg["out"])
    (out / "reports").mkdir(parents=True, exist_ok=True)
    (out / "junit").mkdir(exist_ok=True)
    log = out / "suite.log"
    start = time.monotonic()
    deadline = start + float(cfg["budget"])
    env = {**os.environ, **cfg["env"]}
    deselect = [a for d in cfg["deselect"] for a in ("--deselect", d)]

    # 1. collect everything once: what is collected, excluded and selected, and collection errors
    env["WARDEN_CONFORMANCE_REPORT"] = str(out / "reports" / "collect.json")
    cmd = [*pytest_cmd(cfg, out), "--collect-only", "-q", *deselect, *cfg["tests"]]
    rc, _ = run(cmd, env, log, cfg["suite"], 300)
    collect = read(out / "reports" / "collect.json")
    merged: dict[str, Any] = {
        "collected": collect.get("collected", 0),
        "deselected": collect.get("deselected", []),
        "tests": {},
        "collect_errors": dict(collect.get("collect_errors", {})),
        "files": {},
        "exitstatus": rc if not collect else 0,
        "seconds": 0.0,
    }
    files: dict[str, list[str]] = {}
    for nodeid in collect.get("selected", []):
        files.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)

    # 2. one process per file, its selected tests named, while the budget lasts
    for n, (file, nodeids) in enumerate(files.items()):
        left = deadline - time.monotonic()
        if left < 5:
            merged["files"][file] = {"exitstatus": None, "seconds": 0.0, "note": "not run: the budget ran out"}
            continue
        name = Path(file).stem
        report = out / "reports" / f"{n:03d}-{name}.json"
        env["WARDEN_CONFORMANCE_REPORT"] = str(report)
        cmd = [*pytest_cmd(cfg, out), f"--junitxml={out / 'junit' / (name + '.xml')}", *nodeids]
        t0 = time.monotonic()
        rc, timed_out = run(cmd, env, log, cfg["suite"], left)
        got = read(report)
        merged["tests"].update(got.get("tests", {}))
        merged["collect_errors"].update(got.get("collect_errors", {}))
        note = "stopped: the budget ran out" if timed_out else ("" if got else "no report: pytest died")
        merged["files"][file] = {"exitstatus": rc, "seconds": round(time.monotonic() - t0, 1), "note": note}
        if rc != 0 and merged["exitstatus"] == 0:
            merged["exitstatus"] = rc

    merged["seconds"] = round(time.monotonic() - start, 1)
    tmp = out / "report.json.tmp"
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True))
    tmp.replace(out / "report.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

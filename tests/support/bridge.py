"""`warden-bridge` in a subprocess against the test's control plane, logging to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.operator import free_port


class BridgeProcess:
    def __init__(self, kubeconfig: Path, log_dir: Path, restapi_url: str, name: str = "bridge") -> None:
        self.kubeconfig = kubeconfig
        self.restapi_url = restapi_url
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> BridgeProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        log = self.log_path.open("ab")
        log.write(f"\n--- start #{self.starts + 1} ---\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "warden.bridge.main", "-v", "--interval=0.5",
             f"--slurmrestd-url={self.restapi_url}", f"--liveness-port={free_port()}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL: dies wherever it is, as on a node failure."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def __enter__(self) -> BridgeProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no bridge log)"

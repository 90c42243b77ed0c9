"""warden-health-check with the arguments the operator's CronJob passes, writing its ConfigMap report.

The Kubernetes API is a local HTTP server that records the request (the integration tier has a real
apiserver); Slurm is health_fakes.FakeSlurm.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tests.unit.health_fakes import FakeNode, FakeSlurm, prints
from warden.health.main import main
from warden.health.report import REPORT_KEY, ApiTarget, ReportError, write_report
from warden.slurm.cli import Slurm


class Api:
    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = status


@pytest.fixture
def api() -> Iterator[tuple[Api, ApiTarget]]:
    state = Api()

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(
                {
                    "path": self.path,
                    "type": self.headers["Content-Type"],
                    "auth": self.headers["Authorization"],
                    "body": json.loads(body),
                }
            )
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"kind":"Status","message":"configmaps \\"x\\" is forbidden"}')

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, ApiTarget(f"http://127.0.0.1:{server.server_port}", "tok3n", None)
    finally:
        server.shutdown()
        server.server_close()


def test_cronjob_arguments_run_and_report(api: tuple[Api, ApiTarget]) -> None:
    state, target = api
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1")])
    fake.behaviour["gpu-1"] = prints("h100_8gpu_slow.txt")
    argv = [
        "--min-busbw", "150", "--min-bytes", "512Mi", "--max-bytes", "8Gi", "--time-limit", "10",
        "--concurrency", "4", "--report-configmap", "hpc/c1-nccl-check",
    ]  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(argv, slurm=Slurm(fake), report_target=target) == 0
    (req,) = state.requests
    assert req["path"] == "/api/v1/namespaces/hpc/configmaps/c1-nccl-check"
    assert req["type"] == "application/merge-patch+json" and req["auth"] == "Bearer tok3n"
    report = json.loads(req["body"]["data"][REPORT_KEY])
    assert report == json.loads(out.getvalue())
    assert report["thresholdGBps"] == 150.0
    assert report["drained"][0]["reason"] == "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 150.0 GB/s"
    (srun, _) = (c for c in fake.calls if c[0] == "srun")
    assert "--time=10:00" in srun
    assert srun[srun.index("-b") + 1] == "512M" and srun[srun.index("-e") + 1] == "8G"


def test_refused_report_is_an_error(api: tuple[Api, ApiTarget], capsys: pytest.CaptureFixture[str]) -> None:
    state, target = api
    state.status = 403
    rc = main(["--report-configmap", "hpc/c1-nccl-check"], slurm=Slurm(FakeSlurm([])), report_target=target)
    assert rc == 1
    assert "HTTP 403" in capsys.readouterr().err


def test_report_target_must_be_namespaced() -> None:
    with pytest.raises(ReportError, match="NAMESPACE/NAME"):
        write_report(ApiTarget("http://127.0.0.1:9", "t", None), "just-a-name", {})

"""The read gate (``warden.readgate``) in front of a stand-in slurmrestd on loopback: the exporter's four
reads pass, asked as SlurmUser, and nothing else does. (slurmrestd and slurmctld themselves: the dataplane
tier, tests/dataplane/test_restapi.py and test_metrics.py, runs the gate's pod from the rendered manifest.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.support.jsonserver import JsonServer
from warden.naming import RESTAPI_VERSION
from warden.readgate import READS, Gate, refusal
from warden.slurm.rest import SlurmRest, SlurmRestError

API = f"/slurm/{RESTAPI_VERSION}"


def test_only_the_exporters_four_reads_with_its_token_pass() -> None:
    for what in sorted(READS):
        assert refusal("GET", f"{API}/{what}", "T", "T") is None
    assert refusal("POST", f"{API}/job/submit", "T", "T") == (405, "POST refused: the read gate only reads")
    assert refusal("DELETE", f"{API}/job/7", "T", "T") is not None
    for path in (f"{API}/job/7", f"{API}/nodes/../job/7", f"{API}/nodes?update_time=0", "/slurm/v0.0.40/nodes",
                 f"{API}/node/n1", "/openapi", f"{API}/"):  # fmt: skip
        status, _ = refusal("GET", path, "T", "T") or (200, "")
        assert status == 404, path
    assert refusal("GET", f"{API}/jobs", "other", "T") == (401, "Authentication failure: not the exporter's token")
    assert refusal("GET", f"{API}/jobs", "", "T") is not None
    assert refusal("GET", f"{API}/jobs", "", "") is not None  # no token written yet: nobody passes


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[list[tuple[str, str, dict[str, str]]], str, Path]]:
    """A gate before a stand-in slurmrestd that records what it was asked and by whom."""
    asked: list[tuple[str, str, dict[str, str]]] = []
    nodes = {"nodes": [{"name": f"w-{i}", "state": ["IDLE"]} for i in range(3000)], "errors": []}

    def answer(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        asked.append((method, path, headers))
        if headers.get("X-SLURM-USER-TOKEN") != "SLURMUSER":
            return 401, {"errors": [{"description": "Authentication failure"}]}
        return (200, nodes) if path.endswith("/nodes") else (200, {"jobs": [], "errors": []})

    upstream = JsonServer(answer).start()
    (tmp_path / "caller").write_text("READER\n")
    (tmp_path / "own").write_text("SLURMUSER\n")
    server = Gate(upstream.url, tmp_path / "caller", tmp_path / "own").serve("127.0.0.1", 0)
    try:
        yield asked, f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    finally:
        server.shutdown()
        server.server_close()
        upstream.stop()


def test_a_read_goes_through_as_slurmuser_whole(gate: tuple[list[Any], str, Path]) -> None:
    """The exporter's client (``SlurmRest``, as warden-reader) reads 3,000 nodes through the gate; slurmrestd
    was asked as ``slurm`` with SlurmUser's token, not with the caller's."""
    asked, url, _ = gate
    rest = SlurmRest(url, token=lambda: "READER", user="warden-reader")
    assert [n.name for n in rest.nodes()] == [f"w-{i}" for i in range(3000)]
    assert rest.jobs() == []
    assert [(m, p, h["X-SLURM-USER-NAME"], h["X-SLURM-USER-TOKEN"]) for m, p, h in asked] == [
        ("GET", f"{API}/nodes", "slurm", "SLURMUSER"),
        ("GET", f"{API}/jobs", "slurm", "SLURMUSER"),
    ]


def test_anything_else_is_refused_before_slurmrestd_is_asked(gate: tuple[list[Any], str, Path]) -> None:
    asked, url, tokens = gate
    http = urllib3.PoolManager(retries=False)

    def call(method: str, path: str, token: str) -> tuple[int, list[str]]:
        got = http.request(
            method, url + path, headers={"X-SLURM-USER-TOKEN": token}, body=b"{}" if method == "POST" else None
        )
        return got.status, [e["error"] for e in json.loads(got.data)["errors"]]

    assert call("POST", f"{API}/job/submit", "READER")[0] == 405
    assert call("DELETE", f"{API}/job/7", "READER")[0] == 405
    assert call("GET", f"{API}/job/7", "READER")[0] == 404
    assert call("GET", f"{API}/nodes", "SLURMUSER") == (401, ["Authentication failure: not the exporter's token"])
    with pytest.raises(SlurmRestError, match="HTTP 401"):
        SlurmRest(url, token=lambda: "a user's token", user="alice").nodes()
    assert asked == []
    # the exporter's token is read at each request: a new one (the operator's, after the key rotated) counts
    (tokens / "caller").write_text("READER-2")
    assert call("GET", f"{API}/jobs", "READER")[0] == 401
    assert SlurmRest(url, token=lambda: "READER-2").jobs() == []


def test_slurmrestd_away_is_a_bad_gateway(tmp_path: Path) -> None:
    (tmp_path / "caller").write_text("READER")
    (tmp_path / "own").write_text("SLURMUSER")
    server = Gate("http://127.0.0.1:9", tmp_path / "caller", tmp_path / "own", timeout=2).serve("127.0.0.1", 0)
    try:
        with pytest.raises(SlurmRestError, match="HTTP 502: slurmrestd did not answer the read gate"):
            SlurmRest(f"http://127.0.0.1:{server.server_address[1]}", token=lambda: "READER").ping()
    finally:
        server.shutdown()
        server.server_close()

"""The slurmrestd client: tokens slurmctld can check, requests as slurmrestd wants them, errors named.

A loopback HTTP server stands in for slurmrestd here (the real one answers in the dataplane tier,
tests/dataplane/test_restapi.py): it records what the client sent and replies as slurmrestd does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.jsonserver import JsonServer
from warden.slurm.model import (
    Job,
    SlurmNodeUnknown,
    SlurmParseError,
    nodes_from_doc,
    nodes_from_pieces,
    nodes_from_text,
)
from warden.slurm.rest import SlurmRest, SlurmRestError, SlurmUnreachable, mint_token


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_token_is_an_hs256_jwt_for_the_user_signed_with_the_key() -> None:
    token = mint_token(b"k" * 64, "slurm", lifetime_s=120, now=1_700_000_000)
    header, payload, signature = token.split(".")
    assert json.loads(_unb64(header)) == {"alg": "HS256", "typ": "JWT"}
    assert json.loads(_unb64(payload)) == {"iat": 1_700_000_000, "exp": 1_700_000_120, "sun": "slurm"}
    expected = hmac.new(b"k" * 64, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    assert _unb64(signature) == expected
    assert mint_token(b"x" * 64, "slurm", now=1_700_000_000) != mint_token(b"k" * 64, "slurm", now=1_700_000_000)


def test_empty_key_is_refused() -> None:
    with pytest.raises(ValueError):
        mint_token(b"", "slurm")


class FakeSlurmrestd:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.replies: dict[tuple[str, str], tuple[int, Any]] = {}


@pytest.fixture
def server() -> Iterator[tuple[FakeSlurmrestd, str]]:
    fake = FakeSlurmrestd()

    def answer(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        fake.requests.append((method, path, headers, json.loads(raw) if raw else None))
        return fake.replies.get((method, path), (404, {"errors": [{"description": "no route"}]}))

    httpd = JsonServer(answer).start()
    try:
        yield fake, httpd.url
    finally:
        httpd.stop()


FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
NODE = {"name": "demo-worker-cpu-0", "state": ["IDLE", "DRAIN"], "reason": "maintenance", "gres": "", "features": []}


def test_nodes_are_read_with_the_users_token(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (200, {"nodes": [NODE], "errors": [], "warnings": []})
    rest = SlurmRest(url, token=lambda: "TOKEN")
    [node] = rest.nodes()
    assert (node.name, node.state, node.drained, node.reason) == ("demo-worker-cpu-0", "IDLE", True, "maintenance")
    _, _, headers, _ = fake.requests[0]
    assert headers["X-SLURM-USER-NAME"] == "slurm" and headers["X-SLURM-USER-TOKEN"] == "TOKEN"


def test_jobs_are_listed_with_their_nodes_and_end(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    running = {
        "job_id": 41,
        "job_state": ["RUNNING"],
        "nodes": "demo-worker-cpu-[0-1]",
        "end_time": {"set": True, "infinite": False, "number": 1_700_000_120},
    }
    pending = {
        "job_id": 42,
        "job_state": ["PENDING"],
        "nodes": "",
        "end_time": {"set": False, "infinite": False, "number": 0},
    }
    fake.replies[("GET", "/slurm/v0.0.42/jobs")] = (200, {"jobs": [running, pending], "errors": [], "warnings": []})
    rest = SlurmRest(url, token=lambda: "TOKEN")
    assert rest.jobs() == [
        Job(id=41, state="RUNNING", nodes=("demo-worker-cpu-0", "demo-worker-cpu-1"), end_time=1_700_000_120.0),
        Job(id=42, state="PENDING", nodes=(), end_time=None),
    ]
    method, path, headers, _ = fake.requests[0]
    assert (method, path, headers["X-SLURM-USER-TOKEN"]) == ("GET", "/slurm/v0.0.42/jobs", "TOKEN")


def test_node_lists_are_read_record_by_record_as_the_whole_document_would_be(
    server: tuple[FakeSlurmrestd, str],
) -> None:
    """``nodes()`` decodes node records one at a time (``nodes_from_text``): the same nodes as decoding
    the captured answer whole, the document's errors still told, a cut-off answer refused."""
    fake, url = server
    captured = json.loads((FIXTURES / "slurmrestd_nodes_three.json").read_text())
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (200, captured)
    rest = SlurmRest(url, token=lambda: "T")
    assert rest.nodes() == nodes_from_doc(captured)
    text = json.dumps(captured, indent=2)
    assert nodes_from_text(text) == (nodes_from_doc(captured), captured["errors"])
    assert nodes_from_text('{"meta": {"a": [1, {"b": "]"}]}, "nodes": [ ], "errors": []}') == ([], [])
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (200, {"nodes": [NODE], "errors": [{"description": "partial"}]})
    with pytest.raises(SlurmRestError, match="list nodes: HTTP 200: partial"):
        rest.nodes()
    for broken in (text[: len(text) // 2], '{"meta": {}}', "[]", "", '{"nodes": [{"name": "a"}'):
        with pytest.raises(SlurmParseError):
            nodes_from_text(broken)


@pytest.mark.parametrize("size", [1, 2, 7, 100, 4096])
def test_a_node_list_arriving_in_pieces_decodes_as_the_whole_text(size: int) -> None:
    """slurmrestd's answer is decoded as it arrives (``SlurmRest.nodes`` reads it in 64 KiB pieces): a
    piece may end anywhere, inside a string, a number (``"cpus": 12`` then ``8``) or between tokens."""
    captured = json.loads((FIXTURES / "slurmrestd_nodes_three.json").read_text())
    text = json.dumps({**captured, "last_update": 1700000000123}, indent=2)
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert nodes_from_pieces(pieces) == nodes_from_text(text) == (nodes_from_doc(captured), captured["errors"])
    with pytest.raises(SlurmParseError):
        nodes_from_pieces(pieces[: len(pieces) // 2])


def test_a_long_node_list_is_read_in_pieces_not_held_whole(server: tuple[FakeSlurmrestd, str]) -> None:
    """Two thousand nodes (3.5 MB of JSON, some fifty 64 KiB pieces) come through ``nodes()`` the same
    as decoded whole, twice in a row."""
    fake, url = server
    captured = json.loads((FIXTURES / "slurmrestd_nodes_three.json").read_text())
    many = [{**captured["nodes"][i % 3], "name": f"w-{i}"} for i in range(2000)]
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (200, {**captured, "nodes": many})
    rest = SlurmRest(url, token=lambda: "T")
    assert [n.name for n in rest.nodes()] == [f"w-{i}" for i in range(2000)]
    assert rest.nodes() == nodes_from_doc({**captured, "nodes": many})


def test_nodes_of_one_answer_share_what_they_say_alike(server: tuple[FakeSlurmrestd, str]) -> None:
    """Ten thousand records mostly say the same things: equal states, flags, features, partitions and
    gres are one object each, not one per node (the sync holds two rounds of nodes at 10,000)."""
    fake, url = server
    captured = json.loads((FIXTURES / "slurmrestd_nodes_three.json").read_text())
    template = captured["nodes"][0]
    many = [{**template, "name": f"w-{i}", "state": ["IDLE", "DRAIN"], "reason": "maintenance"} for i in range(50)]
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (200, {**captured, "nodes": many})
    nodes = SlurmRest(url, token=lambda: "T").nodes()
    assert len({n.name for n in nodes}) == 50 and all(n.drained for n in nodes)
    for attr in ("state", "flags", "reason", "gres", "features", "partitions", "version"):
        assert len({id(getattr(n, attr)) for n in nodes}) == 1, attr
    assert not hasattr(nodes[0], "__dict__")


def test_job_list_errors_are_named(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    rest = SlurmRest(url, token=lambda: "T")
    fake.replies[("GET", "/slurm/v0.0.42/jobs")] = (500, {"errors": [{"description": "Unable to query jobs"}]})
    with pytest.raises(SlurmRestError, match="list jobs: HTTP 500: Unable to query jobs"):
        rest.jobs()
    fake.replies[("GET", "/slurm/v0.0.42/jobs")] = (
        200,
        {"jobs": [{"job_id": 1, "job_state": ["RUNNING"], "nodes": "n[1"}]},
    )
    with pytest.raises(SlurmParseError, match="job 1: hostlist 'n\\[1': unbalanced"):
        rest.jobs()


def test_drain_and_resume_post_the_node_update(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    fake.replies[("POST", "/slurm/v0.0.42/node/n1")] = (200, {"errors": []})
    rest = SlurmRest(url, token=lambda: "T")
    rest.drain("n1", "warden: Kubernetes node k1 cordoned")
    rest.resume("n1")
    assert [r[3] for r in fake.requests] == [
        {"state": ["DRAIN"], "reason": "warden: Kubernetes node k1 cordoned"},
        {"state": ["RESUME"]},
    ]
    with pytest.raises(ValueError):
        rest.drain("n1", " ")


def test_errors_carry_slurms_words_and_unknown_nodes_are_told_apart(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    fake.replies[("POST", "/slurm/v0.0.42/node/ghost")] = (
        500,
        {"errors": [{"description": "Invalid node name specified", "error_number": 2017}]},
    )
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (401, {"errors": [{"description": "Authentication failure"}]})
    fake.replies[("DELETE", "/slurm/v0.0.42/node/ghost")] = (
        500,
        {"errors": [{"description": "Invalid node name specified"}]},
    )
    rest = SlurmRest(url, token=lambda: "T")
    with pytest.raises(SlurmNodeUnknown):
        rest.drain("ghost", "x")
    with pytest.raises(SlurmRestError, match="HTTP 401: Authentication failure"):
        rest.nodes()
    rest.delete_node("ghost")  # already gone: nothing to do


def test_no_server_is_unreachable_not_a_hang() -> None:
    rest = SlurmRest("http://127.0.0.1:9", token=lambda: "T", timeout=2)
    with pytest.raises(SlurmUnreachable):
        rest.nodes()


def test_slurmctld_silent_behind_slurmrestd_is_unreachable_and_an_absent_job_is_an_answer(
    server: tuple[FakeSlurmrestd, str],
) -> None:
    """slurmrestd answers for slurmctld when slurmctld does not: its own timeout's words (the shape of
    its reply after Slurm's MessageTimeout) mean no answer, as a request that timed out does."""
    fake, url = server
    timed_out = {
        "errors": [{"description": "Failed to query nodes", "error": "Socket timed out on send/recv operation"}]
    }
    fake.replies[("GET", "/slurm/v0.0.42/nodes")] = (500, timed_out)
    absent = {"errors": [{"description": "Unable to query JobId=2147483646", "error": "Invalid job id specified"}]}
    fake.replies[("GET", "/slurm/v0.0.42/job/2147483646")] = (500, absent)
    rest = SlurmRest(url, token=lambda: "T")
    with pytest.raises(SlurmUnreachable, match=r"slurmctld did not answer slurmrestd: .*Socket timed out"):
        rest.nodes()
    rest.look_up_absent_job()  # "no such job" is slurmctld answering
    fake.replies[("GET", "/slurm/v0.0.42/job/2147483646")] = (500, timed_out)
    with pytest.raises(SlurmUnreachable):
        rest.look_up_absent_job()
    fake.replies[("GET", "/slurm/v0.0.42/job/2147483646")] = (
        401,
        {"errors": [{"description": "Authentication failure"}]},
    )
    with pytest.raises(SlurmRestError, match="HTTP 401"):
        rest.look_up_absent_job()


def test_pings_list_every_controller_in_order_in_either_spelling(server: tuple[FakeSlurmrestd, str]) -> None:
    """Newer data_parsers say ``responding`` (``pinged`` deprecated), 24.11's ``pinged``: "UP"/"DOWN".
    ``primary``/``mode`` only say the position, and are not read."""
    fake, url = server
    newer = [
        {"hostname": "dp-controller-0", "responding": False, "latency": 5000000, "mode": "primary", "primary": True},
        {"hostname": "dp-controller-1", "responding": True, "latency": 250, "mode": "backup1", "primary": False},
        {"hostname": "dp-controller-2", "responding": True, "latency": 260, "mode": "backup2", "primary": False},
    ]
    fake.replies[("GET", "/slurm/v0.0.42/ping")] = (200, {"pings": newer, "errors": []})
    rest = SlurmRest(url, token=lambda: "T")
    assert [(p.hostname, p.responding, p.latency_us) for p in rest.pings()] == [
        ("dp-controller-0", False, 5000000),
        ("dp-controller-1", True, 250),
        ("dp-controller-2", True, 260),
    ]
    rest.ping()  # a backup answering is slurmctld answering
    older = [
        {"hostname": "dp-controller-0", "pinged": "UP", "latency": 90, "mode": "primary"},
        {"hostname": "dp-controller-1", "pinged": "DOWN", "latency": 10, "mode": "backup"},
    ]
    fake.replies[("GET", "/slurm/v0.0.42/ping")] = (200, {"pings": older, "errors": []})
    assert [(p.hostname, p.responding) for p in rest.pings()] == [("dp-controller-0", True), ("dp-controller-1", False)]
    both = [{"hostname": "dp-controller-0", "pinged": "UP", "responding": False}]  # responding wins
    fake.replies[("GET", "/slurm/v0.0.42/ping")] = (200, {"pings": both, "errors": []})
    assert [p.responding for p in rest.pings()] == [False]


def test_ping_raises_when_no_controller_responds(server: tuple[FakeSlurmrestd, str]) -> None:
    fake, url = server
    rest = SlurmRest(url, token=lambda: "T")
    down = [{"hostname": "dp-controller-0", "pinged": "DOWN"}, {"hostname": "dp-controller-1", "responding": False}]
    fake.replies[("GET", "/slurm/v0.0.42/ping")] = (200, {"pings": down, "errors": []})
    with pytest.raises(SlurmUnreachable, match="dp-controller-0 not responding, dp-controller-1 not responding"):
        rest.ping()
    fake.replies[("GET", "/slurm/v0.0.42/ping")] = (200, {"errors": []})
    assert rest.pings() == []
    with pytest.raises(SlurmUnreachable, match="no controller listed"):
        rest.ping()

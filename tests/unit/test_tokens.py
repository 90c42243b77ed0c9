"""Per-purpose tokens (``warden.tokens``): who holds the JWT signing key, when a token is written anew,
and what Slurm lets the exporter's user do (job_submit.lua, rendered; run by slurmctld in the dataplane
tier, tests/dataplane/test_restapi.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from warden import naming, tokens
from warden.model import parse_spec
from warden.render.cluster import render
from warden.render.config import job_submit_lua, slurm_conf
from warden.render.context import Cluster
from warden.slurm.rest import mint_token, token_claims

KEY = b"k" * 32
NOW = 1_800_000_000.0


ROOT = Path(__file__).resolve().parents[2]


def _cluster(**spec: Any) -> Cluster:
    return Cluster(name="demo", namespace="hpc", spec=parse_spec({"workerGroups": [{"name": "cpu"}], **spec}))


def test_a_token_is_written_anew_when_missing_foreign_or_past_half_its_life() -> None:
    user = naming.READER_USER
    fresh = mint_token(KEY, user, tokens.LIFETIME_S, NOW)
    assert not tokens.due(fresh, KEY, user, NOW)
    assert not tokens.due(fresh, KEY, user, NOW + tokens.LIFETIME_S / 2 - 1)
    assert tokens.due(fresh, KEY, user, NOW + tokens.LIFETIME_S / 2)  # half its life: renewed
    assert tokens.due(None, KEY, user, NOW)
    assert tokens.due("", KEY, user, NOW)
    assert tokens.due("not.a-token", KEY, user, NOW)
    assert tokens.due(fresh, b"another key: the key was rotated", user, NOW)
    assert tokens.due(mint_token(KEY, "slurm", tokens.LIFETIME_S, NOW), KEY, user, NOW)  # another user


def test_token_claims_are_read_only_from_tokens_the_key_signed() -> None:
    token = mint_token(KEY, "warden-reader", 60, NOW)
    assert token_claims(token, KEY) == {"iat": int(NOW), "exp": int(NOW) + 60, "sun": "warden-reader"}
    header, payload, _ = token.split(".")
    forged = f"{header}.{payload}.{mint_token(b'x' * 32, 'warden-reader', 60, NOW).split('.')[2]}"
    assert token_claims(forged, KEY) is None
    assert token_claims(token, b"") is None
    assert token_claims("a.b", KEY) is None
    assert token_claims(f"{header}.!!!.{token.split('.')[2]}", KEY) is None


def test_the_exporter_holds_the_readers_token_and_its_gate_alone_slurmusers() -> None:
    """Only the controller mounts the JWT key. The exporter mounts its own token (warden-reader's) and asks
    its read gate; the gate mounts SlurmUser's token and the exporter's (to know its caller). Both token
    Secrets are optional: the operator writes them once the key exists."""
    cluster = _cluster()
    mounts: dict[str, set[str]] = {}
    for obj in render(cluster).objects:
        pod = (obj.get("spec") or {}).get("template", {}).get("spec") or {}
        secrets = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        for secret in secrets:
            mounts.setdefault(secret, set()).add(obj["metadata"]["name"])
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] in ("demo-exporter", "demo-read-gate"):
            assert all(v["secret"]["optional"] and v["secret"]["defaultMode"] == 0o440 for v in pod["volumes"])
            [container] = pod["containers"]
            assert not any("jwt" in a for a in container["args"]), container["args"]
    assert mounts[cluster.names.jwt_key] == {cluster.names.controller}
    assert mounts["demo-exporter-token"] == {"demo-exporter", "demo-read-gate"}
    assert mounts["demo-read-gate-token"] == {"demo-read-gate"}
    [exporter] = [
        o for o in render(cluster).objects if o["metadata"]["name"] == "demo-exporter" and o["kind"] == "Deployment"
    ]
    args = exporter["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--user={naming.READER_USER}" in args and f"--restapi=http://demo-read-gate:{naming.READ_GATE_PORT}" in args


def test_a_token_secret_holds_the_token_and_is_the_clusters() -> None:
    cluster = _cluster()
    token = tokens.mint(KEY, tokens.EXPORTER, NOW)
    secret = tokens.token_secret(cluster, tokens.EXPORTER, token)
    assert secret["metadata"]["name"] == "demo-exporter-token"
    assert secret["metadata"]["labels"] == cluster.names.labels("exporter")
    assert tokens.held_token(secret) == token
    assert token_claims(token, KEY) == {"iat": int(NOW), "exp": int(NOW) + tokens.LIFETIME_S, "sun": "warden-reader"}
    assert tokens.held_token(None) is None
    assert tokens.held_token({"data": {naming.TOKEN_KEY: "%%%"}}) is None


def test_without_metrics_there_is_no_exporter_nor_gate_token() -> None:
    assert tokens.wanted(_cluster()) == (tokens.EXPORTER, tokens.READ_GATE)
    assert [p.user for p in tokens.wanted(_cluster())] == [naming.READER_USER, "slurm"]
    assert tokens.wanted(_cluster(metrics={"enabled": False})) == ()


def test_the_job_submit_script_lets_the_bridges_user_submit_external_jobs_only() -> None:
    """warden-bridge's token submits placeholders; a batch script or a plain allocation (which steps could
    run in) by its uid is refused. Slurm's EXTERNAL_JOB is bit 24 of bitflags (slurm.h, 25.05 on); the
    script tests it without bit operators (Lua 5.1). Real slurmctld runs it in the e2e bridge test."""
    script = job_submit_lua(_cluster())
    assert f"local BRIDGE_UID = {naming.BRIDGE_UID}\n" in script
    assert naming.EXTERNAL_JOB_FLAG == 2**24 and f"local EXTERNAL_JOB = {2**24}\n" in script
    assert "if submit_uid == BRIDGE_UID and (job_desc.script ~= nil or not external(job_desc)) then" in script
    assert "math.floor((job_desc.bitflags or 0) / EXTERNAL_JOB) % 2 == 1" in script


def test_slurm_conf_loads_a_job_submit_script_that_refuses_the_reader() -> None:
    """slurm.conf loads job_submit/lua; the script refuses submissions and changes by warden-reader's uid
    (the uid its controller-image account has: images/controller/Dockerfile) and lets everyone else by."""
    cluster = _cluster()
    assert "\nJobSubmitPlugins=lua\n" in slurm_conf(cluster)
    script = job_submit_lua(cluster)
    assert f'[{naming.READER_UID}] = "{naming.READER_USER}"' in script
    for hook in ("function slurm_job_submit(job_desc, part_list, submit_uid)",
                 "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)"):  # fmt: skip
        assert hook in script
    dockerfile = (ROOT / "images" / "controller" / "Dockerfile").read_text()
    assert f"--uid {naming.READER_UID} " in dockerfile and naming.READER_USER in dockerfile

"""Every spec the CRD's own schema admits either renders, or fails the spec model naming the field.

Specs are generated from the generated CRD's OpenAPI schema (hypothesis-jsonschema reads its structural
part; the CEL rules have Python twins in the model). No exception may escape the renderers: a spec the
model lets through but a renderer cannot hold would leave the operator retrying forever.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError

from warden import quantity
from warden.crd import openapi_schema
from warden.model import hides_jail_system_files, parse_spec
from warden.reconcile import validation_message
from warden.render.cluster import render
from warden.render.context import Cluster

# Vendor keywords hypothesis-jsonschema does not know; the model (and the apiserver) check them.
_KUBERNETES_ONLY = ("x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
                    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource")  # fmt: skip


def _json_schema(node: Any) -> Any:
    """The CRD schema as plain JSON Schema: int-or-string fields become `integer or string`, and
    arrays and maps kept small (the 64-group limit is checked by admission tests; here it only
    slows generation); unknown fields never reach the operator."""
    if isinstance(node, list):
        return [_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_schema(v) for k, v in node.items() if k not in _KUBERNETES_ONLY}
    if out.pop("x-kubernetes-int-or-string", False):
        out["type"] = ["integer", "string"]
    if out.get("type") == "array":
        out["maxItems"] = min(out.get("maxItems", 3), 3)
    if out.get("type") == "object" and "additionalProperties" in out:
        out["maxProperties"] = min(out.get("maxProperties", 3), 3)
    elif out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False  # the apiserver drops unknown fields before anyone sees them
    return out


SPEC_SCHEMA = _json_schema(openapi_schema()["properties"]["spec"])


def _renders_or_names_the_field(spec: dict[str, Any]) -> str:
    """'rendered' or 'refused'; fails the test on anything else."""
    try:
        model = parse_spec(spec)
    except ValidationError as e:
        message = validation_message(e)
        for line in message.split("; spec."):
            path = line.removeprefix("spec.").split(":", 1)[0]
            assert path and path != line, f"no field named in {message!r} for {json.dumps(spec)}"
        return "refused"
    rendered = render(Cluster(name="prop", namespace="ns", spec=model))
    json.dumps([o for o in rendered.objects])  # manifests are plain JSON
    conf = next(o for o in rendered.objects if o["metadata"]["name"] == "prop-slurm-config")["data"]["slurm.conf"]
    lines = conf.splitlines()
    for extra in model.slurm_config.extra_lines:
        assert extra in lines, f"extra line {extra!r} is not one whole slurm.conf line"
    return "rendered"


@pytest.mark.timeout(300)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(spec=from_schema(SPEC_SCHEMA))
def test_specs_from_the_crd_schema_render_or_name_the_field(spec: dict[str, Any]) -> None:
    _renders_or_names_the_field(spec)


# Values a schema-driven generator rarely reaches: quantities at the edge of their grammar, hosts and
# lines with every separator. Each is put into an otherwise valid spec.
_EDGES = st.sampled_from(
    ["0", "1e99", "9e18", "1E", "1Ei", "999999999Ei", ".5", "5.", "1e-9", "1n", "100u", "0.0001m", "65534",
     "65533", "1e5", "2Gi", "1.5Gi"]
)  # fmt: skip


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cpu=_EDGES, memory=_EDGES, size=_EDGES, gpus=st.integers(0, 64))
def test_quantities_at_the_edge_render_or_name_the_field(cpu: str, memory: str, size: str, gpus: int) -> None:
    spec = {
        "jail": {"size": size},
        "workerGroups": [{"name": "cpu", "gpus": {"count": gpus},
                          "resources": {"limits": {"cpu": cpu, "memory": memory}},
                          "localMounts": [{"name": "tmp", "jailPath": "/tmp", "sizeLimit": size}]}],
    }  # fmt: skip
    _renders_or_names_the_field(spec)


def test_a_spec_that_cannot_render_is_refused_with_its_field() -> None:
    """The crash the issue reported (`cpu: 1e999` passed the schema, then the renderer overflowed)."""
    spec = {"workerGroups": [{"name": "cpu", "resources": {"limits": {"cpu": "1e999"}}}]}
    assert _renders_or_names_the_field(spec) == "refused"
    with pytest.raises(ValidationError) as e:
        parse_spec(spec)
    assert "spec.workerGroups[0].resources.limits.cpu" in validation_message(e.value)


# The classes of spec that pass a schema but break or weaken a cluster later (issue 34): a request above
# its limit, a mount that hides Slurm's files, a line that runs on, a keyword for a name, bounds swapped,
# two mounts at one path. Whatever mix of them a spec holds, it is refused naming the field, or what
# renders is safe.
_PATHS = st.sampled_from(
    ["/scratch", "/tmp", "/var/tmp", "/dev/shm", "/dev/shm/x", "/etc/slurm", "/etc", "/var/spool/slurmd",
     "/run/munge", "/home/alice", "/usr/lib/x86_64-linux-gnu/slurm", "/opt/data", "/var/lib/x", "/data/etc"]
)  # fmt: skip
_LINES = st.sampled_from(
    ["MaxJobCount=5", "MaxJobCount=5 \\", "MessageTimeout=30\\", "JobContainerType=job_container/tmpfs",
     "SwitchType=switch/hpe_slingshot", "SelectType=select/linear", "KillWait=10"]
)  # fmt: skip
_PARTITIONS = st.sampled_from(["default", "DEFAULT", "Default", "batch", "defaults", "gpu_default"])
_GROUPS = st.sampled_from(["all", "ALL", "staff", "allusers"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(request=_EDGES, limit=_EDGES, paths=st.lists(_PATHS, min_size=1, max_size=3), line=_LINES,
       partition=_PARTITIONS, group=_GROUPS, low=_EDGES, high=_EDGES)  # fmt: skip
def test_specs_that_would_break_a_cluster_are_refused_naming_the_field(
    request: str, limit: str, paths: list[str], line: str, partition: str, group: str, low: str, high: str
) -> None:
    spec = {
        "workerGroups": [{"name": "cpu", "resources": {"requests": {"memory": request}, "limits": {"memory": limit}},
                          "localMounts": [{"name": f"m{i}", "jailPath": p} for i, p in enumerate(paths)]}],
        "partitions": [{"name": partition, "workerGroups": ["cpu"], "allowGroups": [group]}],
        "slurmConfig": {"extraLines": [line]},
        "healthChecks": {"nccl": {"minBytes": low, "maxBytes": high}},
    }  # fmt: skip
    if _renders_or_names_the_field(spec) == "refused":
        return
    model = parse_spec(spec)
    group_model = model.worker_groups[0]
    assert quantity.parse(request) <= quantity.parse(limit), "a request above its limit got through"
    for m in group_model.local_mounts:
        assert not hides_jail_system_files(m.jail_path), f"{m.jail_path} hides the jail's system files"
    assert len({m.jail_path for m in group_model.local_mounts}) == len(group_model.local_mounts), "two mounts, one path"
    assert not line.endswith("\\") and "JobContainerType" not in line and "SelectType" not in line
    assert partition.lower() != "default" and group.lower() != "all"
    assert quantity.parse(low) <= quantity.parse(high), "nccl byte range swapped"
    assert "/dev/shm/x" not in paths and "/etc/slurm" not in paths

"""One vocabulary of drain reasons (``warden.slurm.reasons``): every reason a Warden part gives Slurm,
the operator's, the health checks', the worker's node lifecycle (``warden.node``) and any shell script's,
is one it knows, so the exporter never counts a Warden drain as a person's."""

from __future__ import annotations

import re
from pathlib import Path

from warden.health.check import CheckConfig, Outcome, drain_reason
from warden.health.quickcheck import reason_for
from warden.node import lifecycle
from warden.slurm import reasons
from warden.slurm.model import Node

ROOT = Path(__file__).resolve().parents[2]
#: a drain in shell: ``scontrol update ... state=drain reason="..."`` (the text up to the first expansion)
_SHELL_DRAIN = re.compile(r'state=drain\s+reason="([^"$]*)', re.I)


def _drained(reason: str) -> Node:
    return Node(name="n", state="IDLE", flags=frozenset({"DRAIN"}), reason=reason, gres="", features=(), partitions=())


def shell_scripts() -> list[Path]:
    """The images', the jail's and the repository's shell scripts."""
    scripts = [*ROOT.glob("images/**/*.sh"), *ROOT.glob("images/**/warden-*"), *ROOT.glob("jail/**/*.sh"),
               *ROOT.glob("hack/**/*.sh")]  # fmt: skip
    return sorted(set(scripts))


def shell_drain_reasons(text: str | None = None) -> list[tuple[str, str]]:
    """Every drain reason the shell scripts give (or, with ``text``, that text's)."""
    if text is not None:
        return [("<text>", t) for t in _SHELL_DRAIN.findall(text)]
    return [
        (str(script.relative_to(ROOT)), t)
        for script in shell_scripts()
        for t in _SHELL_DRAIN.findall(script.read_text(errors="replace"))
    ]


def test_the_shell_scan_sees_a_drain() -> None:
    """The scan below finds what it checks (a changed idiom would otherwise leave it checking nothing)."""
    line = 'scontrol update nodename="$node" state=drain reason="warden-worker: $WARDEN_DRIVER_PROBLEM"'
    assert shell_drain_reasons(line) == [("<text>", "warden-worker: ")]


def test_no_shell_script_drains_a_node() -> None:
    """Every drain is made in Python, with a reason of the vocabulary (warden.node, the health checks, the
    operator): a script that drains again fails here, and its reason would escape the exporter's classes."""
    scripts = shell_scripts()
    names = {p.name for p in scripts}
    assert {"entrypoint.sh", "warden-lib.sh", "warden-ctld-ha.sh"} <= names, "the scan no longer sees the images"
    assert shell_drain_reasons() == [], "drain from Python with a reason of warden.slurm.reasons"


def test_the_worker_node_lifecycle_drains_with_the_vocabulary() -> None:
    """The worker pod's two drains (warden.node): leaving on SIGTERM, and a GPU worker without its driver."""
    assert lifecycle.LEAVE_REASON == reasons.POD_TERMINATING
    assert reasons.reason_class(_drained(lifecycle.LEAVE_REASON)) == "kubernetes"
    driver = lifecycle.driver_drain_reason("no NVIDIA driver (libcuda.so.1 missing)")
    assert driver == "warden-worker: no NVIDIA driver (libcuda.so.1 missing)"
    assert reasons.drainer_of(driver) == next(d for d in reasons.DRAINERS if d.prefix == reasons.WORKER)
    assert reasons.reason_class(_drained(driver)) == "health_check"
    # and it spells no reason of its own: every one comes from warden.slurm.reasons
    for source in (ROOT / "operator" / "warden" / "node").glob("*.py"):
        text = source.read_text()
        for drainer in reasons.DRAINERS:
            assert drainer.prefix.strip() not in text, f"{source.name} spells {drainer.prefix!r}"


def test_the_python_parts_build_their_reasons_from_the_vocabulary() -> None:
    built = {
        "health_check": [
            drain_reason(Outcome.SLOW, "", 3.0, CheckConfig(threshold_gbps=100.0)),
            reason_for(["nvidia-smi lists 7 of 8 GPUs"]),
        ],
        "kubernetes": [reasons.cordon("kube-node-1")],
        "scale_in": [reasons.scale_in("cpu", 2)],
        "upgrade": [reasons.upgrade("cpu", "5f1c")],
    }
    for cls, texts in built.items():
        for text in texts:
            assert reasons.reason_class(_drained(text)) == cls, text


def test_prefixes_do_not_shadow_each_other() -> None:
    """Each prefix is matched first by its own drainer (``drainer_of`` takes the first that matches)."""
    for drainer in reasons.DRAINERS:
        assert reasons.drainer_of(drainer.prefix) is drainer
    assert set(reasons.CLASSES) >= {d.reason_class for d in reasons.DRAINERS} | {"none", "person", "slurm"}


def test_a_persons_drain_and_slurms_own_down_are_told_apart() -> None:
    assert reasons.reason_class(_drained("bad DIMM, ticket 4411")) == "person"
    down = Node(name="n", state="DOWN", flags=frozenset(), reason="Not responding", gres="", features=(), partitions=())
    assert reasons.reason_class(down) == "slurm"

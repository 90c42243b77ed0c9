"""One vocabulary of drain reasons (``warden.slurm.reasons``): every reason a Warden part gives Slurm,
the operator's, the health checks' and the worker image's shell, is one it knows, so the exporter never
counts a Warden drain as a person's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from warden.health.check import CheckConfig, Outcome, drain_reason
from warden.health.quickcheck import reason_for
from warden.slurm import reasons
from warden.slurm.model import Node

ROOT = Path(__file__).resolve().parents[2]
#: a drain in shell: ``scontrol update ... state=drain reason="..."`` (the text up to the first expansion)
_SHELL_DRAIN = re.compile(r'state=drain\s+reason="([^"$]*)', re.I)


def _drained(reason: str) -> Node:
    return Node(name="n", state="IDLE", flags=frozenset({"DRAIN"}), reason=reason, gres="", features=(), partitions=())


def shell_drain_reasons() -> list[tuple[str, str]]:
    found = []
    for script in sorted([*ROOT.glob("images/**/*.sh"), *ROOT.glob("images/**/warden-*"), *ROOT.glob("jail/**/*.sh")]):
        for text in _SHELL_DRAIN.findall(script.read_text(errors="replace")):
            found.append((str(script.relative_to(ROOT)), text))
    return found


def test_the_worker_image_drains_for_two_reasons() -> None:
    """The scan below finds what it checks (a changed shell idiom would otherwise leave it checking nothing)."""
    texts = {text for _, text in shell_drain_reasons()}
    assert {"warden-worker: ", "warden: pod terminating"} <= texts


@pytest.mark.parametrize(("script", "text"), shell_drain_reasons())
def test_every_drain_reason_in_the_images_is_a_warden_one(script: str, text: str) -> None:
    drainer = reasons.drainer_of(text)
    assert drainer is not None, f"{script}: drain reason {text!r} starts with none of warden.slurm.reasons' prefixes"
    assert reasons.reason_class(_drained(text + "something")) != "person"


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

"""A stand-in for ``scontrol`` and ``srun``, for the unit tier (there is no Slurm and no GPU here).

It answers the commands ``warden.slurm.cli`` sends with the behaviour observed on Slurm 24.11.5: node
JSON in the shape of the captured ``fixtures/slurm/scontrol_show_node_drained.json`` (each node is that
capture's GPU node with name, state, reason and gres replaced), RESUME refused on a node that is not
drained or down, ``srun --immediate`` refused on drained, busy or reserved nodes; and for the worker's
node lifecycle (``warden.node``) ``squeue -w`` of a node's jobs, ``scontrol show config`` and
``scontrol delete nodename=``, refused for an unknown or busy node (their error texts as Slurm 26.05.5
gives them). The dataplane tier runs the same code against real Slurm.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden.slurm.cli import CommandResult

FIXTURES = Path(__file__).parent / "fixtures"
_TEMPLATE: dict[str, Any] = json.loads((FIXTURES / "slurm" / "scontrol_show_node_drained.json").read_text())
_NODE_TEMPLATE: dict[str, Any] = _TEMPLATE["nodes"][0]


def nccl_output(name: str) -> str:
    return (FIXTURES / "nccl" / name).read_text()


@dataclass
class FakeNode:
    name: str
    state: list[str] = field(default_factory=lambda: ["IDLE"])
    reason: str = ""
    gres: str = "gpu:h100:8(S:0-1)"
    reservation: str | None = None
    partitions: list[str] = field(default_factory=lambda: ["main"])  # the capture's
    extra: str = ""
    slurmd_start: int = 0

    def to_json(self) -> dict[str, Any]:
        raw = copy.deepcopy(_NODE_TEMPLATE)
        raw.update(name=self.name, hostname=self.name, state=list(self.state), reason=self.reason, gres=self.gres,
                   partitions=list(self.partitions), extra=self.extra,
                   slurmd_start_time={"set": True, "infinite": False, "number": self.slurmd_start})  # fmt: skip
        return raw


# What srun does on a node: a function of its argv giving (returncode, stdout, stderr, timed_out).
Behaviour = Callable[[Sequence[str]], tuple[int, str, str, bool]]


def prints(fixture: str, rc: int = 0, stderr: str = "") -> Behaviour:
    return lambda argv: (rc, nccl_output(fixture), stderr, False)


def hangs() -> Behaviour:
    return lambda argv: (-15, nccl_output("h100_8gpu_truncated.txt"), "", True)


BUSY = "srun: error: Unable to allocate resources: Requested nodes are busy\n"
NOT_IN_PARTITION = "srun: error: Unable to allocate resources: Requested node configuration is not available\n"


class FakeSlurm:
    """A ``CommandRunner`` that keeps node state and records every command it was given."""

    def __init__(self, nodes: Sequence[FakeNode], step_seconds: float = 0.0) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.default_partition = "main"  # where srun without --partition asks for the node
        self.behaviour: dict[str, Behaviour] = {}
        self.calls: list[tuple[str, ...]] = []
        self.reservations: dict[str, str] = {}
        self.step_seconds = step_seconds
        self.during_step: dict[str, Callable[[FakeNode], None]] = {}
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.fail_with: str | None = None  # every scontrol call fails with this stderr
        self.jobs: dict[str, list[str]] = {}  # running jobs per node, as squeue lists them
        self.config: dict[str, str] = {"GresTypes": "gpu"}  # `scontrol show config`
        self.on_delete: Callable[[str], None] | None = None  # called with a deleted node's name

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        args = tuple(argv)
        with self._lock:
            self.calls.append(args)
        if args[0] == "srun":
            return self._srun(args)
        if args[0] == "squeue":
            with self._lock:
                rc, out, err = self._squeue(args[1:])
            return CommandResult(args, rc, out, err)
        with self._lock:
            rc, out, err = self._scontrol(args[1:])
        return CommandResult(args, rc, out, err)

    # what tests look at
    def updates(self, node: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[:2] == ("scontrol", "update") and c[2] == f"NodeName={node}"]

    def sruns(self, node: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] == "srun" and f"--nodelist={node}" in c]

    def _scontrol(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        if self.fail_with is not None:
            return 1, "", self.fail_with
        if args[:2] == ("show", "node"):
            names = [a for a in args[2:] if not a.startswith("--")]
            # Slurm 24.11: an unknown node (a dynamic node not registered yet) lists no node, status 0
            nodes = [self.nodes[names[0]]] if names and names[0] in self.nodes else []
            nodes = nodes if names else list(self.nodes.values())
            doc = dict(_TEMPLATE, nodes=[n.to_json() for n in nodes])
            return 0, json.dumps(doc), ""
        if args[0] == "update":
            kv = dict(a.split("=", 1) for a in args[1:])
            node = self.nodes.get(kv["NodeName"])
            if node is None:
                return 1, "", "slurm_update error: Invalid node name specified\n"
            if "Extra" in kv:
                node.extra = kv["Extra"]
            if kv.get("State") == "DRAIN":
                node.state = [s for s in node.state if s != "DRAIN"] + ["DRAIN"]
                node.reason = kv["Reason"]
            elif kv.get("State") == "RESUME":
                if "DRAIN" not in node.state and "DOWN" not in node.state:
                    return 1, "", "slurm_update error: Invalid node state specified\n"
                node.state = [s for s in node.state if s != "DRAIN"]  # Slurm keeps the old reason text
            return 0, "", ""
        if args[:2] == ("create", "reservation"):
            kv = dict(a.split("=", 1) for a in args[2:])
            name = kv["ReservationName"]
            if name in self.reservations:
                return 1, "", "Error creating the reservation: Duplicate reservation name\n"
            for n in kv["Nodes"].split(","):
                self.nodes[n].reservation = name
            self.reservations[name] = kv["Nodes"]
            return 0, f"Reservation created: {name}\n", ""
        if args[:2] == ("show", "config"):
            lines = ["Configuration data as of 2025-06-02T10:00:00"]
            lines += [f"{k:<24}= {v}" for k, v in sorted(self.config.items())]
            return 0, "\n".join(lines) + "\n", ""
        if args[0] == "delete" and args[1].lower().startswith("nodename="):
            # as Slurm 26.05 answers: no unknown node, none that runs jobs
            name = args[1].split("=", 1)[1]
            failed = f"scontrol: error: failed to delete nodes {name}\ndelete_node nodename={name}: "
            if name not in self.nodes:
                return 1, "", failed + "Invalid node name specified\n"
            if self.jobs.get(name):
                return 1, "", failed + "Requested nodes are busy\n"
            del self.nodes[name]
            if self.on_delete is not None:
                self.on_delete(name)
            return 0, "", ""
        if args[0] == "delete":
            name = args[1].split("=", 1)[1]
            for n in self.reservations.pop(name, "").split(","):
                if n in self.nodes:
                    self.nodes[n].reservation = None
            return 0, "", ""
        return 1, "", f"fake scontrol: unexpected {args}\n"

    def _squeue(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        """``squeue -h -w NODE -t running,completing -o %i``: the IDs of the node's jobs."""
        if self.fail_with is not None:
            return 1, "", self.fail_with
        node = args[args.index("-w") + 1]
        if node not in self.nodes:
            return 1, "", f"squeue: error: Invalid node name {node}\n"  # as Slurm 26.05 answers
        return 0, "".join(f"{j}\n" for j in self.jobs.get(node, [])), ""

    def _srun(self, args: tuple[str, ...]) -> CommandResult:
        opts = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
        name = opts["nodelist"]
        with self._lock:
            node = self.nodes[name]
            asked = opts.get("partition", self.default_partition).split(",")
            if not set(asked) & set(node.partitions):
                return CommandResult(args, 1, "", NOT_IN_PARTITION)
            blocked = (
                "DRAIN" in node.state
                or node.state[0] in ("ALLOCATED", "MIXED", "DOWN")
                or (node.reservation is not None and opts.get("reservation") != node.reservation)
            )
            if blocked:
                return CommandResult(args, 1, "", BUSY)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            hook = self.during_step.get(name)
            if hook is not None:
                hook(node)
        try:
            time.sleep(self.step_seconds)
            rc, out, err, timed_out = self.behaviour.get(name, prints("h100_8gpu_ok.txt"))(args)
            return CommandResult(args, rc, out, err, timed_out)
        finally:
            with self._lock:
                self.in_flight -= 1

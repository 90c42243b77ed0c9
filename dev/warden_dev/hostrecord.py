"""What the local cluster changed on this host, recorded as it goes, and the plan that undoes exactly that.

``up`` starts a ``HostRecord`` (``<state dir>/host-record.json``) before it touches the host: a baseline
of what it would otherwise not be able to tell apart from its own doing (iptables of every table, the
CNI network namespaces, the kubelet's cgroups, the sysctls a node changes), then one ``Change`` per
change it makes, saved *before* the change is made, so a crash half-way leaves a record that covers it:

- ``sysctl``: a sysctl set (``before`` -> ``after``); also those the kubelet and kube-proxy changed, found
  by comparing with the baseline once the cluster is up (``HostRecord.observe``);
- ``address``: the node address put on ``lo``;
- ``link``: the pod bridge, which the CNI bridge plugin makes under the cluster's configuration;
- ``dir``: a directory the cluster fills (``before``: absent or empty; a non-empty one, only the CNI cache,
  keeps everything but the entries matching ``pattern``: space-separated globs, ``{container}`` standing
  for each of the cluster's container ids);
- ``mkdir``: a directory that only holds things of the cluster's while it runs (removed if it was absent
  and is empty again).

``undo_plan`` (pure) turns a record and the host as it is now into what ``down`` does: unmount what is
under the cluster's directories, delete the network namespaces, bridge, address and cgroups that were
not there before, the iptables rules and chains that appeared since the baseline (a rule that was there
before stays, even one that looks like ours), then the ipsets of the same names that appeared (kube-router's:
a set goes once no rule names it), remove or empty the directories, and write back each
sysctl that still holds the value the cluster gave it. tests/unit/test_warden_dev_hostrecord.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from warden_dev.hostcheck import (
    CHAIN_PREFIXES,
    IPSET_PREFIXES,
    IPTABLES_TOOLS,
    SYSCTLS,
    HostLayout,
    HostSnapshot,
    IptTable,
    parse_iptables_save,
    under,
)

RECORD_NAME = "host-record.json"
KINDS = ("sysctl", "address", "link", "dir", "mkdir")


@dataclass(frozen=True)
class Change:
    kind: str  # one of KINDS
    target: str  # the sysctl's name, the address (CIDR), the link's name, the directory
    before: str = ""  # sysctl: the value before; dir/mkdir: absent, empty or nonempty
    after: str = ""  # sysctl: the value set; address: the device
    pattern: str = ""  # dir that was not empty: the entries (globs, relative, {container}) that are the cluster's
    by: str = "up"  # who made it: up, or the component whose doing observe() found


@dataclass
class Baseline:
    """The host before ``up``: what the cluster's components may add to without telling."""

    iptables: dict[str, str] = field(default_factory=dict)  # tool -> iptables-save text
    netns: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    ipsets: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, snap: HostSnapshot) -> Baseline:
        return cls(dict(snap.iptables), sorted(snap.netns), sorted(snap.cgroups), dict(snap.sysctls),
                   sorted(snap.ipsets))  # fmt: skip


@dataclass
class HostRecord:
    path: Path
    baseline: Baseline = field(default_factory=Baseline)
    changes: list[Change] = field(default_factory=list)

    @classmethod
    def start(cls, path: Path, snap: HostSnapshot) -> HostRecord:
        """A new record with the host as it is now as its baseline, saved at once."""
        record = cls(path, Baseline.of(snap))
        record.save()
        return record

    @classmethod
    def load(cls, path: Path) -> HostRecord | None:
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        return cls(path, Baseline(**data["baseline"]), [Change(**c) for c in data["changes"]])

    def to_json(self) -> dict[str, Any]:
        return {"baseline": asdict(self.baseline), "changes": [asdict(c) for c in self.changes]}

    def save(self) -> None:
        """Write the record atomically (a crash leaves the old or the new one, never half of one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w") as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path)

    def add(self, change: Change) -> None:
        """Record a change before making it (one already recorded for the same target is kept as it was:
        its ``before`` is the host's, not an intermediate value)."""
        if change.kind not in KINDS:
            raise ValueError(f"unknown change kind {change.kind!r}")
        if any(c.kind == change.kind and c.target == change.target for c in self.changes):
            return
        self.changes.append(change)
        self.save()

    def of_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    def observe(self, snap: HostSnapshot, by: str = "kubelet/kube-proxy") -> list[Change]:
        """Record the sysctls that changed since the baseline (the kubelet sets some at start, e.g.
        vm.overcommit_memory and kernel.panic when protectKernelDefaults is false). Returns those added."""
        added = []
        for name in SYSCTLS:
            before, now = self.baseline.sysctls.get(name), snap.sysctls.get(name)
            if before is None or now is None or before == now or self.of_kind_target("sysctl", name):
                continue
            change = Change("sysctl", name, before=before, after=now, by=by)
            self.add(change)
            added.append(change)
        return added

    def of_kind_target(self, kind: str, target: str) -> Change | None:
        return next((c for c in self.changes if c.kind == kind and c.target == target), None)


# ---------------------------------------------------------------------------------------------------
# the plan of `down`


@dataclass
class UndoPlan:
    """What ``down`` does, in this order."""

    #: every mount under these directories goes (deepest first)
    unmount_under: list[str] = field(default_factory=list)
    #: network namespace files to unmount and delete
    netns: list[str] = field(default_factory=list)
    #: ip link/addr deletions, then iptables rule deletions, chain flushes and chain deletions, then
    #: ipset destructions
    commands: list[list[str]] = field(default_factory=list)
    #: cgroup trees to remove, bottom-up
    cgroups: list[str] = field(default_factory=list)
    #: directories to remove with everything in them
    remove: list[str] = field(default_factory=list)
    #: directories to empty (they were there, empty, before)
    empty: list[str] = field(default_factory=list)
    #: glob patterns (absolute) of entries to remove from directories that keep the rest
    remove_matching: list[str] = field(default_factory=list)
    #: directories to remove if empty
    rmdir: list[str] = field(default_factory=list)
    #: sysctls to write back
    sysctls: dict[str, str] = field(default_factory=dict)


def rule_target(parts: Sequence[str]) -> str:
    """The chain a rule (``-A CHAIN ...`` split) jumps or goes to; "" when none."""
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in parts[:-1]:
            return parts[list(parts).index(flag) + 1]
    return ""


def iptables_undo(
    tool: str,
    before: Mapping[str, IptTable],
    now: Mapping[str, IptTable],
    prefixes: Sequence[str] = CHAIN_PREFIXES,
) -> list[list[str]]:
    """The commands that remove the chains named with ``prefixes`` that appeared since ``before``, and the
    rules of other chains that jump to them and were not there before (``-D``; then ``-F`` and ``-X``
    each chain). Everything that was there before stays."""
    cmds: list[list[str]] = []
    for table in sorted(now):
        base = before.get(table, IptTable())
        ours = [c for c in now[table].chains if c.startswith(tuple(prefixes)) and c not in base.chains]
        if not ours:
            continue
        kept = Counter(base.rules)
        for rule in now[table].rules:
            parts = shlex.split(rule)  # comments are quoted: "name: \"warden-pods\" id: ..."
            if len(parts) < 2 or parts[1] in ours or rule_target(parts) not in ours:
                continue  # a rule of one of our chains goes with it
            if kept[rule] > 0:
                kept[rule] -= 1
                continue
            cmds.append([tool, "-w", "-t", table, "-D", *parts[1:]])
        cmds += [[tool, "-w", "-t", table, "-F", c] for c in ours]
        cmds += [[tool, "-w", "-t", table, "-X", c] for c in ours]
    return cmds


def undo_plan(record: HostRecord, now: HostSnapshot, layout: HostLayout, container_ids: Sequence[str] = ()) -> UndoPlan:
    """What ``down`` must do to leave the host as ``record`` found it, given the host as it is ``now``
    (``container_ids``: the containers the cluster ran, whose entries a shared directory may hold)."""
    plan = UndoPlan()
    dirs = record.of_kind("dir")
    plan.unmount_under = [c.target for c in dirs if c.before in ("absent", "empty")]
    plan.netns = [str(layout.netns_dir / n) for n in sorted(now.netns - set(record.baseline.netns))]
    for c in record.of_kind("link"):
        if c.target in now.links:
            plan.commands.append(["ip", "link", "delete", c.target])
    for c in record.of_kind("address"):
        if c.target in now.lo_addresses:
            plan.commands.append(["ip", "addr", "del", c.target, "dev", c.after or "lo"])
    for tool in IPTABLES_TOOLS:
        if tool in record.baseline.iptables or now.iptables.get(tool):
            before = parse_iptables_save(record.baseline.iptables.get(tool, ""))
            plan.commands += iptables_undo(tool, before, now.tables(tool))
    new_sets = now.ipsets - set(record.baseline.ipsets)
    plan.commands += [["ipset", "destroy", n] for n in sorted(new_sets) if n.startswith(IPSET_PREFIXES)]
    plan.cgroups = sorted(now.cgroups - set(record.baseline.cgroups))
    for c in dirs:
        if c.before == "absent":
            plan.remove.append(c.target)
        elif c.before == "empty":
            plan.empty.append(c.target)
        else:
            for pattern in c.pattern.split():
                expanded = (
                    [pattern.format(container=i) for i in container_ids] if "{container}" in pattern else [pattern]
                )
                plan.remove_matching += [str(Path(c.target) / p) for p in expanded]
    plan.rmdir = [c.target for c in record.of_kind("mkdir") if c.before == "absent"]
    for c in record.of_kind("sysctl"):
        if now.sysctls.get(c.target) == c.after and c.before != c.after:
            plan.sysctls[c.target] = c.before
    return plan


def mounts_to_undo(mounts: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """The mounts under ``prefixes``, deepest first (each once)."""
    return sorted({m for m in mounts if under(m, prefixes)}, key=lambda m: (m.count("/"), m), reverse=True)


def remove_cgroup_tree(top: Path) -> None:
    """rmdir a cgroup and every cgroup below it, bottom-up (a cgroup with processes stays). The kubelet or
    containerd may remove cgroups of the tree meanwhile: the walk skips what is gone."""
    found = [Path(root) / d for root, subdirs, _ in os.walk(top, onerror=lambda _: None) for d in subdirs]
    dirs = sorted(found, key=lambda p: len(p.parts), reverse=True)
    for d in [*dirs, top]:
        with contextlib.suppress(OSError):
            d.rmdir()

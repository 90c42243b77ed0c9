"""The worker node's life in Slurm (``warden.node``): leaving on SIGTERM, registering again with its gres,
draining a GPU node without its driver, following the config, and the files it installs.

Slurm is ``health_fakes.FakeSlurm`` (scontrol, squeue); slurmd is ``FakeProcesses`` below: it
registers its dynamic node when it starts and, after a delete, on SIGHUP, with the node line's gres
only when slurmctld knows their type (as a real slurmctld without the GresTypes drops them). The
supervisor runs with the entrypoint's loops at short intervals. The dataplane tier runs the same code
as the worker image's main process against real Slurm (tests/dataplane/test_scaling.py,
test_gpu_driver.py, test_reconfigure.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.support.examples import EXAMPLES, load
from tests.unit.health_fakes import FakeNode, FakeSlurm
from warden.model import WORKER_SET_KIND
from warden.node import lifecycle, supervisor
from warden.node.files import FilesError, NodeFiles
from warden.node.lifecycle import GresStep, Settings, SettingsError
from warden.node.main import install_signal_handlers
from warden.node.supervisor import Supervisor
from warden.render.cluster import render
from warden.slurm import confighash, reasons
from warden.slurm.cli import CommandResult, Slurm

NODE = "demo-worker-gpu-0"
LINE = "CPUs=4 RealMemory=1000 Gres=gpu:h100:2 Feature=warden-group-gpu"
SLURMD = 4242
KEEPER = 777  # the entrypoint's loop that keeps the mounts
NO_DRIVER = "no NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi missing)"


class FakeProcesses:
    """slurmd and the signals the supervisor sends; every other command goes to FakeSlurm."""

    def __init__(self, slurm: FakeSlurm, gres: str = "gpu:h100:2(S:0)", register_at_start: bool = True) -> None:
        self.slurm = slurm
        self.gres = gres
        self.register_at_start = register_at_start
        self.started: list[list[str]] = []
        self.signals: list[tuple[int, int]] = []
        self._ended: dict[int, int] = {}
        self._alive: set[int] = {KEEPER}
        self.restarting = False
        #: whether a SIGHUP'd slurmd starts again with the new files (False: the reconfigure fails, it runs on)
        self.takes_reconfigure = True
        self._lock = threading.Lock()

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        if argv[0] == "slurmd":
            return CommandResult(tuple(argv), 0, "slurm 24.11.5\n", "")
        return self.slurm(argv, timeout)

    def start(self, argv: Sequence[str]) -> int:
        self.started.append(list(argv))
        self._alive.add(SLURMD)
        if self.register_at_start:
            self.register()
        return SLURMD

    def register(self) -> None:
        """slurmd registers its node; slurmctld keeps the gres whose type it knows."""
        types = lifecycle.gres_names(self.slurm.config.get("GresTypes", ""))
        gres = self.gres if set(lifecycle.gres_names(self.gres)) <= set(types) else ""
        with self.slurm._lock:
            self.slurm.nodes[NODE] = FakeNode(NODE, gres=gres, slurmd_start=int(time.time()))

    def signal(self, pid: int, sig: int) -> None:
        with self._lock:
            if pid not in self._alive:
                raise ProcessLookupError(pid)
            self.signals.append((pid, sig))
        self.slurm.calls.append(("signal", signal.Signals(sig).name, str(pid)))
        if sig == signal.SIGTERM:
            self.exit(pid, 0)
        elif sig == signal.SIGHUP and pid == SLURMD and NODE not in self.slurm.nodes:
            self.register()
        elif sig == signal.SIGHUP and pid == SLURMD and self.takes_reconfigure:
            self.slurm.nodes[NODE].slurmd_start += 1  # slurmd executes itself anew (a second later at least)

    def catches(self, pid: int, sig: int) -> bool:
        """slurmd catches SIGHUP unless it is executing itself again (``restarting``, a reconfigure)."""
        return not (pid == SLURMD and sig == signal.SIGHUP and self.restarting)

    def exit(self, pid: int, code: int) -> None:
        with self._lock:
            self._alive.discard(pid)
            self._ended[pid] = code << 8

    def reap(self) -> dict[int, int]:
        with self._lock:
            ended, self._ended = self._ended, {}
        return ended

    def sent(self, sig: int) -> int:
        return sum(1 for _, s in self.signals if s == sig)


class Logs(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)

    def text(self) -> str:
        return "\n".join(self)


def wait_until(what: str, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    cfg = tmp_path / "warden-slurm"
    cfg.mkdir()
    (cfg / "slurm.conf").write_text("ClusterName=demo\nGresTypes=gpu\n")
    (cfg / "gres.conf").write_text("AutoDetect=off\n")
    (cfg / "plugstack.conf").write_text("required /usr/lib/warden/spank_jail.so\n")
    (cfg / "plugstack.gpu.conf").write_text("required /usr/lib/warden/spank_jail.so bind=/scratch\n")
    (cfg / "..data").mkdir()  # a ConfigMap volume's own entries are skipped
    key = tmp_path / "slurm.key"
    key.write_bytes(b"k" * 32)
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm", "null"):
        (dev / name).touch()
    return Settings(
        slurmd_conf=LINE,
        node=NODE,
        node_name_given=True,
        worker_group="gpu",
        leave_timeout_s=5,
        config_poll_s=0.02,
        config_dir=cfg,
        auth_key=key,
        slurm_etc=tmp_path / "etc-slurm",
        client_config_dir=tmp_path / "slurm-client",
        dev_dir=dev,
        registered_poll_s=0.01,
        gres_poll_s=0.01,
        jobs_poll_s=0.01,
        reap_poll_s=0.01,
        file_owner=None,
    )


@dataclass
class World:
    """A supervisor with its fakes, running in a thread (its main thread in the container)."""

    sup: Supervisor
    fake: FakeSlurm
    procs: FakeProcesses
    logs: Logs
    rc: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=lambda: self.rc.append(self.sup.run()), daemon=True)

    def result(self, timeout: float = 10.0) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the supervisor did not return"
        return self.rc[0]


Start = Callable[..., World]


def watcher(w: World, name: str) -> threading.Thread:
    wait_until(f"the {name} watcher", lambda: any(t.name == f"warden-node-{name}" for t in w.sup.threads))
    return next(t for t in w.sup.threads if t.name == f"warden-node-{name}")


@pytest.fixture
def supervise() -> Iterator[Start]:
    worlds: list[World] = []

    def start(
        settings: Settings, fake: FakeSlurm | None = None, procs: FakeProcesses | None = None, go: bool = True
    ) -> World:
        fake = fake or FakeSlurm([])
        procs = procs or FakeProcesses(fake)
        logs = Logs()
        files = NodeFiles(settings, logs)
        before = lifecycle.dirs_hash([settings.config_dir])
        files.install()  # what the entrypoint does first (`warden-node files`)
        files.client_config()
        sup = Supervisor(settings, procs, slurm=Slurm(procs.run, sleep=lambda s: None), files=files, log=logs,
                         config_hash=before, also_stop=[KEEPER])  # fmt: skip
        w = World(sup, fake, procs, logs)
        worlds.append(w)
        if go:
            w.thread.start()
        return w

    yield start
    for w in worlds:
        if w.thread.is_alive():
            w.sup.terminate()
            w.thread.join(10)


# --- leaving Slurm on SIGTERM ------------------------------------------------------------------------


def test_sigterm_drains_with_the_vocabularys_reason_deletes_the_node_then_stops_slurmd(
    settings: Settings, supervise: Start
) -> None:
    w = supervise(settings)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    assert w.procs.started == [["slurmd", "-D", "-Z", "-N", NODE, "--conf", LINE]]

    w.sup.terminate()
    assert w.result() == 0
    actions = [c for c in w.fake.calls if c[0] in ("signal", "squeue") or c[1] in ("update", "delete")]
    drain, squeue, delete, stop_slurmd, stop_keeper = actions
    assert drain == ("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={reasons.POD_TERMINATING}")
    drainer = reasons.drainer_of(drain[-1].removeprefix("Reason="))
    assert drainer is not None and drainer.reason_class == "kubernetes"
    assert squeue[0] == "squeue" and squeue[squeue.index("-w") + 1] == NODE
    assert delete == ("scontrol", "delete", f"NodeName={NODE}")
    assert stop_slurmd == ("signal", "SIGTERM", str(SLURMD)) and stop_keeper == ("signal", "SIGTERM", str(KEEPER))
    assert NODE not in w.fake.nodes
    assert w.logs[-2:] == [f"leaving: draining {NODE}", f"leaving: {NODE} deleted from Slurm"]


def test_the_leave_waits_for_running_jobs(settings: Settings, supervise: Start) -> None:
    w = supervise(settings)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    w.fake.jobs[NODE] = ["17", "18"]
    started = time.monotonic()
    w.sup.terminate()
    wait_until("the node to be drained", lambda: "DRAIN" in w.fake.nodes[NODE].state)
    wait_until("three looks at the node's jobs", lambda: _count(w.fake.calls, "squeue") >= 3)
    assert not any(c[1] == "delete" for c in w.fake.calls), "deleted while jobs ran"
    assert w.procs.sent(signal.SIGTERM) == 0, "slurmd stopped while jobs ran"
    w.fake.jobs[NODE] = []  # the jobs end
    assert w.result() == 0
    assert time.monotonic() - started < 3
    assert NODE not in w.fake.nodes and w.procs.sent(signal.SIGTERM) == 2
    assert sum(1 for c in w.fake.calls if c[0] == "squeue") >= 2


def test_the_leave_gives_up_on_jobs_after_the_timeout(settings: Settings, supervise: Start) -> None:
    w = supervise(replace(settings, leave_timeout_s=0.3))
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    w.fake.jobs[NODE] = ["17"]  # never ends
    started = time.monotonic()
    w.sup.terminate()
    assert w.result() == 0
    assert 0.3 <= time.monotonic() - started < 3
    # Slurm refuses to delete a node with jobs: it stays listed (DOWN once slurmd is gone)
    assert any(m.startswith(f"leaving: could not delete {NODE} from Slurm; it stays listed as DOWN") for m in w.logs)
    assert w.procs.sent(signal.SIGTERM) == 2


def test_a_failing_drain_or_squeue_does_not_stop_the_leave(settings: Settings, supervise: Start) -> None:
    w = supervise(settings)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    w.fake.fail_with = "slurm_update error: Unable to contact slurm controller (connect failure)\n"
    w.sup.terminate()
    assert w.result() == 0
    assert any(m.startswith(f"leaving: drain of {NODE} failed") for m in w.logs)
    assert any(m.startswith(f"leaving: could not delete {NODE} from Slurm") for m in w.logs)
    assert w.procs.sent(signal.SIGTERM) == 2


def test_a_real_sigterm_reaches_the_leave(settings: Settings, supervise: Start) -> None:
    """The handlers ``warden-node run`` installs (here in pytest's main thread, as in the container)."""
    w = supervise(settings, go=False)
    restore = install_signal_handlers(w.sup)
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        assert w.sup.run() == 0
    finally:
        restore()
    assert NODE not in w.fake.nodes and f"leaving: draining {NODE}" in w.logs


def test_slurmd_exiting_ends_the_supervisor_with_its_status(settings: Settings, supervise: Start) -> None:
    w = supervise(settings)
    wait_until("slurmd to start", lambda: w.procs.started != [])
    w.procs.exit(SLURMD, 3)
    assert w.result() == 3
    assert w.logs[-1] == "slurmd exited (status 3)"
    assert not any(c[1] in ("update", "delete") for c in w.fake.calls if c[0] == "scontrol")


def _count(calls: Sequence[Sequence[str]], *argv: str) -> int:
    """How many commands the fake Slurm ran that start with ``argv``."""
    return sum(1 for c in calls if tuple(c[: len(argv)]) == argv)


# --- gres: registering again -------------------------------------------------------------------------


def test_a_node_registered_without_its_gres_registers_again_once_slurmctld_knows_them(
    settings: Settings, supervise: Start
) -> None:
    fake = FakeSlurm([])
    fake.config["GresTypes"] = "(null)"  # slurmctld still restarting with the GPU group's GresTypes
    w = supervise(settings, fake)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    assert w.fake.nodes[NODE].gres == ""
    wait_until("ten looks at slurmctld's GresTypes", lambda: _count(w.fake.calls, "scontrol", "show", "config") >= 10)
    assert not any(c[1] == "delete" for c in w.fake.calls) and w.procs.sent(signal.SIGHUP) == 0

    w.fake.config["GresTypes"] = "gpu"
    wait_until("the node to carry its GPUs", lambda: NODE in w.fake.nodes and w.fake.nodes[NODE].gres != "")
    gres_thread = watcher(w, "gres")
    wait_until("the gres watcher to end, its work done", lambda: not gres_thread.is_alive())
    assert sum(1 for c in w.fake.calls if c[:2] == ("scontrol", "delete")) == 1
    assert w.procs.sent(signal.SIGHUP) == 1
    assert "registered without its gres (gpu): registering again" in w.logs


def test_a_node_with_its_gres_or_without_any_is_left_alone(settings: Settings, supervise: Start) -> None:
    w = supervise(settings)
    gres_thread = watcher(w, "gres")
    wait_until("the gres watcher to end", lambda: not gres_thread.is_alive())
    cpu = replace(settings, slurmd_conf="CPUs=4 RealMemory=1000 Feature=warden-group-cpu")
    w2 = supervise(cpu, FakeSlurm([]))
    wait_until("slurmd to register", lambda: NODE in w2.fake.nodes)
    watcher(w2, "config")
    watcher(w2, "config-stamp")  # spawned after the config watcher, before any gres watcher
    assert [t.name for t in w2.sup.threads] == ["warden-node-config", "warden-node-config-stamp"]
    calls = w.fake.calls + w2.fake.calls
    assert not any(c[1] == "delete" for c in calls) and ("scontrol", "show", "config") not in calls


@pytest.mark.parametrize(
    ("registered", "types", "step"),
    [
        (None, "gpu", GresStep.WAIT),  # not registered yet
        ("gpu:h100:2(S:0)", None, GresStep.DONE),
        ("gpu:h100:1(S:0),gpu:h100:1(S:1)", "gpu", GresStep.DONE),
        ("", "(null)", GresStep.WAIT),  # slurmctld does not know the type yet
        ("", None, GresStep.WAIT),  # `scontrol show config` failed
        ("", "gpu", GresStep.REREGISTER),
        ("", "gpu,shard", GresStep.REREGISTER),
    ],
)
def test_gres_step(registered: str | None, types: str | None, step: GresStep) -> None:
    assert lifecycle.gres_step(["gpu"], registered, types) is step


def test_gres_names() -> None:
    assert lifecycle.gres_names("gpu:h100:8") == ["gpu"]
    assert lifecycle.gres_names("gpu:h100:4(S:0-1),shard:8,gpu:a100:1") == ["gpu", "shard"]
    assert lifecycle.gres_names("(null)") == lifecycle.gres_names("") == []
    assert lifecycle.node_gres_spec(LINE) == "gpu:h100:2"
    assert lifecycle.node_gres_spec("CPUs=4 Feature=warden-group-cpu") == ""


# --- a GPU worker without its driver -----------------------------------------------------------------


def test_a_gpu_worker_without_its_driver_is_drained_once_registered(settings: Settings, supervise: Start) -> None:
    fake = FakeSlurm([])
    procs = FakeProcesses(fake, register_at_start=False)
    w = supervise(replace(settings, driver_problem=NO_DRIVER, gpus=2), fake, procs)
    # not registered: nothing to drain (a dynamic node exists only once registered)
    wait_until("ten looks for the node in slurmctld", lambda: _count(w.fake.calls, "scontrol", "show", "node") >= 10)
    assert not any(c[1] == "update" for c in w.fake.calls)
    w.procs.register()
    wait_until("the drain", lambda: "DRAIN" in w.fake.nodes[NODE].state)
    node = w.fake.nodes[NODE]
    assert node.reason == f"warden-worker: {NO_DRIVER}" == lifecycle.driver_drain_reason(NO_DRIVER)
    assert reasons.drainer_of(node.reason) is not None and reasons.drainer_of(node.reason).prefix == reasons.WORKER  # type: ignore[union-attr]
    wait_until("the log", lambda: f"driver: drained {NODE}: {NO_DRIVER}" in w.logs)
    assert len(w.fake.updates(NODE)) == 1


def test_a_gpu_worker_without_its_driver_stays_drained_when_it_registers_again_for_its_gres(
    settings: Settings, supervise: Start
) -> None:
    """Registering again deletes the node (and any drain on it): the driver drain waits for the gres,
    or slurmd's health check, finding the fresh node undrained, would drain it with its own reason."""
    fake = FakeSlurm([])
    fake.config["GresTypes"] = "(null)"  # the node first registers without its GPUs
    w = supervise(replace(settings, driver_problem=NO_DRIVER, gpus=2), fake)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    wait_until("ten looks at slurmctld's GresTypes", lambda: _count(w.fake.calls, "scontrol", "show", "config") >= 10)
    assert not any(c[1] == "update" for c in w.fake.calls), "drained before the node had its GPUs"
    w.fake.config["GresTypes"] = "gpu"
    wait_until("the drain", lambda: NODE in w.fake.nodes and "DRAIN" in w.fake.nodes[NODE].state)
    node = w.fake.nodes[NODE]
    assert node.gres != "" and node.reason == f"warden-worker: {NO_DRIVER}", node
    assert _count(w.fake.calls, "scontrol", "delete") == 1 and len(w.fake.updates(NODE)) == 1


def test_a_gpu_worker_with_its_driver_is_not_drained(settings: Settings, supervise: Start) -> None:
    w = supervise(replace(settings, gpus=2))
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    gres_thread = watcher(w, "gres")  # a GPU worker's watcher: it ends once the node has its GPUs
    wait_until("the gres watcher to end", lambda: not gres_thread.is_alive())
    assert [t.name for t in w.sup.threads if t.name == "warden-node-driver"] == [], "nothing watches to drain"
    assert w.fake.updates(NODE) == [] and "DRAIN" not in w.fake.nodes[NODE].state


# --- following the config ----------------------------------------------------------------------------


def test_the_config_is_reloaded_only_when_it_changed(
    settings: Settings, supervise: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[Path] = []  # a spy on the real hash: each call is one look at the ConfigMap
    real_hash = lifecycle.dirs_hash

    def counted(dirs: Sequence[Path]) -> str:
        looks.extend(dirs)
        return real_hash(dirs)

    monkeypatch.setattr(lifecycle, "dirs_hash", counted)
    w = supervise(settings)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    wait_until("ten looks at an unchanged ConfigMap", lambda: len(looks) >= 10)
    assert w.procs.sent(signal.SIGHUP) == 0 and not any("reloading" in m for m in w.logs)

    conf = settings.config_dir / "slurm.conf"
    conf.write_text(conf.read_text() + "MessageTimeout=17\n")
    wait_until("slurmd to get SIGHUP", lambda: w.procs.sent(signal.SIGHUP) == 1)
    for copy in (settings.slurm_etc / "slurm.conf", settings.client_config_dir / "slurm.conf"):
        assert "MessageTimeout=17" in copy.read_text()
    assert f"config: {settings.config_dir} changed; reloading" in w.logs
    # the node's own files again: its gres.conf line (once), the group's plugstack.conf
    gres = (settings.slurm_etc / "gres.conf").read_text()
    assert gres.count(f"NodeName={NODE} ") == 1, gres
    assert "bind=/scratch" in (settings.slurm_etc / "plugstack.conf").read_text()
    seen = len(looks)
    wait_until("ten more looks", lambda: len(looks) >= seen + 10)
    assert w.procs.sent(signal.SIGHUP) == 1, "reloaded again without a change"


def test_a_reload_waits_for_a_restarting_slurmd_to_catch_sighup(settings: Settings, supervise: Start) -> None:
    """slurmctld's reconfigure reached slurmd first: it executes itself again, and until it has set its handlers
    a SIGHUP would end it (SIGHUP's default action; slurmd exits 129). The supervisor's SIGHUP waits."""
    w = supervise(settings)
    wait_until("slurmd to register", lambda: NODE in w.fake.nodes)
    w.procs.restarting = True
    conf = settings.config_dir / "slurm.conf"
    conf.write_text(conf.read_text() + "MessageTimeout=17\n")
    wait_until(
        "the new files installed", lambda: "MessageTimeout=17" in (settings.slurm_etc / "slurm.conf").read_text()
    )
    time.sleep(0.3)
    assert w.procs.sent(signal.SIGHUP) == 0, "SIGHUP sent to a slurmd that does not catch it"
    w.procs.restarting = False
    wait_until("slurmd to get SIGHUP", lambda: w.procs.sent(signal.SIGHUP) == 1)


def test_whether_a_process_catches_a_signal_is_read_from_proc() -> None:
    from warden.node.supervisor import Children

    previous = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        assert not Children().catches(os.getpid(), signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, lambda *_: None)
        assert Children().catches(os.getpid(), signal.SIGUSR2)
    finally:
        signal.signal(signal.SIGUSR2, previous)


def _stamp(settings: Settings, extra_line: str = "") -> str:
    """A slurm.conf as the operator renders it (its first line the hash of the files), and that hash."""
    conf = settings.config_dir / "slurm.conf"
    body = confighash.unstamped(conf.read_text()) + extra_line
    files = {"slurm.conf": body, "gres.conf": (settings.config_dir / "gres.conf").read_text()}
    stamped = confighash.stamped(files)["slurm.conf"]
    conf.write_text(stamped)
    return confighash.of_text(stamped)


def test_the_config_slurmd_runs_is_recorded_in_its_node_once_it_started_again(
    settings: Settings, supervise: Start
) -> None:
    first = _stamp(settings)
    w = supervise(replace(settings, config_confirm_s=2))
    wait_until("the files slurmd started with recorded", lambda: w.fake.nodes[NODE].extra == f"warden-config={first}")
    second = _stamp(settings, "MessageTimeout=17\n")
    wait_until("the new files recorded", lambda: w.fake.nodes[NODE].extra == f"warden-config={second}")
    assert first != second and w.procs.sent(signal.SIGHUP) == 1
    assert f"config: slurmd runs {second} (recorded in {NODE}'s Extra)" in w.logs


def test_a_slurmd_that_does_not_take_new_files_gets_sighup_again_and_keeps_the_old_stamp(
    settings: Settings, supervise: Start
) -> None:
    """The reconfigure fails anyway (slurmd's new image does not start and the old one runs on): slurmd does not
    start again. Two more SIGHUPs, then the node's Extra still names the old files, for the operator to report."""
    first = _stamp(settings)
    w = supervise(replace(settings, config_confirm_s=0.2))
    wait_until("the files slurmd started with recorded", lambda: w.fake.nodes[NODE].extra == f"warden-config={first}")
    w.procs.takes_reconfigure = False
    second = _stamp(settings, "MessageTimeout=17\n")
    wait_until("the supervisor to give up", lambda: any("still runs another configuration" in m for m in w.logs))
    assert w.procs.sent(signal.SIGHUP) == supervisor.CONFIRM_TRIES
    assert w.fake.nodes[NODE].extra == f"warden-config={first}"
    assert f"config: slurmd still runs another configuration than {second}" in w.logs.text()


def test_a_failed_reload_is_retried(settings: Settings, supervise: Start) -> None:
    w = supervise(settings)
    (settings.slurm_etc / "cgroup.conf").mkdir()  # in the way of the ConfigMap's new file
    (settings.config_dir / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
    wait_until("a failed reload", lambda: "config: reload failed; retrying" in w.logs)
    assert w.procs.sent(signal.SIGHUP) == 0
    (settings.slurm_etc / "cgroup.conf").rmdir()
    wait_until("slurmd to get SIGHUP", lambda: w.procs.sent(signal.SIGHUP) == 1)
    assert (settings.slurm_etc / "cgroup.conf").read_text() == "CgroupPlugin=autodetect\n"


def test_config_hash_sees_contents_not_the_volumes_own_entries(tmp_path: Path) -> None:
    d = tmp_path / "cm"
    d.mkdir()
    (d / "slurm.conf").write_text("a\n")
    first = lifecycle.dirs_hash([d])
    (d / "..2025_06_02").mkdir()
    (d / "..data").symlink_to("..2025_06_02")
    assert lifecycle.dirs_hash([d]) == first
    (d / "slurm.conf").write_text("b\n")
    assert lifecycle.dirs_hash([d]) != first
    assert lifecycle.dirs_hash([tmp_path / "missing"]) == lifecycle.dirs_hash([])


# --- the files ---------------------------------------------------------------------------------------


def test_files_are_installed_as_slurm_wants_them(settings: Settings) -> None:
    logs = Logs()
    files = NodeFiles(settings, logs)
    files.install()
    etc = settings.slurm_etc
    assert sorted(p.name for p in etc.iterdir()) == [
        "gres.conf", "plugstack.conf", "plugstack.gpu.conf", "slurm.conf", "slurm.key",
    ]  # fmt: skip
    assert (etc / "slurm.key").stat().st_mode & 0o777 == 0o600
    assert (etc / "slurm.conf").stat().st_mode & 0o777 == 0o644
    assert (etc / "plugstack.conf").read_text() == (settings.config_dir / "plugstack.gpu.conf").read_text()
    dev = settings.dev_dir
    line = f"NodeName={NODE} Name=gpu Type=h100 File={dev}/nvidia2,{dev}/nvidia10"
    assert (etc / "gres.conf").read_text() == f"AutoDetect=off\n{line}\n"
    assert logs == [
        # (listed before the key is installed, as the entrypoints' warden_slurm_config does)
        f"config: {settings.config_dir} -> {etc} (gres.conf plugstack.conf plugstack.gpu.conf slurm.conf)",
        "plugstack: worker group gpu",
        f"gres: {NODE} has gpu {dev}/nvidia2,{dev}/nvidia10",
    ]
    files.install()  # again (a reload): still one line of this node
    assert (etc / "gres.conf").read_text().count("NodeName=") == 1
    files.client_config()
    assert sorted(p.name for p in settings.client_config_dir.iterdir()) == [
        "gres.conf", "plugstack.conf", "plugstack.gpu.conf", "slurm.conf",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("gres", "want"),
    [
        ("gpu:h100:2", "Name=gpu Type=h100"),
        ("gpu:2", "Name=gpu"),
        ("gpu:h100:1,gpu:a100:1", "Name=gpu Type=h100"),
    ],
)
def test_gres_conf_line(gres: str, want: str) -> None:
    files = [Path("/dev/nvidia4"), Path("/dev/nvidia5")]
    assert lifecycle.gres_conf_line("n", gres, files) == f"NodeName=n {want} File=/dev/nvidia4,/dev/nvidia5"
    assert lifecycle.gres_conf_line("n", gres, []) is None
    assert lifecycle.gres_conf_line("n", "", files) is None


def test_a_gpu_pod_without_device_files_says_so(settings: Settings) -> None:
    for f in settings.dev_dir.glob("nvidia[0-9]*"):
        f.unlink()
    logs = Logs()
    NodeFiles(settings, logs).install()
    assert "gres: warning: no /dev/nvidia<N> device files for gpu:h100:2 (no GPU given to this pod?)" in logs
    assert (settings.slurm_etc / "gres.conf").read_text() == "AutoDetect=off\n"


def test_files_missing_stop_the_container(settings: Settings) -> None:
    (settings.config_dir / "slurm.conf").unlink()
    with pytest.raises(FilesError, match=r"no .*/slurm.conf \(mount the ConfigMap at"):
        NodeFiles(settings, Logs()).install()
    (settings.config_dir / "slurm.conf").write_text("ClusterName=demo\n")
    settings.auth_key.unlink()
    with pytest.raises(FilesError, match="no auth key at"):
        NodeFiles(settings, Logs()).install()


# --- settings and slurmd -----------------------------------------------------------------------------


def test_settings_from_the_environment() -> None:
    s = Settings.from_env({"WARDEN_SLURMD_CONF": LINE})
    assert (s.leave_timeout_s, s.config_poll_s, s.node_name_given) == (40, 2.0, False)
    assert s.config_dir == Path("/etc/warden/slurm") and s.slurm_etc == Path("/etc/slurm")
    assert lifecycle.slurmd_argv(s, ["-vv"]) == ["slurmd", "-D", "-Z", "--conf", LINE, "-vv"]
    s = Settings.from_env({"WARDEN_SLURMD_CONF": LINE, "WARDEN_NODE_NAME": "w-1", "WARDEN_LEAVE_TIMEOUT": "90",
                           "WARDEN_SLURMD_ARGS": " -v  -v ", "WARDEN_DRIVER_PROBLEM": NO_DRIVER})  # fmt: skip
    assert lifecycle.slurmd_argv(s) == ["slurmd", "-D", "-Z", "-N", "w-1", "--conf", LINE, "-v", "-v"]
    assert (s.leave_timeout_s, s.driver_problem) == (90, NO_DRIVER)
    with pytest.raises(SettingsError, match="WARDEN_SLURMD_CONF is empty"):
        Settings.from_env({})
    with pytest.raises(SettingsError, match="WARDEN_LEAVE_TIMEOUT"):
        Settings.from_env({"WARDEN_SLURMD_CONF": LINE, "WARDEN_LEAVE_TIMEOUT": "forty"})


def test_exit_status_is_the_shells() -> None:
    assert lifecycle.exit_status(3 << 8) == 3
    assert lifecycle.exit_status(signal.SIGKILL) == 128 + signal.SIGKILL


def test_pid_1_reaps_orphans_but_never_a_commands_own_status() -> None:
    """As PID 1 the supervisor waits for any child; a command it runs at the same time keeps its exit
    status. In a process of its own that takes orphans as PID 1 does (PR_SET_CHILD_SUBREAPER)."""
    script = textwrap.dedent("""
        import ctypes, threading, time
        from warden.node.supervisor import Children
        assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
        c = Children()
        slurmd = c.start(["sh", "-c", "sleep 0.2 & exit 3"])  # leaves an orphan behind
        rcs = []
        threads = [threading.Thread(target=lambda: rcs.append(c.run(["sh", "-c", "sleep 1; exit 5"], 10).returncode))
                   for _ in range(3)]
        for t in threads:
            t.start()
        ended, deadline, busy_when_slurmd_ended = {}, time.monotonic() + 10, None
        while time.monotonic() < deadline and (len(ended) < 2 or any(t.is_alive() for t in threads)):
            ended.update(c.reap())
            if slurmd in ended and busy_when_slurmd_ended is None:
                busy_when_slurmd_ended = any(t.is_alive() for t in threads)
            time.sleep(0.005)
        print(rcs, ended.pop(slurmd) >> 8, list(ended.values()), busy_when_slurmd_ended)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # every command kept its status; slurmd's end was seen while they ran; the orphan was reaped after
    assert out.stdout.split("\n")[0] == "[5, 5, 5] 3 [0] True", out.stdout


# --- the pod contract: the leave fits in the pod's grace period --------------------------------------


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_worker_pods_grace_period_holds_the_leave(example: str) -> None:
    """Kubernetes kills the container terminationGracePeriodSeconds after SIGTERM: the leave (drain,
    WARDEN_LEAVE_TIMEOUT for the jobs, delete, slurmd's stop) must be over by then."""
    sets = [o for o in render(load(example)).objects if o["kind"] == WORKER_SET_KIND]
    assert sets, example
    for ws in sets:
        pod = ws["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        leave = Settings.from_env({"WARDEN_SLURMD_CONF": LINE, **env}).leave_timeout_s
        assert leave + lifecycle.LEAVE_OVERHEAD_S <= pod["terminationGracePeriodSeconds"], ws["metadata"]["name"]


# --- the command, as the entrypoint runs it ----------------------------------------------------------


def test_warden_node_run_leaves_on_sigterm_with_real_processes(settings: Settings, tmp_path: Path) -> None:
    """``python -m warden.node run`` as the entrypoint ``exec``s it, with stand-in programs on PATH:
    slurmd runs until SIGTERM, scontrol and squeue write down what they were asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    programs = {
        "slurmd": 'case "$1" in -V) echo "slurm 24.11.5"; exit 0;; esac\n'
        f'echo "slurmd $*" >>{calls}\ntrap \'echo "slurmd TERM" >>{calls}; exit 0\' TERM\n'
        "while :; do sleep 0.05; done",
        "scontrol": f'echo "scontrol $*" >>{calls}\ncase "$1" in show) exit 1;; esac',
        "squeue": f'echo "squeue $*" >>{calls}',
    }
    for name, body in programs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WARDEN_SLURMD_CONF": "CPUs=4 RealMemory=1000 Feature=warden-group-cpu",
        "WARDEN_NODE_NAME": NODE,
        "WARDEN_CONFIG_DIR": str(settings.config_dir),
        "WARDEN_LEAVE_TIMEOUT": "5",
        "WARDEN_SLURMD_ARGS": "-v",
    }
    proc = subprocess.Popen([sys.executable, "-m", "warden.node", "run", "--", "-vv"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_until("slurmd to start", lambda: calls.exists() and "slurmd -D" in calls.read_text(), 20)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert calls.read_text().splitlines() == [
        f"slurmd -D -Z -N {NODE} --conf CPUs=4 RealMemory=1000 Feature=warden-group-cpu -v -vv",
        f"scontrol update NodeName={NODE} State=DRAIN Reason=warden: pod terminating",
        f"squeue -h -w {NODE} -t running,completing -o %i",
        f"scontrol delete NodeName={NODE}",
        "slurmd TERM",
    ]
    assert out.splitlines() == [
        f"[worker] starting slurmd 24.11.5 as dynamic node {NODE}: CPUs=4 RealMemory=1000 Feature=warden-group-cpu",
        f"[worker] leaving: draining {NODE}",
        f"[worker] leaving: {NODE} deleted from Slurm",
    ]

"""The worker container's main process: slurmd as a dynamic node, and the node's life in Slurm around it.

images/worker/entrypoint.sh prepares mounts, cgroups and devices, then ``exec``s this (as PID 1):

- slurmd starts as a child (``slurmd -D -Z --conf "$WARDEN_SLURMD_CONF"``); when it exits, so does
  this process, with its status;
- on SIGTERM or SIGINT (pod deleted, WorkerSet scaled in, node drained by Kubernetes) the node leaves
  Slurm cleanly: drained (``warden.slurm.reasons.POD_TERMINATING``: no new jobs), its running jobs get
  up to WARDEN_LEAVE_TIMEOUT seconds, the dynamic node is deleted from slurmctld (so ``sinfo`` keeps
  no DOWN ghost of every removed pod), then slurmd stops. The pod's terminationGracePeriodSeconds
  holds all of it (a unit test holds the renderer to that);
- a node registered without the gres of its node line registers again once slurmctld knows their
  types (``lifecycle.gres_step``);
- a GPU worker whose job steps cannot get the NVIDIA driver (WARDEN_DRIVER_PROBLEM, found by the
  entrypoint) is drained with ``warden.slurm.reasons.WORKER`` as soon as it has registered;
- every WARDEN_CONFIG_POLL seconds the mounted ConfigMap is hashed; when the operator changed it, the
  files are installed again (``warden.node.files``) and slurmd reloads them in place (SIGHUP, sent only
  while slurmd catches it), running jobs going on; once slurmd started again after the files were
  installed, the stamp of the files it runs (``warden.slurm.confighash``) goes to the node's Extra, where
  the operator compares it with the rendered one;
- as PID 1 it reaps every process that ends in the container (slurmstepd and the like are re-parented
  to it), but never one a command of its own still waits for.

Log lines are the entrypoint's (``[worker] ...``); tests of the dataplane tier look for some of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from warden.node import lifecycle
from warden.node.files import FilesError, NodeFiles
from warden.node.lifecycle import GresStep, Settings
from warden.slurm import confighash
from warden.slurm.cli import CommandResult, CommandRunner, Slurm, run_command
from warden.slurm.model import Node, SlurmError

Log = Callable[[str], None]

#: SIGHUPs a slurmd gets for new files before the supervisor leaves it on its old ones (and says so)
CONFIRM_TRIES = 3
#: how long a SIGHUP for slurmd waits for slurmd to catch SIGHUP again (it re-executes itself on a reconfigure)
HUP_WAIT_S = 30.0
HUP_POLL_S = 0.05


def log_line(component: str = "worker") -> Log:
    """The entrypoints' ``warden_log``: ``[worker] message`` on stderr."""

    def log(message: str) -> None:
        print(f"[{component}] {message}", file=sys.stderr, flush=True)

    return log


class Processes(Protocol):
    """How the supervisor starts, signals and waits for processes (a fake in the unit tier)."""

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult: ...

    def start(self, argv: Sequence[str]) -> int: ...

    def signal(self, pid: int, sig: int) -> None: ...

    def catches(self, pid: int, sig: int) -> bool:
        """Whether the process has a handler for ``sig`` now (a signal it does not catch may end it)."""
        ...

    def reap(self) -> dict[int, int]:
        """Every child that ended since the last call, as {pid: wait status}."""
        ...


class Children:
    """The real processes. As PID 1 of the container, ``reap`` waits for any child (``waitpid(-1)``), so
    it does so only while no command of ``run`` or ``start`` is between its fork and its own wait:
    such a command would otherwise lose its exit status. Meanwhile it waits for the processes of
    ``start`` (slurmd) by their PIDs only, so that a hanging command never hides slurmd's end."""

    def __init__(self, runner: CommandRunner = run_command) -> None:
        self._runner = runner
        self._cond = threading.Condition()
        self._busy = 0
        # started processes, kept so that no garbage-collected Popen reaps one behind our back
        self._started: dict[int, subprocess.Popen[bytes]] = {}

    @contextmanager
    def _waiting(self) -> Iterator[None]:
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        with self._waiting():
            return self._runner(argv, timeout)

    def start(self, argv: Sequence[str]) -> int:
        with self._waiting():
            proc = subprocess.Popen(list(argv))
        self._started[proc.pid] = proc
        return proc.pid

    def signal(self, pid: int, sig: int) -> None:
        os.kill(pid, sig)

    def catches(self, pid: int, sig: int) -> bool:
        """SigCgt of /proc/<pid>/status (a bit mask, bit ``sig - 1``); True when it cannot be read (the
        signal then finds no process, or the kernel shows none)."""
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("SigCgt:"):
                        return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
        except (OSError, ValueError, IndexError):
            pass
        return True

    def reap(self) -> dict[int, int]:
        ended: dict[int, int] = {}
        with self._cond:
            if self._busy:  # orphans in the next round; slurmd now
                for pid in list(self._started):
                    try:
                        got, status = os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        continue
                    if got:
                        ended[pid] = status
                        self._started.pop(pid).returncode = lifecycle.exit_status(status)
                return ended
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                ended[pid] = status
                proc = self._started.pop(pid, None)
                if proc is not None:
                    proc.returncode = lifecycle.exit_status(status)
        return ended


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        processes: Processes,
        *,
        slurm: Slurm | None = None,
        files: NodeFiles | None = None,
        log: Log | None = None,
        config_hash: str | None = None,
        also_stop: Sequence[int] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.s = settings
        self.procs = processes
        self.log = log or log_line()
        self.slurm = slurm or Slurm(processes.run)
        self.files = files or NodeFiles(settings, self.log)
        self.config_hash = config_hash or lifecycle.dirs_hash([settings.config_dir])
        self.also_stop = tuple(also_stop)
        self.clock = clock
        self.slurmd_pid: int | None = None
        self.slurmd_status: int | None = None
        self._terminate = threading.Event()
        # the watchers stop: the node leaves, or slurmd has exited
        self._stop = threading.Event()
        # the node is registered with every gres of its node line (set at once when it has none): a
        # drain made before that would be lost when register_with_gres deletes the node
        self._gres_done = threading.Event()
        if not lifecycle.gres_names(settings.gres_spec):
            self._gres_done.set()
        self.threads: list[threading.Thread] = []

    # --- the main thread ---------------------------------------------------------------------------

    def terminate(self) -> None:
        """SIGTERM/SIGINT: leave Slurm (``run`` does it, in the main thread)."""
        self._terminate.set()

    def run(self, slurmd_args: Sequence[str] = ()) -> int:
        """Start slurmd and the watchers; return the container's exit status."""
        s = self.s
        self.log(f"starting slurmd {self._slurmd_version()} as dynamic node {s.node}: {s.slurmd_conf}")
        self.slurmd_pid = self.procs.start(lifecycle.slurmd_argv(s, slurmd_args))
        self._spawn("config", self.follow_config)
        self._spawn("config-stamp", self.record_config)
        if s.driver_problem:
            self._spawn("driver", self.drain_for_driver)
        if lifecycle.gres_names(s.gres_spec):
            self._spawn("gres", self.register_with_gres)
        while True:
            if self._terminate.wait(s.reap_poll_s):
                return self.leave()
            self._reap()
            if self.slurmd_status is not None:
                self._stop.set()
                rc = lifecycle.exit_status(self.slurmd_status)
                self.log(f"slurmd exited (status {rc})")
                return rc

    def leave(self) -> int:
        """Drain, give running jobs up to WARDEN_LEAVE_TIMEOUT, delete the node, stop slurmd."""
        node = self.s.node
        self._stop.set()  # no watcher acts any more (a gres watcher would register the node again)
        self.log(f"leaving: draining {node}")
        try:
            self.slurm.drain(node, lifecycle.LEAVE_REASON)
        except SlurmError as e:
            self.log(f"leaving: drain of {node} failed: {e}")
        deadline = self.clock() + self.s.leave_timeout_s
        while self._running_jobs() and self.clock() < deadline:
            self._reap()
            time.sleep(self.s.jobs_poll_s)
        # Delete while slurmd still runs: user-side Slurm commands authenticate through its socket.
        try:
            self.slurm.delete_node(node)
            self.log(f"leaving: {node} deleted from Slurm")
        except SlurmError as e:
            self.log(f"leaving: could not delete {node} from Slurm; it stays listed as DOWN ({e})")
        self._reap()
        for pid in (self.slurmd_pid, *self.also_stop):
            if pid is not None and not (pid == self.slurmd_pid and self.slurmd_status is not None):
                self._signal(pid, signal.SIGTERM)
        while self.slurmd_pid is not None and self.slurmd_status is None:
            time.sleep(0.1)
            self._reap()
        return 0

    def _running_jobs(self) -> list[str]:
        try:
            return self.slurm.node_jobs(self.s.node)
        except SlurmError as e:
            self.log(f"leaving: cannot list the jobs of {self.s.node}: {e}")
            return []

    def _reap(self) -> None:
        ended = self.procs.reap()
        if self.slurmd_pid in ended:
            self.slurmd_status = ended[self.slurmd_pid]

    def _slurmd_version(self) -> str:
        words = self.procs.run(["slurmd", "-V"], 30).stdout.split()  # "slurm 24.11.5"
        return words[1] if len(words) > 1 else "(unknown version)"

    def _signal(self, pid: int, sig: int) -> bool:
        try:
            self.procs.signal(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as e:  # a watcher never takes the container down, but says why it stopped
                self.log(f"{name}: error: {type(e).__name__}: {e}")

        t = threading.Thread(target=guarded, name=f"warden-node-{name}", daemon=True)
        self.threads.append(t)
        t.start()

    # --- the watchers (threads) --------------------------------------------------------------------

    def registered(self) -> Node | None:
        """This node in slurmctld; None until slurmd has registered it (a dynamic node exists only then)."""
        try:
            return self.slurm.get_node(self.s.node)
        except SlurmError:
            return None

    def follow_config(self) -> None:
        """A changed ConfigMap (new partition, gres, extraLines): new files here and in the jail, then
        SIGHUP, on which slurmd re-reads them in place (as ``scontrol reconfigure`` makes it). Which of
        them slurmd runs goes to the node's Extra (``record_config``, ``confirm_config``)."""
        last = self.config_hash
        while not self._stop.wait(self.s.config_poll_s):
            now = lifecycle.dirs_hash([self.s.config_dir])
            if now == last:
                continue
            self.log(f"config: {self.s.config_dir} changed; reloading")
            node = self.registered()
            started = node.slurmd_started if node is not None else 0
            if self.reload():
                last = now
                self.confirm_config(started)
            else:
                self.log("config: reload failed; retrying")

    def _stamp(self) -> str:
        try:
            return confighash.of_text((self.s.config_dir / confighash.SLURM_CONF).read_text())
        except OSError:
            return ""

    def _record(self, stamp: str) -> bool:
        try:
            self.slurm.set_extra(self.s.node, confighash.extra(stamp))
        except SlurmError as e:
            self.log(f"config: could not record {stamp} in {self.s.node}'s Extra: {e}")
            return False
        self.log(f"config: slurmd runs {stamp} (recorded in {self.s.node}'s Extra)")
        return True

    def record_config(self) -> None:
        """Once slurmd registered: the stamp of the files it started with, in its node's Extra (unless they
        changed meanwhile: then ``follow_config`` records what slurmd runs)."""
        stamp = self._stamp()
        while stamp and not self._stop.is_set():
            if lifecycle.dirs_hash([self.s.config_dir]) != self.config_hash:
                return
            if self.registered() is not None and self._record(stamp):
                return
            self._stop.wait(self.s.registered_poll_s)

    def confirm_config(self, started: int) -> bool:
        """Whether slurmd runs the files just installed: it started again (a reconfigure makes slurmd execute
        itself anew) since ``started``, its ``SlurmdStartTime`` before they were installed. Then their stamp goes
        to the node's Extra. A slurmd that does not start again within ``config_confirm_s`` gets SIGHUP again,
        up to ``CONFIRM_TRIES`` times (one that started again within the same second as before counts as not
        started: it gets one more); one that still runs the old files keeps the old stamp in its Extra, and
        the operator, comparing it with the rendered one, says so in the SlurmCluster's status."""
        stamp = self._stamp()
        if not stamp:  # files of an operator before the stamp: nothing to compare
            return False
        for attempt in range(1, CONFIRM_TRIES + 1):
            deadline = self.clock() + self.s.config_confirm_s
            while self.clock() < deadline:
                node = self.registered()
                if node is not None and node.slurmd_started > started:
                    return self._record(stamp)
                if self._stop.wait(self.s.registered_poll_s):
                    return False
            if attempt < CONFIRM_TRIES:
                self.log(f"config: slurmd did not start again with {stamp} within {self.s.config_confirm_s:g}s;"
                         " SIGHUP again")  # fmt: skip
                self.hup_slurmd()
        self.log(f"config: slurmd still runs another configuration than {stamp} (reconfigure failed); its node's"
                 " Extra says which, the SlurmCluster's status says so")  # fmt: skip
        return False

    def reload(self) -> bool:
        try:
            self.files.install()
            self.files.client_config()
        except (FilesError, OSError) as e:
            self.log(f"config: error: {e}")
            return False
        return self.hup_slurmd()

    def hup_slurmd(self) -> bool:
        """SIGHUP to slurmd, once slurmd catches it. A reconfigure (slurmctld's own, pushed to every slurmd
        when the controller's files changed, or this supervisor's) makes slurmd execute itself again in place;
        until the new image has set its handlers, SIGHUP's default action ends it, and the container with
        it (running jobs lost). The supervisor's SIGHUP, landing in that moment, did so."""
        pid = self.slurmd_pid
        if pid is None:
            return False
        deadline = self.clock() + HUP_WAIT_S
        while not self.procs.catches(pid, signal.SIGHUP):
            if self.clock() >= deadline:
                self.log(f"config: slurmd has not caught SIGHUP for {HUP_WAIT_S:g}s (restarting?); trying again later")
                return False
            if self._stop.wait(HUP_POLL_S):
                return False
        return self._signal(pid, signal.SIGHUP)

    def drain_for_driver(self) -> None:
        """A GPU worker whose job steps cannot get the driver takes no jobs: drained, with the reason, as
        soon as it has registered with its gres (registering again deletes the node, and its drain)."""
        node, problem = self.s.node, self.s.driver_problem
        while not self._gres_done.is_set() or self.registered() is None:
            if self._stop.wait(self.s.registered_poll_s):
                return
        try:
            self.slurm.drain(node, lifecycle.driver_drain_reason(problem))
        except SlurmError as e:
            self.log(f"driver: could not drain {node}: {e}")
            return
        self.log(f"driver: drained {node}: {problem}")

    def register_with_gres(self) -> None:
        """Until the registered node carries every gres of its node line, and once slurmctld knows their
        types: delete the node, then SIGHUP slurmd, which registers it afresh."""
        want = lifecycle.gres_names(self.s.gres_spec)
        while not self._stop.wait(self.s.gres_poll_s):
            node = self.registered()
            gres = None if node is None else node.gres
            step = lifecycle.gres_step(want, gres, None)
            if step is GresStep.WAIT and gres is not None:  # registered without them: does slurmctld know them?
                try:
                    types = self.slurm.show_config().get("GresTypes", "")
                except SlurmError:
                    continue
                step = lifecycle.gres_step(want, gres, types)
            if step is GresStep.DONE:
                self._gres_done.set()
                return
            if step is GresStep.REREGISTER and not self._stop.is_set():
                self.log(f"registered without its gres ({','.join(want)}): registering again")
                try:
                    self.slurm.delete_node(self.s.node)
                except SlurmError as e:
                    self.log(f"gres: {e}")
                    continue
                self.hup_slurmd()

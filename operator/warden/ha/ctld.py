"""``python -m warden.ha.ctld``: what runs beside slurmctld in a controller pod with backup controllers
(``spec.controller.replicas`` 2-3, ``WARDEN_CONTROLLERS`` in the pod). The entrypoint
(images/controller/entrypoint.sh, through the one-line functions of images/controller/warden-ctld-ha.sh)
calls it; every decision is ``warden.ha.beat``'s, from the heartbeat file Slurm writes.

Slurm itself chooses which slurmctld is in charge; it leaves gaps that this closes:

- a stopped pod would wait SlurmctldTimeout for a backup to notice: on SIGTERM the controller in charge
  hands over at once (``hand-over``: ``scontrol takeover`` to the first backup after it that answers);
- a slurmctld that hung (SIGSTOP, a stuck disk, a lost node) while another took control still holds the
  queue as it was and would write it back over the other's when it resumes: ``fence`` kills it (SIGKILL,
  so that it writes nothing) once the heartbeat names another writer; its container then starts again;
- a primary (pod -0) that starts while a backup is in charge does not take control back: Slurm's primary
  would (REQUEST_CONTROL), and in Slurm 26.05 the backup answers that only after 30 s with nobody in
  charge meanwhile. ``wait-for-turn`` holds its slurmctld back (the pod Ready: the probe reads the
  "waiting" file) until the backup in charge stops answering: its pod gone (``stopped`` dated its beat
  back) or hung (its beat went stale). A backup starts in standby once a heartbeat file exists;
- the operator learns who is in charge from the pods (``serve``: ``GET /in-charge`` on
  ``WARDEN_IN_CHARGE_PORT``), never by deciding it again.

Subcommands (STATE: StateSaveLocation; errors and news on stderr as ``[controller] ...``):
  index                  this pod's index in SlurmctldHost
  in-charge STATE        the index of the controller in charge (nothing printed: none is)
  self-conf              write WARDEN_SELF_CONF: slurm.conf naming only this slurmctld (for the probe)
  wait-for-turn STATE    return once this pod may start its slurmctld
  fence PID STATE        kill PID once another controller took control from it; returns when PID ends
  hand-over              on SIGTERM, control to the first backup after this one that answers (status 1: none)
  handed-over STATE      wait (up to 20 s) until the heartbeat names another controller
  stopped STATE          after slurmctld exited: a backup that was in charge dates its beat back
  serve STATE            answer GET /in-charge on WARDEN_IN_CHARGE_PORT until stopped
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from warden.ha import beat
from warden.node.files import FilesError, write_whole

#: how often the loops look at the heartbeat (seconds)
POLL_S = 1.0
#: how long a stopping controller waits for the new one's beat after a handover
HANDED_OVER_S = 20.0
PING_TIMEOUT_S = 10
TAKEOVER_TIMEOUT_S = 30


@dataclass(frozen=True)
class Pod:
    """This controller pod, from its environment (the entrypoint's variables)."""

    host: str
    slurm_conf: Path
    self_conf: Path
    waiting: Path
    component: str = "controller"

    @classmethod
    def from_env(cls) -> Pod:
        env = os.environ
        host = env.get("WARDEN_CTLD_HOST") or socket.gethostname()
        return cls(
            host=host.split(".", 1)[0],
            slurm_conf=Path(env.get("SLURM_ETC") or "/etc/slurm") / "slurm.conf",
            self_conf=Path(env.get("WARDEN_SELF_CONF") or "/run/warden/ctld-self/slurm.conf"),
            waiting=Path(env.get("WARDEN_CTLD_WAITING") or "/run/warden/ctld-self/waiting"),
            component=env.get("WARDEN_COMPONENT") or "controller",
        )

    @property
    def index(self) -> int:
        idx = beat.index_of(self.host)
        if idx is None:
            raise SystemExit(f"[{self.component}] error: hostname {self.host} ends in no controller index")
        return idx

    def log(self, message: str) -> None:
        print(f"[{self.component}] {message}", file=sys.stderr, flush=True)

    def conf_text(self) -> str:
        try:
            return self.slurm_conf.read_text()
        except OSError:
            return ""

    def timeout_s(self) -> int:
        return beat.ctld_timeout(self.conf_text())

    def in_charge(self, state: Path, now: float | None = None) -> int | None:
        return beat.in_charge(beat.read(state), time.time() if now is None else now, self.timeout_s())


def write_self_conf(pod: Pod) -> int:
    try:
        text = beat.self_conf(pod.slurm_conf.read_text(), pod.host)
    except (OSError, ValueError) as e:
        pod.log(f"error: {e}")
        return 1
    try:
        pod.self_conf.parent.mkdir(parents=True, exist_ok=True)
        write_whole(pod.self_conf, text.encode(), 0o644, None)
    except (OSError, FilesError) as e:
        pod.log(f"error: {e}")
        return 1
    return 0


def wait_for_turn(pod: Pod, state: Path, sleep: Callable[[float], None] = time.sleep) -> int:
    me, told = pod.index, False
    pod.waiting.parent.mkdir(parents=True, exist_ok=True)
    if me != 0:
        # a backup starts in standby whoever is in charge, once a heartbeat file exists: before that its
        # slurmctld would not answer, and a primary starting then would wait 30 s for it
        while not (state / beat.HEARTBEAT).exists():
            if not told:
                pod.log("waiting for a controller in charge (no heartbeat file yet)")
                told = True
            pod.waiting.write_text("-\n")
            sleep(POLL_S)
        pod.waiting.unlink(missing_ok=True)
        return 0
    while (cur := pod.in_charge(state)) is not None and cur != me:
        if not told:
            pod.log(f"controller {cur} is in charge: standing by until it stops (no take-back, see warden.ha.ctld)")
            told = True
        pod.waiting.write_text(f"{cur}\n")
        sleep(POLL_S)
    pod.waiting.unlink(missing_ok=True)
    if told:
        pod.log("no controller is in charge any more: taking control")
    return 0


def fence(pod: Pod, pid: int, state: Path, sleep: Callable[[float], None] = time.sleep) -> int:
    watch = beat.Fence(me=pod.index, started=int(time.time()))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while _alive(pid):
        now = beat.read(state)
        if watch.lost_control(now) and now is not None and _alive(pid):
            pod.log(
                f"fence: slurmctld {now.writer} took control from this one; killing it (pid {pid}) "
                "before it writes the state it holds"
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        sleep(POLL_S)
    return 0


def hand_over(pod: Pod) -> int:
    me = pod.index
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=PING_TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        ping = ""
    target = beat.takeover_target(ping, me)
    if target is None:
        pod.log("stopping: no backup controller answers; slurmctld stops without handing over")
        return 1
    pod.log(f"stopping: handing control to backup controller {target} (scontrol takeover {target})")
    try:
        done = subprocess.run(["scontrol", "takeover", str(target)], timeout=TAKEOVER_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        done = False
    if done:
        pod.log(f"stopping: controller {target} took control")
        return 0
    pod.log(f"stopping: scontrol takeover {target} failed; slurmctld stops without handing over")
    return 1


def handed_over(pod: Pod, state: Path, sleep: Callable[[float], None] = time.sleep) -> int:
    me = pod.index
    deadline = time.monotonic() + HANDED_OVER_S
    while time.monotonic() < deadline:
        now = beat.read(state)
        if now is None or now.writer != me:
            return 0
        sleep(0.5)
    pod.log("stopping: the new controller in charge did not beat within 20 s")
    return 0


def stopped(pod: Pod, state: Path) -> int:
    me = pod.index
    now = beat.read(state)
    if me != 0 and now is not None and now.writer == me:
        try:
            write_whole(state / beat.HEARTBEAT, beat.dated_back(me), 0o644, None)
        except FilesError as e:
            pod.log(f"stopped in charge: cannot date the heartbeat back ({e}); the primary waits SlurmctldTimeout")
            return 0
        pod.log("stopped in charge: heartbeat dated back for the primary standing by")
    return 0


def verdict(pod: Pod, state: Path, now: float | None = None) -> dict[str, object]:
    """The answer of ``GET /in-charge`` (the operator's contract: warden.ha.verdict)."""
    conf = pod.conf_text()
    names = beat.controllers(conf)
    timeout = beat.ctld_timeout(conf)
    last = beat.read(state)
    moment = time.time() if now is None else now
    charge = beat.in_charge(last, moment, timeout)

    def name(idx: int | None) -> str | None:
        return names[idx] if idx is not None and 0 <= idx < len(names) else None

    return {
        "inCharge": name(charge),
        "writer": name(last.writer) if last else None,
        "beatAgeSeconds": max(0, int(moment - last.at)) if last else None,
        "slurmctldTimeout": timeout,
    }


def server(pod: Pod, state: Path, port: int) -> ThreadingHTTPServer:
    """The verdict's server on ``port`` (0: any free one), every address of the pod; not started."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            if self.path.split("?", 1)[0] != "/in-charge":
                self.send_error(404)
                return
            body = json.dumps(verdict(pod, state)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # http.server's names
            pass  # one line per operator round would drown the pod's log

    try:
        return _Server6(("::", port), Handler)
    except OSError:  # a kernel without IPv6
        return _Server4(("0.0.0.0", port), Handler)


def serve(pod: Pod, state: Path, port: int) -> int:
    running = server(pod, state, port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pod.log(f"who is in charge (the heartbeat's verdict): GET /in-charge on port {port}")
    running.serve_forever()
    return 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        # a caller that gave up before the answer (the operator's 2-s timeout on a starved node) is no error
        # of this server's: without this, each one left a traceback in the pod's log
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        # both families on one socket: pods have an IPv4 or an IPv6 address, or both
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _Server4(_Server):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warden.ha.ctld", description="backup controllers' pod side")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("index")
    sub.add_parser("self-conf")
    sub.add_parser("hand-over")
    for name in ("in-charge", "wait-for-turn", "handed-over", "stopped", "serve"):
        sub.add_parser(name).add_argument("state", type=Path)
    f = sub.add_parser("fence")
    f.add_argument("pid", type=int)
    f.add_argument("state", type=Path)
    opts = parser.parse_args(argv)
    pod = Pod.from_env()
    cmd = opts.command
    if cmd == "index":
        print(pod.index)
        return 0
    if cmd == "in-charge":
        charge = pod.in_charge(opts.state)
        if charge is not None:
            print(charge)
        return 0
    if cmd == "self-conf":
        return write_self_conf(pod)
    if cmd == "wait-for-turn":
        return wait_for_turn(pod, opts.state)
    if cmd == "fence":
        return fence(pod, opts.pid, opts.state)
    if cmd == "hand-over":
        return hand_over(pod)
    if cmd == "handed-over":
        return handed_over(pod, opts.state)
    if cmd == "stopped":
        return stopped(pod, opts.state)
    port = os.environ.get("WARDEN_IN_CHARGE_PORT", "")
    if not port.isdigit():
        pod.log(f"error: WARDEN_IN_CHARGE_PORT={port!r} is no port (set by the operator with backup controllers)")
        return 1
    return serve(pod, opts.state, int(port))


if __name__ == "__main__":
    sys.exit(main())

"""A real, throwaway Kubernetes control plane: the integration tier's, the benches', and by hand.

etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok, built from upstream Go modules by
``hack/build-k8s-bins.sh`` and started here on loopback with random free ports, certificates made with
openssl, and everything (data, certs, logs) in one temporary directory.

Nodes are fake (kwok): pods scheduled onto them become Running and Ready, pods owned by a Job then
Succeed, and deleted pods disappear. Everything else (controllers, garbage collection, admission, CEL
validation, RBAC, ServiceAccount tokens) is the real upstream code.

Use it from pytest (``tests/integration/conftest.py``) or from the shell::

    python -m warden_dev controlplane up [--nodes N] [--gpu-nodes N]   # prints `export KUBECONFIG=...`
    eval "$(python -m warden_dev controlplane env)"
    python -m warden_dev controlplane down                              # also part of `make down`
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK_DIR = REPO_ROOT / "hack"
BUILD_SCRIPT = HACK_DIR / "build-k8s-bins.sh"

#: what the control plane needs from the bin dir
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
#: kwok only manages nodes carrying this annotation
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
WORK_DIR_PREFIX = "warden-cp-"
OWNER_FILE = "owner.pid"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
GPU_RESOURCE = "nvidia.com/gpu"

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached."""


# ---------------------------------------------------------------------------------------------------
# binaries


def pinned_versions() -> dict[str, str]:
    """The KEY=value pins of hack/versions.env."""
    pins: dict[str, str] = {}
    for line in (HACK_DIR / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def bin_dir() -> Path:
    """Where hack/build-k8s-bins.sh puts (or has put) the binaries for the pinned versions."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def binaries_ready() -> tuple[bool, str]:
    """(True, "") when every control-plane binary exists for the pinned versions, else (False, why)."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--check", "controlplane"], capture_output=True, text=True)
    return out.returncode == 0, (out.stdout + out.stderr).strip()


def ensure_binaries(build: bool) -> Path:
    """Return the bin dir; build what is missing when ``build`` is true, else raise with what to run."""
    ok, why = binaries_ready()
    if not ok:
        if not build:
            raise ControlPlaneError(
                f"Kubernetes test binaries are missing or stale ({why}).\n"
                "Build them once (about 20 minutes cold, cached under ~/.cache/warden): make k8s-bins"
            )
        subprocess.run(["bash", str(BUILD_SCRIPT), "controlplane"], check=True, stdout=sys.stderr)
    return bin_dir()


# ---------------------------------------------------------------------------------------------------
# small helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def wait_scale() -> float:
    """How much longer than alone a wait may take: ``WARDEN_WAIT_SCALE``, which ``hack/lanes.sh`` sets for tiers
    it runs side by side (their load has made a wait of seconds take minutes in CI); 1 otherwise. A wait still
    returns the moment what it waits for holds: only a failure takes longer to be called one."""
    try:
        return max(1.0, float(os.environ.get("WARDEN_WAIT_SCALE", "1")))
    except ValueError:
        return 1.0


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    interval: float = 0.2,
    on_fail: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something other than None/False; raise after ``timeout`` s, times
    ``wait_scale()`` (tiers run side by side wait longer before they call it a failure)."""
    timeout *= wait_scale()
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result is not None and result is not False:
                return result
        except ControlPlaneError:
            raise  # a component died: waiting longer cannot help
        except Exception as e:  # the probe's errors are "not yet"; the last one is reported
            last_error = e
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            extra = f"\n{on_fail()}" if on_fail else ""
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}{detail}{extra}")
        time.sleep(interval)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL this child when the process (thread) that started it dies."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


# ---------------------------------------------------------------------------------------------------
# PKI


@dataclass(frozen=True)
class Pki:
    """Certificates and keys of one control plane (all under ``dir``)."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @classmethod
    def create(cls, dir: Path, clients: Mapping[str, tuple[str, Sequence[str]]]) -> Pki:
        """A CA, an apiserver serving cert, one client cert per ``clients`` entry (name -> (CN, Os)),
        and the ServiceAccount signing key pair (sa.key / sa.pub). EC P-256 keys: fast to make."""
        dir.mkdir(parents=True, exist_ok=True)
        pki = cls(dir)
        pki._ca("ca", "warden-test-ca")
        pki._ca("front-proxy-ca", "warden-test-front-proxy-ca")  # for aggregated API servers
        sans = ",".join(
            [
                "IP:127.0.0.1",
                "IP:10.96.0.1",
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
            ]
        )
        pki._leaf("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        pki._leaf("front-proxy-client", "/CN=front-proxy-client", "clientAuth", None, ca="front-proxy-ca")
        for name, (cn, orgs) in clients.items():
            subj = "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"
            pki._leaf(name, subj, "clientAuth", None)
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key", cwd=dir)
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=dir)
        for p in dir.glob("*.key"):
            p.chmod(0o600)
        return pki

    def _ca(self, name: str, cn: str) -> None:
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "3650", "-subj", f"/CN={cn}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            cwd=self.dir,
        )  # fmt: skip

    def _leaf(self, name: str, subj: str, usage: str, sans: str | None, ca: str = "ca") -> None:
        ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
        ext.append(f"extendedKeyUsage={usage}")
        if sans:
            ext.append(f"subjectAltName={sans}")
        (self.dir / f"{name}.ext").write_text("\n".join(ext) + "\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj, cwd=self.dir)
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "3650", "-out", f"{name}.crt", "-extfile", f"{name}.ext",
            cwd=self.dir,
        )  # fmt: skip


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, crt: Path, key: Path) -> None:
    """A kubeconfig with one cluster, one client-certificate user and one current context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "warden-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "warden-test", "context": {"cluster": "warden-test", "user": user}}],
        "current-context": "warden-test",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML: every client reads it
    path.chmod(0o600)


# ---------------------------------------------------------------------------------------------------
# the control plane


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class ControlPlane:
    """One control plane. ``start()`` it, use it, ``stop()`` it (also a context manager).

    ``detach=True`` lets the processes outlive this Python process (the `up`/`down` CLI); otherwise
    the kernel kills them if this process dies without calling ``stop()``.
    """

    bin_dir: Path
    work_dir: Path | None = None
    detach: bool = False
    keep: bool = field(default_factory=lambda: os.environ.get("WARDEN_CONTROLPLANE_KEEP", "") == "1")
    #: every request the API server serves written to ``logs/audit.log`` (one JSON line each, with the
    #: client's user agent): how benchmarks count each client's requests
    audit: bool = False
    #: for thousands of kwok nodes: no node leases (10,000 leases renewed every 10 s would be the whole
    #: load of this machine), nodes kept Ready on kwok's ten-minute heartbeat (an hour's grace), and the
    #: controller manager's clients allowed ten times their usual pace (new nodes untainted in seconds)
    quiet_nodes: bool = False

    components: list[Component] = field(default_factory=list, init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)
    admin_token: str = field(default="", init=False)
    startup_seconds: float = field(default=0.0, init=False)
    _own_work_dir: bool = field(default=False, init=False)
    _node_seq: int = field(default=0, init=False)
    _api_client: Any = field(default=None, init=False)

    # -- paths --------------------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        if self.work_dir is None:
            raise ControlPlaneError("control plane not started")
        return self.work_dir

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def pki(self) -> Pki:
        return Pki(self.dir / "pki")

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def binary(self, name: str) -> str:
        return str(self.bin_dir / name)

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG for this control plane and the bin dir first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    # -- lifecycle ----------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 90.0, attempts: int = 3) -> None:
        """Start every component and return once the API serves, controllers run and pods can be
        admitted (the default ServiceAccount exists). Raises with log tails when it does not.

        Ports are picked free just before use; when another process takes one in between (seen as
        "address already in use"), the whole start is retried with new ports, up to ``attempts``."""
        missing = [b for b in REQUIRED_BINARIES if not (self.bin_dir / b).is_file()]
        if missing or not (self.bin_dir / "kwok-stages.yaml").is_file():
            raise ControlPlaneError(f"missing in {self.bin_dir}: {missing or ['kwok-stages.yaml']}; run make k8s-bins")
        t0 = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(t0 + timeout)
                break
            except ControlPlaneError as e:
                if attempt < attempts and "address already in use" in str(e):
                    continue
                raise
        self.startup_seconds = time.monotonic() - t0

    def _start_once(self, deadline: float) -> None:
        if self.work_dir is None:
            _sweep_stale_work_dirs()
            self.work_dir = Path(tempfile.mkdtemp(prefix=WORK_DIR_PREFIX))
            (self.work_dir / OWNER_FILE).write_text(f"{os.getpid()}\n")
            self._own_work_dir = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.dir / "etcd", ignore_errors=True)  # a retry starts from empty storage
        self.log_dir.mkdir(exist_ok=True)
        try:
            self._prepare()
            self._start_etcd()
            wait_for("etcd", self._etcd_healthy, deadline - time.monotonic(), on_fail=self.failure_report)
            self._start_apiserver()
            wait_for("kube-apiserver /readyz", self._apiserver_ready, deadline - time.monotonic(),
                     on_fail=self.failure_report)  # fmt: skip
            self._start_others()
            for name in ("kube-controller-manager", "kube-scheduler"):
                wait_for(f"{name} /healthz", functools.partial(self._component_healthy, name),
                         deadline - time.monotonic(), on_fail=self.failure_report)  # fmt: skip
            wait_for("the default ServiceAccount (controller-manager at work)",
                     lambda: self._get_json("/api/v1/namespaces/default/serviceaccounts/default"),
                     deadline - time.monotonic(), on_fail=self.failure_report)  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL to the whole process group) and delete the work
        dir unless ``keep`` (WARDEN_CONTROLPLANE_KEEP=1). Safe to call twice."""
        for comp in reversed(self.components):
            if comp.proc is not None:
                _kill_group(comp.proc.pid, functools.partial(_exited, comp.proc))
                comp.proc.wait()
        self.components.clear()
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        if self._own_work_dir and self.work_dir is not None and not self.keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
            self._own_work_dir = False

    def failure_report(self, lines: int = 25) -> str:
        """The last lines of every component's log, and which processes have exited."""
        out = []
        for comp in self.components:
            state = "running"
            if comp.proc is not None and comp.proc.poll() is not None:
                state = f"EXITED {comp.proc.returncode}"
            out.append(f"----- {comp.name} ({state}), {comp.log} -----\n{_tail(comp.log, lines)}")
        return "\n".join(out)

    # -- setup --------------------------------------------------------------------------------------
    def _prepare(self) -> None:
        for name in ("etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler"):
            self.ports[name] = free_port()
        Pki.create(
            self.dir / "pki",
            {
                "admin": ("warden-admin", ["system:masters"]),
                "controller-manager": ("system:kube-controller-manager", []),
                "scheduler": ("system:kube-scheduler", []),
                "kwok": ("kwok-controller", ["system:masters"]),
            },
        )
        pki = self.pki
        for user in ("admin", "controller-manager", "scheduler", "kwok"):
            write_kubeconfig(
                self.dir / f"{user}.kubeconfig", self.server, pki.ca_crt, user, pki.crt(user), pki.key(user)
            )
        self.admin_token = secrets.token_hex(16)
        tokens = self.dir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},warden-admin-token,warden-admin-token,"system:masters"\n')
        tokens.chmod(0o600)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,  # own process group: stop() kills the group
                preexec_fn=None if self.detach else _die_with_parent,
            )
        self.components.append(Component(name, argv, log_path, proc))

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd-client']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                self.binary("etcd"),
                "--name=warden-test",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=warden-test={peer}",
                "--unsafe-no-fsync",  # throwaway data: durability buys nothing here
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                self.binary("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd-client']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.crt('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca_crt}",
                f"--token-auth-file={self.dir / 'tokens.csv'}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki.dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki.dir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                # front proxy (aggregation layer): also lets controller-manager/scheduler delegate authn
                f"--requestheader-client-ca-file={pki.crt('front-proxy-ca')}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.crt('front-proxy-client')}",
                f"--proxy-client-key-file={pki.key('front-proxy-client')}",
                "--allow-privileged=true",
                # the "kubernetes" Service would point at 127.0.0.1, which Endpoints reject
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self._audit_args(),
            ],
        )

    def _audit_args(self) -> list[str]:
        if not self.audit:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
            "  - level: None\n    resources: [{group: coordination.k8s.io, resources: [leases]}]\n"
            "  - level: Metadata\n"
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.log_dir / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-wait=1s",  # written within a second (warden_dev.audit.wait_written)
            "--audit-log-maxsize=1048576",  # MB: one file however long the run (the default rotates at 100 MB)
        ]

    def _start_others(self) -> None:
        pki = self.pki
        cm = str(self.dir / "controller-manager.kubeconfig")
        self._spawn(
            "kube-controller-manager",
            [
                self.binary("kube-controller-manager"),
                f"--kubeconfig={cm}",
                f"--authentication-kubeconfig={cm}",
                f"--authorization-kubeconfig={cm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['controller-manager']}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.dir / 'sa.key'}",
                f"--root-ca-file={pki.ca_crt}",
                f"--cluster-signing-cert-file={pki.ca_crt}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--controllers=*",
                # quiet nodes: no leases, a heartbeat every ten minutes (kwok's stage), never timed out
                *(["--node-monitor-grace-period=3600s"] if self.quiet_nodes else []),
                # thousands of new nodes: each controller's client (20 requests a second by default) would
                # take the not-ready taint off ten nodes a second, 17 minutes for 10,000
                *(["--kube-api-qps=200", "--kube-api-burst=400"] if self.quiet_nodes else []),
                "--profiling=false",
            ],
        )
        sc = str(self.dir / "scheduler.kubeconfig")
        self._spawn(
            "kube-scheduler",
            [
                self.binary("kube-scheduler"),
                f"--kubeconfig={sc}",
                f"--authentication-kubeconfig={sc}",
                f"--authorization-kubeconfig={sc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        key, value = KWOK_NODE_ANNOTATION
        self._spawn(
            "kwok",
            [
                self.binary("kwok"),
                f"--kubeconfig={self.dir / 'kwok.kubeconfig'}",
                f"--config={self.bin_dir / 'kwok-stages.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={key}={value}",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.240.0.1",
                "--node-lease-duration-seconds=0" if self.quiet_nodes else "--node-lease-duration-seconds=40",
            ],
        )

    # -- probes -------------------------------------------------------------------------------------
    def _check_alive(self) -> None:
        for comp in self.components:
            if comp.proc is not None and comp.proc.poll() is not None:
                raise ControlPlaneError(f"{comp.name} exited with {comp.proc.returncode}\n{self.failure_report()}")

    def _etcd_healthy(self) -> bool:
        self._check_alive()
        url = f"http://127.0.0.1:{self.ports['etcd-client']}/health"
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(json.loads(r.read()).get("health") == "true")

    def etcd_values(self, prefix: str) -> dict[str, bytes]:
        """What etcd holds under keys starting with ``prefix`` (``/registry/<group>/<plural>/`` for a custom
        resource: the JSON the API server encoded each object as), through etcd's JSON gateway."""
        url = f"http://127.0.0.1:{self.ports['etcd-client']}/v3/kv/range"
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = json.dumps({"key": _b64(prefix), "range_end": _b64(end)}).encode()
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in kvs}

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        ctx.load_cert_chain(str(self.pki.crt("admin")), str(self.pki.key("admin")))
        return ctx

    def _get_json(self, path: str) -> dict[str, Any] | None:
        self._check_alive()
        try:
            with urllib.request.urlopen(self.server + path, context=self._admin_ssl(), timeout=5) as r:
                data: dict[str, Any] = json.loads(r.read())
                return data
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def _apiserver_ready(self) -> bool:
        self._check_alive()
        with urllib.request.urlopen(self.server + "/readyz", context=self._admin_ssl(), timeout=5) as r:
            return bool(r.status == 200)

    def _component_healthy(self, name: str) -> bool:
        self._check_alive()
        port = self.ports["controller-manager" if name == "kube-controller-manager" else "scheduler"]
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # self-signed serving cert of the component; loopback only
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as r:
            return bool(r.status == 200)

    # -- clients ------------------------------------------------------------------------------------
    def api_client(self) -> Any:
        """A shared ``kubernetes.client.ApiClient`` authenticated as cluster admin."""
        if self._api_client is None:
            self._api_client = self.new_api_client()
        return self._api_client

    def new_api_client(self, token: str | None = None) -> Any:
        """A fresh ApiClient: as admin (client cert) or, with ``token``, as whoever the token says
        (e.g. a ServiceAccount token from ``service_account_token``). Close it when done."""
        from kubernetes import client, config

        if token is None:
            return config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.pki.ca_crt)
        cfg.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(cfg)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl (built alongside the control plane) against this control plane."""
        proc = subprocess.run(
            [self.binary("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    # -- helpers for tests --------------------------------------------------------------------------
    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None, timeout: float = 30) -> str:
        """Create a namespace and wait until pods can be created in it (its default ServiceAccount)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=dict(labels or {}))))

        def sa_exists() -> bool:
            core.read_namespaced_service_account("default", name)
            return True

        wait_for(f"ServiceAccount default in {name}", sa_exists, timeout)
        return name

    def add_fake_nodes(
        self,
        n: int,
        labels: Mapping[str, str] | None = None,
        gpu: int = 0,
        *,
        prefix: str = "kwok-node",
        cpu: str = "32",
        memory: str = "256Gi",
        pods: str = "110",
        taints: Sequence[Mapping[str, str]] = (),
        wait: bool = True,
        timeout: float = 30,
    ) -> list[str]:
        """Create ``n`` kwok-managed Nodes and (by default) wait until they are Ready.

        ``gpu`` > 0 makes each node advertise that many ``nvidia.com/gpu`` (capacity and allocatable),
        as the NVIDIA device plugin would; nothing here has a GPU, so this is the test double for one.
        Returns the node names."""
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api_client())  # manifests as plain dicts
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        if gpu > 0:
            resources[GPU_RESOURCE] = str(gpu)
        names: list[str] = []
        for _ in range(n):
            self._node_seq += 1
            name = f"{prefix}-{self._node_seq}"
            node_labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **dict(labels or {}),
            }
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": node_labels,
                    "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
                },
                "spec": {"taints": [dict(t) for t in taints]},
                "status": {"capacity": resources, "allocatable": resources},
            }
            core.create_node(body)
            names.append(name)
        if wait:
            for name in names:

                def ready(node_name: str = name) -> bool:
                    node = core.read_node(node_name)
                    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

                wait_for(f"kwok node {name} Ready", ready, timeout, on_fail=self.failure_report)
        return names

    def service_account_token(
        self, namespace: str, name: str, expiration_seconds: int = 3600, audiences: Sequence[str] = ()
    ) -> str:
        """A bound token for ServiceAccount ``namespace/name`` (TokenRequest API)."""
        from kubernetes import client

        core: Any = client.CoreV1Api(self.api_client())
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        resp = core.create_namespaced_service_account_token(name, namespace, {"spec": spec})
        return str(resp.status.token)

    # -- state for the CLI ----------------------------------------------------------------------------
    def save_state(self) -> None:
        state = {
            "work_dir": str(self.dir),
            "bin_dir": str(self.bin_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "admin_token": self.admin_token,
            "ports": self.ports,
            "pids": {c.name: c.proc.pid for c in self.components if c.proc is not None},
        }
        (self.dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def _kill_group(pgid: int, gone: Callable[[], bool], grace: float = 10.0) -> None:
    """SIGTERM the process group, wait up to ``grace`` s for ``gone()``, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if gone():
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)  # stragglers in the group, or the leader if it ignored TERM


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises KeyboardInterrupt, so a CI job that is
    terminated still runs finalizers (and stops the control plane) instead of dying on the spot."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_work_dirs() -> None:
    """Delete temporary work dirs whose owning process is gone (it was SIGKILLed: its components died
    with it, but nobody removed the directory)."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORK_DIR_PREFIX}*"):
        try:
            owner = int((d / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue  # not ours to judge
        if not pid_alive(owner):
            shutil.rmtree(d, ignore_errors=True)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is not None


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


# ---------------------------------------------------------------------------------------------------
# CLI: python -m warden_dev controlplane up|down|env


def cache_dir() -> Path:
    """Where built binaries and local state are kept between runs (``$WARDEN_CACHE``)."""
    return Path(os.environ.get("WARDEN_CACHE", Path.home() / ".cache" / "warden"))


def _default_state_dir() -> Path:
    return Path(os.environ.get("WARDEN_CONTROLPLANE_DIR", cache_dir() / "controlplane"))


def _cli_down(state_dir: Path) -> int:
    state_file = state_dir / "state.json"
    if not state_file.is_file():
        print(f"no control plane state in {state_dir}", file=sys.stderr)
        return 0
    state = json.loads(state_file.read_text())
    bin_prefix = str(state["bin_dir"])
    for name, pid in reversed(list(state["pids"].items())):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if not cmdline.startswith(bin_prefix.encode()):  # the pid was reused by something else
            continue
        _kill_group(int(pid), functools.partial(_group_gone, int(pid)))
        print(f"stopped {name} (pid {pid})", file=sys.stderr)
    shutil.rmtree(state_dir, ignore_errors=True)
    return 0


def _cli_env(state_dir: Path) -> int:
    state_file = state_dir / "state.json"
    if not state_file.is_file():
        print(f"no control plane running (no {state_file}); run: python -m warden_dev controlplane up", file=sys.stderr)
        return 1
    state = json.loads(state_file.read_text())
    print(f"export KUBECONFIG={state['kubeconfig']}")
    print(f"export PATH={state['bin_dir']}:$PATH")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m warden_dev.controlplane") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "env"])
    parser.add_argument("--dir", type=Path, default=None, help="state dir (default: $WARDEN_CACHE/controlplane)")
    parser.add_argument("--nodes", type=int, default=2, help="fake kwok nodes to create on `up`")
    parser.add_argument("--gpu-nodes", type=int, default=0, help="extra fake nodes with nvidia.com/gpu")
    args = parser.parse_args(argv)
    state_dir: Path = args.dir or _default_state_dir()

    if args.command == "down":
        return _cli_down(state_dir)
    if args.command == "env":
        return _cli_env(state_dir)

    if (state_dir / "state.json").is_file():
        print(
            f"a control plane is already up ({state_dir}); run: python -m warden_dev controlplane down", file=sys.stderr
        )
        return 1
    bins = ensure_binaries(build=True)
    cp = ControlPlane(bins, work_dir=state_dir, detach=True)
    try:
        cp.start()
        if args.nodes:
            cp.add_fake_nodes(args.nodes)
        if args.gpu_nodes:
            cp.add_fake_nodes(args.gpu_nodes, {"nvidia.com/gpu.present": "true"}, gpu=8, prefix="kwok-gpu-node")
        cp.save_state()
    except BaseException:
        cp.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
        raise
    print(f"control plane up in {cp.startup_seconds:.1f}s; logs in {cp.log_dir}", file=sys.stderr)
    return _cli_env(state_dir)


if __name__ == "__main__":
    sys.exit(main())

"""The Slurm files every Slurm pod installs (``warden.node.files.SlurmFiles``, ``warden-node config``,
``config --jwt-key``, ``key``, ``client-config``), on real files in a temporary directory, without a
worker's settings; and images/slurm-base/warden-lib.sh's functions, which the controller, login,
accounting and health-check entrypoints call, running them. The worker's own files (NodeFiles) are in
tests/unit/test_node_lifecycle.py; the dataplane tier runs the images."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from warden.node import lifecycle
from warden.node.files import FilesError, SlurmFiles
from warden.node.lifecycle import CLIENT_CONFIG_DIR, FileSettings
from warden.node.main import main

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "images" / "slurm-base" / "warden-lib.sh"
JWT_CONF = "ClusterName=demo\nAuthType=auth/slurm\n  authalttypes = auth/jwt\nAuthAltParameters=jwt_key=x\n"


class Logs(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def configmap(d: Path, files: dict[str, str], version: str = "..2026_01_01") -> Path:
    """A ConfigMap volume as the kubelet makes it: the files in a hidden version directory, ``..data``
    pointing at it, and one symbolic link per key through ``..data``."""
    d.mkdir(parents=True, exist_ok=True)
    (d / version).mkdir()
    for name, text in files.items():
        (d / version / name).write_text(text)
        (d / name).symlink_to(f"..data/{name}")
    (d / "..data").symlink_to(version)
    return d


@pytest.fixture
def fs(tmp_path: Path) -> FileSettings:
    configmap(tmp_path / "cm", {"slurm.conf": "ClusterName=demo\n", "cgroup.conf": "CgroupPlugin=autodetect\n"})
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "slurm.key").write_bytes(b"k" * 32)
    (tmp_path / "jwt").mkdir()
    (tmp_path / "jwt" / "jwt_hs256.key").write_bytes(b"j" * 32)
    return FileSettings(
        config_dir=tmp_path / "cm",
        auth_key=tmp_path / "auth" / "slurm.key",
        jwt_key=tmp_path / "jwt" / "jwt_hs256.key",
        slurm_etc=tmp_path / "etc-slurm",
        client_config_dir=tmp_path / "slurm-client",
        file_owner=None,
    )


def env_of(fs: FileSettings) -> dict[str, str]:
    return {
        "WARDEN_CONFIG_DIR": str(fs.config_dir),
        "WARDEN_AUTH_KEY": str(fs.auth_key),
        "WARDEN_JWT_KEY": str(fs.jwt_key),
        "SLURM_ETC": str(fs.slurm_etc),
        "WARDEN_CLIENT_CONFIG": str(fs.client_config_dir),
        "WARDEN_FILE_OWNER": "",
    }


def mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


# --- settings ----------------------------------------------------------------------------------------


def test_the_settings_are_warden_lib_sh_s_without_a_worker() -> None:
    s = FileSettings.from_env({})
    assert (s.config_dir, s.auth_key, s.jwt_key, s.slurm_etc, s.client_config_dir, s.file_owner) == (
        Path("/etc/warden/slurm"), Path("/etc/warden/auth/slurm.key"), Path("/etc/warden/jwt/jwt_hs256.key"),
        Path("/etc/slurm"), Path(CLIENT_CONFIG_DIR), "slurm",
    )  # fmt: skip
    lib = LIB.read_text()
    for line in ('WARDEN_CONFIG_DIR="${WARDEN_CONFIG_DIR:-/etc/warden/slurm}"',
                 'WARDEN_AUTH_KEY="${WARDEN_AUTH_KEY:-/etc/warden/auth/slurm.key}"',
                 'WARDEN_JWT_KEY="${WARDEN_JWT_KEY:-/etc/warden/jwt/jwt_hs256.key}"',
                 'SLURM_ETC="${SLURM_ETC:-/etc/slurm}"',
                 f'WARDEN_CLIENT_CONFIG="${{WARDEN_CLIENT_CONFIG:-{CLIENT_CONFIG_DIR}}}"'):  # fmt: skip
        assert line in lib, "the shell and warden.node default to the same paths"
    s = FileSettings.from_env({"SLURM_ETC": "/x", "WARDEN_CLIENT_CONFIG": "/y", "WARDEN_FILE_OWNER": ""})
    assert (s.slurm_etc, s.client_config_dir, s.file_owner) == (Path("/x"), Path("/y"), None)
    worker = lifecycle.Settings.from_env({"WARDEN_SLURMD_CONF": "CPUs=1", "WARDEN_JWT_KEY": "/j"})
    assert (worker.jwt_key, worker.file_owner) == (Path("/j"), "slurm"), "the worker's settings build on them"


# --- config, keys, client config ---------------------------------------------------------------------


def test_config_installs_the_configmap_and_the_key_without_a_workers_settings(fs: FileSettings) -> None:
    logs = Logs()
    SlurmFiles(fs, logs).install()
    etc = fs.slurm_etc
    assert sorted(p.name for p in etc.iterdir()) == ["cgroup.conf", "slurm.conf", "slurm.key"]
    assert (etc / "slurm.conf").read_text() == "ClusterName=demo\n"
    assert not (etc / "slurm.conf").is_symlink(), "a copy, not the volume's link"
    assert (mode(etc / "slurm.conf"), mode(etc / "slurm.key"), mode(etc)) == (0o644, 0o600, 0o755)
    assert logs == [f"config: {fs.config_dir} -> {etc} (cgroup.conf slurm.conf)"]
    assert not (etc / "jwt_hs256.key").exists(), "config installs no JWT key"


def test_config_without_the_configmap_keeps_what_is_there_or_stops(fs: FileSettings, tmp_path: Path) -> None:
    missing = replace(fs, config_dir=tmp_path / "none")
    with pytest.raises(FilesError, match=rf"^no {fs.slurm_etc}/slurm.conf \(mount the ConfigMap at {tmp_path}/none\)$"):
        SlurmFiles(missing, Logs()).install()
    SlurmFiles(fs, Logs()).install()
    logs = Logs()
    SlurmFiles(missing, logs).install()
    assert logs == [f"config: {tmp_path}/none missing; using {fs.slurm_etc} as it is"]


def test_a_missing_auth_key_names_its_secret(fs: FileSettings) -> None:
    fs.auth_key.unlink()
    with pytest.raises(FilesError, match=rf"^no auth key at {fs.auth_key} \(Secret <cluster>-slurm-key\)$"):
        SlurmFiles(fs, Logs()).install()
    (fs.slurm_etc / "slurm.key").write_bytes(b"old")
    SlurmFiles(fs, Logs()).auth_key()  # a copy already there does


def test_the_auth_key_alone_for_the_accounting_pod(fs: FileSettings) -> None:
    SlurmFiles(fs, Logs()).auth_key()
    assert sorted(p.name for p in fs.slurm_etc.iterdir()) == ["slurm.key"]
    assert mode(fs.slurm_etc / "slurm.key") == 0o600


def test_the_jwt_key_only_when_slurm_conf_asks_for_auth_jwt(fs: FileSettings) -> None:
    files = SlurmFiles(fs, Logs())
    files.install()
    files.jwt_key()
    assert not (fs.slurm_etc / "jwt_hs256.key").exists(), "no auth/jwt, no key"
    (fs.slurm_etc / "slurm.conf").write_text("ClusterName=demo\n#AuthAltTypes=auth/jwt\n")
    files.jwt_key()
    assert not (fs.slurm_etc / "jwt_hs256.key").exists(), "a comment asks for nothing"
    (fs.slurm_etc / "slurm.conf").write_text(JWT_CONF)
    files.jwt_key()
    assert (fs.slurm_etc / "jwt_hs256.key").read_bytes() == b"j" * 32
    assert mode(fs.slurm_etc / "jwt_hs256.key") == 0o600
    fs.jwt_key.unlink()
    files.jwt_key()  # the copy there does
    (fs.slurm_etc / "jwt_hs256.key").unlink()
    with pytest.raises(FilesError) as e:
        files.jwt_key()
    assert str(e.value) == (
        f"no JWT key at {fs.jwt_key} (Secret <cluster>-jwt-key, key jwt_hs256.key): slurmctld needs it for"
        " AuthAltTypes=auth/jwt"
    )


def test_the_client_config_leaves_the_secrets_out(fs: FileSettings) -> None:
    etc = fs.slurm_etc
    SlurmFiles(fs, Logs()).install()
    for secret in lifecycle.CLIENT_CONFIG_SECRETS:
        (etc / secret).write_text("secret\n")
    (etc / "plugstack.conf.d").mkdir()
    (etc / "topology.conf").symlink_to("slurm.conf")  # not a regular file: left out, as find -type f does
    (etc / "cgroup.conf").chmod(0o640)
    SlurmFiles(fs, Logs()).client_config()
    client = fs.client_config_dir
    assert sorted(p.name for p in client.iterdir()) == ["cgroup.conf", "slurm.conf"]
    assert mode(client / "cgroup.conf") == 0o640, "copied as cp -p does"
    assert (client / "cgroup.conf").stat().st_mtime_ns == (etc / "cgroup.conf").stat().st_mtime_ns
    assert mode(client) == 0o755


# --- the hash ----------------------------------------------------------------------------------------


def test_the_hash_is_the_files_contents(tmp_path: Path) -> None:
    a = configmap(tmp_path / "a", {"slurm.conf": "A\n", "gres.conf": "G\n"})
    b = configmap(tmp_path / "b", {"slurm.conf": "A\n", "gres.conf": "G\n"}, version="..2027_02_02")
    (b / "sub").mkdir()  # not a regular file
    assert lifecycle.dirs_hash([a]) == lifecycle.dirs_hash([b]), "equal contents, equal hashes"
    # the shell's definition: `cat` of the regular files by name (..-entries skipped), then sha256sum
    assert lifecycle.dirs_hash([a]) == hashlib.sha256(b"G\nA\n").hexdigest()
    (tmp_path / "a" / "..2026_01_01" / "slurm.conf").write_text("B\n")
    assert lifecycle.dirs_hash([a]) != lifecycle.dirs_hash([b]), "a change changes it"
    (b / "..2027_02_02" / "extra").write_text("x\n")  # only inside the volume's version directory
    assert lifecycle.dirs_hash([b]) == hashlib.sha256(b"G\nA\n").hexdigest(), "..-entries are not read"
    assert lifecycle.dirs_hash([a, b]) != lifecycle.dirs_hash([b, a]), "in the order given"


# --- the command line --------------------------------------------------------------------------------


def test_the_cli_says_the_shells_lines_and_stops_on_an_error(
    fs: FileSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {**env_of(fs), "WARDEN_COMPONENT": "controller"}.items():
        monkeypatch.setenv(name, value)
    assert main(["config"]) == 0
    assert (
        capsys.readouterr().err == f"[controller] config: {fs.config_dir} -> {fs.slurm_etc} (cgroup.conf slurm.conf)\n"
    )
    (fs.config_dir / "..2026_01_01" / "slurm.conf").write_text(JWT_CONF)
    assert main(["config", "--jwt-key"]) == 0 and (fs.slurm_etc / "jwt_hs256.key").is_file()
    assert capsys.readouterr().err.startswith(f"[controller] config: {fs.config_dir} -> {fs.slurm_etc} ")
    assert main(["client-config"]) == 0
    assert sorted(p.name for p in fs.client_config_dir.iterdir()) == ["cgroup.conf", "slurm.conf"]
    (fs.slurm_etc / "slurm.key").unlink()
    fs.auth_key.unlink()
    assert main(["key"]) == 1
    out = capsys.readouterr()
    assert (out.out, out.err) == (
        "",
        f"[controller] error: no auth key at {fs.auth_key} (Secret <cluster>-slurm-key)\n",
    )


def test_one_start_installs_the_config_and_the_jwt_key_and_prints_the_hash_taken_before(
    fs: FileSettings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the controller's entrypoint does first, in one Python start: the hash of the followed
    directories (warden_dirs_hash's), then the files, then the JWT key."""
    for name, value in {**env_of(fs), "WARDEN_COMPONENT": "controller"}.items():
        monkeypatch.setenv(name, value)
    (fs.config_dir / "..2026_01_01" / "slurm.conf").write_text(JWT_CONF)
    followed = [fs.config_dir, fs.jwt_key.parent]
    assert main(["config", "--jwt-key", *(f"--print-hash={d}" for d in followed)]) == 0
    assert capsys.readouterr().out == lifecycle.dirs_hash(followed) + "\n"
    assert (fs.slurm_etc / "slurm.conf").read_text() == JWT_CONF
    assert (fs.slurm_etc / "jwt_hs256.key").read_bytes() == b"j" * 32
    # without the options: the files alone, nothing on stdout
    (fs.slurm_etc / "jwt_hs256.key").unlink()
    assert main(["config"]) == 0 and capsys.readouterr().out == ""
    assert not (fs.slurm_etc / "jwt_hs256.key").exists()


def test_warden_node_runs_as_a_program(fs: FileSettings) -> None:
    env = {**os.environ, **env_of(fs), "PYTHONPATH": str(REPO / "operator"), "WARDEN_COMPONENT": "login"}
    done = subprocess.run([sys.executable, "-m", "warden.node", "config"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    fs.auth_key.unlink()
    (fs.slurm_etc / "slurm.key").unlink()
    done = subprocess.run([sys.executable, "-m", "warden.node", "config"], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.endswith(f"[login] error: no auth key at {fs.auth_key} (Secret <cluster>-slurm-key)\n")


# --- warden-lib.sh -----------------------------------------------------------------------------------


def lib(fs: FileSettings, body: str) -> subprocess.CompletedProcess[str]:
    """``body`` in bash after sourcing warden-lib.sh as an entrypoint does, with this checkout's Python."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WARDEN_", "SLURM_"))},
        **env_of(fs),
        "WARDEN_NODE_PY": shlex.quote(sys.executable),
        "PYTHONPATH": str(REPO / "operator"),
        "WARDEN_SLURM_SERIES": "",
        "LC_ALL": "C",
    }
    script = f"set -euo pipefail\nWARDEN_COMPONENT=controller\n. {shlex.quote(str(LIB))}\n{body}"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_the_shell_functions_call_warden_node(fs: FileSettings) -> None:
    (fs.config_dir / "..2026_01_01" / "slurm.conf").write_text(JWT_CONF)
    cm, jwt = shlex.quote(str(fs.config_dir)), shlex.quote(str(fs.jwt_key.parent))
    done = lib(
        fs,
        f"""
warden_dirs_hash {cm} {jwt}
# the shell's own definition, as warden_dirs_hash was before it called warden.node
for d in {cm} {jwt}; do find -L "$d" -maxdepth 1 -type f ! -name '..*' -print0 | sort -z | xargs -0r cat; done |
    sha256sum | cut -d' ' -f1
followed=({cm} {jwt})
warden_slurm_config --jwt-key "${{followed[@]/#/--print-hash=}}"
warden_client_config
warden_slurm_key
""",
    )
    assert done.returncode == 0, done.stderr
    ours, shells, configs = done.stdout.splitlines()
    assert ours == shells == configs == lifecycle.dirs_hash([fs.config_dir, fs.jwt_key.parent])
    assert done.stderr == f"[controller] config: {fs.config_dir} -> {fs.slurm_etc} (cgroup.conf slurm.conf)\n"
    etc = fs.slurm_etc
    assert sorted(p.name for p in etc.iterdir()) == ["cgroup.conf", "jwt_hs256.key", "slurm.conf", "slurm.key"]
    assert (mode(etc / "slurm.key"), mode(etc / "jwt_hs256.key")) == (0o600, 0o600)
    assert sorted(p.name for p in fs.client_config_dir.iterdir()) == ["cgroup.conf", "slurm.conf"]


def test_an_entrypoint_stops_where_warden_node_fails(fs: FileSettings) -> None:
    fs.auth_key.unlink()
    done = lib(fs, "warden_slurm_config\necho went on\n")
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        done.stderr.splitlines()[-1] == f"[controller] error: no auth key at {fs.auth_key} (Secret <cluster>-slurm-key)"
    )
    done = lib(fs, "reload() { warden_slurm_config || return 1; }\nreload || echo reload failed\n")
    assert (done.returncode, done.stdout) == (0, "reload failed\n"), "a reload that fails is tried again"


# --- the follow loop: what it costs when nothing changed ----------------------------------------------


def test_changed_since_sees_a_volume_swap_an_added_file_and_an_edit_and_nothing_else(tmp_path: Path) -> None:
    cm = configmap(tmp_path / "cm", {"slurm.conf": "a\n"})
    plain = tmp_path / "ssh"
    plain.mkdir()
    (plain / "key.pub").write_text("k\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    stamp = tmp_path / "stamp"
    stamp.touch()
    old = stamp.stat().st_mtime - 100
    for p in (cm, cm / "..2026_01_01", cm / "..2026_01_01" / "slurm.conf", plain, plain / "key.pub", empty):
        os.utime(p, (old, old), follow_symlinks=False)
    os.utime(cm / "..data", (old, old), follow_symlinks=False)
    os.utime(cm / "slurm.conf", (old, old), follow_symlinks=False)
    dirs = " ".join(shlex.quote(str(d)) for d in (cm, plain, empty))

    def changed() -> bool:
        done = subprocess.run(["bash", "-c", f". {shlex.quote(str(LIB))}\nwarden_changed_since {stamp} {dirs}"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        return done.returncode == 0

    assert not changed()
    # the kubelet's swap: a new version directory, ..data renamed onto it
    (cm / "..2026_02_02").mkdir()
    (cm / "..2026_02_02" / "slurm.conf").write_text("b\n")
    (cm / "..data_tmp").symlink_to("..2026_02_02")
    (cm / "..data_tmp").rename(cm / "..data")
    assert changed()
    stamp.touch()
    assert not changed()
    (plain / "key.pub").write_text("k2\n")  # edited in place: the directory's time stays
    os.utime(plain, (old, old))
    assert changed()
    stamp.touch()
    (empty / "new").write_text("x")
    assert changed()


def test_the_follow_loop_starts_python_only_when_a_followed_file_changed(fs: FileSettings, tmp_path: Path) -> None:
    """Every Slurm pod's follow loop looks every WARDEN_CONFIG_POLL seconds; on a slow node (a TCG VM, a busy
    one) a Python start each time was the loop's whole cost. It hashes once at start, then only after a
    change, and reloads when the hash differs."""
    starts, polls, reloads = tmp_path / "starts", tmp_path / "polls", tmp_path / "reloads"
    py = tmp_path / "py"
    py.write_text(f'#!/bin/sh\necho start >> {starts}\nexec {shlex.quote(sys.executable)} "$@"\n')
    py.chmod(0o755)
    cm = shlex.quote(str(fs.config_dir))
    body = f"""
WARDEN_NODE_PY={shlex.quote(str(py))}
WARDEN_CONFIG_POLL=0.05
counted() {{ echo poll >> {polls}; }}
WARDEN_POLL_HOOKS=counted
reload() {{ echo reloaded >> {reloads}; }}
warden_follow {lifecycle.dirs_hash([fs.config_dir])} reload {cm}
echo "$follow_pid"
wait "$follow_pid"
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator"), "TMPDIR": str(tmp_path)}
    loop = subprocess.Popen(["bash", "-c", f". {shlex.quote(str(LIB))}\n{body}"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        assert loop.stdout is not None
        loop.stdout.readline()

        def count(p: Path) -> int:
            return len(p.read_text().splitlines()) if p.exists() else 0

        def after_polls(n: int) -> None:
            target = count(polls) + n
            deadline = time.monotonic() + 30
            while count(polls) < target:
                assert time.monotonic() < deadline and loop.poll() is None, "the loop stopped polling"
                time.sleep(0.02)

        after_polls(10)
        assert count(starts) == 1, "the first look hashes (a change before the loop began is not missed); no more"
        assert count(reloads) == 0
        (fs.config_dir / "..2026_02_02").mkdir()
        (fs.config_dir / "..2026_02_02" / "slurm.conf").write_text("ClusterName=other\n")
        (fs.config_dir / "..2026_02_02" / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
        (fs.config_dir / "..data_tmp").symlink_to("..2026_02_02")
        (fs.config_dir / "..data_tmp").rename(fs.config_dir / "..data")
        deadline = time.monotonic() + 30
        while count(reloads) == 0:
            assert time.monotonic() < deadline, "the change was not followed"
            time.sleep(0.02)
        after_polls(10)
        assert (count(starts), count(reloads)) == (2, 1)
    finally:
        os.killpg(loop.pid, 15)
        loop.wait(timeout=30)


def test_the_sssd_poll_hook_hashes_the_directory_settings_only_after_a_change(fs: FileSettings, tmp_path: Path) -> None:
    """Every pod of a directory cluster runs this hook at each poll (2 s): a hash each time was a Python start
    every 2 s in every such pod. It hashes at its first look, then only once a settings file changed, restarting
    SSSD when the hash differs; an SSSD that is gone is started again."""
    starts = tmp_path / "starts"
    py = tmp_path / "py"
    py.write_text(f'#!/bin/sh\necho start >> {starts}\nexec {shlex.quote(sys.executable)} "$@"\n')
    py.chmod(0o755)
    ident = configmap(tmp_path / "identity", {"sssd.conf": "[sssd]\n"})
    bind, ca = tmp_path / "bind", tmp_path / "ca"
    bind.mkdir()
    (bind / "password").write_text("p\n")
    ca.mkdir()
    body = f"""
WARDEN_IDENTITY_DIR={ident} WARDEN_IDENTITY_BIND_DIR={bind} WARDEN_IDENTITY_CA_DIR={ca}
WARDEN_NODE_PY={py} TMPDIR={tmp_path}
# SSSD itself cannot run here: a stand-in that, like warden_sssd_run, hashes the settings it starts with
warden_sssd_run() {{
    sssd_inputs="$(warden_dirs_hash "$WARDEN_IDENTITY_DIR" "$WARDEN_IDENTITY_BIND_DIR" "$WARDEN_IDENTITY_CA_DIR")"
    sleep 600 & sssd_pid=$!
    echo started
}}
polls() {{ for _ in $(seq 1 "$1"); do warden_sssd_keep; done; echo "starts $(wc -l < {starts})"; }}
warden_sssd_run
sssd_stamp="$(warden_new_stamp)"  # as warden_start_sssd does
polls 10
polls 10
# the kubelet's swap of the ConfigMap volume
mkdir {ident}/..v2 && printf '[sssd]\\ndomains = corp\\n' > {ident}/..v2/sssd.conf
ln -s ..v2 {ident}/..data_tmp && mv -T {ident}/..data_tmp {ident}/..data
polls 5
polls 10
kill "$sssd_pid"; wait "$sssd_pid" || true
polls 3
polls 10
kill "$sssd_pid"
"""
    done = lib(fs, body)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    # SSSD started three times: at first, after the change, after it was gone
    assert lines.count("started") == 3, (done.stdout, done.stderr)
    first, steady, changed, steady2, gone, steady3 = (int(n) for n in re.findall(r"starts (\d+)", done.stdout))
    # its start's hash and the first look's; then nothing while nothing changed
    assert (first, steady) == (2, 2), done.stdout
    # the change: its hash and the restarted SSSD's (one more look when the swap and the look shared a clock
    # tick: a file as new as the stamp counts as changed); then nothing again
    assert changed - steady in (2, 3) and steady2 == changed, done.stdout
    assert gone - steady2 == 1 and steady3 == gone, done.stdout
    assert "the directory settings changed; restarting SSSD" in done.stderr, done.stderr
    assert "is gone; starting it again" in done.stderr, done.stderr


def test_the_jail_rebind_binds_again_only_what_is_no_longer_mounted(fs: FileSettings) -> None:
    done = lib(
        fs,
        """
WARDEN_JAIL=""
warden_jail_bind() { echo "bind $1"; }
WARDEN_JAIL_BOUND=("/proc:/proc:rw" "/etc/hosts:/no/such/mount:ro")
warden_jail_rebind
""",
    )
    assert (done.returncode, done.stdout) == (0, "bind /etc/hosts:/no/such/mount:ro\n"), done.stderr

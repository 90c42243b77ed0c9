"""The reviewed allow-list of what users may write from inside the jail (tests/support/jailmounts.py):
a user's own directory of the node-local container store is theirs; the store's root and another
user's directory are problems."""

from __future__ import annotations

from tests.support import jailmounts
from warden import naming

STORE = naming.CONTAINER_STORE


def _report(user: int, writable_inside: list[str], store_writable: bool = False) -> jailmounts.Report:
    inside = [{"path": p, "kind": "dir", "major": 0, "minor": 0} for p in writable_inside]
    mounts = [
        {"path": "/home", "fstype": "ext4", "rw": True, "kind": "dir", "writable": True},
        {"path": STORE, "fstype": "ext4", "rw": True, "kind": "dir", "writable": store_writable,
         "writable_inside": inside},
    ]  # fmt: skip
    return jailmounts.Report(user, mounts, {"open": "No such file or directory", "create": "Permission denied"})


def test_a_users_own_store_directory_and_what_is_in_it_are_allowed() -> None:
    report = _report(1001, [f"{STORE}/1001", f"{STORE}/1001/images/x.sqsh"])
    assert jailmounts.problems(report) == []


def test_another_users_store_directory_and_the_store_root_are_problems() -> None:
    report = _report(1001, [f"{STORE}/1002", f"{STORE}/10011"], store_writable=True)
    assert jailmounts.problems(report) == [
        f"mount point {STORE} (ext4, dir) is writable",
        f"{STORE}/1002 (dir, on the ext4 mount {STORE}) is writable",
        f"{STORE}/10011 (dir, on the ext4 mount {STORE}) is writable",
    ]

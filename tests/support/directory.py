"""A real LDAP directory beside a Docker dataplane cluster: OpenLDAP's slapd (warden/test-ldap, built by
`hack/images.sh test`) with TLS, reachable on the cluster's network as ``ldap`` (ldaps on 636, StartTLS on
389). Users and groups are added and removed while the cluster runs, with ldapadd/ldapdelete as the
directory's admin, the way a site's identity team would.

The CA and the server certificate are made fresh for each run by the image itself (``test-ldap certs``);
``secrets()`` gives the two Secrets the SlurmCluster names (``BIND_SECRET``, ``CA_SECRET``), and
``spec()`` the ``spec.identity.ldap`` that points at them.
"""

from __future__ import annotations

import re
import secrets as pysecrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden import naming
from warden_dev.dockercluster import DockerCluster, DockerError, docker, version

BASE = "dc=warden,dc=test"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"
READER_DN = f"cn=reader,{BASE}"
ADMIN_DN = f"cn=admin,{BASE}"
HOST = "ldap"
#: the Secrets a site makes for the SlurmCluster: the account SSSD reads the directory as, and the CA
BIND_SECRET = "ldap-bind"
CA_SECRET = "ldap-ca"
#: how long SSSD trusts a looked-up user in the tests' clusters (spec.identity.ldap.cacheSeconds)
CACHE_SECONDS = 20
#: the longest SSSD waits before it asks the directory again once an outage ends (the rendered sssd.conf:
#: offline_timeout_max 60 s plus a random offset of up to 10 s); only then do cached entries expire
BACK_ONLINE_SECONDS = 70
#: groups the site has before the cluster is installed (no members yet): name -> gid
SITE_GROUPS = {"physics": 71000}


def spec(uri: str = f"ldaps://{HOST}") -> dict[str, Any]:
    """``spec.identity`` of a cluster that reads this directory."""
    return {
        "ldap": {
            "uris": [uri],
            "searchBase": BASE,
            "bindSecret": BIND_SECRET,
            "caSecretRef": {"name": CA_SECRET, "key": "ca.crt"},
            "cacheSeconds": CACHE_SECONDS,
        }
    }


def image() -> str:
    return f"warden/test-ldap:{version()}"


@dataclass(frozen=True)
class Certificates:
    ca: str
    server_crt: str
    server_key: str


def certificates(*names: str) -> Certificates:
    """A fresh CA and a server certificate for ``names`` with its key (PEM), made by the image's openssl."""
    pems = docker("run", "--rm", image(), "certs", *names).stdout
    found = list(re.finditer(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----\n", pems, flags=re.S))
    if [m.group(1) for m in found] != ["CERTIFICATE", "CERTIFICATE", "PRIVATE KEY"]:
        raise DockerError(f"test-ldap certs printed {[m.group(1) for m in found]}, not a CA, a certificate and a key")
    ca, crt, key = (m.group(0) for m in found)
    return Certificates(ca, crt, key)


def group_entry(group: str, gid: int) -> str:
    return f"dn: cn={group},{GROUPS}\nobjectClass: posixGroup\ncn: {group}\ngidNumber: {gid}\n"


def user_entries(name: str, uid: int, key: str, home: str = "") -> str:
    """LDIF of ``name`` with uid and primary group ``uid`` (a group of its own name), home ``home`` (default
    /home/<name>), bash, the SSH public key ``key``."""
    return (
        f"dn: uid={name},{PEOPLE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        f"objectClass: ldapPublicKey\nuid: {name}\ncn: {name}\nsn: {name}\nuidNumber: {uid}\n"
        f"gidNumber: {uid}\nhomeDirectory: {home or f'/home/{name}'}\nloginShell: /bin/bash\nsshPublicKey: {key}\n\n"
        + group_entry(name, uid)
    )


def member_change(group: str, member: str) -> str:
    return f"dn: cn={group},{GROUPS}\nchangetype: modify\nadd: memberUid\nmemberUid: {member}\n"


def admin_args(tool: str, admin_password: str) -> list[str]:
    """``tool`` (ldapadd, ldapmodify, ldapdelete, ldapsearch) as the directory's admin, inside its container."""
    return [tool, "-x", "-H", "ldap://127.0.0.1", "-D", ADMIN_DN, "-w", admin_password]


@dataclass
class Directory:
    prefix: str
    workdir: Path
    reader_password: str = field(default_factory=lambda: pysecrets.token_urlsafe(12))
    admin_password: str = field(default_factory=lambda: pysecrets.token_urlsafe(12))

    def __post_init__(self) -> None:
        self.container = f"{self.prefix}-ldap"
        self.image = image()
        self.ca_pem = ""

    def _make_certs(self) -> Path:
        """Fresh certificates for ``HOST``: the CA's PEM kept for ``secrets()``, the server's files in a
        directory slapd mounts."""
        made = certificates(HOST)
        self.ca_pem = made.ca
        certs = self.workdir / "ldap-certs"
        certs.mkdir(parents=True, exist_ok=True)
        (certs / "server.crt").write_text(made.server_crt)
        (certs / "server.key").write_text(made.server_key)
        return certs

    def secrets(self) -> dict[str, dict[str, str]]:
        """The Secrets a site makes for the SlurmCluster (after ``start``)."""
        return {
            BIND_SECRET: {naming.IDENTITY_BIND_DN_KEY: READER_DN, naming.IDENTITY_PASSWORD_KEY: self.reader_password},
            CA_SECRET: {"ca.crt": self.ca_pem},
        }

    def start_beside(self, cluster: DockerCluster) -> None:
        """slapd on ``cluster``'s network (a DockerCluster's ``before_pods``), and the cluster's copies of the
        Secrets that point at it."""
        certs = self._make_certs()
        docker(
            "run", "-d", "--name", self.container, "--hostname", HOST, "--network", cluster.network,
            "--network-alias", HOST, *cluster.labels_args("ldap"),
            "-e", f"READER_PASSWORD={self.reader_password}", "-e", f"ADMIN_PASSWORD={self.admin_password}",
            "--mount", f"type=bind,source={certs},target=/certs,readonly",
            self.image,
        )  # fmt: skip
        self.wait_answering()
        for group, gid in SITE_GROUPS.items():
            self._ldap("ldapadd", stdin=group_entry(group, gid))
        cluster.user_secrets = {**cluster.user_secrets, **self.secrets()}

    def wait_answering(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            r = self._ldap("ldapsearch", "-b", BASE, "-s", "base", "dn", check=False)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise DockerError(f"slapd does not answer in {self.container}: {r.stderr}")
            time.sleep(0.5)

    def stop(self) -> None:
        """The directory goes away (its data stays, `start_again` brings it back)."""
        docker("stop", "-t", "5", self.container)

    def start_again(self) -> None:
        docker("start", self.container)
        self.wait_answering()

    def remove(self) -> None:
        docker("rm", "-fv", self.container, check=False)

    def _ldap(self, tool: str, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        return docker("exec", "-i", self.container, *admin_args(tool, self.admin_password), *args, input=stdin,
                      check=check)  # fmt: skip

    def add_user(self, name: str, uid: int, key: str, groups: tuple[str, ...] = (), home: str = "") -> None:
        """``name`` (``user_entries``), and a member of each of the site's ``groups``."""
        self._ldap("ldapadd", stdin=user_entries(name, uid, key, home))
        for group in groups:
            self._ldap("ldapmodify", stdin=member_change(group, name))

    def delete_user(self, name: str) -> None:
        self._ldap("ldapdelete", f"uid={name},{PEOPLE}", f"cn={name},{GROUPS}")

"""Whether a cluster's directory (spec.identity.ldap) answers the way SSSD in its pods will need: each URI
reached, TLS verified against the CA the spec names (ldaps://, or StartTLS on ldap://), and a simple bind
with the bind Secret's DN and password accepted. What fails is told apart, so the SlurmCluster can say
which: the server cannot be reached, its certificate does not verify, or the bind is refused.

Only a bind is spoken (RFC 4511: BindRequest and the StartTLS ExtendedRequest, BER-encoded here); the
encoding and decoding are pure functions, `check` does the I/O. The check connects only to the hosts of
the spec's URIs, never to a link-local, multicast or unspecified address (a node's metadata service lives
at one: a URI naming it must not make the operator a door to it), and speaks TLS before the bind unless the
spec says `insecurePlaintext`.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass

from warden.model import Ldap, ldap_address

STARTTLS_OID = b"1.3.6.1.4.1.1466.20037"
INVALID_CREDENTIALS = 49

#: DirectoryReachable's reasons, the most telling first (several servers failing differently: the
#: condition says the first of these any of them hit)
BIND_FAILED = "BindFailed"
TLS_FAILED = "TLSFailed"
UNREACHABLE = "Unreachable"
SECRET_MISSING = "SecretMissing"
REACHABLE = "DirectoryReachable"


@dataclass(frozen=True)
class DirectoryCheck:
    ok: bool
    reason: str
    message: str


class LdapProtocolError(Exception):
    """The server's answer is not an LDAP message this client understands."""


# --- BER (the subset LDAP's bind needs) --------------------------------------------------------------


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv(tag: int, value: bytes) -> bytes:
    return bytes([tag]) + _length(len(value)) + value


def _integer(n: int, tag: int = 0x02) -> bytes:
    return _tlv(tag, n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True))


def bind_request(message_id: int, dn: str, password: str) -> bytes:
    """LDAPMessage{ messageID, BindRequest{ version 3, name, simple password } }; ``dn`` "" and ``password``
    "": an anonymous bind."""
    op = _tlv(0x60, _integer(3) + _tlv(0x04, dn.encode()) + _tlv(0x80, password.encode()))
    return _tlv(0x30, _integer(message_id) + op)


def starttls_request(message_id: int) -> bytes:
    """LDAPMessage{ messageID, ExtendedRequest{ requestName: StartTLS } }."""
    return _tlv(0x30, _integer(message_id) + _tlv(0x77, _tlv(0x80, STARTTLS_OID)))


def _read_tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, value, offset after it) of the element at ``at``."""
    if at + 2 > len(data):
        raise LdapProtocolError("truncated element")
    tag, first = data[at], data[at + 1]
    at += 2
    if first & 0x80:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise LdapProtocolError("bad length")
        size = int.from_bytes(data[at : at + count], "big")
        at += count
    else:
        size = first
    if at + size > len(data):
        raise LdapProtocolError("truncated element")
    return tag, data[at : at + size], at + size


@dataclass(frozen=True)
class LdapResult:
    message_id: int
    op: int  # the protocolOp's tag: 0x61 BindResponse, 0x78 ExtendedResponse
    code: int
    diagnostic: str


def parse_result(message: bytes) -> LdapResult:
    """The LDAPResult of one whole LDAPMessage (a BindResponse or an ExtendedResponse)."""
    tag, body, _ = _read_tlv(message, 0)
    if tag != 0x30:
        raise LdapProtocolError(f"not an LDAPMessage (tag {tag:#x})")
    tag, msgid, at = _read_tlv(body, 0)
    if tag != 0x02:
        raise LdapProtocolError("no messageID")
    op, result, _ = _read_tlv(body, at)
    tag, code, at = _read_tlv(result, 0)
    if tag != 0x0A:
        raise LdapProtocolError("no resultCode")
    _, _matched, at = _read_tlv(result, at)
    _, diagnostic, _ = _read_tlv(result, at)
    return LdapResult(
        int.from_bytes(msgid, "big", signed=True), op, int.from_bytes(code, "big"), diagnostic.decode(errors="replace")
    )


def message_size(head: bytes) -> int | None:
    """The whole size of the LDAPMessage starting with ``head``; None until ``head`` holds its length."""
    if len(head) < 2:
        return None
    first = head[1]
    if not first & 0x80:
        return 2 + first
    count = first & 0x7F
    if len(head) < 2 + count:
        return None
    return 2 + count + int.from_bytes(head[2 : 2 + count], "big")


# --- the check -------------------------------------------------------------------------------------


def _exchange(sock: socket.socket, request: bytes) -> LdapResult:
    sock.sendall(request)
    data = b""
    while (size := message_size(data)) is None or len(data) < size:
        chunk = sock.recv(4096)
        if not chunk:
            raise LdapProtocolError("the server closed the connection")
        data += chunk
    return parse_result(data[:size])


def forbidden_address(address: str) -> bool:
    """Whether the check must not connect to ``address``: link-local (169.254.0.0/16 and fe80::/10, where
    clouds serve a node's metadata and credentials), multicast, unspecified or reserved."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved


def _connect(uri: str, host: str, port: int, timeout: float) -> socket.socket | DirectoryCheck:
    """A connection to one of ``host``'s addresses (resolved once: the address checked is the one
    connected to), or why there is none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return DirectoryCheck(False, UNREACHABLE, f"{uri}: cannot connect: {e.strerror or e}")
    for *_, sockaddr in infos:
        if forbidden_address(str(sockaddr[0])):
            return DirectoryCheck(False, UNREACHABLE, f"{uri}: {host} is {sockaddr[0]}, a link-local, multicast or"
                                  " unspecified address, which the operator does not connect to")  # fmt: skip
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as e:
            sock.close()
            error = e
    return DirectoryCheck(False, UNREACHABLE, f"{uri}: cannot connect: {error and (error.strerror or error)}")


def _one(ldap: Ldap, uri: str, dn: str, password: str, context: ssl.SSLContext, timeout: float) -> DirectoryCheck:
    host, port, secure = ldap_address(uri)
    raw = _connect(uri, host, port, timeout)
    if isinstance(raw, DirectoryCheck):
        return raw
    sock: socket.socket = raw
    try:
        if secure or (ldap.start_tls and not ldap.insecure_plaintext):
            if not secure:
                answer = _exchange(raw, starttls_request(1))
                if answer.code != 0:
                    why = f"{answer.code}: {answer.diagnostic}"
                    return DirectoryCheck(False, TLS_FAILED, f"{uri}: StartTLS refused ({why})")
            sock = context.wrap_socket(raw, server_hostname=host)
        result = _exchange(sock, bind_request(2, dn, password))
    except ssl.SSLCertVerificationError as e:
        why = e.verify_message or str(e)
        return DirectoryCheck(False, TLS_FAILED, f"{uri}: its certificate does not verify: {why}")
    except ssl.SSLError as e:
        return DirectoryCheck(False, TLS_FAILED, f"{uri}: TLS failed: {e.reason or e}")
    except (OSError, LdapProtocolError) as e:
        return DirectoryCheck(False, UNREACHABLE, f"{uri}: no LDAP answer: {e}")
    finally:
        sock.close()
        raw.close()
    if result.code == INVALID_CREDENTIALS:
        who = dn or "an anonymous bind"
        why = f"invalid credentials for {who} (spec.identity.ldap.bindSecret)"
        return DirectoryCheck(False, BIND_FAILED, f"{uri}: {why}")
    if result.code != 0:
        return DirectoryCheck(False, BIND_FAILED, f"{uri}: bind refused ({result.code}: {result.diagnostic})")
    return DirectoryCheck(True, REACHABLE, f"{uri} answered and accepted the bind")


def tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """Certificates verified (and the host name) against ``ca_pem``, or the system's CAs without one, as
    SSSD verifies them (OpenLDAP's libldap on OpenSSL): without the X.509 strict mode Python 3.13 turns
    on, which refuses CAs that SSSD takes (one without a keyUsage extension) and would report a directory
    that works as failing."""
    context = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def check(ldap: Ldap, dn: str, password: str, ca_pem: str | None, timeout: float = 5.0) -> DirectoryCheck:
    """Every URI in turn, as SSSD fails over: reachable when one answers and accepts the bind (the message
    names the ones that did not); otherwise the most telling failure, with every server's."""
    try:
        context = tls_context(ca_pem)
    except ssl.SSLError as e:
        return DirectoryCheck(False, TLS_FAILED, f"the CA bundle (spec.identity.ldap.caSecretRef) is not PEM: {e}")
    results = [_one(ldap, uri, dn, password, context, timeout) for uri in ldap.uris]
    good = [r for r in results if r.ok]
    bad = [r for r in results if not r.ok]
    if good:
        also = f"; {'; '.join(r.message for r in bad)}" if bad else ""
        return DirectoryCheck(True, REACHABLE, good[0].message + also)
    reason = next(r for r in (BIND_FAILED, TLS_FAILED, UNREACHABLE) if any(b.reason == r for b in bad))
    return DirectoryCheck(False, reason, "; ".join(r.message for r in bad))

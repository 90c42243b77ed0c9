"""The directory check's LDAP (warden.ldapcheck): the bytes of a bind and of StartTLS as RFC 4511 lays them
out, the answers read back, and how a failed check is told apart. The live checks against a real slapd
run in the e2e tier (the SlurmCluster's DirectoryReachable condition)."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from warden import ldapcheck
from warden.model import Ldap


def test_a_simple_bind_request_is_encoded_as_rfc_4511_says() -> None:
    # LDAPMessage{ id 1, [APPLICATION 0]{ version 3, "cn=a", [0] "b" } }
    assert ldapcheck.bind_request(1, "cn=a", "b").hex() == "301102010160" + "0c020103040463" + "6e3d61" + "800162"


def test_long_values_get_long_form_lengths() -> None:
    password = "p" * 300
    message = ldapcheck.bind_request(7, "", password)
    assert message[:2] == b"\x30\x82"
    assert ldapcheck.message_size(message[:4]) == len(message)
    assert message.endswith(b"\x80\x82\x01\x2c" + password.encode())


def test_starttls_names_its_oid() -> None:
    assert ldapcheck.starttls_request(1) == b"\x30\x1d\x02\x01\x01\x77\x18\x80\x16" + ldapcheck.STARTTLS_OID


def test_a_refused_bind_is_read_back_with_its_code_and_words() -> None:
    words = b"invalid credentials"
    result = b"\x0a\x01\x31\x04\x00\x04" + bytes([len(words)]) + words
    answer = b"\x30" + bytes([3 + 2 + len(result)]) + b"\x02\x01\x02\x61" + bytes([len(result)]) + result
    assert ldapcheck.message_size(answer[:1]) is None
    assert ldapcheck.message_size(answer[:2]) == len(answer)
    assert ldapcheck.parse_result(answer) == ldapcheck.LdapResult(2, 0x61, 49, "invalid credentials")


@pytest.mark.parametrize("garbage", [b"", b"\x04\x00", b"\x30\x05\x02\x01", b"\x30\x03\x04\x01\x00"])
def test_what_is_not_an_ldap_answer_is_said_so(garbage: bytes) -> None:
    with pytest.raises(ldapcheck.LdapProtocolError):
        ldapcheck.parse_result(garbage)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_server_nobody_listens_on_is_unreachable_and_every_server_is_named() -> None:
    a, b = _closed_port(), _closed_port()
    ldap = Ldap.model_validate({"uris": [f"ldaps://127.0.0.1:{a}", f"ldap://127.0.0.1:{b}"], "searchBase": "dc=x"})
    result = ldapcheck.check(ldap, "cn=reader,dc=x", "secret", None, timeout=2)
    assert not result.ok and result.reason == ldapcheck.UNREACHABLE
    assert f"ldaps://127.0.0.1:{a}: cannot connect" in result.message
    assert f"ldap://127.0.0.1:{b}: cannot connect" in result.message


def test_a_ca_bundle_that_is_no_pem_is_a_tls_failure_naming_the_field() -> None:
    ldap = Ldap.model_validate({"uris": ["ldaps://127.0.0.1:1"], "searchBase": "dc=x"})
    result = ldapcheck.check(ldap, "", "", "not a certificate", timeout=1)
    assert not result.ok and result.reason == ldapcheck.TLS_FAILED and "caSecretRef" in result.message


def test_certificates_are_verified_as_sssd_verifies_them() -> None:
    """The host name and the chain, always; not Python 3.13's X.509 strict mode, which refuses CAs SSSD
    takes (a CA without keyUsage: the check would call a working directory failing)."""
    context = ldapcheck.tls_context(None)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert not context.verify_flags & ssl.VERIFY_X509_STRICT


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::1", "0.0.0.0", "::ffff:169.254.169.254", "224.0.0.1"])
def test_the_check_never_connects_to_a_metadata_or_unspecified_address(address: str) -> None:
    """A URI naming a node's metadata service (link-local) makes the operator connect nowhere."""
    host = f"[{address}]" if ":" in address else address
    ldap = Ldap.model_validate({"uris": [f"ldap://{host}:80"], "searchBase": "dc=x", "insecurePlaintext": True})
    result = ldapcheck.check(ldap, "cn=reader,dc=x", "secret", None, timeout=2)
    assert not result.ok and result.reason == ldapcheck.UNREACHABLE
    assert "which the operator does not connect to" in result.message, result.message


def _first_bytes(uri_for: str, **ldap: object) -> bytes:
    """What a server on loopback receives first from the check of ``uri_for`` (``{port}`` filled in)."""
    received: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                received.append(conn.recv(4096))

        thread = threading.Thread(target=serve)
        thread.start()
        spec = Ldap.model_validate({"uris": [uri_for.format(port=port)], "searchBase": "dc=x", **ldap})
        result = ldapcheck.check(spec, "cn=reader,dc=x", "the-password", None, timeout=2)
        thread.join(5)
    assert not result.ok
    return received[0]


def test_the_password_goes_only_over_tls_unless_the_spec_says_plaintext() -> None:
    """ldap:// starts with StartTLS, ldaps:// with a TLS handshake: the bind (and its password) never
    crosses the network in clear; only `insecurePlaintext: true` sends it as it is."""
    starttls = _first_bytes("ldap://127.0.0.1:{port}")
    assert starttls == ldapcheck.starttls_request(1) and b"the-password" not in starttls
    handshake = _first_bytes("ldaps://127.0.0.1:{port}")
    assert handshake[0] == 0x16 and b"the-password" not in handshake  # a TLS record: handshake
    plain = _first_bytes("ldap://127.0.0.1:{port}", insecurePlaintext=True)
    assert b"the-password" in plain

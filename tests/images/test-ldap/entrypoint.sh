#!/bin/bash
# warden/test-ldap's entrypoint (see its Dockerfile).
set -euo pipefail
if [ "${1:-}" = certs ]; then
    shift
    d="$(mktemp -d)"
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
        -days 7 -subj /CN=warden-test-ca -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key -out server.csr \
        -subj "/CN=$1" 2>/dev/null
    san="$(printf 'DNS:%s,' "$@")"
    printf 'subjectAltName=%s\n' "${san%,}" >ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 7 \
        -extfile ext 2>/dev/null
    cat ca.crt server.crt server.key
    exit 0
fi
[ -f /certs/server.crt ] && [ -f /certs/server.key ] || { echo "test-ldap: mount /certs/server.{crt,key}" >&2; exit 1; }
install -d -o openldap -g openldap /run/slapd
# slapd reads its key as openldap
install -m 0600 -o openldap -g openldap /certs/server.key /run/slapd/server.key
sed -i 's#^TLSCertificateKeyFile .*#TLSCertificateKeyFile /run/slapd/server.key#' /etc/ldap/warden-test.conf
printf 'rootpw %s\n' "${ADMIN_PASSWORD:?}" >/run/slapd/rootpw.conf
chown openldap /run/slapd/rootpw.conf && chmod 0600 /run/slapd/rootpw.conf
if [ ! -f /var/lib/ldap/data.mdb ]; then
    slapadd -f /etc/ldap/warden-test.conf <<LDIF
dn: dc=warden,dc=test
objectClass: dcObject
objectClass: organization
o: warden
dc: warden

dn: ou=people,dc=warden,dc=test
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=warden,dc=test
objectClass: organizationalUnit
ou: groups

dn: cn=reader,dc=warden,dc=test
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: reader
userPassword: ${READER_PASSWORD:?}
LDIF
    chown -R openldap:openldap /var/lib/ldap
fi
exec slapd -d 0 -f /etc/ldap/warden-test.conf -h "ldap:/// ldaps:///" -u openldap -g openldap

#!/bin/sh
# The test registry: docker-registry on :5000 over plain HTTP, storage in /var/lib/docker-registry;
# with REGISTRY_USER and REGISTRY_PASSWORD, only for that user (htpasswd).
set -eu
mkdir -p /var/lib/docker-registry
cat >/etc/docker/registry/config.yml <<CONF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /var/lib/docker-registry
http:
  addr: :5000
CONF
if [ -n "${REGISTRY_USER:-}" ]; then
    htpasswd -Bbn "$REGISTRY_USER" "${REGISTRY_PASSWORD:?REGISTRY_PASSWORD with REGISTRY_USER}" >/etc/docker/registry/htpasswd
    cat >>/etc/docker/registry/config.yml <<CONF
auth:
  htpasswd:
    realm: warden-test
    path: /etc/docker/registry/htpasswd
CONF
fi
exec docker-registry serve /etc/docker/registry/config.yml

#!/bin/sh
# Installs the warden Python package from /src into the virtualenv /opt/warden.
#   python-install.sh deps   the dependencies listed in /src/pyproject.toml (from the package index)
#   python-install.sh pkg    the package itself, without dependencies and without the network
#                            (setuptools from the venv or, with --system-site-packages, from Debian)
# A venv made here sees Debian's packages (--system-site-packages): the images that only need the
# standard-library parts (health checks) install python3-setuptools and never touch the index.
# WARDEN_EXTRA_CA (build arg, PEM text, may be empty) is trusted for the index only: for builds
# behind a TLS-inspecting proxy (hack/images.sh passes the build host's locally added CAs).
set -eu
[ -x /opt/warden/bin/python ] || python3 -m venv --system-site-packages /opt/warden
bundle=/tmp/warden-ca.pem
cat /etc/ssl/certs/ca-certificates.crt >"$bundle" 2>/dev/null || : >"$bundle"
[ -z "${WARDEN_EXTRA_CA:-}" ] || printf '%s\n' "$WARDEN_EXTRA_CA" >>"$bundle"
export PIP_CERT="$bundle" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
case "$1" in
    deps)
        /opt/warden/bin/python -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb")); print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' >/tmp/requirements.txt
        /opt/warden/bin/pip install -q -r /tmp/requirements.txt
        ;;
    pkg)
        [ -f /src/README.md ] || : >/src/README.md
        /opt/warden/bin/pip install -q --no-deps --no-build-isolation /src
        /opt/warden/bin/python -c 'import warden'
        ;;
    *) echo "usage: $0 deps|pkg" >&2; exit 2 ;;
esac
rm -rf "$bundle" /tmp/requirements.txt /src /root/.cache

#!/bin/sh
# Used by the Dockerfiles that install the warden Python package:
#   python-install.sh deps   install the dependencies listed in /src/pyproject.toml into /opt/warden
#   python-install.sh pkg    install the package itself from /src (no dependency resolution)
# WARDEN_EXTRA_CA (build arg, PEM text, may be empty) is trusted for this step only: for builds
# behind a TLS-inspecting proxy (hack/images.sh passes the build host's locally added CAs).
set -eu
[ -x /opt/warden/bin/pip ] || python3 -m venv /opt/warden
bundle=/tmp/warden-ca.pem
cat /etc/ssl/certs/ca-certificates.crt >"$bundle"
[ -z "${WARDEN_EXTRA_CA:-}" ] || printf '%s\n' "$WARDEN_EXTRA_CA" >>"$bundle"
export PIP_CERT="$bundle" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
case "$1" in
    deps)
        /opt/warden/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]))' >/tmp/requirements.txt
        /opt/warden/bin/pip install -q -r /tmp/requirements.txt
        ;;
    pkg)
        [ -f /src/README.md ] || : >/src/README.md
        /opt/warden/bin/pip install -q --no-deps /src
        /opt/warden/bin/python -c 'import warden'
        ;;
esac
rm -rf "$bundle" /tmp/requirements.txt /src /root/.cache

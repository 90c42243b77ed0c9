#!/usr/bin/env bash
# A throwaway Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kwok with fake nodes) on loopback, for poking at the operator by hand.
#
#   hack/controlplane.sh up [--nodes N] [--gpu-nodes N]   # builds missing binaries, prints `export ...`
#   eval "$(hack/controlplane.sh env)"                     # KUBECONFIG and the real kubectl on PATH
#   hack/controlplane.sh down
#
# State (certs, etcd data, logs, kubeconfig) lives in ${WARDEN_CONTROLPLANE_DIR:-~/.cache/warden/controlplane}.
# The implementation is tests/support/controlplane.py, the same code the integration tests use.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# The project's venv (make venv) has the kubernetes client; fall back to whatever python3 is on PATH.
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python3
    [[ -x "${ROOT}/.venv/bin/python" ]] && PYTHON="${ROOT}/.venv/bin/python"
fi
PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}" exec "${PYTHON}" -m tests.support.controlplane "$@"

#!/usr/bin/env bash
# The e2e tier: its modules in two lanes side by side on one Kubernetes cluster, then what must run alone.
#   hack/e2e-lanes.sh [pytest args...]
# Lane `cluster`: tests/e2e/test_slurmcluster.py (one installation, about half the tier's time). Lane `others`:
# every other module, one after the other. Then `alone`: test_warden_upgrade.py, which installs the previous
# release's CRDs and can only own them while no other installation is live.
# Each lane is a pytest process; its installations have their own namespaces and operator. A test that
# changes the one node they share (marked `whole_node`: a cordon, `kubectl drain`, a taint) runs while no
# other lane runs a test (tests/e2e/conftest.py, warden_dev.lanelock). The tests mostly wait on Slurm's and
# Kubernetes' timers, so two lanes take about half the time of one.
# Without KUBECONFIG, the local cluster is brought up first when it is not running, and taken down at the end
# when this script brought it up, unless WARDEN_E2E_KEEP=1. Each lane is a stage (hack/stage.sh): e2e-<lane>.
# The previous release's images, which only `alone` needs, are built (stage previous-release) while the two lanes
# run: the lanes leave about half the cores idle, and on a new machine the build takes minutes.
set -u
cd "$(dirname "$0")/.." || exit 1
PY="${PY:-python3}"
MAIN=tests/e2e/test_slurmcluster.py
ALONE=tests/e2e/test_warden_upgrade.py
others=()
for module in tests/e2e/test_*.py; do
    [ "$module" = "$MAIN" ] || [ "$module" = "$ALONE" ] || others+=("$module")
done

locks=$(mktemp -d /tmp/warden-e2e-lanes.XXXXXX)
started=0
finish() {
    if [ "$started" = 1 ] && [ "${WARDEN_E2E_KEEP:-}" != 1 ]; then
        "$PY" -m warden_dev down || echo "e2e: the local cluster did not come down: python -m warden_dev down" >&2
    fi
    rm -rf "$locks"
}
trap finish EXIT
trap 'exit 143' TERM INT
if [ -z "${KUBECONFIG:-}" ] && ! "$PY" -m warden_dev status >/dev/null; then
    started=1
    hack/stage.sh e2e-cluster-up "$PY" -m warden_dev cluster || exit $?
fi

lane() {  # NAME MODULE... -- runs them in one pytest process, its lines prefixed with [NAME]
    local name="$1"
    shift
    (
        set -o pipefail
        hack/stage.sh "e2e-${name}" "$PY" -m pytest -p no:cacheprovider --basetemp="${locks}/tmp-${name}" "$@" \
            2>&1 | sed -u "s/^/[${name}] /"
    )
}

previous_pid=
if [ -z "${KUBECONFIG:-}" ]; then  # with KUBECONFIG the upgrade test skips (it needs the local registry)
    (
        set -o pipefail
        hack/stage.sh previous-release hack/previous-release.sh build 2>&1 | sed -u 's/^/[previous-release] /'
    ) &
    previous_pid=$!
fi

export WARDEN_E2E_LANE_LOCKS="${locks}/turns"
lane cluster "$MAIN" "$@" &
main_pid=$!
lane others "${others[@]}" "$@" &
others_pid=$!
rc=0
wait "$main_pid" || rc=1
wait "$others_pid" || rc=1
unset WARDEN_E2E_LANE_LOCKS
# a failed build fails the run here; the upgrade test then tries it once more and says why in its own failure
[ -z "$previous_pid" ] || wait "$previous_pid" || rc=1
# run even when a lane failed: its verdict is worth having, and the run fails either way
lane alone "$ALONE" "$@" || rc=1
exit "$rc"

#!/usr/bin/env bash
# Run test tiers side by side: hack/lanes.sh "TIER [TIER...]" ["TIER [TIER...]"...]
# Each argument is a lane: its tiers (make targets) run one after the other, each a stage `<tier>-tier`
# (hack/stage.sh); the lanes run at once, every line of a lane's output prefixed with `[<first tier>]`.
# A lane stops at its first failing tier; the others go on. Exits non-zero when any lane failed.
# What the tiers build is built before (`make tier-builds`): side by side they only find it there.
#   hack/lanes.sh --builds "TARGET..." ["TARGET..."...]
# the same for builds: each target a stage of its own name (its own stages inside it), no wait scaling.
set -u
cd "$(dirname "$0")/.." || exit 1
suffix="-tier"
if [ "${1:-}" = "--builds" ]; then
    suffix=""
    shift
else
    # side by side, each tier's waits (warden_dev.controlplane.wait_for) allow three times as long before failing
    export WARDEN_WAIT_SCALE="${WARDEN_WAIT_SCALE:-3}"
fi
pids=()
names=()
for lane in "$@"; do
    first="${lane%% *}"
    (
        set -o pipefail
        (
            for tier in $lane; do
                hack/stage.sh "${tier}${suffix}" make --no-print-directory "$tier" || exit $?
            done
        ) 2>&1 | sed -u "s/^/[${first}] /"
    ) &
    pids+=("$!")
    names+=("$first")
done
rc=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "lane ${names[$i]}: failed" >&2
        rc=1
    fi
done
exit "$rc"

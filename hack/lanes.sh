#!/usr/bin/env bash
# Run test tiers side by side: hack/lanes.sh "TIER [TIER...]" ["TIER [TIER...]"...]
# Each argument is a lane: its tiers (make targets) run one after the other, each a stage `<tier>-tier`
# (hack/stage.sh); the lanes run at once, every line of a lane's output prefixed with `[<first tier>]`.
# A lane stops at its first failing tier; the others go on. Exits non-zero when any lane failed.
# A lane whose first word is `after:STAGE` starts its tiers once STAGE (a stage of a lane before it, e.g.
# `e2e-others` inside the e2e tier) has ended, OK or not, or once every lane before it has: it fills the
# cores a lane leaves idle when its sub-lane ends early.
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
# the stage lines `after:` waits for (hack/stage.sh records each stage's end there)
if [ -z "${WARDEN_STAGE_LOG:-}" ]; then
    WARDEN_STAGE_LOG="$(mktemp)"
    export WARDEN_STAGE_LOG
fi
# after:STAGE PIDS...: return once STAGE's line is in the stage log or none of PIDS runs any more
wait_for_stage() {
    local stage="$1" pid alive start=$SECONDS
    shift
    echo "==> after ${stage}: waiting"
    while ! grep -q "^${stage} " "$WARDEN_STAGE_LOG" 2>/dev/null; do
        alive=0
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 1 ] || break
        sleep 1
    done
    echo "<== after ${stage}: waited $(( SECONDS - start ))s"
}
pids=()
names=()
for lane in "$@"; do
    after=""
    case "$lane" in after:*)
        after="${lane%% *}"
        after="${after#after:}"
        lane="${lane#* }"
        ;;
    esac
    first="${lane%% *}"
    (
        set -o pipefail
        (
            [ -z "$after" ] || wait_for_stage "$after" "${pids[@]}"
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

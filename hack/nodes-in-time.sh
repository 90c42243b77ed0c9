#!/usr/bin/env bash
# `make test`'s last tier: the nodes tier (`make nodes`, stage nodes-tier), unless a run with a deadline
# could not finish it in time.
# WARDEN_TEST_DEADLINE (epoch seconds; .ci/run sets it to its start + CI's 90 minutes) and
# WARDEN_NODES_TIER_S (what the tier takes at most here: its VM nodes' boot, the installation, the cases;
# about 1,000 s measured with its builds cached, 1,500 allowed): when the tier cannot end before the deadline it is not started,
# the stage table says SKIPPED with the seconds left, and the run fails only if an earlier tier did.
# A tier that started and is still running at the deadline is stopped there (timeout: SIGTERM, its VM
# nodes and installation torn down by its fixtures) and fails the run, with the table printed.
# What the tier needs grows with how slow the machine is today: at least WARDEN_NODES_TIER_S, and at least half
# of what this run's lanes took (the `lanes` line of $WARDEN_STAGE_LOG). In the runs where the tier passed it
# took 0.35-0.42 of the lanes' time; on days the machine was slow (CI's lanes 3,486 s, here 4,094 s) its TCG
# nodes starved and it failed or was stopped at the deadline, the run's other tiers green.
# Without a deadline (make test on a desk) the tier always runs.
set -u
cd "$(dirname "$0")/.." || exit 1
need="${WARDEN_NODES_TIER_S:-1500}"
if [ -z "${WARDEN_TEST_DEADLINE:-}" ]; then
    exec hack/stage.sh nodes-tier make --no-print-directory nodes
fi
why=""
lanes_s=$(awk '$1 == "lanes" { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+s$/) { sub(/s$/, "", $i); print $i; exit } }' \
    "${WARDEN_STAGE_LOG:-/dev/null}" 2>/dev/null)
if [ -n "$lanes_s" ] && [ $(( lanes_s / 2 )) -gt "$need" ]; then
    need=$(( lanes_s / 2 ))
    why=", half of the lanes' ${lanes_s}s"
fi
left=$(( WARDEN_TEST_DEADLINE - $(date +%s) ))
if [ "$left" -lt "$need" ]; then
    exec hack/stage.sh --skipped nodes-tier "${left}s left of the run; needs ${need}s${why}; run: make nodes"
fi
exec hack/stage.sh nodes-tier timeout --kill-after=60 "$left" make --no-print-directory nodes

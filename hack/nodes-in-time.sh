#!/usr/bin/env bash
# `make test`'s last tier: the nodes tier (`make nodes`, stage nodes-tier), unless a run with a deadline
# could not finish it in time.
# WARDEN_TEST_DEADLINE (epoch seconds; .ci/run sets it to its start + CI's 90 minutes) and
# WARDEN_NODES_TIER_S (what the tier takes at most here: its VM nodes' boot, the installation, the cases;
# about 1,000 s measured with its builds cached, 1,500 allowed): when the tier cannot end before the deadline it is not started,
# the stage table says SKIPPED with the seconds left, and the run fails only if an earlier tier did.
# A tier that started and is still running at the deadline is stopped there (timeout: SIGTERM, its VM
# nodes and installation torn down by its fixtures) and fails the run, with the table printed.
# Without a deadline (make test on a desk) the tier always runs.
set -u
cd "$(dirname "$0")/.." || exit 1
need="${WARDEN_NODES_TIER_S:-1500}"
if [ -z "${WARDEN_TEST_DEADLINE:-}" ]; then
    exec hack/stage.sh nodes-tier make --no-print-directory nodes
fi
left=$(( WARDEN_TEST_DEADLINE - $(date +%s) ))
if [ "$left" -lt "$need" ]; then
    exec hack/stage.sh --skipped nodes-tier "${left}s left of the run; needs ${need}s; run: make nodes"
fi
exec hack/stage.sh nodes-tier timeout --kill-after=60 "$left" make --no-print-directory nodes

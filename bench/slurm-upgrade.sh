#!/usr/bin/env bash
# Slurm upgraded in a live cluster (24.11 -> 26.05 by `helm upgrade --set slurmVersion=26.05`): the
# time from the helm upgrade to every daemon (slurmdbd, slurmctld, slurmrestd, each slurmd, login)
# and the jail's client tools on 26.05, and the number of jobs interrupted (a two-node job running
# through the upgrade and one queued behind it; aim: 0). Runs the e2e story
# (tests/e2e/test_slurm_upgrade.py) on the local cluster, which it brings up when it is down.
# Printed, never asserted. Needs both series' images (make images images-24.11).
set -euo pipefail
cd "$(dirname "$0")/.."
figures="$(mktemp)"
trap 'rm -f "$figures" "$figures.log"' EXIT
WARDEN_UPGRADE_FIGURES="$figures" "${PY:-python3}" -m pytest -q -p no:cacheprovider \
    tests/e2e/test_slurm_upgrade.py -k upgraded_from >"$figures.log" 2>&1 || { tail -n 60 "$figures.log"; exit 1; }
"${PY:-python3}" - "$figures" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
print("Slurm upgrade 24.11 -> 26.05 (helm upgrade to every daemon and the jail's tools on 26.05)")
print(f"  duration          {f['seconds']:>7.0f} s")
print(f"  jobs interrupted  {f['interrupted']:>7d}   (of 2: one running through it, one queued)")
print(f"  steps             {' -> '.join(f['steps'])}")
PY

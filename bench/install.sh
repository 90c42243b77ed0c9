#!/usr/bin/env bash
# Installing and upgrading Warden from its registry on the local cluster (bench/install.py): `make up`
# with the registry empty (cold) and holding everything (warm), and the time from `helm upgrade` of the
# operator to the new operator taking the cluster over. Printed, never asserted. Needs Docker and the
# images (make images); takes the local cluster down before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
"${PY:-python3}" -m bench.install

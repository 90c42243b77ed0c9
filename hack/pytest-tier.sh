#!/usr/bin/env bash
# Run one pytest tier: hack/pytest-tier.sh TIER [pytest args...]
# pytest exits 5 when it collects nothing. That is a failure here too — unless the tier has no test
# files at all yet (a tier that is planned but empty says so loudly instead of passing silently).
set -u
tier="$1"
shift
PY="${PY:-python3}"
dir="tests/${tier}"
if ! compgen -G "${dir}/test_*.py" >/dev/null; then
    echo "tier ${tier}: no test files in ${dir} yet — nothing to run"
    exit 0
fi
"$PY" -m pytest "$dir" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "tier ${tier}: pytest collected no tests in ${dir} although test files exist" >&2
fi
exit "$rc"

#!/usr/bin/env bash
# Run one stage of a build or test run and say how long it took:
#   hack/stage.sh NAME command [args...]
# Prints "==> NAME" before and "<== NAME: OK|FAILED (rc) in Ns" after; exits with the command's code.
# The lines also go to $WARDEN_STAGE_LOG when set, so .ci/run can print a summary at the end.
set -u
name="$1"
shift
start=$(date +%s)
echo "==> ${name}"
"$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ]; then verdict="OK"; else verdict="FAILED (rc ${rc})"; fi
line=$(printf '%-28s %-16s %5ds' "$name" "$verdict" "$took")
echo "<== ${line}"
if [ -n "${WARDEN_STAGE_LOG:-}" ]; then echo "$line" >> "$WARDEN_STAGE_LOG"; fi
exit "$rc"

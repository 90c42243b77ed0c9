#!/usr/bin/env bash
# Run one stage of a build or test run and say how long it took:
#   hack/stage.sh NAME command [args...]
# Prints "==> NAME" before and "<== NAME: OK|FAILED (rc) in Ns" after; exits with the command's code.
# The lines also go to $WARDEN_STAGE_LOG when set, so .ci/run can print a summary at the end.
#   hack/stage.sh --skipped NAME WHY
# records a stage that was not run: "<== NAME SKIPPED 0s  (WHY)", exit 0.
set -u
record() {  # NAME VERDICT SECONDS [WHY]
    local line
    line=$(printf '%-28s %-16s %5ds' "$1" "$2" "$3")
    [ -n "${4:-}" ] && line="${line}  ($4)"
    echo "<== ${line}"
    if [ -n "${WARDEN_STAGE_LOG:-}" ]; then echo "$line" >> "$WARDEN_STAGE_LOG"; fi
}
if [ "$1" = "--skipped" ]; then
    record "$2" SKIPPED 0 "$3"
    exit 0
fi
name="$1"
shift
start=$(date +%s)
echo "==> ${name}"
"$@"
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ]; then verdict="OK"; else verdict="FAILED (rc ${rc})"; fi
record "$name" "$verdict" "$took"
exit "$rc"

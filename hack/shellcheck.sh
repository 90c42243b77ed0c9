#!/usr/bin/env bash
# Runs shellcheck (warnings and errors) over every shell script of the repository: the *.sh files and the
# files whose first line names bash or sh, tracked or new (not ignored by git), outside .venv and
# third-party code. Sourced files are followed (.shellcheckrc). Installs Debian's shellcheck when the
# machine has none (hack/install-deps.sh lint).
#   hack/shellcheck.sh          check them
#   hack/shellcheck.sh --list   only list them
set -euo pipefail
cd "$(dirname "$0")/.."

shell_scripts() {
    local f
    while IFS= read -r -d '' f; do
        f="${f#./}"
        case "$f" in .venv/* | */.venv/* | */third_party/* | */vendor/* | */node_modules/*) continue ;; esac
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        case "$f" in
            *.sh) ;;
            *) head -n 1 "$f" 2>/dev/null | grep -Eq '^#!.*[/ ](ba|da)?sh([[:space:]]|$)' || continue ;;
        esac
        printf '%s\n' "$f"
    done < <(
        if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
            git ls-files -z --cached --others --exclude-standard
        else
            find . -path ./.venv -prune -o -path ./.git -prune -o -type f -print0
        fi
    )
}

mapfile -t scripts < <(shell_scripts | sort -u)
if [ "${1:-}" = --list ]; then
    printf '%s\n' "${scripts[@]}"
    exit 0
fi
command -v shellcheck >/dev/null || hack/install-deps.sh lint
shellcheck -S warning "${scripts[@]}"
echo "shellcheck: ${#scripts[@]} scripts, no warnings"

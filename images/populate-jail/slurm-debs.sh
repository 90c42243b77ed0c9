#!/bin/bash
# Runs while building warden/populate-jail, in a stage FROM the jail image: downloads the Debian
# packages of the jail's Slurm (every installed package built from slurm-wlm, and the installed
# packages they depend on directly, at the versions the jail has) into DIR. warden-populate-jail
# installs the ones a populated jail lacks when it upgrades the jail's Slurm in place.
#
#   slurm-debs.sh DIR
set -euo pipefail
dir="${1:?usage: slurm-debs.sh DIR}"
installed() { dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' "$@" 2>/dev/null | awk '$1 == "ii" { print $2 }'; }

slurm="$(dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${source:Package}\n' | awk '$1 == "ii" && $3 == "slurm-wlm" { print $2 }')"
[ -n "$slurm" ] || { echo "slurm-debs: no package of slurm-wlm is installed" >&2; exit 1; }
# Dependencies, recursively, of what is installed: names only (versions and architecture qualifiers
# dropped; of alternatives, those installed). A jail that lacks some of them gets them too.
depends() { # PACKAGE... -> the installed packages they depend on
    # shellcheck disable=SC2046
    installed $(dpkg-query -W -f '${Depends},${Pre-Depends}\n' "$@" | tr ',|' '\n\n' |
        sed 's/(.*//; s/:.*//; s/[[:space:]]//g' | grep -v '^$' | sort -u)
}
packages="$(printf '%s\n' $slurm | sort -u)"
frontier="$packages"
while [ -n "$frontier" ]; do
    # shellcheck disable=SC2086
    next="$(depends $frontier | sort -u | comm -23 - <(printf '%s\n' "$packages"))"
    packages="$(printf '%s\n%s\n' "$packages" "$next" | grep -v '^$' | sort -u)"
    frontier="$next"
done
want=()
for p in $packages; do want+=("$p=$(dpkg-query -W -f '${Version}' "$p")"); done

install -d -m 0755 "$dir"
chmod 0777 "$dir" # apt downloads as _apt
apt-get update -qq
(cd "$dir" && apt-get download -qq "${want[@]}")
chmod 0755 "$dir"
rm -rf /var/lib/apt/lists/*
echo "slurm-debs: ${#want[@]} packages ($(du -sh "$dir" | cut -f1)): ${want[*]}"

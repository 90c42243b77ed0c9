#!/bin/bash
# Runs once while building warden/jail: Slurm's user commands that Debian's packages leave out, taken
# from the source of the very Slurm release the jail's slurm-client comes from (its Debian source
# package), so they match on every Slurm series an image ships:
#   sgather  the counterpart of sbcast: gathers a file from every node of a job (contribs/sgather)
#   seff     a finished job's CPU and memory efficiency (contribs/seff; Perl, libslurm-perl)
set -euo pipefail

version="$(dpkg-query -W -f '${source:Version}' slurm-client)"
work="$(mktemp -d)"
chmod 0755 "$work" # apt downloads as _apt
trap 'rm -rf "$work" /etc/apt/sources.list.d/warden-src.list /etc/apt/sources.list.d/warden-src.sources' EXIT

# deb-src entries for the suites the image already installs from (one-line and deb822 styles).
sed -n 's/^deb /deb-src /p' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    >/etc/apt/sources.list.d/warden-src.list || true
for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] && [ "$f" != /etc/apt/sources.list.d/warden-src.sources ] || continue
    sed 's/^Types:.*/Types: deb-src/' "$f" >>/etc/apt/sources.list.d/warden-src.sources
    echo >>/etc/apt/sources.list.d/warden-src.sources
done
apt-get update -qq
(cd "$work" && apt-get source --download-only --tar-only "slurm-wlm=$version")
tar -xf "$work"/slurm-wlm_*.orig.tar.* -C "$work" --strip-components=1 --wildcards \
    '*/contribs/sgather/sgather' '*/contribs/sgather/sgather.1' '*/contribs/seff/seff'
install -m 0755 "$work/contribs/sgather/sgather" /usr/bin/sgather
install -m 0755 "$work/contribs/seff/seff" /usr/bin/seff
if [ -d /usr/share/man/man1 ]; then
    install -m 0644 "$work/contribs/sgather/sgather.1" /usr/share/man/man1/sgather.1
fi
rm -rf /var/lib/apt/lists/*

# sgather runs; seff's Slurm Perl API is there (loading it needs the cluster's slurm.conf).
sgather --usage | grep -q '^Usage: sgather'
perl -e 'for (@INC) { exit 0 if -f "$_/Slurm.pm" } exit 1'
echo "install-contribs: sgather and seff from slurm-wlm $version"

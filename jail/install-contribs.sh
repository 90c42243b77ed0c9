#!/bin/bash
# Runs once while building warden/jail: Slurm's user commands that Debian's packages leave out, taken
# from the source of the very Slurm release the jail's slurm-client comes from (its Debian source
# package), so they match on every Slurm series an image ships:
#   sgather  the counterpart of sbcast: gathers a file from every node of a job (contribs/sgather)
#   seff     a finished job's CPU and memory efficiency (contribs/seff; Perl, libslurm-perl), only where
#            the Slurm Perl API fits the jail's Perl: sid's libslurm-perl 26.05.5 is built for Perl 5.42
#            (trixie has 5.40, and the package does not say so), so a 26.05 jail has no seff and the
#            unusable package is removed again
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
# The source of the jail's own release when it is served; otherwise trixie's (sid's 26.05.5 source
# answers 404 here: its sgather and seff differ from 24.11.5's by one comment and one line each).
if ! (cd "$work" && apt-get source --download-only --tar-only "slurm-wlm=$version"); then
    rm -f "$work"/*
    (cd "$work" && apt-get source --download-only --tar-only slurm-wlm/trixie)
fi
source_version="$(cd "$work" && ls slurm-wlm_*.orig.tar.* | sed 's/^slurm-wlm_\(.*\)\.orig\.tar.*/\1/')"
tar -xf "$work"/slurm-wlm_*.orig.tar.* -C "$work" --strip-components=1 --wildcards \
    '*/contribs/sgather/sgather' '*/contribs/sgather/sgather.1' '*/contribs/seff/seff'
install -m 0755 "$work/contribs/sgather/sgather" /usr/bin/sgather
# the Perl API's files for the jail's own Perl (a load needs the cluster's slurm.conf, absent here)
perl_api=no
perl -e 'for (@INC) { exit 0 if -f "$_/Slurm.pm" } exit 1' && perl_api=yes
if [ "$perl_api" = yes ]; then
    install -m 0755 "$work/contribs/seff/seff" /usr/bin/seff
else
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq libslurm-perl >/dev/null
fi
if [ -d /usr/share/man/man1 ]; then
    install -m 0644 "$work/contribs/sgather/sgather.1" /usr/share/man/man1/sgather.1
fi
rm -rf /var/lib/apt/lists/*

sgather --usage | grep -q '^Usage: sgather'
what="sgather and seff"
[ "$perl_api" = yes ] || what="sgather (no seff: libslurm-perl $version is not built for this Perl)"
echo "install-contribs: $what from slurm-wlm ${source_version:-$version}'s source (the jail runs $version)"

#!/bin/sh
# Points apt at one Slurm release series; run once, as the first step, by every image that installs
# Slurm (warden/spank, warden/slurm-base and what starts FROM it, warden/jail). The images' base stays
# Debian trixie; only Slurm's own packages (and the libraries they need newer than trixie has) come
# from the suite that carries the series.
#
#   slurm-series.sh SERIES     SERIES: 26.05 (the default) or 24.11
#
# 26.05: Debian sid's binary packages of slurm-wlm 26.05.5-1, built by Debian against libraries that
#        trixie carries at the versions they need, except two taken from sid with them: libhwloc15 2.15
#        (slurmd) and libllhttp9.4 (slurmrestd). sid's source package is not served here (its
#        .orig.tar.gz answers 404), so Warden installs Debian's binaries instead of rebuilding them;
#        docs/images.md ("Slurm series") has the figures. The sid index here is an expired snapshot:
#        the source line says check-valid-until=no.
# 24.11: trixie's own slurm-wlm 24.11.5 (security updates from trixie's point releases).
#
# Writes /etc/apt/preferences.d/slurm (Slurm pinned to the series, sid never chosen otherwise),
# /etc/apt/sources.list.d/warden-slurm.list (26.05 only) and /etc/warden-slurm-series (the series).
set -eu
series="${1:?usage: slurm-series.sh SERIES (26.05 or 24.11)}"
prefs=/etc/apt/preferences.d/slurm
slurm_packages='slurm* libslurm* sackd libpmi*-slurm* slurm-wlm* slurmctld slurmd slurmdbd slurmrestd'

case "$series" in
    24.11)
        cat >"$prefs" <<EOF
# Slurm series 24.11 (written by slurm-series.sh): daemons and clients must agree on it.
Package: $slurm_packages
Pin: version 24.11.*
Pin-Priority: 1001
EOF
        ;;
    26.05)
        # the suite's line, derived from the base image's own trixie line (no mirror named here)
        sed -n 's#^deb \([^ ]*\) trixie main$#deb [check-valid-until=no] \1 sid main#p' \
            /etc/apt/sources.list >/etc/apt/sources.list.d/warden-slurm.list
        grep -q ' sid main$' /etc/apt/sources.list.d/warden-slurm.list || {
            echo "slurm-series.sh: no 'deb <mirror> trixie main' line in /etc/apt/sources.list to derive sid's from" >&2
            exit 1
        }
        cat >"$prefs" <<EOF
# Slurm series 26.05 (written by slurm-series.sh): daemons and clients must agree on it.
Package: $slurm_packages
Pin: version 26.05.5-1
Pin-Priority: 1001

# the libraries 26.05.5's packages need newer than trixie's
Package: libhwloc15 libhwloc-plugins libllhttp9.4
Pin: release n=sid
Pin-Priority: 1001

# nothing else from sid
Package: *
Pin: release n=sid
Pin-Priority: 1
EOF
        ;;
    *)
        echo "slurm-series.sh: unknown Slurm series '$series' (want 26.05 or 24.11)" >&2
        exit 2
        ;;
esac
echo "$series" >/etc/warden-slurm-series

#!/bin/sh
# Add Debian's contrib and non-free components (CUDA, NCCL) to the image's apt sources, whichever
# form they are in (one-line sources.list or deb822 debian.sources). Names no mirror.
set -eu
found=0
if [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list; then
    sed -i -E '/^deb /{/ contrib( |$)/!s/ main( |$)/ main contrib non-free\1/}' /etc/apt/sources.list
    found=1
fi
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed -i -E '/^Components:/{/ contrib( |$)/!s/ main( |$)/ main contrib non-free\1/}' /etc/apt/sources.list.d/debian.sources
    found=1
fi
[ "$found" = 1 ] || { echo "warden-apt-non-free: no Debian apt sources found" >&2; exit 1; }

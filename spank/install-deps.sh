#!/bin/sh
# Packages spank/Makefile needs on Debian: a C compiler and make (all, helpers),
# slurm/spank.h (all), clang with libFuzzer and the sanitizer runtimes (fuzz: libclang-rt-dev,
# which Debian's clang only recommends), util-linux's unshare (test-enter).
set -eu
if [ "$(id -u)" != 0 ]; then
	echo "spank/install-deps.sh: run as root" >&2
	exit 1
fi
need=""
for pkg in gcc make libc6-dev libslurm-dev clang libclang-rt-dev util-linux; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	apt-get update
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need
fi

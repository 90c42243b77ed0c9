#!/usr/bin/env bash
# What a fresh Debian machine lacks to build and test Warden, installed from Debian's packages.
# Idempotent: a machine that has everything installs nothing.
#   hack/install-deps.sh [unit|lint|integration|dataplane|fuzz|nodes|all]   (default: all)
set -euo pipefail
what="${1:-all}"
pkgs=(gcc make libc6-dev libslurm-dev openssl git ca-certificates)
# make lint: shellcheck over every shell script (hack/shellcheck.sh)
lint=(shellcheck)
# make nodes: VM nodes (qemu, a debootstrapped root, mkfs.ext4 -d) and their NFS server (nfs-ganesha)
nodes=(qemu-system-x86 debootstrap e2fsprogs nfs-ganesha nfs-ganesha-vfs)
# make fuzz: clang, and libFuzzer with the sanitizer runtimes (libclang-rt-dev: Debian's clang only
# recommends it, and recommends are not installed here)
fuzz=(clang libclang-rt-dev)
case "$what" in
    unit) pkgs+=("${lint[@]}") ;;
    lint) pkgs=("${lint[@]}") ;;
    integration) ;;  # Go comes with the machine; hack/build-k8s-bins.sh checks its version
    dataplane) pkgs+=(openssh-client) ;;  # Docker and debootstrap: hack/docker.sh, hack/base-image.sh
    fuzz) pkgs=("${fuzz[@]}") ;;
    nodes) pkgs=("${nodes[@]}") ;;
    all) pkgs+=(openssh-client "${lint[@]}" "${fuzz[@]}") ;;  # nodes: make nodes-builds installs them
    *) echo "install-deps.sh: unknown set '$what'" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

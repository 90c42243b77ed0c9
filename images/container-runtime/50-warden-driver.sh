#!/bin/bash
# enroot hook (/etc/enroot/hooks.d): the node's NVIDIA driver in a job step's container, as in the
# jail. On a GPU worker the jail shows the node's own driver at /usr/lib/warden/driver (lib/, bin/,
# version; images/worker/warden-driver.sh); a container started from there gets the same directory,
# read-only, and its dynamic loader finds the libraries through the container's own cache, rebuilt here
# with that directory added (the container's root file system is the step's own copy: nothing is
# written to the jail or the image). nvidia-smi comes along at /usr/local/bin. Elsewhere (no driver in
# view: a CPU worker, a login node) it does nothing. Which GPUs a step may open is Slurm's business
# (its devices cgroup and CUDA_VISIBLE_DEVICES), inherited by the container.
# enroot runs hooks after it has made the container's namespaces, with ENROOT_ROOTFS (the root file
# system, still writable) set.
set -euo pipefail

driver=/usr/lib/warden/driver
[ -n "$(ls -A "$driver/lib" 2>/dev/null)" ] || exit 0
rootfs="${ENROOT_ROOTFS:?enroot hook: ENROOT_ROOTFS unset}"

# The libraries at the same path inside, and nvidia-smi, mounted now with enroot's own helper (the
# hook runs as the user, with capabilities in the container's user namespace only), so that ldconfig
# below finds them.
mounts="$driver $driver none x-create=dir,rbind,ro,nosuid,nodev"
if [ -x "$driver/bin/nvidia-smi" ]; then
    mounts+=$'\n'"$driver/bin/nvidia-smi /usr/local/bin/nvidia-smi none x-create=file,bind,ro,nosuid,nodev"
fi
enroot-mount --root "$rootfs" - <<<"$mounts"
mkdir -p "$rootfs/etc/ld.so.conf.d"
echo "$driver/lib" >"$rootfs/etc/ld.so.conf.d/000-warden-driver.conf"
ldconfig -r "$rootfs"

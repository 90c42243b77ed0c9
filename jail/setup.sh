#!/bin/bash
# Runs once while building warden/jail: the jail's own configuration.
set -euo pipefail

# Mount points the entrypoints bind into (each pod, in its own mount namespace):
#   /etc/slurm       client configuration (never the key)     /run/slurm   SACK socket
#   /var/spool/slurmd  batch scripts of job steps
#   /usr/lib/warden/driver  a GPU worker's own NVIDIA driver (lib/, bin/, version); empty elsewhere
#   /usr/bin/nvidia-smi     the stub below; a GPU worker binds its node's nvidia-smi over it
install -d -m 0755 /etc/slurm /var/spool/slurmd /home /usr/lib/warden/driver
cat >/usr/bin/nvidia-smi <<'SH'
#!/bin/sh
# Warden jail: no NVIDIA driver here. Job steps on GPU worker nodes see their node's own nvidia-smi
# and driver libraries in place of this file (mounted per node, see /usr/lib/warden/driver).
echo "nvidia-smi: no NVIDIA driver on $(hostname) (only job steps on GPU worker nodes see their node's driver)" >&2
exit 9
SH
chmod 0755 /usr/bin/nvidia-smi
install -d -o slurm -g slurm -m 0755 /run/slurm
# /etc/slurm comes from the pod; drop the package's plugstack.conf so the bind mount shows the
# cluster's (the mount hides whatever is below it anyway)
rm -rf /etc/slurm/plugstack.conf /etc/slurm/plugstack.conf.d

# Users get their uids from a fixed range that no package uses (see warden-useradd).
sed -i -E 's/^#?UID_MIN.*/UID_MIN 10000/; s/^#?UID_MAX.*/UID_MAX 59999/; s/^#?GID_MIN.*/GID_MIN 10000/; s/^#?GID_MAX.*/GID_MAX 59999/' /etc/login.defs
grep -q '^UID_MIN 10000' /etc/login.defs

# The bridge's Slurm user (docs/bridge.md; warden.naming.BRIDGE_UID): its jobs stand for Kubernetes pods and
# launch nothing; named here so that squeue and sacct show who they are. No shell, no home, no login.
groupadd --system --gid 64998 warden-bridge
useradd --system --uid 64998 --gid 64998 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    warden-bridge

# Directory users and groups (spec.identity.ldap) after the jail's own; without a directory the pods bind
# no SSSD sockets here and libnss-sss answers "unavailable" at once. Nothing else asks SSSD.
sed -i -E -e 's/^(passwd|group):.*$/\1:         files sss/' -e 's/^shadow:.*$/shadow:         files/' \
    -e '/^(services|netgroup|automount|sudoers):/ s/ sss//' /etc/nsswitch.conf
grep -q '^passwd: *files sss$' /etc/nsswitch.conf
install -d -m 0755 /var/lib/sss/pipes /var/lib/sss/mc

# Login shells in the jail get a prompt that says where they are.
cat >/etc/profile.d/warden.sh <<'SH'
# Warden jail
if [ -n "${PS1:-}" ] && [ -n "${BASH_VERSION:-}" ]; then
    PS1='\u@\h(jail):\w\$ '
fi
SH

cat >/etc/warden-jail-release <<REL
WARDEN_JAIL_VERSION=${WARDEN_VERSION}
SLURM_VERSION=$(dpkg-query -W -f='${Version}' slurm-client)
DEBIAN_VERSION=$(cat /etc/debian_version)
REL
# The machine's identity comes from each node, not from the shared root.
: >/etc/hostname
: >/etc/machine-id
# pods bind their own over these (files must exist to be mount points)
[ -f /etc/hosts ] || printf '127.0.0.1 localhost\n' >/etc/hosts
: >/etc/resolv.conf

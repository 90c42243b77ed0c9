#!/bin/sh
# Manual end-to-end check of spank_jail in real Slurm (slurmctld + slurmd in one
# trixie container, auth/slurm). Not part of `make test`; the project's dataplane
# tests cover the real images. Run from the repository root:
#
#   docker run --rm --cap-add SYS_ADMIN --security-opt seccomp=unconfined \
#     -v "$PWD/spank:/src" debian:trixie-slim /src/tests/slurm_check.sh
#
# Needs apt to reach Debian's archive (it installs Slurm in the container).
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends gcc make libc6-dev libslurm-dev \
	slurmctld slurmd slurm-client >/dev/null 2>&1
make -s -C /src all install
H=$(hostname)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/slurm /mnt/jail
chown slurm /var/spool/slurmctld
dd if=/dev/urandom of=/etc/slurm/slurm.key bs=1024 count=1 2>/dev/null
chown slurm /etc/slurm/slurm.key
chmod 600 /etc/slurm/slurm.key
cat > /etc/slurm/slurm.conf <<C
ClusterName=t
SlurmctldHost=$H
AuthType=auth/slurm
CredType=cred/slurm
SlurmUser=slurm
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmdLogFile=/var/log/slurmd.log
SlurmctldLogFile=/var/log/slurmctld.log
NodeName=$H CPUs=2 State=UNKNOWN
PartitionName=p Nodes=ALL Default=YES State=UP
C
echo "required /usr/lib/warden/spank_jail.so root=/mnt/jail bind=/var/spool/slurmd bind=/run/slurm" \
	> /etc/slurm/plugstack.conf
# The jail: a copy of this root, a marker only there, alice's home only there.
for d in bin sbin lib lib64 usr etc var; do [ -e /$d ] && cp -a /$d /mnt/jail/; done
mkdir -p /mnt/jail/proc /mnt/jail/dev /mnt/jail/sys /mnt/jail/home/alice
# shellcheck disable=SC2174 # /mnt/jail exists: tmp is the one directory made, and gets the mode
mkdir -m 1777 -p /mnt/jail/tmp
echo inside > /mnt/jail/JAIL_MARKER
useradd -M -d /home/alice alice
cp /etc/passwd /etc/group /mnt/jail/etc/
chown alice /mnt/jail/home/alice
slurmctld
slurmd
for _ in $(seq 40); do sinfo -h -o %T | grep -q idle && break; sleep 0.5; done

fails=0
expect() { # expect NAME WANT GOT
	if [ "$2" = "$3" ]; then echo "ok - $1"; else
		echo "NOT OK - $1: wanted [$2] got [$3]"; fails=$((fails + 1)); fi
}
cd /tmp
expect "srun as root runs in the jail" inside "$(srun -N1 cat /JAIL_MARKER 2>/dev/null)"
expect "srun as alice runs in the jail, in a cwd only the jail has" "inside /home/alice alice denied" \
	"$(su alice -s /bin/sh -c 'srun --chdir=/home/alice sh -c "cat /JAIL_MARKER; pwd; id -un;
	   ls /proc/1/root/ >/dev/null 2>&1 && echo escaped || echo denied"' 2>/dev/null | tr '\n' ' ' | sed 's/ $//')"
# slurmstepd opens -o files outside the jail (in the node's own root): /tmp here.
su alice -s /bin/sh -c 'sbatch -Q --chdir=/home/alice -o /tmp/batch.out \
	--wrap "cat /JAIL_MARKER; pwd; srun cat /JAIL_MARKER"'
for _ in $(seq 40); do [ -z "$(squeue -h)" ] && break; sleep 0.5; done
expect "sbatch script and nested srun run in the jail" "inside /home/alice inside" \
	"$(grep -v error /tmp/batch.out | tr '\n' ' ' | sed 's/ $//')"
echo "required /usr/lib/warden/spank_jail.so root=/mnt/jail bogus=1" > /etc/slurm/plugstack.conf
sleep 1
srun -N1 true >/dev/null 2>&1 && expect "bad argument fails the step" failed launched || \
	expect "bad argument fails the step" failed failed
expect "bad argument is logged" 1 \
	"$(grep -c "spank_jail: unknown argument 'bogus=1'" /var/log/slurmd.log)"
[ "$fails" = 0 ] && echo PASS || { echo "FAIL: $fails"; tail -20 /var/log/slurmd.log; exit 1; }

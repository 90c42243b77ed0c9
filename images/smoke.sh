#!/usr/bin/env bash
# Quick smoke test of the images in plain Docker (no Kubernetes): populate a jail volume, start
# slurmctld, one dynamic slurmd and the login node, then: srun lands in the jail, a jail user made
# with warden-useradd logs in over SSH (chrooted) and runs sbatch/srun through sackd.
# Leaves nothing behind (WARDEN_SMOKE_KEEP=1 keeps the containers for poking at).
#
#   images/smoke.sh            (needs `make images`)
set -euo pipefail
V="${WARDEN_VERSION:-$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$(dirname "$0")/../pyproject.toml" | head -n 1)}"
P=warden-smoke
NET=$P-net
VOL=$P-jail
tmp=""
start=$SECONDS
say() { printf '[smoke %3ss] %s\n' "$((SECONDS - start))" "$*" >&2; }
cleanup() {
    if [ "${WARDEN_SMOKE_KEEP:-0}" != 1 ]; then
        docker rm -f $P-ctl $P-w1 $P-login >/dev/null 2>&1 || true
        docker volume rm $VOL >/dev/null 2>&1 || true
        docker network rm $NET >/dev/null 2>&1 || true
    fi
    [ -z "$tmp" ] || rm -rf "$tmp"
}
trap cleanup EXIT
cleanup
tmp="$(mktemp -d)"

mkdir -p "$tmp/slurm" "$tmp/auth" "$tmp/ssh"
cat >"$tmp/slurm/slurm.conf" <<EOF
ClusterName=smoke
SlurmctldHost=$P-ctl
AuthType=auth/slurm
CredType=cred/slurm
SlurmUser=slurm
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
MaxNodeCount=16
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
Nodeset=group-a Feature=warden-group-a
PartitionName=main Nodes=group-a Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$tmp/slurm/plugstack.conf" <<EOF
required /usr/lib/warden/spank_jail.so root=/mnt/jail bind=/run/slurm
EOF
head -c 64 /dev/urandom >"$tmp/auth/slurm.key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id" -C smoke
cp "$tmp/id.pub" "$tmp/ssh/authorized_keys"
mkdir "$tmp/hostkeys"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/hostkeys/ssh_host_ed25519_key"
chmod -R a+rX "$tmp"
# the client key stays private (ssh refuses a readable one)
mkdir -m 0700 "$tmp/client" && mv "$tmp/id" "$tmp/id.pub" "$tmp/client/" && chmod 0600 "$tmp/client/id"

docker network create $NET >/dev/null
docker volume create $VOL >/dev/null

say "populate-jail (first run)"
docker run --rm -v $VOL:/mnt/jail warden/populate-jail:$V
say "populate-jail (second run must return at once)"
out="$(docker run --rm -v $VOL:/mnt/jail warden/populate-jail:$V 2>&1)"
grep -q 'already populated' <<<"$out" || { echo "$out"; say "FAIL: second populate did work"; exit 1; }

cfg=(-v "$tmp/slurm:/etc/warden/slurm:ro" -v "$tmp/auth:/etc/warden/auth:ro")
say "controller"
docker run -d --name $P-ctl --hostname $P-ctl --network $NET "${cfg[@]}" -v $VOL:/mnt/jail:ro warden/controller:$V >/dev/null
say "worker (dynamic node)"
docker run -d --name $P-w1 --hostname $P-w1 --network $NET "${cfg[@]}" -v $VOL:/mnt/jail \
    --cap-add SYS_ADMIN --cap-add SYS_NICE --security-opt seccomp="$(cd "$(dirname "$0")" && pwd)/worker/seccomp.json" \
    -e WARDEN_SLURMD_CONF="CPUs=2 RealMemory=1000 Feature=warden-group-a" warden/worker:$V >/dev/null
say "login"
docker run -d --name $P-login --hostname $P-login --network $NET "${cfg[@]}" -v $VOL:/mnt/jail \
    -v "$tmp/ssh:/etc/warden/ssh:ro" -v "$tmp/hostkeys:/etc/warden/ssh-host-keys:ro" \
    --cap-add SYS_ADMIN warden/login:$V >/dev/null

for _ in $(seq 1 60); do
    docker exec $P-ctl sinfo -h -N -o '%N %T' 2>/dev/null | grep -q "^$P-w1 idle" && break
    sleep 0.5
done
docker exec $P-ctl sinfo -N -o '%N %T %f' || true
docker exec $P-ctl sinfo -h -N -o '%N %T' | grep -q "^$P-w1 idle" || {
    docker logs $P-ctl 2>&1 | tail -20
    docker logs $P-w1 2>&1 | tail -20
    say "FAIL: worker never became idle"
    exit 1
}
say "node idle"

say "root srun runs inside the jail"
docker exec $P-ctl srun -N1 cat /etc/warden-jail-release | grep -q WARDEN_JAIL_VERSION ||
    { docker logs $P-w1 2>&1 | tail -20; say "FAIL: srun did not run in the jail"; exit 1; }

say "create a jail user with warden-useradd (from the login pod, as root)"
docker exec $P-login chroot /mnt/jail warden-useradd --key "$(cat "$tmp/client/id.pub")" alice
ip="$(docker inspect -f "{{(index .NetworkSettings.Networks \"$NET\").IPAddress}}" $P-login)"
sshx() {
    ssh -q -i "$tmp/client/id" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes \
        -o ConnectTimeout=5 "$@"
}
say "ssh alice@login: chrooted into the jail"
sshx "alice@$ip" 'cat /etc/warden-jail-release; id' | tee "$tmp/ssh.out" >&2
grep -q WARDEN_JAIL_VERSION "$tmp/ssh.out" || { docker logs $P-login 2>&1 | tail; say "FAIL: not in the jail"; exit 1; }
say "alice: srun and sbatch from the login node (auth/slurm through sackd)"
sshx "alice@$ip" 'srun -N1 sh -c "id -un; cat /etc/warden-jail-release | head -1"' | tee "$tmp/srun.out" >&2
grep -q '^alice$' "$tmp/srun.out" || { docker logs $P-w1 2>&1 | tail; say "FAIL: srun as alice"; exit 1; }
sshx "alice@$ip" 'cd ~ && sbatch -W -o out.txt --wrap "hostname; id -un; test -f /etc/warden-jail-release && echo in-jail" >/dev/null && cat out.txt' |
    tee "$tmp/sbatch.out" >&2
grep -q in-jail "$tmp/sbatch.out" || { docker logs $P-w1 2>&1 | tail -20; say "FAIL: sbatch as alice"; exit 1; }
say "PASS"

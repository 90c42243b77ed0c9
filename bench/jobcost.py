"""What the jail costs a job (issue 58): launch latency and throughput under Warden's plugstack against
plain Slurm's, side by side in one run, on the same Slurm and the same nodes.

One cluster from the operator's renderers (dev/warden_dev/dockercluster.py): a login node, two workers
of one group with containers on, and the test registry on its network (tests/support/registry.py). Every
figure is timed as an ordinary user of the jail on the login node (inside the SSH session, so no SSH or
docker exec in it), in rounds: each round switches both workers' plugstack.conf to each variant in turn
(bench/jobcost_figures.py: Warden's as rendered, plain Slurm with pyxis listed but unused, plain Slurm),
each round starting one variant further along, so drift hits all alike. slurmstepd reads plugstack.conf
at every step's start, so a switch needs no restart; each variant is checked once (a step in the jail or
not). What is measured:

- `srun -N1 true` and `srun -N2 true`: one job allocation and one step each, sequential (median, p99);
- in one allocation (`salloc -N1 -n4`): `srun -n1 true` steps in a loop, `srun -n4 --multi-prog` steps
  and four concurrent `srun -n1 --exact true` steps at a time (steps per second);
- `sbatch` of N one-second jobs, one after another, and a job array of N `true`: from the first
  submission until none is left in the queue (jobs per second); every job must end COMPLETED;
- a container step (`srun -c1 --container-image=...`, the image in the node's store) against what enroot
  alone does for it on that node as the user (`enroot create` of the same image file and `enroot start`,
  on one CPU as the step has): pyxis without the jail plugin cannot start a container on this worker
  (the jail gives enroot its configuration, home and store), so there is no plain-Slurm container step.

Never asserted: figures for the record. Usage (from the repository root): python -m bench.jobcost [--help]
"""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections.abc import Callable

from bench.jobcost_figures import PLAIN, PYXIS, VARIANTS, WARDEN, Row, plugstacks, rounds, table, timings

from tests.support.jailuser import JailUser
from tests.support.registry import Registry
from warden_dev.dockercluster import DockerCluster, sweep_stale

GROUP = "cpu"
SPEC = {
    "login": {"replicas": 1},
    # 8 CPUs a node as Slurm sees them (the machine may have fewer): 16 one-second jobs at once, so the
    # batch rows measure how fast jobs are started, not how many fit
    "workerGroups": [{"name": GROUP, "replicas": 2, "resources": {"limits": {"cpu": "8", "memory": "8Gi"}}}],
    "partitions": [{"name": GROUP, "workerGroups": [GROUP], "default": True}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": False}},
    "containers": {"enabled": True, "allowHttpRegistries": True},
}
ETC = "/etc/slurm"
QUEUED = "queued and waiting for resources"
MULTIPROG = "~/.bench-multiprog"  # srun --multi-prog's file: every task runs true


def timed_loop(command: str, count: int) -> str:
    """Shell: `count` sequential runs of `command`, each printed as `t <microseconds>`."""
    return (
        f"for i in $(seq {count}); do s=$(date +%s%N); {command} >/dev/null; "
        'e=$(date +%s%N); echo "t $(( (e - s) / 1000 ))"; done'
    )


def rate(tag: str, count: int, body: str) -> str:
    """Shell: `body` (which does `count` things) timed, printed as `<tag> <count per second * 1000>`."""
    return f's=$(date +%s%N); {body}; e=$(date +%s%N); echo "{tag} $(( {count} * 1000000000000 / (e - s) ))"'


def steps_script(steps: int) -> str:
    """What runs in one allocation of 4 tasks on one node (salloc's command, on the login node)."""
    rounds_ = max(steps // 4, 1)
    return "\n".join(
        [
            "set -e",
            "srun -n1 true",  # the allocation's first step, untimed
            rate("loop", steps, f"for i in $(seq {steps}); do srun -n1 true; done"),
            rate("multiprog", rounds_, f"for i in $(seq {rounds_}); do srun -n4 --multi-prog {MULTIPROG} true; done"),
            rate("parallel", rounds_ * 4,
                 f"for i in $(seq {rounds_}); do for j in 1 2 3 4; do srun -n1 --exact true & done; wait; done"),
        ]
    )  # fmt: skip


def batch_script(kind: str, count: int) -> str:
    """Shell: `count` one-second jobs (`sbatch` each) or an array of `count` `true`, timed from the first
    submission until none is in the queue; then how each of them ended."""
    if kind == "sbatch":
        submit = f"for i in $(seq {count}); do sbatch --parsable -o /dev/null --wrap 'sleep 1'; done"
    else:
        submit = f"sbatch --parsable -o /dev/null --array=0-{count - 1} --wrap true"
    return "\n".join(
        [
            "set -e; cd",
            "s=$(date +%s%N)",
            f"ids=$({submit})",
            'first=$(echo "$ids" | head -1 | cut -d_ -f1)',
            'while [ -n "$(squeue -h -u "$USER" -t PD,R,CG,CF,S -o %i | head -1)" ]; do sleep 0.25; done',
            "e=$(date +%s%N)",
            f'echo "rate $(( {count} * 1000000000000 / (e - s) ))"',
            # how they ended: slurmctld keeps ended jobs for MinJobAge (300 s), so this run's are still there
            'squeue -h -u "$USER" -t all -r -o \'%i %T\' | awk -v f="$first" \'{split($1, a, "_")} '
            'a[1] + 0 >= f + 0 {print "state", $2}\' | sort | uniq -c',
        ]
    )


def enroot_alone(user: str, uid: str) -> Callable[[int], str]:
    """Shell for the worker, as the user: what pyxis has enroot do for a container step, alone and timed
    (`enroot create` of the image file the step's import left in the node's store, `enroot start`), on
    one CPU as the step has; the container is removed after the figure, as pyxis removes it after the job."""
    image = f"$(ls /var/lib/warden/containers/{uid}/images/*.sqsh | head -1)"
    create = f'taskset -c 0 enroot create -n bench-alone "{image}" >/dev/null 2>&1'
    start = "taskset -c 0 enroot start bench-alone true"
    remove = "enroot remove -f bench-alone >/dev/null 2>&1"
    return lambda n: (
        f"export HOME=/home/{user}; " + timed_loop(f"{create} && {start}", n).replace('echo "t', f'{remove}; echo "t')
    )


class Bench:
    def __init__(self, cluster: DockerCluster, user: JailUser, image: str) -> None:
        self.cluster = cluster
        self.user = user
        self.image = image
        self.workers = cluster.worker_pods(GROUP)
        self.queued: dict[str, int] = {}
        self.failed: dict[str, str] = {}

    def prepare(self) -> None:
        """Each variant's plugstack file beside the one the worker installed; checks each once."""
        rendered = self.cluster.exec(self.workers[0], f"cat {ETC}/plugstack.conf").out
        for pod in self.workers:
            for variant, text in plugstacks(rendered).items():
                self.cluster.exec(pod, f"cat > {ETC}/plugstack.{variant}.conf <<'EOF'\n{text}EOF")
        self.user.ssh(f"printf '0-3 true\\n' > {MULTIPROG}")
        probe = "srun -N2 sh -c 'test -f /etc/warden-jail-release && echo in-jail || echo in-worker'"
        for variant in VARIANTS:
            self.use(variant)
            where = sorted(set(self.user.ssh(probe).split()))
            want = ["in-jail"] if variant == WARDEN else ["in-worker"]
            print(f"variant {variant}: steps run {', '.join(where)}")
            if where != want:
                raise SystemExit(f"variant {variant}: steps ran {where}, expected {want}")

    def use(self, variant: str) -> None:
        """Both workers' plugstack.conf becomes the variant's (a rename: no step reads half a file)."""
        for pod in self.workers:
            self.cluster.exec(pod, f"cp {ETC}/plugstack.{variant}.conf {ETC}/.plugstack.new && "
                                   f"mv {ETC}/.plugstack.new {ETC}/plugstack.conf")  # fmt: skip

    def run(self, variant: str, script: str, timeout: float = 1800) -> str:
        self.use(variant)
        r = self.cluster.ssh(self.user.name, script, check=False, timeout=timeout, identity=self.user.identity)
        self.queued[variant] = self.queued.get(variant, 0) + r.err.count(QUEUED)
        if not r.ok:
            self.failed.setdefault(variant, f"exit {r.rc}: {r.err.strip()[-300:]}")
        return r.out

    def latency(self, median: Row, p99: Row, nodes: int, count: int, blocks: int) -> None:
        per_block = max(count // blocks, 1)
        self.run(WARDEN, f"srun -N{nodes} true")  # warm-up
        for order in rounds(VARIANTS, blocks):
            for v in order:
                t = timings(self.run(v, timed_loop(f"srun -N{nodes} true", per_block)))
                median.add(v, t)
                p99.add(v, t)

    def steps(self, rows: dict[str, Row], count: int, rounds_: int) -> None:
        self.user.ssh("cat > ~/.bench-steps", input=steps_script(count))
        for order in rounds(VARIANTS, rounds_):
            for v in order:
                out = self.run(v, "salloc -Q -N1 -n4 bash ~/.bench-steps")
                for tag, row in rows.items():
                    row.add(v, timings(out, tag))

    def batch(self, row: Row, kind: str, count: int, rounds_: int) -> None:
        for order in rounds(VARIANTS, rounds_):
            for v in order:
                out = self.run(v, batch_script(kind, count))
                row.add(v, timings(out, "rate"))
                states = {s: int(n) for n, s in re.findall(r"^\s*(\d+) state (\S+)$", out, re.M)}
                if states != {"COMPLETED": count}:
                    self.failed.setdefault(v, f"{row.label}: {states}")

    def container(self, row: Row, count: int, blocks: int) -> None:
        """Warden's container step against enroot alone, both on the first worker, block by block."""
        node = self.workers[0]
        uid = self.user.ssh("id -u").strip()
        step = f"srun -N1 -c1 -w {node} --container-image={shlex.quote(self.image)} true"
        self.run(WARDEN, step)  # the image into the node's store (the first pull is bench/containers.py's)
        alone = enroot_alone(self.user.name, uid)
        per_block = max(count // blocks, 1)
        for order in rounds([WARDEN, "enroot"], blocks):
            for v in order:
                if v == WARDEN:
                    row.add(v, timings(self.run(WARDEN, timed_loop(step, per_block))))
                else:
                    out = self.cluster.exec(node, alone(per_block), user=f"{uid}:{uid}", timeout=600).out
                    row.add(v, timings(out))


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.jobcost", description=__doc__.split("\n\n")[0])
    p.add_argument("--sruns", type=int, default=300, help="srun -N1 true per variant (default 300)")
    p.add_argument("--two-node", type=int, default=100, help="srun -N2 true per variant (default 100)")
    p.add_argument("--blocks", type=int, default=6, help="rounds the latency rows are split into (default 6)")
    p.add_argument("--steps", type=int, default=100, help="steps a throughput round times (default 100)")
    p.add_argument("--step-rounds", type=int, default=3, help="allocations per variant (default 3)")
    p.add_argument("--jobs", type=int, default=1000, help="one-second jobs by sbatch per round (default 1000)")
    p.add_argument("--array", type=int, default=1000, help="array tasks per round (default 1000)")
    p.add_argument("--batch-rounds", type=int, default=1, help="rounds of the two batch rows (default 1)")
    p.add_argument("--container", type=int, default=10, help="container steps, and enroot runs (default 10)")
    p.add_argument("--quick", action="store_true", help="a few minutes: 60 sruns, 20 two-node, 200 jobs ...")
    a = p.parse_args()
    if a.quick:
        a.sruns, a.two_node, a.blocks, a.steps, a.step_rounds = 60, 20, 2, 40, 2
        a.jobs, a.array, a.container = 200, 200, 4
    return a


def main() -> None:
    a = arguments()
    sweep_stale()
    cluster = DockerCluster(SPEC, name="jobcost")
    registry = Registry(cluster)
    t0 = time.monotonic()
    try:
        cluster.start(timeout=300)
        registry.start()
        user = JailUser.added_by_root(cluster, "bench")
        bench = Bench(cluster, user, registry.reference())
        print(f"cluster up in {cluster.startup_seconds:.1f}s; workers {', '.join(bench.workers)}")
        bench.prepare()
        rows = {
            "n1": Row("srun -N1 true, median", "ms"),
            "n1p99": Row("srun -N1 true, p99", "ms", stat="p99"),
            "loop": Row("steps in one allocation, loop", "steps/s", higher_is_better=True),
            "multiprog": Row("steps in one allocation, --multi-prog -n4", "steps/s", higher_is_better=True),
            "parallel": Row("steps in one allocation, 4 at once", "steps/s", higher_is_better=True),
            "sbatch": Row(f"sbatch {a.jobs} one-second jobs", "jobs/s", higher_is_better=True),
            "array": Row(f"job array of {a.array} true", "jobs/s", higher_is_better=True),
            "n2": Row("srun -N2 true, median", "ms"),
            "n2p99": Row("srun -N2 true, p99", "ms", stat="p99"),
        }
        bench.latency(rows["n1"], rows["n1p99"], 1, a.sruns, a.blocks)
        bench.latency(rows["n2"], rows["n2p99"], 2, a.two_node, a.blocks)
        bench.steps({k: rows[k] for k in ("loop", "multiprog", "parallel")}, a.steps, a.step_rounds)
        if a.jobs:
            bench.batch(rows["sbatch"], "sbatch", a.jobs, a.batch_rounds)
        if a.array:
            bench.batch(rows["array"], "array", a.array, a.batch_rounds)
        ctr = Row("srun -c1 --container-image=... true", "ms")
        if a.container:
            bench.container(ctr, a.container, min(a.blocks, a.container))
        notes = {f"steps queued behind a completing job ({v})": str(n) for v, n in bench.queued.items() if n}
        notes.update({f"FAILED ({v})": why for v, why in bench.failed.items()})
        print(f"\nWarden's plugstack ({WARDEN}) against plain Slurm with pyxis listed but unused ({PYXIS}) and")
        print(f"without any SPANK plugin ({PLAIN}); cost x > 1: Warden slower; [min-max] of the rounds' ratios")
        print(table([r for r in rows.values() if r.samples], notes=notes))
        print("\nA container step (image in the node's store) against enroot alone on that node")
        print(table([ctr], variants=(WARDEN, "enroot")))
        print(f"\n({time.monotonic() - t0:.0f} s in all)")
    finally:
        registry.stop()
        cluster.stop()


if __name__ == "__main__":
    main()

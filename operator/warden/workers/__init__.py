"""A WorkerSet's life in one place: what happens to a worker pod next.

``controller`` looks at one WorkerSet at a time, named by the events of the set and its pods, and by
each round of the Slurm sync (which hands it what slurmctld said), and runs the same ordered steps:

1. pods: make the missing ones, clear those that ended (``podset``); with no Slurm read at all, the
   highest ordinals above the size go at once;
2. scale-in: pick the pods that leave, drain them, delete each once its node is idle (``scalein``);
3. rollout: move pods to the set's current template, a drained idle node at a time (``rollout``);
4. registration: make afresh the pods whose slurmd never registered (``registration``);
5. status: the set's replicas, ready and updated pods (``podset.status``).

Steps 2 to 4 need Slurm's word: they run once per round of the Slurm sync, never on an older one.
Each look reads the set's pods once, as ``pod.SetPod`` (phase, template, scale-in pick, slurmd's start),
and hands that one view to every step. The planners are pure; the controller alone reads and writes.
The Slurm sync (``warden.slurmsync``) keeps what is not one set's: pod conditions, cordons, ghost node
records, the cluster's status.
"""

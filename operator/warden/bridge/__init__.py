"""The bridge: Slurm schedules Kubernetes pods on the nodes it shares with Slurm jobs (docs/bridge.md).

A pod whose ``spec.schedulerName`` is the bridge's (``warden-slurm``), in a namespace a cluster admin
opted in (label ``slurm.warden.dev/bridge: <cluster-namespace>.<cluster>``), is scheduled by Slurm:

1. ``workloads``: pods are grouped into workloads, the pods that must start together: one pod, or the
   ``parallelism`` pods of a batch Job whose pods all run at once (a gang).
2. ``translate``: a complete workload becomes one Slurm *external job* (a placeholder: an allocation
   that can run nothing) through slurmrestd, as the Slurm user ``warden-bridge``: one task per pod, the
   pod's CPU and memory limits per task, partition and QoS from annotations, the namespace, or
   ``spec.bridge``. A pod without limits is refused: only limits keep it inside its allocation.
3. ``plan``: each round compares the workloads with the bridge's jobs in Slurm and says what to do:
   submit, label pods with their job, show why a job waits (PodScheduled), bind pods whose job runs,
   delete pods whose job was preempted or cancelled, cancel jobs whose pods are done or gone.
4. ``placement``: a running job's allocation (Slurm nodes and CPUs) gives each pod its Kubernetes node:
   a shared worker group's Slurm node is the worker pod, whose Kubernetes node the pods join.
5. ``controller``: the I/O: the pods' watch, slurmrestd, bindings, conditions, Events. State lives in
   the objects (the pod label ``slurm.warden.dev/slurm-job``, the job's comment naming its workload), so
   a restarted bridge adopts what it finds and never submits a workload twice.
"""

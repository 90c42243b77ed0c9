"""Leader election: of the operator's replicas, only the one holding a Kubernetes Lease acts.

kopf's peering is no lease (a peer that stops answering is still "alive" until its stale record is seen),
so the operator elects its leader itself, the way client-go's leaderelection does:

- ``decide`` (pure): what one candidate does with the Lease it read: make it, take it (free, or its
  holder's renewals stopped for ``leaseDurationSeconds`` by the candidate's own clock), renew it, wait;
- ``lease``: the Lease's reads and writes, each write guarded by the ``resourceVersion`` read (two
  candidates writing at once: one gets 409 Conflict and waits);
- ``elector``: the loop, a thread: a standby looks every ``retry`` seconds, the leader renews every
  ``renew`` seconds and gives up at ``renew_deadline`` (shorter than the lease) without a renewal;
- ``fence``: whether this process may still write (Kubernetes API, slurmrestd). Every write asks
  first; a process that finds its lease run out (frozen by SIGSTOP, cut off from the API server) exits
  before writing anything, and a container restart makes it a standby.

``warden.main`` runs kopf (its handlers, the Slurm sync, the directory sync, the watch caches) only
once ``Elector.wait_leading`` returned, and hands the Lease back on a clean stop, so a standby takes
over at its next look instead of after a lease duration.
"""

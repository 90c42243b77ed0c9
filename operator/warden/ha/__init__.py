"""Backup controllers (``spec.controller.replicas`` 2-3): Slurm's own HA, closed where Kubernetes meets it.

In the controller pod (standard library only): ``beat``, the one decider of which slurmctld is in charge
(the writer of Slurm's heartbeat file while its beat is fresh), and the fence, the handover and a primary
standing by built on it; ``ctld``, the program that runs them beside slurmctld and serves the verdict
(``GET /in-charge``), called by images/controller/warden-ctld-ha.sh.

In the operator: ``verdict``, asking the pods; ``incharge``, relaying their verdict (pure: verdict and
slurmrestd's pings → the controller pods' conditions, ``status.slurmctldInCharge``, a
``ControllerTakeover`` Event); ``sync``, both asked and the plan carried out in each round of the Slurm
sync (``warden.slurmsync``). The SlurmctldHost list and the shared state claim are rendered by
``warden.render.slurmctld``.
"""

"""Backup controllers (``spec.controller.replicas`` 2-3): Slurm's own HA, closed where Kubernetes meets it.

``incharge``: which slurmctld is in charge, as the controller pods decide it from Slurm's heartbeat and
the operator relays it (pure: their verdict and slurmrestd's pings → the controller pods' conditions,
``status.slurmctldInCharge``, a ``ControllerTakeover`` Event); ``verdict``: the operator asking the pods
(``GET /in-charge``); ``sync``: both asked and the plan carried out in each round of the Slurm sync
(``warden.slurmsync``). The
SlurmctldHost list and the shared state claim are rendered by ``warden.render.slurmctld``; handover,
fencing and a returning primary standing by are images/controller/warden-ctld-ha.sh's.
"""

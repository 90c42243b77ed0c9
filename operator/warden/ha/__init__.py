"""Backup controllers (``spec.controller.replicas`` 2-3): Slurm's own HA, closed where Kubernetes meets it.

``incharge``: which slurmctld is in charge (pure: slurmrestd's pings → the controller pods' conditions,
``status.slurmctldInCharge``, a ``ControllerTakeover`` Event); ``sync``: asked and carried out in each
round of the Slurm sync (``warden.slurmsync``). The
SlurmctldHost list and the shared state claim are rendered by ``warden.render.slurmctld``; handover,
fencing and a returning primary standing by are images/controller/warden-ctld-ha.sh's.
"""

"""Slurm checks a configuration change before any daemon sees it.

Slurm's daemons follow their mounted files in place (``scontrol reconfigure``): a value Slurm refuses
would stop slurmctld, every client and every slurmd at once. So once a cluster runs (its slurm-config
ConfigMap exists), a generation whose Slurm files differ from the live ones is applied only after a
short-lived Job has started slurmctld itself, of the series the controller runs, on those files
(``images/controller/warden-config-check``) and it ran. Until then nothing of the generation is applied;
when Slurm refuses, nothing ever is, the cluster keeps its last good configuration, and status
(condition ``SlurmConfigAccepted``) and a Warning Event give Slurm's own words.

- ``warden.configcheck.render``: the check's ConfigMap and Job, and the fold of the Job into a verdict (pure).
- ``warden.configcheck.gate``: the one place the reconcile asks whether it may apply (reads, creates
  the check, cleans up old ones).
"""

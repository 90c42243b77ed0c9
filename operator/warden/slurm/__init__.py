"""Everything Warden knows of Slurm, in one package:

- ``model``: what Slurm says, as values (nodes, jobs, hostlists, scheduler statistics) and the errors;
- ``rest``: the client of slurmrestd, the operator's and the exporter's only way to Slurm;
- ``cli``: the ``scontrol``/``srun`` client of the health checks, which run beside Slurm;
- ``reasons``: the drain reasons Warden's parts give Slurm, and who each one is.
"""

"""The Slurm metrics exporter (``warden-slurm-exporter``, one Deployment per SlurmCluster): ``main`` reads
Slurm through slurmrestd at each scrape and serves ``metrics.families``, the metric families (pure: nodes,
jobs, sdiag → families). Its Deployment and Service are rendered by ``warden.render.exporter``."""

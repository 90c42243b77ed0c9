"""Slurm version upgrades (``spec.slurmVersion``) in Slurm's own order.

``planner`` (pure): from the series status settled, the spec's series and the series every Slurm pod
runs, which parts get the new series' images, one step at a time, and what status and Events say. The
reconcile observes the pods and holds the images (``warden.reconcile.plan_upgrade``); the status folds
the series (``warden.status``).
"""

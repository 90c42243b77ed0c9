"""Where each worker sits in the network (``spec.topology``) and what its Kubernetes node says of it
(``spec.nodeLabelFeatures``), told to Slurm.

``planner`` (pure): worker pods, their nodes' labels and the spec in; each Slurm node's place and
features, the blocks topology.conf names and the status out (also what status recorded of them:
``given_topology``, ``observed_blocks``). ``sync``: the Slurm sync's step (``warden.slurmsync``) that
reads the nodes' labels and the live topology.conf, places the nodes through slurmrestd and tells of it.
topology.conf is rendered by ``warden.render.config``.
"""

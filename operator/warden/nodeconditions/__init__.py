"""Kubernetes node conditions drain Slurm nodes (``spec.nodeConditionDrains``).

A condition set on a Kubernetes node by Node Problem Detector, NVIDIA's GPU health tooling or a person
(``GpuXidError=True``) drains the Slurm nodes of the worker pods on that node, with the condition's type,
reason and message in ``sinfo -R``; once it clears, the drain is lifted. Only drains of this kind
(``warden.slurm.reasons.NODE_CONDITION``) are ever lifted here.

- ``plan``: the pure planner (conditions and Slurm node states in, drains and resumes out);
- ``watch``: the nodes' conditions, kept by a watch started when a cluster first names a condition;
- ``sync``: the Slurm sync's step (``warden.slurmsync``): read, plan, act, each action an Event.
"""

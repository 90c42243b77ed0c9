"""The Slurm files of every Slurm pod and the worker node's life in Slurm (``warden-node``). In every
Slurm image, images/slurm-base/warden-lib.sh runs ``warden-node config`` (``--jwt-key``), ``key`` and
``client-config`` for its entrypoint and ``python -m warden.node.dirhash`` in its follow loop; in the
worker image it is also PID 1 of the worker container (images/worker/entrypoint.sh prepares mounts and
devices, then ``exec``s ``warden-node run``):

- ``lifecycle``: settings from the environment and pure decisions (slurmd's command line, gres,
  drain reasons from ``warden.slurm.reasons``, the config hash);
- ``files``: the Slurm files installed from the mounted ConfigMap and Secrets, at start and on every
  reload (``SlurmFiles`` for every pod, ``NodeFiles`` the worker's);
- ``supervisor``: slurmd as a child, leaving Slurm on SIGTERM, registering again with the gres,
  draining a GPU node without its driver, following the config;
- ``main``: the command line.
"""

"""The worker node's life in Slurm, run inside the worker image (``warden-node``, as PID 1 of the
worker container; images/worker/entrypoint.sh prepares mounts and devices, then ``exec``s it):

- ``lifecycle``: settings from the environment and pure decisions (slurmd's command line, gres,
  drain reasons from ``warden.slurm.reasons``, the config hash);
- ``files``: the Slurm files installed from the mounted ConfigMap, at start and on every reload;
- ``supervisor``: slurmd as a child, leaving Slurm on SIGTERM, registering again with the gres,
  draining a GPU node without its driver, following the config;
- ``main``: the command line.
"""

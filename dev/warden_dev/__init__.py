"""Warden's development clusters, a tool of the repository (never part of the product images).

- ``python -m warden_dev up|down|env|...``: a real single-node Kubernetes on this machine with the
  charts and a SlurmCluster (``make up``/``make down``; docs/local-cluster.md), ``localcluster``;
- ``python -m warden_dev controlplane up|down|env``: a throwaway control plane with kwok nodes,
  ``controlplane`` (also the integration tier's);
- ``dockercluster``: a SlurmCluster's rendered pods as plain Docker containers (the dataplane and
  conformance tiers, ``make bench``), translated by ``podargs``;
- ``hostcheck`` and ``hostrecord``: the refusal to start where another cluster owns the host, and the
  record of every host change ``up`` makes, which ``down`` undoes and nothing else.
"""

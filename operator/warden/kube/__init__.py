"""The operator's one way to the Kubernetes API, in parts:

- ``kinds``: every kind the operator touches (paths, verbs, pruning, watches; the chart's RBAC follows it);
- ``client``: reads and writes of objects (``Kube``);
- ``apply``: server-side apply of rendered objects with the immutable-field rules, pruning (``Applier``);
- ``events``: the operator's Events (``EventRecorder``);
- ``retention``: the jail's claim and volume, kept or given back.
"""

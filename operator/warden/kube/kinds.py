"""Every kind of Kubernetes object the operator touches, once: where the API serves it, what the operator
does with it, whether it is pruned and how it is watched.

From this one list come the REST paths of ``warden.kube.client`` (a fixed table: no discovery round
trips), what ``warden.kube.apply`` prunes, which children the generic heal handler of
``warden.handlers`` watches, and the RBAC rules the operator needs (``rbac_rules``), which a unit test
holds the chart's Role and ClusterRole to (charts/slurm-operator/templates). A second list, ``BRIDGE_KINDS``,
says the same of the bridge (``BRIDGE_RULES``, the chart's bridge ClusterRole).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from warden.model import API_GROUP, API_VERSION, CRD_NAMES, PLURAL, WORKER_SET_KIND, WORKER_SET_PLURAL

#: who watches it, once: ``heal``: kopf, for the generic handler that puts the object back when someone else
#: deletes or edits it; ``own``: kopf, for a handler of its own in ``warden.handlers``; ``cache``: its watch
#: cache (``warden.kube.cache``), whose informer tells ``warden.handlers`` each change (drift, readiness,
#: status, pods to make); ``kopf``: kopf watches it to find its resources; ``""``: read or written, never watched
Watch = Literal["heal", "own", "cache", "kopf", ""]


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    #: what the operator does with it: the RBAC verbs it needs
    verbs: tuple[str, ...]
    namespaced: bool = True
    #: deleted when a reconcile no longer renders it (never Secrets or claims: they hold data)
    pruned: bool = False
    watch: Watch = ""
    #: subresources the operator writes, with their verbs
    subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: served only where a CRD is installed (asked by API discovery before use)
    optional: bool = False
    #: kept in memory (``warden.kube.cache``): reads of it never reach the API server. Its informer's watch
    #: keeps it, or kopf's (``watch="own"``: listed once, then kopf's events)
    cached: bool = False
    #: the only objects its subresources may be written for (RBAC resourceNames); none: any
    subresource_names: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def prefix(self) -> str:
        """The URL of its API group version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"


_READ = ("get", "list", "watch")
_OWN = (*_READ, "create", "patch", "delete")
_CLUSTER = f"{API_GROUP}/{API_VERSION}"

REGISTRY: tuple[Kind, ...] = (
    # kopf lists and watches SlurmClusters and patches its annotations; status is written on its own;
    # "update": written again unchanged when the CRD's storage version changed (warden.kube.storedversions)
    Kind(_CLUSTER, "SlurmCluster", PLURAL, ("get", "list", "watch", "patch", "update"), watch="own", cached=True,
         subresources=(("status", ("patch",)), ("finalizers", ("update",)))),
    Kind(_CLUSTER, WORKER_SET_KIND, WORKER_SET_PLURAL, (*_OWN, "update"), pruned=True, watch="cache", cached=True,
         subresources=(("status", ("patch",)), ("finalizers", ("update",)))),
    # "update": the operator makes a Role granting it on the health report, and RBAC lets nobody grant
    # what they do not hold
    Kind("v1", "ConfigMap", "configmaps", (*_OWN[:5], "update", "delete"), pruned=True, watch="cache", cached=True),
    # generated once when absent, never changed or deleted; put back (made afresh) when deleted
    # patch, delete: the per-purpose token Secrets (``warden.tokens``); the others are made once
    # get: also granted, on the bridge's token alone, by the Role the operator makes for the bridge
    Kind("v1", "Secret", "secrets", (*_READ, "create", "patch", "delete"), watch="heal"),
    Kind("v1", "Service", "services", _OWN, pruned=True, watch="heal"),
    Kind("v1", "ServiceAccount", "serviceaccounts", _OWN, pruned=True, watch="heal"),
    # the jail's claim: created once, its owner reference follows retainOnDelete; never deleted (nor the
    # controllers' shared state claim, made once and owned by the cluster)
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", (*_READ, "create", "patch"), watch="own"),
    # worker pods are the operator's to make (WorkerSets), carry their Slurm node state as a condition
    # (watched by the pod cache alone, trimmed to what the operator reads: warden.kube.cache.slim_pod)
    Kind("v1", "Pod", "pods", _OWN, watch="cache", cached=True, subresources=(("status", ("patch",)),)),
    Kind("apps/v1", "StatefulSet", "statefulsets", _OWN, pruned=True, watch="cache", cached=True),
    Kind("apps/v1", "Deployment", "deployments", _OWN, pruned=True, watch="cache", cached=True),
    Kind("batch/v1", "Job", "jobs", _OWN, pruned=True, watch="cache", cached=True),
    Kind("batch/v1", "CronJob", "cronjobs", _OWN, pruned=True, watch="heal"),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", _OWN, pruned=True, watch="heal"),
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", _OWN, pruned=True, watch="heal"),
    # the NCCL check's (its report ConfigMap) and the bridge's (its token Secret: warden.render.bridge)
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", _OWN, pruned=True, watch="heal"),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", _OWN, pruned=True, watch="heal"),
    Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", _OWN, pruned=True, watch="heal",
         optional=True),
    # the operator's Events; a repeat counts up the first one's series; listed once as it starts to lead, so
    # that a repeat of another replica's Event counts up that one's series
    Kind("events.k8s.io/v1", "Event", "events", ("create", "patch", "list")),
    # cluster-scoped: which Kubernetes nodes are cordoned (one list per Slurm sync round, selected by
    # spec.unschedulable server-side), their conditions (watched once a cluster names one:
    # spec.nodeConditionDrains); the jail's volume kept (Retain)
    Kind("v1", "Node", "nodes", ("list", "watch"), namespaced=False),
    Kind("v1", "PersistentVolume", "persistentvolumes", ("get", "list", "patch"), namespaced=False),
    # backup controllers' shared state volume: does its class give single-node volumes
    Kind("storage.k8s.io/v1", "StorageClass", "storageclasses", ("get", "list"), namespaced=False),
    # kopf's own discovery: the resources served (CRDs), the namespaces it watches when given a list;
    # Warden's own CRDs read, and their status.storedVersions set once every object is stored in the
    # storage version (warden.kube.storedversions)
    Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions",
         ("get", "list", "watch"), namespaced=False, watch="kopf", subresources=(("status", ("patch",)),),
         subresource_names=CRD_NAMES),
    Kind("v1", "Namespace", "namespaces", ("list", "watch"), namespaced=False, watch="kopf"),
)  # fmt: skip

BY_KIND: dict[tuple[str, str], Kind] = {(k.api_version, k.kind): k for k in REGISTRY}
#: what a reconcile deletes once no longer rendered, in this order
PRUNED: tuple[Kind, ...] = tuple(k for k in REGISTRY if k.pruned)
#: children whose only business with the operator is to stay as rendered, watched by kopf (the generic heal
#: handler); a cached child's drift is told by its informer (``watch="cache"``)
HEALED: tuple[Kind, ...] = tuple(k for k in REGISTRY if k.watch == "heal")
#: kinds kept in memory by a watch (``warden.kube.cache``)
CACHED: tuple[Kind, ...] = tuple(k for k in REGISTRY if k.cached)


def of(api_version: str, kind: str) -> Kind:
    try:
        return BY_KIND[(api_version, kind)]
    except KeyError:
        raise KeyError(f"{kind} ({api_version}) is not in warden.kube.kinds.REGISTRY") from None


Rule = tuple[str, str, str, str]  # (API group, resource, verb, resourceNames joined with ",")


def _rules(kinds: Iterable[Kind]) -> set[Rule]:
    """The RBAC rules that let one do with ``kinds`` what they say."""
    rules: set[Rule] = set()
    for k in kinds:
        rules |= {(k.group, k.plural, verb, "") for verb in k.verbs}
        for sub, verbs in k.subresources:
            rules |= {(k.group, f"{k.plural}/{sub}", verb, ",".join(k.subresource_names)) for verb in verbs}
    return rules


def rbac_rules(namespaced: bool) -> set[Rule]:
    """What the operator needs: the namespaced kinds' (a Role per watched namespace, or one
    ClusterRole), or the cluster-scoped ones' (the discovery ClusterRole)."""
    return _rules(k for k in REGISTRY if k.namespaced == namespaced)


#: What the bridge (``warden.bridge``, Deployment ``<release>-slurm-operator-bridge`` of the operator chart)
#: does with each kind, in every namespace: its ClusterRole's rules (``BRIDGE_RULES``; a unit test holds the
#: chart's to them). Its Slurm token it reads through the Role each cluster gives it (``warden.render.bridge``).
BRIDGE_KINDS: tuple[Kind, ...] = (
    # the pods it schedules, watched by schedulerName, and the worker pods whose nodes they share: labelled
    # with their Slurm job, deleted when that job ends, bound to a node, told why they wait (PodScheduled)
    Kind("v1", "Pod", "pods", (*_READ, "patch", "delete"),
         subresources=(("binding", ("create",)), ("status", ("patch",)))),
    # its Events about the pods (Scheduled, SlurmJobPreempted...), as events.k8s.io/v1 and core/v1
    Kind("events.k8s.io/v1", "Event", "events", ("create", "patch")),
    Kind("v1", "Event", "events", ("create", "patch")),
    # the namespaces' opt-in label and annotations; the Kubernetes nodes pods go to
    Kind("v1", "Namespace", "namespaces", _READ, namespaced=False),
    Kind("v1", "Node", "nodes", _READ, namespaced=False),
    # a Job's pods start together (parallelism): one Slurm job for them; so do a PodGroup's (minMember) and a
    # JobSet's, where their CRDs are installed
    Kind("batch/v1", "Job", "jobs", _READ),
    Kind("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups", _READ, optional=True),
    Kind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", _READ, optional=True),
    # which clusters enable the bridge, with which partition, QoS and scheduler name
    Kind(_CLUSTER, "SlurmCluster", PLURAL, _READ),
)  # fmt: skip
BRIDGE_RULES: frozenset[Rule] = frozenset(_rules(BRIDGE_KINDS))

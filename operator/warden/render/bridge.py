"""What an enabled spec.bridge gives the bridge (``warden.bridge``) in the cluster's namespace: read access
to its Slurm token, and with accounting the ConfigMap where it lists its tenants.

The operator writes the token into Secret ``<cluster>-bridge-token`` (``warden.tokens``). The bridge runs
in the operator's namespace, where no Secret volume of this namespace can reach, so it reads the Secret
through the API: a Role granting ``get`` on that one Secret, bound to the bridge's ServiceAccount, which
the operator learns from its flag ``--bridge-service-account <namespace>/<name>``. Without the flag there
is no binding to make, and nothing is rendered.

With accounting, each namespace opted in to the cluster is a Slurm account (``naming.bridge_account``) its
pods are charged to. Slurm's accounts are made with ``sacctmgr``, which the bridge cannot run: it writes the
namespaces into ConfigMap ``<cluster>-bridge-accounts`` (the operator makes it, empty; the Role lets the
bridge read and patch that one ConfigMap), which the controller pod mounts and makes the accounts from.
"""

from __future__ import annotations

from warden.render.context import Cluster, ServiceAccountRef
from warden.render.pods import Manifest, meta

COMPONENT = "bridge"


def accounts_enabled(cluster: Cluster) -> bool:
    """Whether the bridge's namespaces get Slurm accounts: an enabled bridge on a cluster with accounting."""
    return cluster.spec.active_bridge is not None and cluster.spec.accounting.mode != "Disabled"


def token_reader_role(cluster: Cluster) -> Manifest:
    """``get`` on the bridge's token Secret; with accounting ``get`` and ``patch`` on the ConfigMap where it
    lists its namespaces. Nothing else."""
    names = cluster.names
    rules: list[Manifest] = [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [names.bridge_token_secret], "verbs": ["get"]}
    ]
    if accounts_enabled(cluster):
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [names.bridge_accounts],
                "verbs": ["get", "patch"],
            }
        )
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(cluster, names.bridge, COMPONENT),
        "rules": rules,
    }


def accounts_config_map(cluster: Cluster) -> Manifest:
    """The ConfigMap the bridge writes its namespaces into (key ``naming.BRIDGE_ACCOUNTS_KEY``, one a line).
    Rendered without data: the operator's server-side apply owns its metadata only, the data is the bridge's."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(cluster, cluster.names.bridge_accounts, COMPONENT),
    }


def token_reader_binding(cluster: Cluster, account: ServiceAccountRef) -> Manifest:
    """The Role, for the bridge's ServiceAccount in its own namespace."""
    name = cluster.names.bridge
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(cluster, name, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account.name, "namespace": account.namespace}],
    }


def render(cluster: Cluster) -> list[Manifest]:
    """With accounting the ConfigMap of the bridge's namespaces; the Role and its binding with an enabled
    spec.bridge and a known bridge ServiceAccount."""
    out = [accounts_config_map(cluster)] if accounts_enabled(cluster) else []
    account = cluster.bridge_account
    if cluster.spec.active_bridge is None or account is None:
        return out
    return [*out, token_reader_role(cluster), token_reader_binding(cluster, account)]

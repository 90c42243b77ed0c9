"""What an enabled spec.bridge gives the bridge (``warden.bridge``) in the cluster's namespace: read access
to its Slurm token.

The operator writes the token into Secret ``<cluster>-bridge-token`` (``warden.tokens``). The bridge runs
in the operator's namespace, where no Secret volume of this namespace can reach, so it reads the Secret
through the API: a Role granting ``get`` on that one Secret, bound to the bridge's ServiceAccount, which
the operator learns from its flag ``--bridge-service-account <namespace>/<name>``. Without the flag there
is no binding to make, and nothing is rendered.
"""

from __future__ import annotations

from warden.render.context import Cluster, ServiceAccountRef
from warden.render.pods import Manifest, meta

COMPONENT = "bridge"


def token_reader_role(cluster: Cluster) -> Manifest:
    """``get`` on the bridge's token Secret, and nothing else."""
    names = cluster.names
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(cluster, names.bridge, COMPONENT),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [names.bridge_token_secret],
                "verbs": ["get"],
            }
        ],
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
    """The Role and its binding, with an enabled spec.bridge and a known bridge ServiceAccount."""
    account = cluster.bridge_account
    if cluster.spec.active_bridge is None or account is None:
        return []
    return [token_reader_role(cluster), token_reader_binding(cluster, account)]

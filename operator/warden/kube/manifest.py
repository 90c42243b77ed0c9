"""What the apply layer takes: a Kubernetes object as a dict (``Manifest``) and a Secret to be made once
(``SecretSpec``). The renderers produce them; ``kube`` writes them and never imports a renderer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]


@dataclass(frozen=True)
class SecretSpec:
    """A Secret the operator generates: its identity (metadata and type, no data) plus a generator the
    apply layer calls only when the Secret does not exist yet (a renderer stays pure)."""

    manifest: Manifest
    generate: Callable[[], dict[str, str]]

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

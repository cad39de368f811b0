"""What must never leave the cluster.

Secrets are listed and watched as metadata only, so their values are not even fetched. Their
metadata can still carry them: `kubectl apply` stores the whole applied manifest, data included,
in the `last-applied-configuration` annotation. That annotation is removed, and so is any data
field a server might send despite the metadata-only request.
"""

from __future__ import annotations

from typing import Any

from ..kube.discovery import KindInfo
from ..kube.reflector import Transform

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SECRET_FIELDS = ("data", "stringData")


def is_secret(kind: KindInfo) -> bool:
    return kind.group == "" and kind.kind == "Secret"


def scrub_secret(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    annotations = meta.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {k: v for k, v in obj.items() if k not in SECRET_FIELDS and k != "metadata"} | {"metadata": meta}


def transform_for(kind: KindInfo) -> Transform | None:
    return scrub_secret if is_secret(kind) else None

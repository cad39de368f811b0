"""One cached object in Clouddriver's manifest shape (`GET /manifests/...`), for Spinnaker tooling.

The status is the small part of Clouddriver's per-kind handlers that tooling relies on: whether a
workload's rollout has settled, is paused, or lacks available replicas.
"""

from __future__ import annotations

from typing import Any

import orjson

MONIKER_APP = "moniker.spinnaker.io/application"
MONIKER_CLUSTER = "moniker.spinnaker.io/cluster"


def manifest_view(account: str, location: str, raw: bytes) -> dict[str, Any]:
    obj = orjson.loads(raw)
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    kind = str(obj.get("kind", ""))
    full_name = f"{kind.lower()} {meta.get('name', '')}"
    return {
        "account": account,
        "name": full_name,
        "location": meta.get("namespace", "") if location != "_" else "",
        "manifest": obj,
        "moniker": {"app": annotations.get(MONIKER_APP, ""), "cluster": annotations.get(MONIKER_CLUSTER, full_name)},
        "status": workload_status(obj),
        "artifacts": [],
        "events": [],
        "warnings": [],
        "metrics": [],
    }


def _state(ok: bool, message: str = "") -> dict[str, Any]:
    return {"state": ok, "message": message} if message else {"state": ok}


def workload_status(obj: dict[str, Any]) -> dict[str, Any]:
    """Clouddriver's `stable`, `paused`, `available` and `failed` flags."""
    kind = obj.get("kind")
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    meta = obj.get("metadata") or {}
    result = {"stable": _state(True), "paused": _state(False), "available": _state(True), "failed": _state(False)}
    if kind not in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        return result
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        result["stable"] = _state(False, "Waiting for status generation to match updated object generation")
        return result
    if kind == "DaemonSet":
        desired, updated = status.get("desiredNumberScheduled", 0), status.get("updatedNumberScheduled", 0)
        available = status.get("numberAvailable", 0)
    else:
        desired = spec.get("replicas", 1)
        updated = status.get("updatedReplicas", 0) if kind != "ReplicaSet" else status.get("replicas", 0)
        available = status.get("availableReplicas", 0)
    if spec.get("paused"):
        result["paused"] = _state(True)
    if updated < desired:
        result["stable"] = _state(False, "Waiting for all replicas to be updated")
    elif available < desired:
        result["stable"] = _state(False, "Waiting for all replicas to be available")
        result["available"] = _state(False, "Not all replicas are available")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            result["failed"] = _state(True, condition.get("message", "Deployment exceeded its progress deadline"))
    return result

"""Seed a real API server (scripts/real-cluster) with K kinds x M objects for the benchmarks.

Kinds that no controller multiplies (the real control plane runs kube-controller-manager): no
ServiceAccount (its token controller adds a Secret each), no Deployment or Job (ReplicaSets,
Pods), headless Services (no ClusterIP to allocate), a CRD of our own. Objects of 0.5 to 2 KB, as
bench/seeded_kubesim.py makes them, in one namespace (the EndpointSlice mirroring controller copies
the Endpoints named like a selectorless Service: EndpointSlices are not among the kinds followed,
so the agent does not see them). Idempotent: what exists is counted and only
the rest is created, so a second run costs a few LISTs.

    .venv/bin/python bench/real_seed.py --kubeconfig .real-cluster/admin.yaml --kinds 10 --objects 1000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

NAMESPACE = "scale-agent-bench"
GROUP = "bench.scale-agent.io"
LABELS = {"app.kubernetes.io/name": "bench", "app.kubernetes.io/managed-by": "spinnaker"}
CONTAINERS = [
    {
        "name": "app",
        "image": "registry.example.com/team/app:1.2.3",
        "ports": [{"containerPort": 8080}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(5)],
    }
]


def _pad(i: int) -> dict[str, str]:
    return {"bench.scale-agent.io/padding": "x" * (200 + (i * 37) % 1200)}  # 0.5 to 2 KB in all


# (kind, collection path under the namespace, body of object i without metadata)
KINDS: list[tuple[str, str, Callable[[int], dict[str, Any]]]] = [
    ("ConfigMap", "/api/v1/namespaces/{ns}/configmaps", lambda i: {"data": {"config.yaml": f"key: {i}\n" * 10}}),
    ("Secret", "/api/v1/namespaces/{ns}/secrets", lambda i: {"type": "Opaque", "data": {"password": "c2VjcmV0" * 8}}),
    (
        "Service",
        "/api/v1/namespaces/{ns}/services",
        lambda i: {"spec": {"clusterIP": "None", "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}},
    ),
    (
        "Endpoints",
        "/api/v1/namespaces/{ns}/endpoints",
        lambda i: {"subsets": [{"addresses": [{"ip": f"10.1.{i // 250}.{i % 250 + 1}"}], "ports": [{"port": 8080}]}]},
    ),
    ("Pod", "/api/v1/namespaces/{ns}/pods", lambda i: {"spec": {"containers": CONTAINERS}}),
    (
        "Role",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        lambda i: {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]},
    ),
    (
        "RoleBinding",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        lambda i: {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"bench-{i:05d}"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": f"user-{i}"}],
        },
    ),
    (
        "PodTemplate",
        "/api/v1/namespaces/{ns}/podtemplates",
        lambda i: {"template": {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": CONTAINERS}}},
    ),
    (
        "ControllerRevision",
        "/apis/apps/v1/namespaces/{ns}/controllerrevisions",
        lambda i: {"revision": 1, "data": {"spec": {"replicas": i % 5}}},
    ),
    (
        "Widget",
        f"/apis/{GROUP}/v1/namespaces/{{ns}}/widgets",
        lambda i: {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "spec": {"size": i, "color": "blue"}},
    ),
]

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


async def seed(kubeconfig: Path, kinds: int, objects: int, namespace: str = NAMESPACE) -> list[str]:
    """Make `kinds` kinds x `objects` objects exist in `namespace`; return the kinds' names."""
    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials
    from scaleagent.kube.errors import APIError

    if not 1 <= kinds <= len(KINDS):
        raise SystemExit(f"--kinds: 1 to {len(KINDS)} on a real server")
    chosen = KINDS[:kinds]
    client = KubeClient(await load_credentials(kubeconfig=kubeconfig))
    try:

        async def ignore_exists(method: str, path: str, body: dict[str, Any]) -> None:
            try:
                await client.request(method, path, body=body)
            except APIError as e:
                if e.status != 409:
                    raise

        await ignore_exists("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        if any(kind == "Widget" for kind, _, _ in chosen):
            await ignore_exists("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
            await _until(lambda: _established(client), "the Widget CRD to be established")
        if any(kind == "Pod" for kind, _, _ in chosen):  # pods need the namespace's default ServiceAccount
            await _until(lambda: _exists(client, f"/api/v1/namespaces/{namespace}/serviceaccounts/default"), "SA")
        limit = asyncio.Semaphore(32)
        for kind, collection, body in chosen:
            path = collection.format(ns=namespace)
            have = {o["metadata"]["name"] for o in (await client.get(path)).get("items") or []}

            async def create(i: int, path: str = path, body: Callable[[int], dict[str, Any]] = body) -> None:
                metadata = {"name": f"bench-{i:05d}", "labels": LABELS, "annotations": _pad(i)}
                async with limit:
                    await ignore_exists("POST", path, {"metadata": metadata, **body(i)})

            todo = [i for i in range(objects) if f"bench-{i:05d}" not in have]
            started = time.monotonic()
            await asyncio.gather(*(create(i) for i in todo))
            if todo:
                print(f"seeded {len(todo)} {kind} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    finally:
        await client.close()
    return [kind for kind, _, _ in chosen]


async def _established(client: Any) -> bool:
    crd = await client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{GROUP}")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


async def _exists(client: Any, path: str) -> bool:
    from scaleagent.kube.errors import APIError

    try:
        await client.get(path)
    except APIError as e:
        if e.status == 404:
            return False
        raise
    return True


async def _until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {timeout:g}s for {what}")
        await asyncio.sleep(0.2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--kinds", type=int, default=10)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--namespace", default=NAMESPACE)
    a = p.parse_args()
    print(asyncio.run(seed(a.kubeconfig, a.kinds, a.objects, a.namespace)))


if __name__ == "__main__":
    main()

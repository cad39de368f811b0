"""kubesim for benchmarks: N clusters, pre-seeded with objects or a churn backlog, in its own process.

Seeding goes straight to the store (no HTTP, no per-write validation) so that a million objects
take seconds, not minutes; what readers then see over the API is exactly what a client of a real
cluster would see. Prints `ready <json>` with the kubeconfig paths and versions, then serves until
killed.

    python bench/seeded_kubesim.py --clusters 100 --kinds 10 --objects 1000 --kubeconfig-dir /tmp/kc
    python bench/seeded_kubesim.py --backlog 200000 --kubeconfig-dir /tmp/kc
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import run

from scaleagent.kubesim.churn import Churn
from scaleagent.kubesim.cluster import now_rfc3339
from scaleagent.kubesim.simulator import Simulator
from scaleagent.kubesim.store import ADDED

NAMESPACE = "bench"
LABELS = {"app.kubernetes.io/name": "bench", "app.kubernetes.io/managed-by": "spinnaker"}
ANNOTATIONS = {"moniker.spinnaker.io/application": "bench", "moniker.spinnaker.io/cluster": "deployment bench"}
CONTAINERS = [
    {
        "name": "app",
        "image": "registry.example.com/team/app:1.2.3",
        "ports": [{"containerPort": 8080}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(5)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
]
TEMPLATE = {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": CONTAINERS}}

# Ten kinds, each with a body the size of a typical object of that kind (0.5 to 2 KB of JSON).
KINDS = [
    ("/configmaps", "v1", "ConfigMap", lambda i: {"data": {"config.yaml": f"key: {i}\n" * 20}}),
    ("/secrets", "v1", "Secret", lambda i: {"type": "Opaque", "data": {"password": "c2VjcmV0" * 8}}),
    (
        "/services",
        "v1",
        "Service",
        lambda i: {
            "spec": {
                "type": "ClusterIP",
                "clusterIP": f"10.0.{i // 250}.{i % 250}",
                "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
                "selector": {"app": "bench"},
            }
        },
    ),
    ("/serviceaccounts", "v1", "ServiceAccount", lambda i: {"secrets": [{"name": f"sa-{i}-token"}]}),
    (
        "/pods",
        "v1",
        "Pod",
        lambda i: {
            "spec": {"containers": CONTAINERS, "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.244.0.1"},
        },
    ),
    (
        "apps/deployments",
        "apps/v1",
        "Deployment",
        lambda i: {
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "bench"}}, "template": TEMPLATE},
            "status": {"replicas": 2, "readyReplicas": 2},
        },
    ),
    (
        "apps/replicasets",
        "apps/v1",
        "ReplicaSet",
        lambda i: {
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "bench"}}, "template": TEMPLATE},
            "status": {"replicas": 2},
        },
    ),
    ("batch/jobs", "batch/v1", "Job", lambda i: {"spec": {"template": TEMPLATE}, "status": {"succeeded": 1}}),
    (
        "/endpoints",
        "v1",
        "Endpoints",
        lambda i: {"subsets": [{"addresses": [{"ip": "10.244.0.1"}], "ports": [{"port": 8080}]}]},
    ),
    (
        "rbac.authorization.k8s.io/roles",
        "rbac.authorization.k8s.io/v1",
        "Role",
        lambda i: {
            "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]}]
        },
    ),
]


def seed(cluster, kinds: int, objects: int) -> None:
    cluster.create(cluster.rt("", "v1", "namespaces"), "", {"metadata": {"name": NAMESPACE}})
    now = now_rfc3339()
    for resource, api_version, kind, body in KINDS[:kinds]:
        for i in range(objects):
            obj = {
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {
                    "name": f"{kind.lower()}-{i:05d}",
                    "namespace": NAMESPACE,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now,
                    "labels": LABELS,
                    "annotations": ANNOTATIONS,
                },
                **body(i),
            }
            cluster.store.commit(resource, ADDED, obj, None)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clusters", type=int, default=1)
    p.add_argument("--kinds", type=int, default=0, help=f"seed this many kinds (at most {len(KINDS)})")
    p.add_argument("--objects", type=int, default=0, help="objects per kind per cluster")
    p.add_argument("--backlog", type=int, default=0, help="churn this many changes into cluster 0's history")
    p.add_argument("--kubeconfig-dir", type=Path, required=True)
    args = p.parse_args()
    history = max(10_000, args.backlog + 1000)
    sim = Simulator(
        clusters=args.clusters, history=history, watch_queue=max(10_000, args.backlog + 1000), run_controllers=False
    )
    await sim.start()
    for m in sim.members:
        seed(m.cluster, min(args.kinds, len(KINDS)), args.objects)
    info = {
        "kubeconfigs": [str(a) for a, _ in sim.write_kubeconfigs(args.kubeconfig_dir)],
        "kinds": [k for _, _, k, _ in KINDS[: args.kinds]],
    }
    if args.backlog:
        churn = Churn(sim.members[0].cluster, rate=0, deployment_share=0.0, population=1000, seed=1)
        churn.ensure_namespace()
        info["backlogFrom"] = str(sim.members[0].cluster.store.rv)
        for _ in range(args.backlog):
            churn.step()
        info["backlogTo"] = str(sim.members[0].cluster.store.rv)
    print("ready " + json.dumps(info), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await sim.stop()


if __name__ == "__main__":
    run(main)

"""Several simulated clusters in one process, each on its own TLS port with its own CA."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .churn import Churn
from .cluster import Cluster
from .controllers import Controllers
from .pki import ADMIN_USER, LIMITED_USER, ClusterPKI, kubeconfig, write_kubeconfig
from .server import APIServer, ssl_context

log = logging.getLogger("scaleagent.kubesim")

LIMITED_NAMESPACE = "team-a"


def limited_policy() -> list[dict]:
    """What the limited identity may do: read namespaces, read `default`, read and write `team-a`.

    Expressed as ordinary RBAC objects, so tests can widen or narrow it the Kubernetes way.
    """
    rbac = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "User", "name": LIMITED_USER, "apiGroup": "rbac.authorization.k8s.io"}]
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LIMITED_NAMESPACE}},
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "kubesim-limited-cluster"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "kubesim-limited-cluster"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubesim-limited-cluster",
            },
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "kubesim-limited-workloads"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps", "services", "pods"], "verbs": verbs},
                {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": verbs},
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": verbs},
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "kubesim-limited", "namespace": LIMITED_NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubesim-limited-workloads",
            },
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "kubesim-limited-view", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": subject,
        },
    ]


def kubernetes_service(port: int) -> dict:
    """The `kubernetes` Service every apiserver keeps in `default`, its first cluster IP, pointing
    at the apiserver's own port (no Endpoints: kubesim has no endpoints controller)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "clusterIP": "10.96.0.1",
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
        },
    }


@dataclass
class SimCluster:
    cluster: Cluster
    pki: ClusterPKI
    controllers: Controllers
    server: APIServer
    limited_token: str
    url: str = ""
    runner: web.AppRunner | None = None
    churn: Churn | None = None
    churn_task: asyncio.Task[int] | None = None

    @property
    def name(self) -> str:
        return self.cluster.name

    def admin_kubeconfig(self) -> dict:
        return kubeconfig(
            self.name,
            self.url,
            self.pki.ca_pem,
            user=ADMIN_USER,
            cert_pem=self.pki.admin_cert_pem,
            key_pem=self.pki.admin_key_pem,
        )

    def limited_kubeconfig(self) -> dict:
        return kubeconfig(
            self.name,
            self.url,
            self.pki.ca_pem,
            user=LIMITED_USER,
            token=self.limited_token,
            namespace=LIMITED_NAMESPACE,
        )


@dataclass
class Simulator:
    clusters: int = 1
    host: str = "127.0.0.1"
    base_port: int = 0  # 0: any free port per cluster
    history: int = 10_000
    watch_queue: int = 10_000
    bookmark_interval: float = 60.0
    version: str = "v1.30.0"
    # Benchmarks seed objects that must stay exactly as seeded: no controller reacts to them.
    run_controllers: bool = True
    name_prefix: str = "kubesim"
    members: list[SimCluster] = field(default_factory=list)

    async def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="kubesim-pki-"))
        for i in range(self.clusters):
            cluster = Cluster(
                f"{self.name_prefix}-{i}", history=self.history, watch_queue=self.watch_queue, version=self.version
            )
            for obj in limited_policy():
                cluster.create(cluster.rt_for(obj), obj["metadata"].get("namespace", ""), obj, manager="kubesim")
            token = cluster.add_token(LIMITED_USER)
            pki = ClusterPKI.generate()
            controllers = Controllers(cluster, root_ca=pki.ca_pem.decode())
            if self.run_controllers:
                controllers.start()
            server = APIServer(cluster, bookmark_interval=self.bookmark_interval)
            member = SimCluster(cluster, pki, controllers, server, token)
            cert, key, ca = pki.write_server_files(self._dir / cluster.name)
            runner = web.AppRunner(server.app, handler_cancellation=True, access_log=None)
            await runner.setup()
            port = self.base_port + i if self.base_port else 0
            site = web.TCPSite(runner, self.host, port, ssl_context=ssl_context(cert, key, ca), shutdown_timeout=1)
            await site.start()
            bound = runner.addresses[0][1]
            member.url = f"https://{self.host}:{bound}"
            cluster.create(
                cluster.rt("", "v1", "services"), "default", kubernetes_service(bound), manager="kube-apiserver"
            )
            member.runner = runner
            self.members.append(member)

    def start_churn(self, rate: float, seed: int | None = None) -> None:
        """Churn every cluster at `rate` operations per second each."""
        for m in self.members:
            m.churn = Churn(m.cluster, rate, seed=seed)
            m.churn_task = asyncio.get_running_loop().create_task(m.churn.run())

    def write_kubeconfigs(self, directory: Path) -> list[tuple[Path, Path]]:
        out = []
        for m in self.members:
            admin, limited = directory / f"{m.name}.yaml", directory / f"{m.name}-limited.yaml"
            write_kubeconfig(admin, m.admin_kubeconfig())
            write_kubeconfig(limited, m.limited_kubeconfig())
            out.append((admin, limited))
        return out

    async def stop(self) -> None:
        for m in self.members:
            if m.churn_task:
                m.churn_task.cancel()
            m.cluster.store.close_watchers()
            await m.controllers.stop()
            if m.runner:
                await m.runner.cleanup()
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

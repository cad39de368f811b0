"""A steady stream of creates, updates and deletes, so that watchers always have work.

Usable from the command line (`scale-agent kubesim --churn RATE`) and from Python for benchmarks:
`await Churn(cluster, rate=500).run(duration=10)`. Writes go through the same Cluster methods as
API requests, so they produce the same events, versions and controller reactions.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from .cluster import Cluster
from .errors import StatusError

CHURN_NAMESPACE = "churn"


@dataclass
class Churn:
    cluster: Cluster
    rate: float  # operations per second
    namespace: str = CHURN_NAMESPACE
    population: int = 100  # the number of objects it keeps around
    deployment_share: float = 0.05  # part of the operations that roll a Deployment
    seed: int | None = None
    done: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0, "delete": 0})

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._cm = self.cluster.rt("", "v1", "configmaps")
        self._deploy = self.cluster.rt("apps", "v1", "deployments")
        self._serial = 0
        self._names: list[str] = []

    def ensure_namespace(self) -> None:
        ns_rt = self.cluster.rt("", "v1", "namespaces")
        if self.cluster.store.get(ns_rt.storage_key, "", self.namespace) is None:
            self.cluster.create(ns_rt, "", {"metadata": {"name": self.namespace}}, manager="kubesim-churn")
        self._names = [o["metadata"]["name"] for o in self.cluster.store.items(self._cm.storage_key, self.namespace)]

    def step(self) -> None:
        """One operation, chosen to keep the population near its target."""
        if self.deployment_share and self._rng.random() < self.deployment_share:
            self._roll_deployment()
            return
        n = len(self._names)
        r = self._rng.random()
        if n < self.population * 0.5 or (r < 0.4 and n < self.population * 1.5):
            op = "create"
        elif r < 0.8 or n == 0:
            op = "update" if n else "create"
        else:
            op = "delete"
        try:
            getattr(self, f"_{op}")()
            self.counts[op] += 1
        except StatusError:
            pass  # a client deleted or changed our object meanwhile; churn goes on
        self.done += 1

    def _create(self) -> None:
        self._serial += 1
        name = f"churn-{self._serial:08d}"
        self.cluster.create(
            self._cm,
            self.namespace,
            {
                "metadata": {"name": name, "labels": {"app": "churn", "shard": str(self._serial % 10)}},
                "data": {"value": str(self._rng.random()), "serial": str(self._serial)},
            },
            manager="kubesim-churn",
        )
        self._names.append(name)

    def _update(self) -> None:
        name = self._rng.choice(self._names)
        obj = self.cluster.store.get(self._cm.storage_key, self.namespace, name)
        if obj is None:
            self._names.remove(name)
            return
        data: dict[str, Any] = {**(obj.get("data") or {}), "value": str(self._rng.random())}
        self.cluster.update(self._cm, self.namespace, name, {**obj, "data": data}, manager="kubesim-churn")

    def _delete(self) -> None:
        name = self._names.pop(self._rng.randrange(len(self._names)))
        self.cluster.delete(self._cm, self.namespace, name)

    def _roll_deployment(self) -> None:
        name = f"churn-web-{self._rng.randrange(3)}"
        obj = self.cluster.store.get(self._deploy.storage_key, self.namespace, name)
        image = f"nginx:1.{self._rng.randrange(20, 28)}"
        template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "web", "image": image}]}}
        try:
            if obj is None:
                self.cluster.create(
                    self._deploy,
                    self.namespace,
                    {
                        "metadata": {"name": name, "labels": {"app": name}},
                        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": template},
                    },
                    manager="kubesim-churn",
                )
            else:
                self.cluster.update(
                    self._deploy,
                    self.namespace,
                    name,
                    {**obj, "spec": {**obj["spec"], "template": template}},
                    manager="kubesim-churn",
                )
            self.counts["update"] += 1
        except StatusError:
            pass
        self.done += 1

    async def run(self, duration: float | None = None, operations: int | None = None) -> int:
        """Run at `rate` ops/s until `duration` seconds or `operations` ops (forever if neither)."""
        self.ensure_namespace()
        loop = asyncio.get_running_loop()
        start = loop.time()
        tick = min(0.05, 1.0 / self.rate) if self.rate > 0 else 0.05
        started = self.done
        while True:
            elapsed = loop.time() - start
            if duration is not None and elapsed >= duration:
                break
            due = int(elapsed * self.rate) - (self.done - started)
            if operations is not None:
                due = min(due, operations - (self.done - started))
                if self.done - started >= operations:
                    break
            for _ in range(max(0, due)):
                self.step()
            await asyncio.sleep(tick)
        return self.done - started

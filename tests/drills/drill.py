"""What every drill shares: the cluster's objects and the hub's, compared exactly until they agree,
the line a drill prints, and churn driven from the test so that it can be stopped (an exact
comparison needs a cluster that has stopped changing)."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import HubPki, HubProcess, write_yaml

Key = tuple[str, str, str, str, str]  # kind, namespace, name, uid, resourceVersion


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def create_configmaps(kubeconfig: Path, namespace: str, count: int, *, padding: int = 0) -> None:
    """The namespace and `count` ConfigMaps in it (`padding` bytes more each), in one `kubectl
    create` of a List: thousands in a few seconds."""
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": namespace},
            "data": {"i": str(i), **({"pad": "x" * padding} if padding else {})},
        }
        for i in range(count)
    ]
    kubectl(kubeconfig, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def _key(kind: str, item: dict) -> Key:
    m = item["metadata"]
    return kind, m.get("namespace", ""), m["name"], m["uid"], m["resourceVersion"]


def cluster_state(kubeconfig: Path, kinds: list[str]) -> set[Key]:
    """The cluster's own objects, read directly with its admin kubeconfig."""
    return {
        _key(kind, item)
        for kind in kinds
        for item in json.loads(kubectl(kubeconfig, "get", kind, "-A", "-o", "json"))["items"]
    }


def hub_state(hub: HubProcess, account: str, kinds: list[str]) -> set[Key]:
    """What a user of the hub sees; empty while the hub does not know the account (or is down)."""
    out: set[Key] = set()
    for kind in kinds:
        try:
            status, doc = hub.get(f"/api/v1/accounts/{account}/objects?kind={kind}")
        except OSError:
            return set()
        out |= {_key(kind, item) for item in (doc["items"] if status == 200 else [])}  # type: ignore[index]
    return out


def differences(want: set[Key], have: set[Key]) -> str:
    names = lambda keys: {k[:3] for k in keys}  # noqa: E731
    lost, phantom = names(want) - names(have), names(have) - names(want)
    stale = {k for k in want - have if k[:3] in names(have)}
    return (
        f"{len(lost)} lost {sorted(lost)[:5]}, {len(phantom)} phantom {sorted(phantom)[:5]}, "
        f"{len(stale)} stale {sorted(stale)[:5]}"
    )


def converge(hub: HubProcess, account: str, kubeconfig: Path, kinds: list[str], bound: float) -> float:
    """Seconds until the hub holds exactly the cluster's objects; fails naming what differs."""
    start = time.monotonic()
    while True:
        want, have = cluster_state(kubeconfig, kinds), hub_state(hub, account, kinds)
        if want == have:
            return time.monotonic() - start
        if time.monotonic() - start > bound:
            pytest.fail(
                f"not converged after {bound:g}s: {differences(want, have)}\nhub log:\n"
                + "\n".join([line for line in hub.log if " DEBUG " not in line][-15:])
            )
        time.sleep(0.25)  # a poll interval: the condition is checked again, never assumed


def report(what: str, took: float, since: str, bound: float) -> None:
    print(f"\ndrill {what}: converged {took:.1f}s after {since} (bound {bound:g}s): 0 lost, 0 phantom, 0 stale")


class Churn:
    """Creates, updates and deletes ConfigMaps in one namespace at about `rate` operations per
    second, through the cluster's API (the official client), from a thread, until stopped."""

    def __init__(self, kubeconfig: Path, namespace: str, rate: float) -> None:
        from kubernetes import client, config

        self._client = client
        self.core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.namespace, self.rate = namespace, rate
        self.operations = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Churn:
        self.core.create_namespace(self._client.V1Namespace(metadata=self._client.V1ObjectMeta(name=self.namespace)))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Returns once the last operation has been answered: the cluster is still after this."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        assert not self._thread.is_alive(), "the churn thread did not stop"

    def _run(self) -> None:
        from kubernetes.client.rest import ApiException

        c, names, rng, n = self._client, [], random.Random(12), 0
        while not self._stop.wait(1 / self.rate):  # pacing, not synchronisation
            action = rng.choice(["create", "create", "update", "delete"]) if names else "create"
            try:
                if action == "create":
                    n += 1
                    name = f"churn-{n}"
                    self.core.create_namespaced_config_map(
                        self.namespace, c.V1ConfigMap(metadata=c.V1ObjectMeta(name=name), data={"v": "0"})
                    )
                    names.append(name)
                elif action == "update":
                    self.core.patch_namespaced_config_map(
                        rng.choice(names), self.namespace, {"data": {"v": str(rng.random())}}
                    )
                else:
                    self.core.delete_namespaced_config_map(names.pop(rng.randrange(len(names))), self.namespace)
                self.operations += 1
            except ApiException as e:
                self.errors.append(f"{action}: {e.status} {e.reason}")


def agent_config(
    directory: Path,
    pki: HubPki,
    grpc_port: int,
    accounts: list[dict],
    *,
    kubernetes: dict | None = None,
    **clouddriver: object,
) -> Path:
    """An agent's configuration (as helpers.agent_of writes it), kept so that a drill can start the
    same agent again; `grpc_port` may be a proxy's in front of the hub."""
    return write_yaml(
        directory / "agent.yaml",
        {
            "kubernetes": {"accounts": accounts, **(kubernetes or {})},
            "server": {"port": 0},
            "clouddriver": {"grpc": f"localhost:{grpc_port}", "tls": {"cacertFile": str(pki.ca)}, **clouddriver},
        },
    )

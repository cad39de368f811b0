"""Two agents following one account (agent replicas of one zone): one streams, the other stands by
and takes over when the first goes. Tried as a new user would before this, both streamed: deleted
objects came back from the other agent's stale events, and a second agent with narrower `kinds`
made the hub drop the whole account for good."""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client, config

from tests.helpers import AgentProcess, HubProcess, account_health, write_yaml


def ours(hub: HubProcess) -> list[str]:
    """Our ConfigMaps in the hub's cache (the namespace also holds kube-root-ca.crt)."""
    return sorted(n for o in hub.objects("shared", "?kind=ConfigMap") if (n := o["metadata"]["name"]).startswith("cm-"))


def agent(tmp: Path, name: str, hub: HubProcess, account: dict) -> AgentProcess:
    doc = {
        "agentId": name,
        "kubernetes": {"accounts": [account]},
        "server": {"port": 0},
        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
    }
    return AgentProcess(write_yaml(tmp / f"{name}.yaml", doc), print_events=False)


def test_a_second_agent_with_narrower_kinds_stands_by_and_takes_over_when_the_first_leaves(kubesim, tmp_path):
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    ns = f"two-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    for i in range(3):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i}")))
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"}))
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"}},
        )
    )
    wide = {
        "name": "shared",
        "kubeConfigFile": str(kubesim.admin(1)),
        "namespaces": [ns],
        "kinds": ["ConfigMap", "Secret"],
    }
    narrow = {**wide, "kinds": ["ConfigMap"]}
    first = second = None
    try:
        first = agent(tmp_path, "agent-1", hub, wide)
        hub.wait_until(
            "/api/v1/accounts/shared", lambda d: d["agentState"] == "watching", what="the first agent's snapshot"
        )
        assert ours(hub) == ["cm-0", "cm-1", "cm-2"]
        before = hub.json("/api/v1/accounts/shared")["objectsByKind"]
        assert set(before) == {"ConfigMap", "Secret"}

        second = agent(tmp_path, "agent-2", hub, narrow)
        health = second.wait_health(
            lambda d: account_health(d, "shared")["state"] == "standby", what="the second agent standing by"
        )
        assert "agent-1" in account_health(health, "shared")["reason"] and health["status"] == "ok"
        core.delete_namespaced_config_map("cm-0", ns)
        doc = hub.wait_until(
            "/api/v1/accounts/shared",
            lambda d: d["objectsByKind"].get("ConfigMap") == before["ConfigMap"] - 1,
            what="the delete",
        )
        # The narrower agent changed nothing: the Secrets are still there, the delete applied once.
        assert doc["agentId"] == "agent-1" and doc["objectsByKind"]["Secret"] == before["Secret"]
        assert ours(hub) == ["cm-1", "cm-2"]
        assert [a["agentId"] for a in hub.json("/armory/agents") if "shared" in a["accounts"]] == ["agent-1"]

        first.stop()
        doc = hub.wait_until(
            "/api/v1/accounts/shared",
            lambda d: d["state"] == "ACTIVE" and d["agentId"] == "agent-2" and d["agentState"] == "watching",
            what="the second agent taking over",
        )
        assert ours(hub) == ["cm-1", "cm-2"]  # the deleted one did not come back
        # Told once, it stood by: the hub and the agent did not argue about it meanwhile.
        assert sum("the hub rejected account shared" in line for line in second.stderr) == 1
        assert doc["kinds"] == ["ConfigMap"]  # the account now follows what its streaming agent follows
    finally:
        for a in (first, second):
            if a is not None:
                a.stop()
        hub.stop()

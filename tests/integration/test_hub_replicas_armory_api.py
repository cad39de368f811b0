"""Armory's agent and operation routes with two hub replicas on PostgreSQL: asked of the replica
without the agent, each answers what the replica holding it knows (docs/api.md, "Agents"): one
agent, an account's namespaces, one operation's hops (recorded where the agent ran it), and a
disconnect that ends the session on the other replica."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.databases import emptied
from tests.helpers import AgentProcess, HubProcess, free_port, write_yaml


def call(hub: HubProcess, method: str, path: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(hub.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_the_replica_without_the_agent_answers_for_it(postgres_db, kubesim, tmp_path: Path) -> None:
    url = emptied(postgres_db)
    ports = {"hub-a": free_port(), "hub-b": free_port()}
    hubs: dict[str, HubProcess] = {}
    agent = None
    try:
        for name, port in ports.items():
            other = next(n for n in ports if n != name)
            hubs[name] = HubProcess(
                write_yaml(
                    tmp_path / f"{name}.yaml",
                    {
                        "server": {"grpcPort": 0, "httpPort": port, "replicaName": name},
                        "database": {"url": url},
                        "replicas": {
                            "cluster": "static",
                            "heartbeat": {"periodSeconds": 1},
                            "static": [{"id": other, "baseUrl": f"http://127.0.0.1:{ports[other]}"}],
                        },
                    },
                )
            )
        a, b = hubs["hub-a"], hubs["hub-b"]
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {
                    "agentId": "far",
                    "kubernetes": {"accounts": [{"name": "sim", "kubeConfigFile": str(kubesim.admin(0))}]},
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{b.grpc_port}", "insecure": True},
                },
            ),
            print_events=False,
        )
        b.wait_until("/api/v1/accounts/sim", lambda d: d["agentState"] == "watching", what="sim watched on hub-b")
        a.wait_until("/api/v1/accounts/sim", lambda d: d["agentState"] == "watching", what="sim seen through hub-a")

        status, one = call(a, "GET", "/armory/agents/far")
        assert (status, one["clouddriverId"], one["accounts"]) == (200, "hub-b", ["sim"])
        status, names = call(a, "GET", "/agents/kubernetes/accounts/sim/namespaces")
        assert status == 200 and "default" in names

        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hops", "namespace": "default"}}
        task = a.run_task([{"deployManifest": {"account": "sim", "manifests": [cm]}}])
        assert task["state"] == "completed", task
        op_id = f"{task['id']}-0"
        # Recorded by hub-b, whose agent ran it; hub-a, which forwarded it, lists none.
        assert op_id in [r["operationId"] for r in call(b, "GET", "/armory/agent/operations")[1]]
        assert op_id not in [r["operationId"] for r in call(a, "GET", "/armory/agent/operations")[1]]
        status, record = call(a, "GET", f"/armory/agent/operations/{op_id}")
        assert status == 200, record
        assert (record["opSentToAgent"]["agentId"], record["opProcessedByClouddriver"]["clouddriverId"]) == (
            "far",
            "hub-b",
        )

        status, answer = call(a, "POST", "/armory/agent/far/disconnect")
        assert status == 200, answer
        assert answer["sessions"] == [{"sessionId": one["sessionId"], "replica": "hub-b"}]
        b.wait_log(r"ended the session of agent far", what="hub-b ended the session")
        a.wait_until(
            "/armory/agents",
            lambda d: [(s["agentId"], s["sessionId"] != one["sessionId"]) for s in d] == [("far", True)],
            what="the agent back with a new session",
        )
    finally:
        if agent is not None:
            agent.stop()
        for hub in hubs.values():
            hub.stop()

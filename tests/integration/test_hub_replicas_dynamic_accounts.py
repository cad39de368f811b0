"""Dynamic accounts with two hub replicas: a migration received by the replica that has no agent
of the account's zone is carried out by the one that has; a DELETE received there stops the agent
connected to the other (docs/accounts.md, "With several hub replicas")."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from cryptography.fernet import Fernet

from tests.databases import emptied
from tests.helpers import AgentProcess, HubProcess, free_port, write_yaml


def request(hub: HubProcess, method: str, path: str, body: object) -> tuple[int, object]:
    req = urllib.request.Request(
        hub.url + path, data=json.dumps(body).encode(), method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_a_migration_and_a_delete_reach_the_agent_on_the_other_replica(postgres_db, kubesim, tmp_path: Path):
    url = emptied(postgres_db)
    key = Fernet.generate_key().decode()
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
                        "dynamicAccounts": {
                            "encryptionKey": key,
                            "kubeconfigDirectories": [str(kubesim.kubeconfig_dir)],
                        },
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
                    "agentId": "zoned",
                    "zoneId": "z1",
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{b.grpc_port}", "insecure": True},
                },
            ),
            print_events=False,
        )
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected to hub-b")
        account = {"name": "dyn-1", "zoneId": "z1", "kubeconfigFile": str(kubesim.admin(1))}
        status, _ = request(a, "POST", "/armory/accounts", [account])
        assert status == 201
        status, _ = request(a, "PATCH", "/armory/accounts", [{**account, "state": "ACTIVE"}])
        assert status == 202
        for hub in (a, b):
            hub.wait_until(
                "/armory/accounts/dyn-1", lambda d: d["state"] == "ACTIVE", what="the account ACTIVE through hub-b"
            )
        assert a.objects("dyn-1", "?kind=Namespace")  # read through hub-a, forwarded to hub-b
        assert [x["name"] for x in agent.health()["accounts"]] == ["dyn-1"]

        status, result = request(a, "DELETE", "/armory/accounts", ["dyn-1"])
        assert status == 200 and result["deleted"] == ["dyn-1"] and not result["warnings"], result
        agent.wait_health(lambda d: d["accounts"] == [], what="the agent stopped following it")
    finally:
        if agent is not None:
            agent.stop()
        for hub in hubs.values():
            hub.stop()

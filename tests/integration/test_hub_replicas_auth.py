"""Logins across hub replicas: a caller talks to one replica, the account's agent streams through
another. The first replica forwards with the replicas' token and the caller's identity (never the
caller's credentials); the second checks the caller's permissions against the account it holds.
Nobody but a replica may call the endpoints between replicas."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from scaleagent.hub.auth.callers import hash_token
from tests.databases import emptied
from tests.helpers import AgentProcess, HubProcess, free_port, write_yaml

REPLICA_TOKEN = "replicas-shared-secret-0123456789"
USERS = {"bob": ["ops"], "eve": []}


def token(user: str) -> str:
    return f"{user}-token-for-replicas-test"


def call(hub: HubProcess, method: str, path: str, user: str | None, body: object = None, headers=None):
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    if user:
        all_headers["Authorization"] = f"Bearer {token(user)}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(hub.url + path, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_a_caller_reaches_an_account_through_any_replica_with_its_own_permissions(kubesim, postgres_db, tmp_path):
    database = emptied(postgres_db)
    tokens = write_yaml(
        tmp_path / "tokens.yaml",
        [{"name": u, "groups": g, "tokenHash": hash_token(token(u))} for u, g in USERS.items()],  # type: ignore[arg-type]
    )
    ports = {"hub-a": free_port(), "hub-b": free_port()}
    hubs: dict[str, HubProcess] = {}
    agent = None
    try:
        for name, port in ports.items():
            hubs[name] = HubProcess(
                write_yaml(
                    tmp_path / f"{name}.yaml",
                    {
                        "server": {"grpcPort": 0, "httpPort": port, "replicaName": name},
                        "database": {"url": database},
                        "auth": {"staticTokensFile": str(tokens)},
                        "replicas": {
                            "cluster": "static",
                            "token": REPLICA_TOKEN,
                            "heartbeat": {"periodSeconds": 1},
                            "static": [
                                {"id": other, "baseUrl": f"http://127.0.0.1:{p}"}
                                for other, p in ports.items()
                                if other != name
                            ],
                        },
                    },
                )
            )
        a, b = hubs["hub-a"], hubs["hub-b"]
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {
                    "kubernetes": {
                        "accounts": [
                            {
                                "name": "prod",
                                "kubeconfigFile": str(kubesim.admin(0)),
                                "kinds": ["ConfigMap"],
                                "permissions": {"READ": ["ops"], "WRITE": ["ops"]},
                            }
                        ]
                    },
                    "server": {"port": 0},
                    "clouddriver": {"grpc": b.grpc_target, "insecure": True},
                },
            ),
            print_events=False,
        )

        def bob_sees_prod_synced_on_a() -> bool:
            """ACTIVE is the account's lifecycle (from registration); `watching` means its first
            snapshot is in hub-b's cache."""
            status, accounts = call(a, "GET", "/api/v1/accounts", "bob")
            return status == 200 and [(x["name"], x["state"], x["agentState"]) for x in accounts] == [
                ("prod", "ACTIVE", "watching")
            ]

        deadline = time.monotonic() + 60
        while not bob_sees_prod_synced_on_a():
            assert time.monotonic() < deadline, "prod never listed ACTIVE and watching by hub-a for bob"
            time.sleep(0.1)

        # Reads forwarded to hub-b act for the caller: bob may, eve may not.
        status, objects = call(a, "GET", "/api/v1/accounts/prod/objects?kind=ConfigMap", "bob")
        assert status == 200 and objects["items"], objects
        status, body = call(a, "GET", "/api/v1/accounts/prod/objects?kind=ConfigMap", "eve")
        assert status == 403 and "'eve'" in body["error"] and "READ" in body["error"], body
        assert call(a, "GET", "/api/v1/accounts", "eve") == (200, [])

        # An operation sent to hub-a runs on hub-b's agent, for bob.
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "via-a", "namespace": "default"}}
        status, created = call(
            a, "POST", "/kubernetes/ops", "bob", [{"deployManifest": {"account": "prod", "manifests": [manifest]}}]
        )
        assert status == 200, created
        status, task = call(a, "GET", f"{created['resourceUri']}?waitSeconds=20", "bob")
        assert status == 200 and task["state"] == "completed", task
        status, body = call(
            a, "POST", "/kubernetes/ops", "eve", [{"deployManifest": {"account": "prod", "manifests": [manifest]}}]
        )
        assert status == 403 and "WRITE" in body["error"], body

        # The endpoints between replicas: not for callers, even logged in, even with the hop header.
        op = {"operation": {"id": "x", "account": "prod", "type": "deployManifest", "request": {}, "timeoutMs": 1000}}
        hop = {"X-Scale-Agent-Forwarded-By": "hub-a"}
        status, body = call(b, "POST", "/armory/agent/operations", "bob", op, headers=hop)
        assert status == 403 and "replicas" in body["error"], body
        status, body = call(b, "POST", "/armory/agent/operations", None, op, headers=hop)
        assert status == 401, body
        # A forged identity without the replicas' token is no login either.
        forged = {**hop, "X-Scale-Agent-On-Behalf-Of": json.dumps({"name": "root", "groups": [], "admin": True})}
        assert call(b, "GET", "/api/v1/accounts", None, headers=forged)[0] == 401
        # Callers' tokens are not passed between replicas.
        assert not [line for line in b.log if token("bob") in line]
    finally:
        if agent is not None:
            agent.stop()
        for hub in hubs.values():
            hub.stop()

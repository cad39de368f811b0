"""Armory's agent and operation routes with two hub replicas on PostgreSQL: asked of the replica
without the agent, each answers what the replica holding it knows (docs/api.md, "Agents"): one
agent, an account's namespaces, one operation's hops (recorded where the agent ran it), and a
disconnect that ends the session on the other replica."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tests.databases import emptied
from tests.helpers import AgentProcess, HubProcess, TcpProxy, free_port, write_yaml


def call(hub: HubProcess, method: str, path: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(hub.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start_replicas(tmp_path: Path, urls: dict[str, str]) -> dict[str, HubProcess]:
    """Two replicas, hub-a and hub-b, each on its own database URL (the same database)."""
    ports = {name: free_port() for name in urls}
    hubs: dict[str, HubProcess] = {}
    try:
        for name, port in ports.items():
            other = next(n for n in ports if n != name)
            hubs[name] = HubProcess(
                write_yaml(
                    tmp_path / f"{name}.yaml",
                    {
                        "server": {"grpcPort": 0, "httpPort": port, "replicaName": name},
                        "database": {"url": urls[name]},
                        "replicas": {
                            "cluster": "static",
                            "heartbeat": {"periodSeconds": 1},
                            "static": [{"id": other, "baseUrl": f"http://127.0.0.1:{ports[other]}"}],
                        },
                    },
                )
            )
    except BaseException:
        for hub in hubs.values():
            hub.stop()
        raise
    return hubs


def agent_on(tmp_path: Path, hub: HubProcess, kubesim) -> AgentProcess:
    """Agent `far` streaming account `sim` through `hub`."""
    return AgentProcess(
        write_yaml(
            tmp_path / "agent.yaml",
            {
                "agentId": "far",
                "kubernetes": {"accounts": [{"name": "sim", "kubeConfigFile": str(kubesim.admin(0))}]},
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
            },
        ),
        print_events=False,
    )


def test_the_replica_without_the_agent_answers_for_it(postgres_db, kubesim, tmp_path: Path) -> None:
    url = emptied(postgres_db)
    hubs = start_replicas(tmp_path, {"hub-a": url, "hub-b": url})
    agent = None
    try:
        a, b = hubs["hub-a"], hubs["hub-b"]
        agent = agent_on(tmp_path, b, kubesim)
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


def test_a_replica_cut_off_from_the_database_answers_503_for_an_account_it_does_not_hold(
    postgres_db, kubesim, tmp_path: Path
) -> None:
    """Issue 29: hub-a, without the account and without its database, answered 404 "not known to
    this hub" for a live account (and listed it). It cannot know where the account is: 503,
    naming the database, with a Retry-After; the answer comes back once the database does."""
    url = emptied(postgres_db)
    parts = urlsplit(url)
    database = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    credentials = parts.netloc.rpartition("@")[0]
    through_proxy = urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{database.port}"))
    hubs = start_replicas(tmp_path, {"hub-a": through_proxy, "hub-b": url})
    agent = None
    try:
        a, b = hubs["hub-a"], hubs["hub-b"]
        agent = agent_on(tmp_path, b, kubesim)
        a.wait_until("/api/v1/accounts/sim", lambda d: d["agentState"] == "watching", what="sim seen through hub-a")

        database.refusing = True  # hub-a's database goes away
        database.cut()
        deadline = time.monotonic() + 30
        while (answer := answered(a, "/api/v1/accounts/sim"))[0] == 200:  # hub-a's memory of where it is lapses
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)
        status, headers, body = answer
        assert status == 503, (status, body)
        assert "database" in body["error"] and "sim" in body["error"], body
        assert int(headers["Retry-After"]) > 0
        assert answered(a, "/api/v1/accounts/sim/objects?kind=ConfigMap")[0] == 503
        assert "sim" in [d["name"] for d in a.json("/api/v1/accounts")]  # hub-b still answers for it

        database.refusing = False
        a.wait_until("/api/v1/accounts/sim", lambda d: d["agentState"] == "watching", what="sim seen again")
    finally:
        if agent is not None:
            agent.stop()
        for hub in hubs.values():
            hub.stop()
        database.close()


def answered(hub: HubProcess, path: str) -> tuple[int, Any, Any]:
    """Status, headers and JSON body of a GET."""
    try:
        with urllib.request.urlopen(hub.url + path, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")

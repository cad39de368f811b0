"""The hub's database goes away for a few seconds at the moment an account becomes ACTIVE: the
write is tried again until the database answers, so the account does not stay ACTIVATING (it
did, for good, until the hub restarted)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "e2e"))
from e2e_stack import through  # noqa: E402
from helpers import AgentProcess, HubProcess, TcpProxy, write_yaml  # noqa: E402


def via(url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{proxy.port}" if credentials
                                     else f"127.0.0.1:{proxy.port}"))


@pytest.fixture(params=["postgresql", "mariadb"])
def database(request):
    url = request.getfixturevalue("postgres_db" if request.param == "postgresql" else "mariadb_db")
    parts = urlsplit(url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or (5432 if request.param == "postgresql" else 3306))
    yield via(url, proxy), proxy
    proxy.close()


def test_an_account_activated_during_a_database_outage_becomes_active_once_it_is_back(database, kubesim, tmp_path):
    db_url, db = database
    server = urlsplit(__import__("yaml").safe_load(kubesim.admin(1).read_text())["clusters"][0]["cluster"]["server"])
    cluster = TcpProxy(server.hostname or "127.0.0.1", server.port or 443)
    cluster.refusing = True  # the agent takes the account but cannot reach its cluster yet
    hub = HubProcess(write_yaml(tmp_path / "hub.yaml", {
        "server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": db_url},
        "dynamicAccounts": {"encryptionKey": Fernet.generate_key().decode(), "retryFrequencySeconds": 2}}))
    agent = AgentProcess(write_yaml(tmp_path / "agent.yaml", {
        "server": {"port": 0}, "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True}}),
        print_events=False)
    try:
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected")
        kubeconfig = through(kubesim.admin(1), cluster, tmp_path / "cluster.yaml")
        assert hub.post("/armory/accounts", [{"name": "dyn", "kubeconfigFile": str(kubeconfig),
                                              "kinds": ["Namespace"]}])[0] == 201
        assert hub_patch(hub, [{"name": "dyn", "state": "ACTIVE"}]) == 202
        hub.wait_until("/armory/accounts/dyn", lambda d: d["state"] == "ACTIVATING", what="ACTIVATING")

        db.refusing = True  # the database goes away...
        db.cut()
        cluster.refusing = False  # ...just as the agent reaches the cluster and reports it watched
        agent.wait_health(lambda d: any(a["name"] == "dyn" and a["state"] == "watching" for a in d["accounts"]),
                          what="the account watching")
        hub.wait_log(r"dynamic accounts: .*(described failed|trying again)", what="the failed write logged")
        db.refusing = False  # ...and comes back

        hub.wait_until("/armory/accounts/dyn", lambda d: d["state"] == "ACTIVE", timeout=60, what="ACTIVE")
    finally:
        agent.stop()
        hub.stop()
        cluster.close()


def hub_patch(hub: HubProcess, body: list) -> int:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(hub.url + "/armory/accounts", data=json.dumps(body).encode(), method="PATCH",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code

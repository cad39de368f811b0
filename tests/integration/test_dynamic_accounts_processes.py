"""The seeds' Dynamic Accounts requests, verbatim, against real processes: kubesim, a hub on each
database, and an agent that receives the accounts over the link and follows them."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from cryptography.fernet import Fernet
from kubernetes import client, config

from tests.helpers import AgentProcess, HubProcess, write_yaml
from tests.hub_harness import run_curl, seed_curl

SEED_ZONE = "agent-1_namespace1"


def in_cluster_env(kubesim, tmp_path: Path) -> dict[str, str]:
    """The agent's "own service account": kubesim cluster 0's limited token, as a pod would mount it."""
    limited = yaml.safe_load(kubesim.limited(0).read_text())
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(limited["users"][0]["user"]["token"])
    (sa / "ca.crt").write_bytes(base64.b64decode(limited["clusters"][0]["cluster"]["certificate-authority-data"]))
    host, port = limited["clusters"][0]["cluster"]["server"].removeprefix("https://").rsplit(":", 1)
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "SCALE_AGENT_SERVICE_ACCOUNT_DIR": str(sa),
    }


def kubeconfig_secret(kubesim) -> None:
    """account-02's kubeconfig (cluster 1) in the Secret the seeds' reference names, on cluster 0."""
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="spinnaker")))
    except client.ApiException as e:
        if e.status != 409:
            raise
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="kubeconfig"),
        data={"config": base64.b64encode(kubesim.admin(1).read_bytes()).decode()},
    )
    try:
        core.create_namespaced_secret("spinnaker", body)
    except client.ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_secret("kubeconfig", "spinnaker", body)


async def test_the_seeds_requests_bring_accounts_to_active_with_their_objects_cached(db_url, kubesim, tmp_path):
    kubeconfig_secret(kubesim)
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                # The seeds' curl names the hub by its Service, http://clouddriver:7002: a name
                # the hub answers only once it is in allowedHosts.
                "server": {"grpcPort": 0, "httpPort": 0, "allowedHosts": ["clouddriver"]},
                "database": {"url": db_url},
                "kubernetes": {"kubeconfigFile": str(kubesim.admin(0))},
                "dynamicAccounts": {"encryptionKey": Fernet.generate_key().decode()},
            },
        )
    )
    agent = None
    try:
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {
                    "zoneId": SEED_ZONE,
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
                },
            ),
            in_cluster_env(kubesim, tmp_path),
            print_events=False,
        )
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected")
        port = int(hub.url.rsplit(":", 1)[1])

        status, created = await run_curl(seed_curl("POST"), port)
        assert status == 201 and {a["state"] for a in created} == {"INACTIVE"}
        status, _ = await run_curl(seed_curl("PATCH"), port)
        assert status == 202

        accounts = hub.wait_until(
            "/armory/accounts",
            lambda d: {a["name"]: a["state"] for a in d} == {"account-01": "ACTIVE", "account-02": "ACTIVE"},
            what="both accounts ACTIVE",
        )
        assert {a["name"]: a["zoneId"] for a in accounts} == {"account-01": SEED_ZONE, "account-02": SEED_ZONE}
        one = hub.json("/agents/kubernetes/accounts/account-02")
        assert one["kubeHost"] == kubesim.urls[1]
        # Their objects are in the cache: account-02 through the Secret's kubeconfig (cluster 1),
        # account-01 through the agent's own service account (cluster 0's limited identity).
        assert hub.objects("account-02", "?kind=Namespace")  # ACTIVE is said after the snapshot's last batch
        info = hub.json("/api/v1/accounts/account-01")
        assert info["agentState"] == "watching" and info["apiHost"] == kubesim.urls[0] and info["objects"] > 0
        assert {a["name"] for a in agent.health()["accounts"]} == {"account-01", "account-02"}
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


async def test_an_account_whose_agent_is_gone_is_orphaned_and_comes_back_with_the_next_agent(db_url, kubesim, tmp_path):
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": db_url},
                "sessions": {"graceSeconds": 1},
                "dynamicAccounts": {
                    "encryptionKey": Fernet.generate_key().decode(),
                    "kubeconfigDirectories": [str(kubesim.kubeconfig_dir)],
                },
            },
        )
    )
    agents: list[AgentProcess] = []

    def agent() -> AgentProcess:
        a = AgentProcess(
            write_yaml(
                tmp_path / f"agent-{len(agents)}.yaml",
                {
                    "zoneId": "east",
                    "server": {"port": 0},
                    "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
                },
            ),
            print_events=False,
        )
        agents.append(a)
        a.wait_health(lambda d: d["hub"]["state"] == "connected", what="an agent connected")
        return a

    try:
        first = agent()
        port = int(hub.url.rsplit(":", 1)[1])
        body = [{"name": "dyn", "zoneId": "east", "kubeconfigFile": str(kubesim.admin(1)), "kinds": ["Namespace"]}]
        assert (await _call(port, "POST", body))[0] == 201
        assert (await _call(port, "PATCH", [{"name": "dyn", "state": "ACTIVE"}]))[0] == 202
        hub.wait_until("/agents/kubernetes/accounts/dyn", lambda d: d["state"] == "ACTIVE", what="ACTIVE")
        assert hub.objects("dyn", "?kind=Namespace")

        assert first.stop() == 0
        hub.wait_until("/agents/kubernetes/accounts/dyn", lambda d: d["state"] == "ORPHANED", what="ORPHANED")
        assert hub.objects("dyn") == []
        agent()  # a new agent of the zone: no manual step
        hub.wait_until("/agents/kubernetes/accounts/dyn", lambda d: d["state"] == "ACTIVE", what="ACTIVE again")
        hub.wait_until("/api/v1/accounts/dyn/objects?kind=Namespace", lambda d: d["items"], what="objects again")
    finally:
        for a in agents:
            a.stop()
        hub.stop()


async def _call(port: int, method: str, body) -> tuple[int, object]:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"http://127.0.0.1:{port}/armory/accounts", json=body) as r:
            return r.status, await r.json()


async def test_an_intercepted_account_management_request_becomes_an_active_account(db_url, kubesim, tmp_path):
    import aiohttp

    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": db_url},
                "dynamicAccounts": {
                    "encryptionKey": Fernet.generate_key().decode(),
                    "interceptor": {"enabled": True},
                    "kubeconfigDirectories": [str(kubesim.kubeconfig_dir)],
                },
            },
        )
    )
    agent = None
    try:
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {"server": {"port": 0}, "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True}},
            ),
            print_events=False,
        )
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected")
        body = {
            "type": "kubernetes",
            "name": "from-spinnaker",
            "kubeconfigFile": str(kubesim.admin(1)),
            "kinds": ["Namespace"],
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{hub.url}/credentials", json=body) as r:
                assert r.status == 200, await r.text()
        hub.wait_until("/agents/kubernetes/accounts/from-spinnaker", lambda d: d["state"] == "ACTIVE", what="ACTIVE")
        hub.wait_until("/api/v1/accounts/from-spinnaker/objects?kind=Namespace", lambda d: d["items"], what="objects")
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


async def test_an_unreachable_cluster_fails_with_the_reason_and_retries_stop_at_max_retries(db_url, kubesim, tmp_path):
    from tests.helpers import free_port

    unreachable = yaml.safe_load(kubesim.admin(0).read_text())
    unreachable["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    write_yaml(tmp_path / "closed.yaml", unreachable)
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": db_url},
                "dynamicAccounts": {
                    "encryptionKey": Fernet.generate_key().decode(),
                    "retryFrequencySeconds": 0.2,
                    "maxRetries": 2,
                    "kubeconfigDirectories": [str(tmp_path)],
                },
            },
        )
    )
    agent = None
    try:
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {"server": {"port": 0}, "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True}},
            ),
            print_events=False,
        )
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="the agent connected")
        port = int(hub.url.rsplit(":", 1)[1])
        assert (await _call(port, "POST", [{"name": "down", "kubeconfigFile": str(tmp_path / "closed.yaml")}]))[
            0
        ] == 201
        assert (await _call(port, "PATCH", [{"name": "down", "state": "ACTIVE"}]))[0] == 202
        hub.wait_log(r"account down FAILED \(failure 3\): .*no retries left", what="the last failure")
        row = hub.json("/agents/kubernetes/accounts/down")
        assert row["state"] == "FAILED" and row["failedCount"] == 3 and "connect" in row["errorMessage"].lower()
        assert len([line for line in hub.log if "account down: retrying" in line]) == 2
        # A manual PATCH to ACTIVE starts over.
        assert (await _call(port, "PATCH", [{"name": "down", "state": "ACTIVE"}]))[0] == 202
        hub.wait_until(
            "/agents/kubernetes/accounts/down",
            lambda d: d["failedCount"] in (0, 1) and d["state"] in ("TO_MIGRATE", "ACTIVATING", "FAILED"),
            what="the count reset",
        )
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()

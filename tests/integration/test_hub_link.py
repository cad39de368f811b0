"""kubesim -> agent -> hub, as a user runs them: real processes, loopback TLS, the hub's HTTP API."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.helpers import AgentProcess, HubProcess, free_port, make_hub_pki, write_yaml


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_hub_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def core(kubesim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin())))


@pytest.fixture
def namespace(core):
    name = f"hub-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def procs():
    started: list = []
    yield started
    for p in reversed(started):
        p.stop()


def start_hub(
    procs, tmp_path: Path, pki, *, mtls: bool = False, grace: float = 60, port: int = 0, **extra
) -> HubProcess:
    tls = {"certFile": str(pki.cert), "keyFile": str(pki.key)}
    if mtls:
        tls["clientCaFile"] = str(pki.ca)
    doc = {
        "server": {"grpcPort": port, "httpPort": 0},
        "tls": tls,
        "sessions": {"graceSeconds": grace},
        "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
        **extra,
    }
    hub = HubProcess(write_yaml(tmp_path / f"hub-{len(procs)}.yaml", doc))
    procs.append(hub)
    return hub


def start_agent(
    procs,
    tmp_path: Path,
    hub: HubProcess,
    pki,
    accounts: list[dict],
    *,
    client_cert=True,
    stranger=False,
    **clouddriver,
) -> AgentProcess:
    tls: dict = {"cacertFile": str(pki.ca)}
    if client_cert:
        tls |= (
            {"clientCertFile": str(pki.stranger_cert), "clientKeyFile": str(pki.stranger_key)}
            if stranger
            else {"clientCertFile": str(pki.client_cert), "clientKeyFile": str(pki.client_key)}
        )
    doc = {
        "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 1},
        "server": {"port": 0},
        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": tls, **clouddriver},
    }
    agent = AgentProcess(write_yaml(tmp_path / f"agent-{len(procs)}.yaml", doc), print_events=False)
    procs.append(agent)
    return agent


ROOT_CA = "kube-root-ca.crt"  # the cluster's own ConfigMap, in every namespace


def configmaps(hub: HubProcess, account: str, ns: str) -> dict[str, str]:
    """name -> resourceVersion of the ConfigMaps the hub holds for the account in the namespace
    (those the test made: not the cluster's kube-root-ca.crt)."""
    return {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in hub.objects(account, f"?kind=configmap&namespace={ns}")
        if o["metadata"]["name"] != ROOT_CA
    }


def kube_configmaps(core: client.CoreV1Api, ns: str) -> dict[str, str]:
    return {
        c.metadata.name: c.metadata.resource_version
        for c in core.list_namespaced_config_map(ns).items
        if c.metadata.name != ROOT_CA
    }


def converged(hub: HubProcess, core, account: str, ns: str, what: str) -> None:
    want = kube_configmaps(core, ns)
    hub.wait_until(
        f"/api/v1/accounts/{account}/objects?kind=ConfigMap&namespace={ns}",
        lambda doc: (
            {
                o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                for o in doc["items"]
                if o["metadata"]["name"] != ROOT_CA
            }
            == want
        ),
        what=what,
    )


def cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"app": "web"}), data=data)


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_objects_appear_change_and_vanish_in_the_hub(kubesim, core, namespace, procs, tmp_path, pki, mtls):
    hub = start_hub(procs, tmp_path, pki, mtls=mtls)
    account = {
        "name": "c0",
        "kubeConfigFile": str(kubesim.admin()),
        "namespaces": [namespace],
        "kinds": ["ConfigMap", "Secret"],
    }
    start_agent(procs, tmp_path, hub, pki, [account])
    core.create_namespaced_config_map(namespace, cm("one", k="v1"))
    hub.wait_until(
        f"/api/v1/accounts/c0/objects?kind=ConfigMap&namespace={namespace}&name=one",
        lambda d: [o["data"] for o in d["items"]] == [{"k": "v1"}],
        what="the new ConfigMap",
    )

    core.patch_namespaced_config_map("one", namespace, {"data": {"k": "v2"}})
    hub.wait_until(
        f"/api/v1/accounts/c0/objects?kind=configmap&namespace={namespace}&labelSelector=app%3Dweb",
        lambda d: [o["data"] for o in d["items"]] == [{"k": "v2"}],
        what="the modified ConfigMap",
    )

    core.delete_namespaced_config_map("one", namespace)
    hub.wait_until(
        f"/api/v1/accounts/c0/objects?kind=ConfigMap&namespace={namespace}&name=one",
        lambda d: d["items"] == [],
        what="the ConfigMap gone",
    )

    agents = hub.json("/armory/agents")
    assert [a["accounts"] for a in agents] == [["c0"]]
    (info,) = hub.json("/api/v1/accounts")
    assert info["state"] == "ACTIVE" and info["apiHost"] and info["certificateFingerprint"]
    assert info["serverVersion"] == "v1.30.0"


def test_secret_values_never_reach_the_hub(kubesim, core, namespace, procs, tmp_path, pki):
    hub = start_hub(procs, tmp_path, pki)
    start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [{"name": "s", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["Secret"]}],
    )
    value = "hunter2-" + uuid.uuid4().hex
    body = client.V1Secret(metadata=client.V1ObjectMeta(name="db"), string_data={"password": value})
    core.create_namespaced_secret(namespace, body)
    (secret,) = hub.wait_until(
        f"/api/v1/accounts/s/objects?kind=Secret&namespace={namespace}",
        lambda d: len(d["items"]) == 1,
        what="the Secret",
    )["items"]
    assert "data" not in secret and "stringData" not in secret
    encoded = base64.b64encode(value.encode()).decode()
    for path in ("/api/v1/accounts/s/objects", f"/manifests/s/{namespace}/secret%20db"):
        status, doc = hub.get(path)
        assert status == 200 and value not in str(doc) and encoded not in str(doc)


def test_the_manifest_endpoint_answers_in_clouddriver_shape(kubesim, core, namespace, procs, tmp_path, pki):
    hub = start_hub(procs, tmp_path, pki)
    start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [{"name": "m", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
    )
    body = cm("settings", a="b")
    body.metadata.annotations = {"moniker.spinnaker.io/application": "shop"}
    core.create_namespaced_config_map(namespace, body)
    hub.wait_until(
        "/api/v1/accounts/m/objects?application=shop",
        lambda d: len(d["items"]) == 1,
        what="the ConfigMap by application",
    )
    doc = hub.json(f"/manifests/m/{namespace}/configMap%20settings")
    assert doc["account"] == "m" and doc["name"] == "configmap settings" and doc["location"] == namespace
    assert doc["manifest"]["data"] == {"a": "b"} and doc["moniker"]["app"] == "shop"
    assert doc["status"]["stable"]["state"] is True
    status, missing = hub.get(f"/manifests/m/{namespace}/configmap%20nope")
    assert status == 404 and "nope" in missing["error"]


def test_an_agent_without_a_valid_client_certificate_is_refused_under_mtls(kubesim, namespace, procs, tmp_path, pki):
    hub = start_hub(procs, tmp_path, pki, mtls=True)
    good = start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [{"name": "good", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
    )
    good.wait_health(lambda d: d["hub"]["state"] == "connected", what="the good agent connected")
    for kind in ("none", "stranger"):
        bad = start_agent(
            procs,
            tmp_path,
            hub,
            pki,
            [
                {
                    "name": f"bad-{kind}",
                    "kubeConfigFile": str(kubesim.admin()),
                    "namespaces": [namespace],
                    "kinds": ["ConfigMap"],
                }
            ],
            client_cert=kind != "none",
            stranger=kind == "stranger",
        )
        bad.wait_health(
            lambda d: d["hub"]["state"] == "disconnected" and d["hub"].get("reason"), what="the refused agent's reason"
        )
    hub.wait_log(r"Handshake failed", what="the refused handshakes logged")
    assert [a["accounts"] for a in hub.json("/armory/agents")] == [["good"]]
    assert [a["name"] for a in hub.json("/api/v1/accounts")] == ["good"]


def test_a_hub_restart_converges_to_exactly_kubesims_state(kubesim, core, namespace, procs, tmp_path, pki):
    port = free_port()
    hub = start_hub(procs, tmp_path, pki, port=port)
    agent = start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [{"name": "r", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
    )
    for i in range(5):
        core.create_namespaced_config_map(namespace, cm(f"before-{i}", i=str(i)))
    converged(hub, core, "r", namespace, "the first sync")

    assert hub.stop() == 0
    agent.wait_health(lambda d: d["hub"]["state"] == "disconnected", what="the agent noticing the hub is gone")
    core.delete_namespaced_config_map("before-0", namespace)
    core.patch_namespaced_config_map("before-1", namespace, {"data": {"i": "changed"}})
    core.create_namespaced_config_map(namespace, cm("during", x="y"))

    hub = start_hub(procs, tmp_path, pki, port=port)
    converged(hub, core, "r", namespace, "convergence after the hub restart")
    assert hub.objects("r", f"?kind=ConfigMap&namespace={namespace}&name=before-1")[0]["data"] == {"i": "changed"}


def test_an_agent_restart_converges_without_phantoms(kubesim, core, namespace, procs, tmp_path, pki):
    hub = start_hub(procs, tmp_path, pki, grace=120)
    accounts = [
        {"name": "a", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}
    ]
    agent = start_agent(procs, tmp_path, hub, pki, accounts)
    for i in range(5):
        core.create_namespaced_config_map(namespace, cm(f"before-{i}"))
    converged(hub, core, "a", namespace, "the first sync")

    assert agent.stop() == 0
    hub.wait_until("/api/v1/accounts/a", lambda d: d["state"] == "DISCONNECTED", what="the account in grace")
    assert len(configmaps(hub, "a", namespace)) == 5, "still served from cache during the grace period"
    core.delete_namespaced_config_map("before-0", namespace)
    core.delete_namespaced_config_map("before-1", namespace)
    core.create_namespaced_config_map(namespace, cm("during"))

    start_agent(procs, tmp_path, hub, pki, accounts)
    converged(hub, core, "a", namespace, "convergence after the agent restart")
    assert hub.json("/api/v1/accounts/a")["state"] == "ACTIVE"


def test_after_the_grace_period_an_account_is_orphaned_and_leaves_the_cache(
    kubesim, core, namespace, procs, tmp_path, pki
):
    hub = start_hub(procs, tmp_path, pki, grace=1)
    agent = start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [{"name": "o", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
    )
    core.create_namespaced_config_map(namespace, cm("x"))
    converged(hub, core, "o", namespace, "the first sync")
    assert agent.stop() == 0
    hub.wait_until("/api/v1/accounts/o", lambda d: d["state"] == "ORPHANED", what="the account orphaned")
    assert hub.objects("o") == []
    hub.wait_log(r"account o: no agent came back within 1s; ORPHANED")


def test_the_multi_cluster_watch_streams_changes_of_every_account(kubesim, core, namespace, procs, tmp_path, pki):
    import json
    import urllib.request

    hub = start_hub(procs, tmp_path, pki)
    agent = start_agent(
        procs,
        tmp_path,
        hub,
        pki,
        [
            {
                "name": f"w{i}",
                "kubeConfigFile": str(kubesim.admin(i)),
                "namespaces": [namespace],
                "kinds": ["ConfigMap"],
            }
            for i in range(2)
        ],
    )
    other = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    other.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        agent.wait_health(
            lambda d: all(a["state"] == "watching" for a in d["accounts"]) and d["hub"]["state"] == "connected",
            what="both accounts watching",
        )
        stream = urllib.request.urlopen(f"{hub.url}/api/v1/watch?kind=ConfigMap&namespace={namespace}", timeout=30)
        core.create_namespaced_config_map(namespace, cm("from-0"))
        other.create_namespaced_config_map(namespace, cm("from-1"))
        core.delete_namespaced_config_map("from-0", namespace)
        seen = []
        event = ""
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                doc = json.loads(line[6:])
                if doc["name"] != ROOT_CA:
                    seen.append((event, doc["account"], doc["name"]))
                if len(seen) == 3:
                    break
        stream.close()
        assert sorted(seen) == sorted(
            [("ADDED", "w0", "from-0"), ("ADDED", "w1", "from-1"), ("DELETED", "w0", "from-0")]
        )
    finally:
        other.delete_namespace(namespace)


def test_insecure_skip_verify_connects_without_the_ca_and_agent_id_names_the_agent(
    kubesim, namespace, procs, tmp_path, pki
):
    hub = start_hub(procs, tmp_path, pki)
    doc = {
        "agentId": "east-1",
        "kubernetes": {
            "accounts": [
                {"name": "k", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}
            ]
        },
        "server": {"port": 0},
        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"insecureSkipVerify": True}},
    }
    agent = AgentProcess(write_yaml(tmp_path / "skip.yaml", doc), print_events=False)
    procs.append(agent)
    agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="a connection without the CA")
    assert [a["agentId"] for a in hub.json("/armory/agents")] == ["east-1"]


def test_a_restarted_hub_remembers_which_cluster_an_account_name_stands_for(kubesim, namespace, procs, tmp_path, pki):
    import sqlite3

    port = free_port()
    hub = start_hub(procs, tmp_path, pki, port=port)
    account = {"name": "p", "kubeConfigFile": str(kubesim.admin(0)), "namespaces": [namespace], "kinds": ["ConfigMap"]}
    agent = start_agent(procs, tmp_path, hub, pki, [account])
    hub.wait_until("/api/v1/accounts/p", lambda d: d["agentState"] == "watching", what="the account watching")
    assert agent.stop() == 0
    assert hub.stop() == 0
    with sqlite3.connect(tmp_path / "hub.db") as db:
        rows = db.execute("SELECT name, state, kube_host, agent_id FROM kubesvc_accounts").fetchall()
    assert rows == [("p", "ACTIVE", kubesim.urls[0], rows[0][3])] and rows[0][3]

    hub = start_hub(procs, tmp_path, pki, port=port)
    info = hub.json("/api/v1/accounts/p")
    assert info["state"] == "DISCONNECTED" and info["apiHost"] == kubesim.urls[0]
    imposter = start_agent(procs, tmp_path, hub, pki, [{**account, "kubeConfigFile": str(kubesim.admin(1))}])
    imposter.wait_health(
        lambda d: "already registered for another cluster" in d["accounts"][0].get("reason", ""),
        what="the other cluster refused after the restart",
    )
    assert imposter.stop() == 0
    start_agent(procs, tmp_path, hub, pki, [account])
    hub.wait_until("/api/v1/accounts/p", lambda d: d["state"] == "ACTIVE", what="the account back")


def test_an_agent_restarted_with_fewer_kinds_and_namespaces_leaves_no_phantoms(
    kubesim, core, namespace, procs, tmp_path, pki
):
    hub = start_hub(procs, tmp_path, pki)
    other_ns = namespace + "-b"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other_ns)))
    try:
        wide = {
            "name": "f",
            "kubeConfigFile": str(kubesim.admin()),
            "namespaces": [namespace, other_ns],
            "kinds": ["ConfigMap", "Secret"],
        }
        agent = start_agent(procs, tmp_path, hub, pki, [wide])
        for ns in (namespace, other_ns):
            core.create_namespaced_config_map(ns, cm("c"))
            core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s")))
        # Each namespace also holds the cluster's kube-root-ca.crt ConfigMap.
        hub.wait_until("/api/v1/accounts/f", lambda d: d["objects"] == 6, what="6 objects")
        assert agent.stop() == 0
        start_agent(procs, tmp_path, hub, pki, [{**wide, "namespaces": [namespace], "kinds": ["ConfigMap"]}])
        hub.wait_until(
            "/api/v1/accounts/f",
            lambda d: d["objectsByKind"] == {"ConfigMap": 2} and d["agentState"] == "watching",
            what="only what is still followed",
        )
        assert {o["metadata"]["namespace"] for o in hub.objects("f")} == {namespace}
    finally:
        core.delete_namespace(other_ns)


def test_an_account_state_change_reaches_the_hub_without_any_event(kubesim, namespace, procs, tmp_path, pki):
    import yaml

    from tests.helpers import TcpProxy

    hub = start_hub(procs, tmp_path, pki)
    proxy = TcpProxy("127.0.0.1", int(kubesim.urls[0].rsplit(":", 1)[1]))
    kubeconfig = yaml.safe_load(kubesim.admin().read_text())
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = write_yaml(tmp_path / "proxied.yaml", kubeconfig)
    try:
        start_agent(
            procs,
            tmp_path,
            hub,
            pki,
            [{"name": "e", "kubeConfigFile": str(proxied), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
        )
        hub.wait_until("/api/v1/accounts/e", lambda d: d["agentState"] == "watching", what="watching")
        proxy.refusing = True
        proxy.cut()
        info = hub.wait_until("/api/v1/accounts/e", lambda d: d["agentState"] == "error", what="the error reported")
        assert info["reason"]
    finally:
        proxy.close()


def test_errors_have_one_shape(procs, tmp_path, pki):
    hub = start_hub(procs, tmp_path, pki)
    assert hub.get("/nope") == (404, {"error": "Not Found", "status": 404})
    status, doc = hub.get("/api/v1/accounts/none/objects")
    assert status == 404 and "not known" in doc["error"]


def test_the_http_api_listens_on_its_own_address_when_given_one(procs, tmp_path, pki):
    hub = start_hub(
        procs, tmp_path, pki, server={"host": "127.0.0.1", "httpHost": "127.0.0.2", "grpcPort": 0, "httpPort": 0}
    )
    assert hub.url.startswith("http://127.0.0.2:") and hub.grpc_target.startswith("127.0.0.1:")
    assert hub.json("/ready") == {"ready": True}

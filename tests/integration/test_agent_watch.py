"""The agent's watch engine as a user runs it: real kubesim, real agent process, events on stdout."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.helpers import AgentProcess, TcpProxy, account_health, start_kubesim


def write_config(path: Path, accounts: list[dict], **top) -> Path:
    doc = {
        "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": top.pop("discovery", 1)},
        "server": {"port": 0},
        **top,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def namespace(kubesim):
    core = client.CoreV1Api(api(kubesim.admin()))
    name = f"ag-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def agent_factory(tmp_path):
    started: list[AgentProcess] = []

    def start(accounts: list[dict], env: dict[str, str] | None = None, **top) -> AgentProcess:
        agent = AgentProcess(write_config(tmp_path / f"agent-{len(started)}.yaml", accounts, **top), env)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        assert agent.stop() == 0, "\n".join(agent.stderr[-20:])


def is_(
    type_: str, kind: str | None = None, name: str | None = None, ns: str | None = None, account: str | None = None
):
    return lambda e: (
        e["type"] == type_
        and (kind is None or e["kind"] == kind)
        and (name is None or e["name"] == name)
        and (ns is None or e["namespace"] == ns)
        and (account is None or e["account"] == account)
    )


def test_every_listable_kind_is_snapshotted_then_changes_stream(kubesim, namespace, agent_factory):
    agent = agent_factory([{"name": "a0", "kubeConfigFile": str(kubesim.admin())}])
    health = agent.wait_health(lambda h: account_health(h, "a0")["state"] == "watching", what="watching")
    a0 = account_health(health, "a0")
    served = client.CoreV1Api(api(kubesim.admin())).get_api_resources().resources
    core_kinds = {r.kind for r in served if "/" not in r.name and {"list", "watch"} <= set(r.verbs)}
    assert core_kinds <= set(a0["kinds"])
    assert {"Deployment.apps", "Job.batch", "CustomResourceDefinition.apiextensions.k8s.io"} <= set(a0["kinds"])
    assert a0["host"].startswith("https://127.0.0.1:") and len(a0["certificateFingerprint"]) == 95
    assert a0["serverVersion"] == "v1.30.0"
    for kind in ("Namespace", "ConfigMap", "Deployment"):
        agent.wait_for(is_("SNAPSHOT_END", kind), what=f"{kind} snapshot")

    core = client.CoreV1Api(api(kubesim.admin()))
    created = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"k": "v1"})
    )
    added = agent.wait_for(is_("ADDED", "ConfigMap", "cfg", namespace))
    assert added["uid"] == created.metadata.uid and added["resourceVersion"] == created.metadata.resource_version
    assert added["account"] == "a0" and added["group"] == "" and added["version"] == "v1"
    assert added["object"]["data"] == {"k": "v1"}
    core.patch_namespaced_config_map("cfg", namespace, {"data": {"k": "v2"}})
    assert agent.wait_for(is_("MODIFIED", "ConfigMap", "cfg", namespace))["object"]["data"] == {"k": "v2"}
    core.delete_namespaced_config_map("cfg", namespace)
    agent.wait_for(is_("DELETED", "ConfigMap", "cfg", namespace))


def test_kind_and_namespace_filters(kubesim, namespace, agent_factory):
    core = client.CoreV1Api(api(kubesim.admin()))
    other = f"{namespace}-x"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    agent = agent_factory(
        [
            {
                "name": "only",
                "kubeConfigFile": str(kubesim.admin()),
                "kinds": ["configmap", "Deployment.apps"],
                "namespaces": [namespace],
            },
            {
                "name": "omit",
                "kubeConfigFile": str(kubesim.admin()),
                "omitKinds": ["Event", "ConfigMap"],
                "omitNamespaces": [other],
            },
        ]
    )
    h = agent.wait_health(lambda h: all(a["state"] == "watching" for a in h["accounts"]), what="both watching")
    assert account_health(h, "only")["kinds"] == ["ConfigMap", "Deployment.apps"]
    omit = account_health(h, "omit")["kinds"]
    assert "ConfigMap" not in omit and "Event" not in omit and "Secret" in omit
    for ns in (namespace, other):
        core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s")))
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    agent.wait_for(is_("ADDED", "ConfigMap", "c", namespace, account="only"))
    agent.wait_for(is_("ADDED", "Secret", "s", namespace, account="omit"))
    # A marker written after everything above: once it is seen, the earlier events would have been too.
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="z")))
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="z")))
    agent.wait_for(is_("ADDED", "ConfigMap", "z", namespace, account="only"))
    agent.wait_for(is_("ADDED", "Secret", "z", namespace, account="omit"))
    assert agent.count(lambda e: e["account"] == "only" and e["namespace"] == other) == 0
    assert agent.count(lambda e: e["account"] == "only" and e["kind"] not in ("ConfigMap", "Deployment")) == 0
    assert agent.count(lambda e: e["account"] == "omit" and e["namespace"] == other and e["type"] == "ADDED") == 0
    assert agent.count(lambda e: e["account"] == "omit" and e["kind"] == "ConfigMap") == 0
    core.delete_namespace(other)


def test_a_crd_created_while_running_is_followed(kubesim, namespace, agent_factory):
    agent = agent_factory([{"name": "crd", "kubeConfigFile": str(kubesim.admin())}])
    agent.wait_health(lambda h: account_health(h, "crd")["state"] == "watching", what="watching")
    group = f"g{uuid.uuid4().hex[:6]}.example.com"
    ext = client.ApiextensionsV1Api(api(kubesim.admin()))
    ext.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"gadgets.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "gadgets", "kind": "Gadget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        }
    )
    try:
        agent.wait_for(is_("SNAPSHOT_END", "Gadget"), what="a snapshot of the new kind")
        client.CustomObjectsApi(api(kubesim.admin())).create_namespaced_custom_object(
            group,
            "v1",
            namespace,
            "gadgets",
            {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"n": 1}},
        )
        event = agent.wait_for(is_("ADDED", "Gadget", "g1", namespace))
        assert event["group"] == group and event["object"]["spec"] == {"n": 1}
    finally:
        ext.delete_custom_resource_definition(f"gadgets.{group}")


def _proxied_kubeconfig(src: Path, dst: Path, port: int) -> Path:
    cfg = yaml.safe_load(src.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dst.write_text(yaml.safe_dump(cfg))
    return dst


def test_a_cut_stream_resumes_and_a_compacted_one_relists(tmp_path, agent_factory):
    sim = start_kubesim(tmp_path / "kc", "--watch-history", "20")
    try:
        port = int(sim.urls[0].rsplit(":", 1)[1])
        proxy = TcpProxy("127.0.0.1", port)
        kubeconfig = _proxied_kubeconfig(sim.admin(), tmp_path / "proxied.yaml", proxy.port)
        agent = agent_factory([{"name": "p", "kubeConfigFile": str(kubeconfig), "kinds": ["ConfigMap"]}])
        agent.wait_health(lambda h: account_health(h, "p")["state"] == "watching", what="watching")
        core = client.CoreV1Api(api(sim.admin()))
        snapshots = lambda: agent.count(is_("SNAPSHOT_BEGIN", "ConfigMap"))  # noqa: E731
        assert snapshots() == 1

        proxy.cut()  # a network blip: the watch resumes from its last version
        core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after-cut")))
        agent.wait_for(is_("ADDED", "ConfigMap", "after-cut"))
        assert snapshots() == 1

        proxy.refusing = True  # a longer outage, while more changes than the history holds happen
        proxy.cut()
        for i in range(30):
            core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"m{i}")))
        core.delete_namespaced_config_map("after-cut", "default")
        proxy.refusing = False
        agent.wait_for(
            lambda e: e["type"] == "SNAPSHOT_BEGIN" and agent.count(is_("SNAPSHOT_BEGIN")) >= 2,
            what="a second snapshot",
        )
        end = agent.wait_for(lambda e: e["type"] == "SNAPSHOT_END" and agent.count(is_("SNAPSHOT_END")) >= 2)
        # The fresh snapshot holds exactly what exists now: the missed deletion shows as absence.
        begin_index = max(i for i, e in enumerate(agent.events) if e["type"] == "SNAPSHOT_BEGIN")
        end_index = agent.events.index(end)
        listed = {e["name"] for e in agent.events[begin_index:end_index] if e["type"] == "ADDED"}
        assert {f"m{i}" for i in range(30)} <= listed and "after-cut" not in listed
        proxy.close()
    finally:
        sim.stop()


def test_the_limited_identity_skips_and_reports_what_it_may_not_read(kubesim, agent_factory):
    agent = agent_factory(
        [
            {"name": "cluster-wide", "kubeConfigFile": str(kubesim.limited())},
            {
                "name": "team",
                "kubeConfigFile": str(kubesim.limited()),
                "namespaces": ["team-a"],
                "onlyNamespacedResources": True,
            },
        ]
    )
    h = agent.wait_health(lambda h: all(a["state"] == "watching" for a in h["accounts"]), what="both watching")
    wide, team = account_health(h, "cluster-wide"), account_health(h, "team")
    # Not readable cluster-wide, but in default (view) and team-a: followed there, one watch each.
    assert {"Namespace", "ConfigMap", "Pod", "Deployment.apps"} <= set(wide["kinds"])
    assert "followed in the namespaces it may read: default, team-a" in wide["skipped"]["ConfigMap"]
    assert "ConfigMap in team-a" not in wide["skipped"]
    # Secrets: readable nowhere (view leaves them out), so still skipped, saying why.
    assert "not allowed to list secrets cluster-wide" in wide["skipped"]["Secret"]
    assert "Secret" not in wide["kinds"]
    assert {"ConfigMap", "Deployment.apps", "Pod", "Job.batch"} <= set(team["kinds"])
    assert "Secret in team-a" in team["skipped"]
    assert "Namespace" not in team["kinds"]


def test_secret_values_never_reach_the_sink(kubesim, namespace, agent_factory, tmp_path):
    agent = agent_factory([{"name": "s", "kubeConfigFile": str(kubesim.admin()), "kinds": ["Secret"]}])
    agent.wait_health(lambda h: account_health(h, "s")["state"] == "watching", what="watching")
    plain = f"hunter-{uuid.uuid4().hex}"
    manifest = tmp_path / "secret.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "namespace": namespace},
                "stringData": {"password": plain},
            }
        )
    )
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kubesim.admin()), "apply", "-f", str(manifest)], check=True, capture_output=True
    )
    client.CoreV1Api(api(kubesim.admin())).patch_namespaced_secret(
        "db", namespace, {"metadata": {"labels": {"x": "y"}}}
    )
    event = agent.wait_for(is_("MODIFIED", "Secret", "db", namespace))
    assert "data" not in event["object"] and "stringData" not in event["object"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in event["object"]["metadata"].get("annotations", {})
    encoded = base64.b64encode(plain.encode()).decode()
    everything = repr(agent.events)
    assert plain not in everything and encoded not in everything


def test_a_broken_account_reports_why_while_the_others_keep_working(kubesim, namespace, agent_factory, tmp_path):
    other_ca = start_kubesim(tmp_path / "other")
    try:
        good = yaml.safe_load(kubesim.admin().read_text())
        wrong_ca = yaml.safe_load(other_ca.admin().read_text())
        wrong_ca["clusters"][0]["cluster"]["server"] = good["clusters"][0]["cluster"]["server"]
        (tmp_path / "wrong-ca.yaml").write_text(yaml.safe_dump(wrong_ca))
        bad_token = yaml.safe_load(kubesim.limited().read_text())
        bad_token["users"][0]["user"]["token"] = "expired-or-revoked"
        (tmp_path / "bad-token.yaml").write_text(yaml.safe_dump(bad_token))
        closed = yaml.safe_load(kubesim.admin().read_text())
        closed["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
        (tmp_path / "closed.yaml").write_text(yaml.safe_dump(closed))
        agent = agent_factory(
            [
                {"name": "good", "kubeConfigFile": str(kubesim.admin()), "kinds": ["ConfigMap"]},
                {"name": "missing", "kubeConfigFile": str(tmp_path / "nope.yaml")},
                {"name": "unreachable", "kubeConfigFile": str(tmp_path / "closed.yaml")},
                {"name": "bad-cert", "kubeConfigFile": str(tmp_path / "wrong-ca.yaml")},
                {"name": "bad-token", "kubeConfigFile": str(tmp_path / "bad-token.yaml")},
            ]
        )
        h = agent.wait_health(
            lambda h: (
                account_health(h, "good")["state"] == "watching"
                and all(
                    account_health(h, n)["state"] == "error"
                    for n in ("missing", "unreachable", "bad-cert", "bad-token")
                )
            ),
            what="one good account and four errors",
        )
        assert "does not exist" in account_health(h, "missing")["reason"]
        assert "cannot connect to https://127.0.0.1:9" in account_health(h, "unreachable")["reason"]
        assert "cannot verify the TLS certificate" in account_health(h, "bad-cert")["reason"]
        assert "401" in account_health(h, "bad-token")["reason"]
        client.CoreV1Api(api(kubesim.admin())).create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="still-flowing"))
        )
        agent.wait_for(is_("ADDED", "ConfigMap", "still-flowing", namespace, account="good"))
        assert h["status"] == "degraded"
    finally:
        other_ca.stop()


def test_in_cluster_service_account_and_exec_plugin_credentials(kubesim, agent_factory, tmp_path):
    limited = yaml.safe_load(kubesim.limited().read_text())
    token = limited["users"][0]["user"]["token"]
    server = limited["clusters"][0]["cluster"]["server"]
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(base64.b64decode(limited["clusters"][0]["cluster"]["certificate-authority-data"]))
    plugin = tmp_path / "token-plugin.py"
    plugin.write_text(
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        f"'kind': 'ExecCredential', 'status': {{'token': {token!r}}}}}))\n"
    )
    limited["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    (tmp_path / "exec.yaml").write_text(yaml.safe_dump(limited))
    host, port = server.removeprefix("https://").rsplit(":", 1)
    agent = agent_factory(
        [
            {"name": "in-cluster", "serviceAccount": True, "namespaces": ["team-a"], "kinds": ["ConfigMap"]},
            {
                "name": "exec",
                "kubeConfigFile": str(tmp_path / "exec.yaml"),
                "namespaces": ["team-a"],
                "kinds": ["ConfigMap"],
            },
        ],
        env={
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "SCALE_AGENT_SERVICE_ACCOUNT_DIR": str(sa),
        },
    )
    h = agent.wait_health(lambda h: all(a["state"] == "watching" for a in h["accounts"]), what="both watching")
    assert all(a["kinds"] == ["ConfigMap"] for a in h["accounts"])


def test_a_bad_config_file_is_refused_with_the_key_and_file_named(tmp_path):
    bad = tmp_path / "agent.yml"
    bad.write_text("kubernetes:\n  accounts:\n    - name: a\n      kubeconfig: /x\n")
    result = subprocess.run(
        [sys.executable, "-m", "scaleagent.cli", "agent", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "agent.yml" in result.stderr and "kubernetes.accounts[0].kubeconfig" in result.stderr
    assert "Traceback" not in result.stderr


def test_watches_that_keep_failing_put_the_account_in_error_until_they_recover(kubesim, agent_factory, tmp_path):
    port = int(kubesim.urls[0].rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port)
    kubeconfig = _proxied_kubeconfig(kubesim.admin(), tmp_path / "proxied.yaml", proxy.port)
    agent = agent_factory([{"name": "flaky", "kubeConfigFile": str(kubeconfig), "kinds": ["ConfigMap"]}], discovery=600)
    agent.wait_health(lambda h: account_health(h, "flaky")["state"] == "watching", what="watching")
    proxy.refusing = True
    proxy.cut()
    h = agent.wait_health(lambda h: account_health(h, "flaky")["state"] == "error", what="an error state")
    assert "watch of ConfigMap keeps failing" in account_health(h, "flaky")["reason"]
    proxy.refusing = False
    agent.wait_health(lambda h: account_health(h, "flaky")["state"] == "watching", what="recovery", timeout=90)
    proxy.close()

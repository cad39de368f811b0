"""What an operator reads to know how current the hub's picture is, against real processes: per
account and kind, when the newest event arrived and whether its watch is established (the API and
/metrics), the change-to-cache latency the agent's stamp allows, operation round trips, HTTP
latency, and dynamic accounts counted in every lifecycle state."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from kubernetes import client, config

from tests.e2e.e2e_stack import through
from tests.helpers import AgentProcess, HubProcess, TcpProxy, write_yaml


@pytest.fixture(scope="module")
def stack(kubesim, tmp_path_factory):
    """A hub with dynamic accounts, and an agent with two static accounts: `direct` (cluster 0)
    and `proxied` (cluster 1, through a proxy the test can cut)."""
    tmp: Path = tmp_path_factory.mktemp("freshness")
    port = int(kubesim.urls[1].rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port)
    hub = HubProcess(
        write_yaml(
            tmp / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                "dynamicAccounts": {"encryptionKey": Fernet.generate_key().decode(), "kubeconfigDirectories": ["/"]},
            },
        )
    )
    agent = AgentProcess(
        write_yaml(
            tmp / "agent.yaml",
            {
                "kubernetes": {
                    "accounts": [
                        {
                            "name": "direct",
                            "kubeConfigFile": str(kubesim.admin(0)),
                            "kinds": ["ConfigMap", "Deployment"],
                        },
                        {
                            "name": "proxied",
                            "kubeConfigFile": str(through(kubesim.admin(1), proxy, tmp / "proxied.yaml")),
                            "kinds": ["ConfigMap"],
                        },
                    ]
                },
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
            },
        ),
        print_events=False,
    )
    try:
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: sorted(a["name"] for a in d if a["agentState"] == "watching") == ["direct", "proxied"],
            what="both accounts watching",
        )
        yield hub, proxy, agent
    finally:
        agent.stop()
        hub.stop()
        proxy.close()


def account(hub: HubProcess, name: str) -> dict:
    return next(a for a in hub.json("/api/v1/accounts") if a["name"] == name)


def metrics(hub: HubProcess) -> str:
    with urllib.request.urlopen(hub.url + "/metrics", timeout=10) as r:
        return r.read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series, or None when the hub does not export it."""
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
    return None


def test_every_watched_kind_is_established_and_a_new_object_makes_its_kind_fresh(stack, kubesim):
    hub, _, _ = stack
    fresh = account(hub, "direct")["freshness"]
    assert fresh["watches"] == 2 and fresh["watchesEstablished"] == 2
    assert set(fresh["kinds"]) == {"ConfigMap", "Deployment.apps"}
    assert all(k["watching"] for k in fresh["kinds"].values())

    before = time.time()
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="fresh-cm")))

    def seen(d: list) -> bool:
        kinds = next(a for a in d if a["name"] == "direct")["freshness"]["kinds"]
        at = kinds["ConfigMap"]["lastEventAt"]
        return at is not None and _epoch(at) >= before - 0.001

    hub.wait_until("/api/v1/accounts", seen, what="the ConfigMap's event in the cache")
    # The change came from a watch, stamped by the agent: the latency histogram counted it.
    text = metrics(hub)
    assert (sample(text, "scale_agent_hub_change_to_cache_seconds_count") or 0) >= 1
    assert sample(text, "scale_agent_hub_account_watches_established", account="direct") == 2.0
    assert sample(text, "scale_agent_hub_account_last_event_age_seconds", account="direct") is not None
    stats = hub.json("/api/v1/stats")
    assert stats["changeToCacheSeconds"]["count"] >= 1 and stats["changeToCacheSeconds"]["p50"] is not None
    assert stats["events"] >= 1 and stats["watches"] == 3


def test_a_kind_whose_watch_is_down_is_shown_not_watching_until_it_is_back(stack):
    hub, proxy, _ = stack
    proxy.refusing = True
    proxy.cut()  # the cluster is unreachable: the watch retries, and the hub's copy may fall behind
    try:
        hub.wait_until(
            "/api/v1/accounts",
            lambda d: not next(a for a in d if a["name"] == "proxied")["freshness"]["kinds"]["ConfigMap"]["watching"],
            what="proxied's ConfigMap watch shown down",
        )
        assert sample(metrics(hub), "scale_agent_hub_account_watches_established", account="proxied") == 0.0
        assert account(hub, "direct")["freshness"]["watchesEstablished"] == 2  # the other cluster is unaffected
    finally:
        proxy.refusing = False
    hub.wait_until(
        "/api/v1/accounts",
        lambda d: next(a for a in d if a["name"] == "proxied")["freshness"]["watchesEstablished"] == 1,
        what="proxied's watch established again",
    )


def test_operations_http_requests_and_failed_dynamic_accounts_are_measured(stack, tmp_path):
    hub, _, _ = stack
    done = hub.run_task(
        [
            {
                "deployManifest": {
                    "account": "direct",
                    "manifests": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "op-cm", "namespace": "default"}}
                    ],
                }
            }
        ]
    )
    assert done["state"] == "completed", done
    status, _ = hub.post("/armory/accounts", [{"name": "broken", "kubeconfigFile": str(tmp_path / "missing.yaml")}])
    assert status == 201
    request = urllib.request.Request(
        hub.url + "/armory/accounts",
        data=json.dumps([{"name": "broken", "state": "ACTIVE"}]).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 202
    hub.wait_until("/armory/accounts/broken", lambda d: d["state"] == "FAILED", what="the account FAILED")

    # A method HTTP does not define is one series, whatever it is called: callers cannot mint series.
    # httptools 0.9 and later refuse such a request in the parser (400) before the app sees it;
    # h11 and older httptools hand it to the app, which counts it as "other".
    codes = []
    for verb in ("M1", "M2"):
        odd = urllib.request.Request(hub.url + "/api/v1/accounts", method=verb)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(odd, timeout=10)
        codes.append(refused.value.code)
    text = metrics(hub)
    assert "M1" not in text and "M2" not in text
    reached_the_app = sum(1 for code in codes if code != 400)
    assert (sample(text, "scale_agent_hub_http_request_seconds_count", method="other") or 0) == reached_the_app
    assert (
        sample(text, "scale_agent_hub_operation_seconds_count", type="deployManifest", outcome="succeeded") or 0
    ) >= 1
    assert (
        sample(text, "scale_agent_hub_http_request_seconds_count", method="GET", route="/api/v1/accounts", status="200")
        or 0
    ) >= 1
    assert sample(text, "scale_agent_hub_account_lifecycle", state="FAILED") == 1.0
    assert sample(text, "scale_agent_hub_account_lifecycle", state="TO_DEACTIVATE") == 0.0
    assert sample(text, "scale_agent_hub_database_up") == 1.0


MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"


def exposed(text: str) -> set[str]:
    """The series names a /metrics page can have: each family's, with a histogram's parts."""
    names = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = kind_line
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}_{part}" for part in ("bucket", "count", "sum"))
        if kind == "counter":
            names.add(f"{name}_total")
    return names


def test_every_metric_the_alerts_and_the_grafana_dashboard_use_exists(stack):
    hub, _, agent = stack
    with urllib.request.urlopen(agent.health_url() + "/metrics", timeout=10) as r:
        available = exposed(metrics(hub)) | exposed(r.read().decode())
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert all(
        rule.get("alert") and rule.get("annotations", {}).get("summary") for g in rules["groups"] for rule in g["rules"]
    )
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    expressions += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in expressions for name in re.findall(r"\bscale_agent_[a-z_]+", expr)}
    assert used, "no metric found in the monitoring files"
    assert sorted(used - available) == []


def _epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()

"""Armory's agent options and admin surface, held with real processes: a token from a program
(`clouddriver.auth.tokenCommand`) that the hub accepts, `clouddriver.noProxy` with a dead proxy in
the environment, an account's `insecure` with a kubeconfig that has no CA, JSON log lines, the
`prometheus.port` listener, the admin endpoints (`/accounts`, `/watches`, `/operations`) and
Armory's metric names.

One kubesim, one hub and one agent for the whole module (they take a few seconds to start).
"""

from __future__ import annotations

import json
import stat
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.helpers import AgentProcess, start_kubesim, tls_hub, write_yaml

TOKEN = "tok-" + uuid.uuid4().hex


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _json(url: str) -> dict:
    status, body = _get(url)
    assert status == 200, (url, status, body)
    return json.loads(body)


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.sim = start_kubesim(tmp / "kc")
        try:
            self.hub, pki = tls_hub(tmp, auth={"token": TOKEN})
            # The program prints the token as JSON and counts its runs in a file (never the token).
            self.runs = tmp / "runs"
            script = tmp / "get-token"
            script.write_text(
                f"#!{sys.executable}\n"
                "import json, sys\n"
                "with open(sys.argv[1], 'a') as f:\n"
                "    f.write('run\\n')\n"
                f"print(json.dumps({{'token': {TOKEN!r}, 'expiresIn': 60}}))\n"
            )
            script.chmod(script.stat().st_mode | stat.S_IXUSR)
            self.log_file = tmp / "logs" / "agent.log"
            # The same cluster through a kubeconfig without its CA: only `insecure` lets it connect.
            kubeconfig = yaml.safe_load(self.sim.admin(0).read_text())
            del kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
            no_ca = write_yaml(tmp / "no-ca.yaml", kubeconfig)
            config = write_yaml(
                tmp / "armory-agent.yml",
                {
                    "agentId": "armory-style-agent",
                    "kubernetes": {
                        "accounts": [
                            {"name": "sim", "kubeConfigFile": str(self.sim.admin(0))},
                            {"name": "sim-insecure", "kubeConfigFile": str(no_ca), "insecure": True, "kinds": ["Pod"]},
                        ],
                        "retries": {"maxRetries": 2, "backOffMs": 100},
                    },
                    "server": {"port": 0},
                    "prometheus": {"enabled": True, "port": 0},
                    "logging": {
                        "format": "json",
                        "level": "debug",
                        "file": str(self.log_file),
                        "multiWrite": True,
                        "fields": {"agentCluster": "ci"},
                    },
                    "clouddriver": {
                        "grpc": f"localhost:{self.hub.grpc_port}",
                        "tls": {"cacertFile": str(pki.ca)},
                        "noProxy": True,
                        "auth": {"tokenCommand": {"command": str(script), "args": [str(self.runs)], "format": "json"}},
                        "backoff": {"baseDelay": 100_000_000, "maxDelay": 1_000_000_000},
                    },
                },
            )
            # A proxy that is not there: gRPC would go through it, were noProxy not honoured.
            dead = "http://127.0.0.1:9"
            proxies = {"grpc_proxy": dead, "https_proxy": dead, "http_proxy": dead, "no_proxy": "", "NO_PROXY": ""}
            self.agent = AgentProcess(config, proxies, print_events=False)
        except BaseException:
            self.sim.stop()
            raise
        self.health = self.agent.health_url()
        self.agent.wait_health(
            lambda d: d["hub"]["state"] == "connected" and d["status"] == "ok", what="connected and watching"
        )
        line = self.agent.wait_log(r"metrics on http://", what="the metrics address")
        self.metrics = line.split("metrics on ", 1)[1].strip().removesuffix("/metrics")

    def stop(self) -> None:
        self.agent.stop()
        self.hub.stop()
        self.sim.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("armory"))
    try:
        yield s
    finally:
        s.stop()


def test_the_token_comes_from_the_program_and_the_hub_accepts_it(stack):
    assert stack.agent.health()["hub"]["state"] == "connected"
    assert stack.runs.read_text().count("run") >= 1
    agents = stack.hub.json("/armory/agents")
    assert [a["agentId"] for a in agents] == ["armory-style-agent"]


def test_the_token_is_never_logged(stack):
    assert not any(TOKEN in line for line in stack.agent.stderr)
    assert TOKEN not in stack.log_file.read_text()


def test_log_lines_are_json_with_the_configured_fields_on_stderr_and_in_the_file(stack):
    logged = [line for line in stack.agent.stderr if line.startswith("{")]
    assert logged, stack.agent.stderr[-10:]
    file_lines = stack.log_file.read_text().splitlines()
    assert file_lines
    for line in logged + file_lines:
        doc = json.loads(line)
        assert {"time", "level", "logger", "msg"} <= doc.keys()
        assert doc["agentCluster"] == "ci"
        assert doc["level"] in ("debug", "info", "warning", "error", "critical")
    assert any(json.loads(line)["level"] == "debug" for line in file_lines)  # level: debug applies
    # Only the lines before the file was read (none here) and the CLI's own prints are not JSON.
    assert all(line.startswith("{") or line.startswith("scale-agent agent:") for line in stack.agent.stderr)


@pytest.mark.parametrize("path", ["/metrics", "/prometheus_metrics"])
def test_the_prometheus_port_serves_armorys_names_beside_ours(stack, path):
    assert stack.metrics.startswith("http://127.0.0.1:")  # loopback, as server.host
    status, body = _get(stack.metrics + path)
    assert status == 200
    text = body.decode()
    for name in (
        "kubesvc_connection_count 1.0",
        "kubesvc_disconnection_total 0.0",
        "kubesvc_events_sent_total",
        "kubesvc_events_bytes_sent_total",
        "kubesvc_kubernetes_requests ",
        "kubesvc_watches",
        "kubesvc_resource_agent_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "scale_agent_hub_connects_total 1.0",
    ):
        assert name in text, name
    sent = _metric(text, "kubesvc_events_sent_total")
    assert sent > 0 and _metric(text, "kubesvc_events_bytes_sent_total") > sent
    assert _metric(text, "kubesvc_kubernetes_requests") > 0
    assert "# TYPE kubesvc_connection_count untyped" in text  # Armory's exact name, no _total
    assert _metric(text, "kubesvc_watches") == _metric(text, "kubesvc_resource_agent_total") > 0


def _metric(text: str, name: str) -> float:
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " "))


def test_the_health_port_serves_the_same_metrics_and_the_prometheus_port_nothing_else(stack):
    status, body = _get(stack.health + "/metrics")
    assert status == 200 and b"kubesvc_watches" in body
    assert _get(stack.metrics + "/accounts")[0] == 404


def test_accounts_with_armorys_filters_and_paging(stack):
    doc = _json(stack.health + "/accounts")
    assert (doc["total"], doc["limit"], doc["offset"]) == (2, 100, 0)
    item, insecure = doc["items"]
    assert insecure["name"] == "sim-insecure" and insecure["state"] == "watching"  # `insecure` honoured
    assert item["Config"] == {"Name": "sim", "Dynamic": False}
    assert item["State"]["Name"] == "Healthy" and item["state"] == "watching"
    assert item["kinds"]
    assert _json(stack.health + "/accounts?Config.Name=s*&State.Name=Healthy")["total"] == 2
    assert _json(stack.health + "/accounts?Config.Name=*insecure")["total"] == 1
    assert _json(stack.health + "/accounts?Config.Dynamic=true")["items"] == []
    assert [a["name"] for a in _json(stack.health + "/accounts?limit=1&offset=1")["items"]] == ["sim-insecure"]
    status, body = _get(stack.health + "/accounts?limit=zero")
    assert status == 400
    assert json.loads(body)["error"] == "query parameter limit='zero': expected a whole number from 1 to 10000"


def test_watches_say_each_watch_with_its_state_version_and_last_event(stack):
    doc = _json(stack.health + "/watches")
    assert doc["total"] == len(doc["items"]) > 0 and doc["byState"] == {"watching": doc["total"]}
    for w in doc["items"]:
        assert w["account"] in ("sim", "sim-insecure") and w["state"] == "watching" and w["resourceVersion"]
        assert {"kind", "namespace", "scope", "lastEventAt", "failures"} <= w.keys()
    kinds = {w["kind"] for w in doc["items"]}
    assert "ConfigMap" in kinds and "Namespace" in kinds
    namespaces = next(w for w in doc["items"] if w["kind"] == "Namespace")
    assert namespaces["scope"] == "cluster"


def test_operations_show_what_ran(stack):
    name = "armory-" + uuid.uuid4().hex[:8]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}
    task = stack.hub.run_task([{"deployManifest": {"account": "sim", "manifests": [cm]}}])
    assert task["state"] == "completed", task
    doc = _json(stack.health + "/operations")
    assert doc["inFlight"] == []
    mine = [o for o in doc["recent"] if o["type"] == "deployManifest" and o["status"] == "succeeded"]
    assert mine and mine[0]["account"] == "sim" and mine[0]["endedAt"] >= mine[0]["startedAt"]
    assert doc["counts"]["succeeded"] >= 1
    # The watch of ConfigMaps saw the change: its last event time is set.
    watches = _json(stack.health + "/watches")["items"]
    assert any(w["kind"] == "ConfigMap" and w["lastEventAt"] for w in watches)


def test_an_armory_annotation_asking_for_client_side_apply_fails_the_deploy_naming_it(stack):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "csa-" + uuid.uuid4().hex[:8],
            "namespace": "default",
            "annotations": {"agent-k8s.armory.io/serverside-apply": "disabled"},
        },
    }
    task = stack.hub.run_task([{"deployManifest": {"account": "sim", "manifests": [cm]}}])
    assert task["state"] == "failed", task
    assert "agent-k8s.armory.io/serverside-apply" in json.dumps(task)


def test_an_agent_speaking_tls_to_a_plaintext_hub_is_told_to_set_insecure(tmp_path):
    """Armory's agent is plaintext by default and ours is not: the first thing a migrating user
    meets is this handshake error, which now says what to do."""
    from tests.helpers import HubProcess

    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"}},
        )
    )
    agent = None
    try:
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {"server": {"port": 0}, "clouddriver": {"grpc": f"127.0.0.1:{hub.grpc_port}"}},
            ),
            print_events=False,
        )
        doc = agent.wait_health(
            lambda h: "WRONG_VERSION_NUMBER" in h["hub"].get("reason", ""), what="the handshake refused"
        )
        assert "set clouddriver.insecure: true" in doc["hub"]["reason"]
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


def test_a_kind_that_names_nothing_is_said_not_silently_dropped(tmp_path, kubesim):
    agent = AgentProcess(
        write_yaml(
            tmp_path / "agent.yaml",
            {
                "kubernetes": {
                    "accounts": [
                        {"name": "typo", "kubeConfigFile": str(kubesim.admin(0)), "kinds": ["ConfigMap", "deploymnt"]}
                    ]
                },
                "server": {"port": 0},
            },
        ),
        print_events=True,  # no hub: the events go to stdout
    )
    try:
        line = agent.wait_log(r"kinds that name nothing the cluster serves: deploymnt", what="the typo said")
        assert "typo" in line
        health = agent.wait_health(lambda h: h["accounts"] and h["accounts"][0]["state"] == "watching")
        assert health["accounts"][0]["unmatchedKinds"] == ["deploymnt"]
    finally:
        agent.stop()

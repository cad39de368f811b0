"""Attacks on the hub's HTTP API from a web page and from account requests, against real
processes: a hub, an agent and kubesim, over real HTTP.

- A page of another site open in a browser that can reach the hub (even on loopback) sends a
  "simple" cross-origin POST (`text/plain`, no preflight), or rebinds its own DNS name to the
  hub's address so that the browser takes the hub for its own origin: neither may deploy.
- Whoever may create accounts names a file on the hub's host as `kubeconfigFile`: plain paths are
  refused unless the operator configured directories, and a refused file's message is the same
  whatever the file is (missing, `/etc/shadow`, outside the directories, not a kubeconfig).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import uuid
from urllib.parse import urlsplit

import pytest
from kubernetes import client, config

from tests.helpers import AgentProcess, HubProcess, write_yaml

ACCOUNT = "ops"


def raw(hub: HubProcess, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict]:
    """One request with exactly these headers (Host included), as a browser would send it."""
    parts = urlsplit(hub.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers.items():
            conn.putheader(key, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def stack(kubesim, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hardening")
    hub = HubProcess(
        write_yaml(
            tmp / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp / 'hub.db'}"}},
        )
    )
    agent = AgentProcess(
        write_yaml(
            tmp / "agent.yaml",
            {
                "kubernetes": {"accounts": [{"name": ACCOUNT, "kubeConfigFile": str(kubesim.admin(0))}]},
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "insecure": True},
            },
        ),
        print_events=False,
    )
    hub.wait_until(
        "/api/v1/accounts", lambda d: [a["agentState"] for a in d] == ["watching"], timeout=90, what="ops watching"
    )
    yield hub
    agent.stop()
    hub.stop()


@pytest.fixture
def core(kubesim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))


def configmap_names(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}


def deploy_body(namespace: str, name: str) -> bytes:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps([{"deployManifest": {"account": ACCOUNT, "manifests": [manifest]}}]).encode()


def port_of(hub: HubProcess) -> int:
    return urlsplit(hub.url).port  # type: ignore[return-value]


ATTACKS = {
    # A page of http://evil.example posts to the hub on loopback: a simple request, no preflight.
    "cross-origin simple request": (
        lambda port: {"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example", "Content-Type": "text/plain"},
        403,
        ["'http://evil.example'", "server.allowedOrigins"],
    ),
    # evil.example resolves to 127.0.0.1 now: for the browser the hub is the page's own origin.
    "DNS rebinding": (
        lambda port: {
            "Host": f"evil.example:{port}",
            "Origin": f"http://evil.example:{port}",
            "Content-Type": "text/plain",
            "Sec-Fetch-Site": "same-origin",
        },
        421,
        ["'evil.example:{port}'", "server.allowedHosts"],
    ),
    # A page's form or fetch that the browser labels cross-site, whatever its Origin says.
    "cross-site, no Origin": (
        lambda port: {"Host": f"127.0.0.1:{port}", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
        403,
        ["Sec-Fetch-Site: cross-site", "server.allowedOrigins"],
    ),
    # Only a JSON Content-Type makes a body JSON; text/plain is what a page may send unasked.
    "text/plain body": (
        lambda port: {"Host": f"127.0.0.1:{port}", "Content-Type": "text/plain"},
        415,
        ["'text/plain'", "application/json"],
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_web_page_cannot_deploy_through_the_hub(stack, core, attack):
    hub = stack
    namespace = f"hard-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        headers_for, status_wanted, words = ATTACKS[attack]
        port = port_of(hub)
        status, answer = raw(hub, "POST", "/kubernetes/ops", deploy_body(namespace, "pwned"), headers_for(port))
        assert (status, answer.get("status")) == (status_wanted, status_wanted), answer
        for word in words:
            assert word.replace("{port}", str(port)) in answer["error"], answer
        # The same deploy as a client sends it (curl, the CLI, a UI served by the hub itself)
        # goes through; once it is done, the attack's ConfigMap is still nowhere.
        legit = {
            "Host": f"127.0.0.1:{port}",
            "Origin": f"http://127.0.0.1:{port}",
            "Content-Type": "application/json; charset=utf-8",
        }
        status, created = raw(hub, "POST", "/kubernetes/ops", deploy_body(namespace, "legit"), legit)
        assert status == 200, created
        task = hub.wait_until(
            f"{created['resourceUri']}?waitSeconds=10", lambda t: t["state"] != "running", what="the task's end"
        )
        assert task["state"] == "completed", task
        assert "legit" in configmap_names(core, namespace)
        assert "pwned" not in configmap_names(core, namespace)
        assert hub.objects(ACCOUNT, f"?kind=ConfigMap&namespace={namespace}&name=pwned") == []
        cached = {o["metadata"]["name"] for o in hub.objects(ACCOUNT, f"?kind=ConfigMap&namespace={namespace}")}
        assert "legit" in cached and "pwned" not in cached
    finally:
        core.delete_namespace(namespace)


def test_plain_kubeconfig_paths_are_refused_without_directories(tmp_path):
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
                "dynamicAccounts": {"interceptor": {"enabled": True}},
            },
        )
    )
    try:
        status, answer = hub.post("/armory/accounts", [{"name": "probe", "kubeconfigFile": "/etc/shadow"}])
        assert status == 400, answer
        assert "plain file paths are disabled" in answer["error"]  # type: ignore[index]
        assert "dynamicAccounts.kubeconfigDirectories" in answer["error"]  # type: ignore[index]
        status, answer = hub.post(
            "/credentials", {"name": "probe2", "type": "kubernetes", "kubeconfigFile": "/etc/shadow"}
        )
        assert status == 400 and "dynamicAccounts.kubeconfigDirectories" in answer["error"], answer  # type: ignore[index]
        assert hub.json("/armory/accounts") == []  # nothing was stored
        # A Secret reference is still taken (stored; it is read when the account is migrated).
        status, answer = hub.post(
            "/armory/accounts", [{"name": "ref", "kubeconfigFile": "encryptedFile:k8s!n:kc!k:config!ns:spin"}]
        )
        assert status == 201, answer
    finally:
        hub.stop()


def test_account_management_refuses_plain_kubeconfig_paths_without_the_interceptor(tmp_path):
    """With the interceptor off, /credentials only keeps definitions; a definition naming a file
    outside the directories is still refused, not stored to be read back or migrated later."""
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"}},
        )
    )
    try:
        status, answer = hub.post(
            "/credentials", {"name": "probe", "type": "kubernetes", "kubeconfigFile": "/etc/shadow"}
        )
        assert status == 400, answer
        assert answer["error"].startswith("account 'probe': kubeconfigFile: plain file paths are disabled")  # type: ignore[index]
        assert hub.get("/credentials/probe")[0] == 404  # nothing was stored
        kept = {"name": "kept", "type": "kubernetes", "kubeconfigFile": "encryptedFile:k8s!n:kc!k:config!ns:spin"}
        assert hub.post("/credentials", kept) == (200, kept)
        status, answer = hub.call("PUT", "/credentials", {**kept, "kubeconfigFile": "/etc/shadow"})
        assert status == 400 and "dynamicAccounts.kubeconfigDirectories" in answer["error"], answer
        assert hub.json("/credentials/kept") == kept  # unchanged
    finally:
        hub.stop()


def test_a_refused_kubeconfig_file_tells_nothing_about_the_file(kubesim, tmp_path):
    allowed = tmp_path / "kubeconfigs"
    allowed.mkdir()
    shutil.copy(kubesim.admin(0), allowed / "good.yaml")
    outside = tmp_path / "outside.yaml"
    shutil.copy(kubesim.admin(0), outside)  # a real kubeconfig, but not where accounts may point
    (allowed / "notes.txt").write_text("password: hunter2\n")
    (allowed / "shadow.yaml").symlink_to("/etc/shadow")
    hub = HubProcess(
        write_yaml(
            tmp_path / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
                "dynamicAccounts": {"kubeconfigDirectories": [str(allowed)], "maxRetries": 0},
            },
        )
    )
    outside_paths = {
        "shadow": "/etc/shadow",
        "nowhere": "/no/such/dir/kubeconfig",
        "outside": str(outside),
        "dot-dot": f"{allowed}/../outside.yaml",
    }
    probes = {
        "missing": str(allowed / "missing.yaml"),
        "symlink": str(allowed / "shadow.yaml"),
        "not-kubeconfig": str(allowed / "notes.txt"),
        "good": str(allowed / "good.yaml"),
    }
    try:
        # Outside the directories as written: refused at once, one message whatever exists there.
        messages = set()
        for name, path in outside_paths.items():
            status, answer = hub.post("/armory/accounts", [{"name": name, "kubeconfigFile": path}])
            assert status == 400, (name, answer)
            messages.add(answer["error"].split(": ", 1)[1])  # type: ignore[index]
        assert len(messages) == 1, messages
        assert "dynamicAccounts.kubeconfigDirectories" in messages.pop()
        # Inside as written: taken, and judged when read (links followed, content checked).
        status, answer = hub.post("/armory/accounts", [{"name": n, "kubeconfigFile": p} for n, p in probes.items()])
        assert status == 201, answer
        status, answer = _patch(hub, [{"name": n, "state": "ACTIVE"} for n in probes])
        assert status == 202, answer
        accounts = hub.wait_until(
            "/armory/accounts",
            lambda d: len(d) == len(probes) and all(a["state"] == "FAILED" for a in d),
            what="every migration ended",
        )
        errors = {a["name"]: a["errorMessage"] for a in accounts}  # type: ignore[union-attr]
        refused = {n: e for n, e in errors.items() if n != "good"}
        assert len(set(refused.values())) == 1, refused  # one message, whatever the file
        message = refused["symlink"]
        assert "dynamicAccounts.kubeconfigDirectories" in message
        for word in ("exist", "permission", "clusters", "YAML", "outside", "shadow", "hunter2", str(tmp_path)):
            assert word not in message
        # The good file was read and taken: it failed later, for want of an agent to send it to.
        assert "cannot resolve" not in errors["good"] and "no agent" in errors["good"], errors["good"]
        # The operator's log has each reason, never a file's content.
        log = "\n".join(hub.log)
        assert f"refused: kubeconfig file {allowed / 'shadow.yaml'}: resolves to /etc/shadow, outside" in log
        assert f"refused: kubeconfig file {os.path.realpath(allowed / 'missing.yaml')}: the file does not exist" in log
        assert f"refused: kubeconfig file {allowed / 'notes.txt'}: not a kubeconfig" in log
        assert "hunter2" not in log
    finally:
        hub.stop()


def _patch(hub: HubProcess, body: object) -> tuple[int, object]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        hub.url + "/armory/accounts",
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")

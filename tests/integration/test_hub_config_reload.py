"""The hub's settings that are rules (admins, permissions, allowed hosts...) change with its
ConfigMap, without a restart; a broken file is refused and the running rules stay; a change to a
setting read at start only is reported, not applied."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

import yaml

from scaleagent.hub.auth.callers import hash_token
from tests.helpers import ConfigMapVolume, HubProcess, write_yaml

USERS = {"alice": ["ops"], "bob": ["dev"]}


def token(user: str) -> str:
    return f"{user}-token-for-the-reload-test"


def call(hub: HubProcess, path: str, user: str, host: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token(user)}"}
    if host is not None:
        headers["Host"] = host
    try:
        with urllib.request.urlopen(urllib.request.Request(hub.url + path, headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def hub_yaml(tmp_path, admins: list[str], **extra) -> str:
    doc = {
        "server": {"grpcPort": 0, "httpPort": 0, **extra.pop("server", {})},
        "database": {"url": f"sqlite:///{tmp_path}/hub.db"},
        "auth": {
            "staticTokensFile": str(tmp_path / "tokens.yaml"),
            "admins": {"users": admins},
            "defaultPermissions": extra.pop("permissions", {}),
        },
        "reload": {"periodSeconds": extra.pop("period", 0.2)},
        **extra,
    }
    return yaml.safe_dump(doc)


def tokens(tmp_path) -> None:
    write_yaml(
        tmp_path / "tokens.yaml",
        [{"name": u, "groups": g, "tokenHash": hash_token(token(u))} for u, g in USERS.items()],  # type: ignore[arg-type]
    )


def configuration(hub: HubProcess) -> dict:
    """/health's configuration part as an admin (alice) sees it: with the file and refusals."""
    request = urllib.request.Request(hub.url + "/health", headers={"Authorization": f"Bearer {token('alice')}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())["configuration"]


def wait_configuration(hub: HubProcess, predicate, what: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while not predicate(doc := configuration(hub)):
        assert time.monotonic() < deadline, f"no {what} within {timeout}s: {doc}"
        time.sleep(0.05)
    return doc


def test_rules_follow_the_configmap_and_a_broken_file_changes_nothing(tmp_path):
    tokens(tmp_path)
    volume = ConfigMapVolume(tmp_path / "config", {"hub.yaml": hub_yaml(tmp_path, ["alice"])})
    hub = HubProcess(volume.path("hub.yaml"))
    try:
        assert call(hub, "/armory/agents", "bob") == 403
        assert call(hub, "/api/v1/accounts", "alice", host="clouddriver") == 421

        # bob becomes an admin and the hub answers to the name its Service gives it.
        volume.update({"hub.yaml": hub_yaml(tmp_path, ["alice", "bob"], server={"allowedHosts": ["clouddriver"]})})
        hub.wait_until("/health", lambda d: d["configuration"]["changesApplied"] == 1, what="the change applied")
        assert call(hub, "/armory/agents", "bob") == 200
        assert call(hub, "/api/v1/accounts", "alice", host="clouddriver") == 200
        hub.wait_log(r"configuration .*hub\.yaml applied: auth\.admins\.users, server\.allowedHosts", 5)

        # A broken file (a setting that does not exist) is refused; bob stays an admin.
        volume.update({"hub.yaml": hub_yaml(tmp_path, [], server={"allowedHostz": ["x"]})})
        doc = wait_configuration(hub, lambda c: "refused" in c, what="the refusal")
        assert "allowedHostz" in doc["refused"]
        assert "refused" not in hub.json("/health")["configuration"]  # type: ignore[index]  # admins only
        assert call(hub, "/armory/agents", "bob") == 200
        with urllib.request.urlopen(
            urllib.request.Request(hub.url + "/metrics", headers={"Authorization": f"Bearer {token('alice')}"})
        ) as r:
            metrics = r.read().decode()
        assert 'scale_agent_hub_config_changes_total{outcome="refused"} 1.0' in metrics
        assert "scale_agent_hub_config_refused 1.0" in metrics

        # A file the hub would refuse to start with is refused the same way (logins and anonymous).
        opened = yaml.safe_load(hub_yaml(tmp_path, []))
        opened["auth"]["anonymous"] = True
        volume.update({"hub.yaml": yaml.safe_dump(opened)})
        wait_configuration(
            hub, lambda c: "choose anonymous access or logins" in c.get("refused", ""), what="the second refusal"
        )
        assert call(hub, "/armory/agents", "bob") == 200

        # A setting read at start only is reported, not applied; the rules in the same file are
        # (default permissions from none to some among them).
        rules = {"READ": ["ops"], "WRITE": ["ops"]}
        volume.update(
            {"hub.yaml": hub_yaml(tmp_path, ["alice"], grpc={"maxMessageBytes": 2_000_000}, permissions=rules)}
        )
        doc = hub.wait_until("/health", lambda d: "restartNeeded" in d["configuration"], what="restart needed")
        assert doc["configuration"]["restartNeeded"] == ["grpc.maxMessageBytes"]  # type: ignore[index]
        assert "refused" not in doc["configuration"]  # type: ignore[operator]
        assert call(hub, "/armory/agents", "bob") == 403
        hub.wait_log(r"grpc\.maxMessageBytes changed; read at start only", 5)
    finally:
        hub.stop()


def test_sighup_reads_the_hub_file_at_once(tmp_path):
    tokens(tmp_path)
    path = tmp_path / "hub.yaml"
    path.write_text(hub_yaml(tmp_path, ["alice"], period=0))  # no polling: only SIGHUP reads it
    hub = HubProcess(path)
    try:
        assert call(hub, "/armory/agents", "bob") == 403
        path.write_text(hub_yaml(tmp_path, ["alice", "bob"], period=0))
        hub.proc.send_signal(signal.SIGHUP)
        hub.wait_until("/health", lambda d: d["configuration"]["changesApplied"] == 1, what="applied after SIGHUP")
        assert call(hub, "/armory/agents", "bob") == 200
        assert json.loads(json.dumps(configuration(hub)))["file"] == str(path)
    finally:
        hub.stop()

"""A frozen peer (a stopped process, a network that drops everything) is noticed through the
link's heartbeats within the configured timeout, on both sides, and the link recovers after."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from kubernetes import client, config

from tests.helpers import agent_of, tls_hub

HEARTBEAT = {"keepAliveHeartbeatSeconds": 1, "keepAliveTimeOutSeconds": 2}


@pytest.fixture
def setup(kubesim, tmp_path):
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin())))
    namespace = f"hb-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    hub, pki = tls_hub(tmp_path, sessions={"graceSeconds": 600})
    agent = agent_of(
        hub,
        pki,
        tmp_path,
        [{"name": "hb", "kubeConfigFile": str(kubesim.admin()), "namespaces": [namespace], "kinds": ["ConfigMap"]}],
        **HEARTBEAT,
    )
    try:
        hub.wait_until(
            "/api/v1/accounts/hb",
            lambda d: d["state"] == "ACTIVE" and d["agentState"] == "watching",
            what="the account watching",
        )
        yield core, namespace, hub, agent
    finally:
        for p in (agent, hub):
            os.kill(p.proc.pid, signal.SIGCONT)
            p.stop()
        core.delete_namespace(namespace)


def configmap(core, namespace: str, name: str) -> None:
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name)))


def test_a_frozen_hub_is_noticed_by_the_agent_and_the_link_comes_back(setup):
    core, namespace, hub, agent = setup
    os.kill(hub.proc.pid, signal.SIGSTOP)
    try:
        down = agent.wait_health(lambda d: d["hub"]["state"] == "disconnected", timeout=60, what="the link down")
    finally:
        os.kill(hub.proc.pid, signal.SIGCONT)
    assert "no answer from the hub" in down["hub"]["reason"] and "keepAliveTimeOutSeconds is 2" in down["hub"]["reason"]
    configmap(core, namespace, "after-the-freeze")
    hub.wait_until(
        "/api/v1/accounts/hb/objects?kind=ConfigMap",
        lambda d: "after-the-freeze" in {o["metadata"]["name"] for o in d["items"]},
        what="changes flowing again",
    )


def test_a_frozen_agent_is_noticed_by_the_hub_before_tcp_gives_up(setup):
    core, namespace, hub, agent = setup
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        hub.wait_until(
            "/api/v1/accounts/hb", lambda d: d["state"] == "DISCONNECTED", timeout=60, what="the account disconnected"
        )
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    hub.wait_log(
        r"ended the session of agent \S+ at .*no message from the agent for \d+s \(it sends a heartbeat "
        r"every 1s, with a timeout of 2s\)"
    )
    configmap(core, namespace, "after-the-freeze")
    hub.wait_until("/api/v1/accounts/hb", lambda d: d["state"] == "ACTIVE", what="the agent back")
    hub.wait_until(
        "/api/v1/accounts/hb/objects?kind=ConfigMap",
        lambda d: "after-the-freeze" in {o["metadata"]["name"] for o in d["items"]},
        what="changes flowing again",
    )

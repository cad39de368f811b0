"""Several hub addresses (replicas): how they are configured, and the agent moving to the next one
when its hub goes away."""

from __future__ import annotations

import pytest

from scaleagent.agent.config import ConfigError, parse_config
from scaleagent.agent.link import HubLink, LinkSettings
from scaleagent.agent.service import link_settings
from tests.helpers import AgentProcess, HubProcess, write_yaml


def parse(text: str, environ: dict[str, str] | None = None):
    return parse_config(text, "agent.yml", environ=environ or {})


def error_of(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        parse(text, environ)
    return str(e.value)


@pytest.mark.parametrize(
    "text",
    [
        "clouddriver:\n  grpc: [hub-1:9091, 'hub-2:9091', '[::1]:9091']\n",
        "clouddriver:\n  grpc:\n    - hub-1:9091\n    - hub-2:9091\n    - '[::1]:9091'\n",
        "clouddriver:\n  grpc: 'hub-1:9091, hub-2:9091,[::1]:9091'\n",
    ],
)
def test_several_addresses_as_a_list_or_with_commas(text):
    hub = parse(text).clouddriver
    assert hub.targets == ("hub-1:9091", "hub-2:9091", "[::1]:9091")
    assert (hub.grpc_host, hub.grpc_port) == ("hub-1", 9091)
    settings = link_settings(parse(text))
    assert (settings.target, settings.targets) == ("hub-1:9091", ["hub-1:9091", "hub-2:9091", "[::1]:9091"])


def test_one_address_stays_as_it_was():
    hub = parse("clouddriver:\n  grpc: hub:1\n").clouddriver
    assert (hub.grpc, hub.targets) == ("hub:1", ("hub:1",))
    assert LinkSettings(target="hub:1").targets == ["hub:1"]


def test_the_environment_sets_several_addresses():
    hub = parse("clouddriver:\n  grpc: old:1\n", {"SCALE_AGENT_CLOUDDRIVER__GRPC": "a:9091,b:9091"}).clouddriver
    assert hub.targets == ("a:9091", "b:9091")


@pytest.mark.parametrize(
    "text, environ, message",
    [
        (
            "clouddriver:\n  grpc: [a:1, hub]\n",
            {},
            "agent.yml: clouddriver.grpc: address 2 of 2: 'hub': expected host:port, e.g. 'localhost:9091' or "
            "'[::1]:9091'",
        ),
        (
            "clouddriver:\n  grpc: 'a:1,b:0'\n",
            {},
            "agent.yml: clouddriver.grpc: address 2 of 2: 'b:0': the port must be a number from 1 to 65535",
        ),
        (
            "",
            {"SCALE_AGENT_CLOUDDRIVER__GRPC": "a:9091,nope"},
            "environment variable SCALE_AGENT_CLOUDDRIVER__GRPC: clouddriver.grpc: address 2 of 2: 'nope': "
            "expected host:port, e.g. 'localhost:9091' or '[::1]:9091'",
        ),
        ("clouddriver:\n  grpc: [a:1, 3]\n", {}, "agent.yml: clouddriver.grpc[1]: expected a string (host:port), got"),
        ("clouddriver:\n  grpc: []\n", {}, "agent.yml: clouddriver.grpc: the list is empty"),
        ("clouddriver:\n  grpc: 'a:1,,b:1'\n", {}, "agent.yml: clouddriver.grpc: address 2 of 3: empty"),
        (
            "clouddriver:\n  grpc: [a:1, a:1]\n",
            {},
            "agent.yml: clouddriver.grpc: address 2 of 2: 'a:1' is listed twice",
        ),
    ],
)
def test_a_bad_address_is_named(text, environ, message):
    assert error_of(text, environ).startswith(message)


def test_health_shows_the_address_in_use_and_the_list():
    link = HubLink(LinkSettings(targets=["a:1", "b:2"]))
    doc = link.health()
    assert (doc["hub"], doc["addresses"]) == ("a:1", ["a:1", "b:2"])


def test_the_agent_moves_to_the_next_hub_when_its_hub_stops(tmp_path):
    hubs: list[HubProcess] = []
    agent = None
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            doc = {
                "server": {"grpcPort": 0, "httpPort": 0},
                "database": {"url": f"sqlite:///{tmp_path / name / 'hub.db'}"},
            }
            hubs.append(HubProcess(write_yaml(tmp_path / name / "hub.yaml", doc)))
        first, second = hubs
        addresses = [f"localhost:{first.grpc_port}", f"localhost:{second.grpc_port}"]
        agent = AgentProcess(
            write_yaml(
                tmp_path / "agent.yaml",
                {"agentId": "failover", "server": {"port": 0}, "clouddriver": {"grpc": addresses, "insecure": True}},
            ),
            print_events=False,
        )
        doc = agent.wait_health(lambda d: d["hub"]["state"] == "connected", timeout=15, what="the agent connected")
        assert (doc["hub"]["hub"], doc["hub"]["addresses"]) == (addresses[0], addresses)
        first.wait_until("/armory/agents", lambda d: [a["agentId"] for a in d] == ["failover"], timeout=10)
        agent.wait_log(rf"connected to {addresses[0]} ", timeout=5, what="the log naming the first hub")

        first.stop()
        doc = agent.wait_health(
            lambda d: d["hub"]["state"] == "connected" and d["hub"]["hub"] == addresses[1],
            timeout=10,
            what="the agent connected to the second hub",
        )
        assert doc["hub"]["connects"] == 2
        second.wait_until("/armory/agents", lambda d: [a["agentId"] for a in d] == ["failover"], timeout=10)
        agent.wait_log(rf"connected to {addresses[1]} ", timeout=5, what="the log naming the second hub")
    finally:
        if agent is not None:
            agent.stop()
        for hub in hubs:
            hub.stop()

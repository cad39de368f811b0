"""Dynamic accounts over the link: the hub asks a real agent process to follow and drop accounts.

The hub runs in the test's own event loop (`scaleagent.hub.Hub` on free ports, SQLite in tmp_path)
so that the test can call its `AccountDispatcher` directly, as the REST API will; kubesim and the
agent are real processes. What the agent then does is read where a user reads it: the hub's HTTP
API and the agent's /health.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import grpc
import pytest
import yaml
from kubernetes import client, config

from scaleagent.hub.agents.dispatch import NO_ANSWER, AccountDispatcher, DynamicAccountSpec
from scaleagent.hub.agents.registry import Session
from scaleagent.hub.config import HubConfig
from scaleagent.hub.service import Hub
from scaleagent.protocol import PROTOCOL_VERSION, pb, pb_grpc
from tests.helpers import AgentProcess, free_port, write_yaml

T = TypeVar("T")
DISABLED = "this agent does not accept dynamic accounts (dynamicAccountsEnabled is false)"


@pytest.fixture
def core(kubesim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin())))


@pytest.fixture
def namespace(core):
    name = f"dyn-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@dataclass
class RunningHub:
    """A hub in this event loop, with what the tests use of it."""

    hub: Hub
    dispatcher: AccountDispatcher
    http: aiohttp.ClientSession
    changed: asyncio.Event  # set whenever the registry notices something: wakes `until`

    @property
    def grpc_target(self) -> str:
        return self.hub.grpc_target


@pytest.fixture
async def hub(tmp_path) -> RunningHub:
    cfg = HubConfig.model_validate(
        {"server": {"grpcPort": 0, "httpPort": 0}, "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"}}
    )
    h = await Hub.open(cfg)
    await h.start()
    dispatcher = h.dispatcher
    changed = asyncio.Event()
    h.registry.listeners.append(lambda *_: changed.set())
    running = RunningHub(h, dispatcher, aiohttp.ClientSession(h.http_url), changed)
    yield running
    await running.http.close()
    await h.stop()


@pytest.fixture
def agents():
    started: list[AgentProcess] = []
    yield started
    for a in reversed(started):
        a.stop()


async def until(hub: RunningHub, probe: Callable[[], Awaitable[T]], what: str, timeout: float = 60.0) -> T:
    """Probe again at each registry change (at most 0.1 s apart, for what the registry does not see)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        hub.changed.clear()
        last = await probe()
        if last:
            return last
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"no {what} within {timeout}s")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(hub.changed.wait(), min(0.1, remaining))


async def get(hub: RunningHub, path: str) -> tuple[int, Any]:
    async with hub.http.get(path) as r:
        return r.status, await r.json()


def start_agent(agents: list[AgentProcess], tmp_path: Path, hub: RunningHub, accounts: list[dict], **top: Any) -> str:
    agent_id = f"agent-{uuid.uuid4().hex[:6]}"
    doc = {
        "agentId": agent_id,
        "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 1},
        "server": {"port": 0},
        "clouddriver": {"grpc": hub.grpc_target, "insecure": True},
        **top,
    }
    agents.append(AgentProcess(write_yaml(tmp_path / f"{agent_id}.yaml", doc), print_events=False))
    return agent_id


async def session_of(hub: RunningHub, agent_id: str) -> Session:
    async def find() -> Session | None:
        return next((s for s in hub.hub.registry.sessions.values() if s.agent_id == agent_id), None)

    return await until(hub, find, f"a session of {agent_id}")


async def agent_account(
    hub: RunningHub, agent: AgentProcess, name: str, predicate: Callable[[dict], bool], what: str
) -> dict:
    async def probe() -> dict | None:
        doc = await asyncio.to_thread(agent.health)
        found = [a for a in doc["accounts"] if a["name"] == name]
        return found[0] if found and predicate(found[0]) else None

    return await until(hub, probe, what)


def kubeconfig(path: Path, **cluster: str) -> bytes:
    """The kubeconfig file's content, with cluster fields replaced (another server, say)."""
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["cluster"].update(cluster)
    return yaml.safe_dump(doc).encode()


async def test_a_dynamic_account_is_followed_restarted_with_new_settings_and_let_go(
    kubesim, core, namespace, hub, agents, tmp_path
):
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="one")))
    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"})
    )
    agent_id = start_agent(agents, tmp_path, hub, [])
    session = await session_of(hub, agent_id)
    spec = DynamicAccountSpec(
        "dyn", kubesim.admin().read_bytes(), properties={"namespaces": [namespace], "kinds": ["ConfigMap"]}
    )

    assert await hub.dispatcher.add(session, [spec]) == {"dyn": (True, "")}

    async def cached(kinds: dict[str, int]) -> dict | None:
        status, doc = await get(hub, "/api/v1/accounts/dyn")
        ok = status == 200 and doc["agentState"] == "watching" and doc["objectsByKind"] == kinds
        return doc if ok else None

    # Its ConfigMap and the cluster's kube-root-ca.crt.
    info = await until(hub, lambda: cached({"ConfigMap": 2}), "the account watching, its ConfigMap cached")
    assert info["state"] == "ACTIVE" and info["agents"] == [agent_id]
    assert info["properties"] == {"namespaces": [namespace], "kinds": ["ConfigMap"]}
    _, objects = await get(hub, f"/api/v1/accounts/dyn/objects?namespace={namespace}")
    assert [o["metadata"]["name"] for o in objects["items"]] == ["kube-root-ca.crt", "one"]

    # The same name again, with other settings: the agent starts it over and the cache follows.
    again = replace(spec, properties={"namespaces": [namespace], "kinds": ["Secret"]})
    assert await hub.dispatcher.add(session, [again]) == {"dyn": (True, "")}
    await until(hub, lambda: cached({"Secret": 1}), "the account restarted on Secrets only")

    # AccountRemoved comes before the answer: once delete returns, the hub has let the account go.
    assert await hub.dispatcher.delete(session, ["dyn"]) == {"dyn": (True, "")}
    assert (await get(hub, "/api/v1/accounts/dyn"))[0] == 404
    assert (await get(hub, "/api/v1/accounts/dyn/objects"))[0] == 404
    assert not any(hub.hub.cache.counts("dyn").values())
    (listed,) = [a for a in (await get(hub, "/armory/agents"))[1] if a["agentId"] == agent_id]
    assert listed["accounts"] == []
    health = await asyncio.to_thread(agents[0].health)
    assert [a["name"] for a in health["accounts"]] == []


async def test_the_agent_refuses_what_it_cannot_follow_and_reports_what_fails_later(
    kubesim, namespace, hub, agents, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    static = {
        "name": "static",
        "kubeConfigFile": str(kubesim.admin()),
        "namespaces": [namespace],
        "kinds": ["ConfigMap"],
    }
    agent_id = start_agent(agents, tmp_path, hub, [static])
    session = await session_of(hub, agent_id)
    admin = kubesim.admin().read_bytes()
    limited = yaml.safe_load(kubesim.limited().read_text())
    limited["users"][0]["user"]["token"] = "not-a-token-kubesim-knows"
    closed = free_port()
    specs = [
        DynamicAccountSpec("static", admin),
        DynamicAccountSpec("not valid!", admin),
        DynamicAccountSpec("bad-yaml", b"clusters: [\n  {server: "),
        DynamicAccountSpec("no-context", admin, context="nope"),
        DynamicAccountSpec("both-kinds", admin, properties={"kinds": ["Pod"], "omitKinds": ["Secret"]}),
        DynamicAccountSpec("typo", admin, properties={"namespace": [namespace]}),
        DynamicAccountSpec("unreachable", kubeconfig(kubesim.admin(), server=f"https://127.0.0.1:{closed}")),
        DynamicAccountSpec("bad-token", yaml.safe_dump(limited).encode(), properties={"kinds": ["ConfigMap"]}),
    ]
    answers = await hub.dispatcher.add(session, specs)

    assert answers["static"] == (
        False,
        "account 'static' is configured in this agent's configuration file; the hub cannot replace it",
    )
    assert answers["not valid!"][1].startswith("account 'not valid!': name: 'not valid!' is not a valid account name")
    assert answers["bad-yaml"][1].startswith("account 'bad-yaml': the kubeconfig line 2, column")
    assert "Expected object with name nope in kube-config/contexts list" in answers["no-context"][1]
    assert answers["both-kinds"][1] == (
        "account 'both-kinds': omitKinds: cannot be combined with kinds: give one list or the other"
    )
    assert answers["typo"][1] == "account 'typo': namespace: unknown key (did you mean 'namespaces'?)"
    assert answers["unreachable"] == (True, "") and answers["bad-token"] == (True, "")
    assert [n for n, (ok, _) in answers.items() if ok] == ["unreachable", "bad-token"]
    key = yaml.safe_load(admin)["users"][0]["user"]["client-key-data"]
    secrets = [
        key,
        base64.b64decode(key).decode().splitlines()[1],
        "not-a-token-kubesim-knows",
        base64.b64encode(admin).decode()[:80],
    ]
    assert not any(s in reason for _, reason in answers.values() for s in secrets)

    agent = agents[0]
    down = await agent_account(hub, agent, "unreachable", lambda a: a["state"] == "error", "the unreachable error")
    assert down["reason"].startswith(f"cannot connect to https://127.0.0.1:{closed}: ")
    assert down["dynamic"] is True
    refused = await agent_account(hub, agent, "bad-token", lambda a: a["state"] == "error", "the 401 error")
    assert "401" in refused["reason"]
    health = await asyncio.to_thread(agent.health)
    assert "not-a-token-kubesim-knows" not in str(health)

    assert await hub.dispatcher.delete(session, ["static", "never-added", "unreachable"]) == {
        "static": (False, "account 'static' is configured in this agent's configuration file; remove it there"),
        "never-added": (True, "not followed"),
        "unreachable": (True, ""),
    }
    health = await asyncio.to_thread(agent.health)
    assert sorted(a["name"] for a in health["accounts"]) == ["bad-token", "static"]
    await asyncio.to_thread(agent.wait_log, r"dynamic account unreachable: stopped at the hub's request")
    logs = "\n".join(agent.stderr) + caplog.text  # the agent logs at DEBUG; the hub runs in this process
    assert "dynamic account typo refused: account 'typo': namespace: unknown key" in logs
    assert not any(s in logs for s in secrets)


async def test_an_agent_with_dynamic_accounts_disabled_refuses_them(kubesim, hub, agents, tmp_path):
    agent_id = start_agent(agents, tmp_path, hub, [], dynamicAccountsEnabled=False)
    session = await session_of(hub, agent_id)
    assert session.dynamic_accounts_enabled is False
    assert hub.dispatcher.sessions() == []
    answers = await hub.dispatcher.add(
        session, [DynamicAccountSpec("d", kubesim.admin().read_bytes()), DynamicAccountSpec("sa", None)]
    )
    assert answers == {"d": (False, DISABLED), "sa": (False, DISABLED)}
    health = await asyncio.to_thread(agents[0].health)
    assert health["accounts"] == []


class BareAgent:
    """A gRPC peer that says hello as an agent and then answers only what the test tells it to:
    how a silent, partial or vanishing agent is produced on purpose."""

    def __init__(self, hub: RunningHub) -> None:
        self.channel = grpc.aio.insecure_channel(hub.grpc_target)
        self.call = pb_grpc.AgentLinkStub(self.channel).Caching()

    async def hello(self, agent_id: str) -> None:
        await self.call.write(
            pb.CachingMessage(
                hello=pb.Hello(protocol_version=PROTOCOL_VERSION, agent_id=agent_id, dynamic_accounts_enabled=True)
            )
        )
        assert (await self.call.read()).HasField("welcome")

    async def request(self) -> pb.CachingControl:
        msg = await self.call.read()
        assert msg.WhichOneof("message") in ("add_accounts", "delete_accounts"), msg
        return msg

    async def close(self) -> None:
        await self.channel.close(grace=None)


async def test_requests_fail_per_account_on_partial_answers_silence_and_disconnection(hub):
    bare = BareAgent(hub)
    try:
        await bare.hello("bare")
        session = await session_of(hub, "bare")
        assert hub.dispatcher.sessions() == [session]
        assert hub.dispatcher.sessions(zone_id="elsewhere") == []
        content = b"apiVersion: v1\nkind: Config\n"
        adding = asyncio.create_task(
            hub.dispatcher.add(
                session,
                [
                    DynamicAccountSpec("a", content, context="c", properties={"namespaces": ["x"]}),
                    DynamicAccountSpec("b", None),
                ],
            )
        )
        sent = (await bare.request()).add_accounts
        a, b = sent.accounts
        assert base64.b64decode(a.kubeconfig_base64) == content and a.context == "c"
        assert dict(a.properties)["namespaces"][0] == "x" and b.kubeconfig_base64 == ""
        await bare.call.write(
            pb.CachingMessage(
                accounts_answer=pb.AccountsAnswer(
                    request_id=sent.request_id,
                    answers=[pb.AccountAnswer(name="a", accepted=True), pb.AccountAnswer(name="zz", accepted=True)],
                )
            )
        )
        assert await adding == {"a": (True, ""), "b": (False, NO_ANSWER)}

        # An answer to another request id is not taken for this one; silence ends in a timeout.
        deleting = asyncio.create_task(hub.dispatcher.delete(session, ["a"], timeout=0.5))
        sent_delete = (await bare.request()).delete_accounts
        assert list(sent_delete.names) == ["a"]
        await bare.call.write(
            pb.CachingMessage(
                accounts_answer=pb.AccountsAnswer(
                    request_id="someone-else", answers=[pb.AccountAnswer(name="a", accepted=True)]
                )
            )
        )
        assert await deleting == {"a": (False, "agent bare did not answer within 0.5s")}

        # A session that ends fails what it has not answered at once, not at the timeout.
        pending = asyncio.create_task(hub.dispatcher.add(session, [DynamicAccountSpec("c", None)], timeout=3600))
        await bare.request()
        await bare.close()
        assert await pending == {"c": (False, "agent bare disconnected before answering")}
        after = await hub.dispatcher.add(session, [DynamicAccountSpec("d", None)])
        assert after["d"][0] is False and "is not connected to this hub" in after["d"][1]
    finally:
        await bare.close()


async def test_a_request_that_names_an_account_twice_is_a_caller_error(hub):
    bare = BareAgent(hub)
    try:
        await bare.hello("twice")
        session = await session_of(hub, "twice")
        with pytest.raises(ValueError, match="account 'x' appears more than once"):
            await hub.dispatcher.add(session, [DynamicAccountSpec("x", None), DynamicAccountSpec("x", None)])
    finally:
        await bare.close()

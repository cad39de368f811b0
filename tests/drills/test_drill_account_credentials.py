"""Drill: a dynamic account's kubeconfig reaches the agents of one identity only (issue 29, item 2;
docs/security.md "Agents bound to zones and accounts").

Three hub replicas on PostgreSQL; two agents with identities `alpha` and `beta`, both allowed
every zone, in the same zone. The account is created and activated through hub-b, its settings
changed through hub-c, and its agent killed so that the hubs recover it: at each step the drill
compares which agents were sent the account (each agent logs every dynamic account it is given,
with the hubs' own log of every send refused) and fails if both were.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from scaleagent.hub.auth.agents import hash_token
from tests.databases import emptied
from tests.drills.replicas import start_replicas, stop
from tests.helpers import AgentProcess, HubPki, HubProcess, make_hub_pki, write_yaml

pytestmark = pytest.mark.drill

TOKENS = {"alpha": f"alpha-{uuid.uuid4().hex}", "beta": f"beta-{uuid.uuid4().hex}"}
ACCOUNT = "dyn-bound"
WAIT = 60.0


def start_agent(tmp: Path, pki: HubPki, hub: HubProcess, identity: str) -> AgentProcess:
    doc = {
        "agentId": f"agent-{identity}",
        "zoneId": "z",
        "kubernetes": {"accounts": []},
        "server": {"port": 0},
        "clouddriver": {
            "grpc": f"localhost:{hub.grpc_port}",
            "tls": {"cacertFile": str(pki.ca)},
            "auth": {"token": TOKENS[identity]},
            "keepAliveHeartbeatSeconds": 1,
            "keepAliveTimeOutSeconds": 2,
        },
    }
    agent = AgentProcess(write_yaml(tmp / f"agent-{identity}.yaml", doc), print_events=False)
    agent.wait_health(lambda d: d["hub"]["state"] == "connected", timeout=WAIT, what=f"{identity} connected")
    return agent


def given(agent: AgentProcess) -> int:
    """How many times the hubs gave this agent the account (its log says each, accepted or not)."""
    return sum(1 for line in agent.stderr if re.search(rf"dynamic account {ACCOUNT}( refused)?:", line))


def refused(hub: HubProcess, identity: str) -> int:
    """How many times the hub declined to send the account to that identity's agent."""
    return sum(1 for line in hub.log if f"not sending account {ACCOUNT} to agent agent-{identity}" in line)


def test_a_dynamic_accounts_kubeconfig_never_reaches_an_identity_it_is_not_bound_to(postgres_db, kubesim, tmp_path):
    pki = make_hub_pki(tmp_path)
    hubs = start_replicas(
        tmp_path,
        emptied(postgres_db),
        tls={"certFile": str(pki.cert), "keyFile": str(pki.key)},
        sessions={"graceSeconds": 2},
        auth={
            "agents": {
                "identities": [
                    {"name": name, "tokenHash": hash_token(token), "zones": ["*"]} for name, token in TOKENS.items()
                ]
            }
        },
        dynamicAccounts={
            "encryptionKey": Fernet.generate_key().decode(),
            "kubeconfigDirectories": [str(kubesim.kubeconfig_dir)],
            "retryFrequencySeconds": 1,
        },
    )
    a, b, c = hubs.values()
    agents: dict[str, AgentProcess] = {}
    try:
        agents["alpha"] = start_agent(tmp_path, pki, a, "alpha")  # the older session: asked first
        agents["beta"] = start_agent(tmp_path, pki, a, "beta")
        account = {"name": ACCOUNT, "zoneId": "z", "kubeconfigFile": str(kubesim.admin(1)), "kinds": ["Namespace"]}
        assert b.call("POST", "/armory/accounts", [account])[0] == 201
        assert b.call("PATCH", "/armory/accounts", [{"name": ACCOUNT, "state": "ACTIVE"}])[0] == 202

        def active(d: dict) -> bool:
            return d["state"] == "ACTIVE"

        c.wait_until(f"/agents/kubernetes/accounts/{ACCOUNT}", active, timeout=WAIT, what="the account ACTIVE")
        first = {name: given(agent) for name, agent in agents.items()}
        print(f"\ndrill credentials, first migration: sent to alpha {first['alpha']}x, beta {first['beta']}x")
        assert first == {"alpha": 1, "beta": 0}, first  # bound to the oldest agent's identity
        bound, other = "alpha", "beta"
        a.wait_log(rf"not sending account {ACCOUNT} to agent agent-{other}: .*bound to agent identity '{bound}'")

        # New settings of the ACTIVE account, through another replica: sent again, to `bound` alone.
        changed = {"name": ACCOUNT, "kinds": ["Namespace", "ConfigMap"]}
        assert c.call("PATCH", "/armory/accounts", [changed])[0] == 202
        c.wait_until(
            f"/agents/kubernetes/accounts/{ACCOUNT}",
            lambda d: active(d) and "ConfigMap" in str(d),
            timeout=WAIT,
            what="ACTIVE with the new settings",
        )
        second = {name: given(agent) for name, agent in agents.items()}
        print(f"drill credentials, settings changed: sent to alpha {second['alpha']}x, beta {second['beta']}x")
        assert second[other] == 0 and second[bound] == 2, second

        # Its agent gone: ORPHANED, offered to the agent still connected, which is never sent it.
        before = refused(a, other)
        agents.pop(bound).stop()
        c.wait_until(
            f"/agents/kubernetes/accounts/{ACCOUNT}",
            lambda d: d["state"] == "ORPHANED",
            timeout=WAIT,
            what="the account ORPHANED",
        )
        deadline = time.monotonic() + WAIT
        while refused(a, other) == before:  # the recovery's refusal, logged when it is made
            assert time.monotonic() < deadline, "the hubs never offered the orphaned account to the other agent"
            time.sleep(0.2)
        refusals = refused(a, other)
        print(f"drill credentials, orphaned: {other} sent it {given(agents[other])}x; hub-a refused it {refusals}x")
        assert given(agents[other]) == 0
        assert agents[other].health()["accounts"] == []
    finally:
        for agent in agents.values():
            agent.stop()
        stop(hubs)

"""Agent identities (auth.agents): each agent proves its own identity, which bounds the zones it may
declare, the accounts it may stream and the sessions it may hold; an account is bound to the
identity that first streamed it. Before this, any client holding the shared token could claim
another agent's id and account, wipe the account's objects from the cache, add fake ones and
receive its operations."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography.fernet import Fernet
from kubernetes import client, config

from scaleagent.hub.auth.agents import hash_token
from scaleagent.protocol import PROTOCOL_VERSION, pb, pb_grpc
from tests.helpers import AgentProcess, HubPki, HubProcess, make_hub_pki, write_yaml

TOKEN_A, TOKEN_B, TOKEN_C, TOKEN_D = (f"t-{x}-{uuid.uuid4().hex}" for x in "abcd")
CN = "agent-a.scale-agent.test"  # the client certificate's subject CN (make_pki)
WAIT = 60.0


def make_pki(directory: Path) -> HubPki:
    """The hub's PKI, with a client certificate whose subject CN is `CN`."""
    return make_hub_pki(directory, client_cn=CN)


def identities() -> list[dict]:
    return [
        {"name": "A", "tokenHash": hash_token(TOKEN_A), "zones": ["a"]},
        {"name": "B", "tokenHash": hash_token(TOKEN_B), "zones": ["a", "b"]},
        {"name": "C", "tokenHash": hash_token(TOKEN_C), "zones": ["*"]},
        {"name": "D", "tokenHash": hash_token(TOKEN_D), "zones": ["b"], "accounts": ["team-.*"]},
        {"name": "cert-a", "commonName": CN, "zones": ["a"]},
    ]


def start_hub(tmp: Path, pki: HubPki, **extra: object) -> HubProcess:
    doc = {
        "server": {"grpcPort": 0, "httpPort": 0},
        "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key), "clientCaFile": str(pki.ca)},
        "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
        "sessions": {"graceSeconds": 300},
        "auth": {
            "token": "shared-" + uuid.uuid4().hex,
            "agents": {"identities": identities(), "maxSessionsPerIdentity": 2},
        },
        **extra,
    }
    return HubProcess(write_yaml(tmp / "hub.yaml", doc))


def start_agent(
    tmp: Path, hub: HubProcess, pki: HubPki, name: str, token: str, zone: str, accounts: list
) -> AgentProcess:
    doc = {
        "agentId": name,
        "zoneId": zone,
        "kubernetes": {"accounts": accounts},
        "server": {"port": 0},
        "clouddriver": {
            "grpc": f"localhost:{hub.grpc_port}",
            "tls": {
                "cacertFile": str(pki.ca),
                "clientCertFile": str(pki.client_cert),
                "clientKeyFile": str(pki.client_key),
            },
            "auth": {"token": token},
        },
    }
    return AgentProcess(write_yaml(tmp / f"{name}-{uuid.uuid4().hex[:6]}.yaml", doc), print_events=False)


class RawAgent:
    """A client speaking the protocol by hand (what an attacker holding a valid identity can do):
    it sends what the test says and records every control message the hub sends back."""

    def __init__(
        self,
        hub: HubProcess,
        pki: HubPki,
        *,
        token: str | None,
        agent_id: str,
        zone: str,
        accounts=(),
        dynamic: bool = False,
    ):
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client_key.read_bytes(),
            certificate_chain=pki.client_cert.read_bytes(),
        )
        self.channel = grpc.secure_channel(f"localhost:{hub.grpc_port}", creds)
        self.outbox: queue.Queue = queue.Queue()
        self.received: list[pb.CachingControl] = []
        self.error: grpc.RpcError | None = None
        self.ended = False
        self._new = threading.Condition()
        self._sequence = 0
        self._heartbeat = 0
        self.send(
            pb.CachingMessage(
                hello=pb.Hello(
                    protocol_version=PROTOCOL_VERSION,
                    agent_id=agent_id,
                    zone_id=zone,
                    accounts=list(accounts),
                    dynamic_accounts_enabled=dynamic,
                )
            )
        )
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        stub = pb_grpc.AgentLinkStub(self.channel)
        self._responses = stub.Caching(iter(self.outbox.get, None), metadata=metadata)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for message in self._responses:
                with self._new:
                    self.received.append(message)
                    self._new.notify_all()
        except grpc.RpcError as e:
            with self._new:
                self.error = e
        finally:
            with self._new:
                self.ended = True
                self._new.notify_all()

    def send(self, message: pb.CachingMessage) -> None:
        self.outbox.put(message)

    def batch(self, *events: pb.Event) -> None:
        self._sequence += 1
        self.send(pb.CachingMessage(events=pb.EventBatch(sequence=self._sequence, events=list(events))))

    def wait(self, predicate, what: str, timeout: float = WAIT) -> pb.CachingControl | None:
        """The first control message matching predicate; None once the stream ended (for `ended`)."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                if self.ended:
                    raise AssertionError(f"the stream ended before {what}: {self.error}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no {what} within {timeout}s; received: {self.received}")
                self._new.wait(remaining)

    def synced(self) -> None:
        """Everything sent so far has been handled by the hub (it answers a heartbeat in order)."""
        self._heartbeat += 1
        n = self._heartbeat
        self.send(pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=n)))
        self.wait(lambda m: m.WhichOneof("message") == "heartbeat" and m.heartbeat.sequence == n, "the heartbeat echo")

    def refused(self, timeout: float = WAIT) -> grpc.RpcError:
        deadline = time.monotonic() + timeout
        with self._new:
            while not self.ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the stream was not refused within {timeout}s; received: {self.received}")
                self._new.wait(remaining)
        assert self.error is not None, "the stream ended without an error status"
        return self.error

    def close(self) -> None:
        self.outbox.put(None)
        self.channel.close()


def welcomed(m: pb.CachingControl) -> bool:
    return m.WhichOneof("message") == "welcome"


def rejected(name: str):
    return lambda m: m.WhichOneof("message") == "account_rejected" and m.account_rejected.name == name


def configmap_event(type_: int, ns: str, name: str = "") -> pb.Event:
    body = b""
    if name:
        body = json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            }
        ).encode()
    return pb.Event(type=type_, account="prod", version="v1", kind="ConfigMap", namespace=ns, name=name, object=body)


def names(hub: HubProcess, ns: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in hub.objects("prod", f"?kind=ConfigMap&namespace={ns}"))


def serving_sessions(hub: HubProcess, account: str) -> list[str]:
    return sorted(s["sessionId"] for s in hub.json("/armory/agents") if account in s["accounts"])


@pytest.fixture
def cluster(kubesim):
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))
    ns = f"ids-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    for i in range(3):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i}")))
    return core, ns


def test_an_impostor_with_another_identity_cannot_take_an_account_bound_to_its_agent(kubesim, cluster, tmp_path):
    core, ns = cluster
    pki = make_pki(tmp_path)
    account = {"name": "prod", "kubeConfigFile": str(kubesim.admin(0)), "namespaces": [ns], "kinds": ["ConfigMap"]}
    hub = start_hub(tmp_path, pki)
    procs: list = [hub]
    try:
        a = start_agent(tmp_path, hub, pki, "agent-a", TOKEN_A, "a", [account])
        procs.append(a)
        info = hub.wait_until("/api/v1/accounts/prod", lambda d: d["agentState"] == "watching", what="A watching")
        before = names(hub, ns)
        assert {"cm-0", "cm-1", "cm-2"} <= set(before)
        # What the impostor copies from the public account list.
        claim = pb.Account(
            name="prod",
            state="watching",
            api_host=info["apiHost"],
            certificate_fingerprint=info["certificateFingerprint"],
        )

        impostor = RawAgent(hub, pki, token=TOKEN_B, agent_id="agent-a", zone="a", accounts=[claim])
        message = impostor.wait(rejected("prod"), "the impostor's claim refused")
        assert "bound to agent identity 'A'" in message.account_rejected.reason, message

        # A leaves (a restart, a network blip): its account waits in its grace period, and the
        # impostor claims it again, then sends an empty snapshot and a fake object.
        a.stop()
        hub.wait_until("/api/v1/accounts/prod", lambda d: d["state"] == "DISCONNECTED", what="A gone")
        impostor.send(pb.CachingMessage(account=claim))
        impostor.batch(
            configmap_event(pb.SNAPSHOT_BEGIN, ns),
            configmap_event(pb.ADDED, ns, "fake"),
            configmap_event(pb.SNAPSHOT_END, ns),
        )
        impostor.synced()
        assert names(hub, ns) == before  # nothing lost, nothing fake
        assert serving_sessions(hub, "prod") == []

        # A comes back and serves it; operations go to A's cluster, not to the impostor.
        a = start_agent(tmp_path, hub, pki, "agent-a", TOKEN_A, "a", [account])
        procs.append(a)
        session = a.wait_health(lambda d: d["hub"]["state"] == "connected", what="A connected")["hub"]["sessionId"]
        hub.wait_until(
            "/armory/agents",
            lambda d: [x["sessionId"] for x in d if "prod" in x["accounts"]] == [session],
            what="A serving prod again",
        )
        for i in range(4):
            manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"deployed-{i}", "namespace": ns}}
            task = hub.run_task([{"deployManifest": {"account": "prod", "manifests": [manifest]}}])
            assert task["state"] == "completed", task
            assert core.read_namespaced_config_map(f"deployed-{i}", ns).metadata.name == f"deployed-{i}"
        assert not [m for m in impostor.received if m.WhichOneof("message") in ("add_accounts",)]
        impostor.close()

        # The binding outlives the hub: restarted, it still refuses the impostor, even first.
        a.stop()
        hub.stop()
        hub = start_hub(tmp_path, pki)
        procs.append(hub)
        impostor = RawAgent(hub, pki, token=TOKEN_B, agent_id="agent-a", zone="a", accounts=[claim])
        message = impostor.wait(rejected("prod"), "the impostor refused after the restart")
        assert "bound to agent identity 'A'" in message.account_rejected.reason, message
        impostor.close()

        # An admin moves the cluster to identity B: release the binding, and B's claim binds it.
        assert [(b["account"], b["identity"]) for b in hub.json("/armory/agents/bindings")] == [("prod", "A")]
        assert _call(hub, "DELETE", "/armory/agents/bindings/prod", None) == 200
        assert _call(hub, "DELETE", "/armory/agents/bindings/prod", None, errors=True) == 404
        successor = RawAgent(hub, pki, token=TOKEN_B, agent_id="agent-b", zone="a", accounts=[claim])
        hub.wait_until(
            "/armory/agents/bindings",
            lambda d: [(b["account"], b["identity"]) for b in d] == [("prod", "B")],
            what="prod bound to B",
        )
        assert not [m for m in successor.received if m.WhichOneof("message") == "account_rejected"]
        successor.close()
    finally:
        for p in reversed(procs):
            p.stop()


def test_a_certificate_identity_declaring_a_zone_it_may_not_serve_is_refused(kubesim, cluster, tmp_path):
    core, ns = cluster
    pki = make_pki(tmp_path)
    account = {"name": "prod", "kubeConfigFile": str(kubesim.admin(0)), "namespaces": [ns], "kinds": ["ConfigMap"]}
    hub = start_hub(tmp_path, pki)
    a = None
    try:
        a = start_agent(tmp_path, hub, pki, "agent-a", TOKEN_A, "a", [account])
        hub.wait_until("/api/v1/accounts/prod", lambda d: d["agentState"] == "watching", what="A watching")

        stranger = RawAgent(hub, pki, token=None, agent_id="cert-agent", zone="b")
        error = stranger.refused()
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
        assert "'cert-a'" in error.details() and "zone 'b'" in error.details() and "'a'" in error.details()
        hub.wait_log(r"refused .*cert-a.*zone 'b'", what="the refusal logged with its reason")
        stranger.close()

        # The same certificate in its own zone is let in.
        allowed = RawAgent(hub, pki, token=None, agent_id="cert-agent", zone="a")
        allowed.wait(welcomed, "the welcome")
        allowed.close()
        # Others keep streaming.
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after")))
        hub.wait_until(
            f"/api/v1/accounts/prod/objects?kind=ConfigMap&namespace={ns}&name=after",
            lambda d: len(d["items"]) == 1,
            what="A's change after the refusal",
        )
    finally:
        if a is not None:
            a.stop()
        hub.stop()


def test_one_identity_holds_at_most_max_sessions_per_identity(tmp_path):
    pki = make_pki(tmp_path)
    hub = start_hub(tmp_path, pki)
    clients: list[RawAgent] = []
    try:
        for i in range(2):
            clients.append(RawAgent(hub, pki, token=TOKEN_C, agent_id=f"c-{i}", zone="z"))
            clients[-1].wait(welcomed, f"session {i} welcomed")
        third = RawAgent(hub, pki, token=TOKEN_C, agent_id="c-2", zone="z")
        error = third.refused()
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert "'C'" in error.details() and "maxSessionsPerIdentity: 2" in error.details()
        third.close()
        # Another identity is not counted against C.
        other = RawAgent(hub, pki, token=TOKEN_B, agent_id="b-0", zone="b")
        other.wait(welcomed, "another identity's session")
        clients.append(other)
        # A session of C ends: C may open one again.
        clients.pop(0).close()
        hub.wait_until("/armory/agents", lambda d: len(d) == 2, what="the session closed")
        again = RawAgent(hub, pki, token=TOKEN_C, agent_id="c-3", zone="z")
        again.wait(welcomed, "a new session of C")
        clients.append(again)
    finally:
        for c in clients:
            c.close()
        hub.stop()


def _call(hub: HubProcess, method: str, path: str, body: object, *, errors: bool = False) -> int:
    """The status of one request; an error status fails the test unless `errors`."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        hub.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        if errors:
            return e.code
        raise AssertionError(f"{method} {path}: {e.code} {e.read()!r}") from None


def test_dynamic_accounts_go_only_to_agents_whose_identity_allows_their_zone_and_name(kubesim, tmp_path):
    pki = make_pki(tmp_path)
    hub = start_hub(
        tmp_path,
        pki,
        dynamicAccounts={
            "encryptionKey": Fernet.generate_key().decode(),
            "kubeconfigDirectories": [str(kubesim.admin(1).parent)],
        },
    )
    agent = None
    try:
        # Identity D may serve zone b, accounts team-*.
        agent = start_agent(tmp_path, hub, pki, "agent-d", TOKEN_D, "b", [])
        agent.wait_health(lambda d: d["hub"]["state"] == "connected", what="D connected")
        kubeconfig = str(kubesim.admin(1))
        body = [
            {"name": "dyn-a", "zoneId": "a", "kubeconfigFile": kubeconfig, "kinds": ["Namespace"]},
            {"name": "other-b", "zoneId": "b", "kubeconfigFile": kubeconfig, "kinds": ["Namespace"]},
            {"name": "team-b", "zoneId": "b", "kubeconfigFile": kubeconfig, "kinds": ["Namespace"]},
        ]
        assert _call(hub, "POST", "/armory/accounts", body) == 201
        assert _call(hub, "PATCH", "/armory/accounts", [{"name": b["name"], "state": "ACTIVE"} for b in body]) == 202
        hub.wait_until("/agents/kubernetes/accounts/team-b", lambda d: d["state"] == "ACTIVE", what="team-b ACTIVE")
        for name in ("dyn-a", "other-b"):
            doc = hub.wait_until(
                f"/agents/kubernetes/accounts/{name}", lambda d: d["state"] == "FAILED", what=f"{name} not sent"
            )
            assert "agent-d" not in json.dumps(doc.get("agents", [])), doc
        health = agent.health()
        assert {a["name"] for a in health["accounts"]} == {"team-b"}
        assert hub.wait_log(r"not sending account other-b to agent agent-d", what="the refusal logged")
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


def test_an_identity_narrowed_or_removed_in_the_file_ends_the_sessions_it_no_longer_allows(tmp_path):
    """Revoking an agent takes effect on the agents connected now, not at their next reconnect."""
    pki = make_pki(tmp_path)
    token_e, token_f = "token-e-" + uuid.uuid4().hex, "token-f-" + uuid.uuid4().hex
    listed = tmp_path / "agents.yaml"
    write_yaml(
        listed,
        [  # type: ignore[arg-type]
            {"name": "E", "tokenHash": hash_token(token_e), "zones": ["e"]},
            {"name": "F", "tokenHash": hash_token(token_f), "zones": ["f"]},
        ],
    )
    hub = start_hub(tmp_path, pki, auth={"agents": {"identitiesFile": str(listed)}})
    e = RawAgent(hub, pki, token=token_e, agent_id="agent-e", zone="e")
    f = RawAgent(hub, pki, token=token_f, agent_id="agent-f", zone="f")
    try:
        e.wait(welcomed, "E welcomed")
        f.wait(welcomed, "F welcomed")
        write_yaml(listed, [{"name": "E", "tokenHash": hash_token(token_e), "zones": ["elsewhere"]}])  # type: ignore[arg-type]
        deadline = time.monotonic() + WAIT
        for agent in (e, f):
            while not agent.ended:  # any message from the agent (its heartbeats) makes the hub look
                assert time.monotonic() < deadline, "the session outlived its identity's change"
                agent.send(pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=1)))
                with agent._new:
                    agent._new.wait(0.2)
        assert e.error is not None and e.error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may no longer serve zone 'e'" in e.error.details(), e.error.details()
        assert f.error is not None and "agent identity 'F' was removed" in f.error.details(), f.error.details()
        hub.wait_log(r"agent identities changed: agent identity 'F' was removed", 10)
        # Reconnecting is judged against the new list.
        again = RawAgent(hub, pki, token=token_e, agent_id="agent-e", zone="e")
        assert again.refused().code() == grpc.StatusCode.PERMISSION_DENIED
        again.close()
    finally:
        e.close()
        f.close()
        hub.stop()


def test_identities_narrowed_in_the_hub_configuration_end_the_sessions_they_no_longer_allow(tmp_path):
    """The same, for identities written in the hub's own file, which it applies as it changes."""
    pki = make_pki(tmp_path)
    token_e, token_f = "token-e-" + uuid.uuid4().hex, "token-f-" + uuid.uuid4().hex
    e_identity = {"name": "E", "tokenHash": hash_token(token_e), "zones": ["e"]}
    f_identity = {"name": "F", "tokenHash": hash_token(token_f), "zones": ["f"]}
    hub = start_hub(tmp_path, pki, auth={"agents": {"identities": [e_identity, f_identity]}})
    e = RawAgent(hub, pki, token=token_e, agent_id="agent-e", zone="e")
    f = RawAgent(hub, pki, token=token_f, agent_id="agent-f", zone="f")
    try:
        e.wait(welcomed, "E welcomed")
        f.wait(welcomed, "F welcomed")
        doc = yaml.safe_load((tmp_path / "hub.yaml").read_text())
        doc["auth"]["agents"]["identities"] = [{**e_identity, "zones": ["elsewhere"]}]
        write_yaml(tmp_path / "hub.yaml", doc)
        hub.wait_log(r"configuration .*hub\.yaml applied: auth\.agents\.identities", WAIT)
        deadline = time.monotonic() + WAIT
        for agent in (e, f):
            while not agent.ended:  # any message from the agent (its heartbeats) makes the hub look
                assert time.monotonic() < deadline, "the session outlived its identity's change"
                agent.send(pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=1)))
                with agent._new:
                    agent._new.wait(0.2)
        assert e.error is not None and "may no longer serve zone 'e'" in e.error.details(), e.error.details()
        assert f.error is not None and "agent identity 'F' was removed" in f.error.details(), f.error.details()
    finally:
        e.close()
        f.close()
        hub.stop()

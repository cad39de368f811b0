"""Bad input on the hub's gRPC port is refused with a logged reason, and everyone else is still served."""

from __future__ import annotations

import socket
import ssl
import uuid

import grpc
import pytest
from kubernetes import client, config

from scaleagent.protocol import PROTOCOL_VERSION, pb, pb_grpc
from tests.helpers import AgentProcess, HubProcess, make_hub_pki, write_yaml

TOKEN = "s3cret-" + uuid.uuid4().hex
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def setup(kubesim, tmp_path_factory):
    """One TLS hub with a token and a small message limit, and one well-behaved agent on it."""
    tmp = tmp_path_factory.mktemp("refusals")
    pki = make_hub_pki(tmp)
    hub = HubProcess(
        write_yaml(
            tmp / "hub.yaml",
            {
                "server": {"grpcPort": 0, "httpPort": 0},
                "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                "auth": {"token": TOKEN},
                "grpc": {"maxMessageBytes": LIMIT},
                "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
            },
        )
    )
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin())))
    ns = f"ref-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    agents = []

    def agent(name: str, accounts: list[dict], token: str = TOKEN) -> AgentProcess:
        doc = {
            "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 1},
            "server": {"port": 0},
            "clouddriver": {
                "grpc": f"localhost:{hub.grpc_port}",
                "tls": {"cacertFile": str(pki.ca)},
                "auth": {"token": token},
            },
        }
        a = AgentProcess(write_yaml(tmp / f"{name}.yaml", doc), print_events=False)
        agents.append(a)
        return a

    good = agent(
        "good",
        [{"name": "shared", "kubeConfigFile": str(kubesim.admin(0)), "namespaces": [ns], "kinds": ["ConfigMap"]}],
    )
    session = good.wait_health(
        lambda d: d["hub"]["state"] == "connected" and d["accounts"][0]["state"] == "watching",
        what="the good agent watching",
    )["hub"]["sessionId"]
    yield hub, pki, core, ns, agent, good, session
    for a in agents:
        a.stop()
    hub.stop()
    core.delete_namespace(ns)


def still_serving(setup) -> None:
    """The first agent keeps its session and its changes keep reaching the cache."""
    hub, _, core, ns, _, good, session = setup
    name = f"probe-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name)))
    hub.wait_until(
        f"/api/v1/accounts/shared/objects?kind=ConfigMap&namespace={ns}&name={name}",
        lambda d: len(d["items"]) == 1,
        what="a change from the good agent",
    )
    assert good.health()["hub"]["sessionId"] == session


def raw_stub(hub: HubProcess, pki) -> tuple[grpc.Channel, pb_grpc.AgentLinkStub]:
    creds = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    channel = grpc.secure_channel(f"localhost:{hub.grpc_port}", creds)
    return channel, pb_grpc.AgentLinkStub(channel)


def refusal(stub: pb_grpc.AgentLinkStub, *messages: pb.CachingMessage, token: str = TOKEN) -> grpc.RpcError:
    responses = stub.Caching(iter(messages), metadata=(("authorization", f"Bearer {token}"),))
    with pytest.raises(grpc.RpcError) as e:
        for _ in responses:
            pass
    return e.value


def hello(version: int = PROTOCOL_VERSION) -> pb.CachingMessage:
    return pb.CachingMessage(hello=pb.Hello(protocol_version=version, agent_id="raw-test-client"))


def test_garbage_on_the_grpc_port(setup):
    hub, *_ = setup
    with socket.create_connection(("127.0.0.1", hub.grpc_port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 4)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
    hub.wait_log(r"Handshake failed with error SSL_ERROR_SSL.*HTTP_REQUEST", what="the failed handshake logged")
    still_serving(setup)


def test_a_tls_client_speaking_http1_instead_of_grpc(setup):
    hub, pki, *_ = setup
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", hub.grpc_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET /armory/agents HTTP/1.1\r\nHost: localhost\r\n\r\n")
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
    still_serving(setup)


def test_an_unknown_protocol_version(setup):
    hub, pki, *_ = setup
    channel, stub = raw_stub(hub, pki)
    with channel:
        e = refusal(stub, hello(99))
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and "protocol version 99" in e.details()
    hub.wait_log(r"refused raw-test-client|refused an agent .*protocol version 99 is not supported")
    still_serving(setup)


def test_a_message_over_the_size_limit(setup):
    hub, pki, *_ = setup
    big = pb.Event(
        type=pb.ADDED, account="x", kind="ConfigMap", name="big", object=b'{"a":"' + b"x" * (2 * LIMIT) + b'"}'
    )
    channel, stub = raw_stub(hub, pki)
    with channel:
        e = refusal(stub, hello(), pb.CachingMessage(events=pb.EventBatch(sequence=1, events=[big])))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and f"limit of {LIMIT}" in e.details()
    hub.wait_log(r"refused raw-test-client .*over this hub's limit", what="the size refusal logged")
    still_serving(setup)


def test_a_missing_or_wrong_token(setup):
    hub, pki, _, ns, agent, *_ = setup
    channel, stub = raw_stub(hub, pki)
    with channel:
        e = refusal(stub, hello(), token="wrong")
    assert e.code() == grpc.StatusCode.UNAUTHENTICATED
    imposter = agent("no-token", [{"name": "other", "kubeConfigFile": "/nonexistent/kubeconfig.yaml"}], token="")
    imposter.wait_health(lambda d: "UNAUTHENTICATED" in d["hub"].get("reason", ""), what="the agent told why")
    hub.wait_log(r"missing or wrong bearer token")
    assert TOKEN not in "\n".join(hub.log)
    still_serving(setup)


def test_an_agent_claiming_another_clusters_account_name(kubesim, setup):
    hub, _, _, ns, agent, *_ = setup
    other = agent(
        "other-cluster",
        [{"name": "shared", "kubeConfigFile": str(kubesim.admin(1)), "namespaces": [ns], "kinds": ["ConfigMap"]}],
    )
    doc = other.wait_health(
        lambda d: "rejected by the hub" in d["accounts"][0].get("reason", ""), what="the account rejected"
    )
    assert "already registered for another cluster" in doc["accounts"][0]["reason"]
    hub.wait_log(r"account 'shared' is already registered for another cluster")
    (info,) = [a for a in hub.json("/api/v1/accounts") if a["name"] == "shared"]
    assert info["apiHost"] == kubesim.urls[0] and len(info["agents"]) == 1
    still_serving(setup)

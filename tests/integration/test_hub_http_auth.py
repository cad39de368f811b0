"""Logins and permissions on the hub's HTTP API, with real processes: a hub over HTTPS that takes
static tokens and client certificates, an agent streaming two kubesim clusters whose accounts
carry Spinnaker permissions, and callers who may read one, write another, or nothing.

    dev-cluster:  READ [dev]          WRITE [dev]
    prod-cluster: READ [dev, ops]     WRITE [ops]
    alice: dev    bob: ops    eve: (no group)    carol: platform (admin)    dave: a certificate, O=ops
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trustme
import yaml

from scaleagent.hub.auth.callers import hash_token
from scaleagent.protocol import pb

from ..helpers import AgentProcess, HubProcess, make_hub_pki, write_yaml

TOKENS = {"alice": ("dev",), "bob": ("ops",), "eve": (), "carol": ("platform",), "frank": ("dev",)}


def token_of(name: str) -> str:
    return f"{name}-token-0123456789abcdef"


class Caller:
    """One user of the API: a token, or a client certificate, or nothing."""

    def __init__(self, hub: HubProcess, ca: Path, token: str | None = None, cert: tuple[Path, Path] | None = None):
        self.hub, self.token = hub, token
        self.context = ssl.create_default_context(cafile=str(ca))
        if cert is not None:
            self.context.load_cert_chain(str(cert[0]), str(cert[1]))

    def with_token(self, token: str) -> Caller:
        other = Caller.__new__(Caller)
        other.hub, other.token, other.context = self.hub, token, self.context
        return other

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.hub.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as r:
                raw = r.read()
                return r.status, json.loads(raw) if r.headers.get_content_type() == "application/json" else raw
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="module")
def stack(kubesim, tmp_path_factory):
    directory = tmp_path_factory.mktemp("auth")
    pki = make_hub_pki(directory)
    user_ca = trustme.CA()
    user_ca.cert_pem.write_to_path(str(directory / "users-ca.pem"))
    dave = user_ca.issue_cert("dave@example.com", common_name="dave", organization_name="ops")
    dave.cert_chain_pems[0].write_to_path(str(directory / "dave.pem"))
    dave.private_key_pem.write_to_path(str(directory / "dave-key.pem"))
    stranger = trustme.CA().issue_cert("mallory@example.com", common_name="mallory", organization_name="platform")
    stranger.cert_chain_pems[0].write_to_path(str(directory / "mallory.pem"))
    stranger.private_key_pem.write_to_path(str(directory / "mallory-key.pem"))
    tokens = write_yaml(
        directory / "tokens.yaml",
        [{"name": n, "groups": list(g), "tokenHash": hash_token(token_of(n))} for n, g in TOKENS.items()],  # type: ignore[arg-type]
    )
    hub = HubProcess(
        write_yaml(
            directory / "hub.yaml",
            {
                "server": {
                    "grpcPort": 0,
                    "httpPort": 0,
                    "httpTls": {
                        "certFile": str(pki.cert),
                        "keyFile": str(pki.key),
                        "clientCaFile": str(directory / "users-ca.pem"),
                    },
                },
                "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                "database": {"url": f"sqlite:///{directory / 'hub.db'}"},
                # A login method given as ' Platform ' must still match (Armory's whitespace bug).
                "auth": {"staticTokensFile": str(tokens), "admins": {"groups": [" Platform "]}},
            },
        )
    )
    agent = AgentProcess(
        write_yaml(
            directory / "agent.yaml",
            {
                "kubernetes": {
                    "accounts": [
                        {
                            "name": "dev-cluster",
                            "kubeconfigFile": str(kubesim.admin(0)),
                            "kinds": ["ConfigMap"],
                            "permissions": {"READ": ["dev"], "WRITE": ["dev"]},
                        },
                        {
                            "name": "prod-cluster",
                            "kubeconfigFile": str(kubesim.admin(1)),
                            "kinds": ["ConfigMap"],
                            "permissions": {"READ": ["dev", " ops"], "WRITE": "ops"},
                        },
                    ]
                },
                "server": {"port": 0},
                "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
            },
        ),
        print_events=False,
    )
    hub.tokens_file = tokens  # type: ignore[attr-defined]
    hub.pki = pki  # type: ignore[attr-defined]
    hub.database_url = f"sqlite:///{directory / 'hub.db'}"  # type: ignore[attr-defined]
    callers = {n: Caller(hub, pki.ca, token_of(n)) for n in TOKENS}
    callers["nobody"] = Caller(hub, pki.ca)
    callers["dave"] = Caller(hub, pki.ca, cert=(directory / "dave.pem", directory / "dave-key.pem"))
    callers["mallory"] = Caller(hub, pki.ca, cert=(directory / "mallory.pem", directory / "mallory-key.pem"))
    carol = callers["carol"]
    deadline_ok = _wait(
        lambda: (
            sorted(
                a["name"]
                for a in carol.call("GET", "/api/v1/accounts")[1]
                if a["state"] == "ACTIVE"  # type: ignore[union-attr,index]
            )
            == ["dev-cluster", "prod-cluster"]
        )
    )
    assert deadline_ok, hub.log[-20:]
    yield hub, callers
    agent.stop()
    hub.stop()


def _wait(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def deploy(name: str, account: str) -> list[dict]:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}
    return [{"deployManifest": {"account": account, "manifests": [manifest]}}]


def names(answer: object) -> list[str]:
    assert isinstance(answer, list), answer
    return sorted(a["name"] for a in answer)


def test_without_a_login_nothing_but_the_probes_answers(stack):
    hub, callers = stack
    nobody = callers["nobody"]
    for path in ("/api/v1/accounts", "/api/v1/accounts/prod-cluster/objects", "/armory/accounts", "/metrics"):
        status, body = nobody.call("GET", path)
        assert status == 401, (path, status, body)
        assert "log in" in body["error"]  # type: ignore[index]
    status, body = nobody.call("POST", "/kubernetes/ops", deploy("anon", "prod-cluster"))
    assert status == 401
    assert nobody.call("GET", "/health")[0] == 200
    status, body = nobody.with_token("wrong-token").call("GET", "/api/v1/accounts")
    assert status == 401 and "not valid" in body["error"]  # type: ignore[index]
    assert "wrong-token" not in "\n".join(hub.log)


def test_lists_show_only_the_accounts_a_caller_may_read(stack):
    _, callers = stack
    assert names(callers["alice"].call("GET", "/api/v1/accounts")[1]) == ["dev-cluster", "prod-cluster"]
    assert names(callers["bob"].call("GET", "/api/v1/accounts")[1]) == ["prod-cluster"]
    assert names(callers["eve"].call("GET", "/api/v1/accounts")[1]) == []
    assert names(callers["carol"].call("GET", "/api/v1/accounts")[1]) == ["dev-cluster", "prod-cluster"]


def test_metrics_and_stats_name_only_the_accounts_a_caller_may_read(stack):
    _, callers = stack
    for who, expected in (("alice", {"dev-cluster", "prod-cluster"}), ("bob", {"prod-cluster"}), ("eve", set())):
        status, text = callers[who].call("GET", "/metrics")
        assert status == 200
        named = set(re.findall(r'scale_agent_hub_account_watches\{account="([^"]+)"\}', text.decode()))  # type: ignore[union-attr]
        assert named == expected, (who, named)
        status, stats = callers[who].call("GET", "/api/v1/stats")
        assert status == 200 and stats["accounts"] == len(expected), (who, stats)  # type: ignore[index]


def test_reading_an_account_needs_read_and_the_403_names_it(stack):
    _, callers = stack
    status, body = callers["bob"].call("GET", "/api/v1/accounts/dev-cluster/objects?kind=ConfigMap")
    assert status == 403
    message = body["error"]  # type: ignore[index]
    assert "'bob'" in message and "READ" in message and "dev-cluster" in message and "dev" in message
    assert callers["bob"].call("GET", "/api/v1/accounts/prod-cluster/objects?kind=ConfigMap")[0] == 200


def test_operations_need_write_on_their_account(stack):
    hub, callers = stack
    status, body = callers["alice"].call("POST", "/kubernetes/ops", deploy("from-alice", "prod-cluster"))
    assert status == 403 and "WRITE" in body["error"] and "prod-cluster" in body["error"]  # type: ignore[index]
    status, created = callers["bob"].call("POST", "/kubernetes/ops", deploy("from-bob", "prod-cluster"))
    assert status == 200, created
    status, task = callers["bob"].call("GET", f"{created['resourceUri']}?waitSeconds=20")  # type: ignore[index]
    assert status == 200 and task["state"] == "completed", task  # type: ignore[index]
    objects = callers["bob"].call("GET", "/api/v1/accounts/prod-cluster/objects?kind=ConfigMap&name=from-bob")[1]
    assert [o["metadata"]["name"] for o in objects["items"]] == ["from-bob"]  # type: ignore[index]
    assert "from-alice" not in json.dumps(callers["carol"].call("GET", "/api/v1/accounts/prod-cluster/objects")[1])
    # Who may not read the account may not read its task either.
    assert callers["eve"].call("GET", created["resourceUri"])[0] == 403  # type: ignore[index]
    # One audit line per write, refused or not: who, what, the outcome.
    hub.wait_log(r'"audit":"POST /kubernetes/ops","user":"alice".*"status":403.*"operations"', 10)
    hub.wait_log(r'"audit":"POST /kubernetes/ops","user":"bob".*"status":200.*prod-cluster.*"task"', 10)


def test_managing_accounts_needs_the_admin_role(stack):
    _, callers = stack
    status, body = callers["bob"].call("POST", "/armory/accounts", [{"name": "new-one"}])
    assert status == 403 and "admin" in body["error"]  # type: ignore[index]
    assert callers["bob"].call("GET", "/armory/agents")[0] == 403
    status, created = callers["carol"].call("POST", "/armory/accounts", [{"name": "new-one"}])
    assert status == 201, created
    assert callers["carol"].call("GET", "/armory/agents")[0] == 200


def test_a_client_certificate_logs_in_with_its_cn_and_o(stack):
    _, callers = stack
    status, me = callers["dave"].call("GET", "/api/v1/whoami")
    assert status == 200 and me["name"] == "dave" and me["groups"] == ["ops"]  # type: ignore[index]
    assert me["method"] == "clientCertificate"  # type: ignore[index]
    assert names(callers["dave"].call("GET", "/api/v1/accounts")[1]) == ["prod-cluster"]
    status, created = callers["dave"].call("POST", "/kubernetes/ops", deploy("from-dave", "prod-cluster"))
    assert status == 200, created


def test_a_certificate_from_another_ca_is_not_a_login(stack):
    """The TLS handshake itself refuses it: no answer at all, let alone data."""
    _, callers = stack
    with pytest.raises((urllib.error.URLError, ssl.SSLError, http.client.RemoteDisconnected, ConnectionError)):
        callers["mallory"].call("GET", "/api/v1/accounts")


def test_the_watch_shows_only_readable_accounts(stack):
    hub, callers = stack
    import threading

    seen: list[str] = []
    opened = threading.Event()

    def watch() -> None:
        request = urllib.request.Request(
            hub.url + "/api/v1/watch?kind=ConfigMap", headers={"Authorization": f"Bearer {token_of('bob')}"}
        )
        with urllib.request.urlopen(request, timeout=30, context=callers["bob"].context) as r:
            opened.set()
            for line in r:
                if line.startswith(b"data: "):
                    doc = json.loads(line[6:])
                    seen.append(f"{doc['account']}/{doc['name']}")
                    if doc["name"] == "marker-prod":
                        return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    assert opened.wait(20)
    for account, who in (("dev-cluster", "alice"), ("prod-cluster", "bob")):
        status, created = callers[who].call("POST", "/kubernetes/ops", deploy(f"marker-{account[:4]}", account))
        assert status == 200
        callers[who].call("GET", f"{created['resourceUri']}?waitSeconds=20")  # type: ignore[index]
    thread.join(30)
    assert "prod-cluster/marker-prod" in seen
    assert not [s for s in seen if s.startswith("dev-cluster/")], seen


def test_two_authorization_headers_are_refused_whatever_their_order(stack):
    """Proxies and parsers disagree on which of two headers counts: the hub takes neither."""
    hub, callers = stack
    parts = urlsplit(hub.url)
    for first, second in (("wrong", token_of("alice")), (token_of("alice"), "wrong")):
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=callers["alice"].context)
        conn.putrequest("GET", "/api/v1/accounts")
        conn.putheader("Authorization", f"Bearer {first}")
        conn.putheader("Authorization", f"Bearer {second}")
        conn.endheaders()
        response = conn.getresponse()
        body = json.loads(response.read())
        conn.close()
        assert response.status == 401 and "one Authorization header" in body["error"], body


def test_watching_an_account_one_may_not_read_is_a_403_not_silence(stack):
    _, callers = stack
    status, body = callers["bob"].call("GET", "/api/v1/watch?account=dev-cluster")
    assert status == 403 and "READ" in body["error"] and "dev-cluster" in body["error"], body


def test_a_login_taken_out_of_the_tokens_file_ends_its_open_watch(stack):
    """Revocation reaches streams already open: before the next change goes out."""
    import threading

    hub, callers = stack
    frames: list[str] = []
    opened, ended = threading.Event(), threading.Event()

    def watch() -> None:
        request = urllib.request.Request(
            hub.url + "/api/v1/watch?kind=ConfigMap&account=dev-cluster",
            headers={"Authorization": f"Bearer {token_of('frank')}"},
        )
        with urllib.request.urlopen(request, timeout=60, context=callers["frank"].context) as r:
            opened.set()
            for line in r:
                if line.startswith((b"event: ", b"data: ")):
                    frames.append(line.decode().strip())
        ended.set()

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(20)
    carol = callers["carol"]
    deploy_and_wait(carol, "before-revoke", "dev-cluster")
    deadline = time.monotonic() + 20
    while not any("before-revoke" in f for f in frames):
        assert time.monotonic() < deadline, frames
        time.sleep(0.05)
    entries = [e for e in yaml.safe_load(hub.tokens_file.read_text()) if e["name"] != "frank"]
    write_yaml(hub.tokens_file, entries)  # type: ignore[arg-type]
    deadline = time.monotonic() + 20  # the file is looked at again at most once a second
    while callers["frank"].call("GET", "/api/v1/accounts")[0] != 401:
        assert time.monotonic() < deadline, "frank's token still accepted"
        time.sleep(0.1)
    deploy_and_wait(carol, "after-revoke", "dev-cluster")
    assert ended.wait(20), frames
    assert not [f for f in frames if "after-revoke" in f], frames
    assert "login is no longer valid" in frames[-1], frames


def deploy_and_wait(caller: Caller, name: str, account: str) -> None:
    status, created = caller.call("POST", "/kubernetes/ops", deploy(name, account))
    assert status == 200, created
    status, task = caller.call("GET", f"{created['resourceUri']}?waitSeconds=20")  # type: ignore[index]
    assert status == 200 and task["state"] == "completed", task  # type: ignore[index]


def test_a_dynamic_accounts_stored_permissions_hold_whatever_its_agent_describes(stack):
    """Issue 29: an agent that described a dynamic account without its permissions opened it to
    every caller, while /armory/accounts still showed them. The permissions stored through the
    accounts API are the account's, whatever its agent says (docs/accounts.md)."""
    from .test_hub_agent_identities import RawAgent, welcomed

    hub, callers = stack
    carol, bob, eve = callers["carol"], callers["bob"], callers["eve"]
    created = [{"name": "ops-dynamic", "zoneId": "raw", "permissions": {"READ": ["ops"], "WRITE": ["ops"]}}]
    assert carol.call("POST", "/armory/accounts", created)[0] == 201
    agent = RawAgent(hub, hub.pki, token=None, agent_id="raw-agent", zone="raw", dynamic=True)  # type: ignore[attr-defined]
    try:
        agent.wait(welcomed, "the welcome")
        assert carol.call("PATCH", "/armory/accounts", [{"name": "ops-dynamic", "state": "ACTIVE"}])[0] == 202
        sent = agent.wait(lambda m: m.WhichOneof("message") == "add_accounts", "the account sent to the agent")
        assert sent is not None
        answer = pb.AccountAnswer(name="ops-dynamic", accepted=True)
        agent.send(
            pb.CachingMessage(
                accounts_answer=pb.AccountsAnswer(request_id=sent.add_accounts.request_id, answers=[answer])
            )
        )
        # Its description names no permissions (an agent's bug, or an agent that widens them on purpose).
        description = pb.Account(
            name="ops-dynamic",
            state="watching",
            api_host="https://10.9.9.9:6443",
            certificate_fingerprint="AB:CD",
            kinds=["ConfigMap"],
        )
        description.properties.update({"namespaces": ["default"]})
        agent.send(pb.CachingMessage(account=description))
        agent.synced()
        assert _wait(lambda: carol.call("GET", "/armory/accounts/ops-dynamic")[1]["state"] == "ACTIVE")  # type: ignore[index]
        stored = carol.call("GET", "/armory/accounts/ops-dynamic")[1]
        assert stored["permissions"] == {"READ": ["ops"], "WRITE": ["ops"]}, stored  # type: ignore[index]

        status, body = eve.call("GET", "/api/v1/accounts/ops-dynamic/objects")
        assert status == 403 and "READ" in body["error"] and "ops" in body["error"], body  # type: ignore[index]
        status, body = eve.call("POST", "/kubernetes/ops", deploy("from-eve", "ops-dynamic"))
        assert status == 403 and "WRITE" in body["error"], body  # type: ignore[index]
        assert "ops-dynamic" not in names(eve.call("GET", "/api/v1/accounts")[1])
        # The account shows the permissions that hold, and whoever is in the group reads it.
        assert bob.call("GET", "/api/v1/accounts/ops-dynamic")[1]["properties"]["permissions"] == stored["permissions"]  # type: ignore[index]
        assert bob.call("GET", "/api/v1/accounts/ops-dynamic/objects")[0] == 200

        # Narrowed through another replica (written to the shared database, as that replica
        # does; it sends the account to its own agents, not to this replica's): it holds here too,
        # within retryFrequencySeconds, without any agent describing the account again.
        narrowed = {"READ": ["auditors"], "WRITE": ["auditors"]}
        row = asyncio.run(_write_permissions(hub.database_url, "ops-dynamic", narrowed))  # type: ignore[attr-defined]
        assert row.properties["permissions"] == narrowed
        assert _wait(lambda: bob.call("GET", "/api/v1/accounts/ops-dynamic/objects")[0] == 403), (
            "the permissions changed in the database never held on the replica streaming the account"
        )
    finally:
        agent.close()


async def _write_permissions(url: str, name: str, permissions: dict) -> Any:
    from scaleagent.hub.store import Store

    async with await Store.open(url) as store:
        row = await store.get_account(name)
        return await store.update_account(name, properties={**row.properties, "permissions": permissions})


def _get_from(hub: HubProcess, source: str, path: str, token: str | None) -> tuple[int, Any, Any]:
    """GET from a given loopback source address (127.0.0.2 is another client to the hub)."""
    parts = urlsplit(hub.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        answer = conn.getresponse()
        return answer.status, answer.headers, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def test_failed_logins_from_one_address_are_throttled(tmp_path):
    """Past auth.failedLogins.limit wrong tokens, an address's logins get 429 with Retry-After
    (so that guessing tokens, each a TokenReview when that is on, is bounded); another address,
    and the probes, are not affected."""
    tokens = write_yaml(
        tmp_path / "tokens.yaml", [{"name": "alice", "groups": ["dev"], "tokenHash": hash_token("alice-token")}]
    )  # type: ignore[arg-type]
    config = {
        "server": {"grpcPort": 0, "httpPort": 0},
        "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
        "auth": {"staticTokensFile": str(tokens), "failedLogins": {"limit": 3, "windowSeconds": 600}},
    }
    hub = HubProcess(write_yaml(tmp_path / "hub.yaml", config))
    try:
        assert _get_from(hub, "127.0.0.1", "/api/v1/whoami", "alice-token")[0] == 200
        for i in range(3):
            status, _, body = _get_from(hub, "127.0.0.1", "/api/v1/whoami", f"guess-{i}")
            assert status == 401, body
        status, headers, body = _get_from(hub, "127.0.0.1", "/api/v1/whoami", "guess-3")
        assert status == 429, body
        assert "too many failed logins" in body["error"]
        assert 0 < int(headers["Retry-After"]) <= 600
        # The whole address waits, a valid token included: the hub cannot tell a guess that hit.
        assert _get_from(hub, "127.0.0.1", "/api/v1/whoami", "alice-token")[0] == 429
        assert _get_from(hub, "127.0.0.1", "/health", None)[0] == 200
        status, _, body = _get_from(hub, "127.0.0.2", "/api/v1/whoami", "alice-token")
        assert status == 200 and body["name"] == "alice", body
        hub.wait_log(r"3 failed logins from 127\.0\.0\.1 within 600s")
    finally:
        hub.stop()


def test_health_names_the_configuration_file_to_admins_only(tmp_path):
    from ..helpers import login_hub

    hub = login_hub(tmp_path, {"carol": (["platform"], "carol-token"), "alice": (["dev"], "alice-token")})
    try:
        for token in (None, "alice-token", "wrong-token"):
            status, _, doc = _get_from(hub, "127.0.0.1", "/health", token)
            assert status == 200, (token, doc)  # a probe's answer, whatever credential comes along
            assert "changesApplied" in doc["configuration"], doc
            assert "file" not in doc["configuration"] and str(tmp_path) not in json.dumps(doc), (token, doc)
        status, _, doc = _get_from(hub, "127.0.0.1", "/health", "carol-token")
        assert status == 200 and doc["configuration"]["file"] == str(tmp_path / "hub.yaml"), doc
    finally:
        hub.stop()


def test_the_hub_replicas_are_listed_to_admins_only(tmp_path):
    from ..helpers import login_hub

    hub = login_hub(tmp_path, {"carol": (["platform"], "carol-token"), "alice": (["dev"], "alice-token")})
    try:
        status, _, replicas = _get_from(hub, "127.0.0.1", "/armory/clouddrivers", "carol-token")
        assert status == 200 and len(replicas) == 1, replicas
        one = f"/armory/clouddrivers/{replicas[0]['id']}"
        assert _get_from(hub, "127.0.0.1", one, "carol-token")[0] == 200
        for path in ("/armory/clouddrivers", one):
            status, _, body = _get_from(hub, "127.0.0.1", path, "alice-token")
            assert status == 403 and "needs the admin role" in body["error"], (path, body)
    finally:
        hub.stop()


def test_accounts_open_to_every_caller_are_named_in_the_log(tmp_path):
    """No permissions and no auth.defaultPermissions: Spinnaker's rule opens the account to every
    logged-in caller, which the hub says, naming the account, at start and at first use."""
    from ..helpers import login_hub

    users = {"carol": (["platform"], "carol-token"), "alice": (["dev"], "alice-token")}
    ref = "encryptedFile:k8s!n:kc!k:config!ns:spin"
    hub = login_hub(tmp_path, users)
    try:
        created = [{"name": "open-one", "kubeconfigFile": ref}, {"name": "closed", "kubeconfigFile": ref}]
        created[1]["permissions"] = {"READ": ["dev"], "WRITE": ["ops"]}
        assert hub.call("POST", "/armory/accounts", created, token="carol-token")[0] == 201
        assert hub.call("GET", "/api/v1/accounts/open-one/objects", token="alice-token")[0] in (200, 404)
        hub.wait_log(r"account 'open-one' has no permissions and auth.defaultPermissions is empty")
    finally:
        hub.stop()
    hub = login_hub(tmp_path, users)
    try:
        line = hub.wait_log(r"accounts .*: each has no permissions")
        assert "open-one" in line and "closed" not in line, line
    finally:
        hub.stop()

"""Clouddriver's Account Management API (`/credentials`) on the hub, on SQLite, PostgreSQL and
MariaDB for real: pass-through (interceptor off), interception of POST/PUT/DELETE, and the
namePatterns scan.

As in test_hub_accounts.py, the hub side is real (store, registry, dispatcher, accounts service,
credentials service, both routers served by uvicorn and called over HTTP, Secrets read from
kubesim) and the agents are `ScriptedAgent`s. Nothing waits by sleeping: tests wait on the
accounts service's change notifications (`wait_for`), and call the scan directly (`scan_once`)
except where the loop itself is under test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from kubernetes import client, config

from scaleagent.hub.accounts.credentials import CredentialsService
from scaleagent.hub.api.credentials import credentials_router
from scaleagent.hub.config import DynamicAccountsConfig, InterceptorConfig
from scaleagent.hub.store import StoreError
from tests.hub_harness import ROOT, AccountsHub, run_curl, secret

REF = "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker"


def credentials_hub(
    db_url: str,
    kubeconfig: Path,
    *,
    intercept: bool,
    patterns: tuple[str, ...] = (),
    scan_every: float = 3600.0,
    retry_every: float = 3600.0,
) -> AccountsHub:
    """The accounts half with both APIs (/armory/accounts and /credentials)."""
    settings = DynamicAccountsConfig(
        retry_frequency_seconds=retry_every,
        agent_timeout_seconds=5.0,
        interceptor=InterceptorConfig(enabled=intercept),
        name_patterns=patterns,
        scan_frequency_seconds=scan_every,
    )
    return AccountsHub(db_url, kubeconfig, settings, credentials=True)


@pytest.fixture
async def passthrough(db_url: str, kubesim: Any) -> AsyncIterator[AccountsHub]:
    h = await credentials_hub(db_url, kubesim.admin(0), intercept=False).start()
    yield h
    await h.stop()


@pytest.fixture
async def intercepting(db_url: str, kubesim: Any) -> AsyncIterator[AccountsHub]:
    h = await credentials_hub(db_url, kubesim.admin(0), intercept=True).start()
    yield h
    await h.stop()


@pytest.fixture
def core(kubesim: Any) -> Any:
    api = config.new_client_from_config(config_file=str(kubesim.admin(0)))
    yield client.CoreV1Api(api)
    api.close()


def k8s(name: str, **fields: Any) -> dict[str, Any]:
    """A Kubernetes account definition as Spinnaker's Account Management takes it."""
    return {"type": "kubernetes", "name": name, **fields}


# --- interceptor off: Account Management, nothing else ----------------------------------------------


async def test_without_the_interceptor_the_requests_only_keep_definitions(passthrough: AccountsHub) -> None:
    hub = passthrough
    agent = hub.agent("agent-0")
    prod = k8s(
        "prod-east",
        kubeconfigFile=REF,
        namespaces=["web"],
        onlySpinnakerManaged=True,
        permissions={"READ": ["dev"], "WRITE": ["ops"]},
        cacheThreads=2,
    )

    status, answer = await hub.call("POST", "/credentials", prod)
    assert (status, answer) == (200, prod)  # the definition, as Clouddriver answers it
    status, answer = await hub.call("POST", "/credentials", k8s("dev-west", environment="dev"))
    assert status == 200
    assert await hub.store.list_accounts() == [] and not agent.added  # no dynamic account, nothing sent

    status, listed = await hub.call("GET", "/credentials")
    assert (status, listed) == (
        200,
        [
            {
                "name": "dev-west",
                "type": "kubernetes",
                "cloudProvider": "kubernetes",
                "environment": "dev",
                "accountType": "dev-west",
                "requiredGroupMembership": [],
                "permissions": {},
            },
            {
                "name": "prod-east",
                "type": "kubernetes",
                "cloudProvider": "kubernetes",
                "environment": "prod-east",
                "accountType": "prod-east",
                "requiredGroupMembership": [],
                "permissions": {"READ": ["dev"], "WRITE": ["ops"]},
            },
        ],
    )
    assert (await hub.call("GET", "/credentials", expand="true"))[1] == [k8s("dev-west", environment="dev"), prod]
    assert await hub.call("GET", "/credentials/prod-east") == (200, prod)
    assert await hub.call("GET", "/credentials/type/kubernetes", limit="1", startingAccountName="e") == (200, [prod])
    assert await hub.call("GET", "/credentials/type/aws") == (200, [])

    status, answer = await hub.call("POST", "/credentials", k8s("prod-east"))
    assert (status, answer["error"]) == (409, "account 'prod-east' already exists: choose another name")
    changed = k8s("prod-east", kubeconfigFile=REF, omitNamespaces=["kube-system"])
    assert await hub.call("PUT", "/credentials", changed) == (200, changed)
    assert (await hub.call("GET", "/credentials/prod-east"))[1] == changed
    status, answer = await hub.call("PUT", "/credentials", k8s("nope"))
    assert (status, answer["error"]) == (404, "no account named 'nope'")

    status, answer = await hub.call("DELETE", "/credentials/prod-east")
    assert (status, answer) == (200, {"deleted": ["prod-east"], "dynamicAccount": False, "warnings": []})
    status, answer = await hub.call("DELETE", "/credentials/prod-east")
    assert (status, answer["error"]) == (404, "no account named 'prod-east'")
    status, answer = await hub.call("GET", "/credentials/prod-east")
    assert (status, answer["error"]) == (404, "no account named 'prod-east'")
    assert await hub.store.list_accounts() == [] and not agent.added and not agent.deleted


async def test_without_the_interceptor_dynamic_accounts_of_the_same_name_are_left_alone(
    passthrough: AccountsHub,
) -> None:
    hub = passthrough
    agent = hub.agent("agent-0")
    await hub.call("POST", "/armory/accounts", [{"name": "both", "namespaces": ["web"]}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "both", "state": "ACTIVE"}])
    await hub.state("both", "ACTIVE")
    assert (await hub.call("POST", "/credentials", k8s("both", namespaces=["api"])))[0] == 200
    assert (await hub.call("PUT", "/credentials", k8s("both", namespaces=["other"])))[0] == 200
    assert (await hub.call("DELETE", "/credentials/both"))[1]["dynamicAccount"] is False
    row = await hub.store.get_account("both")
    assert (row.state, row.properties) == ("ACTIVE", {"namespaces": ["web"]})
    assert [a.name for a in agent.added] == ["both"] and agent.deleted == []


# --- interceptor on ---------------------------------------------------------------------------------


async def test_an_intercepted_post_becomes_an_active_dynamic_account(
    intercepting: AccountsHub, core: Any, kubesim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hub = intercepting
    kubeconfig = kubesim.admin(1).read_bytes()
    secret(core, "spinnaker", "kubeconfig", {"config": kubeconfig})
    agent = hub.agent("agent-1", zone_id="east")
    definition = k8s(
        "prod-east",
        kubeconfigFile=REF,
        namespaces=["web"],
        omitKinds=["Secret"],
        onlySpinnakerManaged=True,
        cacheThreads=4,
        permissions={"READ": ["dev"]},
        customResources=[{"kubernetesKind": "Widget.example.com"}],
    )

    status, answer = await hub.call("POST", "/credentials", definition)
    assert (status, answer) == (200, definition)
    row = await hub.state("prod-east", "ACTIVE")
    assert (row.source, row.kubeconfig_file, row.zone_id, row.agent_id) == ("api", REF, "east", "agent-1")
    assert row.properties == {
        "namespaces": ["web"],
        "omitKinds": ["Secret"],
        "customResourceDefinitions": ["Widget.example.com"],
    }
    [sent] = agent.added
    assert agent.kubeconfig_of("prod-east") == kubeconfig
    assert dict(sent.properties) == {
        "namespaces": ["web"],
        "omitKinds": ["Secret"],
        "customResourceDefinitions": ["Widget.example.com"],
    }

    # Both APIs show it: Account Management its definition, /armory/accounts its state.
    assert await hub.call("GET", "/credentials/prod-east") == (200, definition)
    assert [a["name"] for a in (await hub.call("GET", "/credentials"))[1]] == ["prod-east"]
    view = (await hub.call("GET", "/agents/kubernetes/accounts/prod-east"))[1]
    assert (view["state"], view["namespaces"], view["kubeconfigFile"]) == ("ACTIVE", ["web"], REF)
    assert (await hub.store.get_credentials("prod-east")).migrated_at is not None

    # The kubeconfig is never in an answer or a log line.
    everything = json.dumps([answer, view, (await hub.call("GET", "/credentials", expand="true"))[1]]) + caplog.text
    assert kubeconfig.decode() not in everything and base64.b64encode(kubeconfig).decode() not in everything


async def test_the_documented_request_works_verbatim(intercepting: AccountsHub, core: Any, kubesim: Any) -> None:
    text = (ROOT / "docs" / "accounts.md").read_text()
    [command] = re.findall(r"```sh\n(curl -sS -X POST http://localhost:7002/credentials .*?)```", text, re.S)
    secret(core, "spinnaker", "kubeconfig", {"config": kubesim.admin(1).read_bytes()})
    agent = intercepting.agent("agent-0")
    status, answer = await run_curl(command, int(intercepting.url.rsplit(":", 1)[1]))
    assert (status, answer["name"], answer["namespaces"]) == (200, "prod-east", ["web"])
    await intercepting.state("prod-east", "ACTIVE")
    assert agent.kubeconfig_of("prod-east") == kubesim.admin(1).read_bytes()


async def test_an_intercepted_post_of_a_taken_name_changes_nothing(intercepting: AccountsHub) -> None:
    hub = intercepting
    agent = hub.agent("agent-0")
    await hub.call("POST", "/armory/accounts", [{"name": "by-rest"}])
    await hub.store.upsert_account("from-a-file", state="ACTIVE")  # what the registry writes for a file account
    assert (await hub.call("POST", "/credentials", k8s("once")))[0] == 200
    await hub.state("once", "ACTIVE")
    before = await hub.snapshot()

    status, answer = await hub.call("POST", "/credentials", k8s("by-rest", namespaces=["web"]))
    assert (status, answer["error"]) == (409, "account 'by-rest' already exists: choose another name")
    status, answer = await hub.call("POST", "/credentials", k8s("from-a-file"))
    assert status == 409 and "configured in an agent's own file" in answer["error"]
    status, answer = await hub.call("POST", "/credentials", k8s("once", namespaces=["web"]))
    assert (status, answer["error"]) == (409, "account 'once' already exists: choose another name")
    assert await hub.snapshot() == before
    assert [a.name for a in agent.added] == ["once"]


async def test_an_intercepted_post_whose_second_write_fails_leaves_nothing(
    intercepting: AccountsHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = intercepting
    agent = hub.agent("agent-0")

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("create_credentials 'half': the database went away")

    monkeypatch.setattr(hub.store, "create_credentials", broken)
    status, answer = await hub.call("POST", "/credentials", k8s("half"))
    assert (status, answer["error"]) == (
        503,
        "the accounts database failed: create_credentials 'half': the database went away",
    )
    assert await hub.snapshot() == ([], []) and not agent.added
    assert "half" not in hub.registry.managed


async def test_an_intercepted_put_changes_the_account_and_its_agents_follow(
    intercepting: AccountsHub, tmp_path: Path, kubesim: Any
) -> None:
    hub = intercepting
    path = tmp_path / "kc.yml"
    path.write_bytes(kubesim.admin(1).read_bytes())
    agent = hub.agent("agent-0", zone_id="eu")
    await hub.call("POST", "/credentials", k8s("p", kubeconfigFile=str(path), namespaces=["web"], kinds=["Deployment"]))
    await hub.state("p", "ACTIVE")

    # The whole definition is replaced: kinds, left out, is cleared; the zone the account got stays.
    changed = k8s("p", kubeconfigFile=str(path), namespaces=["web", "api"], onlySpinnakerManaged=True)
    assert await hub.call("PUT", "/credentials", changed) == (200, changed)
    row = await hub.until("p", lambda r: r.state == "ACTIVE" and len(agent.added) == 2, "sent again")
    assert row.properties == {"namespaces": ["web", "api"]} and row.zone_id == "eu"
    assert dict(agent.added[-1].properties) == {"namespaces": ["web", "api"]}
    assert agent.kubeconfig_of("p") == kubesim.admin(1).read_bytes()
    assert (await hub.call("GET", "/credentials/p"))[1] == changed

    # The same definition again: nothing to send.
    assert (await hub.call("PUT", "/credentials", changed))[0] == 200
    assert len(agent.added) == 2 and (await hub.store.get_account("p")).state == "ACTIVE"


async def test_an_intercepted_put_migrates_a_failed_account_again(intercepting: AccountsHub) -> None:
    hub = intercepting
    agent = hub.agent("agent-0", behaviour={"f": "error:forbidden: cannot list namespaces"})
    await hub.call("POST", "/credentials", k8s("f", namespaces=["web"]))
    await hub.state("f", "FAILED")
    agent.behaviour.clear()
    assert (await hub.call("PUT", "/credentials", k8s("f", namespaces=["api"])))[0] == 200
    row = await hub.state("f", "ACTIVE")
    assert (row.failed_count, row.properties) == (0, {"namespaces": ["api"]})


async def test_an_intercepted_put_during_a_migration_changes_nothing(intercepting: AccountsHub) -> None:
    hub = intercepting
    hub.agent("agent-0", behaviour={"busy": "silent"})
    await hub.call("POST", "/credentials", k8s("busy", namespaces=["web"]))
    await hub.state("busy", "ACTIVATING")
    before = await hub.snapshot()
    status, answer = await hub.call("PUT", "/credentials", k8s("busy", namespaces=["api"]))
    assert status == 409 and "its settings cannot change while it is ACTIVATING" in answer["error"]
    assert await hub.snapshot() == before


async def test_an_intercepted_put_of_other_names_is_account_management(intercepting: AccountsHub) -> None:
    hub = intercepting
    # A dynamic account made through /armory/accounts: PUT changes it, and keeps the definition.
    await hub.call("POST", "/armory/accounts", [{"name": "rest", "zoneId": "z"}])
    assert (await hub.call("PUT", "/credentials", k8s("rest", namespaces=["web"])))[0] == 200
    row = await hub.store.get_account("rest")
    assert (row.state, row.zone_id, row.properties) == ("INACTIVE", "z", {"namespaces": ["web"]})
    assert (await hub.call("GET", "/credentials/rest"))[1] == k8s("rest", namespaces=["web"])
    # An agent's own account is not touched, nor is a name nobody knows.
    await hub.store.upsert_account("from-a-file", state="ACTIVE")
    status, answer = await hub.call("PUT", "/credentials", k8s("from-a-file"))
    assert status == 404 and "configured in an agent's own file" in answer["error"]
    status, answer = await hub.call("PUT", "/credentials", k8s("nobody"))
    assert (status, answer["error"]) == (404, "no account named 'nobody'")


async def test_an_intercepted_delete_tells_the_agent_then_deletes_both(intercepting: AccountsHub) -> None:
    hub = intercepting
    agent = hub.agent("agent-0")
    await hub.call("POST", "/credentials", k8s("d", namespaces=["web"]))
    await hub.state("d", "ACTIVE")
    status, answer = await hub.call("DELETE", "/credentials/d")
    assert (status, answer) == (200, {"deleted": ["d"], "dynamicAccount": True, "warnings": []})
    assert agent.deleted == ["d"]
    assert await hub.store.get_account("d") is None and await hub.store.get_credentials("d") is None
    assert "d" not in hub.registry.accounts
    status, answer = await hub.call("DELETE", "/credentials/d")
    assert (status, answer["error"]) == (404, "no account named 'd'")

    # Either half alone is deleted too: a dynamic account without a definition, and the reverse.
    await hub.call("POST", "/armory/accounts", [{"name": "rest-only"}])
    assert (await hub.call("DELETE", "/credentials/rest-only"))[1]["dynamicAccount"] is True
    assert await hub.store.get_account("rest-only") is None
    await hub.store.create_credentials("def-only", "kubernetes", k8s("def-only"))
    assert (await hub.call("DELETE", "/credentials/def-only"))[1]["dynamicAccount"] is False
    assert await hub.snapshot() == ([], [])


# --- the namePatterns scan ----------------------------------------------------------------------------


async def test_the_scan_migrates_matching_names_once(db_url: str, kubesim: Any) -> None:
    hub = await credentials_hub(db_url, kubesim.admin(0), intercept=False, patterns=("prod-.*", "staging")).start()
    try:
        agent = hub.agent("agent-0")
        for name in ("prod-a", "prod-b", "dev-a", "staging", "staging-2", "my-prod-x", "prod-taken"):
            assert (await hub.call("POST", "/credentials", k8s(name, namespaces=["web"])))[0] == 200
        await hub.call("POST", "/armory/accounts", [{"name": "prod-taken", "zoneId": "z"}])  # already a dynamic account

        assert await hub.credentials.scan_once() == ["prod-a", "prod-b", "staging"]  # whole names only
        for name in ("prod-a", "prod-b", "staging"):
            row = await hub.state(name, "ACTIVE")
            assert row.properties == {"namespaces": ["web"]} and row.source == "api"
        taken = await hub.store.get_account("prod-taken")
        assert (taken.state, taken.zone_id, taken.properties) == ("INACTIVE", "z", {})  # left alone
        assert sorted(a.name for a in agent.added) == ["prod-a", "prod-b", "staging"]

        # Once: a second scan finds nothing, and a migrated account deleted by hand stays deleted.
        assert await hub.credentials.scan_once() == []
        await hub.call("DELETE", "/armory/accounts/prod-a")
        assert await hub.credentials.scan_once() == []
        assert await hub.store.get_account("prod-a") is None
        # A new matching definition is the next scan's.
        await hub.call("POST", "/credentials", k8s("prod-c"))
        assert await hub.credentials.scan_once() == ["prod-c"]
        await hub.state("prod-c", "ACTIVE")
        assert len(agent.added) == 4
    finally:
        await hub.stop()


async def test_replicas_scanning_together_migrate_each_definition_once(db_url: str, kubesim: Any) -> None:
    hub = await credentials_hub(db_url, kubesim.admin(0), intercept=False, patterns=("r-.*",)).start()
    try:
        hub.agent("agent-0")
        names = [f"r-{i}" for i in range(6)]
        for name in names:
            await hub.call("POST", "/credentials", k8s(name))
        replicas = [CredentialsService(hub.store, hub.accounts, config=hub.settings) for _ in range(3)]
        results = await asyncio.gather(*(r.scan_once() for r in replicas))
        assert sorted(n for found in results for n in found) == names  # each exactly once
        for name in names:
            await hub.state(name, "ACTIVE")
    finally:
        await hub.stop()


async def test_the_scan_skips_a_definition_that_cannot_be_an_account(
    db_url: str, kubesim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    hub = await credentials_hub(db_url, kubesim.admin(0), intercept=False, patterns=(".*",)).start()
    try:
        # Written behind the API's back (an older hub, or by hand): the scan must not choke on it.
        await hub.store.create_credentials("bad", "kubernetes", k8s("bad", namespaces=["Not_A_Namespace"]))
        await hub.call("POST", "/credentials", k8s("good"))
        assert await hub.credentials.scan_once() == ["good"]
        assert (
            "definition bad cannot become a dynamic account: account 'bad': namespaces: 'Not_A_Namespace'"
            in caplog.text
        )
        caplog.clear()
        assert await hub.credentials.scan_once() == [] and "cannot become" not in caplog.text  # warned once
        assert await hub.store.get_account("bad") is None
        assert (await hub.store.get_credentials("bad")).migrated_at is None  # fixed later, it is migrated then
        assert (await hub.call("PUT", "/credentials", k8s("bad", namespaces=["web"])))[0] == 200
        assert await hub.credentials.scan_once() == ["bad"]
    finally:
        await hub.stop()


async def test_the_scan_loop_runs_from_start_to_stop(db_url: str, kubesim: Any) -> None:
    hub = await credentials_hub(
        db_url, kubesim.admin(0), intercept=False, patterns=("auto-.*",), scan_every=0.05
    ).start()
    stopped = False
    try:
        hub.agent("agent-0")
        await hub.call("POST", "/credentials", k8s("auto-1"))
        await hub.state("auto-1", "ACTIVE")  # the loop found it, no one called scan_once
        await hub.credentials.stop()
        stopped = True
        assert hub.credentials._scan_task is None
        await hub.call("POST", "/credentials", k8s("auto-2"))
        assert await hub.store.get_account("auto-2") is None
    finally:
        if not stopped:
            await hub.credentials.stop()
        await hub.stop()


# --- validation: refused whole ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "body", "status", "message"),
    [
        (
            "POST",
            k8s("a", kubeconfigContents="apiVersion: v1\nusers: [{user: {token: s3cr3t}}]\n"),
            400,
            "account 'a': kubeconfigContents: an inline kubeconfig is not accepted",
        ),
        (
            "POST",
            {"type": "aws", "name": "a", "accountId": "123"},
            400,
            "account 'a': type: 'aws' accounts are not accepted here: the hub manages 'kubernetes' accounts only",
        ),
        ("POST", {"name": "a"}, 400, "account 'a': type: required"),
        (
            "POST",
            [k8s("a")],
            400,
            'the body must be a JSON object (one account definition with its "type"), got a list',
        ),
        (
            "POST",
            k8s("a", namespace=["web"]),
            400,
            "account 'a': namespace: unknown field (did you mean 'namespaces'?)",
        ),
        (
            "POST",
            k8s("a", namespaces=["web"], omitNamespaces=["x"]),
            400,
            "account 'a': namespaces and omitNamespaces cannot be combined",
        ),
        (
            "POST",
            k8s("a", kubeconfigFile="encryptedFile:k8s!n:kc"),
            400,
            "account 'a': kubeconfigFile: 'encryptedFile:k8s!n:kc': the key is missing (k:<key>)",
        ),
        ("POST", k8s("bad_"), 400, "account 'bad_': name: 'bad_' is not a valid account name"),
        ("POST", '{"type": "kubernetes"', 400, "the body is not valid JSON"),
        ("POST", "", 400, "the body is empty: send one account definition"),
        (
            "PUT",
            k8s("existing", cacheThreads="2"),
            400,
            "account 'existing': cacheThreads: expected an integer, got a string ('2')",
        ),
        (
            "PUT",
            k8s("existing", kinds=["Deployment"], omitKinds=["Secret"]),
            400,
            "account 'existing': kinds and omitKinds cannot be combined",
        ),
    ],
)
async def test_an_invalid_request_changes_nothing(
    intercepting: AccountsHub, method: str, body: Any, status: int, message: str
) -> None:
    hub = intercepting
    hub.agent("agent-0")
    await hub.call("POST", "/credentials", k8s("existing", namespaces=["web"]))
    await hub.state("existing", "ACTIVE")
    before = await hub.snapshot()
    got, answer = await hub.call(method, "/credentials", body)
    assert (got, answer["status"]) == (status, status)
    assert answer["error"].startswith(message), answer["error"]
    assert "s3cr3t" not in answer["error"]
    assert await hub.snapshot() == before


async def test_invalid_parameters_are_named(passthrough: AccountsHub) -> None:
    hub = passthrough
    status, answer = await hub.call("GET", "/credentials", expand="maybe")
    assert (status, answer["error"]) == (400, "expand: expected true or false, got 'maybe'")
    status, answer = await hub.call("GET", "/credentials/type/kubernetes", limit="0")
    assert (status, answer["error"]) == (400, "limit: expected a whole number from 1 to 10000, got '0'")
    status, answer = await hub.call("DELETE", "/credentials/-bad name")
    assert (status, answer["error"]) == (
        400,
        "name: '-bad name' is not a valid account name: use 1-253 letters, "
        "digits, '-', '_' or '.', starting and ending with a letter or digit",
    )
    status, answer = await hub.call("POST", "/credentials", k8s("a", namespaces=["Web"], debug="yes"))
    assert status == 400 and len(answer["problems"]) == 2  # every problem at once


def test_the_api_documents_its_routes() -> None:
    app = FastAPI()
    app.include_router(credentials_router(None))  # type: ignore[arg-type]
    doc = app.openapi()
    assert set(doc["paths"]) == {"/credentials", "/credentials/type/{accountType}", "/credentials/{accountName}"}
    assert set(doc["paths"]["/credentials"]) == {"get", "post", "put"}
    schema = doc["paths"]["/credentials"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["type", "name"] and schema["example"]["type"] == "kubernetes"

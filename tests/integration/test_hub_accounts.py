"""Dynamic accounts through the REST API, on SQLite, PostgreSQL and MariaDB for real.

The hub side is all real: the store on each database, the registry, the dispatcher that sends
AddAccounts/DeleteAccounts, the accounts service, its router served by uvicorn on a socket and
called over HTTP (by `curl` itself for the seeds' examples), and Kubernetes Secrets read from
kubesim through the hub's own kubeconfig. The agents are `ScriptedAgent`s: they stand where an
agent's Caching stream ends in the hub (a registry session whose control messages they receive)
and answer as an agent does, each account as its test decides (take it and report watching,
take it and report an error, refuse it). The end-to-end test with agent processes lives with the
agent's side.

Nothing waits by sleeping: tests wait on the service's change notifications (`wait_for`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from kubernetes import client, config
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from scaleagent.hub.accounts.secrets_box import SecretBox, generate_key, parse_keys
from scaleagent.hub.api.accounts import accounts_router
from scaleagent.hub.config import DynamicAccountsConfig
from scaleagent.hub.store import async_url
from scaleagent.hub.store.models import Account
from scaleagent.protocol import pb
from tests.hub_harness import WAIT, AccountsHub, run_curl, secret, seed_curl

SEED_ZONE = "agent-1_namespace1"


def accounts_hub(
    db_url: str, kubeconfig: Path, key: str, *, grace: float = 60.0, retry_every: float = 3600.0, max_retries: int = 3
) -> AccountsHub:
    settings = DynamicAccountsConfig(
        retry_frequency_seconds=retry_every, max_retries=max_retries, agent_timeout_seconds=5.0
    )
    return AccountsHub(db_url, kubeconfig, settings, key=key, grace=grace)


@pytest.fixture
async def hub(db_url: str, kubesim: Any) -> AsyncIterator[AccountsHub]:
    h = await accounts_hub(db_url, kubesim.admin(0), generate_key()).start()
    yield h
    await h.stop()


@pytest.fixture
def core(kubesim: Any) -> Any:
    api = config.new_client_from_config(config_file=str(kubesim.admin(0)))
    yield client.CoreV1Api(api)
    api.close()


async def stored_blob(db_url: str, name: str) -> bytes | None:
    """The kubeconfig column as the database holds it, read behind the service's back."""
    engine = create_async_engine(async_url(db_url))
    try:
        async with engine.connect() as conn:
            return (await conn.execute(select(Account.kubeconfig_encrypted).where(Account.name == name))).scalar()
    finally:
        await engine.dispose()


# --- the seeds' examples ------------------------------------------------------------------------


async def test_the_seeds_curl_requests_work_verbatim(
    hub: AccountsHub, core: Any, kubesim: Any, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    kubeconfig = kubesim.admin(1).read_bytes()  # account-02's cluster
    secret(core, "spinnaker", "kubeconfig", {"config": kubeconfig})
    plain = hub.agent("agent-0")  # no zone: account-01 may go to it
    zoned = hub.agent("agent-1", zone_id=SEED_ZONE)  # account-02's zone

    status, created = await run_curl(seed_curl("POST"), hub.port)
    assert status == 201
    assert [(a["name"], a["state"], a["zoneId"], a["kubeconfigFile"]) for a in created] == [
        ("account-01", "INACTIVE", None, None),
        ("account-02", "INACTIVE", SEED_ZONE, "encryptedFile:k8s!n:kubeconfig!k:config!ns:spinnaker"),
    ]
    assert not plain.added and not zoned.added  # creating sends nothing

    status, patched = await run_curl(seed_curl("PATCH"), hub.port)
    assert status == 202
    assert {a["name"]: a["state"] for a in patched} == {"account-01": "TO_MIGRATE", "account-02": "TO_MIGRATE"}
    await hub.state("account-01", "ACTIVE")
    await hub.state("account-02", "ACTIVE")

    # account-02 went to its zone only, with the Secret's kubeconfig; account-01 (no zone, no
    # kubeconfig: the agent's own service account) to the first agent, which took it.
    assert [a.name for a in zoned.added] == ["account-02"] and zoned.kubeconfig_of("account-02") == kubeconfig
    assert [a.name for a in plain.added] == ["account-01"] and plain.kubeconfig_of("account-01") == b""
    status, one = await hub.call("GET", "/agents/kubernetes/accounts/account-02")
    assert status == 200 and one["state"] == "ACTIVE" and one["agentId"] == "agent-1"
    assert one["kubeHost"] == "https://account-02.clusters.test:6443" and one["failedCount"] == 0

    # At rest: encrypted, never plain; in answers and logs: never at all.
    blob = await stored_blob(db_url, "account-02")
    assert blob and kubeconfig not in blob and b"certificate-authority-data" not in blob
    assert SecretBox(parse_keys(hub.key)).decrypt(blob) == kubeconfig
    status, listed = await hub.call("GET", "/armory/accounts")
    for text in (json.dumps(listed), json.dumps(one), caplog.text):  # DEBUG logs of every library included
        assert kubeconfig.decode() not in text and base64.b64encode(kubeconfig).decode() not in text
        assert hub.key not in text
    for view in [*listed, one]:
        assert "kubeconfig" not in {k.lower() for k in view} and blob.decode() not in json.dumps(view)


async def test_without_a_zone_agents_are_asked_in_turn_and_the_taker_zone_is_recorded(hub: AccountsHub) -> None:
    first = hub.agent("agent-a", zone_id="east", behaviour={"acc": "refuse:dynamic accounts are full here"})
    disabled = hub.agent("agent-off", zone_id="north", dynamic=False)
    second = hub.agent("agent-b", zone_id="west")
    third = hub.agent("agent-c", zone_id="south")
    await hub.call("POST", "/armory/accounts", [{"name": "acc"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "acc", "state": "ACTIVE"}])
    row = await hub.state("acc", "ACTIVE")
    assert (row.zone_id, row.agent_id) == ("west", "agent-b")
    assert [a.name for a in first.added] == ["acc"] and [a.name for a in second.added] == ["acc"]
    assert not third.added and not disabled.added


async def test_a_zone_sends_to_every_agent_of_that_zone_and_no_other(hub: AccountsHub) -> None:
    z1, z2 = hub.agent("z-1", zone_id="z"), hub.agent("z-2", zone_id="z")
    other = hub.agent("o-1", zone_id="other")
    await hub.call("POST", "/armory/accounts", [{"name": "zoned", "zoneId": "z", "namespaces": ["web"]}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "zoned", "state": "ACTIVE"}])
    await hub.state("zoned", "ACTIVE")
    assert [a.name for a in z1.added] == [a.name for a in z2.added] == ["zoned"] and not other.added
    sent = z1.added[0]
    assert dict(sent.properties) == {"namespaces": ["web"]} and sent.context == ""


# --- validation: nothing is partly applied ----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            [{"name": "ok-1"}, {"name": "ok-2", "zoneID": "z"}],
            400,
            "accounts[1] ('ok-2'): zoneID: unknown field (did you mean 'zoneId'?)",
        ),
        (
            [{"name": "ok-1"}, {"name": "ok-2", "zoneId": 5}],
            400,
            "accounts[1] ('ok-2'): zoneId: expected a string, got a number (5)",
        ),
        (
            [{"name": "ok-1"}, {"name": "ok-1"}],
            400,
            "accounts[1] ('ok-1'): the name 'ok-1' is also accounts[0]: each account may appear once per request",
        ),
        (
            [{"name": "ok-1"}, {"name": "-bad name"}],
            400,
            "accounts[1] ('-bad name'): name: '-bad name' is not a valid account name: use 1-253 letters, digits, '-', "
            "'_' or '.', starting and ending with a letter or digit",
        ),
        ([{"name": "ok-1"}, {"zoneId": "z"}], 400, "accounts[1]: name: required"),
        (
            [{"name": "ok-1"}, "ok-2"],
            400,
            'accounts[1]: expected an object such as {"name": "account-01"}, got a string (\'ok-2\')',
        ),
        ([{"name": "ok-1", "state": "ACTIVE"}], 400, "accounts[0] ('ok-1'): state: unknown field"),
        (
            [{"name": "ok-1", "namespaces": ["web"], "omitNamespaces": ["kube-system"]}],
            400,
            "accounts[0] ('ok-1'): namespaces and omitNamespaces cannot be combined: give one list or the other",
        ),
        (
            [{"name": "ok-1", "namespaces": ["Web"]}],
            400,
            "accounts[0] ('ok-1'): namespaces: 'Web' is not a namespace name",
        ),
        (
            [{"name": "ok-1", "kinds": ["Deployment", 3]}],
            400,
            "accounts[0] ('ok-1'): kinds[1]: expected a string, got a number (3)",
        ),
        (
            [{"name": "ok-1", "kubeconfigFile": "encryptedFile:k8s!n:kc"}],
            400,
            "accounts[0] ('ok-1'): kubeconfigFile: 'encryptedFile:k8s!n:kc': the key is missing (k:<key>)",
        ),
        ([{"name": "ok-1", "context": "c"}], 400, "accounts[0] ('ok-1'): context only applies with a kubeconfigFile"),
        ({"name": "ok-1"}, 400, "the body must be a JSON list of accounts, got an object"),
        ([], 400, "the body is an empty list: give at least one account"),
        ('[{"name": "ok-1"}', 400, "the body is not valid JSON (unexpected end of data at line 1, column 18)"),
    ],
)
async def test_an_invalid_create_is_refused_whole(hub: AccountsHub, body: Any, status: int, message: str) -> None:
    got, answer = await hub.call("POST", "/armory/accounts", body)
    assert (got, answer["status"]) == (status, status)
    assert answer["error"].startswith(message), answer["error"]
    assert await hub.accounts.list_accounts() == []  # not even the valid ones


async def test_several_problems_are_reported_at_once(hub: AccountsHub) -> None:
    status, answer = await hub.call("POST", "/armory/accounts", [{"name": "a", "zoneId": 1}, {"name": "b c"}])
    assert status == 400 and len(answer["problems"]) == 2
    assert answer["error"] == "; ".join(answer["problems"])


async def test_an_existing_name_refuses_the_whole_create(hub: AccountsHub) -> None:
    await hub.call("POST", "/armory/accounts", [{"name": "taken"}])
    await hub.store.upsert_account("from-a-file", state="ACTIVE")  # what the registry writes for a file account
    status, answer = await hub.call("POST", "/armory/accounts", [{"name": "fresh"}, {"name": "taken"}])
    assert (status, answer["error"]) == (409, "account 'taken' already exists: choose another name")
    status, answer = await hub.call("POST", "/armory/accounts", [{"name": "from-a-file"}])
    assert status == 409 and "configured in an agent's own file" in answer["error"]
    assert [r.name for r in await hub.accounts.list_accounts()] == ["taken"]


async def test_an_invalid_patch_changes_nothing(hub: AccountsHub) -> None:
    hub.agent("agent-0", behaviour={"busy": "silent"})
    await hub.call("POST", "/armory/accounts", [{"name": "a"}, {"name": "busy"}])
    before = await hub.accounts.list_accounts()

    status, answer = await hub.call("PATCH", "/armory/accounts", [{"name": "a", "zoneId": "z"}, {"name": "nope"}])
    assert (status, answer["error"]) == (404, "no account named 'nope'")
    status, answer = await hub.call("PATCH", "/armory/accounts", [{"name": "a", "state": "RUNNING"}])
    assert (status, answer["error"]) == (
        400,
        "accounts[0] ('a'): state: must be ACTIVE or INACTIVE, got a string ('RUNNING')",
    )
    status, answer = await hub.call(
        "PATCH", "/armory/accounts", [{"name": "a", "namespaces": ["x"]}, {"name": "a", "state": "ACTIVE"}]
    )
    assert status == 400 and "each account may appear once per request" in answer["error"]
    status, answer = await hub.call(
        "PATCH", "/armory/accounts", [{"name": "a", "zoneId": "z", "kubeconfigFile": None, "context": "c"}]
    )
    assert status == 400 and "context only applies with a kubeconfigFile" in answer["error"]
    assert await hub.accounts.list_accounts() == before

    await hub.call("PATCH", "/armory/accounts", [{"name": "busy", "state": "ACTIVE"}])
    # ACTIVATING, and the agent that took it recorded: the migration's own writes are done.
    await hub.until("busy", lambda r: r.state == "ACTIVATING" and r.agent_id == "agent-0", "taken by agent-0")
    before = await hub.accounts.list_accounts()
    status, answer = await hub.call(
        "PATCH", "/armory/accounts", [{"name": "a", "zoneId": "z"}, {"name": "busy", "state": "ACTIVE"}]
    )
    assert status == 409
    assert answer["error"] == (
        "account 'busy' cannot go from ACTIVATING to TO_MIGRATE: a migration is already in "
        "progress; wait until it is ACTIVE or FAILED"
    )
    status, answer = await hub.call("PATCH", "/armory/accounts", [{"name": "busy", "namespaces": ["web"]}])
    assert status == 409 and "its settings cannot change while it is ACTIVATING" in answer["error"]
    assert await hub.accounts.list_accounts() == before


async def test_settings_change_and_merge(hub: AccountsHub) -> None:
    await hub.call("POST", "/armory/accounts", [{"name": "s", "namespaces": ["web"], "kinds": ["Deployment"]}])
    status, [view] = await hub.call(
        "PATCH",
        "/armory/accounts",
        [{"name": "s", "zoneId": "eu", "namespaces": None, "omitNamespaces": ["kube-system"]}],
    )
    assert status == 202
    assert (view["state"], view["zoneId"], view.get("namespaces"), view["omitNamespaces"], view["kinds"]) == (
        "INACTIVE",
        "eu",
        None,
        ["kube-system"],
        ["Deployment"],
    )
    status, answer = await hub.call("PATCH", "/armory/accounts", [{"name": "s", "namespaces": ["web"]}])
    assert status == 400 and "namespaces and omitNamespaces cannot be combined" in answer["error"]


# --- failures and retries -----------------------------------------------------------------------


async def test_an_unresolvable_reference_fails_that_account_not_the_request(hub: AccountsHub, core: Any) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    secret(core, namespace, "kc", {"other": b"x"})
    agent = hub.agent("agent-0")
    await hub.call(
        "POST",
        "/armory/accounts",
        [
            {"name": "good"},
            {"name": "no-key", "kubeconfigFile": f"encryptedFile:k8s!n:kc!k:config!ns:{namespace}"},
            {"name": "no-file", "kubeconfigFile": "/nonexistent/kubeconfig"},
        ],
    )
    status, _ = await hub.call(
        "PATCH", "/armory/accounts", [{"name": n, "state": "ACTIVE"} for n in ("good", "no-key", "no-file")]
    )
    assert status == 202
    await hub.state("good", "ACTIVE")
    row = await hub.state("no-key", "FAILED")
    assert (
        row.error_message
        == f"cannot resolve kubeconfigFile: secret {namespace}/kc: has no key 'config' (its keys: 'other')"
    )
    assert row.failed_count == 1 and row.kubeconfig_encrypted is None
    row = await hub.state("no-file", "FAILED")
    assert row.error_message == (
        "cannot resolve kubeconfigFile: kubeconfig file /nonexistent/kubeconfig: the file does not exist on the hub"
    )
    assert [a.name for a in agent.added] == ["good"]


async def test_an_agent_error_fails_the_account_with_its_reason_and_the_agent_is_told_to_stop(hub: AccountsHub) -> None:
    agent = hub.agent("agent-0", behaviour={"bad": "error:cannot connect to https://10.0.0.1:6443: refused"})
    await hub.call("POST", "/armory/accounts", [{"name": "bad"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "bad", "state": "ACTIVE"}])
    row = await hub.state("bad", "FAILED")
    assert row.error_message == "agent agent-0: cannot connect to https://10.0.0.1:6443: refused"
    assert row.failed_count == 1
    await hub.until("bad", lambda r: agent.deleted == ["bad"], "deleted from the agent")
    status, view = await hub.call("GET", "/armory/accounts/bad")
    assert (view["state"], view["errorMessage"], view["failedCount"]) == ("FAILED", row.error_message, 1)


async def test_no_agent_to_take_it(hub: AccountsHub) -> None:
    await hub.call("POST", "/armory/accounts", [{"name": "alone", "zoneId": "mars"}])
    hub.agent("earthling", zone_id="earth")
    await hub.call("PATCH", "/armory/accounts", [{"name": "alone", "state": "ACTIVE"}])
    row = await hub.state("alone", "FAILED")
    assert row.error_message == (
        "no agent in zone 'mars' that accepts dynamic accounts is connected to this hub "
        "(connected: earthling (zone 'earth'))"
    )


async def test_every_agent_refusing_is_a_failure_naming_each(hub: AccountsHub) -> None:
    hub.agent("a1", default="refuse:dynamic accounts are disabled")
    hub.agent("a2", default="refuse:account 'x' is in my configuration file")
    await hub.call("POST", "/armory/accounts", [{"name": "x"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "x", "state": "ACTIVE"}])
    row = await hub.state("x", "FAILED")
    assert row.error_message == (
        "no agent took the account: agent a1: dynamic accounts are disabled; "
        "agent a2: account 'x' is in my configuration file"
    )


async def test_failed_accounts_are_retried_up_to_max_retries_and_a_manual_patch_starts_over(
    db_url: str, kubesim: Any
) -> None:
    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key(), retry_every=0.05, max_retries=2).start()
    try:
        agent = hub.agent("agent-0", default="error:forbidden: cannot list namespaces")
        await hub.call("POST", "/armory/accounts", [{"name": "r"}])
        await hub.call("PATCH", "/armory/accounts", [{"name": "r", "state": "ACTIVE"}])
        row = await hub.until("r", lambda r: r.state == "FAILED" and r.failed_count == 3, "FAILED 3 times")
        assert row.error_message == "agent agent-0: forbidden: cannot list namespaces"
        assert len(agent.added) == 3  # the first attempt and maxRetries retries
        await hub.accounts.retry_failed()  # as the loop does, again and again: the account is left alone now
        assert (await hub.row("r")).state == "FAILED" and len(agent.added) == 3

        agent.default = "watch"
        status, [view] = await hub.call("PATCH", "/armory/accounts", [{"name": "r", "state": "ACTIVE"}])
        assert (view["state"], view["failedCount"], view["errorMessage"]) == ("TO_MIGRATE", 0, None)
        row = await hub.state("r", "ACTIVE")
        assert row.failed_count == 0 and row.error_message is None
    finally:
        await hub.stop()


async def test_a_retry_succeeds_once_the_cause_is_fixed(db_url: str, kubesim: Any, core: Any) -> None:
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key(), retry_every=0.05, max_retries=50).start()
    try:
        agent = hub.agent("agent-0")
        ref = f"encryptedFile:k8s!n:later!k:config!ns:{namespace}"
        await hub.call("POST", "/armory/accounts", [{"name": "later", "kubeconfigFile": ref}])
        await hub.call("PATCH", "/armory/accounts", [{"name": "later", "state": "ACTIVE"}])
        await hub.until("later", lambda r: r.state == "FAILED" and "not found" in (r.error_message or ""), "FAILED")
        secret(core, namespace, "later", {"config": kubesim.admin(1).read_bytes()})
        row = await hub.state("later", "ACTIVE")
        assert row.failed_count >= 1 and agent.kubeconfig_of("later") == kubesim.admin(1).read_bytes()
    finally:
        await hub.stop()


# --- deactivation and deletion ------------------------------------------------------------------


async def test_deactivation_tells_the_agents_then_is_inactive(hub: AccountsHub, kubesim: Any, tmp_path: Path) -> None:
    path = tmp_path / "kc.yml"
    path.write_bytes(kubesim.admin(1).read_bytes())
    agent = hub.agent("agent-0", zone_id="z")
    await hub.call("POST", "/armory/accounts", [{"name": "d", "zoneId": "z", "kubeconfigFile": str(path)}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "d", "state": "ACTIVE"}])
    assert (await hub.state("d", "ACTIVE")).kubeconfig_encrypted
    status, [view] = await hub.call("PATCH", "/armory/accounts", [{"name": "d", "state": "INACTIVE"}])
    assert (status, view["state"]) == (202, "TO_DEACTIVATE")
    row = await hub.state("d", "INACTIVE")
    assert agent.deleted == ["d"] and row.kubeconfig_encrypted is None  # no secret kept for an idle account
    assert "d" not in hub.registry.accounts
    status, [view] = await hub.call("PATCH", "/armory/accounts", [{"name": "d", "state": "INACTIVE"}])
    assert (status, view["state"], agent.deleted) == (202, "INACTIVE", ["d"])  # idempotent


async def test_delete_tells_the_agent_then_deletes_the_rows(hub: AccountsHub) -> None:
    agent = hub.agent("agent-0")
    await hub.call("POST", "/armory/accounts", [{"name": "x1"}, {"name": "x2"}, {"name": "x3"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "x1", "state": "ACTIVE"}])
    await hub.state("x1", "ACTIVE")

    status, answer = await hub.call("DELETE", "/armory/accounts", ["x2", "nope"])
    assert (status, answer["error"]) == (404, "no account named 'nope'")
    status, answer = await hub.call("DELETE", "/armory/accounts", ["x1", "x2"])
    assert (status, answer) == (200, {"deleted": ["x1", "x2"], "warnings": []})
    assert agent.deleted == ["x1"]  # the only one an agent followed
    status, answer = await hub.call("DELETE", "/armory/accounts/x3")
    assert (status, answer["deleted"]) == (200, ["x3"])
    assert await hub.accounts.list_accounts() == []
    assert (await hub.call("GET", "/agents/kubernetes/accounts/x1"))[0] == 404
    status, answer = await hub.call("DELETE", "/armory/accounts", '"x1"')
    assert (status, answer["error"]) == (
        400,
        "the body must be a non-empty JSON list of account names, got a string ('x1')",
    )


# --- orphans and restarts -----------------------------------------------------------------------


async def test_an_orphaned_account_comes_back_when_an_agent_of_its_zone_connects(
    db_url: str, kubesim: Any, tmp_path: Path
) -> None:
    path = tmp_path / "kc.yml"
    path.write_bytes(kubesim.admin(1).read_bytes())
    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key(), grace=0).start()
    try:
        first = hub.agent("agent-0", zone_id="z")
        hub.agent("elsewhere", zone_id="other")
        await hub.call("POST", "/armory/accounts", [{"name": "o", "zoneId": "z", "kubeconfigFile": str(path)}])
        await hub.call("PATCH", "/armory/accounts", [{"name": "o", "state": "ACTIVE"}])
        await hub.state("o", "ACTIVE")
        path.unlink()  # recovery uses the stored snapshot, not the source
        first.disconnect()
        await hub.state("o", "ORPHANED")
        returning = hub.agent("agent-0", zone_id="z")
        row = await hub.state("o", "ACTIVE")
        assert returning.kubeconfig_of("o") == kubesim.admin(1).read_bytes()
        assert row.error_message is None and row.agent_id == "agent-0"
        assert [a.agent_id for a in hub.agents if a.added and a.added[-1].name == "o"] == ["agent-0", "agent-0"]
    finally:
        await hub.stop()


async def test_an_orphan_goes_at_once_to_another_connected_agent(db_url: str, kubesim: Any) -> None:
    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key(), grace=0).start()
    try:
        first = hub.agent("a-1")
        await hub.call("POST", "/armory/accounts", [{"name": "o2"}])
        await hub.call("PATCH", "/armory/accounts", [{"name": "o2", "state": "ACTIVE"}])
        await hub.state("o2", "ACTIVE")
        second = hub.agent("a-2", behaviour={"o2": "silent"})  # takes it only once it is orphaned
        first.disconnect()
        await hub.until("o2", lambda r: [a.name for a in second.added] == ["o2"], "sent to a-2")
        assert (await hub.row("o2")).state == "ORPHANED"
        second.describe("o2", "watching")
        assert (await hub.state("o2", "ACTIVE")).agent_id == "a-2"
    finally:
        await hub.stop()


async def test_after_a_hub_restart_active_accounts_go_back_to_the_agents_that_connect(
    db_url: str, kubesim: Any, tmp_path: Path
) -> None:
    path = tmp_path / "kc.yml"
    path.write_bytes(kubesim.admin(1).read_bytes())
    key = generate_key()
    hub = await accounts_hub(db_url, kubesim.admin(0), key).start()
    try:
        hub.agent("agent-0", behaviour={"stuck": "silent"})
        await hub.call("POST", "/armory/accounts", [{"name": "kept", "kubeconfigFile": str(path)}, {"name": "stuck"}])
        await hub.call(
            "PATCH", "/armory/accounts", [{"name": "kept", "state": "ACTIVE"}, {"name": "stuck", "state": "ACTIVE"}]
        )
        await hub.state("kept", "ACTIVE")
        await hub.state("stuck", "ACTIVATING")
    finally:
        await hub.stop()

    again = await accounts_hub(db_url, kubesim.admin(0), key, retry_every=3600).start()
    try:
        assert {"kept", "stuck"} <= again.registry.managed
        row = await again.row("stuck")  # half done by the previous run: failed, so that it is retried
        assert (row.state, row.error_message) == (
            "FAILED",
            "the hub restarted during the migration; it will be retried",
        )
        assert (await again.row("kept")).state == "ACTIVE"
        agent = again.agent("agent-0")
        await again.until("kept", lambda r: agent.added and agent.added[-1].name == "kept", "sent again")
        assert agent.kubeconfig_of("kept") == kubesim.admin(1).read_bytes()
        assert again.registry.accounts["kept"].state == "ACTIVE"
        assert (await again.row("kept")).state == "ACTIVE"
    finally:
        await again.stop()


# --- reading ------------------------------------------------------------------------------------


async def test_list_filters(hub: AccountsHub) -> None:
    await hub.call(
        "POST",
        "/armory/accounts",
        [
            {"name": "prod-eu", "zoneId": "eu"},
            {"name": "prod-us", "zoneId": "us"},
            {"name": "dev-eu", "zoneId": "eu"},
            {"name": "nozone"},
        ],
    )
    await hub.store.upsert_account("file-account", state="ACTIVE")  # an agent's own: not listed here

    async def names(**params: Any) -> list[str]:
        status, body = await hub.call("GET", "/armory/accounts", **params)
        assert status == 200, body
        return [a["name"] for a in body]

    assert await names() == ["dev-eu", "nozone", "prod-eu", "prod-us"]
    assert await names(zoneId="eu") == ["dev-eu", "prod-eu"]
    assert await names(zoneId="") == ["nozone"]
    assert await names(name="prod-*") == ["prod-eu", "prod-us"]
    assert await names(name="prod-eu") == ["prod-eu"]
    assert await names(state="INACTIVE,FAILED", zoneId="us") == ["prod-us"]
    assert await names(state="ACTIVE") == []
    status, body = await hub.call("GET", "/armory/accounts", state="RUNNING")
    assert (status, body["error"]) == (
        400,
        "state: 'RUNNING' is not an account state; use INACTIVE, ACTIVE, FAILED, "
        "ORPHANED, TO_MIGRATE, ACTIVATING, TO_DEACTIVATE, DEACTIVATING, DELETING, DELETE_FAILED",
    )
    status, body = await hub.call("GET", "/agents/kubernetes/accounts/file-account")
    assert (status, body["error"]) == (
        404,
        "'file-account' is configured in an agent's own file, not a dynamic account: change it there",
    )
    view = (await hub.call("GET", "/armory/accounts/prod-eu"))[1]
    assert set(view) == {
        "name",
        "state",
        "zoneId",
        "kubeconfigFile",
        "errorMessage",
        "failedCount",
        "agentId",
        "kubeHost",
        "createdAt",
        "updatedAt",
        "status",  # Armory's names for state and failedCount
        "retryCount",
    }
    assert view["status"] == view["state"] and view["retryCount"] == view["failedCount"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", view["createdAt"])


def test_the_api_documents_its_bodies() -> None:
    app = FastAPI()
    app.include_router(accounts_router(None))  # type: ignore[arg-type]
    doc = app.openapi()
    post = doc["paths"]["/armory/accounts"]["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema["type"] == "array" and schema["items"]["required"] == ["name"]
    assert schema["items"]["additionalProperties"] is False
    assert set(doc["paths"]) == {
        "/armory/accounts",
        "/armory/accounts/{accountName}",
        "/agents/kubernetes/accounts/{accountName}",
        "/armory/accounts/dynamic",
    }
    assert set(doc["paths"]["/armory/accounts/dynamic"]) == {"post", "put"}


# --- the command line ---------------------------------------------------------------------------


async def cli(hub: AccountsHub, *args: str) -> tuple[int, str, str]:
    """`scale-agent accounts ...` as a process, against the hub's API."""
    hub_option = [] if args[0] == "generate-key" else ["--hub", hub.url]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scaleagent.cli",
        "accounts",
        *args[:1],
        *hub_option,
        *args[1:],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_the_command_line(tmp_path: Path, kubesim: Any) -> None:
    hub = await accounts_hub(f"sqlite:///{tmp_path / 'hub.db'}", kubesim.admin(0), generate_key()).start()
    try:
        hub.agent("agent-0", zone_id="eu", behaviour={"bad": "error:401 Unauthorized"})
        code, out, err = await cli(hub, "add", "web-eu", "--zone", "eu", "--namespaces", "web,api", "--activate")
        assert code == 0, err
        assert out.splitlines()[0].split() == ["NAME", "STATE", "ZONE", "KUBECONFIG", "AGENT", "FAILED", "ERROR"]
        assert out.splitlines()[1].split() == ["web-eu", "TO_MIGRATE", "eu", "-", "-", "0"]
        code, out, err = await cli(hub, "add", "bad")
        assert code == 0, err
        code, out, err = await cli(hub, "migrate", "web-eu", "bad", "--wait", "-o", "json")
        assert code == 1  # one of them FAILED
        states = {a["name"]: (a["state"], a["errorMessage"]) for a in json.loads(out)}
        assert states == {"web-eu": ("ACTIVE", None), "bad": ("FAILED", "agent agent-0: 401 Unauthorized")}

        code, out, _ = await cli(hub, "list", "--state", "ACTIVE")
        assert [line.split()[0] for line in out.splitlines()] == ["NAME", "web-eu"]
        code, out, _ = await cli(hub, "get", "web-eu")
        assert "namespaces:" in out and "web,api" in out
        code, out, _ = await cli(hub, "deactivate", "web-eu")
        assert code == 0 and "TO_DEACTIVATE" in out
        await hub.state("web-eu", "INACTIVE")
        code, out, err = await cli(hub, "delete", "web-eu", "bad")
        assert (code, out) == (0, "deleted: bad, web-eu\n"), err

        code, out, err = await cli(hub, "add", "bad_")
        assert code == 1 and out == ""
        assert err == (
            "error: accounts[0] ('bad_'): name: 'bad_' is not a "
            "valid account name: use 1-253 letters, digits, '-', '_' or '.', starting and ending with a "
            "letter or digit\n"
        )
        code, out, err = await cli(hub, "generate-key")
        assert code == 0 and parse_keys(out.strip())
    finally:
        await hub.stop()
    code, _, err = await cli(hub, "list")
    assert code == 1 and err.startswith(f"error: cannot reach the hub at {hub.url}: ")


async def test_an_agent_that_takes_an_account_and_leaves_at_once_fails_it(hub: AccountsHub) -> None:
    agent = hub.agent("agent-a", "z1", default="silent")
    answer = agent._answer

    def answer_then_leave(request_id: str, answers: list[pb.AccountAnswer], reports: list) -> None:
        answer(request_id, answers, reports)
        agent.disconnect()

    agent._answer = answer_then_leave  # type: ignore[method-assign]
    await hub.call("POST", "/armory/accounts", [{"name": "acc", "zoneId": "z1"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "acc", "state": "ACTIVE"}])
    row = await hub.state("acc", "FAILED")
    assert "disconnected right after taking the account" in (row.error_message or "")


async def test_an_account_deleted_while_its_agent_was_away_is_stopped_when_it_returns(hub: AccountsHub) -> None:
    agent = hub.agent("agent-a", "z1")
    await hub.call("POST", "/armory/accounts", [{"name": "acc", "zoneId": "z1"}])
    await hub.call("PATCH", "/armory/accounts", [{"name": "acc", "state": "ACTIVE"}])
    await hub.state("acc", "ACTIVE")
    agent.disconnect()
    status, answer = await hub.call("DELETE", "/armory/accounts/acc")
    assert status == 200 and answer["deleted"] == ["acc"] and "told to stop" in answer["warnings"][0]
    back = hub.agent("agent-a", "z1")
    back.describe("acc", "watching")  # what it still follows, as its hello says
    await hub.accounts.wait_for(lambda: _true_if(back.deleted == ["acc"]), WAIT)
    assert (await hub.call("GET", "/armory/accounts/acc"))[0] == 404


async def _true_if(value: bool) -> bool:
    return value


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_database_busy_while_a_migration_stores_its_kubeconfigs_fails_no_account(
    db_url: str, kubesim: Any, tmp_path: Path
) -> None:
    """The kubeconfig snapshots of accounts migrated together are one write. A database that
    cannot take it now (locked, say) must not fail them all: the migration runs again."""
    from scaleagent.hub.store import StoreUnavailable

    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key()).start()
    try:
        hub.agent("agent-0")
        path = tmp_path / "kc.yml"
        path.write_bytes(kubesim.admin(1).read_bytes())
        names = ["a", "b", "c"]
        await hub.call("POST", "/armory/accounts", [{"name": n, "kubeconfigFile": str(path)} for n in names])
        update_accounts, refused = hub.store.update_accounts, []

        async def locked_once(updates: dict[str, Any], **kwargs: Any) -> Any:
            if not refused and any("kubeconfig_encrypted" in fields for fields in updates.values()):
                refused.append(sorted(updates))
                raise StoreUnavailable("update_accounts on the test database: database is locked")
            return await update_accounts(updates, **kwargs)

        hub.store.update_accounts = locked_once  # type: ignore[method-assign]
        status, _ = await hub.call("PATCH", "/armory/accounts", [{"name": n, "state": "ACTIVE"} for n in names])
        assert status == 202
        rows = [await hub.until(n, lambda r: r.state in ("ACTIVE", "FAILED"), "settled") for n in names]
        assert refused == [names]
        assert [(r.name, r.state, r.failed_count) for r in rows] == [(n, "ACTIVE", 0) for n in names]
    finally:
        await hub.stop()

"""Armory's two deletion states, DELETING and DELETE_FAILED, on SQLite, PostgreSQL and MariaDB
for real (the in-process accounts hub of tests/hub_harness.py): an account is DELETING while its
agents are told to stop; a deletion the database refuses half-way leaves it DELETE_FAILED (not
ACTIVE with no agent), which nothing but another DELETE moves; a hub that stopped during a
deletion finds it DELETE_FAILED when it starts again.

Nothing waits by sleeping: the agent is a ScriptedAgent, and the database's refusal is the
store's own error raised by a wrapped store method (the fault), for one call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from scaleagent.hub.accounts.secrets_box import generate_key
from scaleagent.hub.config import DynamicAccountsConfig
from scaleagent.hub.store import StoreError
from scaleagent.protocol import pb
from tests.hub_harness import AccountsHub


def accounts_hub(db_url: str, kubeconfig: Path, key: str) -> AccountsHub:
    settings = DynamicAccountsConfig(retry_frequency_seconds=3600.0, max_retries=3, agent_timeout_seconds=5.0)
    return AccountsHub(db_url, kubeconfig, settings, key=key)


async def active(hub: AccountsHub, name: str) -> None:
    assert (await hub.call("POST", "/armory/accounts", [{"name": name}]))[0] == 201
    assert (await hub.call("PATCH", "/armory/accounts", [{"name": name, "state": "ACTIVE"}]))[0] == 202
    await hub.state(name, "ACTIVE")


async def test_a_deletion_goes_through_deleting_and_a_failed_one_is_delete_failed(db_url: str, kubesim: Any) -> None:
    hub = await accounts_hub(db_url, kubesim.admin(0), generate_key()).start()
    try:
        agent = hub.agent("agent-1")
        await active(hub, "doomed")

        # What the account's row says when its agent is told to stop following it.
        seen: list[str] = []
        answer = agent._control

        def control(message: pb.CachingControl) -> None:
            if message.WhichOneof("message") != "delete_accounts":
                answer(message)
                return

            async def look_then_answer() -> None:
                for name in message.delete_accounts.names:
                    row = await hub.row(name)
                    seen.append(row.state if row else "gone")
                answer(message)

            asyncio.get_running_loop().create_task(look_then_answer())

        assert agent.session is not None
        agent.session.control = control

        # The database refuses the delete itself (once): the agent has stopped, the row stays.
        delete_accounts = hub.store.delete_accounts

        async def refused(names: list[str]) -> Any:
            hub.store.delete_accounts = delete_accounts  # type: ignore[method-assign]
            raise StoreError("the database is unavailable (injected)")

        hub.store.delete_accounts = refused  # type: ignore[method-assign]
        status, body = await hub.call("DELETE", "/armory/accounts/doomed")
        assert (status, body["status"]) == (503, 503) and "injected" in body["error"]
        assert seen == ["DELETING"]
        row = await hub.state("doomed", "DELETE_FAILED")
        assert row.error_message is not None and "DELETE it again" in row.error_message
        status, view = await hub.call("GET", "/armory/accounts/doomed")
        assert (status, view["state"]) == (200, "DELETE_FAILED")

        # Nothing but a DELETE moves it: a migration is a 409 saying so.
        status, body = await hub.call("PATCH", "/armory/accounts", [{"name": "doomed", "state": "ACTIVE"}])
        assert status == 409 and "DELETE it again" in body["error"]
        status, body = await hub.call("PATCH", "/armory/accounts", [{"name": "doomed", "kinds": ["Pod"]}])
        assert status == 409 and "its settings cannot change" in body["error"]

        # A DELETE again finishes the work.
        status, body = await hub.call("DELETE", "/armory/accounts/doomed")
        assert (status, body["deleted"]) == (200, ["doomed"]), body
        assert await hub.row("doomed") is None
        assert seen == ["DELETING"]  # its agent had stopped already: nothing more to tell it
    finally:
        await hub.stop()


async def test_a_hub_stopped_during_a_deletion_finds_it_delete_failed(db_url: str, kubesim: Any) -> None:
    key = generate_key()
    hub = await accounts_hub(db_url, kubesim.admin(0), key).start()
    try:
        assert (await hub.call("POST", "/armory/accounts", [{"name": "half-gone"}]))[0] == 201
        # As a hub that died between marking the account and deleting its row leaves it.
        await hub.store.update_account("half-gone", expect_states=["INACTIVE"], state="DELETING")
        status, body = await hub.call("DELETE", "/armory/accounts/half-gone")
        assert status == 409 and "a deletion is already in progress" in body["error"]
    finally:
        await hub.stop()
    hub = await accounts_hub(db_url, kubesim.admin(0), key).start()
    try:
        row = await hub.state("half-gone", "DELETE_FAILED")
        assert row.error_message == "the hub restarted during the deletion; DELETE the account again"
        status, body = await hub.call("DELETE", "/armory/accounts/half-gone")
        assert (status, body["deleted"]) == (200, ["half-gone"])
    finally:
        await hub.stop()

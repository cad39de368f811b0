"""What hub replicas decide through the database (`kubesvc_replicas`, `kubesvc_assignments`,
`kubesvc_tasks`), on an SQLite file, the local PostgreSQL and MariaDB for real."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from scaleagent.hub.store import Store
from scaleagent.hub.store.shared import SharedStore


@pytest.fixture
async def shared(db_url: str) -> AsyncIterator[SharedStore]:
    async with await Store.open(db_url) as opened:
        yield SharedStore(opened)


def claim(shared: SharedStore, replica: str, agent: str = "agent", **kw: object):
    return shared.claim("prod", replica=replica, agent=agent, session_id=f"s-{replica}", connections=1, **kw)


async def test_of_two_replicas_claiming_one_account_at_once_exactly_one_wins(shared: SharedStore) -> None:
    results = await asyncio.gather(*(claim(shared, f"hub-{i}") for i in range(6)))
    winners = [row.replica for won, row in results if won]
    assert len(winners) == 1
    assert all(row.replica == winners[0] for _, row in results)  # the losers see who holds it
    assert (await shared.holder("prod")).replica == winners[0]


async def test_a_held_account_moves_only_when_its_holder_has_no_session_or_is_dead(shared: SharedStore) -> None:
    assert (await claim(shared, "hub-a"))[0]
    won, row = await claim(shared, "hub-b")
    assert not won and row.replica == "hub-a"
    assert (await claim(shared, "hub-b", dead=["hub-a"]))[0]
    assert await shared.set_connections("prod", "hub-b", 0)
    assert not await shared.set_connections("prod", "hub-a", 0)  # not hub-a's row any more
    won, row = await claim(shared, "hub-c")
    assert won and row.replica == "hub-c"


async def test_only_the_holder_releases_and_a_dead_replica_is_forgotten_with_its_rows(shared: SharedStore) -> None:
    await shared.heartbeat("hub-a", "http://10.0.0.1:7002")
    await shared.heartbeat("hub-b", "http://10.0.0.2:7002")
    assert (await claim(shared, "hub-a"))[0]
    assert not await shared.release("prod", "hub-b")
    assert await shared.forget_replicas(["hub-a"]) == ["prod"]
    assert await shared.holder("prod") is None
    assert [r.id for r in await shared.replicas()] == ["hub-b"]


async def test_a_restarted_replica_keeps_its_rows_but_with_no_connection(shared: SharedStore) -> None:
    assert (await claim(shared, "hub-a"))[0]
    assert await shared.reset_connections("hub-a") == ["prod"]
    assert (await shared.holder("prod")).connections == 0
    assert (await claim(shared, "hub-b"))[0]


async def test_a_task_of_a_dead_replica_is_ended_once(shared: SharedStore) -> None:
    await shared.put_task("t1", "hub-a", "running", '{"id": "t1", "state": "running"}')
    assert [t.id for t in await shared.running_tasks(["hub-a"])] == ["t1"]
    ends = await asyncio.gather(
        *(
            shared.end_task("t1", expect_replica="hub-a", state="failed", document='{"state": "failed"}')
            for _ in range(3)
        )
    )
    assert sorted(ends) == [False, False, True]
    stored = await shared.get_task("t1")
    assert stored is not None and stored.state == "failed"
    assert await shared.running_tasks(["hub-a"]) == []

"""The store's versioning contract: what list+watch clients depend on."""

from __future__ import annotations

import pytest

from scaleagent.kubesim.errors import StatusError
from scaleagent.kubesim.store import ADDED, BOOKMARK, DELETED, MODIFIED, Store

CM = "/configmaps"


def put(store: Store, name: str, ns: str = "a", **labels: str) -> dict:
    obj = {"metadata": {"name": name, "namespace": ns, "labels": labels}}
    prev = store.get(CM, ns, name)
    store.commit(CM, MODIFIED if prev else ADDED, obj, prev)
    return obj


def delete(store: Store, name: str, ns: str = "a") -> None:
    prev = store.get(CM, ns, name)
    store.commit(CM, DELETED, {**prev, "metadata": {**prev["metadata"]}}, prev)


def test_every_write_gets_the_next_resource_version():
    s = Store()
    a = put(s, "x")
    b = put(s, "x")
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1


def test_pages_stay_at_the_first_pages_version():
    s = Store()
    for i in range(6):
        put(s, f"o{i}")
    items, rv, token, remaining = s.list(CM, "a", None, limit=2)
    assert [o["metadata"]["name"] for o in items] == ["o0", "o1"] and remaining == 4
    delete(s, "o2")
    put(s, "o3", changed="yes")
    put(s, "o25")
    names, labels = [], {}
    while token:
        items, page_rv, token, _ = s.list(CM, "a", None, limit=2, continue_token=token)
        assert page_rv == rv
        names += [o["metadata"]["name"] for o in items]
        labels.update({o["metadata"]["name"]: o["metadata"]["labels"] for o in items})
    assert names == ["o2", "o3", "o4", "o5"]
    assert labels["o3"] == {}


def test_a_continue_token_older_than_the_history_is_410():
    s = Store(history=3)
    for i in range(4):
        put(s, f"o{i}")
    _, _, token, _ = s.list(CM, "a", None, limit=1)
    for i in range(5):
        put(s, f"n{i}")
    with pytest.raises(StatusError) as err:
        s.list(CM, "a", None, limit=1, continue_token=token)
    assert err.value.code == 410


def test_watch_replays_from_a_version_then_streams_live():
    s = Store()
    put(s, "x")
    _, rv, _, _ = s.list(CM, "", None)
    put(s, "y")
    w, initial = s.watch(CM, "", None, rv)
    assert [(e.type, e.key) for e in initial] == [(ADDED, "a/y")]
    delete(s, "x")
    ev = w.queue.get_nowait()
    assert (ev.type, ev.key) == (DELETED, "a/x")


def test_watch_without_version_starts_with_synthetic_adds():
    s = Store()
    put(s, "x")
    put(s, "y", ns="b")
    _, initial = s.watch(CM, "b", None, None)
    assert [(e.type, e.key) for e in initial] == [(ADDED, "b/y")]


def test_watch_from_a_compacted_version_is_410():
    s = Store(history=2)
    put(s, "x")
    _, rv, _, _ = s.list(CM, "", None)
    for i in range(3):
        put(s, f"o{i}")
    with pytest.raises(StatusError) as err:
        s.watch(CM, "", None, rv)
    assert err.value.code == 410
    s.compact()
    with pytest.raises(StatusError):
        s.watch(CM, "", None, s.rv - 1)


def test_selector_transitions_become_added_and_deleted():
    s = Store()
    put(s, "x", tier="db")
    w, _ = s.watch(CM, "", lambda o: o["metadata"]["labels"].get("tier") == "web", s.rv)
    put(s, "x", tier="web")
    put(s, "x", tier="web", more="1")
    put(s, "x", tier="db")
    events = [w.queue.get_nowait() for _ in range(3)]
    assert [e.type for e in events] == [ADDED, MODIFIED, DELETED]
    assert w.queue.empty()
    # Leaving the selector shows the object as it last matched, at the event's version.
    assert events[2].obj["metadata"]["labels"] == {"tier": "web", "more": "1"}
    assert events[2].obj["metadata"]["resourceVersion"] == str(events[2].rv)


def test_a_watcher_that_cannot_keep_up_is_closed():
    s = Store(watch_queue=3)
    w, _ = s.watch(CM, "", None, s.rv)
    for i in range(10):
        put(s, f"o{i}")
    assert w.overflowed and w.closed


async def test_queued_changes_go_out_before_a_bookmark_that_covers_them():
    """A bookmark promises that every change up to its version was sent: it never overtakes the queue."""
    s = Store()
    w, _ = s.watch(CM, "", None, s.rv)
    now = [0.0]
    stream = w.stream(lambda: s.rv, timeout=10, bookmark_interval=1, clock=lambda: now[0])
    put(s, "a")
    put(s, "b")
    now[0] = 5.0  # a bookmark is due while two changes wait in the queue
    assert [e.type for e in await anext(stream)] == [ADDED, ADDED]
    [bookmark] = await anext(stream)
    assert (bookmark.type, bookmark.rv) == (BOOKMARK, s.rv)
    put(s, "c")
    now[0] = 11.0  # the watch times out with a change still queued
    assert [(e.type, e.rv) for e in await anext(stream)] == [(ADDED, s.rv), (BOOKMARK, s.rv)]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


def test_the_owner_index_forgets_owners_without_dependents():
    s = Store()
    obj = {"metadata": {"name": "d", "namespace": "a", "ownerReferences": [{"uid": "owner-1"}]}}
    s.commit(CM, ADDED, obj, None)
    assert [o["metadata"]["name"] for _, o in s.dependents("owner-1")] == ["d"]
    delete(s, "d")
    assert "owner-1" not in s._dependents


def test_the_remaining_count_is_the_lists_version_not_the_current_one():
    s = Store()
    for i in range(6):
        put(s, f"o{i}")
    _, _, token, remaining = s.list(CM, "a", None, limit=2)
    assert remaining == 4
    delete(s, "o3")
    delete(s, "o5")
    put(s, "o45")  # created after the list's version: not counted
    _, _, token, remaining = s.list(CM, "a", None, limit=2, continue_token=token)
    assert remaining == 2  # o4 and o5, as they were

"""The cache never applies an older version of an object over a newer one, whatever arrives.

Two agents streaming one account deliver each other's stale events: deleted objects came back and
updates went backwards. Snapshots (relists) must still replace everything, even after an etcd
restore where versions really go backwards.
"""

from __future__ import annotations

import orjson

from scaleagent.hub.cache import cache as cache_module
from scaleagent.hub.cache.cache import Cache
from scaleagent.protocol.v1 import agent_pb2 as pb

UID = "0b6c1a52-0000-4000-8000-000000000001"
NEW_UID = "0b6c1a52-0000-4000-8000-000000000002"


def obj(name: str, rv: str, uid: str = UID, ns: str = "default", image: str = "web:1") -> bytes:
    meta = {"name": name, "namespace": ns, "uid": uid, "resourceVersion": rv}
    return orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"image": image}})


def ev(type_: int, name: str, rv: str, uid: str = UID, ns: str = "default", **kw: str) -> pb.Event:
    body = obj(name, rv, uid, ns, **kw)
    return pb.Event(
        type=type_, group="", version="v1", kind="Pod", namespace=ns, name=name, resource_version=rv, object=body
    )


def added(name: str, rv: str, uid: str = UID, **kw: str) -> pb.Event:
    return ev(pb.ADDED, name, rv, uid, **kw)


def modified(name: str, rv: str, uid: str = UID, **kw: str) -> pb.Event:
    return ev(pb.MODIFIED, name, rv, uid, **kw)


def deleted(name: str, rv: str, uid: str = UID, **kw: str) -> pb.Event:
    return ev(pb.DELETED, name, rv, uid, **kw)


def marker(type_: int, ns: str = "", rv: str = "") -> pb.Event:
    return pb.Event(type=type_, group="", version="v1", kind="Pod", namespace=ns, resource_version=rv)


def held(c: Cache, name: str = "p") -> dict | None:
    raw = c.get("a", "Pod", "default", name)
    return orjson.loads(raw) if raw is not None else None


def rv_of(c: Cache, name: str = "p") -> str | None:
    doc = held(c, name)
    return doc["metadata"]["resourceVersion"] if doc is not None else None


def ignored(c: Cache) -> int:
    return c.stats()["staleEventsIgnored"]


def test_an_older_modified_is_ignored_and_counted():
    c = Cache()
    c.apply("a", [added("p", "100"), modified("p", "200", image="web:2")])
    c.apply("a", [modified("p", "150", image="web:stale")])
    assert rv_of(c) == "200" and held(c)["spec"]["image"] == "web:2"
    assert c.resource_version("a") == "200"  # the stale event did not move the account back
    assert ignored(c) == 1
    assert c.rejected == 0


def test_an_older_added_is_ignored_too():
    c = Cache()
    c.apply("a", [added("p", "200")])
    c.apply("a", [added("p", "9")])  # numeric, not string, order: "9" > "200" as text
    assert rv_of(c) == "200" and ignored(c) == 1


def test_a_newer_version_is_applied():
    c = Cache()
    c.apply("a", [added("p", "99")])
    c.apply("a", [modified("p", "100", image="web:2")])
    assert rv_of(c) == "100" and held(c)["spec"]["image"] == "web:2"
    assert ignored(c) == 0


def test_an_older_deleted_is_ignored():
    c = Cache()
    c.apply("a", [added("p", "100"), modified("p", "300")])
    c.apply("a", [deleted("p", "200")])
    assert rv_of(c) == "300" and ignored(c) == 1
    c.apply("a", [deleted("p", "400")])
    assert held(c) is None and c.stats()["objects"] == 0


def test_the_deletion_of_an_earlier_incarnation_leaves_the_new_one():
    c = Cache()
    c.apply("a", [added("p", "500", uid=NEW_UID)])
    c.apply("a", [deleted("p", "300", uid=UID)])
    assert held(c)["metadata"]["uid"] == NEW_UID and ignored(c) == 1


def test_a_recreated_object_with_a_new_uid_replaces_the_old_one():
    c = Cache()
    c.apply("a", [added("p", "500")])
    c.apply("a", [added("p", "400", uid=NEW_UID)])  # another object of the same name
    assert held(c)["metadata"]["uid"] == NEW_UID and ignored(c) == 0
    # and through the usual path: deleted, then created again
    c.apply("a", [deleted("p", "600", uid=NEW_UID), added("p", "601", uid=UID)])
    assert held(c)["metadata"]["uid"] == UID and rv_of(c) == "601"


def test_versions_that_are_not_numbers_are_applied_as_they_come():
    c = Cache()
    c.apply("a", [added("p", "b7f3"), modified("p", "a001", image="web:2")])
    assert rv_of(c) == "a001" and held(c)["spec"]["image"] == "web:2"
    c.apply("a", [modified("p", "17", image="web:3")])  # one side opaque: cannot be ordered
    assert rv_of(c) == "17"
    c.apply("a", [deleted("p", "zz")])
    assert held(c) is None
    c.apply("a", [added("p", "c1")])  # an opaque deletion is not remembered: cannot be ordered
    assert rv_of(c) == "c1"
    assert ignored(c) == 0


def test_a_stale_added_after_a_delete_does_not_bring_the_object_back():
    c = Cache()
    c.apply("a", [added("p", "100"), deleted("p", "300")])
    c.apply("a", [added("p", "100"), modified("p", "250")])  # the other agent, behind
    assert held(c) is None and c.stats()["objects"] == 0
    assert ignored(c) == 2
    c.apply("a", [added("p", "350", uid=NEW_UID)])  # recreated: a new uid
    assert held(c)["metadata"]["uid"] == NEW_UID


def test_a_stale_added_for_a_deletion_never_seen_held_is_ignored():
    c = Cache()
    c.apply("a", [deleted("p", "300")])  # the object was never cached here
    c.apply("a", [added("p", "200")])
    assert held(c) is None and ignored(c) == 1


def test_the_memory_of_deletions_is_bounded(monkeypatch):
    monkeypatch.setattr(cache_module, "DELETED_MEMORY", 3)
    c = Cache()
    uids = [f"uid-{i}" for i in range(5)]
    for i, uid in enumerate(uids):
        c.apply("a", [added(f"p{i}", str(10 + i), uid=uid), deleted(f"p{i}", str(100 + i), uid=uid)])
    # The two oldest deletions are forgotten: their stale ADDED is applied as before.
    c.apply("a", [added(f"p{i}", str(10 + i), uid=uid) for i, uid in enumerate(uids)])
    assert [held(c, f"p{i}") is not None for i in range(5)] == [True, True, False, False, False]
    assert ignored(c) == 3


def test_a_snapshot_still_sweeps_what_is_gone():
    c = Cache()
    c.apply("a", [added("p", "100"), added("q", "101", uid=NEW_UID)])
    c.apply("a", [marker(pb.SNAPSHOT_BEGIN), added("p", "100"), marker(pb.SNAPSHOT_END, rv="200")])
    assert held(c, "p") is not None and held(c, "q") is None
    # A lagging agent's ADDED of the swept object, older than the snapshot, does not bring it back.
    c.apply("a", [modified("q", "150", uid=NEW_UID)])
    assert held(c, "q") is None and ignored(c) == 1


def test_a_snapshot_replaces_even_with_older_versions_after_an_etcd_restore():
    """A restore from backup: same uids, versions back in time. The agent lists again, and its
    snapshot must replace everything: older copies, deleted objects that existed in the backup,
    and objects created after the backup must go."""
    c = Cache()
    c.apply("a", [added("p", "1000", image="web:5"), added("gone", "900", uid="uid-gone")])
    c.apply("a", [added("late", "1100", uid="uid-late")])  # created after the backup was taken
    c.apply("a", [deleted("gone", "1050", uid="uid-gone")])
    restored = [
        marker(pb.SNAPSHOT_BEGIN),
        added("p", "400", image="web:2"),
        added("gone", "380", uid="uid-gone"),
        marker(pb.SNAPSHOT_END, rv="450"),
    ]
    c.apply("a", restored)
    assert rv_of(c, "p") == "400" and held(c, "p")["spec"]["image"] == "web:2"
    assert rv_of(c, "gone") == "380"  # back: the cluster says it exists
    assert held(c, "late") is None
    assert c.resource_version("a") == "450"
    assert ignored(c) == 0
    # The watch after the restore resumes from the snapshot: its events apply and are ordered.
    c.apply("a", [modified("p", "460", image="web:3"), modified("gone", "470", uid="uid-gone")])
    assert rv_of(c, "p") == "460" and rv_of(c, "gone") == "470"
    c.apply("a", [modified("p", "455")])
    assert rv_of(c, "p") == "460" and ignored(c) == 1


def test_only_the_snapshot_scope_is_exempt():
    c = Cache()
    c.apply("a", [added("p", "100", ns="one"), added("p", "100", ns="two")])
    c.apply("a", [modified("p", "200", ns="one"), modified("p", "200", ns="two")])
    c.apply("a", [marker(pb.SNAPSHOT_BEGIN, ns="one"), added("p", "150", ns="one"), added("p", "150", ns="two")])
    c.apply("a", [marker(pb.SNAPSHOT_END, ns="one", rv="160")])
    one, two = (orjson.loads(c.get("a", "Pod", ns, "p") or b"null") for ns in ("one", "two"))
    assert one["metadata"]["resourceVersion"] == "150"  # the relist of "one" replaces
    assert two["metadata"]["resourceVersion"] == "200"  # a live event of "two" is ordered
    assert ignored(c) == 1


async def test_subscribers_do_not_see_ignored_events():
    c = Cache()
    c.apply("a", [added("p", "100"), modified("p", "200")])
    sub = c.subscribe(accounts=["a"])
    c.apply("a", [modified("p", "150"), deleted("p", "120"), modified("p", "210")])
    change = await anext(aiter(sub))
    assert (change.type, change.resource_version) == ("MODIFIED", "210")
    sub.close()


def test_a_deleted_without_its_object_is_applied_as_before():
    c = Cache()
    c.apply("a", [added("p", "300")])
    bare = pb.Event(
        type=pb.DELETED, group="", version="v1", kind="Pod", namespace="default", name="p", resource_version="3"
    )
    c.apply("a", [bare])  # no uid to match what is held
    assert held(c) is None and ignored(c) == 0

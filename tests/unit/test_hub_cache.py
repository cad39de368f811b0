"""The hub cache: upserts, snapshot reconciliation, indexed queries and the multi-cluster watch."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from scaleagent.hub.cache import cache as cache_module
from scaleagent.hub.cache.cache import APPLICATION, CLUSTER, Cache, Change, SubscriptionOverflow
from scaleagent.kube.events import ObjectEvent
from scaleagent.kube.selectors import parse_label_selector
from scaleagent.protocol import EVENT_TYPE_NAMES
from scaleagent.protocol.v1 import agent_pb2 as pb
from scaleagent.protocol.wire import PackedBatch, PackedMessage, read_packed_batch

GROUPS = {"Pod": "", "ConfigMap": "", "Event": "", "Deployment": "apps"}


def body(
    name: str,
    ns: str = "default",
    rv: str = "1",
    labels: dict | None = None,
    app: str | None = None,
    cluster: str | None = None,
) -> bytes:
    annotations = {}
    if app:
        annotations[APPLICATION] = app
    if cluster:
        annotations[CLUSTER] = cluster
    meta = {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels or {}, "annotations": annotations}
    return orjson.dumps({"metadata": meta})


def event(
    type_: int,
    kind: str,
    name: str,
    ns: str = "default",
    rv: str = "1",
    *,
    group: str | None = None,
    version: str = "v1",
    obj: bytes | None = None,
    **fields,
) -> pb.Event:
    group = GROUPS.get(kind, "") if group is None else group
    if obj is None:
        obj = body(name, ns, rv, **fields) if type_ != pb.DELETED else b""
    return pb.Event(
        type=type_, group=group, version=version, kind=kind, namespace=ns, name=name, resource_version=rv, object=obj
    )


def added(kind: str, name: str, ns: str = "default", rv: str = "1", **kw) -> pb.Event:
    return event(pb.ADDED, kind, name, ns, rv, **kw)


def modified(kind: str, name: str, ns: str = "default", rv: str = "2", **kw) -> pb.Event:
    return event(pb.MODIFIED, kind, name, ns, rv, **kw)


def deleted(kind: str, name: str, ns: str = "default", rv: str = "3", **kw) -> pb.Event:
    return event(pb.DELETED, kind, name, ns, rv, **kw)


def begin(kind: str, scope: str = "", group: str | None = None) -> pb.Event:
    return pb.Event(
        type=pb.SNAPSHOT_BEGIN,
        group=GROUPS.get(kind, "") if group is None else group,
        version="v1",
        kind=kind,
        namespace=scope,
    )


def end(kind: str, scope: str = "", group: str | None = None) -> pb.Event:
    return pb.Event(
        type=pb.SNAPSHOT_END,
        group=GROUPS.get(kind, "") if group is None else group,
        version="v1",
        kind=kind,
        namespace=scope,
    )


def names(cache: Cache, account: str = "a", **query) -> list[str]:
    return [orjson.loads(o)["metadata"]["name"] for o in cache.query(account, **query)]


def pending(sub) -> list[Change]:
    """What a subscription has queued, without waiting (the queue is filled synchronously by apply)."""
    return list(sub._queue)


# ---------------------------------------------------------------- upserts and deletions


def test_added_and_modified_upsert_and_deleted_removes():
    c = Cache()
    c.apply("a", [added("Pod", "p1", rv="1", labels={"v": "1"}), added("Pod", "p2")])
    c.apply("a", [modified("Pod", "p1", rv="5", labels={"v": "2"})])
    assert orjson.loads(c.get("a", "Pod", "default", "p1"))["metadata"]["labels"] == {"v": "2"}
    c.apply("a", [deleted("Pod", "p2", rv="6")])
    assert names(c) == ["p1"]
    assert c.get("a", "Pod", "default", "p2") is None
    assert c.counts("a") == {"Pod": 1}
    assert c.resource_version("a") == "6"


def test_objects_are_stored_as_the_bytes_received():
    raw = b'{"metadata": {"name": "p", "namespace": "default"},   "spec": {}}'
    c = Cache()
    c.apply("a", [added("Pod", "p", obj=raw)])
    assert c.get("a", "pod", "default", "p") == raw  # not re-encoded
    assert c.stats() == {"accounts": 1, "objects": 1, "bytes": len(raw), "staleEventsIgnored": 0}


def test_the_same_object_under_another_version_replaces_itself():
    c = Cache()
    c.apply("a", [added("Deployment", "web", rv="1", version="v1beta1")])
    c.apply("a", [added("Deployment", "web", rv="2", version="v1")])
    assert c.counts("a") == {"Deployment.apps": 1}


def test_accounts_are_separate_and_drop_account_forgets_one():
    c = Cache()
    c.apply("a", [added("Pod", "p")])
    c.apply("b", [added("Pod", "p"), added("Pod", "q")])
    assert c.accounts() == ["a", "b"]
    c.drop_account("b")
    assert c.accounts() == ["a"]
    assert c.query("b") == [] and c.counts("b") == {} and c.resource_version("b") == ""
    assert c.stats()["objects"] == 1


# ---------------------------------------------------------------- snapshots


def test_an_all_namespaces_snapshot_removes_what_it_did_not_list():
    c = Cache()
    c.apply(
        "a",
        [
            added("Pod", "keep", "ns1"),
            added("Pod", "gone", "ns1"),
            added("Pod", "gone2", "ns2"),
            added("ConfigMap", "other-kind", "ns1"),
        ],
    )
    c.apply("a", [begin("Pod"), added("Pod", "keep", "ns1"), added("Pod", "new", "ns3")])
    assert len(c.query("a", kind="Pod")) == 4  # nothing is removed before the END
    c.apply("a", [end("Pod")])
    assert names(c, kind="Pod") == ["keep", "new"]
    assert names(c, kind="ConfigMap") == ["other-kind"]


def test_a_namespace_snapshot_only_sweeps_its_namespace():
    c = Cache()
    c.apply("a", [added("Pod", "p", "ns1"), added("Pod", "q", "ns1"), added("Pod", "r", "ns2")])
    c.apply("a", [begin("Pod", "ns1"), added("Pod", "p", "ns1"), end("Pod", "ns1")])
    assert sorted(names(c, kind="Pod")) == ["p", "r"]


def test_an_empty_snapshot_empties_the_scope():
    c = Cache()
    c.apply("a", [added("Pod", "p", "ns1"), added("Pod", "q", "ns2")])
    c.apply("a", [begin("Pod"), end("Pod")])
    assert c.query("a") == [] and c.counts("a") == {"Pod": 0}


def test_a_second_begin_restarts_the_open_snapshot():
    c = Cache()
    c.apply("a", [added("Pod", "p"), added("Pod", "q")])
    c.apply("a", [begin("Pod"), added("Pod", "p"), added("Pod", "q")])
    c.apply("a", [begin("Pod"), added("Pod", "q"), end("Pod")])  # the relist started over and p is gone
    assert names(c) == ["q"]


def test_snapshots_of_other_scopes_interleave():
    c = Cache()
    c.apply(
        "a",
        [
            added("Pod", "old-pod", "ns1"),
            added("ConfigMap", "old-cm", "ns1"),
            added("ConfigMap", "x", "ns2"),
            added("Deployment", "old-deploy", "ns1"),
        ],
    )
    c.apply("a", [begin("Pod"), begin("ConfigMap", "ns1"), added("Pod", "pod", "ns1"), begin("Deployment")])
    c.apply("a", [added("ConfigMap", "cm", "ns1"), added("Deployment", "deploy", "ns1"), end("ConfigMap", "ns1")])
    assert sorted(names(c)) == ["cm", "deploy", "old-deploy", "old-pod", "pod", "x"]
    c.apply("a", [end("Deployment"), end("Pod")])
    assert sorted(names(c)) == ["cm", "deploy", "pod", "x"]


def test_an_all_namespaces_snapshot_open_around_a_namespace_snapshot():
    c = Cache()
    c.apply("a", [added("Pod", "p1", "ns1"), added("Pod", "p2", "ns2")])
    c.apply(
        "a",
        [
            begin("Pod"),
            added("Pod", "p2", "ns2"),
            begin("Pod", "ns1"),
            added("Pod", "p1", "ns1"),
            end("Pod", "ns1"),
            end("Pod"),
        ],
    )
    assert sorted(names(c)) == ["p1", "p2"]


def test_an_object_modified_during_a_snapshot_counts_as_seen():
    c = Cache()
    c.apply("a", [added("Pod", "p", rv="1"), added("Pod", "q", rv="1")])
    c.apply("a", [begin("Pod"), added("Pod", "q", rv="1"), modified("Pod", "p", rv="2"), end("Pod")])
    assert sorted(names(c)) == ["p", "q"]


def test_an_object_deleted_during_a_snapshot_stays_deleted():
    c = Cache()
    c.apply("a", [added("Pod", "p"), begin("Pod"), added("Pod", "p"), deleted("Pod", "p"), end("Pod")])
    assert c.query("a") == []


# ---------------------------------------------------------------- odd input


def test_odd_events_are_skipped_without_raising():
    c = Cache()
    c.apply(
        "a",
        [
            deleted("Pod", "never-seen"),
            end("Pod", "ns-never-begun"),
            added("Pod", "bad-json", obj=b'{"metadata": {'),
            added("Pod", "not-an-object", obj=b"[1, 2]"),
            added("Pod", "", obj=body("x")),  # no name
            added("", "no-kind"),
            pb.Event(type=99, kind="Pod", name="p"),
            added("Pod", "ok"),
        ],
    )
    assert names(c) == ["ok"]
    assert c.rejected == 5


def test_invalid_json_is_logged_once_per_account_and_kind(caplog: pytest.LogCaptureFixture):
    c = Cache()
    with caplog.at_level(logging.WARNING, logger="scaleagent.hub.cache"):
        c.apply("a", [added("Pod", "x", obj=b"{"), added("Pod", "y", obj=b"{"), added("ConfigMap", "z", obj=b"{")])
        c.apply("b", [added("Pod", "x", obj=b"{")])
    assert c.rejected == 4
    assert len(caplog.records) == 3  # (a, Pod), (a, ConfigMap), (b, Pod)


def test_a_body_that_is_not_json_past_its_metadata_is_rejected():
    # Only the indexed fields are built, but the whole object must be JSON: the cache serves it.
    c = Cache()
    broken = b'{"metadata":{"name":"p","uid":"u","labels":{"app":"web"}},"spec":{"x":[1,}}'
    trailing = b'{"metadata":{"name":"q"}} {}'
    c.apply("a", [added("Pod", "p", obj=broken), added("Pod", "q", obj=trailing), added("Pod", "ok")])
    assert names(c) == ["ok"] and c.rejected == 2


def test_labels_that_are_not_strings_are_ignored():
    c = Cache()
    c.apply("a", [added("Pod", "p", labels={"app": "web", "n": 1, "l": [1]})])
    assert names(c, label_selector=parse_label_selector("app=web")) == ["p"]
    assert names(c, label_selector=parse_label_selector("n")) == []


# ---------------------------------------------------------------- queries


def test_kinds_are_matched_case_insensitively_as_kind_or_kind_dot_group():
    c = Cache()
    c.apply(
        "a",
        [
            added("Event", "core-event"),
            added("Event", "new-event", group="events.k8s.io"),
            added("Deployment", "web"),
            added("Pod", "p"),
        ],
    )
    assert sorted(names(c, kind="event")) == ["core-event", "new-event"]
    assert names(c, kind="Event.events.k8s.io") == ["new-event"]
    assert names(c, kind="DEPLOYMENT") == names(c, kind="deployment.apps") == ["web"]
    assert names(c, kind="Deployment.extensions") == []
    assert names(c, kind="pod") == ["p"]
    assert c.get("a", "deployment.APPS", "default", "web") is not None
    assert c.counts("a") == {"Event": 1, "Event.events.k8s.io": 1, "Deployment.apps": 1, "Pod": 1}


def test_namespace_and_name_filters():
    c = Cache()
    c.apply("a", [added("Pod", "p", "ns1"), added("Pod", "p", "ns2"), added("Pod", "q", "ns1")])
    assert names(c, namespace="ns1") == ["p", "q"]
    assert [orjson.loads(o)["metadata"]["namespace"] for o in c.query("a", name="p")] == ["ns1", "ns2"]
    assert names(c, namespace="ns2", name="q") == []


@pytest.fixture
def labelled() -> Cache:
    c = Cache()
    c.apply(
        "a",
        [
            added("Pod", "web-1", labels={"app": "web", "tier": "front"}),
            added("Pod", "web-2", "other", labels={"app": "web"}),
            added("Pod", "api-1", labels={"app": "api", "tier": "back"}),
            added("Pod", "db-1", labels={"app": "db"}),
            added("Pod", "bare"),
            added("ConfigMap", "web-config", labels={"app": "web"}),
        ],
    )
    return c


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["web-1", "web-2"]),
        ("app==web,tier=front", ["web-1"]),
        ("app!=web", ["api-1", "bare", "db-1"]),
        ("app in (web, api)", ["api-1", "web-1", "web-2"]),
        ("app notin (web, api)", ["bare", "db-1"]),
        ("tier", ["api-1", "web-1"]),
        ("!tier", ["bare", "db-1", "web-2"]),
        ("app=nothing-has-this", []),
    ],
)
def test_label_selectors(labelled: Cache, selector: str, expected: list[str]):
    assert sorted(names(labelled, kind="Pod", label_selector=parse_label_selector(selector))) == expected


def test_label_selector_across_kinds_and_the_empty_selector(labelled: Cache):
    assert sorted(names(labelled, label_selector=parse_label_selector("app=web"))) == ["web-1", "web-2", "web-config"]
    assert len(labelled.query("a", label_selector=parse_label_selector(""))) == 6


def test_an_equality_selector_is_answered_from_the_index(labelled: Cache, monkeypatch: pytest.MonkeyPatch):
    def no_scan(self):
        raise AssertionError("scanned every entry")

    monkeypatch.setattr(cache_module._Kind, "entries", no_scan)
    assert sorted(names(labelled, label_selector=parse_label_selector("app in (web,db)"))) == [
        "db-1",
        "web-1",
        "web-2",
        "web-config",
    ]
    assert names(labelled, kind="Pod", label_selector=parse_label_selector("tier,app!=web")) == ["api-1"]


def test_application_and_cluster_monikers():
    c = Cache()
    c.apply(
        "a",
        [
            added("Deployment", "web", app="shop", cluster="deployment web"),
            added("Pod", "web-1", app="shop", cluster="deployment web"),
            added("Pod", "api-1", app="shop", cluster="deployment api"),
            added("Pod", "other", app="blog"),
            added("Pod", "none"),
        ],
    )
    assert sorted(names(c, application="shop")) == ["api-1", "web", "web-1"]
    assert names(c, kind="Pod", application="shop", cluster="deployment web") == ["web-1"]
    assert names(c, cluster="deployment api") == ["api-1"]
    assert names(c, application="nothing") == []


def test_changed_labels_and_monikers_move_the_object_in_the_index():
    web, api = parse_label_selector("app=web"), parse_label_selector("app=api")
    c = Cache()
    c.apply("a", [added("Pod", f"p{i}", rv="1", labels={"app": "web"}, app="shop") for i in range(10)])
    # away and back before the index lists are compacted: listed once, not lost
    c.apply(
        "a",
        [
            modified("Pod", "p0", rv="2", labels={"app": "api"}, app="blog"),
            modified("Pod", "p0", rv="3", labels={"app": "web"}, app="shop"),
        ],
    )
    assert names(c, label_selector=web) == names(c, application="shop") == [f"p{i}" for i in range(10)]
    c.apply("a", [modified("Pod", f"p{i}", rv="4", labels={"app": "api"}, app="blog") for i in range(8)])
    assert names(c, label_selector=web) == names(c, application="shop") == ["p8", "p9"]
    c.apply("a", [modified("Pod", "p0", rv="5", labels={"app": "web"}, app="shop")])
    assert names(c, label_selector=web) == names(c, application="shop") == ["p0", "p8", "p9"]
    c.apply("a", [deleted("Pod", "p8"), deleted("Pod", "p9"), deleted("Pod", "p1")])
    assert names(c, label_selector=web) == ["p0"]
    assert names(c, label_selector=api) == names(c, application="blog") == [f"p{i}" for i in range(2, 8)]


def test_removals_leave_no_index_behind():
    c = Cache()
    c.apply("a", [added("Pod", f"p{i}", labels={"app": "web", "hash": str(i)}, app="shop") for i in range(50)])
    c.apply("a", [begin("Pod"), end("Pod")])
    (kind,) = c._accounts["a"].kinds.values()
    assert kind.index == {} and kind.namespaces == {}


# ---------------------------------------------------------------- subscriptions


async def test_a_subscription_receives_real_changes():
    c = Cache()
    async with c.subscribe() as sub:
        c.apply("a", [added("Pod", "p", rv="1"), modified("Pod", "p", rv="2"), deleted("Pod", "p", rv="3")])
        changes = [await anext(sub) for _ in range(3)]
    assert [(x.type, x.name, x.resource_version) for x in changes] == [
        ("ADDED", "p", "1"),
        ("MODIFIED", "p", "2"),
        ("DELETED", "p", "3"),
    ]
    assert changes[0] == Change("a", "ADDED", "", "v1", "Pod", "default", "p", "1", body("p", rv="1"))
    assert changes[2].object == body("p", rv="2")  # the DELETED event had no body: the last one known
    assert sub.closed


async def test_a_waiting_reader_wakes_up_on_the_next_change():
    c = Cache()
    sub = c.subscribe()
    waiting = asyncio.Event()

    async def read() -> Change:
        waiting.set()
        return await anext(sub)

    reader = asyncio.create_task(read())
    await waiting.wait()  # the reader is now parked on an empty queue
    c.apply("a", [added("Pod", "p")])
    assert (await reader).name == "p"
    sub.close()
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_subscription_filters():
    c = Cache()
    by_account = c.subscribe(accounts=["b"])
    by_kind = c.subscribe(kinds=["deployment.apps", "configmap"])
    by_namespace = c.subscribe(namespaces=["ns1"])
    c.apply(
        "a", [added("Pod", "a-pod", "ns1"), added("Deployment", "a-deploy", "ns2"), added("ConfigMap", "a-cm", "ns2")]
    )
    c.apply("b", [added("Pod", "b-pod", "ns2")])
    assert [x.name for x in pending(by_account)] == ["b-pod"]
    assert [x.name for x in pending(by_kind)] == ["a-deploy", "a-cm"]
    assert [x.name for x in pending(by_namespace)] == ["a-pod"]


async def test_an_identical_resend_is_not_a_change():
    c = Cache()
    c.apply("a", [added("Pod", "p", rv="1"), added("Pod", "q", rv="1")])
    sub = c.subscribe()
    c.apply("a", [begin("Pod"), added("Pod", "p", rv="1"), added("Pod", "q", rv="2"), end("Pod")])
    assert [(x.type, x.name) for x in pending(sub)] == [("MODIFIED", "q")]  # an agent's ADDED, a change here


async def test_an_object_of_a_rebuilt_cluster_replaces_ours_even_under_the_same_version():
    # A cluster whose storage was replaced reuses resourceVersions: the same name and version
    # now stand for another object (another uid), which the snapshot must bring in.
    c = Cache()
    old = orjson.dumps({"metadata": {"name": "p", "namespace": "default", "uid": "old", "resourceVersion": "7"}})
    new = orjson.dumps({"metadata": {"name": "p", "namespace": "default", "uid": "new", "resourceVersion": "7"}})
    c.apply("a", [added("Pod", "p", rv="7", obj=old)])
    sub = c.subscribe()
    c.apply("a", [begin("Pod"), added("Pod", "p", rv="7", obj=new), end("Pod")])
    assert orjson.loads(c.get("a", "Pod", "default", "p"))["metadata"]["uid"] == "new"
    assert [(x.type, x.name) for x in pending(sub)] == [("MODIFIED", "p")]


async def test_snapshot_sweeps_and_dropped_accounts_are_deletions():
    c = Cache()
    c.apply("a", [added("Pod", "p", rv="1"), added("Pod", "q", rv="7")])
    c.apply("b", [added("ConfigMap", "cm", rv="4")])
    sub = c.subscribe()
    c.apply("a", [begin("Pod"), added("Pod", "p", rv="1"), end("Pod")])
    c.drop_account("b")
    c.drop_account("b")  # unknown by now: nothing more
    assert [(x.account, x.type, x.kind, x.name, x.resource_version, x.object) for x in pending(sub)] == [
        ("a", "DELETED", "Pod", "q", "7", body("q", rv="7")),
        ("b", "DELETED", "ConfigMap", "cm", "4", body("cm", rv="4")),
    ]


async def test_deleting_an_unknown_object_is_not_a_change():
    c = Cache()
    sub = c.subscribe()
    c.apply("a", [deleted("Pod", "never-seen")])
    assert pending(sub) == []


async def test_an_overflowing_subscription_ends_alone():
    c = Cache()
    slow = c.subscribe(max_queue=2)
    fast = c.subscribe()
    c.apply("a", [added("Pod", f"p{i}") for i in range(3)])
    assert len(c.query("a")) == 3  # ingest went on
    assert [x.name for x in pending(fast)] == ["p0", "p1", "p2"]
    with pytest.raises(SubscriptionOverflow, match="fell more than 2 changes behind"):
        await anext(slow)
    assert slow.closed and not fast.closed
    c.apply("a", [added("Pod", "p3")])
    assert len(pending(fast)) == 4 and pending(slow) == []


async def test_close_unsubscribes():
    c = Cache()
    sub = c.subscribe()
    sub.close()
    c.apply("a", [added("Pod", "p")])
    assert pending(sub) == []
    assert [x async for x in sub] == []


# ---- read-your-writes ----------------------------------------------------------------------------


def expect(kind: str, name: str, rv: str = "", ns: str = "default", deleted: bool = False) -> pb.CacheExpectation:
    return pb.CacheExpectation(
        group=GROUPS.get(kind, ""), kind=kind, namespace=ns, name=name, resource_version=rv, deleted=deleted
    )


def test_reached_compares_versions_as_numbers_and_deletions_by_absence():
    c = Cache()
    c.apply("a", [added("Deployment", "web", rv="10")])
    assert c.reached("a", expect("Deployment", "web", "9"))
    assert c.reached("a", expect("Deployment", "web", "10"))
    assert not c.reached("a", expect("Deployment", "web", "11"))
    assert not c.reached("a", expect("Deployment", "web", deleted=True))
    assert c.reached("a", expect("Deployment", "gone", deleted=True))
    assert not c.reached("b", expect("Deployment", "web", "1")), "another account's objects do not count"
    c.apply("a", [added("ConfigMap", "opaque", rv="abc")])
    assert c.reached("a", expect("ConfigMap", "opaque", "abc"))
    assert not c.reached("a", expect("ConfigMap", "opaque", "abd")), "non-numeric versions only match exactly"


async def registered(c: Cache) -> None:
    """Until a wait_for call has registered its waiters (bounded: a test must not hang)."""
    async with asyncio.timeout(5):
        while not c._waiters:
            await asyncio.sleep(0)  # a poll of the condition, one loop turn at a time


async def test_wait_for_returns_when_the_events_arrive():
    c = Cache()
    c.apply("a", [added("Deployment", "web", rv="5"), added("ConfigMap", "old", rv="6")])
    waiting = asyncio.create_task(
        c.wait_for("a", [expect("Deployment", "web", "8"), expect("ConfigMap", "old", deleted=True)], timeout=30)
    )
    await registered(c)
    c.apply("a", [modified("Deployment", "web", rv="7")])
    done, _ = await asyncio.wait({waiting}, timeout=0.05)
    assert not done, "version 7 is not yet the 8 the operation produced"
    c.apply("a", [modified("Deployment", "web", rv="8"), deleted("ConfigMap", "old", rv="9")])
    assert await asyncio.wait_for(waiting, 5) == []
    assert c._waiters == {}, "waiters are forgotten once done"


async def test_wait_for_counts_an_object_changed_and_deleted_since_and_times_out_otherwise():
    c = Cache()
    c.apply("a", [added("ConfigMap", "brief", rv="1")])
    waiting = asyncio.create_task(c.wait_for("a", [expect("ConfigMap", "brief", "3")], timeout=30))
    await registered(c)
    c.apply("a", [deleted("ConfigMap", "brief", rv="4")])
    assert await asyncio.wait_for(waiting, 5) == []
    missed = await c.wait_for("a", [expect("ConfigMap", "never", "2")], timeout=0.05)
    assert [m.name for m in missed] == ["never"]


async def test_wait_for_sees_a_snapshot_sweep_and_a_dropped_account():
    c = Cache()
    c.apply("a", [added("ConfigMap", "stale", rv="1"), added("ConfigMap", "kept", rv="1")])
    waiting = asyncio.create_task(c.wait_for("a", [expect("ConfigMap", "stale", deleted=True)], timeout=30))
    await registered(c)
    c.apply("a", [begin("ConfigMap"), added("ConfigMap", "kept", rv="1"), end("ConfigMap")])
    assert await asyncio.wait_for(waiting, 5) == []
    waiting = asyncio.create_task(c.wait_for("a", [expect("ConfigMap", "kept", deleted=True)], timeout=30))
    await registered(c)
    c.drop_account("a")
    assert await asyncio.wait_for(waiting, 5) == []


def test_a_deleted_object_recreated_under_its_name_counts_as_gone():
    c = Cache()
    old = orjson.dumps({"metadata": {"name": "web-0", "namespace": "default", "uid": "u1", "resourceVersion": "5"}})
    new = orjson.dumps({"metadata": {"name": "web-0", "namespace": "default", "uid": "u2", "resourceVersion": "9"}})
    c.apply("a", [added("Pod", "web-0", rv="5", obj=old)])
    gone = pb.CacheExpectation(kind="Pod", namespace="default", name="web-0", deleted=True, uid="u1")
    assert not c.reached("a", gone)
    c.apply("a", [modified("Pod", "web-0", rv="9", obj=new)])
    assert c.reached("a", gone)


def several_accounts() -> list[pb.Event]:
    def of(account: str, ev: pb.Event, read_at: int = 0) -> pb.Event:
        ev.account, ev.read_at_unix_ms = account, read_at
        return ev

    return [
        of("a", begin("Pod")),
        of("a", added("Pod", "p1")),
        of("x", added("Pod", "intruder"), 5),
        of("b", added("Pod", "q1"), 7),
        of("a", end("Pod")),
        of("b", modified("Pod", "q1", rv="9", labels={"v": "2"}), 8),
        of("a", added("Pod", "", obj=body("x"))),  # no name: rejected, still counted as an object's event
    ]


def as_packed(events: list[pb.Event]) -> pb.EventBatch:
    m = PackedMessage()
    for e in events:
        read_at = e.read_at_unix_ms / 1000
        m.add(
            ObjectEvent(
                e.account,
                e.group,
                e.version,
                e.kind,
                e.namespace,
                e.name,
                "",
                e.resource_version,
                EVENT_TYPE_NAMES[e.type],
                e.object,
                read_at,
            )
        )
    return m.message(1).events


def in_place(batch: pb.EventBatch) -> PackedBatch:
    """The batch as the hub reads it from the wire (protocol.wire.read_packed_batch)."""
    read = read_packed_batch(pb.CachingMessage(events=batch).SerializeToString())
    assert read is not None
    return read


@pytest.mark.parametrize("form", ["events", "packed", "in place"])
def test_a_batch_of_several_accounts_applies_those_accepted_and_collects_their_stamps(form):
    events = several_accounts()
    batch: Any = pb.EventBatch(sequence=1, events=events) if form == "events" else as_packed(events)
    if form == "in place":
        batch = in_place(batch)
    c = Cache()
    stamps: list[int] = []
    done = c.apply_batch(batch, accepted={"a", "b"}, stamps=stamps)
    assert (done.objects, done.markers, done.dropped) == (4, 2, 1)
    assert stamps == [7, 8] and c.rejected == 1
    assert names(c, "a") == ["p1"] and names(c, "b") == ["q1"] and names(c, "x") == []
    assert names(c, "b", label_selector=parse_label_selector("v=2")) == ["q1"]


def test_a_packed_batch_that_cannot_be_read_is_refused_whole():
    c = Cache()
    short = as_packed(several_accounts())
    short.packed.objects = short.packed.objects[:-1]
    with pytest.raises(ValueError, match="not what its index says"):
        c.apply_batch(short, accepted={"a", "b"}, stamps=[])
    with pytest.raises(ValueError, match="not what its index says"):
        c.apply_batch(in_place(short), accepted={"a", "b"}, stamps=[])
    garbled = as_packed(several_accounts())
    garbled.packed.index = b"\x91\x93\x01\xa1a\xc0"  # [[1, "a", None]]: not a row
    with pytest.raises(ValueError, match="packed index cannot be read"):
        c.apply_batch(garbled, accepted={"a", "b"}, stamps=[])
    both = as_packed(several_accounts())
    both.events.append(added("Pod", "p9"))
    with pytest.raises(ValueError, match="not both"):
        c.apply_batch(both, accepted={"a", "b"}, stamps=[])
    assert c.accounts() == []

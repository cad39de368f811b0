"""Subscription.batch: what the SSE watch reads (every waiting change in one go), and the query
fast path for whole kinds / namespaces, which must order objects as the general path does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from scaleagent.hub.cache.cache import Cache, SubscriptionOverflow
from scaleagent.kube.selectors import parse_label_selector
from scaleagent.protocol.v1 import agent_pb2 as pb


def _ev(name: str, ns: str = "default", rv: str = "1", labels: str = "{}") -> SimpleNamespace:
    obj = b'{"metadata":{"name":"%s","namespace":"%s","uid":"u-%s","resourceVersion":"%s","labels":%s}}' % (
        name.encode(),
        ns.encode(),
        name.encode(),
        rv.encode(),
        labels.encode(),
    )
    return SimpleNamespace(
        type=pb.ADDED,
        group="",
        version="v1",
        kind="ConfigMap",
        namespace=ns,
        name=name,
        resource_version=rv,
        object=obj,
    )


def test_batch_returns_every_waiting_change_then_times_out_then_ends() -> None:
    async def run() -> None:
        cache = Cache()
        sub = cache.subscribe()
        cache.apply("a", [_ev("x", rv="1"), _ev("y", rv="2"), _ev("z", rv="3")])
        got = await sub.batch(5)
        assert [c.name for c in got or []] == ["x", "y", "z"]
        assert await sub.batch(0.01) == []
        waiting = asyncio.ensure_future(sub.batch(5))
        await asyncio.sleep(0)
        cache.apply("a", [_ev("w", rv="4")])
        assert [c.name for c in await waiting or []] == ["w"]
        sub.close()
        assert await sub.batch(5) is None

    asyncio.run(run())


def test_batch_raises_overflow() -> None:
    async def run() -> None:
        cache = Cache()
        sub = cache.subscribe(max_queue=2)
        cache.apply("a", [_ev(f"o{i}", rv=str(i + 1)) for i in range(3)])
        with pytest.raises(SubscriptionOverflow):
            await sub.batch(5)

    asyncio.run(run())


def test_fast_path_orders_like_the_filtered_path() -> None:
    cache = Cache()
    events = [_ev(f"n{i % 7}", ns=f"ns{i % 3}", rv=str(i + 1), labels='{"a":"b"}') for i in range(30)]
    events += [_ev("b", ns="", rv="99", labels='{"a":"b"}'), _ev("a", ns="zz", rv="100", labels='{"a":"b"}')]
    cache.apply("acct", events)
    everything = parse_label_selector("a")  # matches all: forces the general path
    for ns in (None, "ns1", "", "zz", "missing"):
        fast = cache.query("acct", kind="configmap", namespace=ns)
        slow = cache.query("acct", kind="configmap", namespace=ns, label_selector=everything)
        assert fast == slow
        if ns != "missing":
            assert fast
    assert cache.query("acct", kind="Secret") == []
    assert cache.query("nobody") == []


def test_sse_frame_is_encoded_once_and_is_the_change() -> None:
    import orjson

    from scaleagent.hub.api.objects import _frame

    cache = Cache()
    subs = [cache.subscribe(), cache.subscribe()]
    cache.apply("a", [_ev("x", rv="7")])

    async def first(sub: object) -> bytes:
        got = await sub.batch(5)  # type: ignore[attr-defined]
        return _frame(got[0])

    a, b = (asyncio.run(first(s)) for s in subs)
    assert a is b  # the second watcher got the first one's encoding
    head, _, data = a.partition(b"\ndata: ")
    assert head == b"event: ADDED"
    doc = orjson.loads(data)
    assert (doc["account"], doc["name"], doc["resourceVersion"]) == ("a", "x", "7")
    assert doc["object"]["metadata"]["uid"] == "u-x"

"""How the agent packs events for the hub: batches stay under the hub's message limit."""

from __future__ import annotations

from scaleagent.agent.link import HubLink, LinkSettings
from scaleagent.kube.events import ObjectEvent


def event(name: str, size: int) -> ObjectEvent:
    return ObjectEvent("a", "", "v1", "ConfigMap", "ns", name, "uid", "1", "ADDED", b"x" * size)


def test_a_batch_is_split_below_the_hubs_limit_in_order():
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 10_000
    chunks = link._split([event(f"o{i}", 3_000) for i in range(7)])
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert [e.name for c in chunks for e in c] == [f"o{i}" for i in range(7)]
    assert all(sum(e.ByteSize() for e in c) <= 10_000 for c in chunks)


def test_an_event_larger_than_the_limit_is_counted_not_sent():
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 10_000
    chunks = link._split([event("small", 10), event("huge", 20_000), event("after", 10)])
    assert [[e.name for e in c] for c in chunks] == [["small", "after"]]
    assert link.dropped_oversize == 1

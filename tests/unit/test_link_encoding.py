"""The agent sizes events arithmetically instead of serializing them: the sizes must be exact."""

from __future__ import annotations

import random

import grpc

from scaleagent.agent.link import Chunk, HubLink, LinkSettings, event_size
from scaleagent.hub.agents.link import _sized, sized_caching_message
from scaleagent.kube.events import ObjectEvent
from scaleagent.protocol import EVENT_TYPES, pb

TEXTS = ["", "a", "ns-1", "é", "名前", "🙂x", "x" * 127, "y" * 128, "z" * 20_000, "\u0000", "ü" * 70]


def random_event(rng: random.Random) -> ObjectEvent:
    texts = [rng.choice(TEXTS) for _ in range(7)]
    obj = rng.choice([None, b"", b"{}", b"o" * rng.choice([1, 127, 128, 16_383, 16_384, 2_100_000])])
    read_at = rng.choice([0.0, 0.0001, 1.7e9 + rng.random(), -1.5, 2.0**40])
    return ObjectEvent(*texts[:6], "uid", texts[6], rng.choice(list(EVENT_TYPES)), obj, read_at)


def test_event_sizes_and_message_sizes_match_protobufs_own():
    rng = random.Random(19)
    for _ in range(40):
        events = [random_event(rng) for _ in range(rng.randint(1, 12))]
        chunk = Chunk()
        for e in events:
            chunk.add(e, event_size(e))
        for e, ev in zip(events, chunk, strict=True):
            assert event_size(e) == ev.ByteSize(), e
            assert ev.name == e.name and ev.object == (e.object or b"") and ev.type == EVENT_TYPES[e.type]
        for sequence in (0, 1, 127, 128, 2**40):
            chunk.message.events.sequence = sequence
            assert chunk.byte_size(sequence) == chunk.message.ByteSize()


def test_split_messages_stay_below_the_limit_and_keep_every_event_in_order():
    rng = random.Random(4)
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 50_000
    events = [random_event(rng) for _ in range(300)]
    fitting = [e for e in events if event_size(e) + 8 <= link._max_bytes]
    chunks = link._split(events)
    assert link.dropped_oversize == len(events) - len(fitting) > 0
    assert [ev.name for c in chunks for ev in c] == [e.name for e in fitting]
    for sequence, c in enumerate(chunks, 1):
        c.message.events.sequence = sequence
        assert c.byte_size(sequence) == c.message.ByteSize() <= link._max_bytes + 16
        assert isinstance(c.message, pb.CachingMessage) and c.message.WhichOneof("message") == "events"


def test_the_hub_reads_a_caching_message_with_its_size_on_the_wire():
    rng = random.Random(7)
    chunk = Chunk()
    for e in (random_event(rng) for _ in range(5)):
        chunk.add(e, event_size(e))
    chunk.message.events.sequence = 3
    wire = chunk.message.SerializeToString()
    size, message = sized_caching_message(wire)
    assert size == len(wire) == chunk.byte_size(3) and message == chunk.message
    assert _sized((size, message)) == (size, message)
    assert _sized(message) == (len(wire), message)  # registered with the generated deserializer
    assert _sized(grpc.aio.EOF) == (0, grpc.aio.EOF)

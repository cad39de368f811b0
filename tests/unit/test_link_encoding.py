"""The agent writes its event messages in protobuf's wire format itself: the bytes must be exactly
protobuf's, and the sizes it keeps exact, or the hub would read something else than was sent."""

from __future__ import annotations

import random

import grpc
import pytest

from scaleagent.agent.link import HubLink, LinkSettings, _to_wire
from scaleagent.hub.agents.link import _sized, sized_caching_message
from scaleagent.kube.events import ObjectEvent
from scaleagent.protocol import EVENT_TYPES, pb
from scaleagent.protocol.wire import EventsMessage, PackedBatch, PackedMessage, decode_index, read_packed_batch, varint

TEXTS = ["", "a", "ns-1", "é", "名前", "🙂x", "x" * 127, "y" * 128, "z" * 20_000, "\u0000", "ü" * 70]


def random_event(rng: random.Random) -> ObjectEvent:
    texts = [rng.choice(TEXTS) for _ in range(7)]
    obj = rng.choice([None, b"", b"{}", b"o" * rng.choice([1, 127, 128, 16_383, 16_384, 2_100_000])])
    read_at = rng.choice([0.0, 0.0001, 1.7e9 + rng.random(), -1.5, 2.0**40])
    return ObjectEvent(*texts[:6], "uid", texts[6], rng.choice(list(EVENT_TYPES)), obj, read_at)


def protobufs_own(events: list[ObjectEvent], sequence: int) -> pb.CachingMessage:
    m = pb.CachingMessage()
    m.events.sequence = sequence
    for e in events:
        m.events.events.add(
            type=EVENT_TYPES[e.type],
            account=e.account,
            group=e.group,
            version=e.version,
            kind=e.kind,
            namespace=e.namespace,
            name=e.name,
            resource_version=e.resource_version,
            object=e.object or b"",
            read_at_unix_ms=int(e.read_at * 1000),
        )
    return m


def test_messages_are_byte_for_byte_what_protobuf_writes_and_their_sizes_exact():
    rng = random.Random(19)
    heads: dict = {}  # shared between messages, as the link shares it
    for _ in range(60):
        events = [random_event(rng) for _ in range(rng.randint(0, 12))]
        m = EventsMessage(heads)
        taken = [m.add(e) for e in events]
        for sequence in (0, 1, 127, 128, 2**40):
            expected = protobufs_own(events, sequence)
            assert m.wire(sequence) == expected.SerializeToString()
            assert m.wire_size(sequence) == expected.ByteSize()
        assert len(m) == len(events)
        assert taken == [
            len(pb.EventBatch(events=[ev]).SerializeToString()) for ev in protobufs_own(events, 0).events.events
        ]


def test_varints_are_protobufs():
    assert varint(0) == b"\x00"
    for value in (1, 127, 128, 300, 16_383, 16_384, 2**35, 2**63 - 1, -1, -(2**63)):
        m = pb.EventBatch(sequence=value) if value >= 0 else pb.Event(read_at_unix_ms=value)
        assert m.SerializeToString()[1:] == varint(value)


def events_of(message: pb.CachingMessage) -> list[pb.Event]:
    """The events of a batch in either form, as Event messages."""
    batch = message.events
    if not batch.HasField("packed"):
        return list(batch.events)
    out, at = [], 0
    for t, a, g, v, k, ns, n, rv, read_at, size in decode_index(batch.packed.index):
        obj = batch.packed.objects[at : at + size]
        at += size
        out.append(
            pb.Event(
                type=t,
                account=a,
                group=g,
                version=v,
                kind=k,
                namespace=ns,
                name=n,
                resource_version=rv,
                object=obj,
                read_at_unix_ms=read_at,
            )
        )
    assert at == len(batch.packed.objects)
    return out


@pytest.mark.parametrize("packed", [False, True], ids=["events", "packed"])
def test_split_messages_stay_below_the_limit_and_keep_every_event_in_order(packed):
    rng = random.Random(4)
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 50_000
    link._packed = packed  # what the hub's Welcome offered
    make = PackedMessage if packed else EventsMessage
    events = [random_event(rng) for _ in range(300)]
    alone = [make().add(e) for e in events]
    fitting = [e for e, size in zip(events, alone) if size <= link._max_bytes]
    messages = link._split(events)
    assert all(type(m) is make for m in messages)
    assert link.dropped_oversize == len(events) - len(fitting) > 0
    parsed = [pb.CachingMessage.FromString(m.wire(seq)) for seq, m in enumerate(messages, 1)]
    assert [e for p in parsed for e in events_of(p)] == [
        ev for e in fitting for ev in protobufs_own([e], 0).events.events
    ]
    for seq, (m, p) in enumerate(zip(messages, parsed), 1):
        assert 0 < len(m) == len(events_of(p)) and len(m.wire(seq)) <= link._max_bytes + 64
        assert p.events.sequence == seq and p.WhichOneof("message") == "events"
    # Full messages: each next one would not have fitted the event that starts it.
    starts = 0
    for m in messages[:-1]:
        starts += len(m)
        assert m.size + make().add(fitting[starts]) > link._max_bytes


def test_the_stream_writes_events_as_they_are_and_other_messages_as_protobufs():
    m = EventsMessage()
    m.add(ObjectEvent("a", "", "v1", "Pod", "ns", "p", "u", "1", "ADDED", b"{}"))
    assert _to_wire(m.wire(1)) == m.wire(1)
    hello = pb.CachingMessage(hello=pb.Hello(agent_id="x"))
    assert _to_wire(hello) == hello.SerializeToString()


def test_the_hub_reads_a_caching_message_with_its_size_on_the_wire():
    rng = random.Random(7)
    m = EventsMessage()
    events = [random_event(rng) for _ in range(5)]
    for e in events:
        m.add(e)
    wire = m.wire(3)
    size, message = sized_caching_message(wire)
    assert size == len(wire) == m.wire_size(3) and message == protobufs_own(events, 3)
    assert _sized((size, message)) == (size, message)
    assert _sized(message) == (len(wire), message)  # registered with the generated deserializer
    assert _sized(grpc.aio.EOF) == (0, grpc.aio.EOF)


def packed_message(events: list[ObjectEvent]) -> PackedMessage:
    m = PackedMessage()
    for e in events:
        m.add(e)
    return m


def test_packed_messages_are_what_protobuf_writes_and_carry_every_event():
    rng = random.Random(23)
    for _ in range(60):
        events = [random_event(rng) for _ in range(rng.randint(0, 12))]
        m = packed_message(events)
        for sequence in (0, 1, 128, 2**40):
            wire = m.wire(sequence)
            assert wire == m.message(sequence).SerializeToString()
            assert events_of(pb.CachingMessage.FromString(wire)) == list(protobufs_own(events, 0).events.events)
            assert len(wire) <= m.size + 64  # the bound the link splits by, with the message's own framing


def read_as_protobuf_would(batch: PackedBatch) -> tuple[int, bytes, bytes]:
    return batch.sequence, batch.index, batch.data[batch.objects_start : batch.objects_end]


def protobufs_reading(data: bytes) -> tuple[int, bytes, bytes] | None:
    """What protobuf reads from `data`, when it is a packed batch and nothing else; None otherwise."""
    try:
        m = pb.CachingMessage.FromString(data)
    except Exception:  # DecodeError: protobuf refuses it
        return None
    if m.WhichOneof("message") != "events" or not m.events.HasField("packed") or len(m.events.events):
        return None
    return m.events.sequence, m.events.packed.index, m.events.packed.objects


def one_packed_event() -> tuple[bytes, bytes]:
    """A packed batch's index and objects for one event."""
    m = packed_message([ObjectEvent("a", "", "v1", "Pod", "ns", "p", "u", "1", "ADDED", b'{"kind":"Pod"}')])
    batch = pb.CachingMessage.FromString(m.wire(1)).events.packed
    return batch.index, batch.objects


def test_the_hub_reads_packed_batches_in_place_as_protobuf_reads_them():
    rng = random.Random(29)
    for _ in range(40):
        m = packed_message([random_event(rng) for _ in range(rng.randint(0, 12))])
        for sequence in (0, 1, 128, 2**40, 2**64 - 1):
            wire = m.wire(sequence)
            size, batch = sized_caching_message(wire)
            assert size == len(wire) and isinstance(batch, PackedBatch)
            assert read_as_protobuf_would(batch) == protobufs_reading(wire)
    # Every other message, and the same batch laid out otherwise, go to protobuf.
    m = EventsMessage()
    m.add(ObjectEvent("a", "", "v1", "Pod", "ns", "p", "u", "1", "ADDED", b"{}"))
    for other in (
        m.wire(1),
        pb.CachingMessage(hello=pb.Hello(agent_id="x")).SerializeToString(),
        pb.CachingMessage(heartbeat=pb.Heartbeat(sequence=3)).SerializeToString(),
        b"",
    ):
        assert read_packed_batch(other) is None
        assert isinstance(sized_caching_message(other)[1], pb.CachingMessage)
    # Layouts protobuf reads one way and a careless reader another: each either read in place as
    # protobuf reads it, or left to protobuf.
    index, objects = one_packed_event()
    inner = b"\x0a" + varint(len(index)) + index + b"\x12" + varint(len(objects)) + objects

    def message(batch: bytes) -> bytes:
        return b"\x1a" + varint(len(batch)) + batch

    def packed_field(body: bytes) -> bytes:
        return b"\x1a" + varint(len(body)) + body

    layouts = {
        "sequence 0 written": message(b"\x08\x00" + packed_field(inner)),
        "non-minimal sequence": message(b"\x08\x85\x80\x80\x00" + packed_field(inner)),
        "largest sequence": message(b"\x08" + varint(2**64 - 1) + packed_field(inner)),
        "sequence of 2**64": message(b"\x08" + b"\x80" * 9 + b"\x02" + packed_field(inner)),
        "sequence twice": message(b"\x08\x01\x08\x02" + packed_field(inner)),
        "sequence after packed": message(packed_field(inner) + b"\x08\x05"),
        "packed twice": message(packed_field(inner) + packed_field(inner)),
        "index twice": message(packed_field(b"\x0a" + varint(len(index)) + index + inner)),
        "unknown field": message(packed_field(inner) + b"\x78\x01"),
        # The batch's length in two bytes where one would do (it is under 128).
        "non-minimal length": b"\x1a" + bytes((0x80 | len(packed_field(inner)), 0x00)) + packed_field(inner),
    }
    assert len(packed_field(inner)) < 128
    for name, data in layouts.items():
        batch = read_packed_batch(data)
        if batch is not None:
            assert read_as_protobuf_would(batch) == protobufs_reading(data), name
    assert read_packed_batch(layouts["sequence 0 written"]) is not None
    assert read_packed_batch(layouts["non-minimal length"]) is not None
    assert read_packed_batch(layouts["packed twice"]) is None
    reordered = pb.CachingMessage()
    reordered.events.packed.objects = b"{}"  # protobuf writes objects after the index too, but
    reordered.events.packed.index = b""  # leaves an empty index out: not the agent's layout
    assert read_packed_batch(reordered.SerializeToString()) is None


def test_a_damaged_packed_batch_is_never_read_otherwise_than_protobuf_reads_it():
    """Whatever an agent (or anyone reaching the port) sends, the in-place reading either declines
    it or agrees with protobuf's: truncations, extensions and every single-byte change of a batch."""
    rng = random.Random(31)
    events = [random_event(rng) for _ in range(3)]
    m = packed_message([*events, ObjectEvent("a", "", "v1", "Pod", "ns", "p", "u", "1", "ADDED", b"{}")])
    wire = m.wire(300)
    head = wire[:64]  # the framing: tags, lengths, the index's start
    variants = [wire[:cut] for cut in range(len(head))] + [
        wire + extra for extra in (b"\x00", b"\x08\x01", b"\x1a\x00")
    ]
    for at in range(len(head)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF, head[at] ^ 0x01, head[at] ^ 0x80):
            variants.append(wire[:at] + bytes((value,)) + wire[at + 1 :])
    read = 0
    for data in variants:
        batch = read_packed_batch(data)
        if batch is not None:
            assert read_as_protobuf_would(batch) == protobufs_reading(data), data[:16]
            read += 1
    assert read > len(variants) // 2  # most changes land in the index or the objects: still read in place

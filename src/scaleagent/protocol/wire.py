"""Caching messages of events, written straight in protobuf's wire format.

Why: an agent sends every object it reads, and a large sync is mostly this. Building a upb
`Event` per object from Python (one setter call per field), then serializing the batch, was about
a quarter of the agent's CPU in a 100,000-object sync (a profile, issue 19). The wire format of
`CachingMessage{events: EventBatch{sequence, events}}` is simple: each field is its tag, a length
for strings and bytes, and the bytes. Here the fields an event shares with its neighbours
(its type, account, group, version and kind) are encoded once and reused, the rest is appended as
pieces to one list per message, and the message is joined once when written: every object's bytes
are copied once, into the message, and the message's size is known without serializing anything.

Field numbers and wire types are read from the generated descriptors, so a change to the .proto
cannot silently desynchronise this file (a test also compares the bytes with protobuf's own).
The hub parses these messages with the generated code, like any other, except a packed batch laid
out exactly as `PackedMessage.wire` writes it, which `read_packed_batch` reads in place.
"""

from __future__ import annotations

import msgspec
from google.protobuf.descriptor import FieldDescriptor

from ..kube.events import ObjectEvent
from . import EVENT_TYPES
from .v1 import agent_pb2 as pb

__all__ = ["EventsMessage", "IndexRow", "PackedBatch", "PackedMessage", "decode_index", "read_packed_batch", "varint"]

_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def varint(value: int) -> bytes:
    """`value` as a protobuf varint (negative int64s take ten bytes, as protobuf writes them)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: FieldDescriptor) -> bytes:
    scalar = field.type in (FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64)
    return varint((field.number << 3) | (0 if scalar else 2))


_EVENT = pb.Event.DESCRIPTOR.fields_by_name
_TYPE, _ACCOUNT, _GROUP, _VERSION, _KIND = (_tag(_EVENT[f]) for f in ("type", "account", "group", "version", "kind"))
_NAMESPACE, _NAME, _RV = (_tag(_EVENT[f]) for f in ("namespace", "name", "resource_version"))
_OBJECT, _READ_AT = _tag(_EVENT["object"]), _tag(_EVENT["read_at_unix_ms"])
_BATCH_EVENT = _tag(pb.EventBatch.DESCRIPTOR.fields_by_name["events"])
_SEQUENCE = _tag(pb.EventBatch.DESCRIPTOR.fields_by_name["sequence"])
_MESSAGE_EVENTS = _tag(pb.CachingMessage.DESCRIPTOR.fields_by_name["events"])
_PACKED = _tag(pb.EventBatch.DESCRIPTOR.fields_by_name["packed"])
_INDEX = _tag(pb.PackedEvents.DESCRIPTOR.fields_by_name["index"])
_OBJECTS = _tag(pb.PackedEvents.DESCRIPTOR.fields_by_name["objects"])


def _text(tag: bytes, text: str) -> bytes:
    """A string field, or nothing when empty (proto3 leaves out fields at their default)."""
    if not text:
        return b""
    data = text.encode("utf-8", "surrogatepass")
    return tag + varint(len(data)) + data


def _shared_head(type_: str, account: str, group: str, version: str, kind: str) -> bytes:
    return (
        _TYPE
        + varint(EVENT_TYPES[type_])
        + _text(_ACCOUNT, account)
        + _text(_GROUP, group)
        + _text(_VERSION, version)
        + _text(_KIND, kind)
    )


class EventsMessage:
    """One `CachingMessage` of events being filled; `wire(sequence)` gives its bytes.

    `len()` is the number of events and `size` the bytes they take (each with its own tag and
    length), which `wire_size` turns into the whole message's size for a sequence."""

    __slots__ = ("parts", "size", "count", "_heads")

    def __init__(self, heads: dict[tuple[str, str, str, str, str], bytes] | None = None) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.count = 0
        # The encoded fields that events of one kind share; one dict can serve every message.
        self._heads = heads if heads is not None else {}

    def __len__(self) -> int:
        return self.count

    def add(self, e: ObjectEvent) -> int:
        """Append `e`; returns the bytes it took (the event with its tag and length)."""
        key = (e.type, e.account, e.group, e.version, e.kind)
        head = self._heads.get(key)
        if head is None:
            head = _shared_head(*key)
            if len(self._heads) >= 4096:
                self._heads.clear()
            self._heads[key] = head
        namespace, name, rv = e.namespace, e.name, e.resource_version
        if namespace and name and rv and len(namespace) < 0x80 and len(name) < 0x80 and len(rv) < 0x80:
            # The common event, in one step: three short strings (ASCII once encoded to the same
            # length; anything else takes the general path below).
            small = (namespace + name + rv).encode("utf-8", "surrogatepass")
            if len(small) == len(namespace) + len(name) + len(rv):
                a, b = len(namespace), len(namespace) + len(name)
                fields = b"".join(
                    (
                        head,
                        _NAMESPACE,
                        _ONE_BYTE[a],
                        small[:a],
                        _NAME,
                        _ONE_BYTE[b - a],
                        small[a:b],
                        _RV,
                        _ONE_BYTE[len(small) - b],
                        small[b:],
                    )
                )
            else:
                fields = head + _text(_NAMESPACE, namespace) + _text(_NAME, name) + _text(_RV, rv)
        else:
            fields = head + _text(_NAMESPACE, namespace) + _text(_NAME, name) + _text(_RV, rv)
        read_at = int(e.read_at * 1000)
        if read_at:
            fields_after = _READ_AT + varint(read_at)
        else:
            fields_after = b""
        obj = e.object
        parts = self.parts
        if obj:
            length = varint(len(obj))
            size = len(fields) + len(_OBJECT) + len(length) + len(obj) + len(fields_after)
            parts.append(_BATCH_EVENT + varint(size) + fields + _OBJECT + length)
            parts.append(obj)
            if fields_after:
                parts.append(fields_after)
        else:
            size = len(fields) + len(fields_after)
            parts.append(_BATCH_EVENT + varint(size) + fields + fields_after)
        taken = len(_BATCH_EVENT) + len(varint(size)) + size
        self.size += taken
        self.count += 1
        return taken

    def mark(self) -> int:
        """Where the next event's pieces start: `drop_last(mark, taken)` takes that event out again."""
        return len(self.parts)

    def drop_last(self, mark: int, taken: int) -> None:
        del self.parts[mark:]
        self.size -= taken
        self.count -= 1

    def wire_size(self, sequence: int) -> int:
        """The message's size once it carries `sequence`."""
        batch = self.size + (len(_SEQUENCE) + len(varint(sequence)) if sequence else 0)
        return len(_MESSAGE_EVENTS) + len(varint(batch)) + batch

    def wire(self, sequence: int) -> bytes:
        """The serialized `CachingMessage{events: EventBatch{sequence, events}}`."""
        head = _SEQUENCE + varint(sequence) if sequence else b""
        return b"".join((_MESSAGE_EVENTS, varint(len(head) + self.size), head, *self.parts))


# An event of a packed batch, as PackedEvents.index holds it (see the .proto).
IndexRow = tuple[int, str, str, str, str, str, str, str, int, int]
_encode_index = msgspec.msgpack.Encoder().encode
decode_index = msgspec.msgpack.Decoder(list[IndexRow]).decode
"""A packed batch's index, checked to be a list of rows of the right types (msgspec.DecodeError)."""


class PackedMessage:
    """One `CachingMessage` whose batch carries its events packed (`PackedEvents`), for a hub
    whose Welcome offers `packed_events`; the same surface as `EventsMessage`.

    An event is a tuple appended to the index and its object appended to a list; the message is
    two calls into C when written (MessagePack of the index, a join of the objects). `size` is a
    bound, a few bytes per event above the exact size, so that a message filled up to the hub's
    limit stays under it."""

    __slots__ = ("rows", "objects", "object_bytes", "size")

    def __init__(self, heads: object = None) -> None:  # `heads`: EventsMessage's, unused here
        self.rows: list[IndexRow] = []
        self.objects: list[bytes] = []
        self.object_bytes = 0
        self.size = 0

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, e: ObjectEvent) -> int:
        """Append `e`; returns the bytes it may take (an upper bound)."""
        obj = e.object or b""
        texts = e.account + e.group + e.version + e.kind + e.namespace + e.name + e.resource_version
        text_bytes = len(texts) if texts.isascii() else len(texts.encode("utf-8", "surrogatepass"))
        # MessagePack: an array header, 7 strings with up to 5-byte headers, 3 integers of up to 9
        taken = len(obj) + text_bytes + 5 + 7 * 5 + 3 * 9
        self.rows.append(
            (
                EVENT_TYPES[e.type],
                e.account,
                e.group,
                e.version,
                e.kind,
                e.namespace,
                e.name,
                e.resource_version,
                int(e.read_at * 1000),
                len(obj),
            )
        )
        self.objects.append(obj)
        self.object_bytes += len(obj)
        self.size += taken
        return taken

    def mark(self) -> int:
        return len(self.rows)

    def drop_last(self, mark: int, taken: int) -> None:
        del self.rows[mark:]
        self.object_bytes -= sum(map(len, self.objects[mark:]))
        del self.objects[mark:]
        self.size -= taken

    def message(self, sequence: int) -> pb.CachingMessage:
        m = pb.CachingMessage()
        batch = m.events
        batch.sequence = sequence
        batch.packed.index = _encode_index(self.rows)
        batch.packed.objects = b"".join(self.objects)
        return m

    def wire(self, sequence: int) -> bytes:
        """The serialized `CachingMessage{events: EventBatch{sequence, packed}}`, framed here and
        joined once: each object is copied once, into the message (a large buffer is a fresh
        mapping whose every page faults in, so each copy of a batch is not free)."""
        index = _encode_index(self.rows)
        packed_head = _INDEX + varint(len(index))
        objects_head = _OBJECTS + varint(self.object_bytes) if self.object_bytes else b""  # proto3: empty left out
        packed = len(packed_head) + len(index) + len(objects_head) + self.object_bytes
        batch_head = (_SEQUENCE + varint(sequence) if sequence else b"") + _PACKED + varint(packed)
        head = _MESSAGE_EVENTS + varint(len(batch_head) + packed) + batch_head + packed_head
        return b"".join((head, index, objects_head, *self.objects))


class PackedBatch:
    """A packed `EventBatch` read in place from its message's bytes (`read_packed_batch`): what
    the hub needs of it, with the objects left where they are in `data`, between `objects_start`
    and `objects_end`."""

    __slots__ = ("sequence", "index", "data", "objects_start", "objects_end")

    def __init__(self, sequence: int, index: bytes, data: bytes, objects_start: int, objects_end: int) -> None:
        self.sequence = sequence
        self.index = index
        self.data = data
        self.objects_start = objects_start
        self.objects_end = objects_end


class _NotThisLayout(Exception):
    pass


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _NotThisLayout
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >= 1 << 64:
                raise _NotThisLayout
            return value, at
        shift += 7


def _read_field(data: bytes, at: int, tag: bytes, end: int) -> tuple[int, int] | None:
    """(start, end) of the length-delimited field `tag` at `at`, None if another field is there.

    `end` is the end of the whole message: enough only because read_packed_batch also requires
    the batch and its packed events to end exactly there (a field nested in one that ends sooner
    would need that one's end)."""
    if not data.startswith(tag, at):
        return None
    size, start = _read_varint(data, at + len(tag))
    if start + size > end:
        raise _NotThisLayout
    return start, start + size


def read_packed_batch(data: bytes) -> PackedBatch | None:
    """`data` read as `CachingMessage{events: EventBatch{sequence, packed: PackedEvents{index,
    objects}}}` laid out as `PackedMessage.wire` writes it (those fields, in that order, filling the
    message exactly); None for any other message or layout, which the caller parses with protobuf.

    Why: protobuf's parse copies the batch's objects twice (into its own memory, then into the
    bytes `packed.objects` hands out) before the hub slices each object from them; read in place,
    each object is copied once, from the message gRPC received. Protobuf would read these bytes
    into the same fields (a test compares the two on every layout it can make, valid or not)."""
    try:
        end = len(data)
        batch = _read_field(data, 0, _MESSAGE_EVENTS, end)
        if batch is None or batch[1] != end:
            return None
        at, sequence = batch[0], 0
        if data.startswith(_SEQUENCE, at):
            sequence, at = _read_varint(data, at + len(_SEQUENCE))
        packed = _read_field(data, at, _PACKED, end)
        if packed is None or packed[1] != end:
            return None
        index = _read_field(data, packed[0], _INDEX, end)
        if index is None:
            return None
        objects = _read_field(data, index[1], _OBJECTS, end) if index[1] != end else (end, end)
        if objects is None or objects[1] != end:
            return None
    except _NotThisLayout:
        return None
    return PackedBatch(sequence, data[index[0] : index[1]], data, objects[0], objects[1])

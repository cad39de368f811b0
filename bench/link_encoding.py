"""Encoding N events into the agent's Caching messages: three ways, the bytes of each checked equal.

  old     : what the agent did before issue 19: one `pb.Event(...)` per event, `ByteSize()` of each
            to split the batch, `pb.EventBatch(events=chunk)` (which copies every event into the
            batch), `ByteSize()` of each message for kubesvc_events_bytes_sent_total, then
            gRPC's serializer (`SerializeToString`).
  in place: the first step of issue 19 (commit 18cd600): each event sized arithmetically and added
            in place to a upb message (`events.add()`, non-empty fields set), then serialized.
  current : `HubLink._split` as it is now: `protocol.wire.EventsMessage` writes each event in
            protobuf's wire format, the fields an event shares with its kind encoded once, and
            joins each message once (`wire(sequence)`): no protobuf objects at all.
  hub     : what the hub's per-message `ByteSize()` (its own size check before issue 19) costs on
            the same messages, beside parsing them (`CachingMessage.FromString`).

Objects are ConfigMaps of ~0.8 KB as kubesim serves them; the hub's limit is the default 16 MiB.
Runs rotate the order; figures are medians of CPU time (time.process_time).

    .venv/bin/python bench/link_encoding.py --events 100000 --runs 5
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Sequence

from scaleagent.agent.link import FRAMING_MARGIN, HubLink, LinkSettings
from scaleagent.kube.events import ObjectEvent
from scaleagent.protocol import EVENT_TYPES, pb

log = logging.getLogger("bench")


def old_split(max_bytes: int, batch: Sequence[ObjectEvent]) -> list[list[pb.Event]]:
    """The agent's `_split` before issue 19, verbatim but for the oversize log."""
    chunks: list[list[pb.Event]] = []
    current: list[pb.Event] = []
    size = 0
    for e in batch:
        ev = pb.Event(
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
        n = ev.ByteSize() + 8
        if n > max_bytes:
            continue
        if current and size + n > max_bytes:
            chunks.append(current)
            current, size = [], 0
        current.append(ev)
        size += n
    if current:
        chunks.append(current)
    return chunks


def old(max_bytes: int, batch: Sequence[ObjectEvent]) -> tuple[list[pb.CachingMessage], int]:
    messages, total = [], 0
    for sequence, chunk in enumerate(old_split(max_bytes, batch), 1):
        message = pb.CachingMessage(events=pb.EventBatch(sequence=sequence, events=chunk))
        messages.append(message)
        total += message.ByteSize()
    return messages, total


def _varint_size(value: int) -> int:
    if value < 0:
        return 10
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def in_place(max_bytes: int, batch: Sequence[ObjectEvent]) -> tuple[list[bytes], int]:
    """Commit 18cd600's HubLink._split with Chunk and event_size, inlined."""
    messages: list[pb.CachingMessage] = []
    current, size = None, 0
    for e in batch:
        n = 2
        for text in (e.account, e.group, e.version, e.kind, e.namespace, e.name, e.resource_version):
            if text:
                k = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                n += 1 + _varint_size(k) + k
        if e.object:
            n += 1 + _varint_size(len(e.object)) + len(e.object)
        read_at = int(e.read_at * 1000)
        if read_at:
            n += 1 + _varint_size(read_at)
        if n + 8 > max_bytes:
            continue
        if current is None or size + n + 8 > max_bytes:
            current, size = pb.CachingMessage(), 0
            messages.append(current)
        ev = current.events.events.add()
        ev.type = EVENT_TYPES[e.type]
        if e.account:
            ev.account = e.account
        if e.group:
            ev.group = e.group
        if e.version:
            ev.version = e.version
        if e.kind:
            ev.kind = e.kind
        if e.namespace:
            ev.namespace = e.namespace
        if e.name:
            ev.name = e.name
        if e.resource_version:
            ev.resource_version = e.resource_version
        if e.object:
            ev.object = e.object
        if read_at:
            ev.read_at_unix_ms = read_at
        size += n + 8
    wire = []
    for sequence, m in enumerate(messages, 1):
        m.events.sequence = sequence
        wire.append(m.SerializeToString())
    return wire, sum(map(len, wire))


def current(link: HubLink, batch: Sequence[ObjectEvent]) -> tuple[list[bytes], int]:
    wire = [m.wire(sequence) for sequence, m in enumerate(link._split(batch), 1)]
    return wire, sum(map(len, wire))


def configmap(i: int) -> bytes:
    data = "x" * 600
    return (
        f'{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i:06d}","namespace":"bench",'
        f'"uid":"00000000-0000-0000-0000-{i:012d}","resourceVersion":"{1000 + i}",'
        f'"creationTimestamp":"2026-01-01T00:00:00Z"}},"data":{{"k":"{data}"}}}}'
    ).encode()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    batch = [
        ObjectEvent("acct", "", "v1", "ConfigMap", "bench", f"cm-{i:06d}", "uid", str(1000 + i), "ADDED", configmap(i))
        for i in range(args.events)
    ]
    link = HubLink(LinkSettings(target="localhost:1"))
    link._max_bytes = 16 * 1024 * 1024 - FRAMING_MARGIN
    a, _ = old(link._max_bytes, batch)
    wire, b_bytes = current(link, batch)
    # The same events in the same order (the current way fills each message up to the limit exactly,
    # the others keep a margin, so messages may break at other events).
    events = [ev for w in wire for ev in pb.CachingMessage.FromString(w).events.events]
    assert events == [ev for m in a for ev in m.events.events] and len(events) == len(batch)
    assert in_place(link._max_bytes, batch)[0] == [m.SerializeToString() for m in a]
    ways = {
        "old": lambda: old(link._max_bytes, batch),
        "in place": lambda: in_place(link._max_bytes, batch),
        "current": lambda: current(link, batch),
    }
    times: dict[str, list[float]] = {k: [] for k in ways} | {"parse": [], "hub ByteSize": []}
    names = list(ways)
    for run in range(args.runs):
        for name in names[run % 3 :] + names[: run % 3]:
            t = time.process_time()
            ways[name]()
            times[name].append(time.process_time() - t)
        t = time.process_time()
        parsed = [pb.CachingMessage.FromString(w) for w in wire]
        times["parse"].append(time.process_time() - t)
        t = time.process_time()
        for m in parsed:
            m.ByteSize()
        times["hub ByteSize"].append(time.process_time() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.events} events, {len(wire)} messages, {b_bytes / 1e6:.1f} MB; medians of {args.runs} runs")
    for k, v in med.items():
        print(f"  {k:13s} {v * 1000:8.1f} ms  {args.events / v:12,.0f} events/s")
    print(
        f"  current is {med['old'] / med['current']:.2f}x faster than old, "
        f"{med['in place'] / med['current']:.2f}x faster than in place"
    )
    print(f"  hub ByteSize costs {med['hub ByteSize'] / med['parse'] * 100:.0f}% of parsing the same messages")


if __name__ == "__main__":
    main()

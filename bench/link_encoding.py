"""Encoding N events into the agent's Caching messages: the old way beside the current one.

  old     : what the agent did before issue 19: one `pb.Event(...)` per event, `ByteSize()` of each
            to split the batch, `pb.EventBatch(events=chunk)` (which copies every event into the
            batch) and `ByteSize()` of each message for kubesvc_events_bytes_sent_total.
  current : `HubLink._split` as it is now: each event sized arithmetically (`event_size`), added in
            place to its message (`events.add()`, non-empty fields set), messages sized from the
            events' sizes.
  hub     : what the hub's per-message `ByteSize()` (its own size check) costs on the same messages,
            beside parsing them (`CachingMessage.FromString`).

Objects are ConfigMaps of ~0.8 KB as kubesim serves them; the hub's limit is the default 16 MiB.
Runs alternate old/current; figures are medians, the ratio is old time / current time.

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


def current(link: HubLink, batch: Sequence[ObjectEvent]) -> tuple[list[pb.CachingMessage], int]:
    messages, total = [], 0
    for sequence, chunk in enumerate(link._split(batch), 1):
        chunk.message.events.sequence = sequence
        messages.append(chunk.message)
        total += chunk.byte_size(sequence)
    return messages, total


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
    a, a_bytes = old(link._max_bytes, batch)
    b, b_bytes = current(link, batch)
    assert a_bytes == b_bytes and [m.SerializeToString() for m in a] == [m.SerializeToString() for m in b]
    wire = [m.SerializeToString() for m in b]
    times: dict[str, list[float]] = {"old": [], "current": [], "parse": [], "hub ByteSize": []}
    for run in range(args.runs):
        for name in ("old", "current") if run % 2 == 0 else ("current", "old"):
            t = time.perf_counter()
            old(link._max_bytes, batch) if name == "old" else current(link, batch)
            times[name].append(time.perf_counter() - t)
        t = time.perf_counter()
        parsed = [pb.CachingMessage.FromString(w) for w in wire]
        times["parse"].append(time.perf_counter() - t)
        t = time.perf_counter()
        for m in parsed:
            m.ByteSize()
        times["hub ByteSize"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.events} events, {len(b)} messages, {b_bytes / 1e6:.1f} MB; medians of {args.runs} runs")
    for k, v in med.items():
        print(f"  {k:13s} {v * 1000:8.1f} ms  {args.events / v:12,.0f} events/s")
    print(f"  current is {med['old'] / med['current']:.2f}x faster than old (agent encoding)")
    print(f"  hub ByteSize costs {med['hub ByteSize'] / med['parse'] * 100:.0f}% of parsing the same messages")


if __name__ == "__main__":
    main()

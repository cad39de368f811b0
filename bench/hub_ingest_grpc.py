"""Hub ingest over the agents' link: events per second a real hub takes from one agent stream.

bench/hub_ingest.py times `Cache.apply` alone; this one times what an agent sees: a real `scale-agent
hub` process (SQLite, plaintext gRPC on loopback), one simulated agent (bench/hub_sessions.py's
session: hello, welcome, operations stream, an account described), then N ConfigMaps (3-5 labels,
0.5-2 KB: bench/hub_serving.py's events) as ADDED and again as MODIFIED, in batches of --batch
events with at most --window batches unacknowledged (the agent's defaults: 1,000 and 8). The
clock runs from the first batch written to the last one acknowledged (the hub acknowledges a
batch once it is in its cache). The hub's CPU over that time is read from /proc.

The batches are encoded before the clock starts, so this process's work while timing is writing
bytes; it runs on the other core. Medians of --rounds, each on a fresh account. The batches are
encoded as the agent encodes them (protocol.wire): packed, which this hub offers, or (`--form
events`, `both`) as the event messages an agent sends a hub that does not.

    .venv/bin/python bench/hub_ingest_grpc.py --objects 100000 --rounds 3 --form both
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, median, minor_faults, run, stolen_seconds
from hub_serving import events as config_map_events
from hub_sessions import Session, start_hub

from scaleagent.kube.events import ObjectEvent
from scaleagent.protocol import pb
from scaleagent.protocol.wire import EventsMessage, PackedMessage


def encoded_batches(account: str, n: int, batch: int, first_sequence: int, form: str) -> list[pb.CachingMessage]:
    """ADDED then MODIFIED for n ConfigMaps, encoded as the agent encodes them (`form`: "packed",
    what it sends a hub that offers them, or "events", what it sends an older hub), sequenced from
    first_sequence."""
    adds = config_map_events(n, 20)
    make = PackedMessage if form == "packed" else EventsMessage
    out: list[pb.CachingMessage] = []
    seq = first_sequence
    for type_, offset in (("ADDED", 0), ("MODIFIED", n)):
        for i in range(0, n, batch):
            m = make()
            for j, e in enumerate(adds[i : i + batch]):
                m.add(
                    ObjectEvent(
                        account,
                        "",
                        "v1",
                        "ConfigMap",
                        e.namespace,
                        e.name,
                        "",
                        str(1000 + offset + i + j),
                        type_,
                        e.object,
                    )
                )
            out.append(pb.CachingMessage.FromString(m.wire(seq)))
            seq += 1
    return out


class IngestSession(Session):
    """The simulated agent, whose reader also frees a window slot per acknowledged batch."""

    def __init__(self, i: int, target: str, window: int) -> None:
        super().__init__(i, target, 0)
        self.slots = asyncio.Semaphore(window)
        self.acked_sequence = 0
        self.waiting_for = 0
        self.all_acked = asyncio.Event()
        self.first_ack = asyncio.Event()

    async def _read(self) -> None:
        assert self.caching is not None
        while True:
            msg = await self.caching.read()
            if msg is grpc.aio.EOF:
                self.ended = "the hub ended the Caching stream"
                self.all_acked.set()  # and the round fails below
                return
            if msg.WhichOneof("message") != "ack":
                continue
            if self.acked_sequence:  # sequence 1 (the empty snapshot) was not written through a slot
                for _ in range(msg.ack.sequence - self.acked_sequence):
                    self.slots.release()
            self.acked_sequence = max(self.acked_sequence, msg.ack.sequence)
            self.first_ack.set()
            if self.waiting_for and self.acked_sequence >= self.waiting_for:
                self.all_acked.set()


async def one_round(
    target: str, hub_pid: int, i: int, n: int, batch: int, window: int, form: str
) -> tuple[float, float, float, float]:
    """Events a second, the hub's CPU µs an event, its page faults an event (a fresh page zeroed
    each: what freeing memory to the system and taking it back costs) and the seconds the
    hypervisor stole from this machine meanwhile."""
    s = IngestSession(i, target, window)
    await s.open()  # sequence 1: the (empty) snapshot
    messages = encoded_batches(s.account, n, batch, 2, form)
    await asyncio.wait_for(s.first_ack.wait(), 60)  # the empty snapshot's, before the clock starts
    s.waiting_for = messages[-1].events.sequence
    assert s.caching is not None
    cpu0, faults0, stolen0, t0 = cpu_seconds(hub_pid), minor_faults(hub_pid), stolen_seconds(), time.perf_counter()
    for m in messages:
        await s.slots.acquire()
        await s.caching.write(m)
    await asyncio.wait_for(s.all_acked.wait(), 600)
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(hub_pid) - cpu0
    faults, stolen = minor_faults(hub_pid) - faults0, stolen_seconds() - stolen0
    if s.ended:
        raise RuntimeError(s.ended)
    await s.close()
    return 2 * n / elapsed, cpu / (2 * n) * 1e6, faults / (2 * n), stolen


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--form",
        choices=["packed", "events", "both"],
        default="packed",
        help="how batches carry their events: packed (what the agent sends this hub), events (what it "
        "sends a hub that does not offer packed batches), or both, interleaved",
    )
    args = p.parse_args()
    forms = ["packed", "events"] if args.form == "both" else [args.form]
    rates: dict[str, list[float]] = {f: [] for f in forms}
    cpus: dict[str, list[float]] = {f: [] for f in forms}
    faults: dict[str, list[float]] = {f: [] for f in forms}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hub = start_hub(tmp, f"sqlite:///{tmp / 'hub.db'}", False)
        try:
            i = 0
            for r in range(args.rounds):
                for form in forms:
                    target, pid = hub.grpc_target, hub.pid  # type: ignore[attr-defined]
                    rate, cpu, fault, stolen = await one_round(
                        target, pid, i, args.objects, args.batch, args.window, form
                    )
                    i += 1
                    rates[form].append(rate)
                    cpus[form].append(cpu)
                    faults[form].append(fault)
                    print(
                        f"  round {r + 1} ({form}): {rate:,.0f} events/s, hub CPU {cpu:.2f} µs/event, "
                        f"{fault:.2f} page faults/event; stolen by the hypervisor {stolen:.1f} s",
                        flush=True,
                    )
        finally:
            hub.stop()
    print(
        f"hub ingest over gRPC, {args.objects:,} ConfigMaps ADDED then MODIFIED, batches of {args.batch}, "
        f"window {args.window}, median of {args.rounds} ({machine()})"
    )
    for form in forms:
        print(
            f"  {form:8s} {median(rates[form]):,.0f} events/s   hub CPU {median(cpus[form]):.2f} µs/event   "
            f"{median(faults[form]):.2f} page faults/event"
        )


if __name__ == "__main__":
    run(main)

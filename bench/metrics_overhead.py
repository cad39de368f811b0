"""What measuring change-to-cache latency costs the hub's hot path.

The hub observes one latency per watch event an agent streams, in the loop that applies events to
the cache. This times, for batches of events as the link delivers them (500 per batch): the cache's
apply alone (the baseline), apply plus the hub's own bucket histogram (hub/metrics.py, one
observe_many per batch), and apply plus prometheus_client's Histogram observed per event (the
library's way). Printed: microseconds per event and each overhead as a share of apply.

    .venv/bin/python bench/metrics_overhead.py --events 200000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from prometheus_client import CollectorRegistry
from prometheus_client import Histogram as PromHistogram

from scaleagent.hub.cache.cache import Cache
from scaleagent.hub.metrics import CHANGE_TO_CACHE, Histogram
from scaleagent.protocol import pb

BATCH = 500


def batches(n: int) -> list[list[pb.Event]]:
    now_ms = int(time.time() * 1000)
    events = [
        pb.Event(
            type=pb.MODIFIED,
            account="bench",
            version="v1",
            kind="ConfigMap",
            namespace=f"ns-{i % 50}",
            name=f"cm-{i % 5000}",
            resource_version=str(i + 1),
            object=orjson.dumps(
                {
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i % 5000}", "namespace": f"ns-{i % 50}", "resourceVersion": str(i + 1)},
                    "data": {"k": "v" * 64},
                }
            ),
            read_at_unix_ms=now_ms - 15,
        )
        for i in range(n)
    ]
    return [events[i : i + BATCH] for i in range(0, n, BATCH)]


def run(work: list[list[pb.Event]], observe: str) -> float:
    cache = Cache()
    ours = Histogram(CHANGE_TO_CACHE)
    theirs = PromHistogram("x_seconds", "x", buckets=CHANGE_TO_CACHE, registry=CollectorRegistry())
    started = time.perf_counter()
    for batch in work:
        cache.apply("bench", batch)
        if observe == "none":
            continue
        now_ms = time.time() * 1000
        if observe == "hub":  # as hub/agents/link.py does
            ours.observe_stamps([e.read_at_unix_ms for e in batch], now_ms)
        else:
            for e in batch:
                if e.read_at_unix_ms:
                    theirs.observe(max(0.0, now_ms - e.read_at_unix_ms) / 1000)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = batches(args.events)
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # interleaved, best of each: the machine's noise hits all alike
        for observe in ("none", "hub", "prometheus_client"):
            t = run(work, observe)
            best[observe] = min(best.get(observe, t), t)
    base = best["none"]
    print(f"{args.events} events in batches of {BATCH}, best of {args.rounds} rounds")
    for observe, t in best.items():
        extra = "" if observe == "none" else f"  (+{100 * (t - base) / base:.1f}% over apply alone)"
        print(f"  apply + {observe:18s} {1e6 * t / args.events:6.2f} us/event{extra}")


if __name__ == "__main__":
    main()

"""Hub ingest: events per second through ``Cache.apply``, this tree against a baseline.

The baseline is the revision SCALE_AGENT_BENCH_BASE names (default git HEAD).

Feeds a fresh cache N ConfigMaps (3-5 labels, 0.5-2 KB; the events of bench/hub_serving.py) as
ADDED in batches of --batch, then the same objects again as MODIFIED with a new
resourceVersion (an update stream). Both cache versions run interleaved in one process, --rounds
each; medians are printed. No subscriber is attached (what ingest alone costs).

    .venv/bin/python bench/hub_ingest.py --objects 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import baseline_name, machine, median
from hub_serving import events, head_cache

from scaleagent.hub.cache.cache import Cache
from scaleagent.protocol.v1 import agent_pb2 as pb


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=20000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    adds = events(a.objects, 20)
    updates = [
        SimpleNamespace(**{**vars(e), "type": pb.MODIFIED, "resource_version": str(a.objects + i + 1)})
        for i, e in enumerate(adds)
    ]
    classes = {"this tree": Cache}
    head = head_cache()
    if head is not None:
        classes[baseline_name()] = head
    rates: dict[str, dict[str, list[float]]] = {k: {"ADDED": [], "MODIFIED": []} for k in classes}
    for _ in range(a.rounds):
        for label, cls in classes.items():
            cache = cls()
            gc.collect()
            for kind, evs in (("ADDED", adds), ("MODIFIED", updates)):
                t0 = time.perf_counter()
                for i in range(0, len(evs), a.batch):
                    cache.apply("acct", evs[i : i + a.batch])
                rates[label][kind].append(len(evs) / (time.perf_counter() - t0))
            assert cache.stats()["objects"] == a.objects and cache.rejected == 0
    print(f"{a.objects} ConfigMaps, batches of {a.batch} ({machine()})")
    for label, by in rates.items():
        print("  " + f"{label:10s}" + "  ".join(f"{k} {median(v):10,.0f} events/s" for k, v in by.items()))


if __name__ == "__main__":
    main()

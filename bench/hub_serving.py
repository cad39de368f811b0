"""Serving a kind from the hub's cache: µs per object of ``Cache.query`` against the floor.

The REST endpoint answers a kind (or a kind in a namespace) with the cached JSON bytes joined
into a List, so the least any query can cost is that byte join. This bench fills a cache with N
ConfigMaps (3-5 labels, 0.5-2 KB, spread over namespaces) and times, interleaved, for the whole
kind and for one namespace: this tree's ``Cache.query``, the baseline's (the revision named by
SCALE_AGENT_BENCH_BASE, default git HEAD, read with ``git show``), ``b",".join`` of the same objects, and
``orjson.dumps`` of them parsed (what a server that keeps dicts would pay). Medians of --rounds.

    .venv/bin/python bench/hub_serving.py --objects 1000 --rounds 15
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import baseline_name, load_baseline_module, machine, median

from scaleagent.hub.cache.cache import Cache
from scaleagent.protocol.v1 import agent_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent


def head_cache() -> Any:
    """The baseline's Cache class (SCALE_AGENT_BENCH_BASE, default git HEAD), or None without git."""
    module = load_baseline_module("scaleagent/hub/cache/cache.py", "scaleagent.hub.cache._base_cache")
    return None if module is None else module.Cache


def events(n: int, namespaces: int, seed: int = 1) -> list[SimpleNamespace]:
    """Realistic ConfigMap events: 3-5 labels, 0.5-2 KB of data."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        ns, name = f"team-{i % namespaces}", f"config-{i:06d}"
        labels = {"app": f"app-{i % 50}", "tier": rnd.choice(["web", "db", "cache"]), "env": "prod"}
        for j in range(rnd.randint(0, 2)):
            labels[f"extra-{j}"] = f"v{i % 7}"
        doc = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-{i}",
                "resourceVersion": str(i + 1),
                "labels": labels,
                "annotations": {"moniker.spinnaker.io/application": f"app-{i % 50}"},
            },
            "data": {"config": "x" * rnd.randint(400, 1800)},
        }
        out.append(
            SimpleNamespace(
                type=pb.ADDED,
                group="",
                version="v1",
                kind="ConfigMap",
                namespace=ns,
                name=name,
                resource_version=str(i + 1),
                object=orjson.dumps(doc),
            )
        )
    return out


def timed(fn: Any, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--namespaces", type=int, default=10)
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    evs = events(a.objects, a.namespaces)
    caches = {"query (this tree)": Cache()}
    Head = head_cache()
    if Head is not None:
        caches[f"query ({baseline_name()})"] = Head()
    for c in caches.values():
        c.apply("acct", evs)
    one_ns = "team-0"
    for scope, ns in (("whole kind", None), (f"namespace {one_ns}", one_ns)):
        objs = caches["query (this tree)"].query("acct", kind="ConfigMap", namespace=ns)
        parsed = [orjson.loads(o) for o in objs]
        n = len(objs)
        reps = max(1, 20_000 // n)
        cases: dict[str, Any] = {
            label: (lambda c=c, ns=ns: c.query("acct", kind="ConfigMap", namespace=ns)) for label, c in caches.items()
        }
        cases['b",".join'] = lambda objs=objs: b",".join(objs)
        cases["orjson.dumps(parsed)"] = lambda parsed=parsed: orjson.dumps(parsed)
        for label, c in caches.items():
            assert c.query("acct", kind="ConfigMap", namespace=ns) == objs, label
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(a.rounds):  # interleaved
            for label, fn in cases.items():
                times[label].append(timed(fn, reps) / n * 1e6)
        join = median(times['b",".join'])
        print(f"{scope}: {n} objects ({machine()})")
        for label, ts in times.items():
            m = median(ts)
            print(f"  {label:22s} {m:8.3f} µs/object  {m / join:6.1f}x the join")


if __name__ == "__main__":
    main()

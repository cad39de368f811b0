"""Hub cache memory per object and ingest rate, against the target of 1.5 x JSON + 300 B per object.

Builds realistic object JSON (10 kinds: Deployment, ReplicaSet, Pod, Service, ConfigMap, Secret
metadata, ServiceAccount, Ingress, StatefulSet, HorizontalPodAutoscaler; 1-3 KB each, with
labels and, on most of them, Spinnaker moniker annotations) and feeds it to `Cache.apply` the
way a hub session does: one snapshot per (account, kind) -- SNAPSHOT_BEGIN, ADDED..., SNAPSHOT_END
-- in `EventBatch` messages of up to 1,000 events that are serialized and parsed again, so the
events are the same upb messages the gRPC server hands over. Only `apply` is timed.

Memory is the growth of this process's RSS (/proc/self/status VmRSS) over the whole ingest after
gc.collect(), also after malloc_trim (what a hub gets back from glibc once a burst is over).
The garbage collector's full collections are reported too: each one walks every cached entry,
and on the hub it would pause the event loop for that long.

Then, into the populated cache: a first 100,000-object snapshot of one kind in a new account, and
a re-snapshot of it where 98% of the objects are resent unchanged, 1% changed and 1% are gone
(swept at SNAPSHOT_END).

    .venv/bin/python bench/hub_cache_memory.py --accounts 100 --kinds 10 --objects 1000
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import itertools
import random
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine

from scaleagent.hub.cache.cache import Cache
from scaleagent.protocol.v1 import agent_pb2 as pb

KINDS = [  # (group, version, kind)
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "ReplicaSet"),
    ("", "v1", "Pod"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("", "v1", "Secret"),
    ("", "v1", "ServiceAccount"),
    ("networking.k8s.io", "v1", "Ingress"),
    ("apps", "v1", "StatefulSet"),
    ("autoscaling", "v2", "HorizontalPodAutoscaler"),
]
BATCH = 1000
_rv = itertools.count(1_000_000)


def rss_kb(field: str = "VmRSS") -> int:
    """This process's resident set (or, with "VmHWM", its peak), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def settle(trim: bool) -> int:
    gc.collect()
    if trim:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    return rss_kb()


def make_object(
    rnd: random.Random, group: str, version: str, kind: str, ns: str, i: int
) -> tuple[str, str, str, bytes]:
    """(namespace, name, resourceVersion, JSON) of one object, 1-3 KB, shaped like what a cluster serves."""
    app = f"app{rnd.randrange(60):02d}"
    stack = rnd.choice(["web", "api", "worker", "cron"])
    name = f"{app}-{stack}-{kind.lower()}-{i}"
    rv = str(next(_rv))
    labels = {
        "app": app,
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/managed-by": "spinnaker",
        "team": f"team-{int(app[3:]) % 12}",
        "tier": stack,
    }
    annotations: dict[str, str] = {}
    if rnd.random() < 0.8:
        annotations["moniker.spinnaker.io/application"] = app
        annotations["moniker.spinnaker.io/cluster"] = f"{kind.lower()} {app}-{stack}"
        annotations["artifact.spinnaker.io/name"] = name
        annotations["artifact.spinnaker.io/type"] = f"kubernetes/{kind.lower()}"
        annotations["artifact.spinnaker.io/location"] = ns
    if kind in ("Pod", "ReplicaSet"):
        labels["pod-template-hash"] = f"{rnd.getrandbits(40):010x}"
    meta = {
        "name": name,
        "namespace": ns,
        "uid": str(uuid.UUID(int=rnd.getrandbits(128))),
        "resourceVersion": rv,
        "generation": rnd.randrange(1, 20),
        "creationTimestamp": "2025-03-01T12:00:00Z",
        "labels": labels,
        "annotations": annotations,
    }
    if kind == "Pod":
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{app}-{stack}-rs",
                "uid": str(uuid.UUID(int=rnd.getrandbits(128))),
                "controller": True,
            }
        ]
    container = {
        "name": stack,
        "image": f"registry.example.com/{app}/{stack}:1.{rnd.randrange(99)}.0",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "env": [{"name": f"SETTING_{k}", "value": f"value-{rnd.getrandbits(32):08x}"} for k in range(4)],
    }
    obj: dict = {"apiVersion": f"{group}/{version}" if group else version, "kind": kind, "metadata": meta}
    if kind == "ConfigMap":
        obj["data"] = {}
    elif kind in ("Secret", "ServiceAccount"):
        pass  # metadata only (Secrets travel as PartialObjectMetadata)
    elif kind == "Service":
        obj["spec"] = {
            "selector": {"app": app},
            "ports": [{"port": 80, "targetPort": 8080}],
            "clusterIP": f"10.0.{rnd.randrange(255)}.{rnd.randrange(255)}",
            "type": "ClusterIP",
        }
    elif kind in ("Ingress", "HorizontalPodAutoscaler"):
        obj["spec"] = {
            "rules": [
                {
                    "host": f"{app}.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": app, "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ]
        }
    elif kind == "Pod":
        obj["spec"] = {"containers": [container], "nodeName": f"node-{rnd.randrange(500)}", "restartPolicy": "Always"}
        obj["status"] = {
            "phase": "Running",
            "podIP": f"10.1.{rnd.randrange(255)}.{rnd.randrange(255)}",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2025-03-01T12:00:05Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
        }
    else:
        obj["spec"] = {
            "replicas": rnd.randrange(1, 6),
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app, "tier": stack}}, "spec": {"containers": [container]}},
        }
        obj["status"] = {"replicas": 3, "readyReplicas": 3, "observedGeneration": 3}
    raw = orjson.dumps(obj)
    want = rnd.randrange(1000, 3000)
    if len(raw) < want:  # bulk of a real object: more data, env, or a long annotation
        filler = "x" * (want - len(raw) - 30)
        if kind == "ConfigMap":
            obj["data"]["config.yaml"] = filler
        else:
            annotations["example.com/notes"] = filler
        raw = orjson.dumps(obj)
    return ns, name, rv, raw


def wire(events: list[pb.Event]) -> list:
    """The events as the gRPC server hands them over: a parsed EventBatch's repeated field."""
    return pb.EventBatch.FromString(pb.EventBatch(sequence=1, events=events).SerializeToString()).events


def snapshot_batches(objs: list[tuple[str, str, str, bytes]], group: str, version: str, kind: str) -> Iterator:
    """An all-namespaces snapshot of ``objs`` in EventBatch-sized pieces."""
    events = [pb.Event(type=pb.SNAPSHOT_BEGIN, group=group, version=version, kind=kind)]
    for ns, name, rv, raw in objs:
        events.append(
            pb.Event(
                type=pb.ADDED,
                group=group,
                version=version,
                kind=kind,
                namespace=ns,
                name=name,
                resource_version=rv,
                object=raw,
            )
        )
        if len(events) == BATCH:
            yield wire(events)
            events = []
    events.append(pb.Event(type=pb.SNAPSHOT_END, group=group, version=version, kind=kind))
    yield wire(events)


class GcWatch:
    """Collections of the oldest generation and their pauses, via gc.callbacks."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._start)

    def summary(self) -> str:
        if not self.pauses:
            return "no full collection"
        return (
            f"{len(self.pauses)} full collections, {sum(self.pauses):.1f} s in all,"
            f" longest {max(self.pauses) * 1000:,.0f} ms"
        )


def timed_apply(cache: Cache, account: str, batches: Iterable) -> float:
    """Seconds spent in `apply` alone; batches are built lazily so only one is ever held."""
    seconds = 0.0
    for b in batches:
        start = time.perf_counter()
        cache.apply(account, b)
        seconds += time.perf_counter() - start
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--accounts", type=int, default=100)
    p.add_argument("--kinds", type=int, default=10, choices=range(1, len(KINDS) + 1), metavar="1-10")
    p.add_argument("--objects", type=int, default=1000, help="objects per (account, kind)")
    p.add_argument("--namespaces", type=int, default=20, help="namespaces per account")
    p.add_argument("--resnapshot", type=int, default=100_000, help="objects in the re-snapshot test (0: skip)")
    args = p.parse_args()
    rnd = random.Random(42)
    cache = Cache()
    before, before_trim = settle(False), settle(True)
    total = events = json_bytes = 0
    seconds = 0.0
    watch = GcWatch()
    for a in range(args.accounts):
        account = f"account-{a:03d}"
        for group, version, kind in KINDS[: args.kinds]:
            objs = [make_object(rnd, group, version, kind, f"ns-{i % args.namespaces}", i) for i in range(args.objects)]
            json_bytes += sum(len(o[3]) for o in objs)
            total += len(objs)
            events += len(objs) + 2
            seconds += timed_apply(cache, account, snapshot_batches(objs, group, version, kind))
            del objs
    gc_summary = watch.summary()
    gc.callbacks.remove(watch._callback)
    after = settle(False)
    after_trim = settle(True)
    assert cache.stats()["objects"] == total, cache.stats()
    avg = json_bytes / total
    target = 1.5 * avg + 300
    grow, grow_trim = (after - before) * 1024 / total, (after_trim - before_trim) * 1024 / total
    print(
        f"hub cache, {args.accounts} accounts x {args.kinds} kinds x {args.objects} objects = {total:,} objects"
        f" ({machine()})"
    )
    print(f"  average object JSON     {avg:,.0f} B   (JSON held: {json_bytes / 2**20:,.0f} MiB)")
    print(
        f"  RSS growth              {(after - before) / 1024:,.0f} MiB = {grow:,.0f} B/object"
        f"  ({grow / avg:.2f} x JSON; overhead {grow - avg:,.0f} B/object)"
    )
    print(
        f"  after malloc_trim       {(after_trim - before_trim) / 1024:,.0f} MiB = {grow_trim:,.0f} B/object"
        f"  ({grow_trim / avg:.2f} x JSON; overhead {grow_trim - avg:,.0f} B/object)"
    )
    print(
        f"  target 1.5 x JSON + 300 {target:,.0f} B/object -> RSS growth is {grow / target:.0%} of it"
        f" ({grow_trim / target:.0%} after trim)"
    )
    print(
        f"  ingest                  {events / seconds:,.0f} events/s ({seconds / events * 1e6:.2f} µs/event,"
        f" {seconds:.1f} s in apply)"
    )
    print(f"  garbage collector       during the whole run (object generation included): {gc_summary}")
    start = time.perf_counter()
    gc.collect()
    print(f"  gc.collect() with the cache full: {(time.perf_counter() - start) * 1000:,.0f} ms")
    if args.resnapshot:
        resnapshot(cache, rnd, args.resnapshot, args.namespaces)
    print(f"  peak RSS of the process {rss_kb('VmHWM') / 1024:,.0f} MiB")


def resnapshot(cache: Cache, rnd: random.Random, n: int, namespaces: int) -> None:
    group, version, kind = "", "v1", "Pod"
    objs = [make_object(rnd, group, version, kind, f"ns-{i % namespaces}", i) for i in range(n)]
    took_first = timed_apply(cache, "big", snapshot_batches(objs, group, version, kind))
    gone = set(rnd.sample(range(n), n // 100))
    changed = set(rnd.sample(sorted(set(range(n)) - gone), n // 100))
    again = []
    for i, (ns, name, rv, raw) in enumerate(objs):
        if i in gone:
            continue
        if i in changed:
            rv2 = str(next(_rv))
            raw = raw.replace(f'"resourceVersion":"{rv}"'.encode(), f'"resourceVersion":"{rv2}"'.encode())
            rv = rv2
        again.append((ns, name, rv, raw))
    took = timed_apply(cache, "big", snapshot_batches(again, group, version, kind))
    assert cache.counts("big")["Pod"] == n - len(gone), cache.counts("big")
    print(
        f"  snapshot of {n:,} Pods into the populated cache: first {took_first * 1000:,.0f} ms;"
        f" re-snapshot (98% unchanged, 1% changed, 1% swept) {took * 1000:,.0f} ms"
        f" ({took / (len(again) + 2) * 1e6:.2f} µs/event)"
    )


if __name__ == "__main__":
    main()

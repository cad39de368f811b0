"""Time to take a snapshot of N objects into the hub, beside what decoding them costs and what the
official Kubernetes Python client takes.

kubesim (its own process) is seeded with N ConfigMaps (one kind, one namespace, ~0.8 KB each).
Each run then times, one after the other (the order alternates between runs so that machine noise
hits all alike):

  agent + hub     : a fresh `scale-agent hub` (TLS on gRPC) is started and ready; the clock starts
                    as `scale-agent agent` is launched, and stops when the hub's
                    `GET /api/v1/accounts` counts all N objects for the account. This includes the
                    agent's process start, imports and credential loading, discovery, the LIST
                    pages, the gRPC stream and the hub's cache. Its timeline: when the agent's
                    health port is up, when its hub link connected (`/health` hub.connectedSince),
                    and when the hub first counted objects.
  decode-only     : this process LISTs the same objects in pages of the agent's size (500) over
                    aiohttp and `orjson.loads` each page, nothing else: the bound for any Python
                    consumer of this server. All pages on one kept-alive connection, as the agent
                    lists (since 9b8dcd7); also printed with a connection per page, as the agent
                    listed before and as the bound was first measured.
  kubernetes      : what a user might write instead, in a process of its own timed from its
                    launch: the official client's `v1.list_config_map_for_all_namespaces(limit=500,
                    _continue=...)`, page after page (the list half of list+watch, paginated as
                    client-go's informers do), into a dict keyed by uid, until it holds the N
                    objects. `--baseline watch` uses `watch.Watch().stream(...)` from "now" instead
                    (the initial state as ADDED events): that client splits its buffer with a copy
                    per line, quadratic in a chunk's size, and kubesim sends the whole initial
                    state as one chunk, so it did not finish 100,000 objects in 20 minutes.

Figures are medians over the runs; ratios are of throughputs (objects per second).

    .venv/bin/python bench/hub_end_to_end.py --objects 100000 --runs 3
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, median, minor_faults, run, start_seeded_kubesim
from processes import Agent, Hub, get_json, make_pki

PAGE = 500  # the agent's default kubernetes.pageSize
POLL = 0.02  # seconds between reads of /api/v1/accounts


def baseline_child(how: str, kubeconfig: str, n: int, field_selector: str) -> None:
    """`hub_end_to_end.py --baseline list|watch KUBECONFIG N SELECTOR`: the official client, as a user writes it."""
    from kubernetes import client, config, watch

    v1 = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    kw = {"field_selector": field_selector} if field_selector else {}
    objects = {}
    if how == "list":  # the list half of list+watch, paginated as client-go's informers do
        token = None
        while True:
            page = v1.list_config_map_for_all_namespaces(limit=PAGE, _continue=token, **kw)
            for obj in page.items:
                objects[obj.metadata.uid] = obj
            token = page.metadata._continue
            if not token:
                break
    else:  # a watch from "now": the current state arrives as ADDED events first
        w = watch.Watch()
        for event in w.stream(v1.list_config_map_for_all_namespaces, timeout_seconds=3600, **kw):
            obj = event["object"]
            objects[obj.metadata.uid] = obj
            if len(objects) >= n:
                break
        w.stop()
    print(f"done {len(objects)} {time.process_time():.3f}", flush=True)


def kubernetes_client(how: str, kubeconfig: str, n: int, field_selector: str) -> tuple[float, float]:
    """Seconds from launch until the client holds every object, and the CPU seconds it used."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--baseline", how, kubeconfig, str(n), field_selector],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    elapsed = time.monotonic() - start
    proc.wait()
    if not line.startswith("done "):
        raise RuntimeError(f"the kubernetes client baseline failed: {line!r}")
    return elapsed, float(line.split()[2])


async def decode_only(client, n: int, field_selector: str, bulk: bool) -> tuple[float, float]:
    """Seconds to list and decode everything, and of those the seconds spent in orjson.loads.

    `bulk`: each page on a connection of its own that closes afterwards, as the agent's LIST pages
    go (KubeClient's bulk pool); otherwise every page on one kept-alive connection."""
    seen, token, decoding = 0, "", 0.0
    start = time.perf_counter()
    while True:
        params = {
            "limit": str(PAGE),
            **({"continue": token} if token else {}),
            **({"fieldSelector": field_selector} if field_selector else {}),
        }
        async with client.stream("GET", "/api/v1/configmaps", params=params, bulk=bulk) as resp:
            raw = await resp.read()
        t = time.perf_counter()
        page = orjson.loads(raw)
        decoding += time.perf_counter() - t
        seen += len(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            break
    elapsed = time.perf_counter() - start
    if seen != n:
        raise RuntimeError(f"decode-only listed {seen} objects, expected {n}")
    return elapsed, decoding


def agent_and_hub(tmp: Path, pki: dict, kubeconfig: str, n: int, i: int, omit: str, kubesim: int) -> dict[str, float]:
    hub = Hub(tmp, pki, name=f"hub-{i}")
    agent = None
    account = {
        "name": "bench",
        "kubeConfigFile": kubeconfig,
        "kinds": ["ConfigMap"],
        **({"omitNamespaces": [omit]} if omit else {}),
    }
    try:
        cpu0 = {"hub": cpu_seconds(hub.pid), "kubesim": cpu_seconds(kubesim)}
        hub_faults0 = minor_faults(hub.pid)
        start, wall = time.monotonic(), time.time()
        agent = Agent(tmp, hub, pki, [account], name=f"agent-{i}")
        first = None
        deadline = start + 600
        while True:
            accounts = hub.get("/api/v1/accounts")
            now = time.monotonic()
            count = next((a["objects"] for a in accounts if a["name"] == "bench"), 0)
            if count and first is None:
                first = now
            if count >= n:
                break
            if now > deadline or agent.proc.poll() is not None:
                raise RuntimeError(f"the hub counts {count} of {n} objects; agent log: {agent.log[-10:]}")
            time.sleep(POLL)
        done = now - start
        cpu = {
            "agent": cpu_seconds(agent.pid),
            "hub": cpu_seconds(hub.pid) - cpu0["hub"],
            "kubesim": cpu_seconds(kubesim) - cpu0["kubesim"],
        }
        faults = {"agent": minor_faults(agent.pid), "hub": minor_faults(hub.pid) - hub_faults0}
        health_url, health_at = agent.wait_line_at(r"health on (http://\S+/health)")
        link = get_json(health_url.group(1))["hub"]
        events = next(a["events"] for a in get_json(f"{hub.url}/armory/agents"))
        return {
            "total": done,
            "started": health_at - start,
            "connected": link["connectedSince"] - wall,
            "first": first - start,
            "events": events,
            **{f"cpu {k}": v for k, v in cpu.items()},
            **{f"faults {k}": v for k, v in faults.items()},
        }
    finally:
        if agent is not None:
            agent.stop()
        hub.stop()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument(
        "--omit-namespace",
        default="",
        metavar="NS",
        help="every consumer leaves out this namespace (the agent with omitNamespaces, the others with "
        "the same fieldSelector); kubesim then skips counting remainingItemCount on each page",
    )
    p.add_argument(
        "--baseline",
        choices=["list", "watch", "none"],
        default="list",
        help="the official client's way in: paginated list (default), or watch.stream() from now, "
        "which is quadratic in the size of a chunk and does not finish at 100,000 objects on kubesim",
    )
    args = p.parse_args()

    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials

    selector = f"metadata.namespace!={args.omit_namespace}" if args.omit_namespace else ""

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t = time.monotonic()
        kubesim, info = start_seeded_kubesim(tmp / "kc", "--kinds", "1", "--objects", str(args.objects))
        seeded = time.monotonic() - t
        kubeconfig = info["kubeconfigs"][0]
        pki = make_pki(tmp / "pki")
        try:
            client = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)))
            # What the server holds, counted rather than assumed: every consumer must see exactly this many.
            first = await client.get("/api/v1/configmaps", params={"limit": "1"})
            n = len(first["items"]) + int(first["metadata"].get("remainingItemCount") or 0)
            print(f"kubesim seeded {args.objects:,} ConfigMaps in {seeded:.0f}s; it serves {n:,}", flush=True)
            e2e: list[dict[str, float]] = []
            decode: list[tuple[float, float]] = []
            pooled: list[tuple[float, float]] = []
            kube: list[tuple[float, float]] = []
            for i in range(args.runs):
                steps = [
                    lambda: e2e.append(agent_and_hub(tmp, pki, kubeconfig, n, i, args.omit_namespace, kubesim.pid)),  # noqa: B023
                    None,
                ]
                if args.baseline != "none":
                    steps.append(lambda: kube.append(kubernetes_client(args.baseline, kubeconfig, n, selector)))
                if i % 2:
                    steps.reverse()
                for step in steps:
                    if step is None:
                        decode.append(await decode_only(client, n, selector, bulk=True))
                        pooled.append(await decode_only(client, n, selector, bulk=False))
                    else:
                        step()
                print(
                    f"  run {i + 1}: agent + hub {e2e[-1]['total']:.2f}s, decode-only {decode[-1][0]:.2f}s "
                    f"(pooled {pooled[-1][0]:.2f}s)" + (f", kubernetes client {kube[-1][0]:.2f}s" if kube else ""),
                    flush=True,
                )
            await client.close()
        finally:
            kubesim.terminate()
            kubesim.wait()

    def line(name: str, xs: list[float], note: str) -> float:
        m = median(xs)
        runs = ", ".join(f"{x:.2f}" for x in xs)
        print(f"  {name:18s} {m:6.2f} s  {n / m:>8,.0f} objects/s   (runs: {runs} s)  {note}")
        return m

    print(
        f"hub end-to-end: {n:,} ConfigMaps in one account, median of {args.runs} runs ({machine()})"
        + (f", every consumer with fieldSelector {selector}" if selector else "")
    )
    total = line("agent + hub", [r["total"] for r in e2e], "agent launch -> all objects counted by the hub")
    parts = {k: median([r[k] for r in e2e]) for k in ("started", "connected", "first")}
    from_link = line("  from link up", [r["total"] - r["connected"] for r in e2e], "hub link connected -> all counted")
    print(
        f"  {'':18s} timeline: agent health port up {parts['started']:.2f} s, hub link connected "
        f"{parts['connected']:.2f} s, first objects counted {parts['first']:.2f} s; "
        f"events received by the hub {int(median([r['events'] for r in e2e])):,}"
    )
    print(
        f"  {'':18s} CPU seconds: "
        + ", ".join(f"{k[4:]} {median([r[k] for r in e2e]):.2f}" for k in ("cpu agent", "cpu hub", "cpu kubesim"))
        + "; page faults: agent (since its start) "
        + f"{int(median([r['faults agent'] for r in e2e])):,}, hub {int(median([r['faults hub'] for r in e2e])):,}"
    )
    bound = line("decode-only", [t for t, _ in pooled], f"LIST pages of {PAGE} + orjson.loads, on one connection")
    print(
        f"  {'':18s} of which orjson.loads {median([x for _, x in pooled]):.2f} s; "
        "the rest is kubesim serving the pages"
    )
    per_page = line(
        "  page by page", [t for t, _ in decode], "the same, a connection per page (the bound until 9b8dcd7)"
    )
    print(f"  agent + hub / decode-only = {bound / total:.0%}   (from link up: {bound / from_link:.0%})")
    print(
        f"  agent + hub / decode-only page by page = {per_page / total:.0%}"
        f"   (from link up: {per_page / from_link:.0%})"
    )
    if kube:
        how = {"list": f"list(limit={PAGE}) pages", "watch": "watch.stream()"}[args.baseline]
        base = line("kubernetes client", [t for t, _ in kube], f"launch -> {how} put all objects in a dict")
        print(f"  {'':18s} CPU seconds: {median([c for _, c in kube]):.2f}")
        print(f"  agent + hub / kubernetes client = {base / total:.1f}x")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--baseline":
        baseline_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        run(main)

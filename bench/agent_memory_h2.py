"""Memory floor per watch, HTTP/1.1 (aiohttp, one TLS connection per watch) vs HTTP/2 (one
connection per client, scaleagent.kube.http2), and events/s of one watch both ways, through
KubeClient as the agent uses it (`http2=False` forces HTTP/1.1).

Against a real apiserver (the kubeconfig in SCALE_AGENT_E2E_KUBECONFIG or --kubeconfig; start one
with `scripts/real-cluster start --dir /tmp/rc-http2`). Each measurement runs in a fresh child
process (uvloop, as the agent): C clients (one per "account") each hold W watches (different
kinds, all namespaces); RSS is read once every watch has its response headers and has settled.
Modes are interleaved and repeated; medians are printed.

    .venv/bin/python bench/agent_memory_h2.py --clients 100 --watches 10 --repeat 3
    .venv/bin/python bench/agent_memory_h2.py --throughput 5000   # seeds 5000 ConfigMaps first

The throughput figure is one watch replaying the namespace's ConfigMaps (resourceVersion 0) as
ADDED events, read and split into lines; it also prints the client's CPU per event, steadier
than events/s on a shared machine where the API server competes for the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, median

ROOT = Path(__file__).resolve().parent.parent
KINDS = [
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/services",
    "/api/v1/pods",
    "/api/v1/serviceaccounts",
    "/api/v1/endpoints",
    "/api/v1/events",
    "/api/v1/limitranges",
    "/api/v1/resourcequotas",
    "/api/v1/persistentvolumeclaims",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/replicasets",
]
THROUGHPUT_NS = "h2-bench"


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _child(mode: str, kubeconfig: str, clients: int, watches: int) -> dict:
    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials

    base = rss_kb()
    ready = 0
    stop = asyncio.Event()
    all_ready = asyncio.Event()
    total = clients * watches

    async def follow(resp) -> None:
        nonlocal ready
        ready += 1
        if ready == total:
            all_ready.set()
        async for _ in resp.content.iter_any():
            pass

    async def watch(kc: KubeClient, path: str) -> None:
        async with kc.stream("GET", path, params={"watch": "1", "timeoutSeconds": "3600"}, read_timeout=600) as r:
            await follow(r)

    kcs, tasks = [], []
    for _ in range(clients):
        kc = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)), http2=mode == "h2")
        kcs.append(kc)
        for w in range(watches):
            tasks.append(asyncio.ensure_future(watch(kc, KINDS[w % len(KINDS)])))
    after_clients = rss_kb()
    await asyncio.wait_for(all_ready.wait(), 300)
    await asyncio.sleep(3)
    held = rss_kb()
    connections = sum(kc.connections for kc in kcs) if mode == "h2" else total
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for kc in kcs:
        await kc.close()
    return {"base": base, "clients": after_clients, "held": held, "connections": connections}


async def _throughput(mode: str, kubeconfig: str) -> dict:
    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials

    kc = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)), http2=mode == "h2")
    await kc.get("/version")  # the connection is made before the clock starts
    path = f"/api/v1/namespaces/{THROUGHPUT_NS}/configmaps"
    params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": "60"}
    events = 0
    started = time.perf_counter()
    cpu = time.process_time()
    async with kc.stream("GET", path, params=params) as resp:
        pending = b""
        chunks = resp.content.iter_any().__aiter__()
        while True:
            try:
                chunk = await asyncio.wait_for(chunks.__anext__(), 1.0)
            except (TimeoutError, StopAsyncIteration):
                break  # the replay is over: the server went quiet
            pending += chunk
            if b"\n" not in chunk:
                continue
            *lines, pending = pending.split(b"\n")
            events += len(lines)
            last, last_cpu = time.perf_counter(), time.process_time()
    assert kc.protocol == ("HTTP/2" if mode == "h2" else "HTTP/1.1"), kc.protocol
    await kc.close()
    return {"events": events, "seconds": last - started, "cpu": last_cpu - cpu}


def child_main() -> None:
    mode, kubeconfig, what = sys.argv[2], sys.argv[3], sys.argv[4]
    import uvloop

    if what == "memory":
        out = uvloop.run(_child(mode, kubeconfig, int(sys.argv[5]), int(sys.argv[6])))
    elif what == "import":
        import scaleagent.agent.command  # noqa: F401

        out = {"held": rss_kb()}
    elif what == "bare":
        out = {"held": rss_kb()}
    else:
        out = uvloop.run(_throughput(mode, kubeconfig))
    print(json.dumps(out))


def child(*args: str) -> dict:
    cmd = [sys.executable, __file__, "--child", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


async def seed(kubeconfig: str, n: int) -> None:
    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials
    from scaleagent.kube.errors import APIError

    kc = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)))
    try:
        try:
            await kc.request("POST", "/api/v1/namespaces", body={"metadata": {"name": THROUGHPUT_NS}})
        except APIError:
            pass
        have = len((await kc.get(f"/api/v1/namespaces/{THROUGHPUT_NS}/configmaps"))["items"])
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                body = {"metadata": {"name": f"cm-{i:06d}", "labels": {"app": "bench"}}, "data": {"k": "v" * 800}}
                try:
                    await kc.request("POST", f"/api/v1/namespaces/{THROUGHPUT_NS}/configmaps", body=body)
                except APIError:
                    pass

        await asyncio.gather(*(one(i) for i in range(have, n)))
    finally:
        await kc.close()


def _apiserver_pid() -> int | None:
    """scripts/real-cluster's API server, when the variables of `scripts/real-cluster env` are set."""
    directory = os.environ.get("SCALE_AGENT_E2E_REAL_CLUSTER_DIR")
    try:
        return int((Path(directory) / "apiserver.pid").read_text()) if directory else None
    except (OSError, ValueError):
        return None


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (its whole run: the child's process start included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", default=os.environ.get("SCALE_AGENT_E2E_KUBECONFIG"))
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--watches", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--throughput", type=int, default=0, help="seed this many ConfigMaps and time one watch")
    a = ap.parse_args()
    if not a.kubeconfig:
        sys.exit("no kubeconfig: --kubeconfig or SCALE_AGENT_E2E_KUBECONFIG")
    print(machine())
    if a.throughput:
        asyncio.run(seed(a.kubeconfig, a.throughput))
        rates: dict[str, list[float]] = {"h1": [], "h2": []}
        cpus: dict[str, list[float]] = {"h1": [], "h2": []}
        server_cpus: dict[str, list[float]] = {"h1": [], "h2": []}
        server = _apiserver_pid()
        for _ in range(a.repeat):
            for mode in ("h1", "h2"):
                before = _cpu_seconds(server) if server else 0.0
                r = child(mode, a.kubeconfig, "throughput")
                if server:
                    server_cpus[mode].append((_cpu_seconds(server) - before) / r["events"] * 1e6)
                rates[mode].append(r["events"] / r["seconds"])
                cpus[mode].append(r["cpu"] / r["events"] * 1e6)
        for mode in ("h1", "h2"):
            on_server = f", API server CPU {median(server_cpus[mode]):.1f} us" if server else ""
            print(
                f"{mode}: one watch replaying {a.throughput} events: {median(rates[mode]):,.0f} events/s, "
                f"client CPU {median(cpus[mode]):.1f} us per event{on_server} (medians of {a.repeat})"
            )
        print(f"h2/h1 ratio: {median(rates['h2']) / median(rates['h1']):.2f} (events/s)")
        return
    total = a.clients * a.watches
    bare = median([child("-", a.kubeconfig, "bare")["held"] for _ in range(a.repeat)])
    imported = median([child("-", a.kubeconfig, "import")["held"] for _ in range(a.repeat)])
    print(f"python + uvloop: {bare / 1024:.1f} MB; after `import scaleagent.agent.command`: {imported / 1024:.1f} MB")
    res: dict[str, list[dict]] = {"h1": [], "h2": []}
    for _ in range(a.repeat):
        for mode in ("h1", "h2"):
            res[mode].append(child(mode, a.kubeconfig, "memory", str(a.clients), str(a.watches)))
    for mode in ("h1", "h2"):
        held = median([r["held"] for r in res[mode]])
        clients = median([r["base"] for r in res[mode]])
        per = (held - clients) / total
        conns = res[mode][-1]["connections"]
        print(
            f"{mode}: {total} watches ({a.clients} clients x {a.watches}) on {conns} connections: "
            f"RSS {held / 1024:.1f} MB (process before any client: {clients / 1024:.1f} MB); "
            f"{per:.1f} KB per watch (all included: clients, connections, tasks)"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main()
    else:
        main()

"""Change-to-cache latency: from a write's acknowledgement by the API server to the change in the hub.

kubesim (its own process) is seeded with N ConfigMaps; a hub (TLS on gRPC) and an agent following
ConfigMaps run as `scale-agent hub` / `scale-agent agent` processes. Once the hub holds every
object, a writer (this process) PATCHes the ConfigMaps round-robin at a steady rate, each write
its own concurrent request, and records for each one when its response arrived and the
resourceVersion it returned. A reader, in a process of its own (so that the writer's event loop
never delays its clock; time.monotonic is system-wide), follows the hub's SSE stream
`/api/v1/watch` and records when each resourceVersion appears. Latency = appearance - ack.

Beside it, a second reader watches kubesim directly (a plain Kubernetes watch, same kind of
process): the latency of that path is what any watcher of the cluster pays, so the difference
between the two is what the agent, the gRPC link, the hub's cache and its SSE add.

The first --warmup seconds of writes open connections and are not counted. The run ends when the
readers have seen the highest resourceVersion written (the path keeps order), or after a timeout;
a write whose version never appeared is counted as missing.

    .venv/bin/python bench/hub_latency.py --rate 1000 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_seconds, machine, machine_busy, percentiles, run, start_seeded_kubesim
from processes import Agent, Hub, make_pki

NAMESPACE = "bench"  # where seeded_kubesim puts its objects


# ---- the readers: `hub_latency.py --read sse URL` or `--read kube KUBECONFIG` -------------------------


def reader(kind: str, target: str) -> None:
    """Follow one stream with a blocking socket in a thread; answer the parent on stdin/stdout.

    Protocol: prints `ready` once the stream is open. `wait RV TIMEOUT` answers `seen` or
    `timeout`; `dump` prints {resourceVersion: monotonic time of arrival} as JSON and exits.
    """
    import http.client
    from urllib.parse import urlsplit

    if kind == "sse":
        u = urlsplit(target)
        conn: http.client.HTTPConnection = http.client.HTTPConnection(u.hostname, u.port)
        path, headers, sep = f"{u.path}?{u.query}", {"Accept": "text/event-stream"}, b"\n\n"
    else:
        from scaleagent.kube.credentials import load_credentials

        async def creds():
            c = await load_credentials(kubeconfig=Path(target))
            return c, await c.authorization()

        c, auth = asyncio.run(creds())
        u = urlsplit(c.server)
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=c.ssl_context)
        path, sep = f"/api/v1/namespaces/{NAMESPACE}/configmaps?watch=1&timeoutSeconds=3600", b"\n"
        headers = {"Authorization": auth} if auth else {}
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"{kind} stream answered {resp.status}: {resp.read()[:300]!r}")
    seen: dict[str, float] = {}
    new = threading.Condition()

    def follow() -> None:
        pending = b""
        while chunk := resp.read1(1 << 16):
            t = time.monotonic()
            pending += chunk
            *records, pending = pending.split(sep)
            got = []
            for record in records:
                if kind == "sse":
                    data = next((line[6:] for line in record.split(b"\n") if line.startswith(b"data: ")), None)
                    if data is None:
                        continue  # a heartbeat
                    got.append(orjson.loads(data)["resourceVersion"])
                elif record:
                    got.append(orjson.loads(record)["object"]["metadata"]["resourceVersion"])
            with new:
                for rv in got:
                    seen.setdefault(rv, t)
                new.notify_all()

    threading.Thread(target=follow, daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "wait":
            deadline = time.monotonic() + float(cmd[2])
            with new:
                while cmd[1] not in seen and time.monotonic() < deadline:
                    new.wait(deadline - time.monotonic())
                found = cmd[1] in seen
            print("seen" if found else "timeout", flush=True)
        elif cmd[0] == "dump":
            with new:
                print(json.dumps(seen), flush=True)
            return


class Reader:
    def __init__(self, kind: str, target: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--read", kind, target], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} reader did not start")

    def wait(self, rv: str, timeout: float) -> bool:
        self.proc.stdin.write(f"wait {rv} {timeout}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip() == "seen"

    def dump(self) -> dict[str, float]:
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        seen = json.loads(self.proc.stdout.readline())
        self.proc.wait()
        return seen


# ---- the writer ---------------------------------------------------------------------------------------


async def write(
    client,
    rate: float,
    warmup: float,
    seconds: float,
    objects: int,
    connections: int,
) -> tuple[list[tuple[float, float, str]], int]:
    """PATCH ConfigMaps at `rate`/s: (sent, acknowledged, resourceVersion) of each measured write, and
    how many writes failed. The client's pool is opened first, as a long-running writer's would be."""
    from scaleagent.kube.errors import KubeError

    await asyncio.gather(
        *(client.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/configmap-00000") for _ in range(connections))
    )
    measured: list[tuple[float, float, str]] = []
    failed = 0
    first_measured = int(rate * warmup)
    total = first_measured + int(rate * seconds)

    async def one(i: int) -> None:
        nonlocal failed
        sent = time.monotonic()
        try:
            path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/configmap-{i % objects:05d}"
            obj = await client.request(
                "PATCH", path, body={"data": {"seq": str(i)}}, content_type="application/merge-patch+json"
            )
        except KubeError:
            failed += 1
            return
        acked = time.monotonic()
        if i >= first_measured:
            measured.append((sent, acked, obj["metadata"]["resourceVersion"]))

    tasks = []
    start = time.monotonic()
    for i in range(total):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return measured, failed


def wait_until(predicate, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise TimeoutError(f"no {what} within {timeout}s")


def summary(xs: list[float]) -> str:
    p50, p90, p99, top = percentiles(xs, 50, 90, 99, 100)
    return f"p50 {p50:6.1f}   p90 {p90:6.1f}   p99 {p99:6.1f}   max {top:7.1f} ms"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=1000.0, help="changes per second")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds of writes")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of writes before measuring")
    p.add_argument("--objects", type=int, default=1000, help="ConfigMaps in the cluster, written round-robin")
    p.add_argument("--connections", type=int, default=32, help="the writer's connection pool")
    p.add_argument("--no-direct", action="store_true", help="skip the reader that watches kubesim directly")
    args = p.parse_args()

    from scaleagent.kube.client import KubeClient
    from scaleagent.kube.credentials import load_credentials

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        kubesim, info = start_seeded_kubesim(tmp / "kc", "--kinds", "1", "--objects", str(args.objects))
        kubeconfig = info["kubeconfigs"][0]
        pki = make_pki(tmp / "pki")
        hub = agent = None
        readers: dict[str, Reader] = {}
        try:
            hub = Hub(tmp, pki)
            agent = Agent(tmp, hub, pki, [{"name": "bench", "kubeConfigFile": kubeconfig, "kinds": ["ConfigMap"]}])
            wait_until(
                lambda: any(
                    a["name"] == "bench" and a["objects"] == args.objects and a["agentState"] == "watching"
                    for a in hub.get("/api/v1/accounts")
                ),
                120,
                "synced account in the hub",
            )
            readers["hub"] = Reader("sse", hub.url + "/api/v1/watch?account=bench&kind=ConfigMap")
            if not args.no_direct:
                readers["kube"] = Reader("kube", kubeconfig)
            client = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)), limit=args.connections)
            pids = {
                "kubesim": kubesim.pid,
                "agent": agent.pid,
                "hub": hub.pid,
                "writer": None,
                **{f"{k} reader": r.proc.pid for k, r in readers.items()},
            }
            cpu0 = {k: cpu_seconds(pid) if pid else time.process_time() for k, pid in pids.items()}
            busy0, t0 = machine_busy()[0], time.monotonic()
            writes, failed = await write(client, args.rate, args.warmup, args.seconds, args.objects, args.connections)
            wall = time.monotonic() - t0
            busy = (machine_busy()[0] - busy0) / wall
            cpu = {k: ((cpu_seconds(pid) if pid else time.process_time()) - cpu0[k]) / wall for k, pid in pids.items()}
            await client.close()
            last = str(max(int(rv) for _, _, rv in writes))
            complete = {k: r.wait(last, 30) for k, r in readers.items()}
            seen = {k: r.dump() for k, r in readers.items()}
            # The hub's own histogram of the same changes (agent's read -> cache), last minute.
            own = hub.get("/api/v1/stats")["changeToCacheSeconds"]
        finally:
            for r in readers.values():
                if r.proc.poll() is None:
                    r.proc.kill()
            for proc in (agent, hub):
                if proc is not None:
                    proc.stop()
            kubesim.terminate()
            kubesim.wait()

    sent = [s for s, _, _ in writes]
    achieved = len(writes) / (max(sent) - min(sent))
    print(
        f"hub latency: {len(writes):,} ConfigMap changes at {args.rate:,.0f}/s (sent at {achieved:,.0f}/s) over "
        f"{args.objects:,} objects, agent -> hub over TLS ({machine()})"
        + (f"; {failed} writes failed" if failed else "")
    )
    print(f"  {'write round trip':36s} {summary([(a - s) * 1000 for s, a, _ in writes])}")
    labels = {"kube": "ack -> direct kube watch (kubesim)", "hub": "ack -> hub SSE watch (agent + hub)"}
    for k in ("kube", "hub"):
        if k not in seen:
            continue
        lat = [(seen[k][rv] - a) * 1000 for _, a, rv in writes if rv in seen[k]]
        missing = len(writes) - len(lat)
        print(
            f"  {labels[k]:36s} {summary(lat)}   missing {missing}"
            + ("" if complete[k] else "  (the last write never appeared)")
        )
    if "kube" in seen:
        added = [
            (seen["hub"][rv] - seen["kube"][rv]) * 1000
            for _, _, rv in writes
            if rv in seen["hub"] and rv in seen["kube"]
        ]
        print(f"  {'added by agent + hub (same change)':36s} {summary(added)}")
    print(
        f"  {'hub histogram (agent read -> cache)':36s} p50 {_ms(own['p50'])}   p90 {_ms(own['p90'])}"
        f"   p99 {_ms(own['p99'])} ms   ({own['count']:,} changes in its last minute; bucket-interpolated)"
    )
    print(
        "  CPU during the writes (100% = one core): "
        + ", ".join(f"{k} {v:.0%}" for k, v in cpu.items())
        + f"; whole machine {busy:.0%}, of which other processes {max(0.0, busy - sum(cpu.values())):.0%}"
    )


def _ms(seconds: float | None) -> str:
    return "   -" if seconds is None else f"{seconds * 1000:6.1f}"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--read":
        reader(sys.argv[2], sys.argv[3])
    else:
        run(main)

"""The multi-cluster SSE watch under load: delivery latency from a change's apply to a watcher's read.

A server process runs uvicorn (uvloop and httptools when installed) with one route,
``/api/v1/watch``, served by the hub's own SSE generator (``hub.api.objects._sse``; callers'
authorization is not part of this bench: every change is visible, the login check never revokes)
over a real ``Cache``. On the same event loop, as in the hub, a feeder applies ConfigMap changes
(about 500 bytes each) at --rate per second, in the batches each millisecond tick has due, and
records when each resourceVersion was applied. A reader process opens --watchers SSE connections
and records when each resourceVersion arrived on each; latency = read - apply (time.monotonic is
system-wide). The first --warmup seconds are not counted.

--path runs this tree's generator and the baseline's (the revision SCALE_AGENT_BENCH_BASE names,
default git HEAD, read with ``git show``), interleaved, --rounds each;
medians of the rounds' p50/p99 are printed per path.

    .venv/bin/python bench/hub_sse.py --watchers 50 --rate 1000 --seconds 10 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_baseline_module, machine, median, percentiles

ROOT = Path(__file__).resolve().parent.parent
RV = re.compile(rb'"name":"[^"]*","resourceVersion":"(\d+)"')


def head_objects() -> Any:
    """The baseline's hub/api/objects.py (SCALE_AGENT_BENCH_BASE, default git HEAD)."""
    module = load_baseline_module("scaleagent/hub/api/objects.py", "scaleagent.hub.api._base_objects")
    if module is None:
        raise SystemExit("the baseline's hub/api/objects.py cannot be read from git")
    return module


def serve(port: int, path: str, rate: int, seconds: float, out: str) -> None:
    import uvicorn

    from scaleagent.hub.api import objects as tree_objects
    from scaleagent.hub.cache.cache import Cache
    from scaleagent.protocol.v1 import agent_pb2 as pb

    objects = tree_objects if path == "tree" else head_objects()
    cache = Cache()
    app = FastAPI()
    applied: dict[int, float] = {}
    started = asyncio.Event()

    async def always() -> bool:
        return True

    @app.get("/api/v1/watch")
    async def watch(request: Request) -> StreamingResponse:
        sub = cache.subscribe()
        valid = objects._LoginCheck(always, lambda: 0)
        return StreamingResponse(objects._sse(sub, request, lambda _: True, valid), media_type="text/event-stream")

    @app.get("/start")
    async def start(watchers: int) -> dict[str, int]:
        if len(cache._subs) >= watchers:
            started.set()
        return {"watchers": len(cache._subs)}

    padding = "x" * 300

    async def feed() -> None:
        await started.wait()
        gc.freeze()  # as the hub does (service.GC_FREEZE_SECONDS): no full collection of what is held
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        sent = 0
        while sent < rate * seconds:
            due = int((loop.time() - t0) * rate) - sent
            if due > 0:
                batch = []
                for i in range(sent + 1, sent + due + 1):
                    name = f"cm-{i % 500}"
                    obj = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s","namespace":"default",' % (
                        name.encode()
                    )
                    obj += b'"uid":"u-%d","labels":{"app":"a%d","tier":"web","env":"prod"}},"data":{"k":"%s"}}' % (
                        i % 500,
                        i % 7,
                        padding.encode(),
                    )
                    batch.append(
                        SimpleNamespace(
                            type=pb.MODIFIED,
                            group="",
                            version="v1",
                            kind="ConfigMap",
                            namespace="default",
                            name=name,
                            resource_version=str(i),
                            object=obj,
                        )
                    )
                cache.apply("acct", batch)
                now = time.monotonic()
                for i in range(sent + 1, sent + due + 1):
                    applied[i] = now
                sent += due
            await asyncio.sleep(0.001)
        # Let the watchers drain what is queued for them (a slow path lags), then end the streams.
        deadline = loop.time() + 60
        while any(s._queue for s in cache._subs) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        Path(out).write_text(json.dumps(applied))
        cache.close_subscriptions()
        server.should_exit = True

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    try:
        import httptools  # noqa: F401

        config.http = "httptools"
    except ImportError:
        pass
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(feed())
        await server.serve()
        task.cancel()

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())


async def read(port: int, watchers: int, out: str) -> None:
    arrivals: list[list[tuple[int, float]]] = [[] for _ in range(watchers)]

    async def one(i: int, ready: asyncio.Event, opened: list[int]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /api/v1/watch HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        buf = b""
        got = arrivals[i]
        first = True
        while True:
            chunk = await reader.read(1 << 20)
            if not chunk:
                break
            if first:
                first = False
                opened[0] += 1
                if opened[0] == watchers:
                    ready.set()
            now = time.monotonic()
            buf += chunk
            cut = buf.rfind(b"\n\n")
            if cut < 0:
                continue
            got.extend((int(m), now) for m in RV.findall(buf, 0, cut))
            buf = buf[cut + 2 :]
        writer.close()

    ready = asyncio.Event()
    opened = [0]
    tasks = [asyncio.create_task(one(i, ready, opened)) for i in range(watchers)]
    # Headers arrive with the first body chunk (a heartbeat takes 15 s): wait until every stream
    # is subscribed, which /start reports.
    while True:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /start?watchers=%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % watchers)
        body = await r.read()
        w.close()
        n = int(re.search(rb'"watchers":(\d+)', body).group(1))  # type: ignore[union-attr]
        if n >= watchers:
            break
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    Path(out).write_text(json.dumps(arrivals))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(path: str, a: argparse.Namespace) -> tuple[float, float, int, int]:
    port = free_port()
    applied_file, read_file = f"/tmp/sse-applied-{os.getpid()}.json", f"/tmp/sse-read-{os.getpid()}.json"
    me = [sys.executable, __file__]
    server = subprocess.Popen(
        [
            *me,
            "--serve",
            path,
            "--port",
            str(port),
            "--rate",
            str(a.rate),
            "--seconds",
            str(a.seconds),
            "--out",
            applied_file,
        ]
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        subprocess.run([*me, "--read", str(a.watchers), "--port", str(port), "--out", read_file], check=True)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    applied = {int(k): v for k, v in json.loads(Path(applied_file).read_text()).items()}
    arrivals = json.loads(Path(read_file).read_text())
    skip = a.warmup * a.rate
    lat = [(t - applied[rv]) * 1000 for got in arrivals for rv, t in got if rv > skip]
    expected = (len(applied) - skip) * a.watchers
    p50, p99 = percentiles(lat, 50, 99)
    return p50, p99, len(lat), expected


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--watchers", type=int, default=50)
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--path", nargs="+", default=["tree", "head"])
    p.add_argument("--serve")
    p.add_argument("--read", type=int)
    p.add_argument("--port", type=int)
    p.add_argument("--out")
    a = p.parse_args()
    if a.serve:
        serve(a.port, a.serve, a.rate, a.seconds, a.out)
        return
    if a.read:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(read(a.port, a.read, a.out))
        return
    results: dict[str, list[tuple[float, float, int, int]]] = {path: [] for path in a.path}
    for r in range(a.rounds):
        for path in a.path:
            res = one_round(path, a)
            results[path].append(res)
            print(
                f"round {r + 1} {path}: p50 {res[0]:.1f} ms  p99 {res[1]:.1f} ms  delivered {res[2]}/{res[3]}",
                flush=True,
            )
    load = os.getloadavg()[0]
    print(f"{a.watchers} watchers x {a.rate} changes/s, {a.seconds:.0f} s ({machine()}, load average {load:.1f})")
    for path, rs in results.items():
        print(
            f"  {path:5s} p50 {median([x[0] for x in rs]):7.1f} ms  p99 {median([x[1] for x in rs]):7.1f} ms"
            f"  delivered {sum(x[2] for x in rs)}/{sum(x[3] for x in rs)}"
        )


if __name__ == "__main__":
    main()

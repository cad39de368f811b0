"""Events per second the watch engine sustains, beside the bound of merely decoding the stream.

kubesim (its own process) churns a backlog of N changes into its history; each reader then
watches ConfigMaps from the version before the churn, so both replay the same N events over the
same TLS connection kind, as fast as they can take them:

  decode-only : aiohttp stream, split lines, orjson.loads each line (nothing else)
  engine      : the agent's Reflector (decode, metadata extraction, raw-bytes slicing, event
                records, batching to a sink), feeding a counting sink

Runs alternate so that machine noise hits both alike; the figure is the median of the runs.

    .venv/bin/python bench/watch_throughput.py --events 100000 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median, run, start_seeded_kubesim

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.reflector import Reflector

CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)


async def decode_only(client: KubeClient, since: str, events: int) -> float:
    params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "600"}
    seen = 0
    start = time.perf_counter()
    async with client.stream("GET", CONFIGMAPS.path(), params=params) as resp:
        pending = b""
        async for chunk in resp.content.iter_any():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line:
                    orjson.loads(line)
                    seen += 1
            if seen >= events:
                break
    return seen / (time.perf_counter() - start)


async def engine(client: KubeClient, since: str, events: int) -> float:
    seen = 0
    done = asyncio.Event()

    async def sink(batch: list) -> None:
        nonlocal seen
        seen += len(batch)
        if seen >= events:
            done.set()

    reflector = Reflector(client, CONFIGMAPS, sink, account="bench", watch_timeout=(600, 600))
    reflector.resource_version = since  # start where the decode-only reader starts: no list
    reflector.synced.set()
    start = time.perf_counter()
    task = asyncio.create_task(reflector.run())
    await done.wait()
    rate = seen / (time.perf_counter() - start)
    task.cancel()
    return rate


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = start_seeded_kubesim(Path(tmp), "--backlog", str(args.events))
        try:
            client = KubeClient(await load_credentials(kubeconfig=Path(info["kubeconfigs"][0])))
            rates: dict[str, list[float]] = {"decode-only": [], "engine": []}
            for _ in range(args.runs):
                rates["decode-only"].append(await decode_only(client, info["backlogFrom"], args.events))
                rates["engine"].append(await engine(client, info["backlogFrom"], args.events))
            await client.close()
        finally:
            proc.terminate()
            proc.wait()
    bound, ours = median(rates["decode-only"]), median(rates["engine"])
    print(f"watch throughput, {args.events} ConfigMap changes replayed, median of {args.runs} runs ({machine()})")
    for name, xs in rates.items():
        print(f"  {name:12s} {median(xs):>10,.0f} events/s   (runs: {', '.join(f'{x:,.0f}' for x in xs)})")
    print(f"  engine / decode-only = {ours / bound:.0%}")


if __name__ == "__main__":
    run(main)

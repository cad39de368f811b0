"""LIST and WATCH throughput of the agent's Reflector beside other Python Kubernetes clients.

One kubesim process (TLS, its own process) is seeded with N ConfigMaps in one namespace, and
holds a backlog of W ConfigMap changes in its history. Each client, as a user would use it:

  official          kubernetes (sync, in a thread): list_namespaced_config_map(limit=500,
                    _continue=…) into its models; watch.Watch().stream(list_config_map_for_all_namespaces)
  kubernetes_asyncio  the same calls, async
  kr8s              kr8s.asyncio.get("configmaps", namespace=…) / kr8s.asyncio.watch(since=…)
  lightkube         AsyncClient.list(ConfigMap, chunk_size=500) / AsyncClient.watch(resource_version=…)
  reflector         the agent's Reflector: paged LIST (500 a page, one connection) into a counting
                    sink; WATCH from the version before the backlog
  reflector-watchlist  the Reflector's streamed list (watch, sendInitialEvents=true) up to SNAPSHOT_END
  decode-only       the bound: aiohttp on the same client pool, the same pages / stream, orjson.loads only

LIST: objects/s to list all N. WATCH: events/s to replay the W-change backlog. Runs interleave
(each round runs every client once) so machine noise hits all alike; figures are medians.

    .venv/bin/python bench/peer_clients.py --objects 100000 --backlog 100000 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median, run, start_seeded_kubesim

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.events import SNAPSHOT_END
from scaleagent.kube.reflector import Reflector

CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)
NAMESPACE = "bench"  # where seeded_kubesim puts its objects
PAGE = 500


# --- LIST ----------------------------------------------------------------------------------


async def list_decode_only(kc: Path, client: KubeClient) -> int:
    n, token = 0, ""
    async with client.bulk_session() as session:
        while True:
            params = {"limit": str(PAGE), **({"continue": token} if token else {})}
            async with client.stream("GET", CONFIGMAPS.path(NAMESPACE), params=params, session=session) as resp:
                page = orjson.loads(await resp.read())
            n += len(page["items"])
            token = page["metadata"].get("continue") or ""
            if not token:
                return n


async def list_reflector(kc: Path, client: KubeClient) -> int:
    n = 0

    async def sink(batch: list) -> None:
        nonlocal n
        n += len(batch)

    await Reflector(client, CONFIGMAPS, sink, account="bench", namespace=NAMESPACE, page_size=PAGE)._list()
    return n - 2  # the SNAPSHOT_BEGIN and SNAPSHOT_END markers


async def list_reflector_watchlist(kc: Path, client: KubeClient) -> int:
    """The streamed list (watch with sendInitialEvents): time to the snapshot's end."""
    n = 0
    done = asyncio.Event()

    async def sink(batch: list) -> None:
        nonlocal n
        n += len(batch)
        if batch[-1].type == SNAPSHOT_END:
            done.set()

    client.watch_list = None  # opt in (off by default): the server is asked to stream the list
    task = asyncio.create_task(Reflector(client, CONFIGMAPS, sink, account="bench", namespace=NAMESPACE).run())
    await done.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return n - 2


async def list_official(kc: Path, client: KubeClient) -> int:
    import kubernetes

    def go() -> int:
        api_client = kubernetes.config.new_client_from_config(config_file=str(kc))
        v1 = kubernetes.client.CoreV1Api(api_client)
        n, token = 0, None
        while True:
            page = v1.list_namespaced_config_map(NAMESPACE, limit=PAGE, _continue=token)
            n += len(page.items)
            token = page.metadata._continue
            if not token:
                api_client.close()
                return n

    return await asyncio.to_thread(go)


async def list_kubernetes_asyncio(kc: Path, client: KubeClient) -> int:
    from kubernetes_asyncio import client as kclient
    from kubernetes_asyncio import config

    api_client = await config.new_client_from_config(config_file=str(kc))
    async with api_client:
        v1 = kclient.CoreV1Api(api_client)
        n, token = 0, None
        while True:
            page = await v1.list_namespaced_config_map(NAMESPACE, limit=PAGE, _continue=token)
            n += len(page.items)
            token = page.metadata._continue
            if not token:
                return n


async def list_kr8s(kc: Path, client: KubeClient) -> int:
    import kr8s.asyncio

    api = await kr8s.asyncio.api(kubeconfig=str(kc))
    n = 0
    async for _ in kr8s.asyncio.get("configmaps", namespace=NAMESPACE, api=api):
        n += 1
    return n


async def list_lightkube(kc: Path, client: KubeClient) -> int:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import ConfigMap

    lk = AsyncClient(config=KubeConfig.from_file(str(kc)))
    n = 0
    async for _ in lk.list(ConfigMap, namespace=NAMESPACE, chunk_size=PAGE):
        n += 1
    await lk.close()
    return n


# --- WATCH ---------------------------------------------------------------------------------


async def watch_decode_only(kc: Path, client: KubeClient, since: str, events: int) -> int:
    params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "600"}
    seen = 0
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
                return seen
    return seen


async def watch_reflector(kc: Path, client: KubeClient, since: str, events: int) -> int:
    seen = 0
    done = asyncio.Event()

    async def sink(batch: list) -> None:
        nonlocal seen
        seen += len(batch)
        if seen >= events:
            done.set()

    r = Reflector(client, CONFIGMAPS, sink, account="bench", watch_timeout=(600, 600))
    r.resource_version = since
    r.synced.set()
    task = asyncio.create_task(r.run())
    await done.wait()
    task.cancel()
    return seen


async def watch_official(kc: Path, client: KubeClient, since: str, events: int) -> int:
    import kubernetes

    def go() -> int:
        api_client = kubernetes.config.new_client_from_config(config_file=str(kc))
        v1 = kubernetes.client.CoreV1Api(api_client)
        w = kubernetes.watch.Watch()
        seen = 0
        for _ in w.stream(v1.list_config_map_for_all_namespaces, resource_version=since, timeout_seconds=600):
            seen += 1
            if seen >= events:
                w.stop()
                break
        api_client.close()
        return seen

    return await asyncio.to_thread(go)


async def watch_kubernetes_asyncio(kc: Path, client: KubeClient, since: str, events: int) -> int:
    from kubernetes_asyncio import client as kclient
    from kubernetes_asyncio import config, watch

    api_client = await config.new_client_from_config(config_file=str(kc))
    async with api_client:
        v1 = kclient.CoreV1Api(api_client)
        seen = 0
        async with watch.Watch() as w:
            async for _ in w.stream(v1.list_config_map_for_all_namespaces, resource_version=since, timeout_seconds=600):
                seen += 1
                if seen >= events:
                    break
    return seen


async def watch_kr8s(kc: Path, client: KubeClient, since: str, events: int) -> int:
    import kr8s.asyncio

    api = await kr8s.asyncio.api(kubeconfig=str(kc))
    seen = 0
    async for _ in kr8s.asyncio.watch("configmaps", namespace=kr8s.ALL, since=since, api=api):
        seen += 1
        if seen >= events:
            break
    return seen


async def watch_lightkube(kc: Path, client: KubeClient, since: str, events: int) -> int:
    from lightkube import ALL_NS, AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import ConfigMap

    lk = AsyncClient(config=KubeConfig.from_file(str(kc)))
    seen = 0
    async for _ in lk.watch(ConfigMap, namespace=ALL_NS, resource_version=since, server_timeout=600):
        seen += 1
        if seen >= events:
            break
    await lk.close()
    return seen


LISTS: dict[str, Callable[[Path, KubeClient], Awaitable[int]]] = {
    "decode-only": list_decode_only,
    "reflector": list_reflector,
    "reflector-watchlist": list_reflector_watchlist,
    "official": list_official,
    "kubernetes_asyncio": list_kubernetes_asyncio,
    "kr8s": list_kr8s,
    "lightkube": list_lightkube,
}
WATCHES: dict[str, Callable[[Path, KubeClient, str, int], Awaitable[int]]] = {
    "decode-only": watch_decode_only,
    "reflector": watch_reflector,
    "official": watch_official,
    "kubernetes_asyncio": watch_kubernetes_asyncio,
    "kr8s": watch_kr8s,
    "lightkube": watch_lightkube,
}


def report(title: str, unit: str, rates: dict[str, list[float]]) -> None:
    print(title)
    bound = median(rates["decode-only"])
    ours = median(rates["reflector"])
    for name, xs in rates.items():
        m = median(xs)
        print(
            f"  {name:19s} {m:>10,.0f} {unit}  {m / bound:5.0%} of bound  reflector x{ours / m:4.1f}"
            f"   (runs: {', '.join(f'{x:,.0f}' for x in xs)})"
        )


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", type=int, default=20_000)
    p.add_argument("--backlog", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", default="", help="comma-separated client names (decode-only and reflector always run)")
    args = p.parse_args()
    wanted = (
        {"decode-only", "reflector", "reflector-watchlist", *filter(None, args.only.split(","))}
        if args.only
        else set(LISTS)
    )
    with tempfile.TemporaryDirectory() as tmp:
        proc, info = start_seeded_kubesim(
            Path(tmp), "--kinds", "1", "--objects", str(args.objects), "--backlog", str(args.backlog)
        )
        try:
            kc = Path(info["kubeconfigs"][0])
            client = KubeClient(await load_credentials(kubeconfig=kc))
            lists: dict[str, list[float]] = {k: [] for k in LISTS if k in wanted}
            watches: dict[str, list[float]] = {k: [] for k in WATCHES if k in wanted}
            for _ in range(args.runs):
                for name in lists:
                    start = time.perf_counter()
                    n = await LISTS[name](kc, client)
                    lists[name].append(n / (time.perf_counter() - start))
                    if n != args.objects:
                        print(f"  ! {name} listed {n} objects, not {args.objects}")
                for name in watches:
                    start = time.perf_counter()
                    n = await WATCHES[name](kc, client, info["backlogFrom"], args.backlog)
                    watches[name].append(n / (time.perf_counter() - start))
            await client.close()
        finally:
            proc.terminate()
            proc.wait()
    print(f"peer clients, one kubesim over TLS, median of {args.runs} interleaved runs ({machine()})")
    report(f"LIST {args.objects:,} ConfigMaps, pages of {PAGE}", "objects/s", lists)
    report(f"WATCH replay of {args.backlog:,} ConfigMap changes", "events/s ", watches)


if __name__ == "__main__":
    run(main)

"""The reflector's streamed list against the real control plane (1.20, which refuses a watch with
resourceVersionMatch): it falls back to paged LISTs once, and the snapshot is the server's."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.events import ADDED, SNAPSHOT_END
from scaleagent.kube.reflector import Reflector

pytestmark = pytest.mark.e2e

NAMESPACES = KindInfo("", "v1", "Namespace", "namespaces", False)


async def test_a_server_without_streamed_lists_is_listed_in_pages():
    kubeconfig = os.environ.get("SCALE_AGENT_E2E_KUBECONFIG")
    if not kubeconfig:
        pytest.skip("SCALE_AGENT_E2E_KUBECONFIG is not set: no real cluster (scripts/test starts one)")
    client = KubeClient(await load_credentials(kubeconfig=Path(kubeconfig)), watch_list=None)
    events: list = []
    ended = asyncio.Event()

    async def handler(batch: list) -> None:
        events.extend(batch)
        if any(e.type == SNAPSHOT_END for e in batch):
            ended.set()

    r = Reflector(client, NAMESPACES, handler, account="real", page_size=2)
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(ended.wait(), 30)
        await asyncio.wait_for(r.synced.wait(), 30)
        listed = await client.get(NAMESPACES.path())
        names = {o["metadata"]["name"] for o in listed["items"]}
        assert client.watch_list is False
        assert {e.name for e in events if e.type == ADDED} == names
        assert r.resource_version == next(e.resource_version for e in events if e.type == SNAPSHOT_END)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

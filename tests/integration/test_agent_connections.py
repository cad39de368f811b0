"""How many TLS connections an agent's watches hold, which its allocator setting follows."""

from __future__ import annotations

import asyncio
import base64

from scaleagent.agent.accounts import WATCHING, AccountManager, EngineSettings
from scaleagent.agent.budget import Budget
from scaleagent.agent.config import dynamic_account
from scaleagent.agent.sinks import CountingSink


async def test_each_watch_is_a_connection_over_http11_all_share_one_over_http2(target):
    kubeconfig = base64.b64encode(target.kubeconfig.read_bytes()).decode()
    manager = AccountManager(EngineSettings(discovery_interval=60), CountingSink(), Budget(4, 4))
    try:
        runner = manager.add(
            dynamic_account(
                "c1", kubeconfig, "", {"kinds": ["ConfigMap", "Secret"], "namespaces": ["default", "kube-system"]}
            )
        )
        for _ in range(600):
            if runner.state == WATCHING:
                break
            await asyncio.sleep(0.05)
        assert runner.state == WATCHING, runner.reason
        assert runner._client is not None
        # kubesim speaks no HTTP/2; a real API server does
        assert runner._client.protocol == ("HTTP/1.1" if target.is_kubesim else "HTTP/2")
        assert manager.connections() == (4 if target.is_kubesim else 1)  # two kinds in two namespaces
        await runner.stop()
        assert manager.connections() == 0
    finally:
        await manager.stop()

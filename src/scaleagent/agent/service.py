"""The agent process: its accounts, its sink and its health port, started and stopped together."""

from __future__ import annotations

import logging

from aiohttp import web

from .accounts import AccountManager, EngineSettings
from .budget import Budget
from .config import AgentConfig
from .health import health_app
from .memory import Releaser
from .sinks import Sink

log = logging.getLogger("scaleagent.agent")


class Agent:
    def __init__(self, config: AgentConfig, sink: Sink) -> None:
        self.config = config
        k = config.kubernetes
        self.releaser = Releaser()
        self.budget = Budget(config.tasks.total_budget, config.tasks.budget_per_account,
                             on_idle=self.releaser.burst_ended)
        self.settings = EngineSettings(page_size=k.page_size, discovery_interval=k.discovery_interval_seconds)
        self.accounts = AccountManager(self.settings, sink, self.budget)
        self._runner: web.AppRunner | None = None
        self.health_url = ""

    async def start(self) -> None:
        self._runner = web.AppRunner(health_app(self.accounts, self.budget), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.server.host, self.config.server.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.health_url = f"http://{host}:{port}"
        self.releaser.start()
        for account in self.config.kubernetes.accounts:
            self.accounts.add(account)
        log.info("agent started: %d account(s), health on %s/health", len(self.config.kubernetes.accounts),
                 self.health_url)

    async def stop(self) -> None:
        self.releaser.cancel()
        await self.accounts.stop()
        if self._runner is not None:
            await self._runner.cleanup()

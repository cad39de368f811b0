"""The agent process: its accounts, its sink and its health port, started and stopped together."""

from __future__ import annotations

import logging
from pathlib import Path

from aiohttp import web

from .accounts import AccountManager, EngineSettings
from .budget import Budget
from .config import AgentConfig
from .executor import OperationExecutor
from .health import health_app
from .link import HubLink, LinkSettings, default_agent_id
from .memory import Releaser
from .reload import AgentReloader
from .sinks import Sink

log = logging.getLogger("scaleagent.agent")


class Agent:
    def __init__(self, config: AgentConfig, sink: Sink, config_path: Path | None = None) -> None:
        """`config_path`: the file `config` was read from, applied again when it changes."""
        self.config = config
        k = config.kubernetes
        self.releaser = Releaser()
        self.budget = Budget(
            config.tasks.total_budget, config.tasks.budget_per_account, on_idle=self.releaser.burst_ended
        )
        self.settings = EngineSettings(
            page_size=k.page_size,
            discovery_interval=k.discovery_interval_seconds,
            watch_idle_timeout=k.watch_idle_timeout_seconds,
        )
        self.sink = sink
        self.accounts = AccountManager(
            self.settings, sink, self.budget, dynamic_enabled=config.dynamic_accounts_enabled
        )
        self.executor = OperationExecutor(self.accounts, config.operations.max_concurrent)
        self.reloader = AgentReloader(config_path, config, self.accounts, sink, None) if config_path else None
        self._runner: web.AppRunner | None = None
        self.health_url = ""

    async def start(self) -> None:
        link = self.sink if isinstance(self.sink, HubLink) else None
        self._runner = web.AppRunner(
            health_app(self.accounts, self.budget, link, self.executor, self.reloader), access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.server.host, self.config.server.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.health_url = f"http://{host}:{port}"
        self.releaser.start()
        if isinstance(self.sink, HubLink):
            self.sink.start(self.accounts, self.executor)
        for account in self.config.kubernetes.accounts:
            self.accounts.add(account)
        if self.reloader is not None:
            self.reloader.start()
        log.info(
            "agent started: %d account(s), health on %s/health", len(self.config.kubernetes.accounts), self.health_url
        )

    async def stop(self) -> None:
        if self.reloader is not None:
            await self.reloader.stop()  # first: no account starts while the others stop
        self.releaser.cancel()
        if isinstance(self.sink, HubLink):
            await self.sink.stop()  # first: a resync arriving now must not restart stopped accounts
        await self.executor.stop()  # operations that outlived their stream (remembered for a repeat)
        await self.accounts.stop()
        if self._runner is not None:
            await self._runner.cleanup()


def link_settings(config: AgentConfig) -> LinkSettings:
    """The hub connection as the `clouddriver` section describes it."""
    c = config.clouddriver
    return LinkSettings(
        target=c.targets[0],
        targets=list(c.targets),
        insecure=c.insecure,
        server_name=c.tls.server_name,
        insecure_skip_verify=c.tls.insecure_skip_verify,
        client_cert_file=c.tls.client_cert_file,
        client_key_file=c.tls.client_key_file,
        cacert_file=c.tls.cacert_file,
        token=c.auth.token.get_secret_value(),
        keep_alive_seconds=c.keep_alive_heartbeat_seconds,
        keep_alive_timeout_seconds=c.keep_alive_time_out_seconds,
        agent_id=config.agent_id or default_agent_id(),
        zone_id=config.zone_id or "",
        dynamic_accounts_enabled=config.dynamic_accounts_enabled,
    )

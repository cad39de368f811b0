"""The agent process: its accounts, its sink and its health port, started and stopped together."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from aiohttp import web

from ..configfile import is_loopback
from ..kube.client import RetryPolicy
from .accounts import AccountManager, EngineSettings
from .budget import Budget
from .config import AccountConfig, AgentConfig, ServerSslConfig
from .executor import OperationExecutor
from .health import REGISTRY, health_app, metrics_app
from .link import HubLink, LinkSettings, default_agent_id, default_zone_id
from .memory import Releaser
from .reload import AgentReloader
from .sinks import Sink
from .token import TokenCommand

log = logging.getLogger("scaleagent.agent")


class StartError(Exception):
    """A listener could not start; the message names the setting (server, server.ssl, prometheus)."""


class Agent:
    def __init__(self, config: AgentConfig, sink: Sink, config_path: Path | None = None) -> None:
        """`config_path`: the file `config` was read from, applied again when it changes."""
        self.config = config
        k = config.kubernetes
        self.releaser = Releaser()
        self.budget = Budget(
            config.tasks.total_budget, config.tasks.budget_per_account, on_idle=self.releaser.burst_ended
        )
        r = k.retries
        self.settings = EngineSettings(
            page_size=k.page_size,
            discovery_interval=k.discovery_interval_seconds,
            watch_idle_timeout=k.watch_idle_timeout_seconds,
            http2=k.http2,
            reconnect_delay=k.reconnect_timeout_ms / 1000 if k.reconnect_timeout_ms is not None else None,
            retry=RetryPolicy(r.max_retries, r.back_off_ms / 1000, r.retry_any_error, r.retryable_errors)
            if r.enabled
            else None,
        )
        self.sink = sink
        self.accounts = AccountManager(
            self.settings, sink, self.budget, dynamic_enabled=config.dynamic_accounts_enabled
        )
        self.executor = OperationExecutor(self.accounts, config.operations.max_concurrent)
        self.reloader = AgentReloader(config_path, config, self.accounts, sink, None) if config_path else None
        self._runner: web.AppRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._starting: asyncio.Task[None] | None = None
        self.health_url = ""
        self.metrics_url = ""
        _warn_about_proxies(config)

    async def start(self) -> None:
        link = self.sink if isinstance(self.sink, HubLink) else None
        app = health_app(self.accounts, self.budget, link, self.executor, self.reloader)
        server = self.config.server
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = _server_tls(server.ssl) if server.ssl.enabled else None
        site = web.TCPSite(self._runner, server.host, server.port, ssl_context=tls)
        try:
            await site.start()
        except OSError as e:
            raise StartError(f"server: cannot listen on {server.host}:{server.port}: {e.strerror or e}") from None
        host, port = self._runner.addresses[0][:2]
        self.health_url = f"{'https' if tls else 'http'}://{_url_host(host)}:{port}"
        _warn_if_unreachable_in_a_pod("server.host", server.host, "the kubelet's probes of /health and /ready")
        prometheus = self.config.prometheus
        if prometheus.enabled:
            self._metrics_runner = web.AppRunner(metrics_app(app[REGISTRY]), access_log=None)
            await self._metrics_runner.setup()
            metrics_host = prometheus.host or server.host
            try:
                await web.TCPSite(self._metrics_runner, metrics_host, prometheus.port).start()
            except OSError as e:
                raise StartError(
                    f"prometheus: cannot listen on {metrics_host}:{prometheus.port}: {e.strerror or e}"
                ) from None
            host, port = self._metrics_runner.addresses[0][:2]
            self.metrics_url = f"http://{_url_host(host)}:{port}"
            _warn_if_unreachable_in_a_pod("prometheus.host", metrics_host, "Prometheus' scrapes")
        self.releaser.start()
        if isinstance(self.sink, HubLink):
            self.sink.start(self.accounts, self.executor)
        accounts = list(self.config.kubernetes.accounts)
        size, delay = self.config.kubernetes.cache_group_size, self.config.kubernetes.cache_group_delay_ms / 1000
        if size > 0 and len(accounts) > size:
            for account in accounts[:size]:
                self.accounts.add(account)
            self._starting = asyncio.create_task(
                self._start_groups(accounts[size:], size, delay), name="account groups"
            )
        else:
            for account in accounts:
                self.accounts.add(account)
        if self.reloader is not None:
            self.reloader.start()
        log.info(
            "agent started: %d account(s), health on %s/health", len(self.config.kubernetes.accounts), self.health_url
        )

    async def _start_groups(self, rest: list[AccountConfig], size: int, delay: float) -> None:
        """kubernetes.cacheGroupSize/cacheGroupDelayMs: the next group of accounts after each delay.
        An account the reloader added meanwhile (the file changed) is not added twice."""
        for i in range(0, len(rest), size):
            await asyncio.sleep(delay)
            # The file may have changed meanwhile: its current accounts decide (the reloader added
            # or removed the changed ones already).
            current = self.reloader.running.kubernetes if self.reloader is not None else self.config.kubernetes
            for account in rest[i : i + size]:
                if account.name not in self.accounts.runners and current.account(account.name) == account:
                    self.accounts.add(account)
            log.info("started accounts %d-%d of the file", size + i + 1, size + min(i + size, len(rest)))

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.wait([self._starting])
        if self.reloader is not None:
            await self.reloader.stop()  # first: no account starts while the others stop
        self.releaser.cancel()
        if isinstance(self.sink, HubLink):
            await self.sink.stop()  # first: a resync arriving now must not restart stopped accounts
        await self.executor.stop()  # operations that outlived their stream (remembered for a repeat)
        await self.accounts.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _server_tls(c: ServerSslConfig) -> ssl.SSLContext:
    """server.ssl: TLS on the health/admin port, with client certificates when clientAuth asks."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert c.cert_file is not None  # the model requires it when enabled
    try:
        ctx.load_cert_chain(c.cert_file, c.key_file, password=c.password or None)
    except (OSError, ssl.SSLError) as e:
        raise StartError(f"server.ssl: cannot load certFile {c.cert_file} / keyFile {c.key_file}: {e}") from None
    if c.ca_cert_file is not None:
        try:
            ctx.load_verify_locations(cafile=c.ca_cert_file)
        except (OSError, ssl.SSLError) as e:
            raise StartError(f"server.ssl: cannot load caCertFile {c.ca_cert_file}: {e}") from None
    ctx.verify_mode = {"none": ssl.CERT_NONE, "want": ssl.CERT_OPTIONAL, "need": ssl.CERT_REQUIRED}[c.client_auth]
    return ctx


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")


def _warn_about_proxies(config: AgentConfig) -> None:
    """The agent never proxies its Kubernetes calls: with a proxy set in the environment, an account
    that does not say noProxy would be proxied by Armory's agent, not by this one. Said once."""
    proxy = next((v for v in _PROXY_VARS if os.environ.get(v)), None)
    if proxy is None:
        return
    k = config.kubernetes
    proxied = [a.name for a in k.accounts if not (k.no_proxy or a.no_proxy)]
    if proxied:
        log.warning(
            "%s is set, but Kubernetes API calls never go through a proxy here: accounts %s are reached "
            "directly (set kubernetes.noProxy: true to say so and silence this)",
            proxy,
            ", ".join(proxied),
        )


def link_settings(config: AgentConfig) -> LinkSettings:
    """The hub connection as the `clouddriver` section describes it."""
    c = config.clouddriver
    command = c.auth.token_command
    b = c.backoff
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
        token_command=TokenCommand(
            command.command,
            command.args,
            command.format,
            float(command.refresh_interval_seconds),
            command.timeout_seconds,
        )
        if command is not None
        else None,
        client_key_password=c.tls.client_key_file_password.get_secret_value(),
        no_proxy=c.no_proxy,
        backoff_base=b.base_delay / 1e9,
        backoff_multiplier=float(b.multiplier),
        backoff_jitter=float(b.jitter),
        backoff_max=b.max_delay / 1e9,
        keep_alive_seconds=c.keep_alive_heartbeat_seconds,
        keep_alive_timeout_seconds=c.keep_alive_time_out_seconds,
        agent_id=config.agent_id or default_agent_id(),
        zone_id=config.zone_id if config.zone_id is not None else default_zone_id(),
        dynamic_accounts_enabled=config.dynamic_accounts_enabled,
    )


def _warn_if_unreachable_in_a_pod(key: str, host: str, who: str) -> None:
    """Loopback is the safe default, and in a pod it keeps out whoever probes from outside: say so
    once, since a pod that never gets ready or a blank dashboard does not say why."""
    from ..kube.credentials import service_account_namespace

    if service_account_namespace() is None or not is_loopback(host):
        return
    log.warning(
        "%s is %s: in this pod, %s cannot reach it; set %s: 0.0.0.0 to serve the pod's network",
        key,
        host,
        who,
        key,
    )

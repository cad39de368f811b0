"""`/metrics` in Prometheus' format, `/api/v1/stats` in JSON, and the HTTP latency they report.

The collector reads the hub's parts when scraped, so a scrape costs nothing between scrapes; the
accounts' lifecycle states come from the database (a scrape counts them with one query, so a
FAILED dynamic account shows in the metrics whichever replica holds it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..metrics import HubMetrics
from ..states import AccountState
from ..store import StoreError
from .deps import ApiDeps
from .security import principal_of, readable

__all__ = ["Stats", "add_metrics"]


class LatencySummary(BaseModel):
    count: int = Field(description="Observations in the last minute")
    p50: float | None = Field(description="Median, seconds (null: none in the last minute)")
    p90: float | None
    p99: float | None


class Stats(BaseModel):
    replica: str = Field(description="The replica that answered: these figures are its own")
    events: int = Field(
        description="Objects' events applied to this replica's cache since it started (every account's; "
        "snapshot markers left out)"
    )
    eventsPerSecond: float = Field(description="Events per second over the last 10 seconds")
    changeToCacheSeconds: LatencySummary = Field(
        description="From an agent reading a change from its watch to the change in the cache, last minute"
    )
    accounts: int = Field(description="Accounts this replica serves that the caller may read")
    watches: int = Field(description="Kinds followed, over those accounts")
    watchesEstablished: int = Field(description="Of those, kinds whose watch is established now")
    oldestEventAgeSeconds: float | None = Field(
        description="The largest age of an account's newest event: the account that has been quiet longest"
    )


def add_metrics(app: FastAPI, deps: ApiDeps) -> None:
    registry = CollectorRegistry()
    collector = _Collector(deps)
    registry.register(collector)
    app.add_middleware(HttpLatency, metrics=deps.metrics)

    @app.get(
        "/metrics",
        tags=["health"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,
        responses={200: {"description": "Prometheus' text format"}},
    )
    async def metrics(request: Request) -> Response:
        try:
            lifecycle: dict[str, int] | None = await deps.accounts.store.count_by_state()
        except StoreError:
            lifecycle = None
        caller = principal_of(request)
        # Set and read with nothing awaited between: concurrent scrapes cannot mix their callers.
        collector.lifecycle, collector.database_up = lifecycle, lifecycle is not None
        collector.visible = lambda name: readable(deps, caller, name)
        return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @app.get(
        "/api/v1/stats",
        tags=["health"],
        summary="This replica's event rate, change-to-cache latency and watches, in JSON",
        response_model=Stats,
    )
    async def stats(request: Request) -> dict[str, Any]:
        caller = principal_of(request)
        shown = [r for r in deps.registry.accounts.values() if readable(deps, caller, r.name)]
        watches = established = 0
        oldest: float | None = None
        for record in shown:
            fresh = deps.registry.freshness(record)
            watches += fresh["watches"]
            established += fresh["watchesEstablished"]
            age = fresh["lastEventAgeSeconds"]
            if age is not None and (oldest is None or age > oldest):
                oldest = age
        return {
            "replica": deps.replica,
            **deps.metrics.stats(),
            "accounts": len(shown),
            "watches": watches,
            "watchesEstablished": established,
            "oldestEventAgeSeconds": oldest,
        }


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpLatency:
    """Times each request to its response's first byte (a watch stream counts until it starts),
    labelled with the route's path template, so `/api/v1/accounts/{name}` is one series."""

    def __init__(self, app: ASGIApp, metrics: HubMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        observed = False

        async def timed(message: Message) -> None:
            nonlocal observed
            if message["type"] == "http.response.start" and not observed:
                observed = True
                route = scope.get("route")
                # Unknown paths (and requests refused before routing: 401, 421) are one series,
                # and so are unknown methods: a caller must not be able to mint series.
                path = getattr(route, "path", None) or "unmatched"
                method = scope["method"] if scope["method"] in _METHODS else "other"
                self.metrics.http.child(method, path, str(message["status"])).observe(time.monotonic() - started)
            await send(message)

        await self.app(scope, receive, timed)


class _Collector:
    def __init__(self, deps: ApiDeps) -> None:
        self.deps = deps
        self.lifecycle: dict[str, int] | None = None  # read from the database before each scrape
        self.database_up = True
        self.visible: Callable[[str], bool] = lambda name: True  # the scraper's readable accounts

    def collect(self) -> Any:
        yield from self._lifecycle()
        yield from self._freshness()
        yield from self.deps.metrics.families()
        yield from self._parts()

    def _parts(self) -> Any:
        registry, cache = self.deps.registry, self.deps.cache
        yield GaugeMetricFamily("scale_agent_hub_sessions", "Agents connected", value=len(registry.sessions))
        states = GaugeMetricFamily("scale_agent_hub_accounts", "Accounts by state", labels=["state"])
        counts: dict[str, int] = {}
        for r in registry.accounts.values():
            counts[r.state] = counts.get(r.state, 0) + 1
        for state in ("ACTIVE", "DISCONNECTED", "ORPHANED"):
            states.add_metric([state], counts.get(state, 0))
        yield states
        stats = cache.stats()
        yield GaugeMetricFamily("scale_agent_hub_cached_objects", "Objects in the cache", value=stats.get("objects", 0))
        yield GaugeMetricFamily(
            "scale_agent_hub_cached_bytes", "JSON bytes held by the cache", value=stats.get("bytes", 0)
        )
        events = CounterMetricFamily("scale_agent_hub_events", "Object events received", labels=["agent"])
        for s in registry.sessions.values():
            events.add_metric([s.agent_id], s.events)
        yield events
        yield CounterMetricFamily(
            "scale_agent_hub_refused_streams",
            "Agent streams refused (auth, protocol, input)",
            value=self.deps.link.refused,
        )
        tasks = self.deps.tasks
        yield GaugeMetricFamily("scale_agent_hub_tasks_running", "Operation tasks running", value=tasks.running)
        ended = CounterMetricFamily("scale_agent_hub_tasks_ended", "Operation tasks ended", labels=["state"])
        for state, n in tasks.ended.items():
            ended.add_metric([state], n)
        yield ended
        yield CounterMetricFamily(
            "scale_agent_hub_operations_sent", "Operations sent to agents", value=self.deps.router.sent
        )
        yield GaugeMetricFamily("scale_agent_hub_replicas", "Hub replicas known", value=len(self.deps.peers.all()))
        status = self.deps.reload_status
        if status is not None:
            changes = CounterMetricFamily(
                "scale_agent_hub_config_changes",
                "Changes of the configuration file, applied or refused (it did not load)",
                labels=["outcome"],
            )
            changes.add_metric(["applied"], status.applied)
            changes.add_metric(["refused"], status.refused)
            yield changes
            yield GaugeMetricFamily(
                "scale_agent_hub_config_refused",
                "1 while the file's last change was refused (the running settings stay)",
                value=1.0 if status.last_error else 0.0,
            )
        security = self.deps.security
        logins = CounterMetricFamily(
            "scale_agent_hub_http_authentications",
            "HTTP requests by how the caller logged in (rejected: an invalid credential; none: no credential)",
            labels=["method"],
        )
        for method, n in sorted(security.authenticator.counts.items()):
            logins.add_metric([method], n)
        yield logins
        decisions = CounterMetricFamily(
            "scale_agent_hub_authorization_decisions",
            "Authorization decisions by outcome (cached: answered from the decision cache)",
            labels=["outcome"],
        )
        for outcome, n in sorted(security.access.counts.items()):
            decisions.add_metric([outcome], n)
        yield decisions
        yield CounterMetricFamily(
            "scale_agent_hub_operations_forwarded",
            "Operations forwarded to the replica streaming their account",
            value=self.deps.operations.forwarded,
        )

    def _lifecycle(self) -> Any:
        yield GaugeMetricFamily(
            "scale_agent_hub_database_up",
            "1 when the last scrape could read the accounts from the database",
            value=1.0 if self.database_up else 0.0,
        )
        if self.lifecycle is None:
            return
        family = GaugeMetricFamily(
            "scale_agent_hub_account_lifecycle",
            "Accounts in the database by lifecycle state (INACTIVE, ACTIVE, FAILED, ORPHANED, ...)",
            labels=["state"],
        )
        for state in AccountState:
            family.add_metric([state.value], self.lifecycle.get(state.value, 0))
        yield family

    def _freshness(self) -> Any:
        """Per account, not per kind: thousands of accounts times tens of kinds would be too many
        series; the API and the dashboard give the kinds."""
        registry = self.deps.registry
        age = GaugeMetricFamily(
            "scale_agent_hub_account_last_event_age_seconds",
            "Seconds since the newest event of the account reached this replica's cache",
            labels=["account"],
        )
        watching = GaugeMetricFamily(
            "scale_agent_hub_account_watches_established",
            "Kinds of the account whose watch is established now",
            labels=["account"],
        )
        followed = GaugeMetricFamily("scale_agent_hub_account_watches", "Kinds the account follows", labels=["account"])
        for name, record in sorted(registry.accounts.items()):
            if not self.visible(name):
                continue
            fresh = registry.freshness(record)
            if fresh["lastEventAgeSeconds"] is not None:
                age.add_metric([name], fresh["lastEventAgeSeconds"])
            watching.add_metric([name], fresh["watchesEstablished"])
            followed.add_metric([name], fresh["watches"])
        yield age
        yield watching
        yield followed

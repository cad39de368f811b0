"""The agent's health and admin port (`server.host:server.port`, loopback by default):
`/health`, `/ready`, `/metrics`, and Armory's admin endpoints `/accounts` (filters and paging),
`/watches` and `/operations`. `metrics_app` is the optional second listener of `prometheus.port`.

Metrics carry our names (`scale_agent_*`) and, beside them, Armory's (`kubesvc_*`), so that
dashboards and alerts written for Armory's agent keep working; plus the `process_*` metrics.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, UnknownMetricFamily

from ..kube.client import COUNTS
from ..protocol.states import AgentAccountState
from .accounts import STANDBY, WATCHING, AccountManager
from .budget import Budget
from .executor import OperationExecutor
from .link import HubLink
from .reload import AgentReloader

REGISTRY = web.AppKey("registry", CollectorRegistry)  # the app's metrics, for the prometheus listener
STATES = tuple(s.value for s in AgentAccountState if s not in (AgentAccountState.STOPPED, AgentAccountState.REJECTED))


class _Collector:
    """Reads the engine's counters at scrape time: nothing is paid per event on the hot path."""

    def __init__(
        self, manager: AccountManager, budget: Budget, link: HubLink | None, reloader: AgentReloader | None
    ) -> None:
        self.manager, self.budget, self.link, self.reloader = manager, budget, link, reloader

    def collect(self) -> Iterator[Any]:
        state = GaugeMetricFamily(
            "scale_agent_account_state", "1 for the state each account is in", labels=["account", "state"]
        )
        events = CounterMetricFamily("scale_agent_events", "Events handed to the sink", labels=["account"])
        watches = GaugeMetricFamily(
            "scale_agent_watches", "Followed (kind, namespace) pairs by state", labels=["account", "state"]
        )
        relists = CounterMetricFamily("scale_agent_relists", "Relists after 410 Gone", labels=["account"])
        skipped = GaugeMetricFamily("scale_agent_skipped_kinds", "Kinds not followed (forbidden)", labels=["account"])
        for r in self.manager.runners.values():
            for s in STATES:
                state.add_metric([r.name, s], 1.0 if r.state == s else 0.0)
            events.add_metric([r.name], r.events)
            counts: dict[str, int] = {}
            for w in r.watches.values():
                counts[w.state] = counts.get(w.state, 0) + 1
            for s, n in counts.items():
                watches.add_metric([r.name, s], n)
            relists.add_metric([r.name], r.relists)
            skipped.add_metric([r.name], len(r.skipped))
        yield from (state, events, watches, relists, skipped)
        yield GaugeMetricFamily("scale_agent_lists_running", "Initial LISTs running now", value=self.budget.running)
        yield GaugeMetricFamily("scale_agent_lists_peak", "Most LISTs that ran at once", value=self.budget.peak)
        if self.reloader is not None:
            reloads = CounterMetricFamily(
                "scale_agent_config_changes",
                "Changes of the configuration file, applied or refused (it did not load)",
                labels=["outcome"],
            )
            reloads.add_metric(["applied"], self.reloader.status.applied)
            reloads.add_metric(["refused"], self.reloader.status.refused)
            yield reloads
            yield GaugeMetricFamily(
                "scale_agent_config_refused",
                "1 while the file's last change was refused (the running configuration stays)",
                value=1.0 if self.reloader.status.last_error else 0.0,
            )
        yield from self._armory()
        if self.link is not None:
            yield GaugeMetricFamily(
                "scale_agent_hub_connected",
                "1 while the hub link is connected",
                value=1.0 if self.link.state == "connected" else 0.0,
            )
            yield CounterMetricFamily(
                "scale_agent_hub_connects", "Connections made to the hub", value=self.link.connects
            )
            yield CounterMetricFamily(
                "scale_agent_hub_events_sent", "Events written to the hub", value=self.link.events_sent
            )
            yield CounterMetricFamily(
                "scale_agent_hub_batches_acknowledged", "Batches the hub acknowledged", value=self.link.batches_acked
            )

    def _armory(self) -> Iterator[Any]:
        """Armory's metric names (monitor-metrics.csv and the 1.0.0 release notes), no labels."""
        watches = sum(1 for r in self.manager.runners.values() for w in r.watches.values() if w.state == WATCHING)
        resources = sum(len(r.watches) for r in self.manager.runners.values())
        # Armory's counters without `_total` keep their exact names as untyped metrics (a counter
        # here would be exposed as `..._total`, which Armory's dashboards do not query).
        yield UnknownMetricFamily(
            "kubesvc_kubernetes_requests", "Requests sent to Kubernetes API servers (a counter)", value=COUNTS.requests
        )
        yield GaugeMetricFamily("kubesvc_watches", "Watches established now", value=watches)
        yield CounterMetricFamily(
            "kubesvc_resource_agent", "Watched resources (kind, namespace) of every account", value=resources
        )
        link = self.link
        yield UnknownMetricFamily(
            "kubesvc_connection_count", "Connections made to the hub (a counter)", value=link.connects if link else 0
        )
        yield CounterMetricFamily(
            "kubesvc_disconnection", "Connections to the hub that ended", value=link.disconnects if link else 0
        )
        yield CounterMetricFamily(
            "kubesvc_events_sent", "Caching events sent to the hub", value=link.events_sent if link else 0
        )
        yield CounterMetricFamily(
            "kubesvc_events_bytes_sent",
            "Bytes of caching event messages sent to the hub",
            value=link.event_bytes_sent if link else 0,
        )


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """Armory's `prometheus.port` listener: the same metrics at /metrics and /prometheus_metrics."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/prometheus_metrics", metrics)
    return app


# Armory's account states (its filter State.Name), from ours.
ARMORY_STATES = {
    "watching": "Healthy",
    "standby": "Healthy",
    "syncing": "ConfigLoaded",
    "connecting": "ConfigLoaded",
    "error": "DiscoveryError",
    "rejected": "DiscoveryError",
    "stopped": "ConfigLoaded",
}
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000


class QueryError(ValueError):
    """A query parameter that is not what the endpoint expects; the message names both."""


def _int_param(query: Any, names: tuple[str, ...], default: int, lo: int, hi: int) -> int:
    for name in names:
        raw = query.get(name)
        if raw is None:
            continue
        if not (raw.isascii() and raw.isdigit()) or not lo <= int(raw) <= hi:
            raise QueryError(f"query parameter {name}={raw!r}: expected a whole number from {lo} to {hi}")
        return int(raw)
    return default


def select_accounts(accounts: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """`GET /accounts`: Armory's filters `Config.Name` (a name, or a pattern with * and ?),
    `Config.Dynamic` (true/false) and `State.Name` (Armory's Healthy/ConfigLoaded/DiscoveryError
    or our states; comma-separated for several), sorted by name, then paged by `limit` and
    `offset` (Armory's notes spell it `offtset`: accepted too). Raises QueryError."""
    name = query.get("Config.Name")
    dynamic = query.get("Config.Dynamic")
    if dynamic is not None and dynamic.lower() not in ("true", "false"):
        raise QueryError(f"query parameter Config.Dynamic={dynamic!r}: expected true or false")
    states = None
    if query.get("State.Name") is not None:
        states = {s.strip().lower() for s in query["State.Name"].split(",") if s.strip()}
        known = {s.lower() for s in ARMORY_STATES.values()} | set(ARMORY_STATES)
        unknown = sorted(states - known)
        if unknown:
            raise QueryError(
                f"query parameter State.Name={query['State.Name']!r}: {unknown[0]!r} is not a state "
                f"(expected Healthy, ConfigLoaded, DiscoveryError, or one of {', '.join(ARMORY_STATES)})"
            )
    limit = _int_param(query, ("limit",), DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _int_param(query, ("offset", "offtset"), 0, 0, 10**9)
    items = []
    for a in sorted(accounts, key=lambda a: a["name"]):
        armory_state = ARMORY_STATES.get(a["state"], "ConfigLoaded")
        if name is not None and not fnmatch.fnmatchcase(a["name"], name):
            continue
        if dynamic is not None and bool(a.get("dynamic")) != (dynamic.lower() == "true"):
            continue
        if states is not None and a["state"] not in states and armory_state.lower() not in states:
            continue
        items.append(
            {
                **a,
                "Config": {"Name": a["name"], "Dynamic": bool(a.get("dynamic"))},
                "State": {"Name": armory_state, "Reason": a.get("reason", "")},
            }
        )
    return {"items": items[offset : offset + limit], "total": len(items), "limit": limit, "offset": offset}


def health_app(
    manager: AccountManager,
    budget: Budget,
    link: HubLink | None = None,
    executor: OperationExecutor | None = None,
    reloader: AgentReloader | None = None,
) -> web.Application:
    registry = CollectorRegistry()
    registry.register(_Collector(manager, budget, link, reloader))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes...

    async def health(_: web.Request) -> web.Response:
        doc = manager.health()
        if link is not None:
            doc["hub"] = link.health()
            if link.state != "connected":
                doc["status"] = "degraded"
        if executor is not None:
            doc["operations"] = executor.health()
        if reloader is not None:
            doc["configuration"] = reloader.status.document()
        return web.Response(body=orjson.dumps(doc, option=orjson.OPT_INDENT_2), content_type="application/json")

    async def ready(_: web.Request) -> web.Response:
        # Standing by is ready: another agent streams the account, and this one takes over if it goes.
        not_ready = [r.name for r in manager.runners.values() if r.state not in (WATCHING, STANDBY)]
        if link is not None and link.state != "connected":
            not_ready.append(f"hub link ({link.reason or link.state})")
        if not_ready:
            return web.json_response({"ready": False, "waitingFor": not_ready}, status=503)
        return web.json_response({"ready": True})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _json(doc: Any, status: int = 200) -> web.Response:
        return web.Response(
            body=orjson.dumps(doc, option=orjson.OPT_INDENT_2), status=status, content_type="application/json"
        )

    async def accounts(request: web.Request) -> web.Response:
        try:
            return _json(select_accounts(manager.health()["accounts"], request.query))
        except QueryError as e:
            return _json({"error": str(e), "status": 400}, status=400)

    async def watches(_: web.Request) -> web.Response:
        items = [w for r in manager.runners.values() for w in r.watch_documents()]
        items.sort(key=lambda w: (w["account"], w["kind"], w["namespace"]))
        by_state: dict[str, int] = {}
        for w in items:
            by_state[w["state"]] = by_state.get(w["state"], 0) + 1
        return _json({"total": len(items), "byState": by_state, "items": items})

    async def operations(_: web.Request) -> web.Response:
        doc: dict[str, Any] = {"inFlight": [], "recent": []}
        if executor is not None:
            doc = {**executor.operations(), "counts": executor.health()}
        return _json(doc)

    app = web.Application()
    app[REGISTRY] = registry
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/prometheus_metrics", metrics)
    app.router.add_get("/accounts", accounts)
    app.router.add_get("/watches", watches)
    app.router.add_get("/operations", operations)
    return app

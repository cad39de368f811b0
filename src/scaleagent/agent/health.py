"""The agent's only listening port: `/health`, `/ready` and `/metrics`, on loopback by default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ..protocol.states import AgentAccountState
from .accounts import STANDBY, WATCHING, AccountManager
from .budget import Budget
from .executor import OperationExecutor
from .link import HubLink
from .reload import AgentReloader

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


def health_app(
    manager: AccountManager,
    budget: Budget,
    link: HubLink | None = None,
    executor: OperationExecutor | None = None,
    reloader: AgentReloader | None = None,
) -> web.Application:
    registry = CollectorRegistry()
    registry.register(_Collector(manager, budget, link, reloader))

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

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    return app

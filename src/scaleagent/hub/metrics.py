"""The hub's latency histograms and event rate: what `/metrics` exports and `/api/v1/stats` sums up.

prometheus_client's own Histogram takes a lock and walks every bucket on each observation; the
change-to-cache latency is observed for every event an agent streams, on the path that keeps the
cache current, so these histograms count with one bisect instead (bench/metrics_overhead.py
measures both). They also keep the last minute's counts apart, which Prometheus' form cannot
give: the dashboard and `/api/v1/stats` show recent quantiles without a Prometheus server.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client.core import HistogramMetricFamily, Metric

__all__ = ["CHANGE_TO_CACHE", "HTTP_REQUEST", "OPERATION", "EventRate", "Histogram", "HubMetrics", "LabelledHistograms"]

# Bucket bounds, in seconds: each histogram's own range, from what is normal to what is an outage.
CHANGE_TO_CACHE = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OPERATION = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
HTTP_REQUEST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

WINDOW_SECONDS = 10.0
RECENT_WINDOWS = 6  # quantiles of the last minute


class Histogram:
    """Observations counted in fixed buckets since the start, and per 10-second window for the last
    minute. Not thread-safe: the hub observes from its one event loop."""

    def __init__(self, bounds: Sequence[float], clock: Any = time.monotonic) -> None:
        self.bounds = tuple(bounds)
        self._bounds_ms = tuple(b * 1000 for b in self.bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0
        self._clock = clock
        self._windows: list[tuple[int, list[int]]] = []  # (window number, counts), oldest first

    def observe(self, seconds: float) -> None:
        self.observe_many((seconds,))

    def observe_many(self, values: Iterable[float]) -> None:
        """Several observations made at one moment (a batch of events): one look at the clock."""
        recent = self._window()
        bounds, counts = self.bounds, self.counts
        total, n = 0.0, 0
        for v in values:
            i = bisect_left(bounds, v)
            counts[i] += 1
            recent[i] += 1
            total += v
            n += 1
        self.sum += total
        self.count += n

    def observe_stamps(self, stamps_ms: Iterable[int], now_ms: float) -> None:
        """The ages of the stamped among `stamps_ms` (ms since the epoch; 0: no stamp) at `now_ms`,
        in seconds. The hot path of the cache: one loop, in milliseconds, no call per value.
        An age below 0 (clocks apart) counts as 0."""
        recent = self._window()
        bounds, counts = self._bounds_ms, self.counts
        total, n = 0.0, 0
        for stamp in stamps_ms:
            if stamp:
                age = now_ms - stamp
                if age < 0:
                    age = 0.0
                i = bisect_left(bounds, age)
                counts[i] += 1
                recent[i] += 1
                total += age
                n += 1
        self.sum += total / 1000
        self.count += n

    def _window(self) -> list[int]:
        number = int(self._clock() // WINDOW_SECONDS)
        if not self._windows or self._windows[-1][0] != number:
            self._windows.append((number, [0] * len(self.counts)))
            self._windows = [w for w in self._windows if w[0] > number - RECENT_WINDOWS]
        return self._windows[-1][1]

    def recent(self) -> list[int]:
        """Bucket counts of the last minute."""
        number = int(self._clock() // WINDOW_SECONDS)
        out = [0] * len(self.counts)
        for n, counts in self._windows:
            if n > number - RECENT_WINDOWS:
                out = [a + b for a, b in zip(out, counts, strict=True)]
        return out

    def quantile(self, q: float, counts: Sequence[int] | None = None) -> float | None:
        """The q-quantile, interpolated within its bucket as Prometheus' histogram_quantile does;
        None without observations. Above the last bound it answers the last bound."""
        counts = self.counts if counts is None else counts
        total = sum(counts)
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for i, c in enumerate(counts):
            if seen + c >= rank and c:
                if i == len(self.bounds):
                    return self.bounds[-1]
                lower = 0.0 if i == 0 else self.bounds[i - 1]
                return lower + (self.bounds[i] - lower) * (rank - seen) / c
            seen += c
        return self.bounds[-1]

    def summary(self) -> dict[str, Any]:
        """The last minute: how many, and the median, 90th and 99th percentiles (seconds)."""
        recent = self.recent()
        return {
            "count": sum(recent),
            "p50": self.quantile(0.5, recent),
            "p90": self.quantile(0.9, recent),
            "p99": self.quantile(0.99, recent),
        }

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus' buckets: le bound and how many observations were at most that."""
        out, running = [], 0
        for bound, c in zip((*map(_le, self.bounds), "+Inf"), self.counts, strict=True):
            running += c
            out.append((bound, float(running)))
        return out


class LabelledHistograms:
    """One Histogram per combination of label values, made on first use."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], bounds: Sequence[float]) -> None:
        self.name, self.documentation, self.labels, self.bounds = name, documentation, tuple(labels), tuple(bounds)
        self.children: dict[tuple[str, ...], Histogram] = {}

    def child(self, *values: str) -> Histogram:
        found = self.children.get(values)
        if found is None:
            found = self.children[values] = Histogram(self.bounds)
        return found

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for values, h in sorted(self.children.items()):
            family.add_metric(list(values), h.cumulative(), h.sum)
        return family


class EventRate:
    """Events counted per second, for the rate of the last 10 seconds."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.total = 0
        self._clock = clock
        self._seconds: list[tuple[int, int]] = []  # (second, events), oldest first

    def add(self, n: int) -> None:
        self.total += n
        second = int(self._clock())
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1] = (second, self._seconds[-1][1] + n)
        else:
            self._seconds.append((second, n))
            if len(self._seconds) > 2 * WINDOW_SECONDS:
                self._seconds = self._seconds[-int(WINDOW_SECONDS) :]

    def per_second(self) -> float:
        """The mean rate over the last 10 whole seconds and the current one."""
        now = int(self._clock())
        recent = sum(n for s, n in self._seconds if s > now - WINDOW_SECONDS)
        return recent / WINDOW_SECONDS


class HubMetrics:
    """The hub's measured latencies and event rate, shared by the agent link (events), the
    operation router (round trips) and the HTTP app (requests)."""

    def __init__(self) -> None:
        self.change_to_cache = Histogram(CHANGE_TO_CACHE)
        self.events = EventRate()
        self.operations = LabelledHistograms(
            "scale_agent_hub_operation_seconds",
            "Operations from sending to the agent to its answer, by type and outcome "
            "(succeeded, failed, timeout, disconnected)",
            ["type", "outcome"],
            OPERATION,
        )
        self.http = LabelledHistograms(
            "scale_agent_hub_http_request_seconds",
            "HTTP requests by method, route (the path template) and status code",
            ["method", "route", "status"],
            HTTP_REQUEST,
        )

    def applied(self, n: int, stamps_ms: Iterable[int], now_ms: float) -> None:
        """An agent's batch of `n` objects' events (snapshot markers left out) reached the cache at
        `now_ms`; `stamps_ms` are when the agent read each (0 for the items of a list, which are
        not changes, and for markers)."""
        self.events.add(n)
        self.change_to_cache.observe_stamps(stamps_ms, now_ms)

    def families(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "scale_agent_hub_change_to_cache_seconds",
            "From the agent reading a change from its watch to the change in the hub's cache "
            "(agent and hub clocks: keep them in sync with NTP)",
        )
        family.add_metric([], self.change_to_cache.cumulative(), self.change_to_cache.sum)
        yield family
        yield self.operations.family()
        yield self.http.family()

    def stats(self) -> dict[str, Any]:
        return {
            "events": self.events.total,
            "eventsPerSecond": self.events.per_second(),
            "changeToCacheSeconds": self.change_to_cache.summary(),
        }


def _le(bound: float) -> str:
    return repr(float(bound))

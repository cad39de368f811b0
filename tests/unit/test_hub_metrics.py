"""The hub's histograms: Prometheus' cumulative buckets, quantiles as histogram_quantile gives
them, and the last minute kept apart from the total."""

from __future__ import annotations

import asyncio

from scaleagent.hub.api.metrics import HttpLatency
from scaleagent.hub.metrics import EventRate, Histogram, HubMetrics, LabelledHistograms


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_buckets_are_cumulative_with_everything_above_the_last_bound_in_inf():
    h = Histogram((0.1, 1.0), clock=Clock())
    h.observe_many([0.05, 0.1, 0.5, 3.0])
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 3.0), ("+Inf", 4.0)]
    assert h.count == 4 and abs(h.sum - 3.65) < 1e-9


def test_quantiles_interpolate_within_the_bucket():
    h = Histogram((1.0, 2.0, 4.0), clock=Clock())
    h.observe_many([0.5] * 50 + [1.5] * 40 + [3.0] * 10)
    assert h.quantile(0.5) == 1.0  # the 50th of 100 is the last of the first bucket
    assert abs(h.quantile(0.9) - 2.0) < 1e-9
    assert 2.0 < h.quantile(0.95) < 4.0
    assert Histogram((1.0,)).quantile(0.5) is None


def test_the_summary_covers_the_last_minute_only():
    clock = Clock()
    h = Histogram((0.1, 1.0, 10.0), clock=clock)
    h.observe_many([5.0] * 10)  # an outage's slow changes
    clock.now += 61
    h.observe_many([0.05] * 3)
    summary = h.summary()
    assert summary["count"] == 3 and summary["p99"] <= 0.1
    assert h.count == 13  # the total keeps them all, for Prometheus


def test_labelled_histograms_export_one_series_per_label_values():
    family = LabelledHistograms("x_seconds", "x", ["type", "outcome"], (1.0,))
    family.child("scaleManifest", "succeeded").observe(0.5)
    family.child("scaleManifest", "timeout").observe(30.0)
    family.child("scaleManifest", "succeeded").observe(0.7)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.family().samples}
    ok = (("le", "+Inf"), ("outcome", "succeeded"), ("type", "scaleManifest"))
    assert samples[("x_seconds_bucket", ok)] == 2.0
    assert samples[("x_seconds_count", (("outcome", "timeout"), ("type", "scaleManifest")))] == 1.0


def test_the_event_rate_is_the_last_ten_seconds():
    clock = Clock()
    rate = EventRate(clock=clock)
    rate.add(500)
    clock.now += 30
    rate.add(40)
    clock.now += 1
    rate.add(60)
    assert rate.total == 600 and rate.per_second() == 10.0


def test_stamps_are_aged_in_seconds_and_unstamped_events_and_clock_skew_do_no_harm():
    h = Histogram((0.1, 1.0), clock=Clock())
    now_ms = 1_700_000_000_000.0
    h.observe_stamps([int(now_ms) - 50, 0, int(now_ms) - 500, int(now_ms) + 20], now_ms)
    assert h.count == 3  # the list item (0) is not a change
    assert h.cumulative() == [("0.1", 2.0), ("1.0", 3.0), ("+Inf", 3.0)]  # a stamp ahead counts as 0 s
    assert abs(h.sum - 0.55) < 1e-9


def test_a_method_http_does_not_define_is_counted_as_other_not_as_itself():
    """The HTTP parser may hand the app any method (h11 does): a caller must not mint series."""
    metrics = HubMetrics()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 405, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message):
        pass

    async def receive():
        return {"type": "http.request", "body": b""}

    latency = HttpLatency(app, metrics)
    for method in ("M1", "GET"):
        asyncio.run(latency({"type": "http", "method": method, "path": "/x"}, receive, send))
    assert sorted(metrics.http.children) == [("GET", "unmatched", "405"), ("other", "unmatched", "405")]

"""Which kinds discovery yields and which of them the agent follows once."""

from __future__ import annotations

import logging

from scaleagent.agent.retry_log import RetryReport
from scaleagent.kube.discovery import KindInfo, _group_versions, follow_once

EVENT = KindInfo("", "v1", "Event", "events", True, "r2yiGXH7wu8=")
EVENT_NEW = KindInfo("events.k8s.io", "v1", "Event", "events", True, "r2yiGXH7wu8=")
INGRESS_OLD = KindInfo("extensions", "v1beta1", "Ingress", "ingresses", True, "ZOAfGflaKd0=")
INGRESS = KindInfo("networking.k8s.io", "v1", "Ingress", "ingresses", True, "ZOAfGflaKd0=")
POD = KindInfo("", "v1", "Pod", "pods", True, "xPOwRZ+Yhw8=")


def test_the_preferred_version_comes_first_then_the_servers_order():
    group = {
        "versions": [{"version": "v2beta1"}, {"version": "v1"}, {"version": "v1beta1"}],
        "preferredVersion": {"version": "v1"},
    }
    assert _group_versions(group) == ["v1", "v2beta1", "v1beta1"]
    assert _group_versions({"versions": [{"version": "v1beta1"}]}) == ["v1beta1"]


def test_resources_that_share_a_storage_are_followed_once_core_and_stable_first():
    kept, dropped = follow_once([EVENT_NEW, INGRESS_OLD, POD, EVENT, INGRESS])
    assert kept == [POD, EVENT, INGRESS]
    assert dropped == {"Event.events.k8s.io": "Event", "Ingress.extensions": "Ingress.networking.k8s.io"}


def test_without_storage_hashes_the_known_pairs_are_still_followed_once():
    plain = [
        KindInfo(k.group, k.version, k.kind, k.plural, k.namespaced) for k in (EVENT, EVENT_NEW, INGRESS_OLD, INGRESS)
    ]
    kept, _ = follow_once(plain)
    assert [k.qualified for k in kept] == ["Event", "Ingress.networking.k8s.io"]


def test_one_kind_alone_is_always_followed_even_when_an_alias_was_filtered_out():
    assert follow_once([EVENT_NEW]) == ([EVENT_NEW], {})


def test_retries_of_many_watches_make_one_line_per_cause_and_one_when_all_are_back(caplog):
    caplog.set_level(logging.INFO, logger="scaleagent.agent.watches")
    report = RetryReport("prod")
    for i in range(50):
        report.retrying(f"Kind{i}", "cannot connect to https://10.0.0.1:6443: Connection refused")
    for i in range(50, 60):
        report.retrying(f"Kind{i}", "503 ServiceUnavailable: etcd is down")
    for i in range(60):  # a second round of retries changes nothing but the count
        report.retrying(f"Kind{i}", "cannot connect to https://10.0.0.1:6443: Connection refused")
    report.flush()
    assert [r.getMessage() for r in caplog.records] == [
        "account prod: 60 watches retrying: cannot connect to https://10.0.0.1:6443: Connection refused (60)"
    ]
    for i in range(59):
        report.recovered(f"Kind{i}")
    assert len(caplog.records) == 1
    report.recovered("Kind59")
    assert len(caplog.records) == 2
    assert "every watch is established again" in caplog.records[1].getMessage()
    assert "120 retries" in caplog.records[1].getMessage()


def test_a_blip_shorter_than_the_gathering_window_says_one_quiet_line(caplog):
    caplog.set_level(logging.INFO, logger="scaleagent.agent.watches")
    report = RetryReport("prod")
    report.retrying("Pod", "the watch broke")
    report.recovered("Pod")
    report.flush()  # the timer firing after recovery logs nothing more
    assert [r.levelno for r in caplog.records] == [logging.INFO]

"""Rules kubesim took from a real apiserver, where a fidelity test cannot reach them: compaction
on demand, every node-affinity operator, every Service type, conversions written both ways.

(tests/fidelity/test_apiserver_shapes.py holds the same behaviours against both servers.)
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from scaleagent.kubesim import events, tables, validation
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.controllers import UNSCHEDULABLE, Controllers, unschedulable
from scaleagent.kubesim.errors import StatusError
from scaleagent.kubesim.store import ADDED, Store


@contextlib.asynccontextmanager
async def live():
    """A cluster with its controllers running, stopped after the test whatever happens."""
    c = Cluster("t")
    ctrl = Controllers(c, root_ca="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    ctrl.start()
    try:
        yield c, ctrl
    finally:
        await ctrl.stop()


async def settle(ctrl: Controllers) -> None:
    await asyncio.wait_for(ctrl.idle(), 10)


# -- lists --------------------------------------------------------------------------------------


def test_a_compacted_continue_token_gets_a_token_to_go_on_inconsistently():
    s = Store(history=2)
    for i in range(3):
        s.commit("/configmaps", ADDED, {"metadata": {"name": f"o{i}", "namespace": "a"}}, None)
    _, _, token, _ = s.list("/configmaps", "a", None, limit=1)
    for i in range(3):
        s.commit("/configmaps", ADDED, {"metadata": {"name": f"n{i}", "namespace": "a"}}, None)
    with pytest.raises(StatusError) as err:
        s.list("/configmaps", "a", None, limit=1, continue_token=token)
    assert err.value.code == 410 and "use the continue token in this response" in err.value.message
    onward = err.value.status()["metadata"]["continue"]
    items, rv, _, _ = s.list("/configmaps", "a", None, limit=10, continue_token=onward)
    assert [o["metadata"]["name"] for o in items] == ["o1", "o2"]  # after o0, as it is now
    assert rv == s.rv


def test_a_list_at_a_compacted_version_says_so_as_etcd_storage_does():
    s = Store(history=1)
    for i in range(3):
        s.commit("/configmaps", ADDED, {"metadata": {"name": f"o{i}", "namespace": "a"}}, None)
    with pytest.raises(StatusError) as err:
        s.list("/configmaps", "a", None, at_rv=2)
    assert (err.value.code, err.value.message) == (410, "The resourceVersion for the provided list is too old.")


# -- events -------------------------------------------------------------------------------------


def test_event_conversion_goes_both_ways_without_loss():
    new = {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": "e", "namespace": "n"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "series": {"count": 2, "lastObservedTime": "2024-01-01T00:00:01.000000Z"},
        "reportingController": "c",
        "reportingInstance": "i",
        "action": "A",
        "reason": "R",
        "regarding": {"kind": "Pod", "name": "p"},
        "related": {"kind": "Node", "name": "x"},
        "note": "n",
        "type": "Normal",
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": None,
        "deprecatedLastTimestamp": None,
    }
    core = events.to_core(new)
    assert (core["message"], core["involvedObject"], core["reportingComponent"]) == (
        "n",
        {"kind": "Pod", "name": "p"},
        "c",
    )
    assert events.to_events_v1(core) == new


def test_an_event_written_through_events_k8s_io_keeps_what_it_says():
    c = Cluster("t")
    rt = c.rt("events.k8s.io", "v1", "events")
    c.create(
        rt,
        "default",
        {
            "metadata": {"name": "e"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "example.com/c",
            "reportingInstance": "i",
            "action": "A",
            "reason": "R",
            "note": "first",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p"},
        },
    )
    with pytest.raises(StatusError) as err:
        c.patch(rt, "default", "e", "merge", {"note": "changed"})
    assert err.value.code == 422 and err.value.details["causes"][0]["field"] == "message"
    # The core API keeps the legacy rules: it may change it, and the new API reads the change.
    c.patch(c.rt("", "v1", "events"), "default", "e", "merge", {"message": "changed"})
    assert c.get(rt, "default", "e")["note"] == "changed"
    applied = c.patch(
        rt,
        "default",
        "e",
        "apply",
        {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "labels": {"a": "b"}}},
        manager="m",
    )
    assert applied["metadata"]["labels"] == {"a": "b"} and applied["note"] == "changed"


# -- pods ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,pending",
    [
        ({}, False),
        ({"nodeSelector": {"kubernetes.io/os": "linux"}}, False),  # kubesim-node carries the well-known labels
        ({"nodeSelector": {"disktype": "ssd"}}, True),
        ({"nodeName": "elsewhere"}, False),  # not the scheduler's to place
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
                                    ]
                                },
                                {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
                            ]
                        }
                    }
                }
            },
            False,
        ),  # terms are ORed
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "NotIn", "values": ["kubesim-node"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}
                        ]
                    }
                }
            },
            False,
        ),
    ],
)
def test_the_scheduler_leaves_pending_what_kubesim_node_does_not_match(spec, pending):
    assert unschedulable(spec) == (UNSCHEDULABLE if pending else "")


async def test_a_deployment_whose_pods_no_node_takes_never_becomes_available():
    async with live() as (c, ctrl):
        rt = c.rt("apps", "v1", "deployments")
        c.create(
            rt,
            "default",
            {
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "nodeSelector": {"disktype": "ssd"},
                            "containers": [{"name": "c", "image": "nginx:1"}],
                        },
                    },
                },
            },
        )
        await settle(ctrl)
        pods = list(c.store.items("/pods", "default"))
        assert [p["status"]["phase"] for p in pods] == ["Pending", "Pending"]
        assert all(not p["spec"].get("nodeName") for p in pods)
        status = c.get(rt, "default", "web")["status"]
        assert not status.get("readyReplicas") and status["unavailableReplicas"] == 2
        assert {x["type"]: x["status"] for x in status["conditions"]}["Available"] == "False"


async def test_a_pod_a_client_creates_is_bound_then_run_or_left_where_it_names():
    async with live() as (c, ctrl):
        rt = c.rt("", "v1", "pods")
        c.create(rt, "default", {"metadata": {"name": "free"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        c.create(
            rt,
            "default",
            {
                "metadata": {"name": "named"},
                "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "x"}]},
            },
        )
        await settle(ctrl)
        free = c.get(rt, "default", "free")
        assert (free["spec"]["nodeName"], free["status"]["phase"], free["status"]["qosClass"]) == (
            "kubesim-node",
            "Running",
            "BestEffort",
        )
        named = c.get(rt, "default", "named")
        assert named["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


def test_qos_classes():
    def spec(*resources: dict) -> dict:
        return {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}

    both = {"cpu": "1", "memory": "1Gi"}
    assert validation.qos_class(spec({})) == "BestEffort"
    assert validation.qos_class(spec({"limits": both})) == "Guaranteed"
    assert validation.qos_class(spec({"limits": both, "requests": both}, {"limits": both})) == "Guaranteed"
    assert validation.qos_class(spec({"requests": {"cpu": "1"}})) == "Burstable"
    assert validation.qos_class(spec({"limits": both}, {})) == "Burstable"


# -- namespaces and services ---------------------------------------------------------------------


async def test_the_root_ca_configmap_is_created_and_set_back():
    async with live() as (c, ctrl):
        cm = c.rt("", "v1", "configmaps")
        c.create(c.rt("", "v1", "namespaces"), "", {"metadata": {"name": "fresh"}})
        await settle(ctrl)
        root = c.get(cm, "fresh", "kube-root-ca.crt")
        assert root["data"] == {"ca.crt": ctrl.root_ca}
        assert root["metadata"]["annotations"]["kubernetes.io/description"].startswith("Contains a CA bundle")
        assert c.get(c.rt("", "v1", "serviceaccounts"), "fresh", "default")["metadata"]["name"] == "default"
        c.patch(cm, "fresh", "kube-root-ca.crt", "merge", {"data": {"ca.crt": "x"}, "metadata": {"annotations": None}})
        await settle(ctrl)
        again = c.get(cm, "fresh", "kube-root-ca.crt")
        assert (
            again["data"] == {"ca.crt": ctrl.root_ca}
            and "kubernetes.io/description" in again["metadata"]["annotations"]
        )
        c.delete(cm, "fresh", "kube-root-ca.crt")
        await settle(ctrl)
        assert c.get(cm, "fresh", "kube-root-ca.crt")["data"] == {"ca.crt": ctrl.root_ca}


def test_services_keep_their_allocations_across_updates_that_leave_them_out():
    c = Cluster("t")
    rt = c.rt("", "v1", "services")
    first = c.create(rt, "default", {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}})
    second = c.create(rt, "default", {"metadata": {"name": "b"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    assert first["spec"]["clusterIP"] != second["spec"]["clusterIP"]
    assert 30000 <= second["spec"]["ports"][0]["nodePort"] <= 32767
    assert second["spec"]["externalTrafficPolicy"] == "Cluster"
    replaced = c.update(
        rt,
        "default",
        "b",
        {"metadata": {"name": "b"}, "spec": {"type": "NodePort", "ports": [{"port": 80}], "selector": {"a": "b"}}},
    )
    assert replaced["spec"]["clusterIP"] == second["spec"]["clusterIP"]
    assert replaced["spec"]["ports"][0]["nodePort"] == second["spec"]["ports"][0]["nodePort"]
    external = c.create(
        rt, "default", {"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com"}}
    )
    assert "clusterIP" not in external["spec"]


def test_ages_in_the_future_are_invalid_as_kubectl_prints_them():
    now = datetime(2024, 1, 1, tzinfo=UTC)
    later = (now + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert tables.human_age(later, now) == "<invalid>"
    assert tables.human_age((now - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%SZ"), now) == "90s"

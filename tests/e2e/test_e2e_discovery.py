"""Which kinds the agent follows: each kind once, at a version the server serves it at."""

from __future__ import annotations

import uuid

from tests.e2e.e2e_stack import Cluster, Stack


def crd(group: str, kind: str, plural: str, versions: list[str]) -> dict:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {"name": v, "served": True, "storage": i == 0, "schema": schema} for i, v in enumerate(versions)
            ],
        },
    }


def test_a_kind_served_only_at_an_older_version_of_its_group_is_followed(stack: Stack, cluster: Cluster, namespace):
    # One group, two CRDs: the group's preferred version is v1, but Gadget exists only in v1beta1
    # (as CronJob existed only in batch/v1beta1 on Kubernetes 1.20).
    group = f"e2e{uuid.uuid4().hex[:6]}.example.com"
    cluster.apply(crd(group, "Widget", "widgets", ["v1", "v1beta1"]))
    cluster.apply(crd(group, "Gadget", "gadgets", ["v1beta1"]))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/gadgets.{group}", f"crd/widgets.{group}")
    cluster.apply(
        {"apiVersion": f"{group}/v1beta1", "kind": "Gadget", "metadata": {"name": "g", "namespace": namespace}}
    )
    try:
        doc = stack.hub.wait_until(
            f"/api/v1/accounts/admin/objects?kind=Gadget.{group}&namespace={namespace}",
            lambda d: len(d["items"]) == 1,
            timeout=60,
            what="the Gadget in the hub",
        )
        assert doc["items"][0]["apiVersion"] == f"{group}/v1beta1"
        kinds = stack.account("admin")["kinds"]
        assert kinds.count(f"Gadget.{group}") == 1 and kinds.count(f"Widget.{group}") == 1
    finally:
        cluster.kubectl("delete", "crd", f"gadgets.{group}", f"widgets.{group}", "--wait=false")


def test_a_resource_served_by_two_groups_is_followed_once(stack: Stack, cluster: Cluster):
    served = set(cluster.kubectl("api-resources", "-o", "name").stdout.split())
    assert "events" in served  # core Events: the real server also serves them as events.k8s.io
    account = stack.account("admin")
    if "events.events.k8s.io" in served:
        assert "Event" in account["kinds"] and "Event.events.k8s.io" not in account["kinds"]
        assert "the same objects as Event" in account["skipped"]["Event.events.k8s.io"]
    if "ingresses.extensions" in served:  # Kubernetes < 1.22
        assert "Ingress.networking.k8s.io" in account["kinds"] and "Ingress.extensions" not in account["kinds"]
    if cluster.is_kubesim:
        return
    # On the real server an Event appears once in the hub, however it was created.
    name = f"ev-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "e2e/test",
            "reportingInstance": "e2e",
            "action": "Test",
            "reason": "Testing",
            "type": "Normal",
            "regarding": {"kind": "ConfigMap", "name": "kube-root-ca.crt", "namespace": "default", "apiVersion": "v1"},
        }
    )
    doc = stack.hub.wait_until(
        f"/api/v1/accounts/admin/objects?namespace=default&name={name}",
        lambda d: len(d["items"]) >= 1,
        what="the Event in the hub",
    )
    assert [(i["kind"], i["apiVersion"]) for i in doc["items"]] == [("Event", "v1")]

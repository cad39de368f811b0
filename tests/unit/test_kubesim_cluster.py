"""Object rules a Kubernetes client can observe, exercised in-process on one simulated cluster."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.controllers import Controllers
from scaleagent.kubesim.errors import StatusError


@pytest.fixture
def c() -> Cluster:
    return Cluster("test")


def cm_type(c: Cluster):
    return c.rt("", "v1", "configmaps")


def deploy_type(c: Cluster):
    return c.rt("apps", "v1", "deployments")


def deployment(name: str = "web", image: str = "nginx:1", replicas: int = 2) -> dict:
    return {"metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}}


def test_generation_counts_spec_changes_only(c):
    rt = deploy_type(c)
    d = c.create(rt, "default", deployment())
    assert d["metadata"]["generation"] == 1
    labelled = c.patch(rt, "default", "web", "merge", {"metadata": {"labels": {"team": "a"}}})
    assert labelled["metadata"]["generation"] == 1
    scaled = c.patch(rt, "default", "web", "merge", {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] == 2


def test_a_write_that_changes_nothing_keeps_the_resource_version(c):
    rt = cm_type(c)
    first = c.create(rt, "default", {"metadata": {"name": "x"}, "data": {"a": "1"}}, manager="t")
    same = c.patch(rt, "default", "x", "merge", {"data": {"a": "1"}}, manager="t")
    assert same["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_status_is_only_written_through_the_status_subresource(c):
    rt = deploy_type(c)
    c.create(rt, "default", deployment())
    ignored = c.patch(rt, "default", "web", "merge", {"status": {"replicas": 9}})
    assert ignored["status"].get("replicas") is None
    written = c.patch(rt, "default", "web", "merge", {"status": {"replicas": 9}}, subresource="status")
    assert written["status"]["replicas"] == 9


def test_dry_run_stores_nothing(c):
    rt = cm_type(c)
    out = c.create(rt, "default", {"metadata": {"name": "dry"}}, dry_run=True)
    assert out["metadata"]["uid"]
    with pytest.raises(StatusError) as err:
        c.get(rt, "default", "dry")
    assert err.value.code == 404


def test_objects_need_an_existing_namespace(c):
    with pytest.raises(StatusError) as err:
        c.create(cm_type(c), "nowhere", {"metadata": {"name": "x"}})
    assert err.value.code == 404 and 'namespaces "nowhere" not found' in err.value.message


def test_finalizers_hold_a_deleted_object_until_removed(c):
    rt = cm_type(c)
    c.create(rt, "default", {"metadata": {"name": "held", "finalizers": ["example.com/wait"]}})
    code, obj = c.delete(rt, "default", "held")
    assert code == 202 and obj["metadata"]["deletionTimestamp"]
    assert c.get(rt, "default", "held")["metadata"]["deletionTimestamp"]
    c.patch(rt, "default", "held", "merge", {"metadata": {"finalizers": None}})
    with pytest.raises(StatusError):
        c.get(rt, "default", "held")


def test_delete_preconditions(c):
    rt = cm_type(c)
    obj = c.create(rt, "default", {"metadata": {"name": "p"}})
    with pytest.raises(StatusError) as err:
        c.delete(rt, "default", "p", preconditions={"resourceVersion": "1"})
    assert err.value.code == 409
    code, status = c.delete(rt, "default", "p", preconditions={"uid": obj["metadata"]["uid"]})
    assert code == 200 and status["status"] == "Success"


def test_strict_field_validation_names_unknown_fields(c):
    rt = deploy_type(c)
    bad = deployment()
    bad["spec"]["replicaz"] = 3
    bad["spec"]["template"]["spec"]["containers"][0]["imag"] = "x"
    with pytest.raises(StatusError) as err:
        c.create(rt, "default", bad, field_validation="Strict")
    assert err.value.code == 400
    assert 'unknown field "spec.replicaz"' in err.value.message
    assert 'unknown field "spec.template.spec.containers[0].imag"' in err.value.message
    warnings: list[str] = []
    stored = c.create(rt, "default", bad, field_validation="Warn", warnings=warnings)
    assert "replicaz" not in stored["spec"] and len(warnings) == 2


def test_exact_list_reads_the_past_within_the_history(c):
    rt = cm_type(c)
    c.create(rt, "default", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    before = c.store.rv
    c.patch(rt, "default", "a", "merge", {"data": {"v": "2"}})
    items, rv, _, _ = c.store.list(rt.storage_key, "default", None, at_rv=before)
    assert rv == before and items[0]["data"] == {"v": "1"}


async def settle(ctrl: Controllers) -> None:
    await asyncio.wait_for(ctrl.idle(), 10)


@contextlib.asynccontextmanager
async def live():
    """A cluster with its controllers running, stopped after the test whatever happens."""
    c = Cluster("t")
    ctrl = Controllers(c)
    ctrl.start()
    try:
        yield c, ctrl
    finally:
        await ctrl.stop()


async def test_deployment_rollout_and_rollback_reuse_revisions():
    async with live() as (c, ctrl):
        rt, rs_rt = deploy_type(c), c.rt("apps", "v1", "replicasets")
        c.create(rt, "default", deployment(image="nginx:1"))
        await settle(ctrl)
        c.patch(rt, "default", "web", "strategic", {"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:2"}]}}}})
        await settle(ctrl)
        c.patch(rt, "default", "web", "strategic", {"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1"}]}}}})
        await settle(ctrl)
        sets = {rs["spec"]["template"]["spec"]["containers"][0]["image"]: rs for rs in c.store.items(rs_rt.storage_key)}
        assert len(sets) == 2
        assert sets["nginx:1"]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
        assert sets["nginx:1"]["spec"]["replicas"] == 2 and sets["nginx:2"]["spec"]["replicas"] == 0
        d = c.get(rt, "default", "web")
        assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
        assert d["status"]["readyReplicas"] == 2 and d["status"]["observedGeneration"] == 3
        pods = list(c.store.items("/pods", "default"))
        assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)


@pytest.mark.parametrize("policy,survivors", [("Background", 0), ("Foreground", 0), ("Orphan", 1)])
async def test_propagation_policy_decides_what_happens_to_dependents(policy, survivors):
    async with live() as (c, ctrl):
        rt, rs_rt = deploy_type(c), c.rt("apps", "v1", "replicasets")
        c.create(rt, "default", deployment())
        await settle(ctrl)
        c.delete(rt, "default", "web", propagation=policy)
        await settle(ctrl)
        with pytest.raises(StatusError):
            c.get(rt, "default", "web")
        left = list(c.store.items(rs_rt.storage_key, "default"))
        assert len(left) == survivors
        if survivors:
            assert not left[0]["metadata"].get("ownerReferences")
        else:
            assert not list(c.store.items("/pods", "default"))


async def test_deleting_a_namespace_removes_its_content_then_itself():
    async with live() as (c, ctrl):
        ns_rt = c.rt("", "v1", "namespaces")
        c.create(ns_rt, "", {"metadata": {"name": "doomed"}})
        c.create(cm_type(c), "doomed", {"metadata": {"name": "x"}})
        code, ns = c.delete(ns_rt, "", "doomed")
        assert code == 202 and ns["status"]["phase"] == "Terminating"
        with pytest.raises(StatusError) as err:
            c.create(cm_type(c), "doomed", {"metadata": {"name": "y"}})
        assert err.value.code == 403
        await settle(ctrl)
        assert c.store.get("/namespaces", "", "doomed") is None
        assert not list(c.store.items("/configmaps", "doomed"))

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
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


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
    assert code == 200 and obj["metadata"]["deletionTimestamp"]  # the held object, not a Status
    assert c.get(rt, "default", "held")["metadata"]["deletionTimestamp"]
    c.patch(rt, "default", "held", "merge", {"metadata": {"finalizers": None}})
    with pytest.raises(StatusError):
        c.get(rt, "default", "held")


def test_a_terminating_namespace_stays_until_both_finalizer_lists_are_empty(c):
    ns_rt = c.rt("", "v1", "namespaces")
    c.create(ns_rt, "", {"metadata": {"name": "going"}})
    c.delete(ns_rt, "", "going")
    c.patch(ns_rt, "", "going", "merge", {"metadata": {"labels": {"seen": "yes"}}})
    assert c.get(ns_rt, "", "going")["metadata"]["labels"]["seen"] == "yes"  # spec.finalizers still hold it
    c.update(ns_rt, "", "going", {**c.get(ns_rt, "", "going"), "spec": {"finalizers": []}}, subresource="finalize")
    with pytest.raises(StatusError):
        c.get(ns_rt, "", "going")


def test_delete_preconditions(c):
    rt = cm_type(c)
    obj = c.create(rt, "default", {"metadata": {"name": "p"}})
    with pytest.raises(StatusError) as err:
        c.delete(rt, "default", "p", preconditions={"resourceVersion": "1"})
    assert err.value.code == 409
    code, status = c.delete(rt, "default", "p", preconditions={"uid": obj["metadata"]["uid"]})
    assert code == 200 and status["status"] == "Success"


def test_deletes_answer_like_the_generic_store(c):
    """Pods (and Services, Namespaces...) come back deleted; other kinds get a Status; orphanDependents=false is 202."""
    pods = c.rt("", "v1", "pods")
    c.create(pods, "default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    code, pod = c.delete(pods, "default", "p")
    assert code == 200 and (pod["kind"], pod["metadata"]["name"]) == ("Pod", "p")
    c.create(cm_type(c), "default", {"metadata": {"name": "x", "finalizers": ["example.com/wait"]}})
    code, held = c.delete(cm_type(c), "default", "x", orphan_dependents=False)
    assert code == 202 and held["kind"] == "ConfigMap"
    with pytest.raises(StatusError) as err:
        c.delete(cm_type(c), "default", "x", orphan_dependents=True, propagation="Orphan")
    assert err.value.code == 422


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
        c.patch(
            rt,
            "default",
            "web",
            "strategic",
            {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}},
        )
        await settle(ctrl)
        c.patch(
            rt,
            "default",
            "web",
            "strategic",
            {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}},
        )
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
        assert code == 200 and ns["status"]["phase"] == "Terminating"
        with pytest.raises(StatusError) as err:
            c.create(cm_type(c), "doomed", {"metadata": {"name": "y"}})
        assert err.value.code == 403
        await settle(ctrl)
        assert c.store.get("/namespaces", "", "doomed") is None
        assert not list(c.store.items("/configmaps", "doomed"))


async def test_a_terminating_namespace_goes_when_its_last_held_object_does():
    async with live() as (c, ctrl):
        ns_rt = c.rt("", "v1", "namespaces")
        c.create(ns_rt, "", {"metadata": {"name": "doomed"}})
        c.create(cm_type(c), "doomed", {"metadata": {"name": "held", "finalizers": ["example.com/wait"]}})
        c.delete(ns_rt, "", "doomed")
        await settle(ctrl)
        assert c.store.get("/namespaces", "", "doomed") is not None  # the ConfigMap's finalizer holds it
        c.patch(cm_type(c), "doomed", "held", "merge", {"metadata": {"finalizers": None}})
        await settle(ctrl)
        assert c.store.get("/namespaces", "", "doomed") is None


async def test_a_dependent_goes_only_when_all_its_owners_have():
    async with live() as (c, ctrl):
        rt = cm_type(c)
        owners = [c.create(rt, "default", {"metadata": {"name": n}}) for n in ("owner-a", "owner-b")]
        refs = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
            for o in owners
        ]
        c.create(rt, "default", {"metadata": {"name": "shared", "ownerReferences": refs}})
        c.delete(rt, "default", "owner-a")
        await settle(ctrl)
        assert c.get(rt, "default", "shared")["metadata"]["ownerReferences"] == refs[1:]
        c.delete(rt, "default", "owner-b")
        await settle(ctrl)
        with pytest.raises(StatusError):
            c.get(rt, "default", "shared")


def test_field_types_are_checked_as_the_apiservers_decoder_does(c):
    with pytest.raises(StatusError) as err:
        c.create(cm_type(c), "default", {"metadata": {"name": "typed"}, "data": {"a": 5}}, field_validation="")
    assert err.value.code == 400 and err.value.message == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
    )
    bad = deployment()
    bad["spec"]["replicas"] = "2"
    with pytest.raises(StatusError) as err:
        c.create(deploy_type(c), "default", bad, field_validation="")
    assert "Go struct field DeploymentSpec.spec.replicas of type int32" in err.value.message
    good = deployment()
    good["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}}  # IntOrString
    good["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 0.5, "memory": "1Gi"}}
    good["metadata"]["annotations"] = None
    c.create(deploy_type(c), "default", good, field_validation="")


async def test_a_big_scale_up_does_not_hold_up_other_controllers():
    """Pods come in bounded batches, so one large ReplicaSet does not keep everything else waiting."""
    async with live() as (c, ctrl):
        created: list[str] = []
        c.store.listen(
            lambda resource, ev: (
                created.append(ev.obj["metadata"]["generateName"])
                if resource == "/pods" and ev.type == "ADDED"
                else None
            )
        )
        big = deployment("big", replicas=250)
        c.create(c.rt("apps", "v1", "replicasets"), "default", big)
        c.create(
            c.rt("batch", "v1", "jobs"),
            "default",
            {
                "metadata": {"name": "small"},
                "spec": {
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}
                },
            },
        )
        await settle(ctrl)
        assert created.count("big-") == 250
        assert created.index("small-") < 250


def widget_crd(subresources: dict | None = None) -> dict:
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if subresources is not None:
        version["subresources"] = subresources
    return {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "versions": [version],
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        },
    }


def test_establishing_a_crd_does_not_rewrite_its_added_event(c):
    crds = c.rt("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    watcher, _ = c.store.watch(crds.storage_key, "", None, c.store.rv)
    c.create(crds, "", widget_crd())
    added, established = watcher.queue.get_nowait(), watcher.queue.get_nowait()
    assert added.obj["metadata"]["resourceVersion"] == str(added.rv)
    assert established.obj["metadata"]["resourceVersion"] == str(established.rv) != str(added.rv)


def test_a_job_gets_a_generated_selector_and_pod_labels(c):
    jobs = c.rt("batch", "v1", "jobs")
    spec = {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}
    job = c.create(jobs, "default", {"metadata": {"name": "once"}, "spec": spec})
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": uid,
        "controller-uid": uid,
        "batch.kubernetes.io/job-name": "once",
        "job-name": "once",
    }
    manual = c.create(jobs, "default", {"metadata": {"name": "manual"}, "spec": {**spec, "manualSelector": True}})
    assert "selector" not in manual["spec"]


@pytest.mark.parametrize("subresources,generation", [({}, 2), ({"status": {}}, 1)])
def test_custom_resource_status_counts_as_a_change_without_a_status_subresource(c, subresources, generation):
    c.create(c.rt("apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", widget_crd(subresources))
    widgets = c.rt("example.com", "v1", "widgets")
    c.create(widgets, "default", {"metadata": {"name": "w"}, "spec": {"size": 1}})
    written = c.patch(
        widgets, "default", "w", "merge", {"status": {"ready": True}}, subresource="status" if subresources else ""
    )
    assert written["status"] == {"ready": True} and written["metadata"]["generation"] == generation

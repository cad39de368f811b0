"""kubesim.patching behaves like kube-apiserver: patch types, server-side apply, managedFields."""

import copy

import pytest

from scaleagent.kubesim.patching import (
    ApplyConflict,
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    has_strategic_schema,
    record_update,
    server_side_apply,
)

T0 = "2026-11-21T10:00:00Z"
T1 = "2026-11-21T10:05:00Z"


def deployment(replicas=2, image="nginx:1.25", **extra_container):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {
                    "containers": [
                        {"name": "nginx", "image": image, "ports": [{"containerPort": 80}], **extra_container}
                    ]
                },
            },
        },
    }


def containers(obj):
    return obj["spec"]["template"]["spec"]["containers"]


def smp(obj, patch, group="apps", kind="Deployment"):
    return apply_strategic_merge_patch(obj, patch, group, kind)


def template_patch(**pod_spec):
    return {"spec": {"template": {"spec": pod_spec}}}


def apply(live, obj, manager="kubectl", force=False, now=T0, **kw):
    return server_side_apply(
        live, obj, manager=manager, force=force, group="apps", version="v1", kind="Deployment", now=now, **kw
    )


def update(old, new, manager, now=T0, **kw):
    return record_update(old, new, manager=manager, group="apps", version="v1", kind="Deployment", now=now, **kw)


def entry(obj, manager, operation=None):
    found = [
        e
        for e in obj["metadata"].get("managedFields", [])
        if e["manager"] == manager and (operation is None or e["operation"] == operation)
    ]
    assert len(found) <= 1
    return found[0] if found else None


def no_directives(value):
    if isinstance(value, dict):
        return all(not k.startswith("$") and no_directives(v) for k, v in value.items())
    if isinstance(value, list):
        return all(no_directives(v) for v in value)
    return True


# --------------------------------------------------------------------------- strategic merge patch


def test_smp_merges_containers_by_name_and_keeps_unpatched_fields():
    live = smp(deployment(), template_patch(containers=[{"name": "sidecar", "image": "busybox"}]))
    assert [c["name"] for c in containers(live)] == ["sidecar", "nginx"]  # new items go first, as in Go

    out = smp(live, template_patch(containers=[{"name": "nginx", "image": "nginx:1.27"}]))

    assert [c["name"] for c in containers(out)] == ["sidecar", "nginx"]
    assert containers(out)[1] == {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}
    assert containers(out)[0] == {"name": "sidecar", "image": "busybox"}


def test_smp_deletes_env_entry_with_patch_delete():
    live = deployment(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    patch = template_patch(containers=[{"name": "nginx", "env": [{"name": "A", "$patch": "delete"}]}])

    out = smp(live, patch)

    assert containers(out)[0]["env"] == [{"name": "B", "value": "2"}]
    assert no_directives(out)


def test_smp_set_element_order_reorders_and_deletes_like_kubectl_apply():
    live = smp(deployment(), template_patch(containers=[{"name": "b", "image": "b"}, {"name": "c", "image": "c"}]))
    assert [c["name"] for c in containers(live)] == ["b", "c", "nginx"]

    # what kubectl client-side apply sends to drop "b" and put nginx first
    patch = template_patch(
        **{
            "$setElementOrder/containers": [{"name": "nginx"}, {"name": "c"}],
            "containers": [{"name": "b", "$patch": "delete"}],
        }
    )
    out = smp(live, patch)

    assert [c["name"] for c in containers(out)] == ["nginx", "c"]
    assert no_directives(out)


def test_smp_primitive_list_directives_on_finalizers():
    live = deployment()
    live["metadata"]["finalizers"] = ["x", "y"]

    out = smp(live, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "finalizers": ["z"]}})
    assert sorted(out["metadata"]["finalizers"]) == ["y", "z"]

    ordered = smp(live, {"metadata": {"$setElementOrder/finalizers": ["y", "x"]}})
    assert ordered["metadata"]["finalizers"] == ["y", "x"]
    assert no_directives(out) and no_directives(ordered)


def test_smp_service_ports_merge_on_port_container_ports_on_container_port():
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "https", "port": 443}]},
    }

    out = smp(svc, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}, group="", kind="Service")
    assert out["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 9090}, {"name": "https", "port": 443}]

    dep = smp(
        deployment(), template_patch(containers=[{"name": "nginx", "ports": [{"containerPort": 80, "name": "web"}]}])
    )
    assert containers(dep)[0]["ports"] == [{"containerPort": 80, "name": "web"}]


def test_smp_replaces_lists_without_strategy_merges_maps_and_null_deletes():
    live = deployment()
    live["spec"]["template"]["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}]
    patch = {
        "metadata": {"labels": {"tier": "web", "app": None}},
        "spec": {"replicas": None, "template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}},
    }

    out = smp(live, patch)

    assert out["metadata"]["labels"] == {"tier": "web"}
    assert "replicas" not in out["spec"]
    assert out["spec"]["template"]["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_smp_patch_replace_and_retain_keys_directives():
    live = deployment(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    live["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    patch = {
        "spec": {
            "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
            "template": {
                "spec": {"containers": [{"name": "nginx", "env": [{"name": "C", "value": "3"}, {"$patch": "replace"}]}]}
            },
        },
        "metadata": {"labels": {"$patch": "replace", "only": "this"}},
    }

    out = smp(live, patch)

    assert out["spec"]["strategy"] == {"type": "Recreate"}
    assert containers(out)[0]["env"] == [{"name": "C", "value": "3"}]
    assert out["metadata"]["labels"] == {"only": "this"}
    assert no_directives(out)


def test_smp_does_not_mutate_inputs():
    live, patch = (
        deployment(),
        template_patch(containers=[{"name": "nginx", "image": "x", "env": [{"name": "A", "value": "1"}]}]),
    )
    live_before, patch_before = copy.deepcopy(live), copy.deepcopy(patch)

    out = smp(live, patch)
    out["metadata"]["resourceVersion"] = "9"

    assert live == live_before and patch == patch_before


def test_smp_on_custom_resource_is_415():
    assert has_strategic_schema("apps", "Deployment") and has_strategic_schema("", "ConfigMap")
    assert not has_strategic_schema("example.com", "Widget")

    with pytest.raises(PatchError) as err:
        apply_strategic_merge_patch({"spec": {}}, {"spec": {"a": 1}}, "example.com", "Widget")

    assert err.value.code == 415
    assert str(err.value).startswith("the body of the request was in an unknown format - accepted media types include:")


def test_smp_missing_merge_key_is_a_bad_request():
    with pytest.raises(PatchError) as err:
        smp(deployment(), template_patch(containers=[{"image": "no-name"}]))
    assert err.value.code == 400
    assert "does not contain declared merge key: name" in err.value.message


# --------------------------------------------------------------------------- merge patch and JSON patch


def test_merge_patch_null_deletes_and_lists_replace():
    out = apply_merge_patch(
        deployment(),
        {
            "metadata": {"labels": {"app": None, "new": "x"}},
            "spec": {"template": {"spec": {"containers": [{"name": "only"}]}}, "paused": None},
        },
    )

    assert out["metadata"]["labels"] == {"new": "x"}
    assert containers(out) == [{"name": "only"}]
    assert out["spec"]["replicas"] == 2

    with pytest.raises(PatchError) as err:
        apply_merge_patch(deployment(), [1, 2])
    assert err.value.code == 400


def test_json_patch_applies_and_reports_failures_like_the_apiserver():
    out = apply_json_patch(
        deployment(),
        [
            {"op": "test", "path": "/spec/replicas", "value": 2},
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
        ],
    )
    assert out["spec"]["replicas"] == 5 and out["metadata"]["labels"]["tier"] == "web"

    for bad_op in (
        {"op": "test", "path": "/spec/replicas", "value": 3},
        {"op": "remove", "path": "/spec/nothing"},
        {"op": "replace", "path": "/no/such/path", "value": 1},
    ):
        with pytest.raises(PatchError) as err:
            apply_json_patch(deployment(), [bad_op])
        assert err.value.code == 422

    with pytest.raises(PatchError) as err:
        apply_json_patch(deployment(), {"op": "add"})
    assert err.value.code == 400


# --------------------------------------------------------------------------- managedFields


def test_ssa_create_sets_managed_fields_in_kubernetes_format():
    out = apply(None, deployment())

    assert out["metadata"]["managedFields"] == [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "apps/v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"nginx"}': {
                                    ".": {},
                                    "f:image": {},
                                    "f:name": {},
                                    "f:ports": {
                                        'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}
                                    },
                                }
                            }
                        },
                    },
                },
            },
        }
    ]
    assert out["spec"] == deployment()["spec"]


def test_update_on_create_gives_every_field_to_the_creator_with_dot_markers():
    out = record_update(
        None,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "b"}, "uid": "u1"},
            "data": {"k": "v"},
        },
        manager="kubectl-create",
        group="",
        version="v1",
        kind="ConfigMap",
        now=T0,
    )

    assert out["metadata"]["managedFields"] == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}},
        }
    ]


def test_ssa_conflicts_with_another_update_manager_on_replicas():
    live = update(None, deployment(replicas=1), "kubectl-client-side-apply")

    with pytest.raises(ApplyConflict) as err:
        apply(live, deployment(replicas=3))

    assert err.value.conflicts == [("kubectl-client-side-apply", ".spec.replicas")]
    assert str(err.value) == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas'
    )
    assert err.value.code == 409
    assert err.value.causes == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kubectl-client-side-apply" using apps/v1',
            "field": ".spec.replicas",
        }
    ]


def test_ssa_force_moves_ownership():
    live = update(None, deployment(replicas=1), "kubectl-client-side-apply")

    out = apply(live, deployment(replicas=3), force=True, now=T1)

    assert out["spec"]["replicas"] == 3
    assert "f:replicas" in entry(out, "kubectl", "Apply")["fieldsV1"]["f:spec"]
    assert "f:replicas" not in entry(out, "kubectl-client-side-apply")["fieldsV1"]["f:spec"]
    # shared fields applied with the same value stayed with the updater too
    assert "f:selector" in entry(out, "kubectl-client-side-apply")["fieldsV1"]["f:spec"]


def test_ssa_removing_a_field_from_the_config_removes_it_from_the_object():
    live = apply(None, deployment(args=["--debug"]))
    config = deployment()
    del config["spec"]["replicas"]

    out = apply(live, config, now=T1)

    assert "replicas" not in out["spec"]
    assert "args" not in containers(out)[0]
    fields = entry(out, "kubectl")["fieldsV1"]["f:spec"]
    assert "f:replicas" not in fields
    assert entry(out, "kubectl")["time"] == T1


def test_ssa_leaves_fields_owned_by_others_or_nobody():
    live = apply(None, deployment())
    live = update(live, {**live, "metadata": {**live["metadata"], "annotations": {"note": "hi"}}}, "kubectl-annotate")
    live["spec"] = {**live["spec"], "revisionHistoryLimit": 10}  # a default nobody owns

    out = apply(live, deployment(replicas=4), now=T1)

    assert out["metadata"]["annotations"] == {"note": "hi"}
    assert out["spec"]["revisionHistoryLimit"] == 10
    assert out["spec"]["replicas"] == 4


def test_two_appliers_share_a_field_until_both_drop_it():
    live = apply(None, deployment(replicas=3), manager="alice")
    live = apply(
        live,
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"}, "spec": {"replicas": 3}},
        manager="bob",
    )
    assert "f:replicas" in entry(live, "alice")["fieldsV1"]["f:spec"]
    assert "f:replicas" in entry(live, "bob")["fieldsV1"]["f:spec"]

    config = deployment()
    del config["spec"]["replicas"]
    live = apply(live, config, manager="alice", now=T1)
    assert live["spec"]["replicas"] == 3  # bob still owns it

    live = apply(
        live, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"}}, manager="bob", now=T1
    )
    assert "replicas" not in live["spec"]
    assert entry(live, "bob") is None  # an entry with no fields left is removed


def test_update_takes_fields_from_an_applier_and_apply_then_conflicts():
    live = apply(None, deployment(replicas=2))
    scaled = copy.deepcopy(live)
    scaled["spec"]["replicas"] = 5

    live = update(live, scaled, "kubectl", now=T1, subresource="scale")

    scale = entry(live, "kubectl", "Update")
    assert scale["subresource"] == "scale" and scale["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in entry(live, "kubectl", "Apply")["fieldsV1"]["f:spec"]
    with pytest.raises(ApplyConflict) as err:
        apply(live, deployment(replicas=2))
    assert str(err.value).endswith('conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas')


def test_status_writes_are_not_owned_through_the_main_resource():
    live = apply(None, deployment())
    new = {**live, "status": {"replicas": 2}}

    out = update(live, new, "kube-controller-manager", now=T1)
    assert entry(out, "kube-controller-manager") is None

    out = update(live, new, "kube-controller-manager", now=T1, subresource="status")
    assert entry(out, "kube-controller-manager")["fieldsV1"] == {"f:status": {".": {}, "f:replicas": {}}}


def test_noop_apply_keeps_the_object_and_its_times():
    live = apply(None, deployment())
    again = apply(live, deployment(), now=T1)
    assert again == live


def test_apply_rejects_managed_fields_and_wrong_kind():
    config = deployment()
    config["metadata"]["managedFields"] = [{"manager": "x"}]
    with pytest.raises(PatchError) as err:
        apply(None, config)
    assert (err.value.code, err.value.message) == (400, "metadata.managedFields must be nil")

    with pytest.raises(PatchError) as err:
        apply(None, {**deployment(), "apiVersion": "apps/v2"})
    assert err.value.code == 400


def test_apply_to_untracked_object_credits_existing_fields_to_before_first_apply():
    live = deployment(replicas=1)  # e.g. loaded from a fixture, no managedFields

    with pytest.raises(ApplyConflict) as err:
        apply(live, deployment(replicas=3))
    assert err.value.conflicts == [("before-first-apply", ".spec.replicas")]


def test_custom_resource_lists_are_atomic_and_maps_granular():
    cr = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"sizes": [1, 2], "config": {"a": 1}},
    }
    live = server_side_apply(
        None, cr, manager="op", force=False, group="example.com", version="v1", kind="Widget", now=T0
    )
    assert entry(live, "op")["fieldsV1"] == {"f:spec": {"f:config": {".": {}, "f:a": {}}, "f:sizes": {}}}

    other = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"sizes": [3], "config": {"b": 2}},
    }
    with pytest.raises(ApplyConflict) as err:
        server_side_apply(
            live, other, manager="me", force=False, group="example.com", version="v1", kind="Widget", now=T1
        )
    assert err.value.conflicts == [("op", ".spec.sizes")]


def test_ssa_null_in_config_conflicts_then_removes_the_field_when_forced():
    live = update(None, deployment(replicas=1), "kubectl-client-side-apply")
    config = deployment()
    config["spec"]["replicas"] = None

    with pytest.raises(ApplyConflict) as err:
        apply(live, config)
    assert err.value.conflicts == [("kubectl-client-side-apply", ".spec.replicas")]

    out = apply(live, config, force=True)
    assert "replicas" not in out["spec"]
    assert "f:replicas" in entry(out, "kubectl", "Apply")["fieldsV1"]["f:spec"]


def test_ssa_several_conflicts_are_listed_per_manager():
    live = update(None, deployment(replicas=1, image="nginx:1"), "helm")

    with pytest.raises(ApplyConflict) as err:
        apply(live, deployment(replicas=3, image="nginx:2"))

    assert err.value.conflicts == [
        ("helm", ".spec.replicas"),
        ("helm", '.spec.template.spec.containers[name="nginx"].image'),
    ]
    assert str(err.value) == (
        'Apply failed with 2 conflicts: conflicts with "helm" using apps/v1:\n'
        "- .spec.replicas\n"
        '- .spec.template.spec.containers[name="nginx"].image'
    )


def test_ssa_config_that_breaks_the_schema_is_invalid():
    config = deployment()
    containers(config).append({"name": "nginx", "image": "again"})

    with pytest.raises(PatchError) as err:
        apply(None, config)
    assert err.value.code == 422
    assert 'duplicate entries for key [name="nginx"]' in err.value.message


@pytest.mark.parametrize(
    "group,kind,path,live_items,patch_items,expected",
    [
        (
            "",
            "Pod",
            ("metadata", "ownerReferences"),
            [{"uid": "u1", "name": "a", "kind": "ReplicaSet"}],
            [{"uid": "u1", "name": "b"}],
            [{"uid": "u1", "name": "b", "kind": "ReplicaSet"}],
        ),
        (
            "",
            "Pod",
            ("status", "conditions"),
            [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}],
            [{"type": "Ready", "status": "True"}],
            [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
        ),
        (
            "",
            "Pod",
            ("spec", "hostAliases"),
            [{"ip": "10.0.0.1", "hostnames": ["a"]}],
            [{"ip": "10.0.0.1", "hostnames": ["b"]}],
            [{"ip": "10.0.0.1", "hostnames": ["b"]}],
        ),
        ("", "Pod", ("spec", "imagePullSecrets"), [{"name": "a"}], [{"name": "b"}], [{"name": "b"}, {"name": "a"}]),
        (
            "",
            "Pod",
            ("spec", "volumes"),
            [{"name": "v", "emptyDir": {}}],
            [{"name": "v", "emptyDir": {"medium": "Memory"}}],
            [{"name": "v", "emptyDir": {"medium": "Memory"}}],
        ),
        (
            "",
            "Pod",
            ("spec", "tolerations"),  # no patch strategy: replaced
            [{"key": "a"}],
            [{"key": "b"}],
            [{"key": "b"}],
        ),
        (
            "batch",
            "CronJob",
            ("spec", "jobTemplate", "spec", "template", "spec", "initContainers"),
            [{"name": "init", "image": "a", "volumeDevices": [{"devicePath": "/d", "name": "x"}]}],
            [{"name": "init", "volumeDevices": [{"devicePath": "/d", "name": "y"}]}],
            [{"name": "init", "image": "a", "volumeDevices": [{"devicePath": "/d", "name": "y"}]}],
        ),
        ("", "Node", ("spec", "podCIDRs"), ["10.0.0.0/24"], ["10.0.1.0/24"], ["10.0.1.0/24", "10.0.0.0/24"]),
    ],
)
def test_smp_uses_the_merge_key_of_the_field_at_that_path(group, kind, path, live_items, patch_items, expected):
    def nest(value):
        for key in reversed(path):
            value = {key: value}
        return value

    out = apply_strategic_merge_patch(nest(live_items), nest(patch_items), group, kind)

    for key in path:
        out = out[key]
    assert out == expected

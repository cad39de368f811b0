"""The official Kubernetes Python client, unchanged, against kubesim (and a real cluster with e2e).

If the client needs something kubesim does not do, kubesim is wrong.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


@pytest.fixture
def api(target):
    c = config.new_client_from_config(config_file=str(target.kubeconfig))
    yield c
    c.close()


@pytest.fixture
def core(api) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core):
    name = f"fid-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods can be created once the namespace's default ServiceAccount exists (and, before
    # Kubernetes 1.24, has its token): made by the controller-manager, right after the namespace.
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_service_account, name, field_selector="metadata.name=default", timeout_seconds=60
    ):
        sa = event["object"]
        if sa.secrets or _server_minor(core) >= 24:
            w.stop()
    yield name
    core.delete_namespace(name)


def _server_minor(core: client.CoreV1Api) -> int:
    version = client.VersionApi(core.api_client).get_code()
    return int("".join(ch for ch in version.minor if ch.isdigit()) or 0)


def _pods_run(core: client.CoreV1Api) -> bool:
    """Whether pods get to run: kubesim runs them at once; a real cluster needs nodes (the control
    plane of scripts/real-cluster has no kubelet, so its pods stay Pending)."""
    return client.VersionApi(core.api_client).get_code().git_commit == "kubesim" or bool(core.list_node().items)


NODE_IMAGE = os.environ.get("SCALE_AGENT_E2E_NODE_IMAGE")


def _web(version: str) -> client.V1Container:
    """nginx at `version`; where the real control plane has its node, which pulls no image, the
    node's own image (docs/real-cluster.md), the version in its environment."""
    if not NODE_IMAGE:
        return client.V1Container(name="web", image=f"nginx:{version}")
    return client.V1Container(
        name="web",
        image=NODE_IMAGE,
        image_pull_policy="Never",
        command=["sleep", "3600"],
        env=[client.V1EnvVar(name="VERSION", value=version)],
    )


def _version(container: client.V1Container) -> str:
    if container.env:
        return next(e.value for e in container.env if e.name == "VERSION")
    return container.image.rsplit(":", 1)[1]


def raw_get(api: client.ApiClient, path: str, accept: str):
    """GET with a chosen Accept header through the client's own TLS and credentials."""
    headers = {"Accept": accept}
    auth = api.configuration.api_key.get("authorization") or api.configuration.api_key.get("BearerToken")
    if auth:
        headers["Authorization"] = auth if auth.lower().startswith("bearer") else f"Bearer {auth}"
    return api.rest_client.pool_manager.request("GET", api.configuration.host + path, headers=headers)


def _cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"app": "fid"}), data=data)


def test_namespaces_are_listed_with_a_resource_version(core):
    result = core.list_namespace()
    names = {n.metadata.name for n in result.items}
    assert {"default", "kube-system"} <= names
    assert int(result.metadata.resource_version) > 0


def test_create_get_patch_delete_a_configmap(core, namespace):
    created = core.create_namespaced_config_map(namespace, _cm("settings", color="blue"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert core.read_namespaced_config_map("settings", namespace).data == {"color": "blue"}

    patched = core.patch_namespaced_config_map("settings", namespace, {"data": {"size": "L"}})
    assert patched.data == {"color": "blue", "size": "L"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)

    core.delete_namespaced_config_map("settings", namespace)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("settings", namespace)
    assert gone.value.status == 404
    assert json.loads(gone.value.body)["reason"] == "NotFound"


def test_deleting_a_pod_returns_the_pod(core, namespace):
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="short"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    deleted = core.delete_namespaced_pod("short", namespace)
    assert deleted.kind == "Pod" and deleted.metadata.name == "short"


def test_update_with_a_stale_resource_version_conflicts(core, namespace):
    first = core.create_namespaced_config_map(namespace, _cm("cas", v="1"))
    core.patch_namespaced_config_map("cas", namespace, {"data": {"v": "2"}})
    first.data = {"v": "3"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cas", namespace, first)
    assert err.value.status == 409
    assert core.read_namespaced_config_map("cas", namespace).data == {"v": "2"}


def test_creating_twice_is_already_exists(core, namespace):
    core.create_namespaced_config_map(namespace, _cm("twice"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(namespace, _cm("twice"))
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"


def test_watch_streams_added_modified_deleted_and_a_bookmark(core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("watched", v="1"))
    core.patch_namespaced_config_map("watched", namespace, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("watched", namespace)

    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=start,
        allow_watch_bookmarks=True,
        timeout_seconds=120,
    ):
        if event["type"] == "BOOKMARK":
            seen.append(("BOOKMARK", ""))
        else:
            seen.append((event["type"], event["object"].metadata.name))
        if ("BOOKMARK", "") in seen and ("DELETED", "watched") in seen:
            w.stop()
    # A real cluster's controller-manager adds `kube-root-ca.crt` to every new namespace, when it
    # gets to it: after the list above, its ADDED is in the watch too (a CI run saw it once).
    changes = [s for s in seen if s[0] != "BOOKMARK" and s[1] != "kube-root-ca.crt"]
    assert changes == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]
    assert ("BOOKMARK", "") in seen


def test_paginated_list_is_one_consistent_snapshot(core, namespace):
    for i in range(25):
        core.create_namespaced_config_map(namespace, _cm(f"page-{i:02d}"))
    first = core.list_namespaced_config_map(namespace, limit=10, label_selector="app=fid")
    assert len(first.items) == 10 and first.metadata._continue
    # Written after the first page: a consistent list does not show it.
    core.create_namespaced_config_map(namespace, _cm("page-99"))
    names = [i.metadata.name for i in first.items]
    token = first.metadata._continue
    while token:
        page = core.list_namespaced_config_map(namespace, limit=10, label_selector="app=fid", _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [i.metadata.name for i in page.items]
        token = page.metadata._continue
    assert names == [f"page-{i:02d}" for i in range(25)]


def test_label_and_field_selectors(core, namespace):
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a", labels={"tier": "web", "env": "prod"}))
    )
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="b", labels={"tier": "db", "env": "prod"}))
    )
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))

    def names(**kw):
        return sorted(i.metadata.name for i in core.list_namespaced_config_map(namespace, **kw).items)

    assert names(label_selector="env=prod") == ["a", "b"]
    assert names(label_selector="tier in (web),env") == ["a"]
    assert names(label_selector="!tier") == [n for n in names() if n not in ("a", "b")]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b", label_selector="env") == ["a"]
    everywhere = core.list_config_map_for_all_namespaces(field_selector=f"metadata.namespace={namespace}")
    assert sorted(i.metadata.name for i in everywhere.items) == names()


def test_deployment_rolls_out_replicasets_with_revisions(api, namespace):
    apps = client.AppsV1Api(api)
    labels = {"app": "web"}
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[_web("1.25")], termination_grace_period_seconds=1),
            ),
        ),
    )
    created = apps.create_namespaced_deployment(namespace, dep)
    assert created.metadata.generation == 1
    pods_run = _pods_run(client.CoreV1Api(api))

    def wait_rolled_out(generation: int):
        w = watch.Watch()
        for event in w.stream(
            apps.list_namespaced_deployment, namespace, field_selector="metadata.name=web", timeout_seconds=120
        ):
            d = event["object"]
            s = d.status
            if (
                s
                and s.observed_generation == generation
                and s.updated_replicas == 2
                and s.replicas == 2
                and (s.ready_replicas == 2 or not pods_run)
            ):
                w.stop()
                return d
        pytest.fail("deployment did not roll out")

    d1 = wait_rolled_out(1)
    assert d1.metadata.annotations["deployment.kubernetes.io/revision"] == "1"

    newer = client.ApiClient().sanitize_for_serialization(_web("1.26"))
    apps.patch_namespaced_deployment("web", namespace, {"spec": {"template": {"spec": {"containers": [newer]}}}})
    if not pods_run:
        # No kubelet: the new ReplicaSet (revision 2) is made, but no pod of it ever becomes
        # available, so the old one is never scaled down and the rollout never ends.
        w = watch.Watch()
        for event in w.stream(
            apps.list_namespaced_replica_set, namespace, label_selector="app=web", timeout_seconds=60
        ):
            if (event["object"].metadata.annotations or {}).get("deployment.kubernetes.io/revision") == "2":
                w.stop()
        revisions = {
            rs.metadata.annotations["deployment.kubernetes.io/revision"]
            for rs in apps.list_namespaced_replica_set(namespace, label_selector="app=web").items
        }
        assert revisions == {"1", "2"}
        return
    d2 = wait_rolled_out(2)
    assert d2.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    sets = apps.list_namespaced_replica_set(namespace, label_selector="app=web").items
    by_revision = {rs.metadata.annotations["deployment.kubernetes.io/revision"]: rs for rs in sets}
    assert set(by_revision) == {"1", "2"}
    assert by_revision["2"].spec.replicas == 2 and by_revision["1"].spec.replicas == 0
    assert _version(by_revision["2"].spec.template.spec.containers[0]) == "1.26"
    assert all(rs.metadata.owner_references[0].uid == d2.metadata.uid for rs in sets)


def test_custom_resource_definition_adds_a_kind(api, namespace):
    ext = client.ApiextensionsV1Api(api)
    group = f"g{uuid.uuid4().hex[:6]}.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        w = watch.Watch()
        for event in w.stream(
            ext.list_custom_resource_definition, field_selector=f"metadata.name=widgets.{group}", timeout_seconds=60
        ):
            conds = event["object"].status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                w.stop()
        resources = client.ApisApi(api).get_api_versions()
        assert group in [g.name for g in resources.groups]
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(
            group,
            "v1",
            namespace,
            "widgets",
            {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}},
        )
        items = custom.list_namespaced_custom_object(group, "v1", namespace, "widgets")["items"]
        assert [(i["metadata"]["name"], i["spec"]["size"]) for i in items] == [("w1", 3)]
    finally:
        ext.delete_custom_resource_definition(f"widgets.{group}")


def test_secrets_listed_as_metadata_carry_no_data(api, core, namespace):
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="creds"), string_data={"password": "hunter2"}, data={"token": "c2VjcmV0"}
        ),
    )
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    resp = raw_get(api, f"/api/v1/namespaces/{namespace}/secrets", accept)
    body = json.loads(resp.data)
    assert body["kind"] == "PartialObjectMetadataList"
    # Only "creds" is ours: a 1.20 server also puts the default ServiceAccount's token Secret here.
    assert "creds" in [i["metadata"]["name"] for i in body["items"]]
    assert b"c2VjcmV0" not in resp.data and b"hunter2" not in resp.data and b'"data"' not in resp.data

    single = raw_get(
        api,
        f"/api/v1/namespaces/{namespace}/secrets/creds",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    assert json.loads(single.data)["kind"] == "PartialObjectMetadata"
    assert b'"data"' not in single.data


def test_self_subject_access_review_for_the_admin(api):
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(verb="list", resource="secrets", namespace="default")
            )
        )
    )
    assert review.status.allowed is True


def test_limited_identity_is_forbidden_outside_its_rights(target):
    if target.limited_kubeconfig is None:
        pytest.skip("no limited identity configured for this target")
    limited = config.new_client_from_config(config_file=str(target.limited_kubeconfig))
    try:
        core = client.CoreV1Api(limited)
        with pytest.raises(ApiException) as err:
            core.list_secret_for_all_namespaces()
        assert err.value.status == 403
        status = json.loads(err.value.body)
        assert status["kind"] == "Status" and status["reason"] == "Forbidden"
        review = client.AuthorizationV1Api(limited).create_self_subject_access_review(
            client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        verb="list", resource="secrets", namespace="kube-system"
                    )
                )
            )
        )
        assert review.status.allowed is False
    finally:
        limited.close()


def test_list_items_of_built_in_kinds_carry_no_type_meta(api, core, namespace):
    core.create_namespaced_config_map(namespace, _cm("typed"))
    listed = json.loads(raw_get(api, f"/api/v1/namespaces/{namespace}/configmaps", "application/json").data)
    assert (listed["kind"], listed["apiVersion"]) == ("ConfigMapList", "v1")
    assert listed["items"] and all("kind" not in i and "apiVersion" not in i for i in listed["items"])
    one = json.loads(raw_get(api, f"/api/v1/namespaces/{namespace}/configmaps/typed", "application/json").data)
    assert (one["kind"], one["apiVersion"]) == ("ConfigMap", "v1")  # a single object is typed
    meta = json.loads(
        raw_get(
            api,
            f"/api/v1/namespaces/{namespace}/configmaps",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        ).data
    )
    assert all(i["kind"] == "PartialObjectMetadata" for i in meta["items"])


def test_every_namespace_gets_the_root_ca_configmap_and_a_default_service_account(core, namespace):
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map, namespace, field_selector="metadata.name=kube-root-ca.crt", timeout_seconds=60
    ):
        assert event["object"].data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
        w.stop()
    assert core.read_namespaced_service_account("default", namespace).metadata.name == "default"


def test_resources_sharing_one_storage_publish_the_same_storage_version_hash(api):
    core_events = json.loads(raw_get(api, "/api/v1", "application/json").data)
    by_name = {r["name"]: r for r in core_events["resources"]}
    # upstream: base64 of the first 8 bytes of sha256("/v1/Event"), the storage version's GVK
    assert by_name["events"]["storageVersionHash"] == "r2yiGXH7wu8="
    assert by_name["configmaps"]["storageVersionHash"] == "qFsyl6wFWjQ="
    assert "storageVersionHash" not in by_name["pods/status"]

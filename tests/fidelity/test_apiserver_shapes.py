"""What a client that lists and watches everything reads, byte for byte where it matters, held
against kubesim and a real kube-apiserver alike (the real one with e2e).

Each test names a difference kubesim once had from a real server (docs/kubesim.md, "Known
differences from a real apiserver"); a test that passes only on kubesim means kubesim is wrong.
Where the real control plane of the suite cannot show a behaviour (it has no scheduler, no
kubelet), the test says so and checks that part on kubesim only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client, config

TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


@dataclass
class Reply:
    status: int
    content_type: str
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data)


class Raw:
    """Raw HTTP through the official client's TLS and credentials: the bytes a server answers."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> Reply:
        headers = {"Accept": accept, "Content-Type": content_type}
        auth = self.api.configuration.api_key.get("authorization") or self.api.configuration.api_key.get("BearerToken")
        if auth:
            headers["Authorization"] = auth if auth.lower().startswith("bearer") else f"Bearer {auth}"
        data = None if body is None else json.dumps(body)
        r = self.api.rest_client.pool_manager.request(
            method, self.api.configuration.host + path, headers=headers, body=data, timeout=60
        )
        return Reply(r.status, r.headers.get("Content-Type", ""), r.data)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        reply = self.request(method, path, body, **kw)
        assert reply.status < 300, f"{method} {path}: {reply.status} {reply.data[:500]!r}"
        return reply.json()

    def watch(self, path: str, until: Any, timeout: int = 60) -> list[dict[str, Any]]:
        """Watch events from `path` (with ?watch=1 added) until `until(events)` holds or the server
        ends the watch after `timeout` seconds; the events seen."""
        headers = {"Accept": "application/json"}
        auth = self.api.configuration.api_key.get("authorization") or self.api.configuration.api_key.get("BearerToken")
        if auth:
            headers["Authorization"] = auth if auth.lower().startswith("bearer") else f"Bearer {auth}"
        sep = "&" if "?" in path else "?"
        r = self.api.rest_client.pool_manager.request(
            "GET",
            f"{self.api.configuration.host}{path}{sep}watch=1&timeoutSeconds={timeout}",
            headers=headers,
            preload_content=False,
            timeout=timeout + 30,
        )
        seen: list[dict[str, Any]] = []
        buf = b""
        try:
            for chunk in r.stream(4096):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    seen.append(json.loads(line))
                    if until(seen):
                        return seen
        finally:
            r.release_conn()
        return seen


@pytest.fixture
def api(target) -> Iterator[client.ApiClient]:
    c = config.new_client_from_config(config_file=str(target.kubeconfig))
    yield c
    c.close()


@pytest.fixture
def raw(api) -> Raw:
    return Raw(api)


@pytest.fixture
def namespace(api) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"fid-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def _pods_may_be_created(raw: Raw, namespace: str) -> None:
    """Wait until a pod can be admitted in a new namespace: its `default` ServiceAccount must exist
    (a real apiserver refuses pods until the service account controller made it), and before 1.24
    also list its token Secret. kubesim creates it at once and checks neither (docs/kubesim.md)."""
    version = raw.ok("GET", "/version")
    legacy_tokens = (int(version["major"]), int(version["minor"].rstrip("+"))) < (1, 24)
    raw.watch(
        f"/api/v1/namespaces/{namespace}/serviceaccounts?fieldSelector=metadata.name%3Ddefault",
        until=lambda seen: not legacy_tokens or bool(seen[-1]["object"].get("secrets")),
    )


def _ca_pem(kubeconfig) -> str:
    """The cluster CA of a kubeconfig: what kube-root-ca.crt must hold."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    return base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]).decode()


def _hash(gvk: str) -> str:
    return base64.b64encode(hashlib.sha256(gvk.encode()).digest()[:8]).decode()


# -- 1. lists -------------------------------------------------------------------------------------


def test_list_items_of_built_in_kinds_carry_no_kind_but_watch_events_and_tables_do(raw, namespace):
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    raw.ok("POST", base, {"metadata": {"name": "a", "labels": {"drop": "me"}}, "data": {"k": "v"}})
    listed = raw.ok("GET", base + "?labelSelector=drop%3Dme")
    assert (listed["kind"], listed["apiVersion"]) == ("ConfigMapList", "v1")
    assert [sorted(i) for i in listed["items"]] == [["data", "metadata"]]

    partial = raw.ok("GET", base + "?labelSelector=drop%3Dme", accept=PARTIAL_LIST)
    assert [(i["kind"], i["apiVersion"]) for i in partial["items"]] == [("PartialObjectMetadata", "meta.k8s.io/v1")]

    full = raw.ok("GET", base + "?labelSelector=drop%3Dme&includeObject=Object", accept=TABLE)
    assert [(r["object"]["kind"], r["object"]["apiVersion"]) for r in full["rows"]] == [("ConfigMap", "v1")]
    bare = raw.ok("GET", base + "?labelSelector=drop%3Dme&includeObject=None", accept=TABLE)
    assert [r["object"] for r in bare["rows"]] == [None]  # written, as null

    events = raw.watch(base + "?labelSelector=drop%3Dme", until=lambda seen: len(seen) >= 1)
    assert [(e["type"], e["object"]["kind"], e["object"]["apiVersion"]) for e in events] == [
        ("ADDED", "ConfigMap", "v1")
    ]

    deleted = raw.ok("DELETE", base + "?labelSelector=drop%3Dme")
    assert deleted["kind"] == "ConfigMapList"
    assert [i["metadata"]["name"] for i in deleted["items"]] == ["a"] and "kind" not in deleted["items"][0]


def test_custom_resources_keep_kind_in_list_items(api, raw, namespace):
    group = f"g{uuid.uuid4().hex[:6]}.example.com"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
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
    raw.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    try:
        raw.watch(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3Dgadgets.{group}",
            until=lambda seen: any(
                c.get("type") == "Established" and c.get("status") == "True"
                for e in seen
                for c in (e["object"].get("status") or {}).get("conditions") or []
            ),
        )
        path = f"/apis/{group}/v1/namespaces/{namespace}/gadgets"
        created = raw.request("POST", path, {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g1"}})
        while created.status == 404:  # the kind is being served a moment after Established, on a real server
            created = raw.request(
                "POST", path, {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g1"}}
            )
        assert created.status == 201, created.data
        listed = raw.ok("GET", path)
        assert listed["kind"] == "GadgetList"
        assert [(i["kind"], i["apiVersion"]) for i in listed["items"]] == [("Gadget", f"{group}/v1")]
    finally:
        raw.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}")


# -- 2. what every namespace holds ---------------------------------------------------------------


def test_every_namespace_gets_the_root_ca_configmap_and_a_default_service_account(target, raw, namespace):
    ca = _ca_pem(target.kubeconfig)
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert raw.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt")["data"] == {"ca.crt": ca}
        assert raw.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default").status == 200

    def has(name: str):
        return lambda seen: any(e["object"]["metadata"]["name"] == name for e in seen)

    cms = raw.watch(f"/api/v1/namespaces/{namespace}/configmaps", until=has("kube-root-ca.crt"))
    root = next(e["object"] for e in cms if e["object"]["metadata"]["name"] == "kube-root-ca.crt")
    assert root["data"] == {"ca.crt": ca}
    assert (
        raw.watch(f"/api/v1/namespaces/{namespace}/serviceaccounts", until=has("default"))[-1]["object"]["metadata"][
            "name"
        ]
        == "default"
    )

    # The publisher puts it back when someone edits it.
    edited = raw.ok(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt",
        {"data": {"ca.crt": "x"}},
        content_type="application/merge-patch+json",
    )
    back = raw.watch(
        f"/api/v1/namespaces/{namespace}/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt"
        f"&resourceVersion={edited['metadata']['resourceVersion']}",
        until=lambda seen: seen[-1]["object"].get("data") == {"ca.crt": ca},
    )
    assert back[-1]["object"]["data"] == {"ca.crt": ca}


def test_the_cluster_starts_with_the_kubernetes_service_and_the_system_namespaces(raw):
    names = {n["metadata"]["name"] for n in raw.ok("GET", "/api/v1/namespaces")["items"]}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    svc = raw.ok("GET", "/api/v1/namespaces/default/services/kubernetes")
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert [(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [("https", 443, "TCP")]
    assert svc["spec"]["clusterIP"] and svc["spec"]["clusterIPs"] == [svc["spec"]["clusterIP"]]


# -- 3. Events in two groups ------------------------------------------------------------------------


def test_events_are_one_storage_served_in_core_and_events_k8s_io(raw, namespace):
    core_path = f"/api/v1/namespaces/{namespace}/events"
    new_path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    regarding = {"kind": "ConfigMap", "namespace": namespace, "name": "cm", "apiVersion": "v1"}
    start = raw.ok("GET", core_path)["metadata"]["resourceVersion"]
    raw.ok(
        "POST",
        new_path,
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "new"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "example.com/probe",
            "reportingInstance": "probe-1",
            "action": "Probing",
            "reason": "Probe",
            "note": "from events.k8s.io",
            "type": "Normal",
            "regarding": regarding,
        },
    )
    raw.ok(
        "POST",
        core_path,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "old"},
            "involvedObject": regarding,
            "reason": "Probe",
            "message": "from core",
            "type": "Warning",
            "source": {"component": "probe", "host": "h1"},
            "firstTimestamp": "2024-01-01T00:00:00Z",
            "lastTimestamp": "2024-01-01T00:01:00Z",
            "count": 3,
        },
    )

    core = {i["metadata"]["name"]: i for i in raw.ok("GET", core_path)["items"]}
    assert {k: v for k, v in core["new"].items() if k != "metadata"} == {
        "involvedObject": regarding,
        "reason": "Probe",
        "message": "from events.k8s.io",
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Normal",
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "action": "Probing",
        "reportingComponent": "example.com/probe",
        "reportingInstance": "probe-1",
    }
    new = {i["metadata"]["name"]: i for i in raw.ok("GET", new_path)["items"]}
    assert {k: v for k, v in new["old"].items() if k != "metadata"} == {
        "eventTime": None,
        "reason": "Probe",
        "regarding": regarding,
        "note": "from core",
        "type": "Warning",
        "deprecatedSource": {"component": "probe", "host": "h1"},
        "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
        "deprecatedLastTimestamp": "2024-01-01T00:01:00Z",
        "deprecatedCount": 3,
    }
    assert new["old"]["metadata"]["uid"] == core["old"]["metadata"]["uid"]

    # A watch of either group sees the other's writes, each in its own shape.
    seen = raw.watch(f"{core_path}?resourceVersion={start}", until=lambda s: len(s) >= 2)
    assert [(e["type"], e["object"]["metadata"]["name"], e["object"]["apiVersion"]) for e in seen] == [
        ("ADDED", "new", "v1"),
        ("ADDED", "old", "v1"),
    ]
    seen = raw.watch(f"{new_path}?resourceVersion={start}", until=lambda s: len(s) >= 2)
    assert [(e["object"]["metadata"]["name"], e["object"]["apiVersion"], e["object"].get("note")) for e in seen] == [
        ("new", "events.k8s.io/v1", "from events.k8s.io"),
        ("old", "events.k8s.io/v1", "from core"),
    ]

    # Each group selects by its own field names.
    def names(path: str) -> list[str]:
        return sorted(i["metadata"]["name"] for i in raw.ok("GET", path)["items"])

    assert names(f"{new_path}?fieldSelector=regarding.name%3Dcm,type%3DWarning") == ["old"]
    assert names(f"{new_path}?fieldSelector=reportingController%3Dexample.com/probe") == ["new"]
    assert names(f"{core_path}?fieldSelector=involvedObject.name%3Dcm,reportingComponent%3Dexample.com/probe") == [
        "new"
    ]
    wrong = raw.get(f"{new_path}?fieldSelector=involvedObject.name%3Dcm")
    assert (wrong.status, wrong.json()["message"]) == (400, "field label not supported: involvedObject.name")

    # A strict API for new Events, the legacy rules for core ones.
    bad = raw.request("POST", new_path, {"metadata": {"name": "bad"}, "note": "x"}).json()
    assert (bad["code"], [c["field"] for c in bad["details"]["causes"]]) == (
        422,
        ["involvedObject.namespace", "eventTime", "type"],
    )
    assert bad["message"].startswith('Event "bad" is invalid: [involvedObject.namespace: ')


def test_both_event_resources_publish_one_storage_version_hash(raw):
    def resource(path: str, name: str) -> dict[str, Any]:
        return next(r for r in raw.ok("GET", path)["resources"] if r["name"] == name)

    core, new = resource("/api/v1", "events"), resource("/apis/events.k8s.io/v1", "events")
    assert core["storageVersionHash"] == new["storageVersionHash"] == _hash("/v1/Event")
    assert resource("/api/v1", "pods")["storageVersionHash"] == _hash("/v1/Pod")
    assert resource("/apis/apps/v1", "deployments")["storageVersionHash"] == _hash("apps/v1/Deployment")
    assert resource("/apis/batch/v1", "jobs")["storageVersionHash"] == _hash("batch/v1/Job")
    assert "storageVersionHash" not in resource("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews")


# -- 4. pods no node takes ---------------------------------------------------------------------------


def test_a_pod_no_node_matches_stays_pending_and_its_job_never_completes(target, api, raw, namespace):
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    nowhere = {"scale-agent.io/no-such-node": "true"}
    _pods_may_be_created(raw, namespace)
    container = client.V1Container(name="c", image="busybox")
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="stuck"),
            spec=client.V1PodSpec(containers=[container], node_selector=nowhere),
        ),
    )
    batch.create_namespaced_job(
        namespace,
        client.V1Job(
            metadata=client.V1ObjectMeta(name="hangs"),
            spec=client.V1JobSpec(
                backoff_limit=0,
                template=client.V1PodTemplateSpec(
                    spec=client.V1PodSpec(containers=[container], restart_policy="Never", node_selector=nowhere)
                ),
            ),
        ),
    )

    # The job controller starts its pod and counts it active; it never succeeds.
    events = raw.watch(
        f"/apis/batch/v1/namespaces/{namespace}/jobs?fieldSelector=metadata.name%3Dhangs",
        until=lambda seen: (seen[-1]["object"].get("status") or {}).get("active") == 1,
    )
    job = events[-1]["object"]
    assert job["status"]["active"] == 1 and not job["status"].get("succeeded")
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Complete"]
    pods = core.list_namespaced_pod(namespace, label_selector="job-name=hangs").items
    assert [p.status.phase for p in pods] == ["Pending"]

    stuck = core.read_namespaced_pod("stuck", namespace)
    assert stuck.status.phase == "Pending" and not stuck.spec.node_name
    if not target.is_kubesim and not core.list_node().items:
        return  # a real control plane without its node has no scheduler: nobody writes why the pod waits
    scheduled = [c for c in stuck.status.conditions or [] if c.type == "PodScheduled"]
    assert [(c.status, c.reason) for c in scheduled] == [("False", "Unschedulable")]
    # 1.20 ends "node affinity.", later versions (which kubesim follows) "node affinity/selector."
    assert scheduled[0].message.startswith("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity")
    assert [c.type for c in pods[0].status.conditions or []] == ["PodScheduled"]


def test_pods_carry_the_defaults_and_status_a_real_apiserver_gives_them(raw, namespace):
    """What create writes (defaulting, admission, PrepareForCreate), read back before any
    controller, scheduler or kubelet could change it: the dry-run answer."""
    _pods_may_be_created(raw, namespace)
    pod = raw.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods?dryRun=All",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]},
        },
    )
    assert "generation" not in pod["metadata"]
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    spec = pod["spec"]
    assert {
        k: spec[k]
        for k in (
            "restartPolicy",
            "terminationGracePeriodSeconds",
            "dnsPolicy",
            "securityContext",
            "schedulerName",
            "serviceAccountName",
            "enableServiceLinks",
            "priority",
        )
    } == {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "enableServiceLinks": True,
        "priority": 0,
    }
    c = spec["containers"][0]
    assert {
        k: c[k] for k in ("imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy", "resources")
    } == {
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "resources": {},
    }
    assert c["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert sorted(t["key"] for t in spec["tolerations"]) == [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/var/run/secrets/kubernetes.io/serviceaccount"]


# -- 5. other shapes a client reads ------------------------------------------------------------------


def test_objects_created_carry_the_metadata_and_defaults_of_their_kind(raw, namespace):
    base = f"/api/v1/namespaces/{namespace}"
    secret = raw.ok("POST", f"{base}/secrets", {"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}})
    assert (secret["type"], secret["data"], "stringData" in secret) == ("Opaque", {"password": "aHVudGVyMg=="}, False)
    svc = raw.ok(
        "POST",
        f"{base}/services",
        {"metadata": {"name": "svc"}, "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}},
    )
    assert "generation" not in svc["metadata"]
    assert svc["spec"]["clusterIP"] and svc["spec"]["clusterIPs"] == [svc["spec"]["clusterIP"]]
    assert svc["status"] == {"loadBalancer": {}}
    cm = raw.ok("POST", f"{base}/configmaps?fieldManager=probe", {"metadata": {"name": "cm"}, "data": {"a": "b"}})
    assert "generation" not in cm["metadata"] and cm["metadata"]["resourceVersion"].isdigit()
    assert [
        (m["manager"], m["operation"], m["apiVersion"], m["fieldsV1"]) for m in cm["metadata"]["managedFields"]
    ] == [("probe", "Update", "v1", {"f:data": {".": {}, "f:a": {}}})]
    deploy = raw.ok(
        "POST",
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "metadata": {"name": "d"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
    )
    assert deploy["metadata"]["generation"] == 1
    template = deploy["spec"]["template"]
    assert template["metadata"] == {"creationTimestamp": None, "labels": {"app": "d"}}
    assert (template["spec"]["dnsPolicy"], template["spec"]["containers"][0]["imagePullPolicy"]) == (
        "ClusterFirst",
        "Always",
    )
    assert "serviceAccountName" not in template["spec"]  # admission is for pods, not templates


def test_error_status_bodies(raw, namespace):
    missing = raw.get(f"/api/v1/namespaces/{namespace}/configmaps/nope").json()
    assert missing["details"] == {"name": "nope", "kind": "configmaps"}  # no empty group
    assert raw.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/nope").json()["details"] == {
        "name": "nope",
        "group": "apps",
        "kind": "deployments",
    }
    scale = raw.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/nope/scale").json()
    assert scale["message"] == 'deployments/scale.apps "nope" not found'
    unknown = raw.get("/api/v1/nope").json()
    assert (unknown["code"], unknown["reason"], unknown["details"]) == (404, "NotFound", {})

    # A group nobody serves is not even an API path: plain text, not a Status.
    for path in ("/apis/nope.example.com", "/apis/nope.example.com/v1", "/apis/nope.example.com/v1/things"):
        reply = raw.get(path)
        assert (reply.status, reply.content_type.split(";")[0], reply.data) == (
            404,
            "text/plain",
            b"404 page not found\n",
        )

    raw.ok("POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "c"}})
    twice = raw.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "c"}}).json()
    assert (twice["code"], twice["reason"], twice["details"]) == (
        409,
        "AlreadyExists",
        {"name": "c", "kind": "configmaps"},
    )
    stale = raw.request(
        "PUT", f"/api/v1/namespaces/{namespace}/configmaps/c", {"metadata": {"name": "c", "resourceVersion": "1"}}
    ).json()
    assert (stale["code"], stale["reason"]) == (409, "Conflict")

    bad = raw.request(
        "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", {"metadata": {"name": "d"}, "spec": {}}
    ).json()
    assert (bad["code"], bad["reason"]) == (422, "Invalid")
    assert bad["message"].startswith('Deployment.apps "d" is invalid: [spec.selector: Required value, ')
    assert {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.selector"} in bad["details"][
        "causes"
    ]

    field = raw.get(f"/api/v1/namespaces/{namespace}/configmaps?fieldSelector=data.a%3Db").json()
    assert (field["code"], field["message"]) == (
        400,
        '"data.a" is not a known field selector: only "metadata.name", "metadata.namespace"',
    )


def test_discovery_documents(raw):
    core = raw.ok("GET", "/api/v1")
    assert "apiVersion" not in core and (core["kind"], core["groupVersion"]) == ("APIResourceList", "v1")
    groups = [g["name"] for g in raw.ok("GET", "/apis")["groups"]]
    both = [
        g
        for g in (
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "apiextensions.k8s.io",
            "coordination.k8s.io",
        )
    ]
    assert [g for g in groups if g in both] == both
    statuses = next(r for r in core["resources"] if r["name"] == "componentstatuses")
    assert statuses["verbs"] == ["get", "list"] and "storageVersionHash" not in statuses
    listed = raw.ok("GET", "/api/v1/componentstatuses")
    assert listed["kind"] == "ComponentStatusList" and "resourceVersion" not in listed["metadata"]
    assert {"scheduler", "controller-manager", "etcd-0"} <= {i["metadata"]["name"] for i in listed["items"]}
    refused = raw.get("/api/v1/componentstatuses?watch=1")
    assert (refused.status, refused.json()["message"]) == (
        405,
        'watch is not supported on resources of kind "componentstatuses"',
    )
    assert any(r["name"] == "podtemplates" for r in core["resources"])


def test_tables_of_events_and_service_accounts(raw, namespace):
    raw.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/events",
        {
            "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
            "reason": "Pulled",
            "message": "pulled ",
            "type": "Normal",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2024-01-01T00:00:00Z",
            "lastTimestamp": "2024-01-01T00:00:00Z",
            "count": 2,
        },
    )
    for path in (f"/api/v1/namespaces/{namespace}/events", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"):
        table = raw.ok("GET", path, accept=TABLE)
        assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1),
        ]
        cells = table["rows"][0]["cells"]
        assert cells[1:7] + cells[8:] == ["Normal", "Pulled", "pod/p", "", "kubelet, n1", "pulled", 2, "e"]
    cms = raw.ok("GET", f"/api/v1/namespaces/{namespace}/configmaps", accept=TABLE)
    assert [(c["name"], c["type"]) for c in cms["columnDefinitions"]] == [
        ("Name", "string"),
        ("Data", "string"),
        ("Age", "string"),
    ]
    sas = raw.ok("GET", "/api/v1/namespaces/default/serviceaccounts", accept=TABLE)
    assert [c["name"] for c in sas["columnDefinitions"]] == ["Name", "Secrets", "Age"]

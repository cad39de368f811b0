"""`scale-agent get/apply/delete`: the pure parts, and the commands against a stand-in hub in-process.

The stand-in hub is a stdlib HTTP server that records what it is sent and answers with task
documents shaped as the operations API contract says, so the request bodies and the rendering of
task results are checked without the real operations API.
"""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaleagent import cli
from scaleagent.cli import kubectl
from scaleagent.cli.errors import CliError
from scaleagent.cli.kinds import KindInfo, object_name, parse_resource_args, resolve_kind
from scaleagent.cli.kubectl import sse_events, watch_rows
from scaleagent.cli.manifests import (
    DeleteTarget,
    apply_output,
    build_delete_operations,
    build_deploy_operation,
    delete_output,
    load_manifests,
    read_manifest_files,
)
from scaleagent.cli.printers import TablePrinter, list_document, table_columns
from scaleagent.kube.printing import human_duration
from scaleagent.kube.selectors import parse_label_selector

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def ts(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- kinds -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "group", "resource", "namespaced"),
    [
        ("deployment", "Deployment", "apps", "deployments", True),
        ("deployments", "Deployment", "apps", "deployments", True),
        ("deploy", "Deployment", "apps", "deployments", True),
        ("Deployment.apps", "Deployment", "apps", "deployments", True),
        ("deployments.apps", "Deployment", "apps", "deployments", True),
        ("DEPLOY", "Deployment", "apps", "deployments", True),
        ("po", "Pod", "", "pods", True),
        ("pods", "Pod", "", "pods", True),
        ("svc", "Service", "", "services", True),
        ("cm", "ConfigMap", "", "configmaps", True),
        ("ns", "Namespace", "", "namespaces", False),
        ("rs", "ReplicaSet", "apps", "replicasets", True),
        ("job", "Job", "batch", "jobs", True),
        ("jobs.batch", "Job", "batch", "jobs", True),
        ("ing", "Ingress", "networking.k8s.io", "ingresses", True),
        ("endpoints", "Endpoints", "", "endpoints", True),
        ("crd", "CustomResourceDefinition", "apiextensions.k8s.io", "customresourcedefinitions", False),
        ("ev", "Event", "", "events", True),
    ],
)
def test_kubectl_names_resolve_to_the_kind(text, kind, group, resource, namespaced):
    info = resolve_kind(text)
    assert (info.kind, info.group, info.resource, info.namespaced, info.known) == (
        kind,
        group,
        resource,
        namespaced,
        True,
    )


@pytest.mark.parametrize(
    ("text", "kind", "group", "resource"),
    [
        ("widgets", "widget", None, "widgets"),
        ("widget", "widget", None, "widgets"),
        ("Widget", "Widget", None, "widgets"),
        ("policies", "policy", None, "policies"),
        ("boxes", "box", None, "boxes"),
        ("widgets.example.com", "widget", "example.com", "widgets"),
        ("Widget.Example.com", "Widget", "example.com", "widgets"),
        ("deployments.example.com", "deployment", "example.com", "deployments"),  # not apps: not the built-in
    ],
)
def test_other_names_resolve_by_rule(text, kind, group, resource):
    info = resolve_kind(text)
    assert (info.kind, info.group, info.resource, info.namespaced, info.known) == (kind, group, resource, None, False)


def test_a_kinds_names_for_the_hub_and_for_messages():
    deploy, cm, widget = resolve_kind("deploy"), resolve_kind("cm"), resolve_kind("widgets")
    assert (deploy.query, deploy.token, deploy.resource_ref) == (
        "Deployment.apps",
        "deployment.apps",
        "deployments.apps",
    )
    assert (cm.query, cm.token, cm.resource_ref) == ("ConfigMap", "configmap", "configmaps")
    assert (widget.query, widget.token, widget.resource_ref) == ("widget", "widget", "widgets")
    assert (
        object_name({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"}})
        == "deployment.apps/nginx"
    )
    assert object_name({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}) == "configmap/x"


def test_resource_arguments_take_kubectls_forms():
    (a,) = parse_resource_args(["deploy", "web", "api"])
    assert (a.kind.kind, a.names) == ("Deployment", ("web", "api"))
    a, b = parse_resource_args(["deploy,svc"])
    assert (a.kind.kind, b.kind.kind, a.names, b.names) == ("Deployment", "Service", (), ())
    a, b = parse_resource_args(["deploy/web", "cm/settings"])
    assert (a.kind.kind, a.names, b.kind.kind, b.names) == ("Deployment", ("web",), "ConfigMap", ("settings",))
    with pytest.raises(CliError, match="no need to specify a resource type as a separate argument"):
        parse_resource_args(["deploy", "cm/settings"])
    with pytest.raises(CliError, match="must specify the type of resource"):
        parse_resource_args([])
    with pytest.raises(CliError, match="single resource and name"):
        parse_resource_args(["deploy/"])


# --- ages and tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (51 * 3600, "2d3h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (735 * 86400, "2y5d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_like_kubectl(seconds, text):
    assert human_duration(seconds) == text


def deployment(name: str, age: float, ready: int = 2, replicas: int = 2, ns: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": ts(age)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}},
        },
        "status": {"readyReplicas": ready, "updatedReplicas": replicas, "availableReplicas": ready},
    }


def render(group: str, kind: str, rows: list[tuple[str, dict[str, Any]]], **options: Any) -> str:
    out = io.StringIO()
    wide = options.pop("wide", False)
    TablePrinter(table_columns(group, kind, wide=wide), out, **options).print_rows(rows, NOW)
    return out.getvalue()


def test_a_deployment_table_is_kubectls_to_the_space():
    text = render("apps", "Deployment", [("a", deployment("nginx", 3 * 60 + 2, ready=1, replicas=3))])
    assert text == ("NAME    READY   UP-TO-DATE   AVAILABLE   AGE\nnginx   1/3     3            1           3m2s\n")


def test_account_and_namespace_columns_come_first():
    rows = [("prod-east", deployment("nginx", 5)), ("prod-west", deployment("api", 2 * 86400, ns="default"))]
    text = render("apps", "Deployment", rows, account=True, namespace=True)
    assert text == (
        "ACCOUNT     NAMESPACE   NAME    READY   UP-TO-DATE   AVAILABLE   AGE\n"
        "prod-east   web         nginx   2/2     2            2           5s\n"
        "prod-west   default     api     2/2     2            2           2d\n"
    )


def test_wide_and_kind_prefixed_names_and_no_headers():
    text = render("apps", "Deployment", [("a", deployment("nginx", 5))], wide=True, name_prefix=True, headers=False)
    assert text.split() == ["deployment.apps/nginx", "2/2", "2", "2", "5s", "c", "nginx:1.27", "app=nginx"]


def test_rows_printed_later_line_up_with_the_table_and_widen_it_when_needed():
    out = io.StringIO()
    printer = TablePrinter(table_columns("", "ConfigMap"), out)
    printer.print_rows([("a", {"kind": "ConfigMap", "metadata": {"name": "a", "creationTimestamp": ts(1)}})], NOW)
    printer.print_rows(
        [("a", {"kind": "ConfigMap", "metadata": {"name": "b", "creationTimestamp": ts(2)}, "data": {"k": "v"}})], NOW
    )
    printer.print_rows([("a", {"kind": "ConfigMap", "metadata": {"name": "a-much-longer-name"}})], NOW)
    assert out.getvalue() == (
        "NAME   DATA   AGE\na      0      1s\nb      1      2s\na-much-longer-name   0      <unknown>\n"
    )


def cells(group: str, kind: str, obj: dict[str, Any], wide: bool = False) -> dict[str, str]:
    columns = table_columns(group, kind, wide=wide)
    return {header: fn(obj, NOW) for header, fn in columns}


def test_columns_per_kind():
    assert [h for h, _ in table_columns("", "Pod")] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [h for h, _ in table_columns("apps", "ReplicaSet")] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert [h for h, _ in table_columns("batch", "Job")] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert [h for h, _ in table_columns("", "Service")] == [
        "NAME",
        "TYPE",
        "CLUSTER-IP",
        "EXTERNAL-IP",
        "PORT(S)",
        "AGE",
    ]
    assert [h for h, _ in table_columns("", "ConfigMap")] == ["NAME", "DATA", "AGE"]
    assert [h for h, _ in table_columns("", "Namespace")] == ["NAME", "STATUS", "AGE"]
    assert [h for h, _ in table_columns("example.com", "Widget")] == ["NAME", "AGE"]
    assert [h for h, _ in table_columns("", "Deployment")] == ["NAME", "AGE"], "the group matters"


def pod(**status: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "creationTimestamp": ts(10)},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": status,
    }


def test_pod_status_ready_and_restarts_like_kubectl():
    running = pod(
        phase="Running",
        containerStatuses=[
            {"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}},
            {
                "name": "b",
                "ready": True,
                "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"finishedAt": ts(300)}},
            },
        ],
    )
    assert cells("", "Pod", running) == {
        "NAME": "p",
        "READY": "2/2",
        "STATUS": "Running",
        "RESTARTS": "2 (5m ago)",
        "AGE": "10s",
    }
    crashing = pod(
        phase="Running",
        containerStatuses=[
            {"name": "a", "ready": False, "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ],
    )
    assert (cells("", "Pod", crashing)["STATUS"], cells("", "Pod", crashing)["READY"]) == ("CrashLoopBackOff", "0/2")
    done = pod(
        phase="Succeeded",
        containerStatuses=[{"name": "a", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}],
    )
    assert cells("", "Pod", done)["STATUS"] == "Completed"
    killed = pod(phase="Failed", containerStatuses=[{"name": "a", "state": {"terminated": {"exitCode": 137}}}])
    assert cells("", "Pod", killed)["STATUS"] == "ExitCode:137"
    init = pod(phase="Pending", initContainerStatuses=[{"name": "i", "state": {"running": {}}}])
    init["spec"]["initContainers"] = [{"name": "i"}]
    assert cells("", "Pod", init)["STATUS"] == "Init:0/1"
    going = pod(phase="Running")
    going["metadata"]["deletionTimestamp"] = ts(1)
    assert cells("", "Pod", going)["STATUS"] == "Terminating"
    assert cells("", "Pod", pod(phase="Pending"), wide=True)["IP"] == "<none>"


def test_service_job_replicaset_namespace_and_configmap_cells():
    lb = {
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.0.0.7",
            "selector": {"app": "web"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        },
    }
    assert cells("", "Service", lb, wide=True) == {
        "NAME": "s",
        "TYPE": "LoadBalancer",
        "CLUSTER-IP": "10.0.0.7",
        "EXTERNAL-IP": "<pending>",
        "PORT(S)": "80:30080/TCP,53/UDP",
        "AGE": "<unknown>",
        "SELECTOR": "app=web",
    }
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}, {"hostname": "lb.example.com"}]}}
    assert cells("", "Service", lb)["EXTERNAL-IP"] == "1.2.3.4,lb.example.com"
    headless = {"kind": "Service", "metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}
    assert [cells("", "Service", headless)[c] for c in ("TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)")] == [
        "ClusterIP",
        "None",
        "<none>",
        "<none>",
    ]

    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"completions": 3},
        "status": {"succeeded": 1, "startTime": ts(90)},
    }
    assert [cells("batch", "Job", job)[c] for c in ("STATUS", "COMPLETIONS", "DURATION")] == ["Running", "1/3", "90s"]
    job["status"] |= {
        "succeeded": 3,
        "completionTime": ts(30),
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
    }
    assert [cells("batch", "Job", job)[c] for c in ("STATUS", "COMPLETIONS", "DURATION")] == ["Complete", "3/3", "60s"]
    parallel = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 4}, "status": {}}
    assert [cells("batch", "Job", parallel)[c] for c in ("COMPLETIONS", "DURATION")] == ["0/1 of 4", ""]

    rs = {"kind": "ReplicaSet", "metadata": {"name": "r"}, "spec": {"replicas": 3}, "status": {"replicas": 2}}
    assert [cells("apps", "ReplicaSet", rs)[c] for c in ("DESIRED", "CURRENT", "READY")] == ["3", "2", "0"]
    ns = {"kind": "Namespace", "metadata": {"name": "n"}, "status": {"phase": "Terminating"}}
    assert cells("", "Namespace", ns)["STATUS"] == "Terminating"
    cm = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": "AA=="}}
    assert cells("", "ConfigMap", cm)["DATA"] == "2"


def test_several_objects_are_a_list_in_kubectls_shape():
    assert list_document([{"a": 1}]) == {
        "apiVersion": "v1",
        "items": [{"a": 1}],
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


# --- manifest files --------------------------------------------------------------------------------


def test_multi_document_files_lists_and_empty_documents():
    text = """
---
apiVersion: v1
kind: ConfigMap
metadata: {name: one, creationTimestamp: 2024-01-02T03:04:05Z}
---
# only a comment
---
apiVersion: v1
kind: List
items:
- {apiVersion: apps/v1, kind: Deployment, metadata: {name: two}}
- {apiVersion: v1, kind: Service, metadata: {name: three}}
---
"""
    objects = load_manifests(text, "app.yaml")
    assert [o["metadata"]["name"] for o in objects] == ["one", "two", "three"]
    assert objects[0]["metadata"]["creationTimestamp"] == "2024-01-02T03:04:05Z", "kept a string, as JSON needs"
    json.dumps(objects)
    assert (
        load_manifests('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}}', "x.json")[0]["metadata"][
            "name"
        ]
        == "j"
    )


def test_bad_yaml_names_the_file_and_line():
    with pytest.raises(CliError) as e:
        load_manifests("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: [a\n", "bad.yaml")
    message = str(e.value)
    assert message.startswith("error: error parsing bad.yaml: line ") and "\n" not in message
    with pytest.raises(CliError, match=r"error parsing bad\.yaml: line 2: .*mapping values are not allowed"):
        load_manifests("a: b\nc: d: e\n", "bad.yaml")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n- b\n", "not a Kubernetes object"),
        ("kind: ConfigMap\nmetadata: {name: x}\n", r"\[apiVersion not set\]"),
        ("apiVersion: v1\nmetadata: {name: x}\n", r"\[kind not set\]"),
        ("apiVersion: v1\nkind: ConfigMap\n", r"\[metadata.name not set\]"),
        (
            "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: ConfigMap}]\n",
            r"item 0: .*metadata.name not set",
        ),
    ],
)
def test_documents_that_are_not_objects_are_refused_with_the_file(text, problem):
    with pytest.raises(CliError, match=rf'error validating "m\.yaml".*{problem}'):
        load_manifests(text, "m.yaml")


def test_files_directories_and_stdin(tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: one}\n")
    d = tmp_path / "dir"
    d.mkdir()
    (d / "b.yml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
    (d / "a.json").write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}')
    (d / "notes.txt").write_text("not a manifest")
    stdin = io.StringIO("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    objects = read_manifest_files([str(one), str(d), "-"], stdin=stdin)
    assert [o["metadata"]["name"] for o in objects] == ["one", "a", "b", "s"]
    with pytest.raises(CliError, match=r'the path ".*missing.yaml" does not exist'):
        read_manifest_files([str(tmp_path / "missing.yaml")])
    (tmp_path / "empty.yaml").write_text("---\n---\n")
    with pytest.raises(CliError, match="no objects passed to apply"):
        read_manifest_files([str(tmp_path / "empty.yaml")])
    with pytest.raises(CliError, match=r"error parsing STDIN: line 2"):
        read_manifest_files(["-"], stdin=io.StringIO("a: [\n"))


# --- operations: request bodies and task results ----------------------------------------------------

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx", "namespace": "web"}}


def test_the_deploy_operation_carries_every_manifest():
    assert build_deploy_operation("prod", [DEPLOY, CM]) == [
        {"deployManifest": {"account": "prod", "manifests": [DEPLOY, CM]}}
    ]
    assert build_deploy_operation("prod", [CM], namespace="web", field_manager="me") == [
        {"deployManifest": {"account": "prod", "manifests": [CM], "namespaceOverride": "web", "fieldManager": "me"}}
    ]


def test_delete_operations_by_name_and_by_selector():
    targets = [DeleteTarget("deployment.apps nginx", "web"), DeleteTarget("namespace old", "")]
    assert build_delete_operations("prod", targets=targets, cascade="foreground", grace_period=5) == [
        {
            "deleteManifest": {
                "account": "prod",
                "manifestName": "deployment.apps nginx",
                "location": "web",
                "options": {"propagationPolicy": "Foreground", "gracePeriodSeconds": 5},
            }
        },
        {
            "deleteManifest": {
                "account": "prod",
                "manifestName": "namespace old",
                "location": "",
                "options": {"propagationPolicy": "Foreground", "gracePeriodSeconds": 5},
            }
        },
    ]
    assert build_delete_operations("prod", kind=resolve_kind("deploy"), selector="app=x", location="web") == [
        {
            "deleteManifest": {
                "account": "prod",
                "kinds": ["deployment.apps"],
                "labelSelector": "app=x",
                "location": "web",
                "options": {"propagationPolicy": "Background"},
            }
        }
    ]


def task(state: str, result: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "t1",
        "state": state,
        "status": {
            "phase": "DEPLOY",
            "status": extra.pop("last", "done"),
            "completed": state != "running",
            "failed": state == "failed",
            "retryable": False,
        },
        "history": [],
        "resultObjects": [result] if result else [],
        "startTimeMs": 1,
        "endTimeMs": 2,
        **extra,
    }


def test_a_completed_apply_prints_kubectls_server_side_lines():
    applied = [{**DEPLOY, "status": {}}, CM]
    result = {
        "manifests": applied,
        "manifestNamesByNamespace": {"web": ["deployment nginx"]},
        "createdArtifacts": [],
        "boundArtifacts": [],
    }
    objects, lines, error = apply_output(task("completed", result))
    assert objects == applied and error is None
    assert lines == ["deployment.apps/nginx serverside-applied", "configmap/x serverside-applied"]


def test_a_failed_apply_prints_what_was_applied_and_the_reason():
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "y"}}
    result = {
        "manifests": [CM, DEPLOY, svc],
        "manifestNamesByNamespace": {},
        "createdArtifacts": [],
        "boundArtifacts": [],
        "failedManifest": "deployment nginx",
        "notApplied": ["service y"],
    }
    failed = task(
        "failed",
        result,
        exception={"message": 'deployments.apps "nginx" is forbidden', "code": 403, "reason": "Forbidden"},
    )
    objects, lines, error = apply_output(failed)
    assert lines == ["configmap/x serverside-applied"] and objects == [CM]
    assert error == 'deployments.apps "nginx" is forbidden'
    assert apply_output(task("failed", last="agent gone"))[2] == "agent gone", "no exception: the last status"


def test_delete_results_print_kubectls_lines():
    result = {
        "manifestNamesByNamespace": {"web": ["deployment nginx"]},
        "deletedManifests": [
            {"kind": "Deployment", "apiVersion": "apps/v1", "namespace": "web", "name": "nginx"},
            {"kind": "ConfigMap", "apiVersion": "v1", "namespace": "web", "name": "x"},
        ],
    }
    assert delete_output(task("completed", result)) == (
        ['deployment.apps "nginx" deleted', 'configmap "x" deleted'],
        [],
        None,
    )
    assert delete_output(task("failed", exception={"message": "nope"})) == ([], [], "nope")
    result["alreadyGone"] = [
        {"kind": "Deployment", "apiVersion": "apps/v1", "namespace": "web", "name": "old"},
        {"kind": "Widget", "apiVersion": "example.com/v1", "namespace": "web", "name": "w"},
    ]
    assert delete_output(task("completed", result))[1] == [
        'Error from server (NotFound): deployments.apps "old" not found',
        'Error from server (NotFound): widgets.example.com "w" not found',
    ]


# --- watch -----------------------------------------------------------------------------------------


def sse(*events: tuple[str, dict[str, Any]]) -> list[bytes]:
    lines = [b": heartbeat\n", b"\n"]
    for event, data in events:
        lines += [f"event: {event}\n".encode(), f"data: {json.dumps(data)}\n".encode(), b"\n"]
    return lines


def change(
    kind_type: str, name: str, rv: str, *, labels: dict[str, str] | None = None, api: str = "v1", account: str = "a"
) -> dict[str, Any]:
    obj = {
        "apiVersion": api,
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "web", "resourceVersion": rv, "labels": labels or {}},
    }
    return {
        "account": account,
        "type": kind_type,
        "kind": "ConfigMap",
        "group": "",
        "namespace": "web",
        "name": name,
        "resourceVersion": rv,
        "object": obj,
    }


def test_server_sent_events_are_parsed_and_heartbeats_skipped():
    assert list(sse_events([b": heartbeat\n", b"\n", b"event: ADDED\n", b'data: {"a": 1}\n', b"\n"])) == [
        ("ADDED", '{"a": 1}')
    ]


def test_watch_rows_filter_what_the_hub_does_not_and_skip_what_was_listed():
    (target,) = parse_resource_args(["cm"])
    listed = {("a", "", "ConfigMap", "web", "old"): "10"}
    events = sse(
        ("MODIFIED", change("MODIFIED", "old", "9")),  # older than the listing: already shown
        ("MODIFIED", change("MODIFIED", "old", "10")),  # the listing itself
        ("ADDED", change("ADDED", "new", "11", labels={"app": "web"})),
        ("ADDED", change("ADDED", "db", "12", labels={"app": "db"})),
        ("MODIFIED", change("MODIFIED", "old", "13")),
        ("DELETED", change("DELETED", "new", "14", labels={"app": "web"})),
    )
    rows = list(watch_rows(sse_events(events), target, None, dict(listed)))
    assert [(r[1]["metadata"]["name"], r[1]["metadata"]["resourceVersion"]) for r in rows] == [
        ("new", "11"),
        ("db", "12"),
        ("old", "13"),
        ("new", "14"),
    ]
    rows = list(watch_rows(sse_events(events), target, parse_label_selector("app=web"), dict(listed)))
    assert [r[1]["metadata"]["name"] for r in rows] == ["new", "new"]
    (named,) = parse_resource_args(["cm", "db"])
    assert [r[1]["metadata"]["name"] for r in watch_rows(sse_events(events), named, None, {})] == ["db"]


def test_a_watch_the_hub_ends_is_an_error():
    (target,) = parse_resource_args(["cm"])
    with pytest.raises(CliError, match="the hub ended the watch: too slow"):
        list(watch_rows(sse_events(sse(("error", {"message": "too slow"}))), target, None, {}))


# --- the commands, against a stand-in hub ----------------------------------------------------------


class FakeHub:
    """Records requests; answers objects, accounts, ops and tasks from what the test put in."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.task: dict[str, Any] = task("completed")
        self.running_polls = 0
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlparse

                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                hub.requests.append(("GET", url.path, query))
                if url.path == "/api/v1/accounts":
                    return self.answer(200, [{"name": n} for n in sorted(hub.objects)])
                if url.path.startswith("/api/v1/accounts/") and url.path.endswith("/objects"):
                    account = url.path.split("/")[4]
                    if account not in hub.objects:
                        return self.answer(
                            404, {"error": f"account {account!r} is not known to this hub", "status": 404}
                        )
                    items = [
                        o
                        for o in hub.objects[account]
                        if o["kind"].lower() == query.get("kind", "").split(".")[0].lower()
                        and query.get("name") in (None, o["metadata"]["name"])
                        and query.get("namespace") in (None, o["metadata"].get("namespace"))
                    ]
                    return self.answer(200, {"apiVersion": "v1", "kind": "List", "items": items})
                if url.path == "/task/t1":
                    if hub.running_polls:
                        hub.running_polls -= 1
                        return self.answer(200, task("running"))
                    return self.answer(200, hub.task)
                self.answer(404, {"error": "Not Found", "status": 404})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hub.requests.append(("POST", self.path, body))
                if self.path == "/kubernetes/ops":
                    return self.answer(200, {"id": "t1", "resourceUri": "/task/t1"})
                self.answer(404, {"error": "Not Found", "status": 404})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def posted(self) -> list[Any]:
        return [body for method, path, body in self.requests if method == "POST"]


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.server.shutdown()
    h.server.server_close()


def run(hub: FakeHub, capsys, *argv: str) -> tuple[int, str, str]:
    code = kubectl.main([*argv, "--hub", hub.url])
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_sends_one_deploy_operation_waits_and_prints(hub, capsys, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([DEPLOY, CM]))
    hub.running_polls = 2
    hub.task = task(
        "completed",
        {"manifests": [DEPLOY, CM], "manifestNamesByNamespace": {}, "createdArtifacts": [], "boundArtifacts": []},
    )
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod")
    assert (code, err) == (0, "")
    assert out == "deployment.apps/nginx serverside-applied\nconfigmap/x serverside-applied\n"
    assert hub.posted() == [
        [{"deployManifest": {"account": "prod", "manifests": [DEPLOY, CM], "fieldManager": "scale-agent"}}]
    ]
    polls = [q for method, path, q in hub.requests if path == "/task/t1"]
    assert len(polls) == 3 and all(int(q["waitSeconds"]) > 0 for q in polls)
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "-o", "json")
    assert json.loads(out)["kind"] == "List" and len(json.loads(out)["items"]) == 2


def test_a_failed_apply_exits_1_with_the_reason_on_stderr(hub, capsys, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([CM, DEPLOY]))
    hub.task = task(
        "failed",
        {
            "manifests": [CM],
            "manifestNamesByNamespace": {},
            "createdArtifacts": [],
            "boundArtifacts": [],
            "failedManifest": "deployment nginx",
            "notApplied": [],
        },
        exception={"message": "quota exceeded", "code": 403, "reason": "Forbidden"},
    )
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod")
    assert (code, out, err) == (1, "configmap/x serverside-applied\n", "error: quota exceeded\n")


def test_apply_refuses_a_namespace_that_contradicts_the_manifest(hub, capsys, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump(DEPLOY))
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "-n", "other")
    assert code == 1 and 'the namespace from the provided object "web" does not match the namespace "other"' in err
    assert hub.posted() == []
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "-n", "web")
    assert code == 0 and hub.posted()[0][0]["deployManifest"]["namespaceOverride"] == "web"


def test_apply_of_a_bad_file_exits_1_naming_it(hub, capsys, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: [\n")
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod")
    assert code == 1 and err.startswith(f"error: error parsing {f}: line ") and len(err.splitlines()) == 1


def test_a_task_that_outlasts_the_timeout_is_an_error(hub, capsys, tmp_path):
    f = tmp_path / "cm.yaml"
    f.write_text(yaml.safe_dump(CM))
    hub.running_polls = 1000
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "--timeout", "0")
    assert code == 1 and err.startswith("error: timed out after 0s waiting for task t1")


def test_the_hub_without_the_operations_api_is_one_line(hub, capsys, tmp_path):
    f = tmp_path / "cm.yaml"
    f.write_text(yaml.safe_dump(CM))
    code = kubectl.main(["delete", "cm", "x", "--account", "prod", "--hub", hub.url + "/nothing-here"])
    assert (code, capsys.readouterr().err) == (1, "error: the hub answered 404 Not Found to POST /kubernetes/ops\n")


def test_delete_by_names_file_and_selector(hub, capsys, tmp_path):
    hub.task = task(
        "completed",
        {
            "manifestNamesByNamespace": {},
            "deletedManifests": [{"kind": "Deployment", "apiVersion": "apps/v1", "namespace": "web", "name": "nginx"}],
        },
    )
    code, out, err = run(
        hub,
        capsys,
        "delete",
        "deploy",
        "nginx",
        "api",
        "--account",
        "prod",
        "-n",
        "web",
        "--cascade",
        "orphan",
        "--grace-period",
        "0",
    )
    assert (code, out, err) == (0, 'deployment.apps "nginx" deleted\n', "")
    hub.task["resultObjects"][0]["alreadyGone"] = [
        {"kind": "Deployment", "apiVersion": "apps/v1", "namespace": "web", "name": "api"}
    ]
    code, out, err = run(
        hub,
        capsys,
        "delete",
        "deploy",
        "nginx",
        "api",
        "--account",
        "prod",
        "-n",
        "web",
        "--cascade",
        "orphan",
        "--grace-period",
        "0",
    )
    assert (code, out, err) == (
        1,
        'deployment.apps "nginx" deleted\n',
        'Error from server (NotFound): deployments.apps "api" not found\n',
    ), "kubectl's way"
    options = {"propagationPolicy": "Orphan", "gracePeriodSeconds": 0}
    assert hub.posted()[-1] == [
        {
            "deleteManifest": {
                "account": "prod",
                "manifestName": "deployment.apps nginx",
                "location": "web",
                "options": options,
            }
        },
        {
            "deleteManifest": {
                "account": "prod",
                "manifestName": "deployment.apps api",
                "location": "web",
                "options": options,
            }
        },
    ]

    run(hub, capsys, "delete", "ns/old", "cm/x", "--account", "prod")
    assert [(op["deleteManifest"]["manifestName"], op["deleteManifest"]["location"]) for op in hub.posted()[-1]] == [
        ("namespace old", ""),
        ("configmap x", "default"),
    ]

    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([DEPLOY, CM]))
    run(hub, capsys, "delete", "-f", str(f), "--account", "prod")
    assert [(op["deleteManifest"]["manifestName"], op["deleteManifest"]["location"]) for op in hub.posted()[-1]] == [
        ("deployment.apps nginx", "web"),
        ("configmap x", "default"),
    ]

    run(hub, capsys, "delete", "deploy", "-l", "app=x", "--account", "prod", "-n", "web")
    assert hub.posted()[-1] == [
        {
            "deleteManifest": {
                "account": "prod",
                "kinds": ["deployment.apps"],
                "labelSelector": "app=x",
                "location": "web",
                "options": {"propagationPolicy": "Background"},
            }
        }
    ]


def test_delete_of_a_kind_the_table_does_not_know_gets_a_namespace(hub, capsys):
    run(hub, capsys, "delete", "clusterissuers.cert-manager.io", "le", "--account", "prod")
    run(hub, capsys, "delete", "issuers.cert-manager.io", "le", "--account", "prod", "-n", "team")
    assert [(op[0]["deleteManifest"]["manifestName"], op[0]["deleteManifest"]["location"]) for op in hub.posted()] == [
        ("clusterissuer.cert-manager.io le", "default"),
        ("issuer.cert-manager.io le", "team"),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["delete", "--account", "p"], "You must provide one or more resources by argument or filename."),
        (["delete", "deploy", "--account", "p"], "resource(s) were provided, but no name was specified"),
        (
            ["delete", "deploy", "x", "-l", "app=x", "--account", "p"],
            "name cannot be provided when a selector is specified",
        ),
        (["delete", "deploy", "-f", "x.yaml", "--account", "p"], "both by arguments and with -f"),
        (["delete", "deploy", "-l", "app in (", "--account", "p"], "invalid label selector"),
        (["get", "deploy,svc", "-w", "--account", "p"], "only specify a single resource type with --watch"),
        (["get", "deploy", "-l", "a b", "--account", "p"], "invalid label selector"),
    ],
)
def test_bad_flag_combinations_are_one_line_errors_before_any_request(hub, capsys, argv, message):
    code, out, err = run(hub, capsys, *argv)
    assert code == 1 and err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert hub.requests == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["get", "deploy"], "error: an account is required: --account NAME"),
        (["get", "deploy", "--account", "a", "--all-accounts"], "error: --account and --all-accounts cannot"),
        (["apply", "--account", "a"], "error: must specify -f (scale-agent has no -k)"),
        (
            ["delete", "deploy", "x", "--account", "a", "--cascade", "sometimes"],
            'error: invalid argument "sometimes" for "--cascade" flag',
        ),
        (
            ["get", "deploy", "--account", "a", "-o", "table"],
            'error: unable to match a printer suitable for the output format "table"',
        ),
        (["get", "deploy", "--foo"], "error: unknown flag: --foo"),  # before the missing --account
        (["scale", "deploy", "x", "--account", "a"], 'error: required flag(s) "replicas" not set'),
        (["scale", "deploy", "x", "--replicas", "many"], 'error: invalid argument "many" for "--replicas" flag'),
        (["rollout", "sideways", "deploy/x"], 'error: unknown command "sideways"'),
        (["get", "deploy", "-n"], "error: flag needs an argument: 'n' in -n"),
    ],
)
def test_command_line_mistakes_end_as_kubectl_with_exit_status_1(hub, capsys, argv, message):
    """kubectl's words and status 1 for every mistake on the command line, and no request sent."""
    try:
        code = kubectl.main([*argv, "--hub", hub.url])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith(message), err
    if "output format" not in err:
        assert err.splitlines()[-1] == f"See 'scale-agent {argv[0]} --help' for usage."
    assert "Traceback" not in err and "usage:" not in err
    assert hub.requests == []


def test_flags_may_follow_or_precede_names_as_in_kubectl(hub, capsys):
    hub.objects = {"a": [deployment("nginx", 5, ns="web")]}
    code, out, err = run(hub, capsys, "get", "deploy", "-n", "web", "nginx", "--account", "a", "-o", "name")
    assert (code, out, err) == (0, "deployment.apps/nginx\n", "")


def test_get_against_the_stand_in_hub(hub, capsys):
    hub.objects = {"a": [deployment("nginx", 5)], "b": [deployment("nginx", 5, ns="other"), deployment("api", 5)]}
    code, out, err = run(hub, capsys, "get", "deploy", "nginx", "--all-accounts", "-o", "name")
    assert (code, out) == (0, "deployment.apps/nginx\ndeployment.apps/nginx\n")
    assert ("GET", "/api/v1/accounts/a/objects", {"kind": "Deployment.apps", "name": "nginx"}) in hub.requests
    code, out, err = run(hub, capsys, "get", "deploy", "nginx", "--account", "a", "-o", "json")
    assert json.loads(out)["kind"] == "Deployment", "one object asked for and found: itself, not a List"
    code, out, err = run(hub, capsys, "get", "deploy", "--account", "a", "-o", "json")
    assert json.loads(out)["kind"] == "List", "a listing is a List even of one"
    code, out, err = run(hub, capsys, "get", "deploy", "nginx", "api", "--account", "b", "-o", "name")
    assert out == "deployment.apps/nginx\ndeployment.apps/api\n", "in the order asked for, as kubectl"
    code, out, err = run(hub, capsys, "get", "deploy", "--account", "b")
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["NAMESPACE", "NAME"],
        ["other", "nginx"],
        ["web", "api"],
    ], "a listing: by namespace and name"
    code, out, err = run(hub, capsys, "get", "deploy", "gone", "--all-accounts")
    assert (code, out, err) == (1, "", 'Error from server (NotFound): deployments.apps "gone" not found\n')


def test_the_commands_are_on_the_scale_agent_parser(monkeypatch):
    monkeypatch.delenv("SCALE_AGENT_HUB", raising=False)
    parser = cli.build_parser()
    args = parser.parse_args(["get", "po", "--account", "a"])
    assert (args.resources, args.account, args.hub) == (["po"], "a", "http://127.0.0.1:7002")
    assert parser.parse_args(["apply", "-f", "-", "--account", "a"]).timeout == 300
    assert parser.parse_args(["delete", "po", "x", "--account", "a"]).cascade == "background"


def test_the_hub_address_comes_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv("SCALE_AGENT_HUB", "http://hub.example:7002")
    parser = cli.build_parser()
    for argv in (["get", "po", "--account", "a"], ["accounts", "list"], ["apply", "-f", "-", "--account", "a"]):
        assert parser.parse_args(argv).hub == "http://hub.example:7002", argv
    assert parser.parse_args(["get", "po", "--account", "a", "--hub", "http://other:1"]).hub == "http://other:1"


def test_kind_info_fields_are_what_the_hub_filter_wants():
    info = KindInfo("Widget", "example.com", "widgets", None)
    assert (info.query, info.token, info.resource_ref) == (
        "Widget.example.com",
        "widget.example.com",
        "widgets.example.com",
    )


def test_bad_yaml_error_names_a_relative_path_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("x.yaml").write_text("a: [\n")
    with pytest.raises(CliError, match=r"^error: error parsing x\.yaml: line 2"):
        read_manifest_files(["x.yaml"])


def test_a_server_dry_run_sends_dry_run_and_refuses_an_agent_that_applied_for_real(hub, capsys, tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump(CM))
    hub.task = task("completed", {"manifests": [CM], "manifestNamesByNamespace": {}, "dryRun": True})
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "--dry-run=server")
    assert (code, out, err) == (0, "configmap/x serverside-applied (server dry run)\n", "")
    assert hub.posted()[-1][0]["deployManifest"]["dryRun"] is True
    # an agent from before dry runs ignores the field: the objects were applied, and the user is told
    hub.task = task("completed", {"manifests": [CM], "manifestNamesByNamespace": {}})
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "--dry-run=server")
    assert code == 1 and "does not know dry runs: the objects WERE applied (configmap/x)" in err
    posted = len(hub.posted())
    code, out, err = run(hub, capsys, "apply", "-f", str(f), "--account", "prod", "--dry-run=client")
    assert (code, out) == (0, "configmap/x serverside-applied (dry run)\n")
    assert len(hub.posted()) == posted, "a client dry run sends nothing"

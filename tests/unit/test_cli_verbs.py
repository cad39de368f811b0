"""The pure parts of the kubectl-level verbs: kubectl's JSONPath templates, custom columns, sorting,
label columns, `-o` parsing, rollout status messages, rollout history, describe's alignment, the
clusters table's freshness, command-line messages, and progress on a terminal only."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

import pytest

from scaleagent.cli import jsonpath
from scaleagent.cli.describe import describe, events_for, tabwrite
from scaleagent.cli.errors import CliError
from scaleagent.cli.fleet import freshness_cell, watches_cell
from scaleagent.cli.formats import column_value, custom_columns, label_cells, natural_key, parse_output, sort_rows
from scaleagent.cli.inspect import diff_objects
from scaleagent.cli.parsing import kubectl_message, parse_duration
from scaleagent.cli.progress import Progress
from scaleagent.cli.rollout import history_text, revisions, rollout_status

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)

PODS = {
    "kind": "List",
    "items": [
        {
            "metadata": {"name": "web-1", "labels": {"app": "web", "app.kubernetes.io/name": "shop"}},
            "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "envoy"}]},
            "status": {"phase": "Running", "restartCount": 3},
        },
        {
            "metadata": {"name": "web-10", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "a", "image": "nginx:1.26"}]},
            "status": {"phase": "Pending", "restartCount": 1},
        },
        {
            "metadata": {"name": "web-2", "labels": {}},
            "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]},
            "status": {"phase": "Running", "restartCount": 10},
        },
    ],
}


def render(template: str, data=PODS) -> str:
    return jsonpath.render(jsonpath.parse(template), data)


# --- jsonpath --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.items[*].metadata.name}", "web-1 web-10 web-2"),
        (
            '{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}',
            "web-1\tRunning\nweb-10\tPending\nweb-2\tRunning\n",
        ),
        ("{.items[0].spec.containers[*].image}", "nginx:1.27 envoy"),
        ("{.items[-1].metadata.name}", "web-2"),
        ("{.items[1:].metadata.name}", "web-10 web-2"),
        ("{.items[0,2].metadata.name}", "web-1 web-2"),
        ("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}", "shop"),
        # kubectl reads ['...'] as a path: the dots of a key are escaped there too.
        ("{.items[0].metadata.labels['app\\.kubernetes\\.io/name']}", "shop"),
        ("{.items[0].metadata.labels['app.kubernetes.io/name']}", ""),
        ("{.items[*]['metadata.name']}", "web-1 web-10 web-2"),
        ('{.items[?(@.status.phase=="Running")].metadata.name}', "web-1 web-2"),
        ("{.items[?(@.status.restartCount>2)].metadata.name}", "web-1 web-2"),
        ("{.items[?(@.metadata.labels.app)].metadata.name}", "web-1 web-10"),
        ("{..image}", "nginx:1.27 envoy nginx:1.26 nginx:1.27"),
        ("{.items[0].status}", '{"phase":"Running","restartCount":3}'),
        ("{.items[2].metadata.labels}", "{}"),
        ("names: {.items[*].metadata.name}!", "names: web-1 web-10 web-2!"),
        ("{.items[0].missing}", ""),  # kubectl get allows missing keys
        ("{.kind}", "List"),
        ("{$.kind}", "List"),
        ("no braces", "no braces"),
        ("{range .items[*]}[{range .spec.containers[*]}{.name},{end}]{end}", "[a,b,][a,][a,]"),
    ],
)
def test_jsonpath_templates_as_kubectl_prints_them(template, expected):
    assert render(template) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{.items[}", "error: error parsing jsonpath {.items[}, unclosed array expect ]"),
        ("{.items[*]", "unclosed action"),
        ("{range .items[*]}{.x}", "unclosed range"),
        ("{end}", "not in range"),
        ("{.items[a:b]}", "invalid array slice"),
    ],
)
def test_jsonpath_parse_errors(template, message):
    with pytest.raises(jsonpath.JSONPathError) as e:
        jsonpath.parse(template)
    assert message in str(e.value) and str(e.value).startswith("error: ")


def test_jsonpath_index_out_of_range_is_an_error():
    with pytest.raises(jsonpath.JSONPathError, match="array index out of bounds: index 5, length 3"):
        render("{.items[5]}")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".metadata.name", "{.metadata.name}"),
        ("metadata.name", "{.metadata.name}"),
        ("{.a}", "{.a}"),
        ("{$.a}", "{$.a}"),
    ],
)
def test_relaxed_paths(path, expected):
    assert jsonpath.relaxed(path) == expected


# --- custom columns, labels, sorting, -o -------------------------------------------------------------


def test_custom_columns_values_as_kubectl_prints_them():
    columns = custom_columns("NAME:.metadata.name,IMAGES:.spec.containers[*].image,LABELS:.metadata.labels,X:.nope")
    pod = PODS["items"][0]
    assert [h for h, _ in columns] == ["NAME", "IMAGES", "LABELS", "X"]
    assert [column_value(t, pod) for _, t in columns] == [
        "web-1",
        "nginx:1.27,envoy",
        "map[app:web app.kubernetes.io/name:shop]",  # Go's %v of a map
        "<none>",
    ]
    assert len(custom_columns("A:.x[0,1],B:.y")) == 2, "a comma inside brackets does not split columns"
    with pytest.raises(CliError, match="expected <header>:<json-path-expr>"):
        custom_columns("NAME")


def test_label_columns_and_show_labels():
    cells = label_cells(["app", "app.kubernetes.io/name"], show_labels=True)
    assert [h for h, _ in cells] == ["APP", "NAME", "LABELS"]
    assert [fn(PODS["items"][0], NOW) for _, fn in cells] == ["web", "shop", "app=web,app.kubernetes.io/name=shop"]
    assert [fn(PODS["items"][2], NOW) for _, fn in cells] == ["", "", "<none>"]


def test_sort_by_is_natural_for_strings_and_numeric_for_numbers():
    rows = [("a", o) for o in PODS["items"]]
    assert [o["metadata"]["name"] for _, o in sort_rows(rows, ".metadata.name")] == ["web-1", "web-2", "web-10"]
    assert [o["status"]["restartCount"] for _, o in sort_rows(rows, "{.status.restartCount}")] == [1, 3, 10]
    # objects without the field come first, in their order
    assert [o["metadata"]["name"] for _, o in sort_rows(rows, ".metadata.labels.app")] == ["web-2", "web-1", "web-10"]
    with pytest.raises(CliError, match='couldn\'t find any field with path "{.nope}"'):
        sort_rows(rows, ".nope")
    assert natural_key("web-2") < natural_key("web-10") < natural_key("webx")


def test_parse_output():
    assert parse_output(None).kind == "" and parse_output("wide").kind == "wide"
    assert parse_output("jsonpath={.a}").template is not None
    assert [h for h, _ in parse_output("custom-columns=A:.a,B:.b").columns] == ["A", "B"]
    with pytest.raises(CliError, match="template format specified but no template given"):
        parse_output("jsonpath")  # kubectl wants jsonpath=TEMPLATE
    with pytest.raises(CliError, match="template format specified but no template given"):
        parse_output("jsonpath=")
    with pytest.raises(CliError, match="custom-columns format specified but no custom columns given"):
        parse_output("custom-columns")
    with pytest.raises(CliError, match='output format "table", allowed formats are: custom-columns,'):
        parse_output("table")


def test_custom_columns_file(tmp_path):
    f = tmp_path / "cols"
    f.write_text("NAME   IMAGE\n.metadata.name   {.spec.containers[0].image}\n")
    fmt = parse_output(f"custom-columns-file={f}")
    assert [column_value(t, PODS["items"][1]) for _, t in fmt.columns] == ["web-10", "nginx:1.26"]
    f.write_text("NAME\n.a .b\n")
    with pytest.raises(CliError, match="1 headers but 2 paths"):
        parse_output(f"custom-columns-file={f}")


# --- rollout --------------------------------------------------------------------------------------


def deploy(generation=2, observed=2, replicas=3, updated=3, total=3, available=3, conditions=()):
    return {
        "kind": "Deployment",
        "metadata": {"name": "web", "generation": generation, "uid": "u1"},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "updatedReplicas": updated,
            "replicas": total,
            "availableReplicas": available,
            "conditions": list(conditions),
        },
    }


@pytest.mark.parametrize(
    ("obj", "message", "done"),
    [
        (deploy(observed=1), "Waiting for deployment spec update to be observed...", False),
        (
            deploy(updated=1),
            'Waiting for deployment "web" rollout to finish: 1 out of 3 new replicas have been updated...',
            False,
        ),
        (
            deploy(total=4),
            'Waiting for deployment "web" rollout to finish: 1 old replicas are pending termination...',
            False,
        ),
        (
            deploy(available=2),
            'Waiting for deployment "web" rollout to finish: 2 of 3 updated replicas are available...',
            False,
        ),
        (deploy(), 'deployment "web" successfully rolled out', True),
    ],
)
def test_deployment_rollout_status_messages_are_kubectls(obj, message, done):
    assert rollout_status(obj) == (message, done)


def test_rollout_status_of_other_kinds_and_failures():
    stuck = deploy(conditions=[{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}])
    with pytest.raises(CliError, match='deployment "web" exceeded its progress deadline'):
        rollout_status(stuck)
    ds = {
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "generation": 1},
        "status": {
            "observedGeneration": 1,
            "desiredNumberScheduled": 3,
            "updatedNumberScheduled": 3,
            "numberAvailable": 2,
        },
    }
    assert rollout_status(ds) == (
        'Waiting for daemon set "agent" rollout to finish: 2 of 3 updated pods are available...',
        False,
    )
    sts = {
        "kind": "StatefulSet",
        "metadata": {"name": "db", "generation": 1},
        "spec": {"replicas": 2},
        "status": {
            "observedGeneration": 1,
            "readyReplicas": 2,
            "updatedReplicas": 2,
            "currentReplicas": 2,
            "currentRevision": "db-1",
            "updateRevision": "db-1",
        },
    }
    assert rollout_status(sts) == ("statefulset rolling update complete 2 pods at revision db-1...", True)
    with pytest.raises(CliError, match="no status viewer has been implemented for Pod"):
        rollout_status({"kind": "Pod", "metadata": {"name": "p"}})


def test_rollout_history_from_replicasets():
    d = deploy()
    owner = [{"uid": "u1", "controller": True}]
    rs = [
        {
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-a",
                "ownerReferences": owner,
                "annotations": {"deployment.kubernetes.io/revision": "2", "kubernetes.io/change-cause": "image bump"},
            },
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                }
            },
        },
        {
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-b",
                "ownerReferences": owner,
                "annotations": {"deployment.kubernetes.io/revision": "1"},
            },
        },
        {
            "kind": "ReplicaSet",
            "metadata": {
                "name": "other",
                "ownerReferences": [{"uid": "u2", "controller": True}],
                "annotations": {"deployment.kubernetes.io/revision": "7"},
            },
        },
    ]
    history = revisions(d, rs)
    assert sorted(history) == [1, 2]
    assert history_text("deployment.apps/web", history) == (
        "deployment.apps/web \nREVISION  CHANGE-CAUSE\n1         <none>\n2         image bump\n\n"
    )
    text = history_text("deployment.apps/web", history, 2)
    assert text.startswith("deployment.apps/web with revision #2\nPod Template:\n  Labels:  app=web\n")
    assert re.search(r"^    Image:\s+nginx:1.27$", text, re.M)
    with pytest.raises(CliError, match="unable to find the specified revision"):
        history_text("deployment.apps/web", history, 5)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("5m", 300), ("1h30m", 5400), ("0", 0), ("2.5", 2.5), ("500ms", 0.5)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


# --- describe ---------------------------------------------------------------------------------------


def test_tabwriter_aligns_blocks_of_consecutive_lines_as_gos():
    lines = [
        "Name:\tweb",
        "Labels:\ta=b",
        "\tc=d",
        "Pod Template:",
        "  Image:\tnginx",
        "  Port:\t<none>",
        "Events:\t<none>",
    ]
    assert tabwrite(lines) == (
        # a line without a tab ends a block; "Events:" follows "  Port:" directly, so it joins its block
        "Name:    web\nLabels:  a=b\n         c=d\nPod Template:\n  Image:  nginx\n  Port:   <none>\nEvents:   <none>\n"
    )


def test_describe_a_configmap_with_its_events():
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "s",
            "namespace": "web",
            "uid": "c1",
            "labels": {"a": "b"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "hi"},
        },
        "data": {"k": "v"},
    }
    events = [
        {
            "involvedObject": {"uid": "c1"},
            "type": "Warning",
            "reason": "Odd",
            "message": "x",
            "count": 3,
            "firstTimestamp": "2026-11-21T11:00:00Z",
            "lastTimestamp": "2026-11-21T11:59:00Z",
            "source": {"component": "me"},
        },
        {"involvedObject": {"uid": "other"}, "reason": "NotMine"},
    ]
    text = describe(cm, events=events_for(cm, events), now=NOW)
    assert text.startswith(
        "Name:         s\nNamespace:    web\nLabels:       a=b\nAnnotations:  note: hi\n\nData\n====\nk:\n----\nv\n"
    )
    assert "last-applied-configuration" not in text
    assert text.endswith(
        "Events:\n  Type     Reason  Age                From  Message\n  ----     ------  ----               ----  -------\n"
        "  Warning  Odd     60s (x3 over 60m)  me    x\n"
    )


# --- diff -------------------------------------------------------------------------------------------


def test_diff_objects_ignores_managed_fields_and_names_files_as_kubectl():
    live = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "n", "managedFields": [1]},
        "data": {"a": "1"},
    }
    merged = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "n", "managedFields": [2]},
        "data": {"a": "1"},
    }
    assert diff_objects(live, merged) == ""
    merged["data"]["a"] = "2"
    text = diff_objects(live, merged)
    assert text.splitlines()[:3] == [
        "diff -u -N LIVE/v1.ConfigMap.n.c MERGED/v1.ConfigMap.n.c",
        "--- LIVE/v1.ConfigMap.n.c",
        "+++ MERGED/v1.ConfigMap.n.c",
    ]
    assert "-  a: '1'" in text.splitlines() and "+  a: '2'" in text.splitlines()


# --- clusters -----------------------------------------------------------------------------------------


def test_freshness_columns_tolerate_a_hub_without_them():
    assert freshness_cell({}, NOW) == "<unknown>" and watches_cell({}, NOW) == "<unknown>"
    fresh = {"freshness": {"lastEventAt": None, "lastEventAgeSeconds": None, "watches": 34, "watchesEstablished": 33}}
    assert freshness_cell(fresh, NOW) == "<none>" and watches_cell(fresh, NOW) == "33/34"
    assert freshness_cell({"freshness": {"lastEventAgeSeconds": 3.4}}, NOW) == "3s"
    assert freshness_cell({"freshness": {"lastEventAgeSeconds": 725.0}}, NOW) == "12m"


# --- command line and progress -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argparse_says", "kubectl_says"),
    [
        ("argument -n/--namespace: expected one argument", "flag needs an argument: --namespace"),
        (
            "argument --replicas: invalid int value: 'x'",
            'invalid argument "x" for "--replicas" flag: strconv.ParseInt: parsing "x": invalid syntax',
        ),
        ("the following arguments are required: --zone", 'required flag(s) "zone" not set'),
        ("argument ROLLOUT: invalid choice: 'x' (choose from 'status', 'undo')", 'unknown command "x"'),
    ],
)
def test_argparse_messages_in_kubectls_words(argparse_says, kubectl_says):
    assert kubectl_message(argparse_says) == kubectl_says


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_and_never_on_a_pipe():
    pipe = io.StringIO()
    with Progress(pipe) as p:
        p.update("reading 3/10")
    assert pipe.getvalue() == ""
    tty = Terminal()
    with Progress(tty) as p:
        p.update("reading 3/10")
    assert tty.getvalue().startswith("\r\x1b[Kreading 3/10 (") and tty.getvalue().endswith("\r\x1b[K"), (
        "erased at the end"
    )

"""`scale-agent get` against real processes: kubesim -> agent -> hub, the CLI as a subprocess.

What a user sees is checked: the tables, -o yaml/name, the ACCOUNT and NAMESPACE columns, the
NotFound message and exit status, and `-w` printing a row for an object created after it started.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client, config

from tests.helpers import CLI, AgentProcess, HubProcess, make_hub_pki, read_until, stop_process, write_yaml

KINDS = ["Deployment", "ReplicaSet", "Pod", "ConfigMap", "Service", "Job", "Namespace"]


def kube(kubesim, i: int) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubesim.admin(i)))


@pytest.fixture(scope="module")
def setup(kubesim, tmp_path_factory):
    """A hub and an agent serving accounts a0 and a1 (kubesim's two clusters), one namespace each,
    with a Deployment, a ConfigMap, a Service and a Job in a0 and a ConfigMap in a1."""
    tmp = tmp_path_factory.mktemp("get")
    pki = make_hub_pki(tmp)
    ns = f"get-{uuid.uuid4().hex[:8]}"
    apis = [kube(kubesim, i) for i in range(2)]
    for api in apis:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    procs: list = []
    try:
        hub = HubProcess(
            write_yaml(
                tmp / "hub.yaml",
                {
                    "server": {"grpcPort": 0, "httpPort": 0},
                    "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
                    "database": {"url": f"sqlite:///{tmp / 'hub.db'}"},
                },
            )
        )
        procs.append(hub)
        procs.append(
            AgentProcess(
                write_yaml(
                    tmp / "agent.yaml",
                    {
                        "kubernetes": {
                            "accounts": [
                                {
                                    "name": f"a{i}",
                                    "kubeConfigFile": str(kubesim.admin(i)),
                                    "namespaces": [ns],
                                    "kinds": KINDS,
                                }
                                for i in range(2)
                            ],
                            "discoveryIntervalSeconds": 1,
                        },
                        "server": {"port": 0},
                        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
                    },
                ),
                print_events=False,
            )
        )
        core0, apps0, batch0 = client.CoreV1Api(apis[0]), client.AppsV1Api(apis[0]), client.BatchV1Api(apis[0])
        labels = {"app": "web"}
        apps0.create_namespaced_deployment(
            ns,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": labels},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]},
                    },
                },
            },
        )
        core0.create_namespaced_config_map(
            ns, {"metadata": {"name": "settings", "labels": labels}, "data": {"a": "1", "b": "2"}}
        )
        core0.create_namespaced_config_map(ns, {"metadata": {"name": "other", "labels": {"app": "db"}}, "data": {}})
        core0.create_namespaced_service(
            ns, {"metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 80, "protocol": "TCP"}]}}
        )
        batch0.create_namespaced_job(
            ns,
            {
                "metadata": {"name": "once"},
                "spec": {
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
                },
            },
        )
        client.CoreV1Api(apis[1]).create_namespaced_config_map(
            ns, {"metadata": {"name": "settings"}, "data": {"x": "y"}}
        )

        def ready(doc: dict) -> bool:
            names = {(o["kind"], o["metadata"]["name"]) for o in doc["items"]}
            deploy = [o for o in doc["items"] if o["kind"] == "Deployment"]
            job = [o for o in doc["items"] if o["kind"] == "Job"]
            return (
                {("ConfigMap", "settings"), ("ConfigMap", "other"), ("Service", "web")} <= names
                and bool(deploy)
                and (deploy[0].get("status") or {}).get("readyReplicas") == 2
                and bool(job)
                and (job[0].get("status") or {}).get("succeeded") == 1
            )

        hub.wait_until(f"/api/v1/accounts/a0/objects?namespace={ns}", ready, what="a0's objects, settled")
        hub.wait_until(
            f"/api/v1/accounts/a1/objects?namespace={ns}&kind=ConfigMap",
            lambda d: [o["metadata"]["name"] for o in d["items"]] == ["kube-root-ca.crt", "settings"],
            what="a1's ConfigMap",
        )
        yield {"hub": hub, "ns": ns, "core0": core0}
    finally:
        for p in reversed(procs):
            p.stop()
        for api in apis:
            client.CoreV1Api(api).delete_namespace(ns)


def get(setup, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "get", *args, "--hub", setup["hub"].url], capture_output=True, text=True, timeout=60)


def table(text: str) -> list[list[str]]:
    """A kubectl table as rows of cells (cells are separated by at least three spaces)."""
    return [re.split(r" {3,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_a_deployment_table_like_kubectl(setup):
    r = get(setup, "deploy", "--account", "a0", "-n", setup["ns"])
    assert r.returncode == 0, r.stderr
    header, *rows = table(r.stdout)
    assert header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert len(rows) == 1 and rows[0][:4] == ["web", "2/2", "2", "2"]
    assert re.fullmatch(r"\d+s|\d+m(\d+s)?", rows[0][4]), rows[0]
    # kubectl's alignment: each column is as wide as its widest cell plus three spaces
    assert r.stdout.splitlines()[0].startswith("NAME   READY   UP-TO-DATE   AVAILABLE   AGE")


def test_other_kinds_get_their_own_columns_and_names_resolve_like_kubectl(setup):
    ns = setup["ns"]
    expected = {
        "cm": (["NAME", "DATA", "AGE"], {"settings": ["2"], "other": ["0"], "kube-root-ca.crt": ["1"]}),
        "services": (["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], {"web": ["ClusterIP"]}),
        "Job.batch": (["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"], {"once": ["Complete", "1/1"]}),
        "replicasets.apps": (["NAME", "DESIRED", "CURRENT", "READY", "AGE"], None),
        "po": (["NAME", "READY", "STATUS", "RESTARTS", "AGE"], None),
    }
    for kind, (want_header, want_rows) in expected.items():
        r = get(setup, kind, "--account", "a0", "-n", ns)
        assert r.returncode == 0, (kind, r.stderr)
        header, *rows = table(r.stdout)
        assert header == want_header, kind
        if want_rows is not None:
            got = {row[0]: row[1 : 1 + len(v)] for row in rows for v in [want_rows.get(row[0], [])]}
            assert got == want_rows, (kind, r.stdout)
    r = get(setup, "svc", "web", "--account", "a0", "-n", ns)
    assert table(r.stdout)[1][4] == "80/TCP"
    r = get(setup, "rs", "--account", "a0", "-n", ns)
    (rs,) = table(r.stdout)[1:]
    assert rs[0].startswith("web-") and rs[1:4] == ["2", "2", "2"]
    r = get(setup, "pods", "--account", "a0", "-n", ns, "-o", "wide")
    header, *pods = table(r.stdout)
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    assert sorted(p[1:3] for p in pods if p[0].startswith("web-")) == [["1/1", "Running"]] * 2


def test_without_a_namespace_the_table_has_a_namespace_column_and_cluster_scoped_kinds_do_not(setup):
    ns = setup["ns"]
    r = get(setup, "configmaps", "--account", "a0", "-l", "app=web")
    assert r.returncode == 0, r.stderr
    assert table(r.stdout) == [["NAMESPACE", "NAME", "DATA", "AGE"], [ns, "settings", "2", table(r.stdout)[1][3]]]
    with_a = table(get(setup, "cm", "--account", "a0", "-A", "-l", "app=web").stdout)
    assert [row[:3] for row in with_a] == [row[:3] for row in table(r.stdout)]  # AGE may tick in between
    r = get(setup, "ns", ns, "--account", "a0")
    assert r.returncode == 0, r.stderr
    header, row = table(r.stdout)
    assert header == ["NAME", "STATUS", "AGE"] and row[:2] == [ns, "Active"]


def test_all_accounts_adds_an_account_column(setup):
    r = get(setup, "configmap", "settings", "--all-accounts", "-n", setup["ns"])
    assert r.returncode == 0, r.stderr
    assert [row[:3] for row in table(r.stdout)] == [
        ["ACCOUNT", "NAME", "DATA"],
        ["a0", "settings", "2"],
        ["a1", "settings", "1"],
    ]
    r = get(setup, "cm", "--all-accounts", "-l", "app=web")
    assert [row[:3] for row in table(r.stdout)] == [["ACCOUNT", "NAMESPACE", "NAME"], ["a0", setup["ns"], "settings"]]


def test_output_yaml_json_and_name(setup):
    ns = setup["ns"]
    r = get(setup, "deployment", "web", "--account", "a0", "-n", ns, "-o", "yaml")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert (doc["kind"], doc["metadata"]["name"], doc["spec"]["replicas"]) == ("Deployment", "web", 2)
    r = get(setup, "cm", "--account", "a0", "-n", ns, "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["kind"] == "List" and sorted(o["metadata"]["name"] for o in doc["items"]) == [
        "kube-root-ca.crt",
        "other",
        "settings",
    ]
    r = get(setup, "deploy,cm", "--account", "a0", "-n", ns, "-o", "name")
    assert r.stdout.splitlines() == [
        "deployment.apps/web",
        "configmap/kube-root-ca.crt",
        "configmap/other",
        "configmap/settings",
    ]
    r = get(setup, "deploy/web", "svc/web", "--account", "a0", "-n", ns, "-o", "name")
    assert r.stdout.splitlines() == ["deployment.apps/web", "service/web"]


def test_a_missing_name_is_not_found_with_exit_status_1(setup):
    r = get(setup, "deployment", "nope", "--account", "a0", "-n", setup["ns"])
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip() == 'Error from server (NotFound): deployments.apps "nope" not found'
    r = get(setup, "cm", "settings", "nope", "--account", "a0", "-n", setup["ns"], "-o", "name")
    assert r.returncode == 1 and r.stdout.splitlines() == ["configmap/settings"]
    assert r.stderr.strip() == 'Error from server (NotFound): configmaps "nope" not found'
    r = get(setup, "cm", "--account", "a0", "-n", "empty-namespace")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "No resources found in empty-namespace namespace.\n")


def test_hub_errors_are_one_line_with_exit_status_1(setup):
    r = get(setup, "cm", "--account", "nobody")
    assert r.returncode == 1 and r.stderr.strip() == "error: account 'nobody' is not known to this hub"
    r = subprocess.run(
        [*CLI, "get", "cm", "--account", "a0", "--hub", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "cannot reach the hub" in r.stderr
    r = get(setup, "cm", "--account", "a0", "-l", "app in (")
    assert r.returncode == 1 and r.stderr.startswith("error: invalid label selector") and "Traceback" not in r.stderr


def test_watch_prints_a_row_per_change_until_stopped(setup):
    ns = setup["ns"]
    proc = subprocess.Popen(
        [*CLI, "get", "cm", "--account", "a0", "-n", ns, "-w", "--hub", setup["hub"].url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        lines = read_until(proc, r"^settings\s", timeout=30)
        assert lines[0].split() == ["NAME", "DATA", "AGE"]
        setup["core0"].create_namespaced_config_map(ns, {"metadata": {"name": "late"}, "data": {"k": "v"}})
        (row,) = [line for line in read_until(proc, r"^late\s", timeout=30) if line.strip()]
        assert row.split()[:2] == ["late", "1"]
        # the new row lines up with the table above it
        assert row.index("1") == lines[0].index("DATA")
        setup["core0"].patch_namespaced_config_map("late", ns, {"data": {"k": "v", "k2": "v"}})
        read_until(proc, r"^late\s+2\s", timeout=30)
        proc.send_signal(signal.SIGINT)  # Ctrl-C: how a user ends -w
        assert proc.wait(timeout=20) == 0
        assert proc.stderr.read() == b"", "no traceback"
    finally:
        stop_process(proc)
        setup["core0"].delete_namespaced_config_map("late", ns)

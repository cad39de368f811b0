"""The kubectl-level verbs against real processes: kubesim -> agent -> hub, the CLI as a subprocess.

`get -o jsonpath/custom-columns`, `--sort-by`, `--show-labels`, `-L`; `describe`; `logs`; `scale`;
`rollout status|history|undo|pause|resume|restart`; `diff`; `apply --dry-run`; `clusters`;
`agents`; and the mistakes (an unknown kind, a bad flag) ending as kubectl's, with exit status 1.
One hub, one agent and kubesim's session clusters for the whole module; each test that changes
the cluster works on objects of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client, config

from tests.helpers import CLI, AgentProcess, HubProcess, make_hub_pki, write_yaml

KINDS = ["Deployment", "ReplicaSet", "Pod", "ConfigMap", "Service", "Endpoints", "Event", "Namespace"]
LABELS = {"app": "web", "tier": "front"}


def deployment(name: str, image: str = "nginx:1.27", replicas: int = 2) -> dict:
    labels = {**LABELS, "app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


@pytest.fixture(scope="module")
def setup(kubesim, tmp_path_factory):
    """A hub and an agent serving a0 (kubesim's cluster 0: Deployment `web`, its Service, three
    ConfigMaps, an Event about `web`) and a1 (cluster 1, ConfigMaps only), in one namespace."""
    tmp = tmp_path_factory.mktemp("verbs")
    pki = make_hub_pki(tmp)
    ns = f"verbs-{uuid.uuid4().hex[:8]}"
    apis = [config.new_client_from_config(config_file=str(kubesim.admin(i))) for i in range(2)]
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
        accounts = [
            {"name": "a0", "kubeConfigFile": str(kubesim.admin(0)), "namespaces": [ns], "kinds": KINDS},
            {"name": "a1", "kubeConfigFile": str(kubesim.admin(1)), "namespaces": [ns], "kinds": ["ConfigMap"]},
        ]
        procs.append(
            AgentProcess(
                write_yaml(
                    tmp / "agent.yaml",
                    {
                        "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 1},
                        "server": {"port": 0},
                        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
                    },
                ),
                print_events=False,
            )
        )
        core, apps = client.CoreV1Api(apis[0]), client.AppsV1Api(apis[0])
        web = apps.create_namespaced_deployment(ns, deployment("web"))
        core.create_namespaced_service(
            ns, {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
        )
        for name, size in (("c-1", "10"), ("c-2", "9"), ("c-3", "100")):
            core.create_namespaced_config_map(
                ns, {"metadata": {"name": name, "labels": {"size": size}}, "data": {"size": size}}
            )
        core.create_namespaced_event(
            ns,
            {
                "metadata": {"name": "web.scaled"},
                "involvedObject": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "web",
                    "namespace": ns,
                    "uid": web.metadata.uid,
                },
                "reason": "ScalingReplicaSet",
                "message": "Scaled up replica set web to 2",
                "type": "Normal",
                "source": {"component": "deployment-controller"},
                "count": 1,
                "firstTimestamp": web.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "lastTimestamp": web.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )
        client.CoreV1Api(apis[1]).create_namespaced_config_map(ns, {"metadata": {"name": "other"}, "data": {}})

        def settled(doc: dict) -> bool:
            kinds = {}
            for o in doc["items"]:
                kinds.setdefault(o["kind"], []).append(o)
            ready = [d for d in kinds.get("Deployment", []) if (d.get("status") or {}).get("readyReplicas") == 2]
            return bool(ready) and len(kinds.get("Pod", [])) == 2 and "Event" in kinds and len(kinds["ConfigMap"]) == 4

        hub.wait_until(f"/api/v1/accounts/a0/objects?namespace={ns}", settled, what="a0's objects, settled")
        hub.wait_until(
            f"/api/v1/accounts/a1/objects?namespace={ns}&kind=ConfigMap&name=other", lambda d: d["items"], what="a1"
        )
        yield {"hub": hub, "ns": ns, "core": core, "apps": apps, "tmp": tmp}
    finally:
        for p in reversed(procs):
            p.stop()
        for api in apis:
            client.CoreV1Api(api).delete_namespace(ns)


def cli(setup, *args: str, stdin: str | None = None, env: dict | None = None, hub: bool = True):
    """The command as a user runs it, with stderr a pipe (so no progress may appear on it)."""
    extra = ["--hub", setup["hub"].url] if hub else []
    return subprocess.run(
        [*CLI, *args, *extra],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SCALE_AGENT_")}, **(env or {})},
    )


def on_a0(setup, *args: str, **kw):
    return cli(setup, *args, "--account", "a0", "-n", setup["ns"], **kw)


def table(text: str) -> list[list[str]]:
    return [re.split(r" {2,}", line.strip()) for line in text.splitlines() if line.strip()]


# --- get: jsonpath, custom columns, sorting, labels ----------------------------------------------


def test_get_jsonpath_prints_kubectls_template_language(setup):
    r = on_a0(setup, "get", "cm", "-l", "size", "-o", "jsonpath={.items[*].metadata.name}")
    assert (r.returncode, r.stdout, r.stderr) == (0, "c-1 c-2 c-3", "")
    template = '{range .items[*]}{.metadata.name}{"="}{.data.size}{"\\n"}{end}'
    r = on_a0(setup, "get", "cm", "-l", "size", "-o", f"jsonpath={template}")
    assert r.stdout == "c-1=10\nc-2=9\nc-3=100\n", r.stderr
    r = on_a0(
        setup, "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"
    )
    assert r.stdout == "2 nginx:1.27", "one object by name: the template reads the object itself"
    r = on_a0(setup, "get", "cm", "-o", 'jsonpath={.items[?(@.data.size=="9")].metadata.name}')
    assert r.stdout == "c-2"
    r = on_a0(setup, "get", "cm", "-o", "jsonpath={.items[}")
    assert r.returncode == 1 and r.stderr.startswith("error: error parsing jsonpath {.items[}")


def test_get_custom_columns_and_sort_by(setup):
    r = on_a0(setup, "get", "cm", "-l", "size", "-o", "custom-columns=NAME:.metadata.name,SIZE:.data.size,X:.nothing")
    assert r.returncode == 0, r.stderr
    assert table(r.stdout) == [
        ["NAME", "SIZE", "X"],
        ["c-1", "10", "<none>"],
        ["c-2", "9", "<none>"],
        ["c-3", "100", "<none>"],
    ]
    # kubectl's natural order: 9 < 10 < 100, though "10" < "100" < "9" as text
    r = on_a0(setup, "get", "cm", "-l", "size", "--sort-by", ".data.size", "-o", "name")
    assert r.stdout.splitlines() == ["configmap/c-2", "configmap/c-1", "configmap/c-3"], r.stderr
    r = on_a0(setup, "get", "cm", "-l", "size", "--sort-by={.data.size}", "--no-headers")
    assert [row[0] for row in table(r.stdout)] == ["c-2", "c-1", "c-3"]
    columns = setup["tmp"] / "columns.txt"
    columns.write_text("NAME SIZE\n.metadata.name {.data.size}\n")
    r = on_a0(setup, "get", "cm", "c-3", "-o", f"custom-columns-file={columns}")
    assert table(r.stdout) == [["NAME", "SIZE"], ["c-3", "100"]], r.stderr
    r = on_a0(setup, "get", "cm", "-l", "size", "--sort-by", ".nowhere")
    assert r.returncode == 1 and 'couldn\'t find any field with path "{.nowhere}"' in r.stderr


def test_get_show_labels_and_label_columns(setup):
    r = on_a0(setup, "get", "deploy", "web", "--show-labels", "-L", "tier,app.kubernetes.io/name")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header.split()[-4:] == ["AGE", "TIER", "NAME", "LABELS"]
    assert row.split()[-2:] == ["front", "app=web,tier=front"]  # the absent label is an empty cell


# --- describe and logs ---------------------------------------------------------------------------


def test_describe_a_deployment_with_its_events(setup):
    r = on_a0(setup, "describe", "deployment", "web")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["Name:", "web"] and lines[1].split() == ["Namespace:", setup["ns"]]
    assert re.search(r"^Labels:\s+app=web$", r.stdout, re.M) and re.search(r"^\s+tier=front$", r.stdout, re.M)
    assert re.search(r"^Replicas:\s+2 desired \| 2 updated \| 2 total \| 2 available \| 0 unavailable$", r.stdout, re.M)
    assert re.search(r"^NewReplicaSet:\s+web-\S+ \(2/2 replicas created\)$", r.stdout, re.M), r.stdout
    events = r.stdout[r.stdout.index("Events:") :].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert events[3].split()[:2] == ["Normal", "ScalingReplicaSet"] and events[3].endswith(
        "Scaled up replica set web to 2"
    )
    # every value of the top section starts in one column, as kubectl's tabwriter aligns them
    top = lines[: lines.index("Pod Template:")]
    assert len({len(re.match(r"^\S+(?: \S+)*:\s+", line).group(0)) for line in top if not line.startswith(" ")}) == 1


def test_describe_other_kinds(setup):
    r = on_a0(setup, "describe", "cm", "c-1")
    assert r.returncode == 0 and "Data\n====\nsize:\n----\n10\n" in r.stdout and "Events:  <none>" in r.stdout
    r = on_a0(setup, "describe", "svc", "web")
    assert re.search(r"^Type:\s+ClusterIP$", r.stdout, re.M) and re.search(
        r"^Port:\s+<unset>\s+80/TCP$", r.stdout, re.M
    )
    r = on_a0(setup, "describe", "pods", "web-")  # kubectl's name prefix: both pods
    assert r.returncode == 0 and r.stdout.count("\nContainers:\n") == 2 and "Status:           Running" in r.stdout
    r = on_a0(setup, "describe", "deploy", "nope")
    assert (r.returncode, r.stderr) == (1, 'Error from server (NotFound): deployments.apps "nope" not found\n')


def test_logs_through_the_agent(setup):
    pods = json.loads(on_a0(setup, "get", "pods", "-o", "json").stdout)["items"]
    pod = sorted(p["metadata"]["name"] for p in pods)[0]
    r = on_a0(setup, "logs", pod)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"kubesim: container web of pod {pod} started\n", "")
    # kubesim ignores tailLines (a real API server honours it): only that the options pass through
    r = on_a0(setup, "logs", pod, "-c", "web", "--tail", "5")
    assert (r.returncode, r.stdout) == (0, f"kubesim: container web of pod {pod} started\n"), r.stderr
    r = on_a0(setup, "logs", "deploy/web")
    assert r.returncode == 0 and r.stdout.startswith("kubesim: container web of pod web-")
    assert r.stderr.startswith("Found 2 pods, using pod/web-")
    r = on_a0(setup, "logs", "nope")
    assert (r.returncode, r.stderr) == (1, 'Error from server (NotFound): pods "nope" not found\n')


# --- scale and rollout ---------------------------------------------------------------------------


def test_scale_then_rollout_status_waits_for_the_cache(setup):
    name = f"s-{uuid.uuid4().hex[:6]}"
    setup["apps"].create_namespaced_deployment(setup["ns"], deployment(name, replicas=1))
    r = on_a0(setup, "rollout", "status", f"deploy/{name}", "--timeout", "60s")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == f'deployment "{name}" successfully rolled out', r.stderr
    r = on_a0(setup, "scale", "deploy", name, "--replicas", "3")
    assert (r.returncode, r.stdout) == (0, f"deployment.apps/{name} scaled\n"), r.stderr
    assert setup["apps"].read_namespaced_deployment(name, setup["ns"]).spec.replicas == 3
    r = on_a0(setup, "rollout", "status", "deployment", name, "--timeout", "60s")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == f'deployment "{name}" successfully rolled out'
    assert r.stderr == "", "no progress on a stderr that is not a terminal"
    r = json.loads(on_a0(setup, "get", "deploy", name, "-o", "json").stdout)
    assert r["status"]["readyReplicas"] == 3, "done means the cache shows the replicas ready"
    r = on_a0(setup, "scale", "deploy", name, "--replicas", "1", "--current-replicas", "2")
    assert (r.returncode, r.stderr) == (1, "error: Expected replicas to be 2, was 3\n")
    r = on_a0(setup, "scale", "deploy", "nope", "--replicas", "1")
    assert (r.returncode, r.stderr) == (1, 'Error from server (NotFound): deployments.apps "nope" not found\n')


def test_rollout_history_undo_pause_resume_restart(setup, tmp_path):
    name = f"r-{uuid.uuid4().hex[:6]}"
    manifest = tmp_path / "d.yaml"
    for image in ("nginx:1.26", "nginx:1.27"):
        manifest.write_text(yaml.safe_dump(deployment(name, image=image)))
        assert on_a0(setup, "apply", "-f", str(manifest)).returncode == 0
        r = on_a0(setup, "rollout", "status", f"deploy/{name}", "--timeout", "60s")
        assert r.returncode == 0, r.stderr
    r = on_a0(setup, "rollout", "history", f"deploy/{name}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"deployment.apps/{name} \nREVISION  CHANGE-CAUSE\n1         <none>\n2         <none>\n\n"
    r = on_a0(setup, "rollout", "history", f"deploy/{name}", "--revision", "1")
    assert r.stdout.startswith(f"deployment.apps/{name} with revision #1\nPod Template:\n") and "nginx:1.26" in r.stdout
    r = on_a0(setup, "rollout", "undo", f"deploy/{name}")
    assert (r.returncode, r.stdout) == (0, f"deployment.apps/{name} rolled back\n"), r.stderr
    assert (
        setup["apps"].read_namespaced_deployment(name, setup["ns"]).spec.template.spec.containers[0].image
        == "nginx:1.26"
    )
    assert on_a0(setup, "rollout", "status", f"deploy/{name}", "--timeout", "60s").returncode == 0
    r = on_a0(setup, "rollout", "history", f"deploy/{name}", "-o", "name")  # -o is not a rollout history flag here
    assert (r.returncode, r.stderr.splitlines()[0]) == (1, "error: unknown shorthand flag: 'o' in -o")
    r = on_a0(setup, "rollout", "history", f"deploy/{name}")
    assert [row[0] for row in table(r.stdout)[2:]] == ["2", "3"], r.stdout
    r = on_a0(setup, "rollout", "pause", f"deploy/{name}")
    assert (r.returncode, r.stdout) == (0, f"deployment.apps/{name} paused\n"), r.stderr
    r = on_a0(setup, "rollout", "pause", f"deploy/{name}")
    assert (r.returncode, r.stderr) == (1, f'error: deployments.apps "{name}" is already paused\n')
    r = on_a0(setup, "rollout", "resume", f"deploy/{name}")
    assert (r.returncode, r.stdout) == (0, f"deployment.apps/{name} resumed\n"), r.stderr
    r = on_a0(setup, "rollout", "restart", f"deploy/{name}")
    assert (r.returncode, r.stdout) == (0, f"deployment.apps/{name} restarted\n"), r.stderr
    annotations = setup["apps"].read_namespaced_deployment(name, setup["ns"]).spec.template.metadata.annotations
    assert "kubectl.kubernetes.io/restartedAt" in annotations


def test_rollout_status_times_out_like_kubectl(setup):
    name = f"t-{uuid.uuid4().hex[:6]}"
    stuck = deployment(name)
    stuck["spec"]["paused"] = True  # the controller does nothing for a paused Deployment: never rolled out
    setup["apps"].create_namespaced_deployment(setup["ns"], stuck)
    r = on_a0(setup, "rollout", "status", f"deploy/{name}", "--timeout", "1s")
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == "error: timed out waiting for the condition", r
    assert r.stdout.startswith("Waiting for deployment")


# --- apply --dry-run and diff ---------------------------------------------------------------------


def test_apply_dry_run_server_changes_nothing(setup, tmp_path):
    f = tmp_path / "cm.yaml"
    f.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}, "data": {"a": "1"}})
    )
    r = on_a0(setup, "apply", "-f", str(f), "--dry-run=server")
    assert (r.returncode, r.stdout, r.stderr) == (0, "configmap/dry serverside-applied (server dry run)\n", "")
    r = on_a0(setup, "apply", "-f", str(f), "--dry-run=server", "-o", "json")
    assert json.loads(r.stdout)["metadata"]["uid"], "the API server's answer: defaulted, with a uid"
    with pytest.raises(client.ApiException) as e:
        setup["core"].read_namespaced_config_map("dry", setup["ns"])
    assert e.value.status == 404
    r = on_a0(setup, "apply", "-f", str(f), "--dry-run=client")
    assert (r.returncode, r.stdout) == (0, "configmap/dry serverside-applied (dry run)\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}})
    )
    r = on_a0(setup, "apply", "-f", str(bad), "--dry-run=server")
    assert r.returncode == 1 and r.stderr.startswith("error: ") and r.stdout == ""


def test_diff_exits_0_when_same_and_1_with_kubectls_unified_diff(setup, tmp_path):
    f = tmp_path / "cm.yaml"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "diffed"}, "data": {"a": "1"}}
    f.write_text(yaml.safe_dump(cm))
    r = on_a0(setup, "diff", "-f", str(f))
    assert r.returncode == 1 and "+  a: '1'" in r.stdout.splitlines(), "a new object: all of it is added"
    assert on_a0(setup, "apply", "-f", str(f)).returncode == 0
    r = on_a0(setup, "diff", "-f", str(f))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    cm["data"]["a"] = "2"
    f.write_text(yaml.safe_dump(cm))
    r = on_a0(setup, "diff", "-f", str(f))
    assert r.returncode == 1, r.stderr
    ref = f"v1.ConfigMap.{setup['ns']}.diffed"
    assert r.stdout.splitlines()[:3] == [f"diff -u -N LIVE/{ref} MERGED/{ref}", f"--- LIVE/{ref}", f"+++ MERGED/{ref}"]
    assert "-  a: '1'" in r.stdout.splitlines() and "+  a: '2'" in r.stdout.splitlines()
    assert setup["core"].read_namespaced_config_map("diffed", setup["ns"]).data == {"a": "1"}, "diff changes nothing"
    r = on_a0(setup, "diff", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "does not exist" in r.stderr, "an error is more than 1, as kubectl diff's"


# --- clusters and agents --------------------------------------------------------------------------


def test_clusters_and_agents(setup):
    r = cli(setup, "clusters")
    assert r.returncode == 0, r.stderr
    header, *rows = table(r.stdout)
    assert header == ["NAME", "STATE", "AGENT-STATE", "AGENT", "VERSION", "OBJECTS", "FRESHNESS", "WATCHES"]
    assert [row[:3] for row in rows] == [["a0", "ACTIVE", "watching"], ["a1", "ACTIVE", "watching"]]
    for row in rows:
        assert int(row[5]) > 0
        assert re.fullmatch(r"\d+[smhdy]\S*|<none>|<unknown>", row[6]), row
        assert re.fullmatch(r"\d+/\d+|<unknown>", row[7]), row
    r = cli(setup, "clusters", "a1", "-o", "json")
    assert [a["name"] for a in json.loads(r.stdout)] == ["a1"]
    r = cli(setup, "clusters", "nobody")
    assert (r.returncode, r.stderr) == (1, "error: account 'nobody' is not known to this hub\n")
    r = cli(setup, "agents")
    assert r.returncode == 0, r.stderr
    header, row = table(r.stdout)
    assert header == ["AGENT", "ZONE", "VERSION", "REPLICA", "ACCOUNTS", "EVENTS", "AGE"] and row[4] == "2"


def test_the_hub_address_from_the_environment_and_the_login_file(setup, tmp_path):
    r = cli(setup, "clusters", "-o", "name", hub=False, env={"SCALE_AGENT_HUB": setup["hub"].url})
    assert (r.returncode, r.stdout) == (0, "a0\na1\n"), r.stderr
    cfg = {"SCALE_AGENT_CONFIG": str(tmp_path / "config.yaml")}
    saved = cli(setup, "login", "--token", "anything", env=cfg)  # the hub runs without logins: any token passes
    assert saved.returncode == 0, saved.stderr
    r = cli(setup, "clusters", "-o", "name", hub=False, env=cfg)
    assert (r.returncode, r.stdout) == (0, "a0\na1\n"), r.stderr


# --- mistakes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "foos"],
        ["describe", "foo", "x"],
        ["scale", "foo", "x", "--replicas", "1"],
        ["rollout", "status", "foo/x"],
    ],
)
def test_an_unknown_kind_is_kubectls_error(setup, argv):
    r = on_a0(setup, *argv)
    kind = argv[1].split("/")[0] if argv[0] != "rollout" else "foo"
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f'error: the server doesn\'t have a resource type "{kind}"\n')


@pytest.mark.parametrize(
    "verb", [["get", "deploy"], ["describe", "deploy"], ["rollout", "status", "deploy/web"], ["clusters"]]
)
def test_a_bad_flag_is_kubectls_error_before_anything_else(setup, verb):
    r = cli(setup, *verb, "--foo")  # no --account either: the flag is reported, not the account
    prog = " ".join(verb[:2]) if verb[0] == "rollout" else verb[0]
    assert (r.returncode, r.stdout, r.stderr) == (
        1,
        "",
        f"error: unknown flag: --foo\nSee 'scale-agent {prog} --help' for usage.\n",
    )


# --- mistakes a user makes (from a new user's review) ---------------------------------------------


def test_a_hub_address_that_is_not_the_hubs_http_port_is_said_so_without_a_traceback(setup):
    hub = setup["hub"]
    grpc_port = hub.grpc_target.rsplit(":", 1)[1]
    for argv in (["get", "cm", "--account", "a0"], ["clusters"]):
        r = cli(setup, *argv, "--hub", f"http://127.0.0.1:{grpc_port}", hub=False)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "does not speak HTTP/1.1" in r.stderr and "gRPC" in r.stderr, r.stderr
    f = setup["tmp"] / "diff-cm.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}))
    r = cli(setup, "diff", "-f", str(f), "--account", "a0", "--hub", f"https://127.0.0.1:{grpc_port}", hub=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr  # an error, not "different"


def test_diff_mistakes_exit_2_not_1_which_means_different(setup):
    for argv in (["diff", "--account", "a0"], ["diff", "-f", "x.yaml", "--foo"]):
        r = cli(setup, *argv)
        assert r.returncode == 2 and r.stderr.startswith("error: "), (argv, r.returncode, r.stderr)


def test_apply_can_refuse_to_take_over_fields_another_manager_owns(setup, tmp_path):
    core = setup["core"]
    core.create_namespaced_config_map(setup["ns"], {"metadata": {"name": "owned"}, "data": {"k": "theirs"}})
    f = tmp_path / "owned.yaml"
    f.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"k": "ours"}})
    )
    r = on_a0(setup, "apply", "-f", str(f), "--force-conflicts=false", "--timeout", "1m")
    assert r.returncode == 1 and "conflict" in r.stderr.lower(), (r.returncode, r.stderr)
    assert core.read_namespaced_config_map("owned", setup["ns"]).data == {"k": "theirs"}
    r = on_a0(setup, "apply", "-f", str(f), "--timeout", "90s")  # the default takes the field over
    assert r.returncode == 0, r.stderr
    assert core.read_namespaced_config_map("owned", setup["ns"]).data == {"k": "ours"}


def test_get_hides_managed_fields_unless_asked_and_refuses_a_name_with_a_selector(setup):
    r = on_a0(setup, "get", "cm", "c-1", "-o", "json")
    assert r.returncode == 0 and "managedFields" not in json.loads(r.stdout)["metadata"]
    r = on_a0(setup, "get", "cm", "c-1", "-o", "json", "--show-managed-fields")
    assert r.returncode == 0 and "managedFields" in json.loads(r.stdout)["metadata"]
    r = on_a0(setup, "get", "cm", "c-1", "-l", "size")
    assert (r.returncode, r.stderr) == (1, "error: name cannot be provided when a selector is specified\n")

"""Operations end to end: REST call to the hub, down the link, run by the agent against kubesim,
and back, with the hub's cache showing the change when the task completes. Real processes,
loopback TLS. Each test works in its own namespace."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from tests.helpers import CLI, AgentProcess, HubProcess, make_hub_pki, write_yaml

WAIT_MS = 8000  # the hub's operationWaitMs: long enough for kubesim, short enough to test a timeout


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_hub_pki(tmp_path_factory.mktemp("pki"))


def start_hub(tmp_path: Path, pki, *, grace: float = 60) -> HubProcess:
    doc = {
        "server": {"grpcPort": 0, "httpPort": 0},
        "tls": {"certFile": str(pki.cert), "keyFile": str(pki.key)},
        "sessions": {"graceSeconds": grace},
        "database": {"url": f"sqlite:///{tmp_path / 'hub.db'}"},
        "operations": {"operationWaitMs": WAIT_MS},
    }
    return HubProcess(write_yaml(tmp_path / "hub.yaml", doc))


def start_agent(tmp_path: Path, hub: HubProcess, pki, accounts: list[dict]) -> AgentProcess:
    doc = {
        "kubernetes": {"accounts": accounts, "discoveryIntervalSeconds": 1},
        "server": {"port": 0},
        "clouddriver": {"grpc": f"localhost:{hub.grpc_port}", "tls": {"cacertFile": str(pki.ca)}},
    }
    return AgentProcess(write_yaml(tmp_path / "agent.yaml", doc), print_events=False)


@pytest.fixture(scope="module")
def stack(kubesim, pki, tmp_path_factory):
    """A hub and an agent with three accounts: `ops` (admin, every kind), `limited` (kubesim's
    limited identity, rights in team-a only) and `cms` (admin, following ConfigMaps only)."""
    tmp = tmp_path_factory.mktemp("ops")
    hub = start_hub(tmp, pki)
    agent = start_agent(
        tmp,
        hub,
        pki,
        [
            {"name": "ops", "kubeConfigFile": str(kubesim.admin(0))},
            {"name": "limited", "kubeConfigFile": str(kubesim.limited(1))},
            {"name": "cms", "kubeConfigFile": str(kubesim.admin(1)), "kinds": ["ConfigMap"]},
        ],
    )
    agent.wait_health(
        lambda d: d["status"] == "ok" and len(d["accounts"]) == 3, timeout=90, what="all accounts watching"
    )
    hub.wait_until(
        "/api/v1/accounts",
        lambda d: len(d) == 3 and all(a["agentState"] == "watching" for a in d),
        what="three accounts",
    )
    yield hub, agent
    agent.stop()
    hub.stop()


@pytest.fixture
def hub(stack) -> HubProcess:
    return stack[0]


@pytest.fixture
def apps(kubesim) -> client.AppsV1Api:
    return client.AppsV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))


@pytest.fixture
def core(kubesim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))


@pytest.fixture
def ns(core):
    name = f"ops-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def deployment(name: str, image: str = "nginx:1.25", replicas: int = 2, **labels: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, **labels}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


ROOT_CA = "kube-root-ca.crt"  # in every namespace, put there by the cluster


def configmaps(core: client.CoreV1Api, ns: str) -> list[str]:
    """The ConfigMaps a test made in its namespace (not the cluster's own)."""
    return sorted(c.metadata.name for c in core.list_namespaced_config_map(ns).items if c.metadata.name != ROOT_CA)


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def deploy(hub: HubProcess, account: str, manifests: list[dict], **extra) -> dict:
    return hub.run_task([{"deployManifest": {"account": account, "manifests": manifests, **extra}}])


def cached(hub: HubProcess, account: str, kind: str, ns: str, name: str) -> dict | None:
    items = hub.objects(account, f"?kind={kind}&namespace={ns}&name={name}")
    return items[0] if items else None


def completed(task: dict) -> dict:
    assert task["state"] == "completed", task
    assert task["status"]["completed"] and not task["status"]["failed"]
    return task


def failed(task: dict) -> str:
    assert task["state"] == "failed", task
    assert task["status"]["failed"]
    return task["exception"]["message"]


# ---- deploy --------------------------------------------------------------------------------------


def test_deploy_applies_dependencies_first_and_the_cache_shows_it_on_completion(hub, ns):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds"},
        "stringData": {"password": "hunter2-" + ns},
    }
    manifests = [
        deployment("web"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
        configmap("settings", mode="fast"),
        secret,
    ]
    task = completed(deploy(hub, "ops", manifests, namespaceOverride=ns, moniker={"app": "shop", "cluster": "web"}))
    (result,) = task["resultObjects"]
    assert [m["kind"] for m in result["manifests"]] == ["Secret", "ConfigMap", "Service", "Deployment"]
    assert result["manifestNamesByNamespace"] == {
        ns: ["secret creds", "configMap settings", "service web", "deployment web"]
    }
    assert "hunter2" not in str(task), "a Secret's value left the cluster"
    applied = {m["kind"]: m for m in result["manifests"]}
    # Read-your-writes: no waiting here, the task's completion promised it.
    web = cached(hub, "ops", "Deployment", ns, "web")
    assert web is not None and int(web["metadata"]["resourceVersion"]) >= int(
        applied["Deployment"]["metadata"]["resourceVersion"]
    )
    assert web["metadata"]["annotations"]["moniker.spinnaker.io/application"] == "shop"
    assert [o["metadata"]["name"] for o in hub.objects("ops", f"?application=shop&namespace={ns}&kind=Deployment")] == [
        "web"
    ]
    assert any("cache shows the changes" in h["status"] for h in task["history"])
    assert web["metadata"]["managedFields"][0]["manager"] == "scale-agent"


def test_a_single_manifest_with_a_moniker(hub, ns):
    task = completed(
        hub.run_task(
            [
                {
                    "deployManifest": {
                        "account": "ops",
                        "manifest": configmap("one"),
                        "namespaceOverride": ns,
                        "moniker": {"app": "solo"},
                    }
                }
            ]
        )
    )
    assert task["resultObjects"][0]["manifestNamesByNamespace"] == {ns: ["configMap one"]}
    assert [o["metadata"]["name"] for o in hub.objects("ops", f"?application=solo&namespace={ns}")] == ["one"]


def test_deploy_creates_the_namespace_it_deploys_into(hub, core):
    name = f"fresh-{uuid.uuid4().hex[:6]}"
    cm = {**configmap("inside", a="1"), "metadata": {"name": "inside", "namespace": name}}
    try:
        task = completed(
            deploy(hub, "ops", [cm, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])
        )
        assert [m["kind"] for m in task["resultObjects"][0]["manifests"]] == ["Namespace", "ConfigMap"]
        assert core.read_namespaced_config_map("inside", name).data == {"a": "1"}
    finally:
        core.delete_namespace(name)


def test_a_redeploy_updates_in_place(hub, ns, apps):
    completed(deploy(hub, "ops", [deployment("app", image="nginx:1")], namespaceOverride=ns))
    completed(deploy(hub, "ops", [deployment("app", image="nginx:2")], namespaceOverride=ns))
    assert apps.read_namespaced_deployment("app", ns).spec.template.spec.containers[0].image == "nginx:2"
    assert (
        cached(hub, "ops", "Deployment", ns, "app")["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    )


def test_kinds_the_agent_does_not_cache_can_still_be_deployed(hub, kubesim):
    apps1 = client.AppsV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    task = completed(deploy(hub, "cms", [deployment("uncached"), configmap("cached", x="1")]))
    assert apps1.read_namespaced_deployment("uncached", "default").spec.replicas == 2
    assert cached(hub, "cms", "ConfigMap", "default", "cached")["data"] == {"x": "1"}
    # Deployed, but not followed: the hub says it follows no such kind rather than "none".
    status, answer = hub.get("/api/v1/accounts/cms/objects?kind=Deployment")
    assert status == 404 and answer["reason"] == "UnknownKind", answer
    assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
        "default": ["configMap cached", "deployment uncached"]
    }
    apps1.delete_namespaced_deployment("uncached", "default")


# ---- patch, scale, rollouts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy, body",
    [
        ("strategic", {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:patched"}]}}}}),
        ("merge", {"metadata": {"labels": {"patched": "yes"}}}),
        ("json", [{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}]),
    ],
)
def test_patch_manifest(hub, ns, apps, strategy, body):
    completed(deploy(hub, "ops", [deployment("p")], namespaceOverride=ns))
    task = completed(
        hub.run_task(
            [
                {
                    "patchManifest": {
                        "account": "ops",
                        "manifestName": "deployment p",
                        "location": ns,
                        "patchBody": body,
                        "options": {"mergeStrategy": strategy},
                    }
                }
            ]
        )
    )
    live = apps.read_namespaced_deployment("p", ns)
    if strategy == "strategic":
        assert [c.image for c in live.spec.template.spec.containers] == ["nginx:patched"]
    else:
        assert live.metadata.labels["patched"] == "yes"
    patched = task["resultObjects"][0]["manifests"][0]
    assert (
        cached(hub, "ops", "Deployment", ns, "p")["metadata"]["resourceVersion"]
        >= patched["metadata"]["resourceVersion"]
    )


def test_scale_manifest(hub, ns, apps):
    completed(deploy(hub, "ops", [deployment("s", replicas=1)], namespaceOverride=ns))
    # One description at /kubernetes/ops/{type}, Clouddriver's other form.
    status, created = hub.post(
        "/kubernetes/ops/scaleManifest",
        {"account": "ops", "manifestName": "deployment s", "location": ns, "replicas": 4},
    )
    assert status == 200, created
    completed(hub.json(f"{created['resourceUri']}?waitSeconds=30", timeout=45))
    assert apps.read_namespaced_deployment("s", ns).spec.replicas == 4
    assert cached(hub, "ops", "Deployment", ns, "s")["spec"]["replicas"] == 4


def test_undo_rollout_to_a_previous_revision(hub, ns, apps):
    for image in ("nginx:1", "nginx:2", "nginx:3"):
        completed(deploy(hub, "ops", [deployment("r", image=image)], namespaceOverride=ns))
    undo = {"account": "ops", "manifestName": "deployment r", "location": ns}

    def image() -> str:
        return apps.read_namespaced_deployment("r", ns).spec.template.spec.containers[0].image

    task = completed(hub.run_task([{"undoRolloutManifest": {**undo, "revision": 1}}]))
    assert task["resultObjects"][0]["revision"] == 1
    assert image() == "nginx:1"
    assert cached(hub, "ops", "Deployment", ns, "r")["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1"
    # Revision 1 became revision 4; the previous one is now nginx:3's.
    completed(hub.run_task([{"undoRolloutManifest": undo}]))
    assert image() == "nginx:3"
    message = failed(hub.run_task([{"undoRolloutManifest": {**undo, "revision": 99}}]))
    assert "revision 99" in message and "not found" in message


def test_pause_resume_and_rolling_restart(hub, ns, apps):
    completed(deploy(hub, "ops", [deployment("pr")], namespaceOverride=ns))
    target = {"account": "ops", "manifestName": "deployment pr", "location": ns}
    completed(hub.run_task([{"pauseRolloutManifest": target}]))
    assert apps.read_namespaced_deployment("pr", ns).spec.paused is True
    assert cached(hub, "ops", "Deployment", ns, "pr")["spec"]["paused"] is True
    message = failed(hub.run_task([{"undoRolloutManifest": target}]))
    assert "paused" in message
    completed(hub.run_task([{"resumeRolloutManifest": target}]))
    assert not apps.read_namespaced_deployment("pr", ns).spec.paused
    completed(hub.run_task([{"rollingRestartManifest": target}]))
    annotations = apps.read_namespaced_deployment("pr", ns).spec.template.metadata.annotations
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    assert (
        "kubectl.kubernetes.io/restartedAt"
        in cached(hub, "ops", "Deployment", ns, "pr")["spec"]["template"]["metadata"]["annotations"]
    )


# ---- delete --------------------------------------------------------------------------------------


def test_delete_by_name_waits_until_gone(hub, ns, apps, core):
    completed(deploy(hub, "ops", [deployment("d")], namespaceOverride=ns))
    hub.wait_until(
        f"/api/v1/accounts/ops/objects?kind=Pod&namespace={ns}",
        lambda d: len(d["items"]) == 2,
        what="the deployment's pods",
    )
    task = completed(
        hub.run_task(
            [
                {
                    "deleteManifest": {
                        "account": "ops",
                        "manifestName": "deployment d",
                        "location": ns,
                        "options": {"propagationPolicy": "Foreground", "gracePeriodSeconds": 0},
                    }
                }
            ]
        )
    )
    assert task["resultObjects"][0]["manifestNamesByNamespace"] == {ns: ["deployment d"]}
    assert apps.list_namespaced_deployment(ns).items == []
    assert core.list_namespaced_pod(ns).items == [], "foreground deletion returns once the dependents are gone"
    assert cached(hub, "ops", "Deployment", ns, "d") is None


def test_delete_by_label_selector(hub, ns, core):
    completed(
        deploy(
            hub,
            "ops",
            [
                {**configmap(f"c{i}"), "metadata": {"name": f"c{i}", "labels": {"tier": tier}}}
                for i, tier in enumerate(["a", "a", "b"])
            ],
            namespaceOverride=ns,
        )
    )
    task = completed(
        hub.run_task(
            [{"deleteManifest": {"account": "ops", "kinds": ["configMap"], "location": ns, "labelSelector": "tier=a"}}]
        )
    )
    assert sorted(task["resultObjects"][0]["manifestNamesByNamespace"][ns]) == ["configMap c0", "configMap c1"]
    assert configmaps(core, ns) == ["c2"]
    assert [
        o["metadata"]["name"]
        for o in hub.objects("ops", f"?kind=ConfigMap&namespace={ns}")
        if o["metadata"]["name"] != ROOT_CA
    ] == ["c2"]


def test_deleting_what_is_not_there_completes(hub, ns):
    task = completed(
        hub.run_task([{"deleteManifest": {"account": "ops", "manifestName": "configMap ghost", "location": ns}}])
    )
    assert task["resultObjects"][0]["alreadyGone"][0]["name"] == "ghost"


# ---- jobs and logs -------------------------------------------------------------------------------


def test_run_job_reports_completion_and_logs(hub, ns):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "migrate-"},
        "spec": {
            "template": {
                "metadata": {"annotations": {"kubesim.scale-agent.io/log.main": "migrated 42 rows\n"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
            }
        },
    }
    task = completed(hub.run_task([{"runJob": {"account": "ops", "manifest": job, "namespace": ns}}]))
    (result,) = task["resultObjects"]
    assert result["jobStatus"]["status"] == "succeeded"
    name = result["jobStatus"]["name"]
    assert name.startswith("migrate-")
    (pod_logs,) = result["logs"].values()
    assert pod_logs == {"main": "migrated 42 rows\n"}
    (pod,) = result["logs"]
    with __import__("urllib.request").request.urlopen(
        f"{hub.url}/api/v1/accounts/ops/namespaces/{ns}/pods/{pod}/log", timeout=10
    ) as r:
        assert r.read().decode() == "migrated 42 rows\n"
    assert cached(hub, "ops", "Job", ns, name)["status"]["succeeded"] == 1
    # Deleting a Job takes its pods along (Background, as kubectl; the server's default would orphan them).
    completed(hub.run_task([{"deleteManifest": {"account": "ops", "manifestName": f"job {name}", "location": ns}}]))
    hub.wait_until(
        f"/api/v1/accounts/ops/objects?kind=Pod&namespace={ns}",
        lambda d: d["items"] == [],
        what="the job's pod collected",
    )


def test_a_job_whose_pods_cannot_be_placed_fails_at_the_deadline_saying_why_and_is_kept(hub, ns, kubesim):
    """No node has this label: the pod stays Pending, as on a real cluster where no node matches
    (or, with no scheduler at all, where no node is ever assigned)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "stuck"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"disktype": "ssd"},
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }
    task = hub.run_task([{"runJob": {"account": "ops", "manifest": job, "namespace": ns}}])
    message = failed(task)
    assert (task["exception"]["code"], task["exception"]["reason"]) == (504, "Timeout")
    assert message.startswith(
        f"runJob on account ops failed: job stuck in namespace {ns} did not complete before "
        "the operation's deadline: pod stuck-"
    ), message
    assert (
        " Pending (not scheduled: Unschedulable: 0/1 nodes are available: 1 node(s) didn't match Pod's node "
        "affinity/selector." in message
    )
    assert message.endswith(f"The Job {ns}/stuck was left in place; delete it with a deleteManifest of 'job stuck'")
    (result,) = task["resultObjects"]
    status = result["jobStatus"]
    assert (status["name"], status["status"], status["active"]) == ("stuck", "running", 1)
    (pod,) = status["pods"]
    assert pod.startswith("pod stuck-") and "not scheduled: Unschedulable" in pod
    assert result["manifestNamesByNamespace"] == {ns: ["job stuck"]}
    batch = client.BatchV1Api(config.new_client_from_config(config_file=str(kubesim.admin(0))))
    assert batch.read_namespaced_job("stuck", ns).status.active == 1, "the Job was kept for inspection"
    completed(hub.run_task([{"deleteManifest": {"account": "ops", "manifestName": "job stuck", "location": ns}}]))
    hub.wait_until(
        f"/api/v1/accounts/ops/objects?kind=Pod&namespace={ns}",
        lambda d: d["items"] == [],
        what="the job's pod collected",
    )


# ---- on-demand cache refresh ---------------------------------------------------------------------


def test_force_cache_refresh_after_an_operation_answers_at_once(hub, ns, core):
    task = completed(deploy(hub, "ops", [configmap("fresh", v="1")], namespaceOverride=ns))
    rv = task["resultObjects"][0]["manifests"][0]["metadata"]["resourceVersion"]
    status, doc = hub.post(
        "/cache/kubernetes/manifest",
        {"account": "ops", "location": ns, "name": "configMap fresh", "resourceVersion": rv},
    )
    assert (status, doc["status"], doc["resourceVersion"]) == (200, "cached", rv)
    # A change made behind the hub's back: the refresh reads the live object and waits for it.
    changed = core.patch_namespaced_config_map("fresh", ns, {"data": {"v": "2"}})
    status, doc = hub.post(
        "/cache/kubernetes/manifest",
        {
            "account": "ops",
            "location": ns,
            "name": "configMap fresh",
            "resourceVersion": changed.metadata.resource_version,
        },
    )
    assert status == 200 and doc["resourceVersion"] == changed.metadata.resource_version
    assert cached(hub, "ops", "ConfigMap", ns, "fresh")["data"] == {"v": "2"}


# ---- many at once --------------------------------------------------------------------------------


def test_a_slow_operation_does_not_hold_up_others(hub, ns, core):
    """A delete held by a finalizer waits until its deadline; a deploy sent meanwhile completes."""
    completed(
        deploy(
            hub,
            "ops",
            [{**configmap("held"), "metadata": {"name": "held", "finalizers": ["test/hold"]}}],
            namespaceOverride=ns,
        )
    )
    results: dict = {}
    slow = threading.Thread(
        target=lambda: results.setdefault(
            "delete",
            hub.run_task([{"deleteManifest": {"account": "ops", "manifestName": "configMap held", "location": ns}}]),
        )
    )
    slow.start()
    hub.wait_until(
        "/api/v1/accounts/ops/objects?kind=ConfigMap&namespace=" + ns + "&name=held",
        lambda d: d["items"] and d["items"][0]["metadata"].get("deletionTimestamp"),
        what="the delete started",
    )
    completed(deploy(hub, "ops", [configmap("quick")], namespaceOverride=ns))
    assert slow.is_alive(), "the deploy completed while the delete was still waiting"
    slow.join(60)
    message = failed(results["delete"])
    assert "deadline" in message and "waiting for configmap held" in message
    core.patch_namespaced_config_map("held", ns, {"metadata": {"finalizers": None}})


# ---- bad input -----------------------------------------------------------------------------------


def test_malformed_requests_are_refused_with_the_reason(hub):
    for body, words in [
        ({"deployManifest": {}}, "non-empty JSON list"),
        ([{"frobnicate": {"account": "ops"}}], "unknown operation type 'frobnicate'"),
        ([{"deployManifest": {"manifests": []}}], "account is required"),
    ]:
        status, doc = hub.post("/kubernetes/ops", body)
        assert status == 400 and words in doc["error"], (body, doc)
    status, doc = hub.get("/task/nope")
    assert status == 404


@pytest.mark.parametrize(
    "manifest, words",
    [
        ({"apiVersion": "v1", "metadata": {"name": "x"}}, "kind is missing"),
        (
            {"apiVersion": "apps/v9", "kind": "Deployment", "metadata": {"name": "x"}},
            "apiVersion 'apps/v9' is not served",
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dta": {"a": "b"}},
            'unknown field "dta"',
        ),
    ],
)
def test_invalid_manifests_fail_the_task(hub, ns, core, manifest, words):
    message = failed(deploy(hub, "ops", [manifest], namespaceOverride=ns))
    assert words in message
    assert configmaps(core, ns) == []


def test_a_partly_applied_deploy_says_what_was_applied(hub, ns, core):
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"}, "spec": {"replicaz": 3}}
    task = deploy(
        hub,
        "ops",
        [
            configmap("good"),
            bad,
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}, "spec": {"ports": [{"port": 1}]}},
        ],
        namespaceOverride=ns,
    )
    message = failed(task)
    assert 'unknown field "spec.replicaz"' in message
    (result,) = task["resultObjects"]
    assert result["manifestNamesByNamespace"] == {ns: ["configMap good", "service svc"]}
    assert result["failedManifest"] == "deployment bad" and result["notApplied"] == []
    assert "applied before it: configMap good, service svc" in message
    assert configmaps(core, ns) == ["good"]


def test_a_deploy_with_an_unknown_field_fails_naming_the_field_and_the_manifest_never_a_bare_500(hub, ns, apps):
    bad = deployment("typo")
    bad["spec"]["replicaz"] = 3
    task = deploy(hub, "ops", [bad], namespaceOverride=ns)
    message = failed(task)
    assert (task["exception"]["code"], task["exception"]["reason"]) == (400, "BadRequest")
    assert message.startswith(f"deployManifest on account ops failed: deployment.apps typo in namespace {ns}: "), (
        message
    )
    assert "replicaz" in message and message.endswith("; nothing was applied")
    (result,) = task["resultObjects"]
    assert (result["manifests"], result["failedManifest"], result["notApplied"]) == ([], "deployment typo", [])
    assert apps.list_namespaced_deployment(ns).items == []


def test_an_unknown_account_fails_the_task(hub):
    message = failed(deploy(hub, "nobody", [configmap("x")]))
    assert "no agent serves account 'nobody'" in message


def test_a_namespace_the_identity_may_not_write_fails_with_forbidden(hub, kubesim):
    task = deploy(hub, "limited", [configmap("nope")], namespaceOverride="default")
    message = failed(task)
    assert task["exception"]["code"] == 403 and "forbidden" in message.lower()
    assert completed(deploy(hub, "limited", [configmap(f"ok-{uuid.uuid4().hex[:6]}")], namespaceOverride="team-a"))


def test_an_account_whose_agent_is_gone_fails_the_task(kubesim, pki, tmp_path):
    hub = start_hub(tmp_path, pki, grace=300)
    agent = start_agent(
        tmp_path, hub, pki, [{"name": "gone", "kubeConfigFile": str(kubesim.admin(1)), "kinds": ["ConfigMap"]}]
    )
    try:
        hub.wait_until("/api/v1/accounts/gone", lambda d: d["agentState"] == "watching", what="the account")
        agent.stop()
        hub.wait_until("/api/v1/accounts/gone", lambda d: d["state"] == "DISCONNECTED", what="the agent gone")
        message = failed(deploy(hub, "gone", [configmap("x")]))
        assert "disconnected" in message
    finally:
        agent.stop()
        hub.stop()


def test_metrics_count_tasks_and_operations(hub):
    import re
    import urllib.request

    completed(deploy(hub, "ops", [configmap(f"m-{uuid.uuid4().hex[:6]}")]))
    failed(deploy(hub, "nobody", [configmap("x")]))
    with urllib.request.urlopen(hub.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    done = float(re.search(r'scale_agent_hub_tasks_ended_total\{state="completed"\} (\S+)', text).group(1))
    bad = float(re.search(r'scale_agent_hub_tasks_ended_total\{state="failed"\} (\S+)', text).group(1))
    sent = float(re.search(r"^scale_agent_hub_operations_sent_total (\S+)", text, re.M).group(1))
    assert done >= 1 and bad >= 1 and sent >= done


# ---- the CLI -------------------------------------------------------------------------------------


def cli(hub: HubProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--hub", hub.url], input=stdin, capture_output=True, text=True, timeout=120)


def test_cli_apply_and_delete(hub, ns, apps, tmp_path):
    manifest = tmp_path / "app.yaml"
    manifest.write_text(yaml.safe_dump_all([deployment("cli-web"), configmap("cli-settings", a="1")]))
    done = cli(hub, "apply", "-f", str(manifest), "--account", "ops", "-n", ns)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "configmap/cli-settings serverside-applied",
        "deployment.apps/cli-web serverside-applied",
    ]
    assert apps.read_namespaced_deployment("cli-web", ns).spec.replicas == 2
    got = cli(hub, "get", "deployment", "cli-web", "--account", "ops", "-n", ns)
    assert got.returncode == 0 and got.stdout.split()[:6] == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
        "cli-web",
    ]
    gone = cli(hub, "delete", "deployment", "cli-web", "--account", "ops", "-n", ns)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.strip() == 'deployment.apps "cli-web" deleted'
    assert apps.list_namespaced_deployment(ns).items == []


def test_cli_apply_reports_a_refusal(hub, ns):
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}, "dta": {}}
    done = cli(hub, "apply", "-f", "-", "--account", "ops", "-n", ns, stdin=json.dumps(bad))
    assert done.returncode == 1
    assert 'unknown field "dta"' in done.stderr and done.stderr.startswith("error:"), done.stderr

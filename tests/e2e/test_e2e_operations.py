"""Operations through the hub change the cluster: deploy, patch, scale, rollouts, delete, runJob.

On the real control plane a Deployment controller makes the ReplicaSets (and their revisions); its
node (docs/real-cluster.md) pulls no image, so pods of images it does not hold never start.
"""

from __future__ import annotations

import os

from tests.e2e.e2e_stack import Cluster, Stack


def deployment(name: str, image: str, replicas: int = 1) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def run(stack: Stack, op: str, **body) -> dict:
    return stack.hub.run_task([{op: {"account": "admin", **body}}], timeout=90)


def completed(task: dict) -> dict:
    assert task["state"] == "completed", task.get("exception") or task
    return task


def live(cluster: Cluster, namespace: str, kind: str, name: str) -> dict:
    return cluster.json("get", kind, name, "-n", namespace)


def image_of(cluster: Cluster, namespace: str) -> str:
    return live(cluster, namespace, "deployment", "web")["spec"]["template"]["spec"]["containers"][0]["image"]


def replica_set_for(stack: Stack, namespace: str, image: str) -> None:
    """The Deployment controller has made the ReplicaSet of this template (and so its revision)."""
    stack.hub.wait_until(
        f"/api/v1/accounts/admin/objects?kind=ReplicaSet.apps&namespace={namespace}",
        lambda d: any(rs["spec"]["template"]["spec"]["containers"][0]["image"] == image for rs in d["items"]),
        what=f"the ReplicaSet of {image}",
    )


def test_deploy_patch_scale_rollouts_and_delete_change_the_cluster(stack, cluster, namespace):
    target = {"manifestName": "deployment web", "location": namespace}
    for image in ("nginx:1", "nginx:2"):
        completed(run(stack, "deployManifest", manifests=[deployment("web", image)], namespaceOverride=namespace))
        replica_set_for(stack, namespace, image)
    assert image_of(cluster, namespace) == "nginx:2"

    completed(
        run(
            stack,
            "patchManifest",
            **target,
            patchBody={"metadata": {"labels": {"patched": "yes"}}},
            options={"mergeStrategy": "merge"},
        )
    )
    assert live(cluster, namespace, "deployment", "web")["metadata"]["labels"]["patched"] == "yes"

    completed(run(stack, "scaleManifest", **target, replicas=3))
    assert live(cluster, namespace, "deployment", "web")["spec"]["replicas"] == 3

    completed(run(stack, "undoRolloutManifest", **target, revision=1))
    assert image_of(cluster, namespace) == "nginx:1"

    completed(run(stack, "pauseRolloutManifest", **target))
    assert live(cluster, namespace, "deployment", "web")["spec"]["paused"] is True
    completed(run(stack, "resumeRolloutManifest", **target))
    assert not live(cluster, namespace, "deployment", "web")["spec"].get("paused")
    completed(run(stack, "rollingRestartManifest", **target))
    template = live(cluster, namespace, "deployment", "web")["spec"]["template"]
    assert "kubectl.kubernetes.io/restartedAt" in template["metadata"]["annotations"]
    cached = stack.hub.objects("admin", f"?kind=Deployment.apps&namespace={namespace}&name=web")
    assert cached[0]["spec"]["template"]["metadata"]["annotations"] == template["metadata"]["annotations"]

    completed(run(stack, "deleteManifest", **target))
    assert cluster.kubectl("get", "deployment", "web", "-n", namespace, check=False).returncode != 0
    assert stack.hub.objects("admin", f"?kind=Deployment.apps&namespace={namespace}&name=web") == []


def test_a_run_job_whose_pods_cannot_run_says_what_they_are_doing_and_keeps_the_job(stack, cluster, namespace):
    # No node has this label: Pending (unschedulable) on kubesim and on the real control plane, or
    # on the real control plane without a node (no scheduler at all), until the operation's deadline.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"scale-agent.io/e2e": "nowhere"},
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }
    task = run(stack, "runJob", manifest=job, namespace=namespace)
    assert task["state"] == "failed", task
    exception = task["exception"]
    assert exception["code"] == 504, exception
    message = exception["message"]
    assert "job migrate" in message and "Pending" in message and "left in place" in message, message
    # A real control plane with a node (its scheduler) says why, as kubesim does; without one, no
    # scheduler looks at the pod at all.
    scheduled = cluster.is_kubesim or bool(os.environ.get("SCALE_AGENT_E2E_NODE_IMAGE"))
    assert ("not scheduled" if scheduled else "no node assigned") in message, message
    assert cluster.kubectl("get", "job", "migrate", "-n", namespace, check=False).returncode == 0


def test_a_manifest_with_an_unknown_field_fails_naming_the_field_never_a_bare_500(stack, cluster, namespace):
    # Kubernetes 1.20 has no fieldValidation=Strict: its server-side apply answers 500 for such a
    # field. Either way the task must say what was wrong with which manifest.
    bad = deployment("typo", "nginx:1")
    bad["spec"]["replicaz"] = 2
    task = run(stack, "deployManifest", manifests=[bad], namespaceOverride=namespace)
    assert task["state"] == "failed", task
    exception = task["exception"]
    assert "replicaz" in exception["message"] and "typo" in exception["message"], exception
    assert exception.get("code") != 500 or exception.get("reason") not in (None, "", "Error"), exception
    assert cluster.kubectl("get", "deployment", "typo", "-n", namespace, check=False).returncode != 0

"""An operation sent again reaches a second agent, which has no memory of the first run: the
cluster still changes once (kube/operations.py; issue 29's failover finding). Two agents are two
`ClusterOperations` with clients of their own, run against kubesim and the real API server alike;
the cluster is read back with the official client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from kubernetes import client, config

from scaleagent.kube.client import KubeClient
from scaleagent.kube.credentials import load_credentials
from scaleagent.kube.operations import OPERATIONS_ANNOTATION, ClusterOperations, Outcome
from scaleagent.kube.resources import ResourceMap
from tests.conftest import Target


@pytest.fixture
def namespace(target: Target) -> str:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(target.kubeconfig)))
    name = f"once-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
async def agents(target: Target) -> AsyncIterator[list[ClusterOperations]]:
    """Two agents of the same account."""
    clients = [KubeClient(await load_credentials(kubeconfig=target.kubeconfig)) for _ in range(2)]
    yield [ClusterOperations(c, ResourceMap(c)) for c in clients]
    for c in clients:
        await c.close()


def api(target: Target, kind: type) -> object:
    return kind(config.new_client_from_config(config_file=str(target.kubeconfig)))


async def run(agent: ClusterOperations, type_: str, request: dict, op_id: str) -> Outcome:
    out = Outcome(operation=op_id)
    await agent.run(type_, request, out)
    assert out.error is None, out.error
    return out


def deployment(name: str, image: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": image}]}},
        },
    }


async def test_a_job_with_generate_name_is_created_once_and_the_second_agent_follows_it(target, namespace, agents):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "migrate-", "labels": {"once": "yes"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    request = {"manifest": job, "namespace": namespace, "waitForCompletion": False}
    first = await run(agents[0], "runJob", request, "task1-0")
    second = await run(agents[1], "runJob", request, "task1-0")
    batch = api(target, client.BatchV1Api)
    jobs = batch.list_namespaced_job(namespace, label_selector="once=yes").items  # type: ignore[attr-defined]
    print(f"\n{target.name}: jobs after the same runJob on two agents: {[j.metadata.name for j in jobs]}")
    assert [j.metadata.name for j in jobs] == [first.objects[0]["metadata"]["name"]]
    assert second.objects[0]["metadata"]["uid"] == jobs[0].metadata.uid
    assert jobs[0].metadata.name.startswith("migrate-") and len(jobs[0].metadata.name) == len("migrate-") + 5
    # Another operation of the same manifest is another Job.
    await run(agents[1], "runJob", request, "task2-0")
    assert len(batch.list_namespaced_job(namespace, label_selector="once=yes").items) == 2  # type: ignore[attr-defined]


async def test_a_job_name_taken_by_another_operation_is_still_refused(target, namespace, agents):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "fixed"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
    }
    request = {"manifest": job, "namespace": namespace, "waitForCompletion": False}
    await run(agents[0], "runJob", request, "a-0")
    await run(agents[1], "runJob", request, "a-0")  # the same operation: follows its Job
    out = Outcome(operation="b-0")
    await agents[1].run("runJob", request, out)
    assert out.error is not None and out.error.code == 409, out.error


async def test_a_rollback_sent_to_two_agents_rolls_back_once(target, namespace, agents):
    apps = api(target, client.AppsV1Api)
    apps.create_namespaced_deployment(namespace, deployment("web", "nginx:1.24"))  # type: ignore[attr-defined]
    await wait_for_revisions(apps, namespace, 1)
    newer = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}}
    apps.patch_namespaced_deployment("web", namespace, newer)  # type: ignore[attr-defined]
    await wait_for_revisions(apps, namespace, 2)
    request = {"manifestName": "deployment web", "location": namespace}
    await run(agents[0], "undoRolloutManifest", request, "undo-0")
    second = await run(agents[1], "undoRolloutManifest", request, "undo-0")
    live = apps.read_namespaced_deployment("web", namespace)  # type: ignore[attr-defined]
    image = live.spec.template.spec.containers[0].image
    print(f"\n{target.name}: image after the same undo on two agents: {image}")
    assert image == "nginx:1.24"  # once: a second undo would have gone back to 1.25
    assert "alreadyApplied" in second.output
    assert "undo-0" in live.metadata.annotations[OPERATIONS_ANNOTATION].split(",")


async def test_a_restart_sent_to_two_agents_restarts_once(target, namespace, agents):
    apps = api(target, client.AppsV1Api)
    apps.create_namespaced_deployment(namespace, deployment("web", "nginx:1.25"))  # type: ignore[attr-defined]
    request = {"manifestName": "deployment web", "location": namespace}
    first = await run(agents[0], "rollingRestartManifest", request, "restart-0")
    second = await run(agents[1], "rollingRestartManifest", request, "restart-0")
    generation = first.objects[0]["metadata"]["generation"]
    live = apps.read_namespaced_deployment("web", namespace)  # type: ignore[attr-defined]
    assert live.metadata.generation == generation  # the template changed once
    assert second.output["alreadyApplied"].startswith("deployment.apps web")
    third = await run(agents[1], "rollingRestartManifest", request, "restart-1")  # another restart is one
    assert "alreadyApplied" not in third.output
    assert third.objects[0]["metadata"]["annotations"][OPERATIONS_ANNOTATION] == "restart-0,restart-1"


async def test_a_json_patch_sent_to_two_agents_is_applied_once(target, namespace, agents):
    apps = api(target, client.AppsV1Api)
    apps.create_namespaced_deployment(namespace, deployment("web", "nginx:1.25"))  # type: ignore[attr-defined]
    request = {
        "manifestName": "deployment web",
        "location": namespace,
        "options": {"mergeStrategy": "json"},
        "patchBody": [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--once"]}],
    }
    await run(agents[0], "patchManifest", request, "patch-0")
    appended = {
        **request,
        "patchBody": [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--twice?"}],
    }
    for agent in agents:
        await run(agent, "patchManifest", appended, "patch-1")
    live = apps.read_namespaced_deployment("web", namespace)  # type: ignore[attr-defined]
    print(
        f"\n{target.name}: args after the same JSON patch on two agents: {live.spec.template.spec.containers[0].args}"
    )
    assert live.spec.template.spec.containers[0].args == ["--once", "--twice?"]
    assert live.metadata.annotations[OPERATIONS_ANNOTATION] == "patch-0,patch-1"


async def wait_for_revisions(apps: object, namespace: str, count: int) -> None:
    """Until the Deployment controller has written `count` ReplicaSets with revisions."""
    for _ in range(300):
        sets = apps.list_namespaced_replica_set(namespace).items  # type: ignore[attr-defined]
        revisions = {(s.metadata.annotations or {}).get("deployment.kubernetes.io/revision") for s in sets}
        if len(revisions - {None}) >= count:
            return
        await asyncio.sleep(0.1)  # a poll interval: the condition is checked again, never assumed
    raise AssertionError(f"{count} revisions never appeared")


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        ({"generateName": "x-", "annotations": ["not", "a", "map"]}, "metadata.annotations must be an object"),
        ({"generateName": 7}, "metadata.generateName must be a string, not int"),
    ],
)
async def test_a_job_with_malformed_metadata_is_refused_saying_what_is_wrong(
    target, namespace, agents, metadata, words
):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {}}
    out = Outcome(operation="bad-0")
    await agents[0].run("runJob", {"manifest": job, "namespace": namespace}, out)
    assert out.error is not None and (out.error.code, out.error.reason) == (400, "BadRequest"), out.error
    assert words in out.error.message

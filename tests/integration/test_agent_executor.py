"""The agent's operation executor against kubesim, in this event loop: deadlines, concurrency, and what a
failure tells."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import orjson
import pytest
from kubernetes import client, config

from scaleagent.agent.accounts import WATCHING, AccountManager, EngineSettings
from scaleagent.agent.budget import Budget
from scaleagent.agent.config import dynamic_account
from scaleagent.agent.executor import OperationExecutor
from scaleagent.agent.sinks import CountingSink
from scaleagent.kube.errors import OperationFailed
from scaleagent.kube.operations import OPERATIONS
from scaleagent.protocol import pb


@pytest.fixture
async def manager(kubesim):
    kubeconfig = base64.b64encode(kubesim.admin(1).read_bytes()).decode()
    m = AccountManager(EngineSettings(discovery_interval=60), CountingSink(), Budget(4, 4))
    runner = m.add(dynamic_account("c1", kubeconfig, "", {"kinds": ["ConfigMap"], "namespaces": ["default"]}))
    for _ in range(600):
        if runner.state == WATCHING:
            break
        await asyncio.sleep(0.05)
    assert runner.state == WATCHING, runner.reason
    yield m
    await m.stop()


def operation(type_: str, request: dict, seconds: float, account: str = "c1") -> pb.Operation:
    return pb.Operation(
        id=uuid.uuid4().hex,
        account=account,
        type=type_,
        request=orjson.dumps(request),
        deadline_unix_ms=int((time.time() + seconds) * 1000),
    )


async def test_an_operation_past_its_deadline_is_not_started(manager):
    executor = OperationExecutor(manager)
    name = f"late-{uuid.uuid4().hex[:6]}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    result = await executor.run(operation("deployManifest", {"manifests": [cm]}, -1))
    assert (result.ok, result.error.code) == (False, 504)
    assert "deadline passed before the agent received it" in result.error.message
    ok = await executor.run(operation("getManifest", {"manifestName": f"configMap {name}", "location": "default"}, 10))
    assert ok.ok and orjson.loads(ok.output) == {"found": False}, "the late deploy must not have run"


async def test_one_waiting_for_a_slot_past_its_deadline_is_not_started(manager, kubesim):
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    held = f"held-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=held, finalizers=["test/hold"]))
    )
    executor = OperationExecutor(manager, max_concurrent=1)
    slow = asyncio.create_task(
        executor.run(operation("deleteManifest", {"manifestName": f"configMap {held}", "location": "default"}, 3))
    )
    while executor.running == 0:
        await asyncio.sleep(0.01)
    name = f"queued-{uuid.uuid4().hex[:6]}"
    queued = await executor.run(
        operation(
            "deployManifest",
            {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}]},
            0.5,
        )
    )
    assert not queued.ok and queued.error.code == 504 and "not started" in queued.error.message
    assert executor.expired == 1
    cut = await slow
    assert (
        cut.error.code == 504
        and f"waiting for configmap {held} in namespace default to be deleted" in cut.error.message
    )
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items if c.metadata.name == name] == []
    core.patch_namespaced_config_map(held, "default", {"metadata": {"finalizers": None}})


async def test_an_operation_under_way_survives_its_account_starting_over(manager, kubesim):
    # A resync (as after a hub replica failed) restarts the account: its connection must outlive
    # the operation running on it, or the operation fails halfway with the transport's words.
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    held = f"held-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=held, finalizers=["test/hold"]))
    )
    executor = OperationExecutor(manager)
    deleting = asyncio.create_task(
        executor.run(operation("deleteManifest", {"manifestName": f"configMap {held}", "location": "default"}, 30))
    )
    while executor.running == 0:
        await asyncio.sleep(0.01)
    runner = manager.runners["c1"]
    before = runner._client
    await manager.resync("c1")  # stops the account (its connection let go) and starts it again
    assert runner._client is not before
    core.patch_namespaced_config_map(held, "default", {"metadata": {"finalizers": None}})
    result = await deleting
    assert result.ok, result.error
    assert before is not None and before not in runner._in_use and before._session.closed  # closed once it ended


async def test_results_list_cache_expectations_only_for_what_the_agent_follows(manager):
    executor = OperationExecutor(manager)
    name = f"exp-{uuid.uuid4().hex[:6]}"
    result = await executor.run(
        operation(
            "deployManifest",
            {
                "manifests": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {"name": name},
                        "spec": {"ports": [{"port": 80}]},
                    },
                ]
            },
            10,
        )
    )
    assert result.ok, result.error
    assert [(e.kind, e.name) for e in result.expect] == [("ConfigMap", name)]
    assert [o["kind"] for o in orjson.loads(result.objects)] == ["ConfigMap", "Service"]
    unknown = await executor.run(operation("deployManifest", {"manifests": []}, 10, account="nope"))
    assert unknown.error.code == 404 and "does not follow account 'nope'" in unknown.error.message
    bad = await executor.run(
        pb.Operation(
            id="x",
            account="c1",
            type="scaleManifest",
            request=b"{oops",
            deadline_unix_ms=int((time.time() + 10) * 1000),
        )
    )
    assert bad.error.code == 400 and "not valid JSON" in bad.error.message


@pytest.mark.parametrize(
    "type_, request_, words",
    [
        ("bogus", {}, "unknown operation type 'bogus'"),
        (
            "runJob",
            {"manifest": {"apiVersion": "batch/v1", "kind": "Job", "metadata": "x"}},
            "metadata must be an object",
        ),
        (
            "deployManifest",
            {
                "manifests": [
                    {
                        "apiVersion": "apiextensions.k8s.io/v1",
                        "kind": "CustomResourceDefinition",
                        "metadata": {"name": "x"},
                        "spec": [],
                    },
                    {"kind": "Widget"},
                ]
            },
            "apiVersion is missing",
        ),
        ("scaleManifest", {"manifestName": "deployment", "replicas": 1}, 'must be "kind name"'),
        ("scaleManifest", {"manifestName": "frobnitz web", "replicas": 1}, "kind 'frobnitz' is not served"),
    ],
)
async def test_bad_descriptions_are_refused_with_the_reason(manager, type_, request_, words):
    executor = OperationExecutor(manager)
    result = await executor.run(
        pb.Operation(id="x", account="c1", type=type_, request=orjson.dumps(request_), timeout_ms=10_000)
    )
    assert (result.ok, result.error.code) == (False, 400), result.error
    assert words in result.error.message


async def test_a_job_that_created_no_pod_by_its_deadline_says_so_and_is_kept(manager, kubesim):
    batch = client.BatchV1Api(config.new_client_from_config(config_file=str(kubesim.admin(1))))
    name = f"later-{uuid.uuid4().hex[:6]}"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}},
        },
    }
    result = await OperationExecutor(manager).run(operation("runJob", {"manifest": job, "namespace": "default"}, 2))
    assert (result.ok, result.error.code, result.error.reason) == (False, 504, "Timeout")
    assert result.error.message == (
        f"job {name} in namespace default did not complete before the operation's "
        f"deadline: it has created no pod: it is suspended (spec.suspend). The Job "
        f"default/{name} was left in place; delete it with a deleteManifest of "
        f"'job {name}'"
    )
    assert orjson.loads(result.output)["jobStatus"]["pods"] == []
    assert batch.read_namespaced_job(name, "default").spec.suspend is True
    batch.delete_namespaced_job(name, "default", propagation_policy="Background")


async def test_a_failure_without_reason_or_message_still_leaves_the_agent_with_both(manager, monkeypatch):
    """Whatever an operation's code does, the hub never receives a bare 500."""

    async def mute(ops, request, out):
        out.step = "doing something quiet"
        raise OperationFailed(500, "", "")

    monkeypatch.setitem(OPERATIONS, "mute", mute)
    result = await OperationExecutor(manager).run(operation("mute", {}, 10))
    assert (result.ok, result.error.code, result.error.reason) == (False, 500, "InternalError")
    assert result.error.message == "mute failed with 500 InternalError while doing something quiet"

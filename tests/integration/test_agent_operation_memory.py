"""The agent applies an operation at most once per id, across hub sessions: a repeat (the hub sends it
again after its replica died) waits for the run in progress or gets the remembered result. Against
kubesim, in this event loop."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import grpc
import orjson
import pytest
from kubernetes import client, config

from scaleagent.agent.accounts import WATCHING, AccountManager, EngineSettings
from scaleagent.agent.budget import Budget
from scaleagent.agent.config import dynamic_account
from scaleagent.agent.executor import OperationExecutor, OperationMemory
from scaleagent.agent.sinks import CountingSink
from scaleagent.protocol import pb

WAIT = 20.0  # bound of every wait for a condition


@pytest.fixture
async def manager(kubesim):
    kubeconfig = base64.b64encode(kubesim.admin(1).read_bytes()).decode()
    m = AccountManager(EngineSettings(discovery_interval=60), CountingSink(), Budget(4, 4))
    runner = m.add(dynamic_account("c1", kubeconfig, "", {"kinds": ["ConfigMap"], "namespaces": ["default"]}))
    await until(lambda: runner.state == WATCHING, "the account watching")
    yield m
    await m.stop()


@pytest.fixture
def kube(kubesim):
    api = config.new_client_from_config(config_file=str(kubesim.admin(1)))
    return client.CoreV1Api(api), client.BatchV1Api(api)


async def until(predicate, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        await asyncio.sleep(0.01)


def operation(op_id: str, type_: str, request: dict, seconds: float = 30) -> pb.Operation:
    return pb.Operation(
        id=op_id,
        account="c1",
        type=type_,
        request=orjson.dumps(request),
        deadline_unix_ms=int((time.time() + seconds) * 1000),
    )


class Stream:
    """One Operations stream as the executor sees it: the hub's messages in, the agent's out."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue = asyncio.Queue()
        self.results: list[pb.OperationResult] = []
        self.wrote = asyncio.Event()

    async def read(self):
        return await self.incoming.get()

    async def write(self, message: pb.OperationsMessage) -> None:
        self.results.append(message.result)
        self.wrote.set()


async def test_a_deploy_sent_again_with_its_id_is_answered_not_applied_again(manager, kube):
    core, _ = kube
    executor = OperationExecutor(manager)
    name = f"once-{uuid.uuid4().hex[:6]}"
    deploy = operation(
        uuid.uuid4().hex,
        "deployManifest",
        {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}]},
    )
    first = await executor.run(deploy)
    assert first.ok, first.error
    # Someone changes the ConfigMap; a second apply of the same operation would undo that.
    changed = core.patch_namespaced_config_map(name, "default", {"data": {"v": "2"}})
    again = await executor.run(deploy)
    assert again == first
    now = core.read_namespaced_config_map(name, "default")
    assert (now.data, now.metadata.resource_version) == ({"v": "2"}, changed.metadata.resource_version)
    assert (executor.succeeded, executor.repeats) == (1, 1)
    # Another id is another operation: it is applied.
    other = await executor.run(operation(uuid.uuid4().hex, "deployManifest", orjson.loads(deploy.request)))
    assert other.ok and core.read_namespaced_config_map(name, "default").data == {"v": "1"}
    core.delete_namespaced_config_map(name, "default")


async def test_a_repeat_on_a_new_stream_waits_for_the_run_in_progress(manager, kube):
    """The hub's replica dies while a job runs; the hub sends the job again on the agent's next session."""
    _, batch = kube
    executor = OperationExecutor(manager)
    prefix = f"once-{uuid.uuid4().hex[:6]}-"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": prefix},  # every run would create a Job of its own
        "spec": {
            "suspend": True,  # runs once the test lets it
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}},
        },
    }
    run_job = operation(uuid.uuid4().hex, "runJob", {"manifest": job, "namespace": "default"})

    def jobs() -> list:
        return [j for j in batch.list_namespaced_job("default").items if j.metadata.name.startswith(prefix)]

    first = Stream()
    serving = asyncio.create_task(executor.serve(first))
    await first.incoming.put(run_job)
    await until(lambda: executor.running == 1, "the job running")
    await first.incoming.put(grpc.aio.EOF)  # the session ends without an answer
    await asyncio.wait_for(serving, WAIT)
    assert first.results == []

    second = Stream()
    serving = asyncio.create_task(executor.serve(second))
    await second.incoming.put(run_job)
    await until(lambda: executor.repeats == 1, "the repeat received")
    assert not second.wrote.is_set() and executor.running == 1, "the repeat waits for the first run"
    (created,) = jobs()
    batch.patch_namespaced_job(created.metadata.name, "default", {"spec": {"suspend": False}})
    await asyncio.wait_for(second.wrote.wait(), WAIT)
    (result,) = second.results
    assert result.ok and result.id == run_job.id, result.error
    assert orjson.loads(result.output)["jobStatus"]["status"] == "succeeded"

    # Once finished, a repeat is answered at once with the same result.
    await second.incoming.put(run_job)
    await until(lambda: len(second.results) == 2, "the second answer")
    assert second.results[1] == result
    await second.incoming.put(grpc.aio.EOF)
    await asyncio.wait_for(serving, WAIT)
    assert [j.metadata.name for j in jobs()] == [created.metadata.name], "the job was created once"
    assert (executor.succeeded, executor.repeats) == (1, 2)
    batch.delete_namespaced_job(created.metadata.name, "default", propagation_policy="Background")
    await executor.stop()


async def test_an_operation_that_did_not_start_runs_when_sent_again(manager, kube):
    core, _ = kube
    executor = OperationExecutor(manager)
    name = f"late-{uuid.uuid4().hex[:6]}"
    request = {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}]}
    op_id = uuid.uuid4().hex
    late = await executor.run(operation(op_id, "deployManifest", request, -1))
    assert late.error.code == 504 and len(executor.memory) == 0
    again = await executor.run(operation(op_id, "deployManifest", request))
    assert again.ok and core.read_namespaced_config_map(name, "default").metadata.name == name
    core.delete_namespaced_config_map(name, "default")


async def test_reads_are_not_remembered(manager):
    executor = OperationExecutor(manager)
    get = operation(uuid.uuid4().hex, "getManifest", {"manifestName": "configMap nope", "location": "default"})
    assert (await executor.run(get)).ok and (await executor.run(get)).ok
    assert (len(executor.memory), executor.repeats, executor.succeeded) == (0, 0, 2)


async def test_the_memory_is_bounded_by_count_bytes_and_age():
    def result(op_id: str, size: int) -> pb.OperationResult:
        return pb.OperationResult(id=op_id, ok=True, objects=b"x" * size)

    async def remember(memory: OperationMemory, op_id: str, size: int = 0) -> None:
        memory.finish(op_id, memory.start(op_id), result(op_id, size))

    memory = OperationMemory(max_ids=3, max_seconds=3600, max_bytes=10_000)
    for i in range(5):
        await remember(memory, f"op{i}")
    assert [i for i in range(5) if memory.get(f"op{i}")] == [2, 3, 4]
    await remember(memory, "big", 6_000)
    await remember(memory, "big2", 6_000)  # over the byte cap: the oldest go until it fits
    assert [i for i in ("op3", "op4", "big", "big2") if memory.get(i)] == ["big2"]
    assert 6_000 < memory.bytes <= 10_000
    running = memory.start("running")
    await remember(memory, "a")
    await remember(memory, "b")
    await remember(memory, "c")
    assert memory.get("running") is running, "a running operation is not evicted"
    memory.close()

    aged = OperationMemory(max_ids=100, max_seconds=0.05, max_bytes=10_000)
    await remember(aged, "old", 100)
    # Forgotten at its age even when no other operation comes: the memory's own timer.
    await until(lambda: len(aged) == 0 and aged.bytes == 0, "the old result forgotten", timeout=5)
    aged.close()

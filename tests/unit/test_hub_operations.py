"""The hub's side of operations: request parsing, routing to an agent's session, task documents."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from scaleagent.hub.agents.registry import Registry, Session
from scaleagent.hub.agents.routing import OperationRouter
from scaleagent.hub.api.common import MAX_JSON_DEPTH, ORJSON_WRITES_DEPTH, nested_within, too_deep_path
from scaleagent.hub.cache.cache import Cache
from scaleagent.hub.tasks import BadOperations, TaskRunner, parse_operations
from scaleagent.protocol import pb


class Sent(list[pb.Operation]):
    """The operations the router handed to the session, and a way to wait for the next ones."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Event()

    def append(self, op: pb.Operation) -> None:
        super().append(op)
        self._grew.set()

    async def reach(self, n: int) -> None:
        """Until `n` operations were sent (bounded: a test must not hang)."""
        async with asyncio.timeout(5):
            while len(self) < n:
                self._grew.clear()
                await self._grew.wait()


def registry_with(account: str = "prod") -> tuple[Registry, Session, Sent]:
    registry = Registry(Cache(), grace_seconds=60, replica="r")
    session = registry.open(Session(agent_id="agent-1", zone_id="", agent_version="test", peer="test", replica="r"))
    registry.describe(
        session,
        account,
        api_host="https://k",
        fingerprint="AA",
        server_version="v1.30.0",
        agent_state="watching",
        reason="",
        kinds=["ConfigMap"],
        properties={},
    )
    sent = Sent()
    session.operate = sent.append
    return registry, session, sent


@pytest.mark.parametrize(
    "body, words",
    [
        ({}, "non-empty JSON list"),
        ([], "non-empty JSON list"),
        ([{"deployManifest": {}, "scaleManifest": {}}], "exactly one key"),
        ([{"deployManifests": {"account": "a"}}], "unknown operation type 'deployManifests'"),
        ([{"deployManifest": []}], "must be a JSON object"),
        ([{"deployManifest": {"account": 5}}], "account is required"),
    ],
)
def test_malformed_operation_lists_are_refused(body, words):
    with pytest.raises(BadOperations, match=words):
        parse_operations(body)


def test_every_problem_of_a_list_is_named_and_credentials_stand_for_account():
    with pytest.raises(BadOperations) as e:
        parse_operations([{"nope": {}}, {"deployManifest": {}}])
    assert "operation 1" in str(e.value) and "operation 2" in str(e.value)
    (op,) = parse_operations([{"scaleManifest": {"credentials": "prod", "replicas": 2}}])
    assert (op.type, op.account) == ("scaleManifest", "prod")


@pytest.mark.parametrize(
    "description",
    [
        {"replicas": 0},
        {"replicas": 2**31 - 1},
        {"replicas": "3"},
        {"replicas": " 3 "},  # Deck sends strings
        {"replicas": None},  # absent: the agent says it is required
    ],
)
def test_a_scale_within_kubernetes_int32_is_taken(description):
    (op,) = parse_operations([{"scaleManifest": {"account": "prod", **description}}])
    assert op.description == {"account": "prod", **description}


def test_a_whole_number_written_with_a_fraction_is_taken_and_sent_as_an_integer():
    """JSON (and the OpenAPI document's "integer") tell 3.0 from 3 no more than the hub does."""
    (op,) = parse_operations([{"deleteManifest": {"account": "prod", "options": {"gracePeriodSeconds": 30.0}}}])
    assert op.description["options"]["gracePeriodSeconds"] == 30
    assert type(op.description["options"]["gracePeriodSeconds"]) is int
    with pytest.raises(BadOperations, match="replicas: expected a whole number from 0 to 2147483647, got 2.5"):
        parse_operations([{"scaleManifest": {"account": "prod", "replicas": 2.5}}])


@pytest.mark.parametrize(
    "description",
    [
        {"revision": ""},
        {"revision": 0},
        {"revision": 2**63 - 1},
        {"numRevisionsBack": 1},
        {"numRevisionsBack": "2"},
    ],
)
def test_an_undo_within_int64_revisions_is_taken(description):
    parse_operations([{"undoRolloutManifest": {"account": "prod", **description}}])


def test_numbers_out_of_range_are_each_named_with_the_range_before_any_task():
    with pytest.raises(BadOperations) as e:
        parse_operations(
            [
                {"scaleManifest": {"account": "prod", "replicas": 2**31}},
                {"deleteManifest": {"account": "prod", "options": {"gracePeriodSeconds": -1}}},
                {"undoRolloutManifest": {"account": "prod", "revision": True, "numRevisionsBack": "9" * 5000}},
                {
                    "scaleManifest": {"account": "prod", "replicas": 2.6179136912079258e19}
                },  # JSON's 26179136912079257600
            ]
        )
    assert str(e.value).split("; ") == [
        "operation 1 (scaleManifest): replicas: expected a whole number from 0 to 2147483647, got 2147483648",
        (
            "operation 2 (deleteManifest): options.gracePeriodSeconds: expected a whole number from 0 to "
            "9223372036854775807, got -1"
        ),
        "operation 3 (undoRolloutManifest): revision: expected a whole number from 0 to 9223372036854775807, got true",
        (
            "operation 3 (undoRolloutManifest): numRevisionsBack: expected a whole number from 1 to 9223372036854775807, "
            f"got '{'9' * 40}...'"
        ),
        "operation 4 (scaleManifest): replicas: expected a whole number from 0 to 2147483647, got 2.6179136912079258e+19",
    ]


async def test_an_operation_goes_to_the_account_s_session_and_its_result_comes_back():
    registry, session, sent = registry_with()
    router = OperationRouter(registry)
    running = asyncio.create_task(router.run("prod", "scaleManifest", {"replicas": 3}, timeout=30))
    await sent.reach(1)
    (op,) = sent
    assert (op.account, op.type, orjson.loads(op.request)) == ("prod", "scaleManifest", {"replicas": 3})
    assert op.deadline_unix_ms > 0
    router.result(session, pb.OperationResult(id=op.id, ok=True, objects=b'[{"kind": "Deployment"}]', output=b"{}"))
    reply = await asyncio.wait_for(running, 5)
    assert reply.ok and reply.objects == [{"kind": "Deployment"}] and reply.agent_id == "agent-1"


async def test_a_session_that_ends_fails_its_operations_at_once():
    registry, session, sent = registry_with()
    router = OperationRouter(registry)
    running = asyncio.create_task(router.run("prod", "deployManifest", {}, timeout=30))
    await sent.reach(1)
    registry.close(session)
    reply = await asyncio.wait_for(running, 5)
    assert not reply.ok and "disconnected before answering" in reply.error["message"]


async def test_unknown_accounts_agents_without_a_stream_and_malformed_results():
    registry, session, sent = registry_with()
    router = OperationRouter(registry)
    reply = await router.run("other", "deployManifest", {}, timeout=1)
    assert reply.error["code"] == 404 and "no agent serves account 'other'" in reply.error["message"]
    session.operate = None
    reply = await router.run("prod", "deployManifest", {}, timeout=1)
    assert reply.error["code"] == 503 and "no Operations stream" in reply.error["message"]
    session.operate = sent.append
    running = asyncio.create_task(router.run("prod", "deployManifest", {}, timeout=30))
    await sent.reach(1)
    router.result(session, pb.OperationResult(id=sent[-1].id, ok=True, objects=b"{not json"))
    reply = await asyncio.wait_for(running, 5)
    assert reply.error["code"] == 502 and "malformed result" in reply.error["message"]


async def test_a_task_stops_at_the_first_failed_operation_and_keeps_what_it_did():
    registry, session, sent = registry_with()
    router = OperationRouter(registry)
    runner = TaskRunner(router, registry.cache, operation_wait_ms=30_000, max_tasks=10)
    task = await runner.submit(
        parse_operations(
            [
                {"deployManifest": {"account": "prod", "manifests": []}},
                {"scaleManifest": {"account": "prod"}},
            ]
        )
    )
    await sent.reach(1)
    obj = {"kind": "ConfigMap", "metadata": {"name": "good", "namespace": "ns"}}
    router.result(
        session,
        pb.OperationResult(
            id=sent[0].id,
            ok=False,
            objects=orjson.dumps([obj]),
            output=orjson.dumps({"failedManifest": "deployment bad", "notApplied": []}),
            error=pb.Status(code=400, reason="BadRequest", message="deployment bad: unknown field"),
        ),
    )
    await asyncio.wait_for(task.done.wait(), 5)
    doc = task.document()
    assert doc["state"] == "failed" and doc["status"]["failed"] and len(sent) == 1
    assert doc["exception"]["code"] == 400 and "unknown field" in doc["exception"]["message"]
    (result,) = doc["resultObjects"]
    assert result["manifestNamesByNamespace"] == {"ns": ["configMap good"]}
    assert result["failedManifest"] == "deployment bad"
    assert doc["history"][-1]["status"] == "Orchestration failed."


def _lists(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_orjson_writes_254_levels_and_reads_1024_as_the_hubs_depth_check_relies_on():
    """api/common.py checks a body's depth by asking orjson to write it inside more arrays: should
    an orjson upgrade move its limits, this says so before bodies are misjudged."""
    orjson.dumps(_lists(ORJSON_WRITES_DEPTH))
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(_lists(ORJSON_WRITES_DEPTH + 1))
    assert orjson.loads(b"[" * 1024 + b"]" * 1024)
    assert nested_within(_lists(MAX_JSON_DEPTH), MAX_JSON_DEPTH)
    assert not nested_within(_lists(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)
    deep = {"spec": {"a b": [1, {"x": _lists(MAX_JSON_DEPTH)}]}}
    assert too_deep_path(deep, MAX_JSON_DEPTH) == "$.spec['a b'][1].x[0][0]…"
    assert too_deep_path({"flat": 1, "deep": [[[]]]}, 2) == "$.deep[0]"

"""Pure pieces of the watch engine: filters, watch-line decoding, scrubbing, the LIST budget."""

from __future__ import annotations

import asyncio
import itertools

import orjson
import pytest

from scaleagent.agent.budget import Budget
from scaleagent.agent.scrub import LAST_APPLIED, scrub_secret
from scaleagent.agent.sinks import event_json
from scaleagent.kube.discovery import KindInfo, select_kinds
from scaleagent.kube.errors import APIError, ClusterReplaced, Gone
from scaleagent.kube.events import ObjectEvent
from scaleagent.kube.reflector import Reflector

POD = KindInfo("", "v1", "Pod", "pods", True)
DEPLOY = KindInfo("apps", "v1", "Deployment", "deployments", True)
EVENT = KindInfo("", "v1", "Event", "events", True)
EVENT2 = KindInfo("events.k8s.io", "v1", "Event", "events", True)
NODE = KindInfo("", "v1", "Node", "nodes", False)
ALL = [POD, DEPLOY, EVENT, EVENT2, NODE]


def test_kind_filters_match_singular_names_case_insensitively_with_optional_group():
    assert select_kinds(ALL, ["pod", "DEPLOYMENT"])[0] == [POD, DEPLOY]
    assert select_kinds(ALL, ["Event.events.k8s.io"])[0] == [EVENT2]
    assert select_kinds(ALL, [], ["event"])[0] == [POD, DEPLOY, NODE]
    assert select_kinds(ALL, [], [], only_namespaced=True)[0] == [POD, DEPLOY, EVENT, EVENT2]
    assert select_kinds(ALL, ["Pod", "Widget.example.com"])[1] == ["Widget.example.com"]


def reflector(**kw) -> Reflector:
    return Reflector(None, POD, handler=None, account="acc", **kw)  # type: ignore[arg-type]


def test_watch_lines_become_events_carrying_the_objects_own_bytes():
    obj = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u1","resourceVersion":"7"}}'
    r = reflector()
    events, error, rv = r._decode([b'{"type":"MODIFIED","object":' + obj + b"}"])
    assert error is None
    (e,) = events
    assert (e.account, e.kind, e.namespace, e.name, e.uid, e.resource_version, e.type) == (
        "acc",
        "Pod",
        "ns",
        "p",
        "u1",
        "7",
        "MODIFIED",
    )
    assert e.object == obj  # sliced from the line, not re-encoded
    assert rv == "7" and r.resource_version is None  # the resume point moves once the sink took the batch


def test_bookmarks_move_the_resume_point_and_emit_nothing():
    events, error, rv = reflector()._decode(
        [b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}}']
    )
    assert events == [] and error is None and rv == "99"


def test_a_410_error_event_means_relist_and_other_errors_surface():
    gone = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}'
    ok = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}'
    events, error, _ = reflector()._decode([ok, gone])
    assert [e.name for e in events] == ["a"] and isinstance(error, Gone)
    _, error, _ = reflector()._decode([b'{"type":"ERROR","object":{"kind":"Status","code":500,"message":"boom"}}'])
    assert isinstance(error, APIError) and error.status == 500


def test_malformed_lines_are_skipped_not_fatal():
    events, error, rv = reflector()._decode([b"{not json", b'{"type":"ADDED"}', b""])
    assert events == [] and error is None and rv == ""


def test_a_change_whose_body_is_not_json_is_skipped_though_its_identity_reads():
    # Only the identity is built into Python objects; the rest of the line must still be JSON.
    good = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"},"spec":{"x":[1,2]}}}'
    broken = b'{"type":"ADDED","object":{"metadata":{"name":"b","resourceVersion":"6"},"spec":{"x":[1,2,}}}'
    events, error, rv = reflector()._decode([good, broken])
    assert [e.name for e in events] == ["a"] and error is None and rv == "5"


def test_a_change_whose_identity_is_not_strings_is_skipped(caplog):
    odd = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":7}}}'
    events, error, rv = reflector()._decode([odd])
    assert events == [] and error is None and rv == ""
    assert "metadata.resourceVersion is not a string" in caplog.text


def test_lines_of_another_shape_are_still_read_whole():
    # Whitespace and key order that the apiserver does not write take the general path.
    obj = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "8"}, "kind": "Pod"}
    line = b'  {"object": ' + orjson.dumps(obj) + b', "type": "DELETED"}\r'
    (e,), error, rv = reflector()._decode([line])
    assert (e.type, e.namespace, e.name, rv) == ("DELETED", "ns", "p", "8")
    assert orjson.loads(e.object) == obj


def test_metadata_only_objects_are_presented_as_their_kind_and_scrubbed():
    secret = KindInfo("", "v1", "Secret", "secrets", True)
    r = Reflector(
        None,
        secret,
        handler=None,
        account="a",
        metadata_only=True,  # type: ignore[arg-type]
        transform=scrub_secret,
    )
    line = orjson.dumps(
        {
            "type": "ADDED",
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "s", "annotations": {LAST_APPLIED: '{"data":{"p":"c2VjcmV0"}}', "x": "y"}},
            },
        }
    )
    (e,), _, _ = r._decode([line])
    out = orjson.loads(e.object)
    assert out["kind"] == "Secret" and out["apiVersion"] == "v1"
    assert out["metadata"]["annotations"] == {"x": "y"} and b"c2VjcmV0" not in e.object


def test_scrubbing_drops_secret_values_even_if_a_server_sent_them():
    out = scrub_secret({"kind": "Secret", "data": {"a": "b"}, "stringData": {"c": "d"}, "metadata": {"name": "s"}})
    assert out == {"kind": "Secret", "metadata": {"name": "s"}}


async def test_the_budget_caps_concurrent_lists_overall_and_per_account():
    budget = Budget(total=3, per_account=1)
    gate = asyncio.Event()

    async def list_for(account: str) -> None:
        async with budget.slot(account):
            await gate.wait()

    tasks = [asyncio.create_task(list_for(f"a{i % 5}")) for i in range(20)]
    async with asyncio.timeout(5):
        while budget.running < 3:
            await asyncio.sleep(0)  # a poll of the condition, one loop turn at a time
    await asyncio.wait(tasks, timeout=0.05)  # every waiting task has had time to (wrongly) get in
    assert budget.running == 3
    gate.set()
    await asyncio.gather(*tasks)
    assert budget.peak == 3 and budget.running == 0


def test_event_lines_embed_the_object_bytes():
    e = ObjectEvent("a", "apps", "v1", "Deployment", "ns", "d", "u", "3", "ADDED", b'{"spec":{"replicas":2}}')
    assert orjson.loads(event_json(e)) == {
        "account": "a",
        "type": "ADDED",
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
        "namespace": "ns",
        "name": "d",
        "uid": "u",
        "resourceVersion": "3",
        "object": {"spec": {"replicas": 2}},
    }
    marker = ObjectEvent("a", "", "v1", "Pod", "", "", "", "9", "SNAPSHOT_END")
    assert "object" not in orjson.loads(event_json(marker))


async def test_a_failed_request_cancels_its_siblings_and_surfaces_as_itself():
    from scaleagent.kube.concurrency import all_or_first_error
    from scaleagent.kube.errors import ConnectionFailed

    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def broken() -> None:
        await started.wait()  # the sibling is under way when this one fails
        raise ConnectionFailed("cannot connect")

    with pytest.raises(ConnectionFailed):
        await all_or_first_error([slow(), broken()])
    assert cancelled.is_set()
    assert await all_or_first_error([asyncio.sleep(0, "a"), asyncio.sleep(0, "b")]) == ["a", "b"]


async def test_a_caller_stopped_while_a_request_fails_is_stopped_not_handed_the_error():
    # asyncio's TaskGroup lets a child's error win over its parent's cancellation; an account
    # stopped then took the error for a failed discovery and went on retrying, and its stop()
    # waited forever (a test's teardown hung for 300 s in CI).
    from scaleagent.kube.concurrency import all_or_first_error
    from scaleagent.kube.errors import ConnectionFailed

    started = asyncio.Event()

    async def request() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ConnectionFailed("the connection was closed") from None  # as a transport may say it

    caller = asyncio.create_task(all_or_first_error([request()]))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert caller.cancelled()


async def test_a_caller_stopped_while_a_failure_winds_down_the_other_requests_is_stopped_after_them():
    # The other way TaskGroup lost a stop: one request had failed, and the stop came while the
    # others were still ending. The caller still waits for them, however often it is cancelled:
    # it closes the client they run on next.
    from scaleagent.kube.concurrency import all_or_first_error
    from scaleagent.kube.errors import ConnectionFailed

    ending, ended, finished = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def failing() -> None:
        raise ConnectionFailed("cannot connect")

    async def slow_to_end() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ending.set()
            await ended.wait()  # closing its connection, say
            raise ConnectionFailed("closed while cancelled") from None
        finally:
            finished.set()

    caller = asyncio.create_task(all_or_first_error([slow_to_end(), failing()]))
    await ending.wait()
    for _ in range(2):
        caller.cancel()
        await asyncio.sleep(0)
    assert not caller.done()
    ended.set()
    await asyncio.wait([caller])
    assert caller.cancelled() and finished.is_set()


async def test_the_failure_raised_is_the_one_that_ended_the_wait_not_a_cancellation_told_as_an_error():
    from scaleagent.kube.concurrency import all_or_first_error
    from scaleagent.kube.errors import APIError, ConnectionFailed

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ConnectionFailed("closed while cancelled") from None

    async def refused() -> None:
        await asyncio.sleep(0)
        raise APIError(401, "Unauthorized", "")  # the caller reloads its credentials on this one

    with pytest.raises(APIError):
        await all_or_first_error([sibling(), refused()])


async def test_a_retry_loop_ends_when_its_stop_was_swallowed_by_a_failure():
    from scaleagent.kube.concurrency import stop_if_cancelled

    tries = []

    async def retrying() -> None:
        while True:
            stop_if_cancelled()
            tries.append(1)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass  # what an error raised in the cancellation's place looks like to the loop

    task = asyncio.create_task(retrying())
    while not tries:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled() and len(tries) == 1


async def test_many_401s_at_once_refresh_the_credentials_once():
    import ssl
    from types import SimpleNamespace

    from scaleagent.kube.credentials import Credentials

    refreshes = []
    tokens = itertools.count(1)

    def refresh(cfg) -> None:  # what an exec plugin does: a new token each time it runs
        refreshes.append(1)
        cfg.api_key["BearerToken"] = f"Bearer token-{next(tokens)}"

    cfg = SimpleNamespace(api_key={"BearerToken": "Bearer token-0"}, refresh_api_key_hook=refresh)
    creds = Credentials("https://k", ssl.create_default_context(), None, "test", cfg)
    sent = await creds.authorization()
    refreshes.clear()
    for _ in range(10):  # ten watches were refused the same token
        creds.invalidate(rejected=sent)
        await creds.authorization()
    assert len(refreshes) == 1 and await creds.authorization() == "Bearer token-2"


async def test_a_long_stream_excuses_only_its_own_failure_from_backoff():
    r = reflector()
    loop = asyncio.get_running_loop()
    r._stream_started = loop.time() - 120  # a watch that served two minutes, then broke
    assert r._stream_lasted(loop) is True
    # The relist that follows fails to connect: that failure must back off, not start over.
    assert r._stream_lasted(loop) is False


def test_a_watch_event_older_than_where_the_watch_resumed_means_the_cluster_was_replaced():
    # Storage only moves forward: an older version can only come from other storage.
    r = reflector()
    r._resumed_from = 500
    newer = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"501"}}}'
    older = b'{"type":"ADDED","object":{"metadata":{"name":"b","resourceVersion":"42"}}}'
    assert r._decode([newer])[1] is None
    with pytest.raises(ClusterReplaced, match="resourceVersion 42, older than 500"):
        r._decode([older])
    r._resumed_from = None  # a watch from a fresh list, or versions that are not numbers: nothing to judge
    assert r._decode([older])[1] is None


class _Descriptions:
    """A sink that keeps the descriptions the engine sends the hub."""

    def __init__(self) -> None:
        self.sent: list = []
        self.arrived = asyncio.Event()

    def describe(self, account) -> None:
        self.sent.append(account)
        self.arrived.set()

    def removed(self, name: str) -> None:
        pass

    async def send(self, events) -> None:
        pass


async def test_watches_coming_up_reach_the_hub_together_and_never_after_a_stop(monkeypatch):
    from types import SimpleNamespace

    from scaleagent.agent import accounts
    from scaleagent.agent.accounts import WATCHING, AccountRunner, EngineSettings, Watch

    monkeypatch.setattr(accounts, "WATCHES_DESCRIBED_EVERY", 0.05)
    config = SimpleNamespace(
        name="acc",
        namespaces=(),
        omit_namespaces=(),
        kinds=(),
        omit_kinds=(),
        custom_resource_definitions=(),
        only_namespaced_resources=False,
        context=None,
        permissions={},
    )
    sink = _Descriptions()
    runner = AccountRunner(config=config, settings=EngineSettings(), sink=sink, budget=Budget(4, 4))
    tasks = []
    for kind in (POD, DEPLOY, NODE):
        tasks.append(asyncio.ensure_future(asyncio.Event().wait()))  # the watch's task, running
        runner.watches[(kind, None)] = Watch(kind, None, SimpleNamespace(failures=0, relists=0), tasks[-1])
    runner._set(accounts.SYNCING, "")  # a change of state: described at once
    assert len(sink.sent) == 1 and len(sink.sent[0].kinds_not_watching) == 3
    sink.arrived.clear()
    for kind in (POD, DEPLOY, NODE):
        runner._on_watch_state((kind, None), WATCHING, "")  # one after the other, as lists finish
    assert len(sink.sent) == 1  # not yet: the changes wait to go together
    await asyncio.wait_for(sink.arrived.wait(), 5)
    assert len(sink.sent) == 2  # three changes, one description: the set as it stands
    assert sink.sent[1].kinds_not_watching == []
    assert sink.sent[1].kinds == sorted(k.qualified for k in (POD, DEPLOY, NODE))

    runner._on_watch_state((POD, None), "backoff", "connection refused")  # another change is pending...
    await runner.stop(quietly=True)  # ...when the account stops: it is never described
    assert runner._describe_later is None and len(sink.sent) == 2
    assert all(t.cancelled() for t in tasks)


async def test_the_accounts_state_follows_its_watches_reports_through_failures_and_stops():
    from types import SimpleNamespace

    from scaleagent.agent import accounts
    from scaleagent.agent.accounts import WATCHING, AccountRunner, EngineSettings, Watch

    config = SimpleNamespace(name="acc")
    runner = AccountRunner(config=config, settings=EngineSettings(), sink=_Descriptions(), budget=Budget(4, 4))
    runner.description = lambda: None  # type: ignore[method-assign]  # what the hub is told is not this test's

    class Client:
        def lists_done(self) -> None:
            pass

        async def close(self) -> None:
            pass

    runner._client = Client()  # type: ignore[assignment]
    reflectors = {}
    for kind in (POD, DEPLOY, NODE):
        reflectors[kind] = SimpleNamespace(failures=0, relists=0)
        task = asyncio.ensure_future(asyncio.Event().wait())
        runner.watches[(kind, None)] = Watch(kind, None, reflectors[kind], task)

    def report(kind, state, reason="", failures=None):
        if failures is not None:
            reflectors[kind].failures = failures
        runner._on_watch_state((kind, None), state, reason)
        return runner.state, runner.reason

    assert report(POD, WATCHING)[0] == accounts.SYNCING
    assert report(DEPLOY, WATCHING)[0] == accounts.SYNCING
    assert report(NODE, WATCHING) == (WATCHING, "")
    # One failure: established again; the third in a row: the account is in error, named.
    assert report(DEPLOY, "backoff", "connection refused", failures=1) == (
        accounts.SYNCING,
        "watches are being established again after a failure",
    )
    assert report(DEPLOY, "listing", failures=1)[0] == accounts.SYNCING
    assert report(DEPLOY, "backoff", "connection refused", failures=3) == (
        accounts.ERROR,
        "watch of Deployment.apps keeps failing: connection refused",
    )
    assert report(DEPLOY, WATCHING, failures=0) == (WATCHING, "")
    # A watch that fails and is then stopped (its kind no longer followed) leaves no trace.
    assert report(POD, "backoff", "timeout", failures=3)[0] == accounts.ERROR
    await runner._stop_watches([(POD, None)])
    runner._update_state()
    assert (runner.state, runner.reason) == (WATCHING, "")
    assert report(NODE, "backoff", "timeout", failures=1)[0] == accounts.SYNCING
    await runner.stop(quietly=True)


async def test_a_connection_let_go_closes_after_its_last_operation_whatever_ends_it():
    from types import SimpleNamespace

    from scaleagent.agent.accounts import AccountRunner, EngineSettings

    class Client:
        """A connection whose close takes as long as the test says."""

        def __init__(self) -> None:
            self.closed = False
            self.release = asyncio.Event()

        async def close(self) -> None:
            await self.release.wait()
            self.closed = True

    config = SimpleNamespace(name="acc")
    runner = AccountRunner(config=config, settings=EngineSettings(), sink=_Descriptions(), budget=Budget(4, 4))
    client = Client()
    runner._client = client  # type: ignore[assignment]
    runner._operations = SimpleNamespace(client=client)  # type: ignore[assignment]
    running = asyncio.Event()

    async def operation() -> None:
        async with runner.operating():
            running.set()
            await asyncio.Event().wait()  # runs until its deadline cancels it

    task = asyncio.ensure_future(operation())
    await asyncio.wait_for(running.wait(), 5)
    await runner._close_client()  # the account starts over: the connection is let go, not closed
    assert runner._client is None and not client.closed
    task.cancel()  # the operation's deadline
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()  # at once, and its outcome is its own: the close is not its work
    assert len(runner._closing) == 1 and not client.closed
    client.release.set()
    await runner.stop(quietly=True)  # waits for the connections being closed
    assert client.closed and not runner._closing and not runner._in_use and not runner._let_go

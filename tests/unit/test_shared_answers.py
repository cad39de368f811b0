"""Discovery and access reviews shared by accounts of one server and identity (issue 19: a hundred
accounts activated at once ask each question once)."""

from __future__ import annotations

import asyncio

import pytest

from scaleagent.kube.discovery import KindInfo, SharedAnswers, discover, readable
from scaleagent.kube.errors import APIError

POD = KindInfo("", "v1", "Pod", "pods", True)
SECRET = KindInfo("", "v1", "Secret", "secrets", True)
DEPLOY = KindInfo("apps", "v1", "Deployment", "deployments", True)


class _Creds:
    def __init__(self, identity: str, token: str = "t") -> None:
        self.identity, self.token = identity, token

    async def authorization(self) -> str:
        return f"Bearer {self.token}"


class FakeClient:
    """A server's discovery documents and an RBAC table (verb, plural) -> allowed; counts requests."""

    def __init__(self, identity: str = "id", allowed: set[tuple[str, str]] | None = None, token: str = "t") -> None:
        self.credentials = _Creds(identity, token)
        self.allowed = allowed if allowed is not None else {(v, p) for v in ("list", "watch") for p in ("pods",)}
        self.requests: list[str] = []
        self.gate: asyncio.Event | None = None  # when set: every request waits for it
        self.fail: set[str] = set()  # plurals whose review fails (500)

    async def _wait(self) -> None:
        if self.gate is not None:
            await self.gate.wait()

    async def get(self, path: str, **_: object) -> dict:
        self.requests.append(path)
        await self._wait()
        if path == "/api":
            return {"versions": ["v1"]}
        if path == "/apis":
            return {
                "groups": [{"name": "apps", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}}]
            }
        if path == "/api/v1":
            return {
                "resources": [
                    {"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["list", "watch"]},
                    {"name": "secrets", "kind": "Secret", "namespaced": True, "verbs": ["list", "watch"]},
                ]
            }
        if path == "/apis/apps/v1":
            return {
                "resources": [
                    {"name": "deployments", "kind": "Deployment", "namespaced": True, "verbs": ["list", "watch"]}
                ]
            }
        raise APIError(404, "NotFound", "not found")

    async def request(self, method: str, path: str, body: dict | None = None, **_: object) -> dict:
        attrs = (body or {})["spec"]["resourceAttributes"]
        self.requests.append(f"{method} {path} {attrs['verb']} {attrs['resource']}")
        await self._wait()
        if attrs["resource"] in self.fail:
            raise APIError(500, "InternalError", "review failed")
        return {"status": {"allowed": (attrs["verb"], attrs["resource"]) in self.allowed}}


def _reviews(client: FakeClient) -> list[str]:
    return [r for r in client.requests if r.startswith("POST")]


async def test_shared_reviews_give_the_same_answers_as_unshared_ones():
    allowed = {("list", "pods"), ("watch", "pods"), ("list", "secrets")}
    alone = FakeClient(allowed=allowed)
    expected = [await readable(alone, k, None) for k in (POD, SECRET, DEPLOY)]
    shared = SharedAnswers()
    clients = [FakeClient(allowed=allowed) for _ in range(5)]
    got = await asyncio.gather(*(readable(c, k, None, shared) for c in clients for k in (POD, SECRET, DEPLOY)))
    assert got == expected * 5
    assert got[1] == (False, "not allowed to watch secrets cluster-wide")
    assert sum(len(_reviews(c)) for c in clients) == 6  # 3 kinds x (list, watch), asked once


async def test_concurrent_discoveries_of_one_identity_ask_the_server_once():
    shared = SharedAnswers()
    clients = [FakeClient() for _ in range(4)]
    gate = asyncio.Event()
    for c in clients:
        c.gate = gate
    tasks = [asyncio.ensure_future(discover(c, shared=shared)) for c in clients]
    await asyncio.sleep(0)  # let every one of them ask (or join the one asking)
    gate.set()
    found = await asyncio.gather(*tasks)
    assert [k.qualified for k in found[0].kinds] == ["Pod", "Secret", "Deployment.apps"]
    assert all(f == found[0] for f in found)
    assert found[0] is not found[1]  # each account its own copy
    assert sum(1 for c in clients for r in c.requests if r == "/api") == 1
    assert shared.asked == 1


async def test_other_identities_and_tokens_are_not_shared_nor_credentials_that_do_not_say():
    shared = SharedAnswers()
    a, b, c, anonymous = FakeClient("a"), FakeClient("b"), FakeClient("a", token="other"), FakeClient("")
    for client in (a, b, c, anonymous):
        await readable(client, POD, None, shared)
    assert [len(_reviews(x)) for x in (a, b, c, anonymous)] == [2, 2, 2, 2]
    await readable(FakeClient("a"), POD, None, shared)
    assert shared.asked == 8  # the last one was answered from a's


async def test_a_failed_review_is_not_kept_and_does_not_stall_the_others():
    shared = SharedAnswers()
    failing = FakeClient()
    failing.fail = {"secrets"}
    with pytest.raises(APIError):
        await readable(failing, SECRET, None, shared)
    # Other kinds of the same identity are answered; the failed one is asked again, not replayed.
    assert await readable(FakeClient(), POD, None, shared) == (True, "")
    assert await readable(FakeClient(), SECRET, None, shared) == (False, "not allowed to list secrets cluster-wide")


async def test_a_peer_whose_request_fails_makes_the_others_ask_on_their_own_connection():
    shared = SharedAnswers()
    first, second = FakeClient(), FakeClient()
    first.fail = {"pods"}
    first.gate = asyncio.Event()
    asking = asyncio.ensure_future(readable(first, POD, None, shared))
    await asyncio.sleep(0)
    joining = asyncio.ensure_future(readable(second, POD, None, shared))
    await asyncio.sleep(0)
    first.gate.set()
    with pytest.raises(APIError):
        await asking
    assert await joining == (True, "")
    assert len(_reviews(second)) == 2


async def test_a_cancelled_asker_does_not_cancel_the_answer_its_peers_wait_for():
    shared = SharedAnswers()
    first, second = FakeClient(), FakeClient()
    first.gate = asyncio.Event()
    asking = asyncio.ensure_future(readable(first, POD, None, shared))
    await asyncio.sleep(0)
    joining = asyncio.ensure_future(readable(second, POD, None, shared))
    await asyncio.sleep(0)
    asking.cancel()
    first.gate.set()
    assert await joining == (True, "")
    assert _reviews(second) == []


async def test_an_answer_older_than_the_ttl_is_asked_again():
    shared = SharedAnswers(ttl=0.0)  # 0: nothing kept
    for _ in range(2):
        await readable(FakeClient(), POD, None, shared)
    assert shared.asked == 4

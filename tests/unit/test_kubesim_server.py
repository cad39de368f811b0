"""What a client sees over HTTP, with one cluster served in-process (no TLS, an admin token)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from scaleagent.kubesim import yamlbody
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer


@pytest.fixture
async def api():
    c = Cluster("t")
    token = c.add_token("admin", ("system:masters", "system:authenticated"))
    async with TestClient(TestServer(APIServer(c).app), headers={"Authorization": f"Bearer {token}"}) as client:
        yield c, client


async def watch_until(resp, event_type: str) -> list[dict]:
    """Read watch events up to and including the first of `event_type`."""
    events = []
    while True:
        line = await resp.content.readline()
        assert line, f"the watch ended before a {event_type} event: {events}"
        events.append(json.loads(line))
        if events[-1]["type"] == event_type:
            return events


async def test_metadata_only_watches_get_metadata_only_bookmarks(api):
    c, client = api
    accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    async with client.get(
        "/api/v1/namespaces/default/configmaps",
        headers={"Accept": accept},
        params={
            "watch": "1",
            "allowWatchBookmarks": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
        },
    ) as resp:
        bookmark = (await watch_until(resp, "BOOKMARK"))[-1]["object"]
    assert (bookmark["kind"], bookmark["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")


async def test_delete_options_are_read_from_the_body(api):
    """kubectl and client-go send DeleteOptions as the body: `kubectl delete --dry-run=server` deletes nothing."""
    c, client = api
    c.create(c.rt("", "v1", "configmaps"), "default", {"metadata": {"name": "keep"}})
    async with client.delete("/api/v1/namespaces/default/configmaps/keep", json={"dryRun": ["All"]}) as resp:
        assert resp.status == 200
    async with client.delete("/api/v1/namespaces/default/configmaps", json={"dryRun": ["All"]}) as resp:
        assert [i["metadata"]["name"] for i in (await resp.json())["items"]] == ["keep"]
    assert c.store.get("/configmaps", "default", "keep") is not None
    async with client.delete("/api/v1/namespaces/default/configmaps", json={"propagationPolicy": "Orphan"}) as resp:
        assert resp.status == 200
    # Held for the garbage collector (not running here) to orphan its dependents.
    assert c.store.get("/configmaps", "default", "keep")["metadata"]["finalizers"] == ["orphan"]


@pytest.mark.parametrize(
    "method,path",
    [
        ("DELETE", "/api/v1/namespaces/default/status"),
        ("DELETE", "/api/v1/namespaces/default/finalize"),
        ("PATCH", "/api/v1/namespaces/default/finalize"),
        ("DELETE", "/apis/apps/v1/namespaces/default/deployments/web/scale"),
        ("POST", "/api/v1/namespaces/default/pods/p/log"),
    ],
)
async def test_subresources_serve_only_their_own_verbs(api, method, path):
    """Upstream: status and scale serve get/update/patch, log get, finalize update; anything else is 405."""
    c, client = api
    async with client.request(method, path, json={}) as resp:
        assert resp.status == 405 and (await resp.json())["reason"] == "MethodNotAllowed"
    assert c.store.get("/namespaces", "", "default") is not None


# CVE-2019-11253's document: 342 bytes that expand to hundreds of millions of nodes.
ALIAS_BOMB = "".join(f"{x}: &{x} [{', '.join([f'*{p}'] * 9)}]\n" for p, x in zip("abcdefgh", "bcdefghi"))


async def test_yaml_alias_bombs_are_refused(api):
    c, client = api
    body = "metadata: {name: bomb}\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + ALIAS_BOMB
    async with client.post(
        "/api/v1/namespaces/default/configmaps", data=body, headers={"Content-Type": "application/yaml"}
    ) as resp:
        assert resp.status == 400 and "excessive aliasing" in (await resp.json())["message"]
    assert c.store.get("/configmaps", "default", "bomb") is None


async def test_yaml_map_keys_become_strings(api):
    """As sigs.k8s.io/yaml converts them; a key that cannot be one is a 400, not a 500."""
    _, client = api
    body = 'metadata: {name: keys}\ndata: {1: one, true: "yes"}\n'
    async with client.post(
        "/api/v1/namespaces/default/configmaps", data=body, headers={"Content-Type": "application/yaml"}
    ) as resp:
        assert resp.status == 201 and (await resp.json())["data"] == {"1": "one", "true": "yes"}
    async with client.post(
        "/api/v1/namespaces/default/configmaps",
        data="metadata: {name: k2}\ndata: {null: x}\n",
        headers={"Content-Type": "application/yaml"},
    ) as resp:
        assert resp.status == 400


async def test_watch_timeout_is_whole_seconds_and_zero_means_the_default(api):
    c, client = api
    path = "/api/v1/namespaces/default/configmaps"
    for bad in ("1.5", "nan", "soon"):
        async with client.get(path, params={"watch": "1", "timeoutSeconds": bad}) as resp:
            assert resp.status == 400, bad
    async with client.get(
        path,
        params={
            "watch": "1",
            "timeoutSeconds": "0",
            "allowWatchBookmarks": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
        },
    ) as resp:
        await watch_until(resp, "BOOKMARK")
        c.create(c.rt("", "v1", "configmaps"), "default", {"metadata": {"name": "later"}})
        assert (await watch_until(resp, "ADDED"))[-1]["object"]["metadata"]["name"] == "later"


def test_json_sent_as_yaml_is_read_as_json():
    """kubectl sends JSON as application/apply-patch+yaml: YAML 1.1 would read the number 1e3 as a string."""
    assert yamlbody.loads(b'{"spec": {"n": 1e3}}', max_nodes=100) == {"spec": {"n": 1000.0}}


async def test_list_resource_version_semantics(api):
    """With a limit, a bare resourceVersion is Exact (legacy); NotOlderThan a future version is 504."""
    c, client = api
    cms = c.rt("", "v1", "configmaps")
    old_rv = c.create(cms, "default", {"metadata": {"name": "v"}, "data": {"v": "1"}})["metadata"]["resourceVersion"]
    c.patch(cms, "default", "v", "merge", {"data": {"v": "2"}})
    path = "/api/v1/namespaces/default/configmaps"
    async with client.get(path, params={"resourceVersion": old_rv, "limit": "10"}) as resp:
        assert [i["data"]["v"] for i in (await resp.json())["items"]] == ["1"]
    async with client.get(path, params={"resourceVersion": old_rv}) as resp:
        assert [i["data"]["v"] for i in (await resp.json())["items"]] == ["2"]
    async with client.get(
        path, params={"resourceVersion": str(c.store.rv + 10), "resourceVersionMatch": "NotOlderThan"}
    ) as resp:
        assert resp.status == 504 and (await resp.json())["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_not_acceptable_lists_only_what_is_served(api):
    _, client = api
    async with client.get("/api/v1/namespaces/default", headers={"Accept": "application/yaml"}) as resp:
        assert resp.status == 406
        assert (await resp.json())["message"] == "only the following media types are accepted: application/json"


async def test_scale_applies_to_the_object_as_it_is_once_the_body_has_arrived(api):
    c, client = api
    deployments = c.rt("apps", "v1", "deployments")
    c.create(
        deployments,
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "w", "image": "i"}]},
                },
            },
        },
    )
    handling = asyncio.Event()
    authenticate = c.authenticate_token

    def noting(token):  # the server authenticates as soon as the headers are in, before the body
        handling.set()
        return authenticate(token)

    c.authenticate_token = noting

    async def body():
        yield b'{"spec": '
        await handling.wait()
        c.patch(deployments, "default", "web", "merge", {"metadata": {"labels": {"changed": "meanwhile"}}})
        yield b'{"replicas": 3}}'

    async with client.patch(
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        data=body(),
        headers={"Content-Type": "application/merge-patch+json"},
    ) as resp:
        assert resp.status == 200, await resp.text()
    assert c.get(deployments, "default", "web")["spec"]["replicas"] == 3


async def test_send_initial_events_goes_with_resource_version_match_not_older_than(api):
    c, client = api
    cms = c.rt("", "v1", "configmaps")
    path = "/api/v1/namespaces/default/configmaps"
    async with client.get(
        path, params={"watch": "1", "allowWatchBookmarks": "true", "sendInitialEvents": "true"}
    ) as resp:
        assert resp.status == 422
        assert (
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in (await resp.json())["message"]
        )
    c.create(cms, "default", {"metadata": {"name": "before"}})
    async with client.get(
        path, params={"watch": "1", "sendInitialEvents": "false", "resourceVersionMatch": "NotOlderThan"}
    ) as resp:
        c.create(cms, "default", {"metadata": {"name": "after"}})
        # false: no initial state, only what changes from now on
        assert (await watch_until(resp, "ADDED"))[-1]["object"]["metadata"]["name"] == "after"

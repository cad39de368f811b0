"""A kind nobody follows is an error, as kubectl says of a kind the server does not serve."""

from __future__ import annotations

import subprocess

from tests.helpers import CLI


def get(stack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "get", *args, "--hub", stack.hub.url], capture_output=True, text=True, timeout=60)


def test_the_objects_api_says_an_unknown_kind_is_not_followed(stack):
    status, doc = stack.hub.get("/api/v1/accounts/admin/objects?kind=deploymnts")
    assert status == 404 and doc["reason"] == "UnknownKind", doc
    assert 'resource type "deploymnts"' in doc["error"] and "account 'admin'" in doc["error"]
    # A followed kind with no object in the namespace is an empty list, not an error.
    status, doc = stack.hub.get("/api/v1/accounts/admin/objects?kind=Deployment.apps&namespace=no-such-namespace")
    assert status == 200 and doc["items"] == []


def test_scale_agent_get_of_an_unknown_kind_fails_like_kubectl(stack):
    r = get(stack, "deploymnts", "--account", "admin")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == 'error: the server doesn\'t have a resource type "deploymnts"'
    r = get(stack, "deploymnts", "--all-accounts")
    assert r.returncode == 1 and 'resource type "deploymnts"' in r.stderr
    r = get(stack, "deployments", "--account", "admin", "-n", "no-such-namespace")
    assert r.returncode == 0 and "No resources found" in r.stderr + r.stdout

"""What the hub holds is what the cluster holds: every followed kind, for both identities, with
`kind` and `apiVersion` on every object, changes as they happen, and no Secret value anywhere."""

from __future__ import annotations

import base64
import re
import time
import uuid

import pytest

from tests.e2e.e2e_stack import Cluster, Stack


def server_resource(qualified: str) -> str:
    """How kubectl names a followed kind (`Deployment.apps` -> `deployment.apps`)."""
    kind, _, group = qualified.partition(".")
    return f"{kind.lower()}.{group}" if group else kind.lower()


def followed_namespaces(account: dict, qualified: str) -> list[str] | None:
    """None when the account follows the kind cluster-wide, else the namespaces it follows it in."""
    why = account["skipped"].get(qualified, "")
    m = re.search(r"followed in the namespaces it may read: (.+)$", why)
    return m.group(1).split(", ") if m else None


def on_server(cluster: Cluster, identity: str, qualified: str, namespaces: list[str] | None) -> dict:
    """(namespace, name) -> resourceVersion, as kubectl lists them with the account's identity."""
    out = {}
    for scope in ["-A"] if namespaces is None else [f"--namespace={ns}" for ns in namespaces]:
        for item in cluster.json("get", server_resource(qualified), scope, identity=identity)["items"]:
            meta = item["metadata"]
            out[(meta.get("namespace", ""), meta["name"])] = meta["resourceVersion"]
    return out


def in_hub(stack: Stack, account: str, qualified: str) -> tuple[dict, list[dict]]:
    items = stack.hub.objects(account, f"?kind={qualified}")
    return {
        (i["metadata"].get("namespace", ""), i["metadata"]["name"]): i["metadata"]["resourceVersion"] for i in items
    }, items


def until_equal(cluster: Cluster, stack: Stack, account: str, qualified: str, timeout: float = 30.0) -> list[dict]:
    """Compare until both sides agree (a controller may change an object between the two reads)."""
    identity = "admin" if account == "admin" else "limited"
    namespaces = followed_namespaces(stack.account(account), qualified)
    deadline = time.monotonic() + timeout
    while True:
        server = on_server(cluster, identity, qualified, namespaces)
        hub, items = in_hub(stack, account, qualified)
        if server == hub:
            return items
        if time.monotonic() > deadline:
            missing = sorted(set(server) - set(hub))[:5]
            phantom = sorted(set(hub) - set(server))[:5]
            stale = sorted(k for k in set(server) & set(hub) if server[k] != hub[k])[:5]
            pytest.fail(
                f"{account} {qualified}: hub differs from kubectl get: missing {missing}, "
                f"phantom {phantom}, other version {stale}"
            )


@pytest.mark.parametrize("account", ["admin", "limited"])
def test_the_hub_holds_what_kubectl_get_shows_for_every_followed_kind(stack, cluster, account):
    followed = stack.account(account)["kinds"]
    assert {"Namespace", "ConfigMap", "Pod", "Deployment.apps"} <= set(followed), followed
    for qualified in followed:
        items = until_equal(cluster, stack, account, qualified)
        kind, _, group = qualified.partition(".")
        for item in items:  # objects that came through a LIST are typed too
            assert item.get("kind") == kind, (qualified, item.get("kind"), item["metadata"].get("name"))
            assert item.get("apiVersion", "").startswith(f"{group}/" if group else "v"), (qualified, item["apiVersion"])


def test_the_manifest_endpoint_names_a_listed_object_by_its_kind(stack):
    doc = stack.hub.json("/manifests/admin/_/namespace%20kube-system")
    assert doc["name"] == "namespace kube-system" and doc["manifest"]["kind"] == "Namespace", doc


def test_changes_arrive_in_the_hub_for_both_identities(stack, cluster):
    name = f"cm-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team-a"}, "data": {"v": "1"}}
    )
    for account in ("admin", "limited"):
        stack.hub.wait_until(
            f"/api/v1/accounts/{account}/objects?kind=ConfigMap&namespace=team-a&name={name}",
            lambda d: [i["data"] for i in d["items"]] == [{"v": "1"}],
            what=f"{account}: created",
        )
    cluster.kubectl("patch", "configmap", name, "-n", "team-a", "--type=merge", "-p", '{"data":{"v":"2"}}')
    for account in ("admin", "limited"):
        stack.hub.wait_until(
            f"/api/v1/accounts/{account}/objects?kind=ConfigMap&namespace=team-a&name={name}",
            lambda d: [i["data"] for i in d["items"]] == [{"v": "2"}],
            what=f"{account}: modified",
        )
    cluster.kubectl("delete", "configmap", name, "-n", "team-a")
    for account in ("admin", "limited"):
        stack.hub.wait_until(
            f"/api/v1/accounts/{account}/objects?kind=ConfigMap&namespace=team-a&name={name}",
            lambda d: d["items"] == [],
            what=f"{account}: deleted",
        )


@pytest.fixture
def secrets_in_team_a(cluster: Cluster):
    """Let the limited identity read Secrets in team-a only (the real one already may: it is admin
    there), for this test alone: the kubesim clusters are shared with the rest of the suite."""
    grant_secrets_in_team_a(cluster)
    yield
    cluster.kubectl("delete", "rolebinding,role", "e2e-read-secrets", "-n", "team-a", "--ignore-not-found")


def grant_secrets_in_team_a(cluster: Cluster) -> None:
    user = "kubesim-limited" if cluster.is_kubesim else "scale-agent-limited"
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "e2e-read-secrets", "namespace": "team-a"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}],
        }
    )
    cluster.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "e2e-read-secrets", "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "e2e-read-secrets"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )


def test_secrets_are_followed_where_the_identity_may_read_them_and_their_values_never_leave(
    stack, cluster, secrets_in_team_a
):
    plain = f"hunter-{uuid.uuid4().hex}"
    name = f"db-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "team-a"},
            "stringData": {"password": plain},
        }
    )
    # The limited identity may not list Secrets cluster-wide, but may in team-a: followed there.
    for account in ("admin", "limited"):
        doc = stack.hub.wait_until(
            f"/api/v1/accounts/{account}/objects?kind=Secret&namespace=team-a&name={name}",
            lambda d: len(d["items"]) == 1,
            timeout=60,
            what=f"{account}: the Secret",
        )
        (secret,) = doc["items"]
        assert secret["kind"] == "Secret" and "data" not in secret and "stringData" not in secret
    limited = stack.account("limited")
    assert "Secret" in limited["kinds"]
    assert followed_namespaces(limited, "Secret") is not None and "team-a" in followed_namespaces(limited, "Secret")
    until_equal(cluster, stack, "limited", "Secret")
    # Nowhere: not in any answer of the hub, not in either log.
    encoded = base64.b64encode(plain.encode()).decode()
    answers = [
        stack.hub.get(p)[1]
        for p in (
            f"/manifests/admin/team-a/secret%20{name}",
            "/api/v1/accounts/admin/objects?kind=Secret",
            "/api/v1/accounts/limited/objects?kind=Secret",
        )
    ]
    everything = repr(answers) + "\n".join(stack.hub.log) + "\n".join(stack.agent.stderr)
    assert plain not in everything and encoded not in everything
    cluster.kubectl("delete", "secret", name, "-n", "team-a")

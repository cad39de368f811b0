"""kubesim answers TokenReview (`POST /apis/authentication.k8s.io/v1/tokenreviews`) as kube-apiserver
does: who a token is, for which audiences, refused for callers without `create tokenreviews`.

The expected answers were read from a real kube-apiserver v1.20.2 (scripts/real-cluster); the tests
that use the official client also run against a real cluster (e2e).
"""

from __future__ import annotations

import json

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from scaleagent.kubesim.authn import API_AUDIENCES
from scaleagent.kubesim.cluster import Cluster
from scaleagent.kubesim.server import APIServer

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


def review(token: str | None, audiences: list[str] | None = None) -> dict:
    spec: dict = {} if token is None else {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}


@pytest.fixture
async def api():
    c = Cluster("t")
    token = c.add_token("admin", ("system:masters", "system:authenticated"))
    async with TestClient(TestServer(APIServer(c).app), headers={"Authorization": f"Bearer {token}"}) as http:
        yield c, http


async def post(http: TestClient, body: object, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.post(PATH, data=json.dumps(body), headers=headers) as resp:
        return resp.status, await resp.json()


async def test_a_user_token_registered_by_a_test_is_reviewed_as_its_user_and_groups(api):
    c, http = api
    token = c.add_user_token("alice", ["devs", "ops"], uid="u-1")
    status, answer = await post(http, review(token))
    assert status == 201
    assert answer["kind"] == "TokenReview" and answer["apiVersion"] == "authentication.k8s.io/v1"
    assert answer["metadata"] == {"creationTimestamp": None}
    assert answer["spec"] == {"token": token}  # echoed, as upstream
    assert answer["status"] == {
        "authenticated": True,
        "user": {"username": "alice", "uid": "u-1", "groups": ["devs", "ops", "system:authenticated"]},
        "audiences": list(API_AUDIENCES),
    }
    # the same token is a working credential against kubesim itself
    async with http.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        headers={"Authorization": f"Bearer {token}"},
    ) as resp:
        assert resp.status == 201
        assert (await resp.json())["status"]["userInfo"]["username"] == "alice"


async def test_an_unknown_token_is_a_created_review_without_authenticated(api):
    _, http = api
    status, answer = await post(http, review("nope"))
    assert status == 201
    # Go's omitempty: `authenticated: false` is not written at all, `user` is an empty object
    assert answer["status"] == {"user": {}, "error": "invalid bearer token"}
    status, answer = await post(http, review("nope", ["hub"]))
    assert (status, answer["status"]) == (201, {"user": {}, "error": "invalid bearer token"})
    assert answer["spec"] == {"token": "nope", "audiences": ["hub"]}


async def test_a_static_token_is_valid_only_for_the_api_servers_audiences(api):
    c, http = api
    token = c.add_user_token("alice")
    _, answer = await post(http, review(token, ["hub"]))
    assert answer["status"] == {"user": {}, "error": "invalid bearer token"}
    _, answer = await post(http, review(token, ["hub", API_AUDIENCES[0]]))
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["audiences"] == [API_AUDIENCES[0]]


async def test_service_account_tokens_carry_their_audiences_and_need_their_service_account(api):
    c, http = api
    sa = c.create(c.rt("", "v1", "serviceaccounts"), "default", {"metadata": {"name": "hub"}})
    token = c.add_service_account_token("default", "hub", audiences=["scale-agent"])
    status, answer = await post(http, review(token, ["scale-agent", "other"]))
    assert status == 201
    assert answer["status"] == {
        "authenticated": True,
        "user": {
            "username": "system:serviceaccount:default:hub",
            "uid": sa["metadata"]["uid"],
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
        },
        "audiences": ["scale-agent"],
    }
    _, answer = await post(http, review(token))  # the API server's audience: not this token's
    assert answer["status"] == {
        "user": {},
        "error": '[invalid bearer token, token audiences ["scale-agent"] is invalid for the target audiences '
        '["https://kubernetes.default.svc.cluster.local"]]',
    }
    assert c.authenticate_token(token) is None  # nor can it be used against the API server itself
    c.delete(c.rt("", "v1", "serviceaccounts"), "default", "hub")
    _, answer = await post(http, review(token, ["scale-agent"]))
    assert answer["status"] == {"user": {}, "error": '[invalid bearer token, serviceaccounts "hub" not found]'}


async def test_a_caller_without_create_tokenreviews_is_forbidden(api):
    c, http = api
    weak = c.add_user_token("weak")
    status, answer = await post(http, review("nope"), weak)
    assert status == 403
    assert answer["reason"] == "Forbidden"
    assert answer["message"] == (
        'tokenreviews.authentication.k8s.io is forbidden: User "weak" cannot create resource "tokenreviews" in '
        'API group "authentication.k8s.io" at the cluster scope'
    )
    # system:auth-delegator is the bootstrap role that grants it, as on a real cluster
    c.create(
        c.rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
        "",
        {
            "metadata": {"name": "weak-reviews"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "weak"}],
        },
    )
    status, _ = await post(http, review("nope"), weak)
    assert status == 201
    async with http.post(PATH, json=review("nope"), headers={"Authorization": "Bearer wrong"}) as resp:
        assert resp.status == 401


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (review(None), "token is required for TokenReview in authentication"),
        (review(""), "token is required for TokenReview in authentication"),
        ({"apiVersion": "v1", "kind": "Pod", "spec": {}}, 'Pod in version "v1" cannot be handled as a TokenReview'),
        (
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": 5}},
            'TokenReview in version "v1" cannot be handled as a TokenReview: json: cannot unmarshal number into Go '
            "struct field TokenReviewSpec.spec.token of type string",
        ),
        ([1], None),
    ],
)
async def test_a_wrong_body_is_a_bad_request(api, body, message):
    _, http = api
    status, answer = await post(http, body)
    assert (status, answer["kind"], answer["reason"]) == (400, "Status", "BadRequest")
    if message:
        assert answer["message"].startswith(message)


async def test_tokenreviews_are_create_only_and_cluster_scoped(api):
    _, http = api
    async with http.get(PATH) as resp:
        assert resp.status == 405
    async with http.post("/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews", json=review("nope")) as resp:
        assert resp.status == 404
    async with http.get("/apis/authentication.k8s.io/v1") as resp:
        resources = {r["name"]: r for r in (await resp.json())["resources"]}
    assert resources["tokenreviews"] == {
        "name": "tokenreviews",
        "singularName": "tokenreview",
        "namespaced": False,
        "kind": "TokenReview",
        "verbs": ["create"],
    }


# --- the official client, against kubesim and a real cluster ------------------------------------


def test_the_official_client_reviews_tokens(target):
    api = config.new_client_from_config(config_file=str(target.kubeconfig))
    try:
        resources = client.AuthenticationV1Api(api).get_api_resources().resources
        assert "create" in next(r for r in resources if r.name == "tokenreviews").verbs
        answer = client.AuthenticationV1Api(api).create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token="not-a-token", audiences=["hub"]))
        )
        assert not answer.status.authenticated
        assert answer.status.error == "invalid bearer token"
        with pytest.raises(ApiException) as err:
            client.AuthenticationV1Api(api).create_token_review(
                client.V1TokenReview(spec=client.V1TokenReviewSpec(token=""))
            )
        assert err.value.status == 400
        assert "token is required" in json.loads(err.value.body)["message"]
        if target.is_kubesim:  # the limited identity is a bearer token on kubesim (a certificate on a real one)
            token = yaml.safe_load(target.limited_kubeconfig.read_text())["users"][0]["user"]["token"]
            answer = client.AuthenticationV1Api(api).create_token_review(
                client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
            )
            assert answer.status.authenticated is True
            assert answer.status.user.username == "kubesim-limited"
    finally:
        api.close()


def test_the_official_client_is_refused_tokenreviews_for_a_limited_identity(target):
    if target.limited_kubeconfig is None:
        pytest.skip("no limited identity configured for this target")
    limited = config.new_client_from_config(config_file=str(target.limited_kubeconfig))
    try:
        with pytest.raises(ApiException) as err:
            client.AuthenticationV1Api(limited).create_token_review(
                client.V1TokenReview(spec=client.V1TokenReviewSpec(token="not-a-token"))
            )
        assert err.value.status == 403
        status = json.loads(err.value.body)
        assert status["reason"] == "Forbidden"
        assert 'cannot create resource "tokenreviews" in API group "authentication.k8s.io"' in status["message"]
    finally:
        limited.close()

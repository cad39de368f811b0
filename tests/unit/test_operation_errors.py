"""How an API server's refusals and a stuck Job read in an operation's failure."""

from __future__ import annotations

import orjson

from scaleagent.kube.client import APIError
from scaleagent.kube.operations import _pod_state, api_failure

# What kube-apiserver v1.20.2 answers to a server-side apply of a Deployment with `spec.replicaz`
# (recorded from the real server: it has no fieldValidation, and its apply fails this way).
APPLY_500 = orjson.dumps({
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "failed to create typed patch object: .spec.replicaz: field not declared in schema", "code": 500})


def test_a_1_20_apply_of_an_unknown_field_is_the_manifests_fault_and_names_the_field():
    failure = api_failure(APIError.from_response(500, APPLY_500), "applying deployment.apps typo in namespace a")
    assert (failure.code, failure.reason) == (400, "BadRequest")
    assert failure.message == ("applying deployment.apps typo in namespace a: the API server rejected the manifest: "
                               "failed to create typed patch object: .spec.replicaz: field not declared in schema")


def test_a_status_without_reason_or_message_still_says_what_happened():
    failure = api_failure(APIError(503, "", ""), "patching deployment web")
    assert failure.reason == "ServiceUnavailable"
    assert failure.message == "patching deployment web: the API server answered 503 with no message"
    other = api_failure(APIError.from_response(500, b"upstream exploded"))
    assert (other.code, other.reason, other.message) == (500, "InternalError", "upstream exploded")


def test_the_servers_own_reason_is_kept():
    body = orjson.dumps({"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"})
    failure = api_failure(APIError.from_response(409, body))
    assert (failure.code, failure.reason, failure.message) == (409, "Conflict", "the object has been modified")


def test_a_pod_no_scheduler_placed_says_so():
    pod = {"metadata": {"name": "migrate-x"}, "spec": {}, "status": {"phase": "Pending"}}
    assert _pod_state(pod) == ("pod migrate-x Pending (no node assigned yet: no scheduler has placed it "
                               "(is one running, and is any node ready?))")


def test_an_unschedulable_pod_and_a_waiting_container_say_why():
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": ""}, "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 node(s) didn't match node selector."}],
        "containerStatuses": [{"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff",
                                                                     "message": "Back-off pulling image"}}}]}}
    assert _pod_state(pod) == ("pod p Pending (not scheduled: Unschedulable: 0/3 nodes are available: 3 node(s) "
                               "didn't match node selector.; container main waiting: ImagePullBackOff: "
                               "Back-off pulling image)")

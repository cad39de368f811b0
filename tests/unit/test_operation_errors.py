"""How an API server's refusals and a stuck Job read in an operation's failure."""

from __future__ import annotations

import asyncio
import contextlib

import orjson

from scaleagent.kube.discovery import KindInfo
from scaleagent.kube.errors import APIError
from scaleagent.kube.operations import ClusterOperations, Outcome, _pod_state, api_failure

# What kube-apiserver v1.20.2 answers to a server-side apply of a Deployment with `spec.replicaz`
# (recorded from the real server: it has no fieldValidation, and its apply fails this way).
APPLY_500 = orjson.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "failed to create typed patch object: .spec.replicaz: field not declared in schema",
        "code": 500,
    }
)


def test_a_1_20_apply_of_an_unknown_field_is_the_manifests_fault_and_names_the_field():
    failure = api_failure(APIError.from_response(500, APPLY_500), "applying deployment.apps typo in namespace a")
    assert (failure.code, failure.reason) == (400, "BadRequest")
    assert failure.message == (
        "applying deployment.apps typo in namespace a: the API server rejected the manifest: "
        "failed to create typed patch object: .spec.replicaz: field not declared in schema"
    )


def test_a_status_without_reason_or_message_still_says_what_happened():
    failure = api_failure(APIError(503, "", ""), "patching deployment web")
    assert failure.reason == "ServiceUnavailable"
    assert failure.message == "patching deployment web: the API server answered 503 with no message"
    other = api_failure(APIError.from_response(500, b"upstream exploded"))
    assert (other.code, other.reason, other.message) == (500, "InternalError", "upstream exploded")


def test_the_servers_own_reason_is_kept():
    body = orjson.dumps(
        {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
    )
    failure = api_failure(APIError.from_response(409, body))
    assert (failure.code, failure.reason, failure.message) == (409, "Conflict", "the object has been modified")


def test_a_pod_no_scheduler_placed_says_so():
    pod = {"metadata": {"name": "migrate-x"}, "spec": {}, "status": {"phase": "Pending"}}
    assert _pod_state(pod) == (
        "pod migrate-x Pending (no node assigned yet: no scheduler has placed it "
        "(is one running, and is any node ready?))"
    )


def test_an_unschedulable_pod_and_a_waiting_container_say_why():
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": ""},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 node(s) didn't match node selector.",
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
                }
            ],
        },
    }
    assert _pod_state(pod) == (
        "pod p Pending (not scheduled: Unschedulable: 0/3 nodes are available: 3 node(s) "
        "didn't match node selector.; container main waiting: ImagePullBackOff: "
        "Back-off pulling image)"
    )


# ---- the same, through the operations (a stub API server answering as 1.20 does) ---------------

DEPLOYMENT = KindInfo("apps", "v1", "Deployment", "deployments", True)
CONFIGMAP = KindInfo("", "v1", "ConfigMap", "configmaps", True)
JOB = KindInfo("batch", "v1", "Job", "jobs", True)
KINDS = {(k.api_version, k.kind): k for k in (DEPLOYMENT, CONFIGMAP, JOB)}


class Resources:
    async def for_manifest(self, api_version, kind):
        return KINDS[(api_version, kind)]


class Server:
    """Answers by (method, path): a JSON body, or an APIError built from a recorded response; a
    watch never sends anything, as on a cluster where the Job's pods never run."""

    server = "https://apiserver.test"

    def __init__(self, answers: dict) -> None:
        self.answers = answers
        self.requests: list[tuple[str, str]] = []

    async def request(self, method, path, *, params=None, body=None, content_type=None, **_):
        self.requests.append((method, path))
        answer = self.answers[(method, path)]
        if isinstance(answer, APIError):
            raise answer
        return answer(body) if callable(answer) else answer

    async def get(self, path, **kw):
        return await self.request("GET", path, **kw)

    @contextlib.asynccontextmanager
    async def stream(self, method, path, **_):
        class Silent:
            class content:
                @staticmethod
                async def iter_any():
                    await asyncio.Event().wait()
                    yield b""

        yield Silent()


def deployment(name: str, **spec) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            **spec,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }


async def test_a_1_20_deploy_with_an_unknown_field_fails_400_naming_the_manifest_and_what_was_applied():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"}}
    server = Server(
        {
            ("PATCH", "/api/v1/namespaces/prod/configmaps/good"): lambda body: {
                **body,
                "metadata": {**body["metadata"], "resourceVersion": "7"},
            },
            ("PATCH", "/apis/apps/v1/namespaces/prod/deployments/typo"): APIError.from_response(500, APPLY_500),
        }
    )
    out = Outcome()
    await ClusterOperations(server, Resources()).run(
        "deployManifest", {"manifests": [deployment("typo", replicaz=2), cm], "namespaceOverride": "prod"}, out
    )
    assert (out.error.code, out.error.reason) == (400, "BadRequest")
    assert out.error.message == (
        "deployment.apps typo in namespace prod: the API server rejected the manifest: failed to create typed patch "
        "object: .spec.replicaz: field not declared in schema; applied before it: configMap good"
    )
    assert out.output == {"failedManifest": "deployment typo", "notApplied": []}


async def test_any_other_500_keeps_its_code_with_the_servers_words_or_what_was_being_done():
    recorded = orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "etcdserver: request timed out",
            "code": 500,
        }
    )
    for answer, message in [
        (APIError.from_response(500, recorded), "etcdserver: request timed out"),
        (APIError.from_response(500, b""), "the API server answered 500 with no message"),
    ]:
        server = Server({("PATCH", "/apis/apps/v1/namespaces/default/deployments/web"): answer})
        out = Outcome()
        await ClusterOperations(server, Resources()).run("deployManifest", {"manifests": [deployment("web")]}, out)
        assert (out.error.code, out.error.reason) == (500, "InternalError")
        assert out.error.message == f"deployment.apps web in namespace default: {message}; nothing was applied"


def job_server(pods: object) -> Server:
    created = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate", "namespace": "prod", "uid": "u1", "resourceVersion": "1"},
        "spec": {"selector": {"matchLabels": {"controller-uid": "u1"}}},
        "status": {"active": 1},
    }
    return Server(
        {
            ("POST", "/apis/batch/v1/namespaces/prod/jobs"): created,
            ("GET", "/apis/batch/v1/namespaces/prod/jobs/migrate"): created,
            ("GET", "/api/v1/namespaces/prod/pods"): pods,
        }
    )


async def run_job_until_deadline(server: Server) -> Outcome:
    """runJob with a deadline just ahead: the Job never completes, so the deadline ends the wait."""
    out = Outcome(deadline=asyncio.get_running_loop().time() + 0.5)
    await ClusterOperations(server, Resources()).run(
        "runJob",
        {"manifest": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"}}, "namespace": "prod"},
        out,
    )
    return out


def pending(name: str, created: str) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {}, "status": {"phase": "Pending"}}


async def test_a_job_cut_by_its_deadline_names_its_pods_oldest_first_and_at_most_five():
    pods = [pending(f"migrate-{i:02}", f"2026-01-01T00:00:{59 - i:02}Z") for i in range(12)]
    out = await run_job_until_deadline(job_server({"kind": "PodList", "items": pods}))
    assert (out.error.code, out.error.reason) == (504, "Timeout")
    message = out.error.message
    assert message.startswith(
        "job migrate in namespace prod did not complete before the operation's deadline: "
        "pod migrate-11 Pending (no node assigned yet"
    )
    assert message.count("pod migrate-") == 5 and "and 7 more pod(s) (see jobStatus.pods)" in message
    assert message.endswith("The Job prod/migrate was left in place; delete it with a deleteManifest of 'job migrate'")
    status = out.output["jobStatus"]
    assert (status["status"], status["active"], len(status["pods"])) == ("running", 1, 12)
    assert [o["metadata"]["name"] for o in out.objects] == ["migrate"], "the created Job is reported"


async def test_a_job_whose_pods_cannot_be_read_still_fails_as_a_timeout_saying_why():
    forbidden = orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": 'pods is forbidden: User "ci" cannot list resource '
            '"pods" in API group "" in the namespace "prod"',
        }
    )
    out = await run_job_until_deadline(job_server(APIError.from_response(403, forbidden)))
    assert (out.error.code, out.error.reason) == (504, "Timeout")
    assert (
        "did not complete before the operation's deadline: its pods could not be read (403 Forbidden: pods is "
        'forbidden: User "ci" cannot list'
    ) in out.error.message
    assert "left in place" in out.error.message


async def test_a_job_that_made_no_pod_says_so():
    out = await run_job_until_deadline(job_server({"kind": "PodList", "items": []}))
    assert "did not complete before the operation's deadline: it has created no pod yet." in out.error.message
    assert out.output["jobStatus"]["pods"] == []


def test_a_pods_own_reason_and_a_failed_container_are_told():
    pod = {
        "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        },
    }
    assert _pod_state(pod) == (
        "pod p Failed (Evicted: The node was low on resource: memory.; being deleted; "
        "container main exited with 137 (OOMKilled))"
    )
    assert (
        _pod_state(
            {
                "metadata": {"name": "q"},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "conditions": ["junk"], "containerStatuses": [None]},
            }
        )
        == "pod q Running"
    )


async def test_a_job_that_exists_then_vanishes_at_every_try_fails_409_saying_so():
    """A create answered 409 AlreadyExists and a read answered 404, again and again (something
    deletes the Job as it is made): a 409 that says so, never the agent's own error."""
    exists = APIError.from_response(409, orjson.dumps({"kind": "Status", "code": 409, "reason": "AlreadyExists"}))
    gone = APIError.from_response(404, orjson.dumps({"kind": "Status", "code": 404, "reason": "NotFound"}))
    answers = {("POST", "/apis/batch/v1/namespaces/prod/jobs"): exists}
    answers |= {("GET", "/apis/batch/v1/namespaces/prod/jobs/migrate"): gone}
    out = Outcome(operation="op-1")
    await ClusterOperations(Server(answers), Resources()).run(
        "runJob",
        {"manifest": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"}}, "namespace": "prod"},
        out,
    )
    assert out.error is not None and (out.error.code, out.error.reason) == (409, "Conflict"), out.error
    assert "job migrate in namespace prod" in out.error.message and "nothing was applied" in out.error.message

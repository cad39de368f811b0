"""Every number and size the hub's HTTP API takes is bounded: out of range, negative, huge or not a
number, it is refused with a 400 naming the parameter, its range and the value given, never a 500
(a fuzzer once found a pod log `tailLines` of 2^64 answered 500). A body larger than the hub
takes is a 413, refused before it is held whole."""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.helpers import HubProcess, agent_of, tls_hub

INT32_MAX = 2**31 - 1  # replicas, as Kubernetes holds them
INT64_MAX = 2**63 - 1  # grace periods and revisions
MAX_BODY_BYTES = 16 * 1024 * 1024  # the largest body the hub takes (docs/api.md)
MAX_JSON_DEPTH = 200  # the most levels of arrays and objects within one another a body may have (docs/api.md)
HUGE = "26179136912079257600"  # the fuzzer's tailLines: beyond uint64
BAD_NUMBERS = [
    HUGE,
    "-" + HUGE,
    "-1",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "x",
    "",
    "1.5",
    "0x10",
    "9" * 5000,
    "\uff11",
]  # a fullwidth digit one
PATH_VALUES = {"account": "b", "namespace": "default", "location": "default"}


@pytest.fixture(scope="module")
def hub(kubesim, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    hub, pki = tls_hub(tmp)
    agent = agent_of(
        hub,
        pki,
        tmp,
        [{"name": "b", "kubeConfigFile": str(kubesim.admin()), "kinds": ["ConfigMap"], "namespaces": ["default"]}],
    )
    try:
        hub.wait_until("/api/v1/accounts/b", lambda d: d["agentState"] == "watching", what="the account watching")
        yield hub
    finally:
        agent.stop()
        hub.stop()


def request(hub: HubProcess, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    """Status and body (JSON when it is; a 500 may not be)."""
    r = urllib.request.Request(hub.url + path, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def refused(status: int, answer: Any, *words: str) -> bool:
    return (
        status == 400
        and isinstance(answer, dict)
        and answer.get("status") == 400
        and all(w in answer["error"] for w in words)
    )


def test_the_pod_log_tail_the_fuzzer_found_is_a_400_naming_it(hub):
    status, answer = request(hub, "GET", f"/api/v1/accounts/b/namespaces/default/pods/p/log?tailLines={HUGE}")
    assert (status, answer) == (
        400,
        {"error": f"tailLines: expected a whole number from 0 to 10000000, got '{HUGE}'", "status": 400},
    )


def test_a_pod_log_within_the_bounds_is_read_through_the_agent(hub):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "talker",
            "namespace": "default",
            "annotations": {"kubesim.scale-agent.io/log.main": "one\ntwo\n"},
        },
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }
    assert hub.run_task([{"deployManifest": {"account": "b", "manifests": [pod]}}])["state"] == "completed"
    for tail in ("1", "10000000"):
        status, answer = request(hub, "GET", f"/api/v1/accounts/b/namespaces/default/pods/talker/log?tailLines={tail}")
        assert status == 200 and "two" in answer, (tail, status, answer)


def numeric_parameters(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path template, parameter) of every numeric parameter of every route in the OpenAPI."""
    found = []
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            for p in operation.get("parameters", []):
                schema = p.get("schema", {})
                types = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
                if types & {"integer", "number"}:
                    numeric = next(
                        s for s in [schema, *schema.get("anyOf", [])] if s.get("type") in ("integer", "number")
                    )
                    found.append((method.upper(), path, {**p, "schema": numeric}))
    return found


def concrete(path: str, **values: str) -> str:
    return re.sub(
        r"\{(\w+)\}",
        lambda m: urllib.parse.quote(values.get(m.group(1), PATH_VALUES.get(m.group(1), "x")), safe=""),
        path,
    )


def acceptable(value: str, schema: dict[str, Any]) -> bool:
    """Whether `value` is a number the schema takes (the declaration the hub publishes)."""
    if not value.isascii():  # Python's int() and float() take other scripts' digits; JSON Schema's do not
        return False
    try:
        n: float = int(value) if schema["type"] == "integer" and re.fullmatch(r"-?\d+", value) else float(value)
    except ValueError:
        return False
    if schema["type"] == "integer" and not isinstance(n, int) or not math.isfinite(n):
        return False
    return schema.get("minimum", -math.inf) <= n <= schema.get("maximum", math.inf)


def bounds_words(schema: dict[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    return f"from {low} to {high}" if high is not None else f"of at least {low}"


def test_every_numeric_parameter_of_every_route_is_bounded_and_never_a_500(hub):
    spec = hub.json("/openapi.json")
    parameters = numeric_parameters(spec)  # type: ignore[arg-type]
    assert {p["name"] for _, _, p in parameters} >= {"tailLines", "waitSeconds", "limit"}
    crashed, unnamed, wrongly_refused = [], [], []
    for method, template, p in parameters:
        schema = p["schema"]
        assert "minimum" in schema, f"{method} {template} {p['name']} has no lower bound"
        assert schema["type"] == "number" or "maximum" in schema, f"{method} {template} {p['name']} has no upper bound"
        edges = [str(schema["minimum"]), str(schema["minimum"] - 1)]
        if "maximum" in schema:
            edges += [str(schema["maximum"]), str(schema["maximum"] + 1)]
        for value in BAD_NUMBERS + edges:
            if p["in"] == "query":
                path = f"{concrete(template)}?{p['name']}={urllib.parse.quote(value)}"
            else:
                path = concrete(template, **{p["name"]: value})
            status, answer = request(hub, method, path)
            if status >= 500:
                crashed.append((method, path[:120], status, str(answer)[:300]))
            elif acceptable(value, schema):
                if status == 400:
                    wrongly_refused.append((method, path[:120], answer))
            elif not refused(status, answer, f"{p['name']}: expected a ", bounds_words(schema)):
                unnamed.append((method, path[:120], status, str(answer)[:300]))
    assert crashed == []
    assert unnamed == []
    assert wrongly_refused == []


def test_no_path_parameter_of_a_read_makes_a_500(hub):
    spec = hub.json("/openapi.json")
    failures = []
    for template, methods in spec["paths"].items():  # type: ignore[union-attr]
        names = re.findall(r"\{(\w+)\}", template)
        if "get" not in methods or not names:
            continue
        for name in names:
            for value in BAD_NUMBERS[:-1] + ["%00", "a" * 4000, "..", "deployment " + HUGE]:
                status, answer = request(hub, "GET", concrete(template, **{name: value}))
                if status >= 500:
                    failures.append((template, name, value[:40], status, str(answer)[:300]))
    assert failures == []


@pytest.mark.parametrize(
    "operation, words",
    [
        (
            {
                "scaleManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "replicas": HUGE,
                }
            },
            f"operation 1 (scaleManifest): replicas: expected a whole number from 0 to {INT32_MAX}, got '{HUGE}'",
        ),
        (
            {
                "scaleManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "replicas": 2**31,
                }
            },
            f"replicas: expected a whole number from 0 to {INT32_MAX}, got 2147483648",
        ),
        (
            {
                "scaleManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "replicas": -5,
                }
            },
            f"replicas: expected a whole number from 0 to {INT32_MAX}, got -5",
        ),
        (
            {
                "scaleManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "replicas": 1.5,
                }
            },
            f"replicas: expected a whole number from 0 to {INT32_MAX}, got 1.5",
        ),
        (
            {
                "deleteManifest": {
                    "account": "b",
                    "manifestName": "configmap x",
                    "location": "default",
                    "options": {"gracePeriodSeconds": "9" * 30},
                }
            },
            f"options.gracePeriodSeconds: expected a whole number from 0 to {INT64_MAX}, got '{'9' * 30}'",
        ),
        (
            {
                "deleteManifest": {
                    "account": "b",
                    "manifestName": "configmap x",
                    "location": "default",
                    "options": {"gracePeriodSeconds": "9" * 5000},
                }
            },
            f"options.gracePeriodSeconds: expected a whole number from 0 to {INT64_MAX}, got '{'9' * 40}...'",
        ),
        (
            {
                "undoRolloutManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "revision": 2**63,
                }
            },
            f"revision: expected a whole number from 0 to {INT64_MAX}, got 9223372036854775808",
        ),
        (
            {
                "undoRolloutManifest": {
                    "account": "b",
                    "manifestName": "deployment web",
                    "location": "default",
                    "numRevisionsBack": 0,
                }
            },
            f"numRevisionsBack: expected a whole number from 1 to {INT64_MAX}, got 0",
        ),
    ],
)
def test_an_operation_with_a_number_out_of_range_is_a_400_naming_the_field_and_range(hub, operation, words):
    status, answer = request(hub, "POST", "/kubernetes/ops", json.dumps([operation]).encode())
    assert refused(status, answer, words), (status, answer)
    ((type_, description),) = operation.items()
    status, answer = request(hub, "POST", f"/kubernetes/ops/{type_}", json.dumps(description).encode())
    assert refused(status, answer, words.partition("): ")[2] or words), (status, answer)


def test_a_number_beyond_64_bits_inside_a_manifest_is_the_api_servers_4xx(hub):
    """Numbers in manifests are the API server's to judge: the task fails with its refusal."""
    body = (
        b'[{"deployManifest": {"account": "b", "manifests": [{"apiVersion": "apps/v1", "kind": "Deployment", '
        b'"metadata": {"name": "huge", "namespace": "default"}, "spec": {"replicas": '
        + HUGE.encode()
        + b', "selector": {"matchLabels": {"app": "huge"}}, "template": {"metadata": {"labels": {"app": "huge"}}, '
        b'"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}]}}]'
    )
    status, created = request(hub, "POST", "/kubernetes/ops", body)
    assert status == 200, created
    task = hub.json(f"{created['resourceUri']}?waitSeconds=30", timeout=45)
    assert task["state"] == "failed" and 400 <= task["exception"]["code"] < 500, task  # type: ignore[index]


def test_a_refresh_with_a_resource_version_too_long_to_compare_is_a_400(hub):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bounds-cm", "namespace": "default"}}
    assert hub.run_task([{"deployManifest": {"account": "b", "manifests": [cm]}}])["state"] == "completed"
    ident = {"account": "b", "location": "default", "name": "configmap bounds-cm"}
    status, answer = request(
        hub, "POST", "/cache/kubernetes/manifest", json.dumps({**ident, "resourceVersion": "9" * 5000}).encode()
    )
    assert refused(status, answer, "resourceVersion: at most 64 characters", "got 5000"), (status, answer)
    status, answer = request(
        hub, "POST", "/cache/kubernetes/manifest", json.dumps({**ident, "resourceVersion": "9" * 64}).encode()
    )
    assert (status, answer["status"]) == (200, "cached"), answer


def nested(levels: int, around: Any) -> bytes:
    """`around` as JSON, its string "NEST" replaced by `levels` objects, each the only field of the
    one around it (built as text: Python's json writes no more than about 990 levels)."""
    deep = '{"in": ' * (levels - 1) + "{}" + "}" * (levels - 1)
    return json.dumps(around).replace('"NEST"', deep).encode()


CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}}


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH - 4, 254, 1024, 1025])
def test_a_manifest_nested_too_deep_is_a_400_naming_the_limit_and_where_before_any_task(hub, levels):
    """orjson reads 1,024 levels but writes 254: a manifest between the two was taken, and its task
    failed with a 500 when the hub wrote the operation for its agent."""
    tasks = len(hub.json("/task?limit=1000"))  # type: ignore[arg-type]
    # The body's list, its operation, the description and `manifests` hold the manifest, whose
    # `nest` field holds `levels` more: one level past the most the hub takes, or more.
    manifest = {**CONFIG_MAP, "nest": "NEST"}
    body = nested(levels, [{"deployManifest": {"account": "b", "manifests": [manifest]}}])
    status, answer = request(hub, "POST", "/kubernetes/ops", body)
    where = "more than 1024 at line 1" if levels > 1024 - 5 else "at $[0].deployManifest.manifests[0].nest.in…"
    assert refused(status, answer, f"the body is nested deeper than {MAX_JSON_DEPTH} levels", where), (status, answer)
    # One operation alone: the description holds the manifest directly.
    body = nested(levels + 3, {"account": "b", "manifest": manifest})
    status, answer = request(hub, "POST", "/kubernetes/ops/deployManifest", body)
    assert refused(status, answer, f"nested deeper than {MAX_JSON_DEPTH} levels"), (status, answer)
    assert len(hub.json("/task?limit=1000")) == tasks  # type: ignore[arg-type]


def test_a_manifest_as_deep_as_the_hub_takes_reaches_the_api_server_and_its_task_is_read(hub):
    """At the most the hub takes, the body still fits everything the hub writes it into: the
    operation sent to the agent, the task and the list of tasks. The API server has the last word
    (a ConfigMap has no field `nest`), not a 500 of the hub's."""
    manifest = {**CONFIG_MAP, "metadata": {"name": "deepest", "namespace": "default"}, "nest": "NEST"}
    body = nested(MAX_JSON_DEPTH - 5, [{"deployManifest": {"account": "b", "manifests": [manifest]}}])
    status, created = request(hub, "POST", "/kubernetes/ops", body)
    assert status == 200, created
    task = hub.json(f"{created['resourceUri']}?waitSeconds=30", timeout=45)
    failure = task["exception"]  # type: ignore[index]
    assert (failure["code"], failure["reason"]) == (400, "BadRequest"), failure
    assert 'unknown field "nest"' in failure["message"], failure
    status, tasks = request(hub, "GET", "/task?limit=1000")
    assert status == 200 and created["id"] in [t["id"] for t in tasks]


def test_a_body_nested_too_deep_is_refused_on_every_route_that_takes_json(hub):
    body = nested(MAX_JSON_DEPTH, {"type": "kubernetes", "name": "deep", "nest": "NEST"})
    for path in ("/credentials", "/cache/kubernetes/manifest", "/armory/accounts"):
        status, answer = request(hub, "POST", path, body)
        assert refused(status, answer, f"nested deeper than {MAX_JSON_DEPTH} levels", "at $.nest.in.in"), (path, answer)


def raw_post(hub: HubProcess, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, Any]:
    """POST with the headers given, sending `chunks` as they are (then no more), and the answer."""
    url = urllib.parse.urlsplit(hub.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        sock.sendall((head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode())
        for chunk in chunks:
            sock.sendall(chunk)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())


@pytest.mark.parametrize("path", ["/kubernetes/ops", "/armory/accounts", "/credentials", "/cache/kubernetes/manifest"])
def test_a_body_announced_larger_than_the_hub_takes_is_a_413_before_it_is_sent(hub, path):
    status, answer = raw_post(hub, path, {"Content-Length": str(MAX_BODY_BYTES + 1)}, [b"["])
    assert (status, answer) == (
        413,
        {"error": f"the body is {MAX_BODY_BYTES + 1} bytes; the most is {MAX_BODY_BYTES}", "status": 413},
    )


def test_a_chunked_body_is_cut_off_once_it_is_larger_than_the_hub_takes(hub):
    piece = b"[" + b" " * (1024 * 1024 - 1)
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece)] * (MAX_BODY_BYTES // len(piece)) + [b"1\r\n \r\n"]
    status, answer = raw_post(hub, "/kubernetes/ops", {"Transfer-Encoding": "chunked"}, chunks)
    assert (status, answer) == (
        413,
        {"error": f"the body is more than {MAX_BODY_BYTES} bytes, the most the hub takes", "status": 413},
    )
    status, _ = request(hub, "GET", "/health")
    assert status == 200


def test_a_credentials_definition_with_numbers_beyond_clouddrivers_types_is_refused(hub):
    definition = {
        "type": "kubernetes",
        "name": "bounded",
        "cacheThreads": 2**31,
        "cacheIntervalSeconds": -1,
        "kubectlRequestTimeoutSeconds": 1e300,
    }
    status, answer = request(hub, "POST", "/credentials", json.dumps(definition).encode())
    assert status == 400 and answer["problems"] == [
        (
            "account 'bounded': kubectlRequestTimeoutSeconds: expected a whole number from 0 to 2147483647, got a number "
            "(1e+300)"
        ),
        "account 'bounded': cacheThreads: expected a whole number from 1 to 2147483647, got a number (2147483648)",
        f"account 'bounded': cacheIntervalSeconds: expected a whole number from 0 to {INT64_MAX}, got a number (-1)",
    ], answer
    assert request(hub, "GET", "/credentials/bounded")[0] == 404


def test_a_client_that_hangs_up_mid_body_is_audited_as_499_and_logged_quietly(hub):
    """Headers and part of the body, then the connection closes: no error, no traceback."""
    before = len(hub.log)
    url = urllib.parse.urlsplit(hub.url)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(
            f"POST /armory/accounts HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n[{".encode()
        )
    hub.wait_log(r'"audit":"POST /armory/accounts".*"status":499.*client closed request', 10)
    # A write after it, audited once the hub is past the one cut off (whose error, had there been
    # one, would have been logged before).
    assert request(hub, "POST", "/armory/accounts", b"[")[0] == 400
    hub.wait_log(r'"audit":"POST /armory/accounts".*"status":400', 10)
    log = hub.log[before:]
    assert not [line for line in log if "Traceback" in line or " ERROR " in line], log
    quiet = [line for line in log if "closed the connection before sending its whole body" in line]
    assert len(quiet) == 1 and " INFO " in quiet[0], quiet

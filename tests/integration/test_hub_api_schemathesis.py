"""The hub's OpenAPI document, fuzzed by schemathesis against a real hub process with logins on:
without credentials nothing but the probes and the API's description answers (401, never data),
and with an admin's token no generated request makes the hub fail (no 5xx). Every answer is also
held against the document: its status is one the operation documents, its Content-Type one
documented for that status, and its body valid against that status's schema, so the document
says what the hub really sends. Bounded: a few examples per operation, so that the suite stays
quick. And the document is no looser than the hub: a request it calls valid is never refused as
invalid (400)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from ..helpers import admin_hub

ADMIN_TOKEN = "schemathesis-admin-token-0123456789"
OPEN = {"/health", "/ready"}
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
FUZZ = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
# The operations' bodies (nine types, each with its fields) would make schemathesis' coverage
# phase send over a thousand requests; for them the bounded fuzzing above is enough.
CONFIG = SchemathesisConfig.from_dict(
    {"operations": [{"include-path-regex": "^/kubernetes/ops", "phases": {"coverage": {"enabled": False}}}]}
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    # The fuzzing sends thousands of invalid tokens from one address: the throttle of failed logins
    # (429, its own test in test_hub_http_auth.py) is set out of its way.
    hub = admin_hub(
        tmp_path_factory.mktemp("schemathesis"),
        ADMIN_TOKEN,
        operations={"operationWaitMs": 500},
        auth={"failedLogins": {"limit": 1_000_000}},
    )
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def api_schema(hub):
    return schemathesis.openapi.from_url(hub.url + "/openapi.json", config=CONFIG)


# Valid requests, for which any answer but a 400 (or 415, 422) is fine: there are no accounts or
# agents behind this hub (404), nor names taken (409), nor databases failing (503).
VALID_ONLY = SchemathesisConfig.from_dict(
    {
        "generation": {"mode": "positive"},
        "checks": {"positive_data_acceptance": {"expected-statuses": ["2XX", "403", "404", "409", "503"]}},
        "phases": {"coverage": {"enabled": False}},
    }
)


@pytest.fixture(scope="module")
def valid_requests(hub):
    return schemathesis.openapi.from_url(hub.url + "/openapi.json", config=VALID_ONLY)


# Account definitions have rules across fields (`context` only with a `kubeconfigFile`, a name
# once per request) and rules of the hub's configuration (plain kubeconfig paths): their bodies
# are described field by field, and what the fields cannot say is in the words of the 400.
described_valid = (
    schemathesis.pytest.from_fixture("valid_requests")
    .exclude(path="/api/v1/watch")
    .exclude(path_regex="^/(armory/accounts|credentials)", method=["POST", "PUT", "PATCH"])
)


schema = schemathesis.pytest.from_fixture("api_schema")
# With a login the watch streams for as long as the client reads: it is left out here (its
# filtering by permission has its own tests, test_hub_http_auth.py).
logged_in = schemathesis.pytest.from_fixture("api_schema").exclude(path="/api/v1/watch")


@schema.parametrize()
@FUZZ
def test_without_credentials_every_answer_is_401(case, hub):
    response = case.call()
    if case.path in OPEN:  # the probes answer anyone (negative examples may use other methods)
        assert response.status_code < 500
        case.validate_response(response, checks=CONFORMANCE)
        return
    assert response.status_code == 401, (case.method, case.formatted_path, response.status_code, response.text[:300])
    assert set(response.json()) == {"error", "status"}
    case.validate_response(response, checks=CONFORMANCE)  # the 401 is documented, in its shape


@logged_in.parametrize()
@FUZZ
def test_with_an_admin_token_no_request_is_a_server_error_and_every_answer_is_documented(case, hub):
    response = case.call(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code < 500, (
        case.method,
        case.formatted_path,
        response.status_code,
        response.text[:500],
    )
    case.validate_response(response, checks=[not_a_server_error, *CONFORMANCE])


@described_valid.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_a_request_the_document_calls_valid_is_never_refused_as_invalid(case, hub):
    """What the document allows (types, patterns, enums, bounds, required fields) the hub takes:
    a client built from the document is not refused for following it."""
    response = case.call(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    case.validate_response(response, checks=[positive_data_acceptance])

"""Armory's plugin REST surface on a real hub process, with a real agent and kubesim: every
endpoint of Armory's swagger (tests/fixtures/armory-plugin-swagger.json, copied from armory/docs
`static/reference/scale-agent/swagger.0.13.20.json`) that the hub serves answers what the swagger's
schema says, and does what Armory's docs say: a dynamic account defined with Armory's body is
created and migrated; an operation's hops are recorded as it goes from the hub to the agent and
back; a disconnected agent loses its session and comes back by itself.

One hub, one agent and one dynamic account for the whole module (they take seconds to start);
the tests run in file order, the disconnect last."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs  # schemathesis' validator, installed with it
import pytest

from ..helpers import AgentProcess, HubProcess, dynamic_hub_and_agent

SWAGGER = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "armory-plugin-swagger.json").read_text())
ACCOUNT = "armory-dyn"


def swagger_check(instance: Any, schema: dict[str, Any]) -> None:
    """`instance` against a schema of the swagger (its `#/definitions/...` references resolved)."""
    jsonschema_rs.Draft4Validator({**schema, "definitions": SWAGGER["definitions"]}).validate(instance)


def answer_schema(path: str, method: str, status: str = "200") -> dict[str, Any]:
    """The swagger's schema of the answer of `method path` with `status`."""
    return SWAGGER["paths"][path][method]["responses"][status]["schema"]


def call(hub: HubProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return hub.call(method, path, body)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, kubesim: Any) -> Iterator[tuple[HubProcess, AgentProcess, Any]]:
    directory = tmp_path_factory.mktemp("armory-api")
    hub, agent = dynamic_hub_and_agent(directory, f"sqlite:///{directory / 'hub.db'}", retry_seconds=3600)
    try:
        yield hub, agent, kubesim
    finally:
        agent.stop()
        hub.stop()


def test_the_fixture_is_armorys_swagger() -> None:
    assert SWAGGER["swagger"] == "2.0" and len(SWAGGER["paths"]) == 16
    assert "/armory/agent/{agentId}/disconnect" in SWAGGER["paths"]


def test_an_account_defined_with_armorys_body_is_created_then_migrated(stack) -> None:
    hub, _, kubesim = stack
    definition = {
        "name": ACCOUNT,
        "type": "kubernetes",
        "kubeConfigFile": str(kubesim.admin(0)),  # the spelling of Armory's CSV
        "metrics": False,  # an Armory agent setting the hub accepts and does not use
        "kinds": ["Namespace", "ConfigMap"],
    }
    status, created = call(hub, "POST", "/armory/accounts/dynamic", definition)
    assert status == 201, created
    swagger_check(created, answer_schema("/armory/accounts/dynamic", "post"))
    assert [(a["name"], a["state"], a["kubeconfigFile"]) for a in created] == [
        (ACCOUNT, "INACTIVE", str(kubesim.admin(0)))
    ]
    # The same name again is a conflict, and nothing changes.
    assert call(hub, "POST", "/armory/accounts/dynamic", definition)[0] == 409
    status, patched = call(hub, "PATCH", "/armory/accounts", [{"name": ACCOUNT, "state": "ACTIVE"}])
    assert status == 202, patched
    hub.wait_until(f"/armory/accounts/{ACCOUNT}", lambda a: a["state"] == "ACTIVE", what="the account ACTIVE")
    hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda a: a["agentState"] == "watching", what="the account watched")


def test_put_replaces_the_definition_or_creates_the_account(stack) -> None:
    hub, _, kubesim = stack
    status, changed = call(
        hub, "PUT", "/armory/accounts/dynamic", {"name": ACCOUNT, "kubeconfigFile": str(kubesim.admin(0))}
    )
    assert status == 200, changed
    swagger_check(changed, answer_schema("/armory/accounts/dynamic", "put"))
    # A full definition: the kinds left out are cleared, and the ACTIVE account is sent again.
    assert (changed["name"], changed["state"], "kinds" in changed) == (ACCOUNT, "TO_MIGRATE", False)
    hub.wait_until(f"/armory/accounts/{ACCOUNT}", lambda a: a["state"] == "ACTIVE", what="the account ACTIVE again")
    reference = "encryptedFile:k8s!n:kubeconfig-t!k:config!ns:spinnaker"  # Armory's example
    status, created = call(
        hub, "PUT", "/armory/accounts/dynamic", {"name": "armory-put", "kubeconfigContents": reference}
    )
    assert (status, created["state"], created["kubeconfigFile"]) == (201, "INACTIVE", reference)


def test_crds_in_armorys_kind_and_scope_form_are_taken(stack) -> None:
    hub = stack[0]
    body = {"name": "armory-crds", "customResourceDefinitions": [{"kind": "Widget.example.com", "scope": "Cluster"}]}
    status, created = call(hub, "POST", "/armory/accounts/dynamic", body)
    assert status == 201, created
    assert call(hub, "GET", "/armory/accounts/armory-crds")[1]["customResourceDefinitions"] == ["Widget.example.com"]


@pytest.mark.parametrize(
    ("method", "body", "message"),
    [
        ("POST", {"name": "x1", "type": "aws"}, "type: only 'kubernetes' accounts are served"),
        ("POST", {"name": "x1", "kubeconfigContents": "apiVersion: v1"}, "kubeconfigContents: expected a Kubernetes"),
        ("POST", {"name": "x1", "serviceAccount": "yes"}, "serviceAccount: expected true or false"),
        ("POST", {"name": "x1", "serviceAccount": False}, "serviceAccount: false needs kubeconfigFile"),
        ("POST", {"name": "x1", "kinds": "Deployment"}, "kinds: expected a list"),
        ("POST", {"name": "x1", "colour": "blue"}, "colour: unknown field"),
        (
            "POST",
            {"name": "x1", "customResourceDefinitions": [{"kind": "Widget.example.com", "scope": "Galaxy"}]},
            "expected Cluster or Namespaced",
        ),
        ("PUT", [{"name": "x1"}], "PUT takes one account definition"),
        ("PUT", {"zoneId": "z"}, "name: required"),
    ],
)
def test_invalid_definitions_are_refused_naming_the_problem(stack, method, body, message) -> None:
    hub = stack[0]
    status, answer = call(hub, method, "/armory/accounts/dynamic", body)
    assert (status, answer["status"]) == (400, 400), answer
    assert message in answer["error"], answer
    assert call(hub, "GET", "/armory/accounts/x1")[0] == 404  # nothing stored


def test_agents_answer_armorys_agent_response_with_the_hubs_own_fields(stack) -> None:
    hub = stack[0]
    agents = hub.wait_until("/armory/agents", lambda d: d and ACCOUNT in d[0]["accounts"], what="the agent")
    swagger_check(agents, answer_schema("/armory/agents", "get"))
    (agent,) = agents
    assert (agent["type"], agent["caching"], agent["clouddriverId"]) == ("kubernetes", True, agent["replica"])
    assert agent["lastConnection"] == agent["connectedAt"]
    # What the dashboard and `scale-agent agents` read is still there.
    for key in ("sessionId", "zoneId", "agentVersion", "peer", "rejectedAccounts", "events", "operationsStream"):
        assert key in agent
    status, one = call(hub, "GET", f"/armory/agents/{agent['agentId']}")
    assert status == 200
    swagger_check(one, answer_schema("/armory/agents/{agentId}", "get"))
    assert one["sessionId"] == agent["sessionId"]
    assert call(hub, "GET", "/armory/agents/no-such-agent")[0] == 404
    assert call(hub, "GET", "/armory/agents/bindings") == (200, [])  # still the bindings


def test_one_replica_as_clouddriver_instance(stack) -> None:
    hub = stack[0]
    status, replicas = call(hub, "GET", "/armory/clouddrivers")
    assert status == 200
    swagger_check(replicas, answer_schema("/armory/clouddrivers", "get"))
    status, one = call(hub, "GET", f"/armory/clouddrivers/{replicas[0]['id']}")
    assert (status, one) == (200, replicas[0])
    swagger_check(one, answer_schema("/armory/clouddrivers/{clouddriverId}", "get"))
    assert call(hub, "GET", "/armory/clouddrivers/no-such-replica")[0] == 404


def test_the_namespaces_of_an_account(stack) -> None:
    hub = stack[0]
    status, names = call(hub, "GET", f"/agents/kubernetes/accounts/{ACCOUNT}/namespaces")
    assert status == 200
    swagger_check(names, answer_schema("/agents/kubernetes/accounts/{accountName}/namespaces", "get"))
    assert "default" in names and names == sorted(names)
    status, answer = call(hub, "GET", "/agents/kubernetes/accounts/nowhere/namespaces")
    assert status == 404 and "nowhere" in answer["error"]


def test_credentials_list_the_accounts_agents_serve(stack) -> None:
    hub = stack[0]
    listed = {a["name"]: a for a in call(hub, "GET", "/credentials")[1]}
    assert listed[ACCOUNT]["type"] == "kubernetes"
    assert "armory-put" not in listed  # INACTIVE: no agent is asked to follow it
    expanded = {a["name"]: a for a in call(hub, "GET", "/credentials?expand=true")[1]}
    # `api`: created through the API, not named in an agent's own file (`agent`).
    assert (expanded[ACCOUNT]["source"], expanded[ACCOUNT]["state"]) == ("api", "ACTIVE")
    assert "kubeconfigFile" not in expanded[ACCOUNT]


def test_the_operation_history_records_each_hop_of_a_real_operation(stack) -> None:
    hub = stack[0]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "history", "namespace": "default"}}
    task = hub.run_task([{"deployManifest": {"account": ACCOUNT, "manifests": [cm]}}])
    assert task["state"] == "completed", task
    status, records = call(hub, "GET", "/armory/agent/operations?items=10&page=1")
    assert status == 200
    swagger_check(records, answer_schema("/armory/agent/operations", "get"))
    op_id = f"{task['id']}-0"
    (record,) = [r for r in records if r["operationId"] == op_id]
    assert (record["account"], record["operationType"], record["finalOutcome"]) == (
        ACCOUNT,
        "deployManifest",
        "succeeded",
    )
    replica = record["opReceivedByClouddriver"]["clouddriverId"]
    agent = record["opSentToAgent"]["agentId"]
    assert record["resultReceivedFromAgent"]["agentId"] == agent
    assert record["resultReceivedFromAgent"]["result"]["status"] == 200
    assert record["opProcessedByClouddriver"]["clouddriverId"] == replica
    hops = [
        record["opReceivedByClouddriver"]["time"],
        record["opSentToAgent"]["time"],
        record["resultReceivedFromAgent"]["time"],
        record["opProcessedByClouddriver"]["time"],
    ]
    assert hops == sorted(hops)  # RFC 3339 UTC with milliseconds: in order as strings
    status, one = call(hub, "GET", f"/armory/agent/operations/{op_id}")
    assert (status, one) == (200, record)
    swagger_check(one, answer_schema("/armory/agent/operations/{opId}", "get"))
    assert call(hub, "GET", "/armory/agent/operations?items=10&page=1000")[1] == []
    assert call(hub, "GET", "/armory/agent/operations/no-such-op")[0] == 404
    status, answer = call(hub, "GET", "/armory/agent/operations?items=0")
    assert status == 400 and "items" in answer["error"]


def test_disconnect_checks_its_body(stack) -> None:
    hub = stack[0]
    status, answer = call(hub, "POST", "/armory/agent/whoever/disconnect", {"origin": 5, "colour": "x"})
    assert status == 400
    assert "origin: expected a string" in answer["error"] and "'colour': unknown field" in answer["error"]
    assert call(hub, "POST", "/armory/agent/nobody/disconnect", {})[0] == 404


def test_disconnect_ends_the_session_and_the_agent_reconnects(stack) -> None:
    hub = stack[0]
    (before,) = call(hub, "GET", "/armory/agents")[1]
    status, answer = call(
        hub, "POST", f"/armory/agent/{before['agentId']}/disconnect", {"origin": "test", "clusterDriven": False}
    )
    assert status == 200, answer
    assert answer["sessions"] == [{"sessionId": before["sessionId"], "replica": before["replica"]}]
    hub.wait_log(rf"ended the session of agent {before['agentId']}.*disconnect", what="the session ended")
    after = hub.wait_until(
        "/armory/agents",
        lambda d: len(d) == 1 and d[0]["sessionId"] != before["sessionId"] and ACCOUNT in d[0]["accounts"],
        what="the agent back with a new session",
    )
    assert after[0]["agentId"] == before["agentId"]
    hub.wait_until(f"/api/v1/accounts/{ACCOUNT}", lambda a: a["state"] == "ACTIVE", what="the account served again")
